/* adjust.c -- the PostgreSQL store's admin restock and rebalance on the loop (store.h
 * adjust without tokens): one transaction that locks the rows and records the request
 * id, a state machine of a few calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/admin.h"
#include "segments/postgres/handle.h"
#include "segments/postgres/spread.h"
#include "base/xalloc.h"

/* Where an admin adjust stands: each state names the call that is out. */
enum adj_state {
    AJ_REQUEST, /* the request id recorded (INSERT), then its signature read */
    AJ_LOCK,    /* the SKU's row in the epoch, then its segments' rows, locked */
    AJ_WRITE,   /* the restock's writes, or the rebalance's statement (spread.h) */
    AJ_END,     /* COMMIT (OK, REPLAYED) or ROLLBACK (anything else) */
};

struct adj {
    store_reply_fn fn;
    void *arg;
    enum adj_state state;
    pgc_conn *c;
    unsigned long long txn;
    char sku[STORE_SKU_PLACED_MAX];
    char *rid, *sig;
    bool restock;
    long long epoch, add, limit;
    int n;
    int code; /* the answer, sent once AJ_END is answered */
    long long value;
};

static void on_step(void *arg, int rc, PGresult *const *res, int n);

/* Answer (rc -1: no usable answer) and free. */
static void answer(struct adj *a, int rc)
{
    struct store_reply r = {.code = a->code, .value = a->value};
    a->fn(a->arg, rc, rc == 0 ? &r : NULL);
    free(a->rid);
    free(a->sig);
    free(a);
}

/* Send a call of the transaction (the first opens it). */
static void step_send(struct adj *a, enum adj_state to, unsigned flags,
                      const struct pgc_stmt *q, int n)
{
    a->state = to;
    unsigned long long t =
        pgc_call(a->c, a->txn, flags | (a->txn ? 0 : PGC_BEGIN), q, n, on_step, a);
    a->txn = t;
}

/* The answer is `code`: the transaction ends (kept for OK and REPLAYED), then it goes
 * out. */
static void end(struct adj *a, int code, long long value)
{
    a->code = code;
    a->value = value;
    bool keep = code == STORE_OK || code == ADMIN_REPLAYED;
    const struct pgc_stmt q = {keep ? "COMMIT" : "ROLLBACK", 0, NULL};
    step_send(a, AJ_END, PGC_END, &q, 1);
}

static void lock_rows(struct adj *a)
{
    char e[24], ns[16];
    snprintf(e, sizeof e, "%lld", a->epoch);
    snprintf(ns, sizeof ns, "%d", a->n);
    const char *k[] = {a->sku, e, ns};
    const struct pgc_stmt q[] = {
        {"SELECT initial FROM skus WHERE sku = $1 AND epoch = $2::bigint"
         " AND segments = $3::int FOR UPDATE",
         3, k},
        {"SELECT seg, stock FROM segments WHERE sku = $1 ORDER BY seg FOR UPDATE", 1, k},
    };
    step_send(a, AJ_LOCK, 0, q, 2);
}

/* The rows locked: a restock adds add / n to each segment (the first add % n one
 * more) and to the SKU's initial; a rebalance evens the stock out (spread.h, no
 * lease or fence checked: the rows are locked). Both bump the gen. */
static void write_rows(struct adj *a)
{
    char add[24], ns[16], e[24];
    snprintf(add, sizeof add, "%lld", a->add);
    snprintf(ns, sizeof ns, "%d", a->n);
    snprintf(e, sizeof e, "%lld", a->epoch);
    if (a->restock) {
        const char *p[] = {a->sku, add, ns};
        const struct pgc_stmt q[] = {
            {"UPDATE segments SET stock = stock + $2::bigint / $3::int + CASE WHEN seg <"
             " $2::bigint % $3::int THEN 1 ELSE 0 END, version = version + 1"
             " WHERE sku = $1",
             3, p},
            {"UPDATE skus SET gen = gen + 1, initial = initial + $2::bigint"
             " WHERE sku = $1 RETURNING gen",
             2, p},
        };
        step_send(a, AJ_WRITE, 0, q, 2);
        return;
    }
    char *toks = pgsp_tokens(NULL, a->n);
    const char *p[] = {a->sku, toks, e, ns, "false", "false", NULL};
    const struct pgc_stmt q = {pgsp_sql, PGSP_NPARAMS, p};
    step_send(a, AJ_WRITE, 0, &q, 1);
    free(toks);
}

