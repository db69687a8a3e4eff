/* fence.c -- a lock service's holds on the PostgreSQL store: HOLD and the fenced
 * deductions, each one call of a migration 6 function (fence.h). */
#include "segments/postgres/fence.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

const char *pgf_lock_service(const char *lock)
{
    static const char *const services[] = {"redlock", "memcached", "zookeeper"};
    for (size_t i = 0; i < sizeof services / sizeof services[0]; i++)
        if (strcmp(lock, services[i]) == 0)
            return services[i];
    return "";
}

/* The function's row (o_code, o_stock, [o_fence,] o_record) as the seam's reply. */
static void on_reply(void *arg, int rc, PGresult *const *res, int n)
{
    struct call *k = arg;
    if (!pgb_results_ok(rc, res, n) || PQntuples(res[0]) != 1 || PQnfields(res[0]) < 3) {
        k->fn.reply(k->arg, -1, NULL);
        pgb_call_free(k);
        return;
    }
    const PGresult *r = res[0];
    int last = PQnfields(r) - 1; /* o_record */
    struct store_reply out = {
        .code = (int)pgb_cell(r, 0, 0),
        .value = pgb_cell(r, 0, 1),
        .fence = PQnfields(r) == 4 ? pgb_cell(r, 0, 2) : 0,
    };
    if (out.code == STORE_EXISTS && !PQgetisnull(r, 0, last))
        out.record = seg_strdup(PQgetvalue(r, 0, last));
    k->fn.reply(k->arg, 0, &out);
    free(out.record);
    pgb_call_free(k);
}

void pgf_hold(store *st, const char *sku, long long epoch, int i, const char *id,
              long long qty, long long fence, store_reply_fn fn, void *arg)
{
    struct pg_store *s = (struct pg_store *)st;
    struct call *k = pgb_call_new(s, arg, sku);
    k->fn.reply = fn;
    char seg[16], ep[24], q[24], f[24];
    snprintf(seg, sizeof seg, "%d", i);
    snprintf(ep, sizeof ep, "%lld", epoch);
    snprintf(q, sizeof q, "%lld", qty);
    snprintf(f, sizeof f, "%lld", fence);
    const char *p[] = {sku, seg, ep, id, q, f};
    const struct pgc_stmt stmt = {
        "SELECT o_code, o_stock, o_fence, o_record FROM inv_svc_hold($1, $2::int,"
        " $3::bigint, $4, $5::bigint, $6::bigint)",
        6, p};
    pgc_call(s->plain, 0, PGC_PREPARE, &stmt, 1, on_reply, k);
}

void pgf_deduct(struct pg_store *s, const char *sku, long long epoch, int i,
                long long fence, const char *id, long long qty, const char *record,
                store_reply_fn fn, void *arg)
{
    struct call *k = pgb_call_new(s, arg, sku);
    k->fn.reply = fn;
    char seg[16], ep[24], q[24], f[24];
    snprintf(seg, sizeof seg, "%d", i);
    snprintf(ep, sizeof ep, "%lld", epoch);
    snprintf(q, sizeof q, "%lld", qty);
    snprintf(f, sizeof f, "%lld", fence);
    const char *p[] = {sku, seg, ep, f, id, q, record};
    const struct pgc_stmt stmt = {
        "SELECT o_code, o_stock, o_record FROM inv_svc_deduct($1, $2::int, $3::bigint,"
        " $4::bigint, $5, $6::bigint, $7)",
        7, p};
    pgc_call(s->plain, 0, PGC_PREPARE, &stmt, 1, on_reply, k);
}

/* o_code, o_stocks ({1,2,3}: one per part, in the parts' order), o_record. */
static void on_multi(void *arg, int rc, PGresult *const *res, int n)
{
    struct call *k = arg;
    if (!pgb_results_ok(rc, res, n) || PQntuples(res[0]) != 1) {
        k->fn.multi(k->arg, -1, NULL, NULL);
        pgb_call_free(k);
        return;
    }
    const PGresult *r = res[0];
    long long *stocks = seg_calloc((size_t)k->n + 1, sizeof *stocks);
    const char *a = PQgetvalue(r, 0, 1);
    for (int j = 0; j < k->n && *a != '\0'; j++) {
        while (*a == '{' || *a == ',')
            a++;
        char *end;
        stocks[j] = strtoll(a, &end, 10);
        a = end;
    }
    struct store_reply out = {.code = (int)pgb_cell(r, 0, 0)};
    if (out.code == STORE_EXISTS && !PQgetisnull(r, 0, 2))
        out.record = seg_strdup(PQgetvalue(r, 0, 2));
    k->fn.multi(k->arg, 0, &out, stocks);
    free(out.record);
    free(stocks);
    pgb_call_free(k);
}

void pgf_deduct_multi(struct pg_store *s, const char *sku, long long epoch,
                      const char *id, const char *record, const struct store_parts *p,
                      store_multi_fn fn, void *arg)
{
    struct call *k = pgb_call_new(s, arg, sku);
    k->fn.multi = fn;
    k->n = p->n;
    char *segs = pgb_array_ll(NULL, p->seg, p->n);
    char *parts = pgb_array_ll(p->part, NULL, p->n);
    char *fences = pgb_array_ll(p->fence, NULL, p->n);
    char ep[24];
    snprintf(ep, sizeof ep, "%lld", epoch);
    const char *q[] = {sku, segs, parts, fences, ep, id, record};
    const struct pgc_stmt stmt = {
        "SELECT o_code, o_stocks, o_record FROM inv_svc_deduct_multi($1, $2::int[],"
        " $3::bigint[], $4::bigint[], $5::bigint, $6, $7)",
        7, q};
    pgc_call(s->plain, 0, PGC_PREPARE, &stmt, 1, on_multi, k);
    free(segs);
    free(parts);
    free(fences);
}
