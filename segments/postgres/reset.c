/* reset.c -- the PostgreSQL store's create, reset and delete on the loop (store.h
 * reset): one transaction that records the request id, locks the SKU's row and
 * rewrites it, its segments and its orders; a state machine of a few calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/admin.h"
#include "segments/postgres/admin.h"
#include "segments/postgres/handle.h"
#include "base/xalloc.h"

/* Where a reset stands: each state names the call that is out. */
enum reset_state {
    RS_REQUEST, /* the request id recorded (INSERT), then its signature read */
    RS_READ,    /* the SKU's row read and locked (FOR UPDATE) */
    RS_WRITE,   /* the delete, or the upsert of the SKU and its new segments */
    RS_END,     /* COMMIT (OK, REPLAYED) or ROLLBACK (anything else) */
};

struct rs {
    store_reply_fn fn;
    void *arg;
    enum reset_state state;
    pgc_conn *c;
    unsigned long long txn;
    char sku[SEG_NAME_MAX + 1];
    char *rid, *sig;
    struct store_reset to; /* its strings the caller's until answered */
    long long old_epoch;
    bool there; /* the SKU had a row */
    int code;   /* the answer, sent once RS_END is answered */
    long long value;
};

static void on_step(void *arg, int rc, PGresult *const *res, int n);

/* Answer (rc -1: no usable answer) and free. */
static void answer(struct rs *x, int rc)
{
    struct store_reply r = {.code = x->code, .value = x->value};
    x->fn(x->arg, rc, rc == 0 ? &r : NULL);
    free(x->rid);
    free(x->sig);
    free(x);
}

/* Send a call of the transaction (the first opens it). */
static void step_send(struct rs *x, enum reset_state to, unsigned flags,
                      const struct pgc_stmt *q, int n)
{
    x->state = to;
    x->txn = pgc_call(x->c, x->txn, flags | (x->txn ? 0 : PGC_BEGIN), q, n, on_step, x);
}

/* The answer is `code`: the transaction ends (kept for OK and REPLAYED), then it goes
 * out. */
static void end(struct rs *x, int code, long long value)
{
    x->code = code;
    x->value = value;
    bool keep = code == STORE_OK || code == ADMIN_REPLAYED;
    const struct pgc_stmt q = {keep ? "COMMIT" : "ROLLBACK", 0, NULL};
    step_send(x, RS_END, PGC_END, &q, 1);
}

static void read_row(struct rs *x)
{
    const char *k[] = {x->sku};
    const struct pgc_stmt q = {"SELECT epoch, gen FROM skus WHERE sku = $1 FOR UPDATE", 1,
                               k};
    step_send(x, RS_READ, 0, &q, 1);
}

/* The row as read (epoch, gen; none: !there): the code that refuses the reset, or 0
 * to write it. */
static int refused(struct rs *x, long long epoch, long long gen)
{
    const char *e = x->to.expect ? x->to.expect : "";
    if (strcmp(e, "-") == 0 && x->there)
        return STORE_EXISTS;
    if (strcmp(e, "*") == 0 && !x->there)
        return ADMIN_MISMATCH;
    if (e[0] >= '0' && e[0] <= '9') {
        char now[48];
        snprintf(now, sizeof now, "%lld.%lld", epoch, gen);
        if (!x->there || strcmp(now, e) != 0)
            return ADMIN_MISMATCH;
    }
    if (x->there && epoch != x->old_epoch)
        return STORE_STALE;
    if (x->to.segments == 0 && !x->there)
        return STORE_MISSING;
    return 0;
}

/* The SKU's row locked and the reset not refused: delete it (segments 0), or write
 * its settings and new segments over the old ones, its orders gone. */
