/* multi.c -- the PostgreSQL store's deduction over several segments: one statement,
 * all or nothing (store.h deduct_multi). */
#include "segments/postgres/fence.h"
#include "segments/postgres/handle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

static void multi_done(struct call *k, int rc, int code, const long long *stocks)
{
    /* The parts' locks go whatever the deduction answered, as a Redis script's do
     * (the engine takes them as given back): a lease the statement did not release
     * (nothing deducted) is released here, by its owner's token. */
    for (int j = 0;
         k->scheme == SCHEME_LEASE && (rc != 0 || code != STORE_OK) && j < k->n; j++)
        pgs_lease_release(k->s->plain, k->sku, (int)k->part[k->n + j], k->tok[j], NULL,
                          NULL);
    struct store_reply r = {.code = code};
    if (code == STORE_EXISTS)
        r.record = k->record, k->record = NULL;
    k->fn.multi(k->arg, rc, rc == 0 ? &r : NULL, stocks);
    free(r.record);
    pgb_call_free(k);
}

/* Why a multi deduction wrote nothing: the id recorded (EXISTS), the SKU reset
 * (STALE), a part short (SHORT with the stocks), else a lock not ours (FENCED). */
static void on_multi_why(void *arg, int rc, PGresult *const *res, int n)
{
    struct call *k = arg;
    if (!pgb_results_ok(rc, res, n)) {
        multi_done(k, -1, 0, NULL);
        return;
    }
    const PGresult *r = res[0];
    long long *stocks = seg_calloc((size_t)k->n, sizeof *stocks);
    bool short_ = false, fenced = false, stale = PQntuples(r) != k->n;
    for (int j = 0; j < PQntuples(r) && j < k->n; j++) {
        stocks[j] = pgb_cell(r, j, 1);
        short_ |= stocks[j] < k->part[j];
        fenced |= strcmp(PQgetvalue(r, j, 2), "t") != 0;
        stale |= pgb_cell(r, j, 3) != k->epoch;
        if (!PQgetisnull(r, j, 4) && k->record == NULL)
            k->record = seg_strdup(PQgetvalue(r, j, 4));
    }
    int code = k->record != NULL ? STORE_EXISTS
               : stale           ? STORE_STALE
               : short_          ? STORE_SHORT
                                 : STORE_FENCED;
    (void)fenced;
    multi_done(k, 0, code, stocks);
    free(stocks);
}

/* A text[] literal: {"a","b"}. */
static char *array_text(char *const *v, int n)
{
    size_t cap = 3, len = 0;
    for (int j = 0; j < n; j++)
        cap += strlen(v[j]) + 3;
    char *a = seg_malloc(cap);
    a[len++] = '{';
    for (int j = 0; j < n; j++)
        len += (size_t)snprintf(a + len, cap - len, "%s\"%s\"", j ? "," : "", v[j]);
    snprintf(a + len, cap - len, "}");
    return a;
}

static void on_multi(void *arg, int rc, PGresult *const *res, int n)
{
    struct call *k = arg;
    if (rc != 0 || n != 1) {
        multi_done(k, -1, 0, NULL);
        return;
    }
    const PGresult *r = res[0];
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_TUPLES_OK && PQntuples(r) == k->n) {
        long long *stocks = seg_calloc((size_t)k->n, sizeof *stocks);
        for (int j = 0; j < k->n; j++)
            stocks[j] = pgb_cell(r, j, 1);
        if (k->scheme == SCHEME_OPT)
            for (int j = 0; j < k->n; j++)
                free(pgb_held_find(k->s, k->tok[j], true));
        multi_done(k, 0, STORE_OK, stocks);
        free(stocks);
        return;
    }
    int code = st == PGRES_TUPLES_OK ? 0 : pgs_code_of_error(r);
    if (st != PGRES_TUPLES_OK && code < 0) {
        /* 22012: the all-or-nothing check (one part not deducted); anything else
         * is the store's failure */
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        if (state == NULL || strcmp(state, "22012") != 0) {
            multi_done(k, -1, 0, NULL);
            return;
        }
    }
    if (code == PGS_BUSY) {
        multi_done(k, 0, STORE_FENCED, NULL);
        return;
    }
    int *seg = seg_calloc((size_t)k->n, sizeof *seg);
    for (int j = 0; j < k->n; j++)
        seg[j] = (int)k->part[k->n + j];
    char *segs = pgb_array_ll(NULL, seg, k->n);
    char *toks = array_text(k->tok, k->n);
    free(seg);
    const char *p[] = {k->sku, segs, toks, k->id};
    const struct pgc_stmt q = {
        "SELECT s.seg, s.stock, coalesce(p.tok = '' OR (s.lease_token = p.tok AND"
        " s.lease_until > now()), false), (SELECT epoch FROM skus WHERE sku = $1),"
        " (SELECT record FROM orders WHERE order_id = $4) FROM segments s JOIN"
        " unnest($2::int[], $3::text[]) AS p(seg, tok) ON s.seg = p.seg"
        " WHERE s.sku = $1 ORDER BY s.seg",
        4, p};
    pgc_call(k->s->plain, 0, PGC_PREPARE, &q, 1, on_multi_why, k);
    free(segs);
    free(toks);
}

