/* cancel.c -- the PostgreSQL store's cancel of an order on the loop (store.h cancel):
 * one transaction. */
#include "segments/postgres/handle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

/* Results: the order's row (locked), the SKU's row in the epoch (locked), the
 * cancel's one row, the leases given back, COMMIT. */
static void on_cancel(void *arg, int rc, PGresult *const *res, int n)
{
    struct call *k = arg;
    struct store_reply r = {0};
    if (!pgb_results_ok(rc, res, n) || n != 5 || PQntuples(res[2]) != 1 ||
        strcmp(PQcmdStatus(res[4]), "COMMIT") != 0) {
        k->fn.reply(k->arg, -1, NULL);
        pgb_call_free(k);
        return;
    }
    const PGresult *o = res[0];
    if (PQntuples(o) == 0) {
        r.code = STORE_MISSING;
    } else if (strcmp(PQgetvalue(o, 0, 0), k->record) != 0 ||
               strcmp(PQgetvalue(o, 0, 1), k->sku) != 0) {
        const char *now = PQgetvalue(o, 0, 0);
        bool done = strstr(now, "\"status\":\"cancelled\"") != NULL;
        r.code = done ? STORE_EXISTS : STORE_STALE;
        if (done)
            r.record = seg_strdup(now);
    } else {
        r.code = PQntuples(res[1]) == 1 && pgb_cell(res[2], 0, 0) == 1 ? STORE_OK
                                                                       : STORE_STALE;
    }
    k->fn.reply(k->arg, 0, &r);
    free(r.record);
    pgb_call_free(k);
}

/* "{1,2}" of v[0..n-1], or of the tokens tok[0..n-1] (hex or "": no quoting needed). */
static char *array_of(const int *v, const char *const *tok, int n)
{
    size_t cap = 3;
    for (int j = 0; j < n; j++)
        cap += tok != NULL ? strlen(tok[j] != NULL ? tok[j] : "") + 3 : 24;
    char *a = seg_malloc(cap);
    size_t len = 0;
    a[len++] = '{';
    for (int j = 0; j < n; j++) {
        if (tok != NULL)
            len += (size_t)snprintf(a + len, cap - len, "%s\"%s\"", j ? "," : "",
                                    tok[j] != NULL ? tok[j] : "");
        else
            len += (size_t)snprintf(a + len, cap - len, "%s%d", j ? "," : "", v[j]);
    }
    snprintf(a + len, cap - len, "}");
    return a;
}

/* store_ops.cancel. One transaction on a pool connection (it may wait for row locks):
 * the order's row locked, then the SKU's row in `epoch`, then one statement that,
 * when the record is still `expected` and of `placed` and the SKU in `epoch`, gives
 * each part's units back to its segment (version + 1), marks the record `cancelled`
 * and bumps the SKU's gen; then, whatever it answered, the segment leases of the
 * caller's tokens given back, as a Redis CANCEL releases its tokens' locks. A record
 * that is not `expected` answers EXISTS when it is cancelled (that record), else
 * STALE. A COMMIT answered is durable: wait_ms has nothing to wait for. */
void pgb_cancel(store *st, const char *placed, long long epoch, const char *id,
                const char *cancelled, const char *expected, const struct store_parts *p,
                int wait_ms, store_reply_fn fn, void *arg)
{
    (void)wait_ms;
    struct pg_store *s = (struct pg_store *)st;
    struct call *k = pgb_call_new(s, arg, placed);
    k->fn.reply = fn;
    k->record = seg_strdup(expected);
    long long *part = seg_malloc(sizeof *part * (size_t)p->n);
    memcpy(part, p->part, sizeof *part * (size_t)p->n);
    char *segs = array_of(p->seg, NULL, p->n);
    size_t cap = (size_t)p->n * 24 + 3, len = 0;
    char *parts = seg_malloc(cap);
    parts[len++] = '{';
    for (int j = 0; j < p->n; j++)
        len += (size_t)snprintf(parts + len, cap - len, "%s%lld", j ? "," : "", part[j]);
    snprintf(parts + len, cap - len, "}");
    free(part);
    char *toks = p->tok != NULL ? array_of(NULL, p->tok, p->n) : seg_strdup("{}");
    char ep[24];
    snprintf(ep, sizeof ep, "%lld", epoch);
    const char *q0[] = {id};
    const char *q1[] = {placed, ep};
    const char *q2[] = {id, expected, placed, ep, segs, parts, cancelled};
    const char *q3[] = {placed, segs, toks};
    const struct pgc_stmt q[] = {
        {"SELECT record, sku FROM orders WHERE order_id = $1 FOR UPDATE", 1, q0},
        {"SELECT 1 FROM skus WHERE sku = $1 AND epoch = $2::bigint FOR UPDATE", 2, q1},
        {"WITH go AS (SELECT 1 FROM orders o, skus k WHERE o.order_id = $1 AND"
         " o.record = $2 AND o.sku = $3 AND k.sku = $3 AND k.epoch = $4::bigint),"
         " p AS (SELECT seg, n FROM unnest($5::int[], $6::bigint[]) AS p(seg, n)),"
         " u AS (UPDATE segments s SET stock = s.stock + p.n, version = s.version + 1"
         " FROM p WHERE EXISTS (SELECT 1 FROM go) AND s.sku = $3 AND s.seg = p.seg"
         " RETURNING 1),"
         " r AS (UPDATE orders SET record = $7 WHERE order_id = $1 AND EXISTS (SELECT 1"
         " FROM go) RETURNING 1),"
         " g AS (UPDATE skus SET gen = gen + 1 WHERE sku = $3 AND EXISTS (SELECT 1 FROM"
         " go) RETURNING 1)"
         " SELECT (SELECT count(*) FROM go), (SELECT count(*) FROM u),"
         " (SELECT count(*) FROM r), (SELECT count(*) FROM g)",
         7, q2},
        {"UPDATE segments s SET lease_token = NULL, lease_until = NULL FROM"
         " unnest($2::int[], $3::text[]) AS p(seg, tok) WHERE s.sku = $1 AND"
         " s.seg = p.seg AND s.lease_token = p.tok",
         3, q3},
        {"COMMIT", 0, NULL},
    };
    pgc_call(pgp_pick(s->pool), 0, PGC_BEGIN | PGC_END, q, 5, on_cancel, k);
    free(segs);
    free(parts);
    free(toks);
}