static void write_rows(struct rs *x)
{
    const char *k[] = {x->sku};
    if (x->to.segments == 0) {
        const struct pgc_stmt q[] = {
            {"DELETE FROM orders WHERE sku = $1", 1, k},
            {"DELETE FROM skus WHERE sku = $1", 1, k},
        };
        step_send(x, RS_WRITE, 0, q, 2);
        return;
    }
    const struct store_reset *to = &x->to;
    char segs[16], hold[16], stock[24], ep[24], batch[16];
    snprintf(segs, sizeof segs, "%d", to->segments);
    snprintf(batch, sizeof batch, "%d", to->batch > 1 ? to->batch : 1);
    snprintf(hold, sizeof hold, "%d", to->hold_ms);
    snprintf(stock, sizeof stock, "%lld", to->stock);
    snprintf(ep, sizeof ep, "%lld", to->epoch);
    const char *lk = to->lock != NULL && to->lock[0] != '\0' ? to->lock : pga_locks()[0];
    const char *up[] = {x->sku,
                        segs,
                        stock,
                        to->mode,
                        lk,
                        hold,
                        ep,
                        to->rebalance ? "true" : "false",
                        to->replicated ? "true" : "false",
                        batch,
                        to->unfenced ? "true" : "false",
                        to->ledger ? "true" : "false"};
    const char *split[] = {x->sku, stock, segs, up[11]};
    const struct pgc_stmt q[] = {
        {"INSERT INTO skus (sku, segments, initial, mode, lock, hold_ms, epoch, gen,"
         " rebalance, replicated, batch, unfenced, ledger) VALUES ($1, $2::int,"
         " $3::bigint, $4, $5, $6::int, $7::bigint, $7::bigint, $8::boolean,"
         " $9::boolean, $10::int, $11::boolean, $12::boolean)"
         " ON CONFLICT (sku) DO UPDATE SET"
         " segments = excluded.segments, initial = excluded.initial,"
         " mode = excluded.mode, lock = excluded.lock, hold_ms = excluded.hold_ms,"
         " epoch = excluded.epoch, gen = excluded.gen, rebalance = excluded.rebalance,"
         " replicated = excluded.replicated, batch = excluded.batch,"
         " unfenced = excluded.unfenced, ledger = excluded.ledger",
         12, up},
        {"DELETE FROM segments WHERE sku = $1", 1, k},
        {"DELETE FROM orders WHERE sku = $1", 1, k},
        {"INSERT INTO segments (sku, seg, stock, ledger) SELECT $1, g, $2::bigint /"
         " $3::int + CASE WHEN g < $2::bigint % $3::int THEN 1 ELSE 0 END, $4::boolean"
         " FROM generate_series(0, $3::int - 1) g",
         4, split},
    };
    step_send(x, RS_WRITE, 0, q, 4);
}

/* The transitions, in one place. */
static void on_step(void *arg, int rc, PGresult *const *res, int n)
{
    struct rs *x = arg;
    if (!pgb_results_ok(rc, res, n)) { /* the transaction is over (conn.h) */
        answer(x, -1);
        return;
    }
    switch (x->state) {
    case RS_REQUEST:
        if (PQntuples(res[0]) == 1)
            read_row(x);
        else
            end(x,
                PQntuples(res[1]) == 1 && strcmp(PQgetvalue(res[1], 0, 0), x->sig) == 0
                    ? ADMIN_REPLAYED
                    : ADMIN_CONFLICT,
                0);
        return;
    case RS_READ: {
        x->there = PQntuples(res[0]) == 1;
        int no = refused(x, x->there ? pgb_cell(res[0], 0, 0) : 0,
                         x->there ? pgb_cell(res[0], 0, 1) : 0);
        if (no != 0)
            end(x, no, 0);
        else
            write_rows(x);
        return;
    }
    case RS_WRITE:
        end(x, STORE_OK, x->to.segments > 0 && !x->there); /* value: created */
        return;
    case RS_END:
        answer(x,
               strcmp(PQcmdStatus(res[0]),
                      x->code == STORE_OK || x->code == ADMIN_REPLAYED ? "COMMIT"
                                                                       : "ROLLBACK") == 0
                   ? 0
                   : -1);
        return;
    }
}

void pgb_reset(store *st, const char *sku, long long old_epoch, int old_segments,
               const struct store_reset *to, const char *rid, const char *sig,
               store_reply_fn fn, void *arg)
{
    (void)old_segments; /* the rows say it */
    struct pg_store *s = (struct pg_store *)st;
    struct rs *x = seg_calloc(1, sizeof *x);
    *x = (struct rs){
        .fn = fn, .arg = arg, .c = pgp_pick(s->pool), .to = *to, .old_epoch = old_epoch};
    snprintf(x->sku, sizeof x->sku, "%s", sku);
    if (rid == NULL || rid[0] == '\0') {
        read_row(x);
        return;
    }
    x->rid = seg_strdup(rid);
    x->sig = seg_strdup(sig != NULL ? sig : "");
    const char *p[] = {x->rid, x->sig};
    /* The id's row is read by a statement of its own: when the INSERT met the row of
     * a transaction that committed while it waited, only a new statement's snapshot
     * sees it (adjust.c). */
    const struct pgc_stmt q[] = {
        {"INSERT INTO requests (rid, sig) VALUES ($1, $2)"
         " ON CONFLICT (rid) DO NOTHING RETURNING 1",
         2, p},
        {"SELECT sig FROM requests WHERE rid = $1", 1, p},
    };
    step_send(x, RS_REQUEST, 0, q, 2);
}