/* The deduction of parts p(seg, q, tok) ($2..$4) of SKU $1 at epoch $8, all $6 or
 * none, the order $5 (record $7) written when all were: `lock` a CTE the parts'
 * rows are taken by, `set` more columns the UPDATE sets, `cond` more conditions a
 * part's row must meet. Its rows: each part's segment and stock left; a division
 * by zero (the transaction fails) when not every part was taken. */
#define MULTI_SQL(lock, set, cond)                                                       \
    "WITH p AS (SELECT * FROM unnest($2::int[], $3::bigint[], $4::text[])"               \
    " AS p(seg, q, tok))," lock                                                          \
    " d AS (UPDATE segments s SET stock = s.stock - p.q, version = s.version + 1" set    \
    " FROM p WHERE s.sku = $1 AND s.seg = p.seg AND s.stock >= p.q" cond                 \
    " AND (SELECT epoch FROM skus WHERE sku = $1) = $8::bigint RETURNING s.seg, "        \
    "s.stock),"                                                                          \
    " o AS (INSERT INTO orders (order_id, sku, seg, qty, record) SELECT $5, $1,"         \
    " (SELECT min(seg) FROM p), (SELECT sum(q) FROM p), $7"                              \
    " WHERE (SELECT count(*) FROM d) = $6::int RETURNING 1)"                             \
    " SELECT seg, stock, 1 / CASE WHEN (SELECT count(*) FROM d) = $6::int"               \
    " THEN 1 ELSE 0 END FROM d ORDER BY seg"

/* One statement, all or nothing: every part's conditional UPDATE (by the SKU's scheme:
 * row locks taken NOWAIT first; lease: each part's lease ours, released with it;
 * optimistic and atomic: the stock checked and the version bumped in the statement),
 * the order row when every part was deducted, and a division by zero that undoes the
 * statement when one was not. */
void pgb_deduct_multi(store *st, const char *sku, long long epoch, const char *id,
                      const char *record, const char *attempt,
                      const struct store_parts *p, store_multi_fn fn, void *arg)
{
    (void)attempt;
    struct pg_store *s = (struct pg_store *)st;
    if (p->fence != NULL) { /* a lock service's holds: their fences checked */
        pgf_deduct_multi(s, sku, epoch, id, record, p, fn, arg);
        return;
    }
    struct call *k = pgb_call_new(s, arg, sku);
    k->fn.multi = fn;
    k->n = p->n;
    k->epoch = epoch;
    snprintf(k->id, sizeof k->id, "%s", id);
    /* part[0..n-1] the parts, part[n..2n-1] their segments */
    k->part = seg_calloc((size_t)p->n * 2, sizeof *k->part);
    k->tok = seg_calloc((size_t)p->n, sizeof *k->tok);
    for (int j = 0; j < p->n; j++) {
        k->part[j] = p->part[j];
        k->part[p->n + j] = p->seg[j];
        k->tok[j] = seg_strdup(p->tok != NULL ? p->tok[j] : "");
    }
    bool atomic = p->tok == NULL || p->tok[0][0] == '\0';
    k->scheme = atomic ? SCHEME_OPT : pgb_scheme_of(s, sku);
    char *segs = pgb_array_ll(NULL, p->seg, p->n);
    char *parts = pgb_array_ll(p->part, NULL, p->n);
    char *toks = array_text(k->tok, p->n);
    char n[16], ep[24];
    snprintf(n, sizeof n, "%d", p->n);
    snprintf(ep, sizeof ep, "%lld", epoch);
    const char *q[] = {sku, segs, parts, toks, id, n, record, ep};
    static const char row[] = MULTI_SQL(
        " l AS MATERIALIZED (SELECT s.seg FROM segments s WHERE s.sku = $1 AND s.seg IN"
        " (SELECT seg FROM p) ORDER BY s.seg FOR UPDATE NOWAIT),",
        "", " AND (SELECT count(*) FROM l) = $6::int");
    static const char lease[] =
        MULTI_SQL("", ", lease_token = NULL, lease_until = NULL",
                  " AND s.lease_token = p.tok AND s.lease_until > now()");
    static const char plain[] = MULTI_SQL("", "", "");
    const struct pgc_stmt stmt = {k->scheme == SCHEME_ROW     ? row
                                  : k->scheme == SCHEME_LEASE ? lease
                                                              : plain,
                                  8, q};
    pgc_call(s->plain, 0, PGC_PREPARE, &stmt, 1, on_multi, k);
    free(segs);
    free(parts);
    free(toks);
}
