/* spread.c -- the PostgreSQL store's adjust on the loop (store.h): the automatic
 * rebalance ("spread") and an even-out ("rebalance") of a SKU's segments in one
 * transaction. */
#include "segments/postgres/handle.h"
#include "segments/postgres/spread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

/* The rule itself (see spread.h). (sum() of bigint is numeric: cast back, or the
 * shares' division would round, inventing units.) */
const char pgsp_sql[] =
    "WITH p AS (SELECT (i - 1)::int AS seg, tok FROM unnest($2::text[])"
    " WITH ORDINALITY AS p(tok, i)),"
    " l AS MATERIALIZED (SELECT s.seg, s.stock, coalesce(s.lease_token = p.tok AND"
    " s.lease_until > now(), false) AS ours, coalesce(($7::bigint[])[p.seg + 1] <= 0"
    " OR ($7::bigint[])[p.seg + 1] >= s.svc_fence, true) AS fok FROM segments s"
    " JOIN p ON p.seg = s.seg WHERE s.sku = $1 ORDER BY s.seg FOR UPDATE OF s),"
    " t AS (SELECT coalesce(sum(stock), 0)::bigint AS total, count(*)"
    " FILTER (WHERE stock > 0) AS had, count(*) AS n, coalesce(bool_and(ours), false) AS "
    "ours, coalesce(bool_and(fok), true) AS fok FROM l),"
    " k AS (SELECT epoch, segments FROM skus WHERE sku = $1),"
    " g AS (SELECT t.total, t.n FROM t, k WHERE k.epoch = $3::bigint AND"
    " k.segments = $4::int AND t.n = $4::int AND (NOT $5::bool OR t.ours) AND t.fok AND"
    " (NOT $6::bool OR least(t.total, t.n) > t.had)),"
    " u AS (UPDATE segments s SET stock = CASE WHEN g.n IS NULL THEN s.stock ELSE"
    " g.total / g.n + CASE WHEN s.seg < g.total % g.n THEN 1 ELSE 0 END END,"
    " version = s.version + CASE WHEN g.n IS NULL THEN 0 ELSE 1 END,"
    " lease_token = CASE WHEN s.lease_token = p.tok THEN NULL ELSE s.lease_token"
    " END, lease_until = CASE WHEN s.lease_token = p.tok THEN NULL ELSE"
    " s.lease_until END FROM p LEFT JOIN g ON true WHERE s.sku = $1 AND"
    " s.seg = p.seg RETURNING 1),"
    " v AS (UPDATE skus SET gen = gen + 1 WHERE sku = $1 AND EXISTS (SELECT 1 FROM"
    " g) RETURNING gen)"
    " SELECT (SELECT gen FROM v), (SELECT epoch FROM k), (SELECT segments FROM k),"
    " t.n, t.ours, (SELECT count(*) FROM u), t.fok FROM t";

char *pgsp_tokens(const char *const *tok, int n)
{
    size_t cap = 3;
    for (int i = 0; i < n; i++)
        cap += (tok != NULL ? strlen(tok[i]) : 0) + 3;
    char *toks = seg_malloc(cap);
    size_t len = 0;
    toks[len++] = '{';
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(toks + len, cap - len, "%s\"%s\"", i ? "," : "",
                                tok != NULL ? tok[i] : "");
    snprintf(toks + len, cap - len, "}");
    return toks;
}

static void done(struct call *k, int rc, int code, long long value)
{
    struct store_reply r = {.code = code, .value = value};
    k->fn.reply(k->arg, rc, rc == 0 ? &r : NULL);
    pgb_call_free(k);
}

/* Results: SET, the SKU's row, the spread's one row, COMMIT. The spread's row: the
 * new gen (NULL: nothing written), the SKU's epoch and segment count, the segments
 * found, whether every lease was the caller's, the rows updated, and whether every
 * fence given was no lower than its segment's highest. */