/* The transitions, in one place. */
static void on_step(void *arg, int rc, PGresult *const *res, int n)
{
    struct adj *a = arg;
    bool ok = pgb_results_ok(rc, res, n);
    if (!ok) { /* the transaction is over (conn.h): nothing of it stands */
        answer(a, -1);
        return;
    }
    switch (a->state) {
    case AJ_REQUEST:
        if (PQntuples(res[0]) == 1)
            lock_rows(a);
        else
            end(a,
                PQntuples(res[1]) == 1 && strcmp(PQgetvalue(res[1], 0, 0), a->sig) == 0
                    ? ADMIN_REPLAYED
                    : ADMIN_CONFLICT,
                0);
        return;
    case AJ_LOCK:
        if (PQntuples(res[0]) != 1 || PQntuples(res[1]) != a->n)
            end(a, STORE_STALE, 0);
        else if (a->add > 0 && pgb_cell(res[0], 0, 0) > a->limit)
            end(a, ADMIN_LIMIT, 0);
        else
            write_rows(a);
        return;
    case AJ_WRITE:
        if (a->restock) {
            end(a, STORE_OK, pgb_cell(res[1], 0, 0));
        } else {
            const PGresult *r = res[0];
            bool wrote = PQntuples(r) == 1 && !PQgetisnull(r, 0, 0);
            bool whole = PQntuples(r) == 1 && pgb_cell(r, 0, 3) == a->n;
            if (!wrote && !whole)
                end(a, STORE_STALE, 0);
            else
                end(a, STORE_OK, wrote ? pgb_cell(r, 0, 0) : 0); /* 0: nothing moved */
        }
        return;
    case AJ_END:
        answer(a,
               strcmp(PQcmdStatus(res[0]),
                      a->code == STORE_OK || a->code == ADMIN_REPLAYED ? "COMMIT"
                                                                       : "ROLLBACK") == 0
                   ? 0
                   : -1);
        return;
    }
}

void pgb_admin_adjust(store *st, const char *sku, long long epoch, int segments,
                      const char *op, long long add, long long limit, const char *rid,
                      const char *sig, store_reply_fn fn, void *arg)
{
    struct pg_store *s = (struct pg_store *)st;
    struct adj *a = seg_calloc(1, sizeof *a);
    *a = (struct adj){.fn = fn,
                      .arg = arg,
                      .c = pgp_pick(s->pool),
                      .restock = strcmp(op, "restock") == 0,
                      .epoch = epoch,
                      .add = add,
                      .limit = limit,
                      .n = segments};
    snprintf(a->sku, sizeof a->sku, "%s", sku);
    if (rid == NULL || rid[0] == '\0') {
        lock_rows(a);
        return;
    }
    a->rid = seg_strdup(rid);
    a->sig = seg_strdup(sig != NULL ? sig : "");
    const char *p[] = {a->rid, a->sig};
    /* The id's row is read by a statement of its own: when the INSERT met the row of
     * a transaction that committed while it waited, only a new statement's snapshot
     * sees it (admin.c request). */
    const struct pgc_stmt q[] = {
        {"INSERT INTO requests (rid, sig) VALUES ($1, $2)"
         " ON CONFLICT (rid) DO NOTHING RETURNING 1",
         2, p},
        {"SELECT sig FROM requests WHERE rid = $1", 1, p},
    };
    step_send(a, AJ_REQUEST, 0, q, 2);
}
