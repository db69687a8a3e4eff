/* holds.c -- reservations on PostgreSQL: the statements of holds_sql.c's functions,
 * their results, and the event loop's two calls (holds.h). */
#include "segments/postgres/holds.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/postgres/handle.h"

static const char *const actions[] = {
    [STORE_HOLD_CONFIRM] = "confirm",
    [STORE_HOLD_RELEASE] = "release",
    [STORE_HOLD_READ] = "read",
};

void pgh_place_stmt(struct pgh_stmt *q, const char *sku, const char *id, long long qty,
                    int ttl_ms, int start, const char *attempt)
{
    snprintf(q->num[0], sizeof q->num[0], "%lld", qty);
    snprintf(q->num[1], sizeof q->num[1], "%d", ttl_ms);
    snprintf(q->num[2], sizeof q->num[2], "%d", start < 0 ? 0 : start);
    q->p[0] = sku;
    q->p[1] = id;
    q->p[2] = q->num[0];
    q->p[3] = q->num[1];
    q->p[4] = q->num[2];
    q->p[5] = attempt != NULL ? attempt : "";
    q->st = (struct pgc_stmt){"SELECT * FROM inv_hold_place($1, $2, $3::bigint, $4::int,"
                              " $5::int, $6)",
                              6, q->p};
}

void pgh_step_stmt(struct pgh_stmt *q, const char *id, enum store_hold_action act,
                   const char *attempt)
{
    q->p[0] = id;
    q->p[1] = actions[act];
    q->p[2] = attempt != NULL ? attempt : "";
    q->st = (struct pgc_stmt){"SELECT * FROM inv_hold_step($1, $2, $3)", 3, q->p};
}

void pgh_sweep_stmt(struct pgh_stmt *q, int limit)
{
    snprintf(q->num[0], sizeof q->num[0], "%d", limit);
    q->p[0] = q->num[0];
    q->st = (struct pgc_stmt){"SELECT inv_holds_sweep($1::int)", 1, q->p};
}

static long long cell(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* Columns: code, state, qty, expires (ms), record, settled, sku, seg, epoch, stock,
 * replicated, parts ('' for one segment). */
int pgh_decode(const PGresult *r, struct store_reply *out, struct store_hold *h)
{
    memset(out, 0, sizeof *out);
    memset(h, 0, sizeof *h);
    if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 ||
        PQnfields(r) != 12 || PQgetisnull(r, 0, 0))
        return -1;
    out->code = (int)cell(r, 0, 0);
    out->value = cell(r, 0, 9);
    snprintf(h->state, sizeof h->state, "%s", PQgetvalue(r, 0, 1));
    h->qty = cell(r, 0, 2);
    h->expires_ms = cell(r, 0, 3);
    const char *rec = PQgetvalue(r, 0, 4);
    if (rec[0] != '\0')
        h->record = seg_strdup(rec);
    h->settled = (int)cell(r, 0, 5);
    snprintf(h->sku, sizeof h->sku, "%s", PQgetvalue(r, 0, 6));
    snprintf(h->placed, sizeof h->placed, "%s", h->sku); /* no salt on PostgreSQL */
    h->segment = (int)cell(r, 0, 7);
    h->epoch = cell(r, 0, 8);
    h->replicated = strcmp(PQgetvalue(r, 0, 10), "t") == 0;
    if (PQgetvalue(r, 0, 11)[0] != '\0')
        h->parts = seg_strdup(PQgetvalue(r, 0, 11));
    return 0;
}

int pgh_decode_sweep(const PGresult *r)
{
    if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        return -1;
    return (int)cell(r, 0, 0);
}

/* ---- on the event loop ------------------------------------------------------------ */

struct hold_call {
    store_hold_fn fn;
    void *arg;
};

static void on_hold(void *arg, int rc, PGresult *const *res, int n)
{
    struct hold_call *k = arg;
    struct store_reply r;
    struct store_hold h;
    if (rc != 0 || n != 1 || pgh_decode(res[0], &r, &h) != 0) {
        memset(&r, 0, sizeof r);
        memset(&h, 0, sizeof h);
        k->fn(k->arg, -1, &r, &h);
    } else {
        k->fn(k->arg, 0, &r, &h);
    }
    free(h.record);
    free(h.parts);
    free(k);
}

/* Outside any `row` holder's transaction: the loop's plain connection, pipelined with
 * its other calls. */
void pgh_place_any(store *st, const char *sku, const char *id, long long qty, int ttl_ms,
                   int start, const char *attempt, store_hold_fn fn, void *arg)
{
    struct hold_call *k = seg_calloc(1, sizeof *k);
    *k = (struct hold_call){fn, arg};
    struct pgh_stmt q;
    pgh_place_stmt(&q, sku, id, qty, ttl_ms, start, attempt);
    pgc_call(((struct pg_store *)st)->plain, 0, 0, &q.st, 1, on_hold, k);
}

void pgh_by_id(store *st, const char *id, enum store_hold_action act, const char *attempt,
               store_hold_fn fn, void *arg)
{
    struct hold_call *k = seg_calloc(1, sizeof *k);
    *k = (struct hold_call){fn, arg};
    struct pgh_stmt q;
    pgh_step_stmt(&q, id, act, attempt);
    pgc_call(((struct pg_store *)st)->plain, 0, 0, &q.st, 1, on_hold, k);
}