static void on_spread(void *arg, int rc, PGresult *const *res, int n)
{
    struct call *k = arg;
    if (rc == 0 && n == 4 && PQresultStatus(res[2]) == PGRES_FATAL_ERROR &&
        pgs_code_of_error(res[2]) == PGS_BUSY) {
        /* lock_timeout: a `row` holder kept a segment past it; nothing written */
        done(k, 0, STORE_FENCED, 0);
        return;
    }
    if (!pgb_results_ok(rc, res, n) || n != 4 || PQntuples(res[2]) != 1 ||
        strcmp(PQcmdStatus(res[3]), "COMMIT") != 0) {
        done(k, -1, 0, 0);
        return;
    }
    const PGresult *r = res[2];
    bool stale = PQgetisnull(r, 0, 1) || pgb_cell(r, 0, 1) != k->epoch ||
                 pgb_cell(r, 0, 2) != k->n || pgb_cell(r, 0, 3) != k->n;
    if (stale)
        done(k, 0, STORE_STALE, 0);
    else if (k->scheme == SCHEME_LEASE && strcmp(PQgetvalue(r, 0, 4), "t") != 0)
        done(k, 0, STORE_FENCED, 0);
    else if (strcmp(PQgetvalue(r, 0, 6), "t") != 0) /* a lock service's hold lost */
        done(k, 0, STORE_FENCED, 0);
    else
        done(k, 0, STORE_OK, PQgetisnull(r, 0, 0) ? 0 : pgb_cell(r, 0, 0));
}

/* store_ops.adjust for "spread" (even the stock out only when that leaves more
 * segments with stock) and "rebalance" (even it out); any other op answers -1 (the
 * loops ask for spread alone; backend.c sends an admin's, without tokens, to
 * adjust.c).
 *
 * One transaction on a pool connection (it may wait for row locks): the SKU's row
 * locked against admin writes (FOR NO KEY UPDATE, before the segments, as they take
 * them), then the rule's one statement (spread.h), which locks every segment row in index
 * order (waiting at most lock_timeout = ttl/4 for a `row` holder: FENCED past it), reads
 * their stock as locked (so an optimistic or atomic deduction committed meanwhile is
 * counted), writes the new stocks with version + 1 (an optimistic deduction that read
 * before loses) and bumps the SKU's gen: all when the epoch and segment count are the
 * caller's and, on `lease`, every segment's lease is the caller's token (else
 * FENCED, nothing written) and, under a lock service's holds (`fence` given, tok
 * all ""), every fence no lower than its segment's highest (svc_fence, fence.h:
 * FENCED, nothing written; -1 unchecked); whatever it answers, the leases of the
 * caller's tokens are given back, as a Redis ADJUST releases its tokens' locks. (sum() of
 * bigint is numeric: cast back, or the shares' division would round, inventing units.)
 * OK's value is the new gen, 0 when a spread had nothing to do. */
void pgb_adjust(store *st, const char *sku, long long epoch, int segments,
                const char *const *tok, const long long *fence, const char *op,
                long long add, long long limit, const char *rid, const char *sig,
                store_reply_fn fn, void *arg)
{
    (void)add, (void)limit, (void)rid, (void)sig;
    struct pg_store *s = (struct pg_store *)st;
    struct call *k = pgb_call_new(s, arg, sku);
    k->fn.reply = fn;
    k->epoch = epoch;
    k->n = segments;
    k->scheme = pgb_scheme_of(s, sku);
    bool spread = strcmp(op, "spread") == 0;
    if ((!spread && strcmp(op, "rebalance") != 0) || segments < 1) {
        done(k, -1, 0, 0);
        return;
    }
    char *toks = pgsp_tokens(tok, segments);
    char *fences = fence != NULL ? pgb_array_ll(fence, NULL, segments) : NULL;
    char set[64], ep[24], ns[16];
    snprintf(set, sizeof set, "SET LOCAL lock_timeout = %d",
             s->ttl_ms / 4 > 0 ? s->ttl_ms / 4 : 1);
    snprintf(ep, sizeof ep, "%lld", epoch);
    snprintf(ns, sizeof ns, "%d", segments);
    const char *lease = k->scheme == SCHEME_LEASE ? "true" : "false";
    const char *p1[] = {sku};
    const char *p[] = {sku, toks, ep, ns, lease, spread ? "true" : "false", fences};
    const struct pgc_stmt q[] = {
        {set, 0, NULL},
        {"SELECT 1 FROM skus WHERE sku = $1 FOR NO KEY UPDATE", 1, p1},
        {pgsp_sql, PGSP_NPARAMS, p},
        {"COMMIT", 0, NULL},
    };
    pgc_call(pgp_pick(s->pool), 0, PGC_BEGIN | PGC_END, q, 4, on_spread, k);
    free(toks);
    free(fences);
}
