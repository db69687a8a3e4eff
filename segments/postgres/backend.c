/* backend.c -- the PostgreSQL store: segments/store.h's operations over store.c's
 * schemes and a few statements of its own, on one loop. */
#include "segments/postgres/backend.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/postgres/fence.h"
#include "segments/postgres/handle.h"
#include "segments/postgres/holds.h"
#include "base/clock.h"
#include "base/xalloc.h"

static struct pg_store *self(store *s)
{
    return (struct pg_store *)s;
}

/* ---- answers on the next turn of the loop ----------------------------------------- */

struct later_int {
    store_int_fn fn;
    void *arg;
    int value;
};

static void on_later_int(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct later_int *l = arg;
    l->fn(l->arg, 0, l->value);
    free(l);
}

static void later_int(struct pg_store *s, store_int_fn fn, void *arg, int value)
{
    if (fn == NULL)
        return;
    struct later_int *l = seg_calloc(1, sizeof *l);
    *l = (struct later_int){fn, arg, value};
    const struct timeval now = {0, 0};
    if (event_base_once(s->ev, -1, EV_TIMEOUT, on_later_int, l, &now) != 0) {
        fputs("inventoryd: event_base_once failed\n", stderr);
        abort();
    }
}

/* ---- the handle ------------------------------------------------------------------- */

static unsigned caps(const store *s)
{
    (void)s;
    return STORE_CAP_MULTI_ONE | STORE_CAP_KEEP | STORE_CAP_BATCH | STORE_CAP_FENCE;
}

static void store_free(store *st)
{
    if (st == NULL)
        return;
    struct pg_store *s = self(st);
    if (!s->shared)
        pgc_free(s->plain);
    pgp_free(s->pool);
    pgb_tables_free(s);
    free(s);
}

static const char *error(const store *st)
{
    return pgc_error(((const struct pg_store *)st)->plain);
}

static void stats(const store *st, struct store_stats *out)
{
    const struct pg_store *s = (const struct pg_store *)st;
    struct pgc_stats p;
    *out = (struct store_stats){0};
    if (!s->shared) {
        pgc_stats(s->plain, &p);
        out->commands = p.calls;
        out->writes = p.writes;
    }
    for (int i = 0; i < pgp_size(s->pool); i++) {
        pgc_stats(pgp_at(s->pool, i), &p);
        out->commands += p.calls;
        out->writes += p.writes;
    }
}

/* ---- reads ------------------------------------------------------------------------ */

static void on_meta(void *arg, int rc, PGresult *const *res, int n)
{
    struct call *k = arg;
    if (!pgb_results_ok(rc, res, n)) {
        k->fn.meta(k->arg, -1, 0, NULL);
    } else if (PQntuples(res[0]) == 0) {
        pgb_scheme_forget(k->s, k->sku); /* deleted: the list holds the SKUs there are */
        k->fn.meta(k->arg, 0, 0, NULL);
    } else {
        const PGresult *r = res[0];
        struct store_meta m = {
            .segments = (int)pgb_cell(r, 0, 0),
            .hold_ms = (int)pgb_cell(r, 0, 3),
            .initial = pgb_cell(r, 0, 4),
            .epoch = pgb_cell(r, 0, 5),
            .gen = pgb_cell(r, 0, 6),
            .rebalance = strcmp(PQgetvalue(r, 0, 8), "t") == 0, /* adjust: spread.c */
            .replicated = strcmp(PQgetvalue(r, 0, 7), "t") == 0,
            .batch = (int)pgb_cell(r, 0, 9),
            .unfenced = strcmp(PQgetvalue(r, 0, 10), "t") == 0,
        };
        snprintf(m.mode, sizeof m.mode, "%s", PQgetvalue(r, 0, 1));
        snprintf(m.lock, sizeof m.lock, "%s", pgf_lock_service(PQgetvalue(r, 0, 2)));
        pgb_scheme_set(k->s, k->sku, PQgetvalue(r, 0, 2));
        k->fn.meta(k->arg, 0, 1, &m);
    }
    pgb_call_free(k);
}

static void meta_read(store *st, const char *sku, store_meta_fn fn, void *arg)
{
    struct call *k = pgb_call_new(self(st), arg, sku);
    k->fn.meta = fn;
    const char *p[] = {sku};
    const struct pgc_stmt q = {
        "SELECT segments, mode, lock, hold_ms, initial, epoch, gen,"
        " replicated, rebalance, batch, unfenced FROM skus WHERE sku = $1",
        1, p};
    pgc_call(self(st)->plain, 0, PGC_PREPARE, &q, 1, on_meta, k);
}

static void on_record(void *arg, int rc, PGresult *const *res, int n)
{
    struct call *k = arg;
    if (!pgb_results_ok(rc, res, n))
        k->fn.record(k->arg, -1, NULL);
    else
        k->fn.record(k->arg, 0,
                     PQntuples(res[0]) == 1 ? seg_strdup(PQgetvalue(res[0], 0, 0))
                                            : NULL);
    pgb_call_free(k);
}

/* A reset drops the SKU's order rows: a record found is of the SKU's epoch. */
static void record_read(store *st, const char *id, const char *sku, long long epoch,
                        store_record_fn fn, void *arg)
{
    (void)sku;
    (void)epoch;
    struct call *k = pgb_call_new(self(st), arg, NULL);
    k->fn.record = fn;
    const char *p[] = {id};
    const struct pgc_stmt q = {"SELECT record FROM orders WHERE order_id = $1", 1, p};
    pgc_call(self(st)->plain, 0, PGC_PREPARE, &q, 1, on_record, k);
}

static void on_stocks(void *arg, int rc, PGresult *const *res, int n)
{
    struct call *k = arg;
    if (!pgb_results_ok(rc, res, n)) {
        k->fn.stocks(k->arg, -1, NULL);
    } else {
        long long *stock = seg_calloc((size_t)k->n + 1, sizeof *stock);
        for (int i = 0; i < PQntuples(res[0]); i++) {
            int seg = (int)pgb_cell(res[0], i, 0);
            if (seg >= 0 && seg < k->n)
                stock[seg] = pgb_cell(res[0], i, 1);
        }
        k->fn.stocks(k->arg, 0, stock);
        free(stock);
    }
    pgb_call_free(k);
}

static void stocks_read(store *st, const char *sku, int n, store_stocks_fn fn, void *arg)
{
    struct call *k = pgb_call_new(self(st), arg, sku);
    k->fn.stocks = fn;
    k->n = n;
    const char *p[] = {sku};
    const struct pgc_stmt q = {"SELECT seg, stock FROM segments WHERE sku = $1", 1, p};
    pgc_call(self(st)->plain, 0, PGC_PREPARE, &q, 1, on_stocks, k);
}

static void on_found(void *arg, int rc, PGresult *const *res, int n)
{
    struct call *k = arg;
    if (!pgb_results_ok(rc, res, n))
        k->fn.found(k->arg, -1, -1, 0);
    else if (PQntuples(res[0]) == 0)
        k->fn.found(k->arg, 0, -1, 0);
    else
        k->fn.found(k->arg, 0, (int)pgb_cell(res[0], 0, 0), pgb_cell(res[0], 0, 1));
    pgb_call_free(k);
}

static void find_order(store *st, const char *sku, int n, const char *id,
                       store_found_fn fn, void *arg)
{
    (void)n;
    struct call *k = pgb_call_new(self(st), arg, sku);
    k->fn.found = fn;
    const char *p[] = {id, sku};
    const struct pgc_stmt q = {
        "SELECT seg, qty FROM orders WHERE order_id = $1 AND sku = $2", 2, p};
    pgc_call(self(st)->plain, 0, PGC_PREPARE, &q, 1, on_found, k);
}

/* ---- replies ---------------------------------------------------------------------- */

static void reply(struct call *k, int rc, int code, long long value, char *record)
{
    struct store_reply r = {.code = code, .value = value, .record = record};
    k->fn.reply(k->arg, rc, rc == 0 ? &r : NULL);
    free(r.record);
    pgb_call_free(k);
}

/* EXISTS comes with the record the id has. */
static void on_exists_record(void *arg, int rc, PGresult *const *res, int n)
{
    struct call *k = arg;
    if (!pgb_results_ok(rc, res, n) || PQntuples(res[0]) != 1)
        reply(k, -1, 0, 0, NULL);
    else
        reply(k, 0, STORE_EXISTS, 0, seg_strdup(PQgetvalue(res[0], 0, 0)));
}

static void reply_exists(struct call *k)
{
    const char *p[] = {k->id};
    const struct pgc_stmt q = {"SELECT record FROM orders WHERE order_id = $1", 1, p};
    pgc_call(k->s->plain, 0, PGC_PREPARE, &q, 1, on_exists_record, k);
}

/* A scheme's answer (store.h's PGS_*) as the seam's. */
static void reply_pgs(struct call *k, int rc, const struct pgs_res *r)
{
    if (rc != 0) {
        reply(k, -1, 0, 0, NULL);
        return;
    }
    switch (r->code) {
    case PGS_OK:
        reply(k, 0, STORE_OK, r->stock, NULL);
        return;
    case PGS_SHORT:
        reply(k, 0, STORE_SHORT, r->stock, NULL);
        return;
    case PGS_EXISTS:
        reply_exists(k);
        return;
    case PGS_NOSKU:
        reply(k, 0, STORE_MISSING, 0, NULL);
        return;
    default: /* BUSY, CONFLICT, FENCED: the lock (the version) is not ours */
        reply(k, 0, STORE_FENCED, r->stock, NULL);
    }
}

/* ---- one segment's lock ----------------------------------------------------------- */

/* lease and optimistic: the order id, the epoch and the stock checked, and (lease) the
 * lease taken, in one statement. Columns: the segment's stock, the leased stock (NULL:
 * not taken), the id's record, the SKU's epoch, the version. */
static void on_acquire(void *arg, int rc, PGresult *const *res, int n)
{
    struct call *k = arg;
    if (!pgb_results_ok(rc, res, n)) {
        reply(k, -1, 0, 0, NULL);
        return;
    }
    const PGresult *r = res[0];
    if (PQntuples(r) != 1) {
        reply(k, 0, STORE_MISSING, 0, NULL);
        return;
    }
    long long stock = pgb_cell(r, 0, 0);
    if (!PQgetisnull(r, 0, 2)) {
        reply(k, 0, STORE_EXISTS, 0, seg_strdup(PQgetvalue(r, 0, 2)));
    } else if (pgb_cell(r, 0, 3) != k->epoch) {
        reply(k, 0, STORE_STALE, 0, NULL);
    } else if (k->scheme == SCHEME_LEASE) {
        int code = !PQgetisnull(r, 0, 1) ? STORE_OK
                   : stock < k->qty      ? STORE_SHORT
                                         : STORE_BUSY;
        reply(k, 0, code, stock, NULL);
    } else if (stock < k->qty) {
        reply(k, 0, STORE_SHORT, stock, NULL);
    } else {
        pgb_held_add(k->s, k->token, SCHEME_OPT)->version = pgb_cell(r, 0, 4);
        reply(k, 0, STORE_OK, stock, NULL);
    }
}

static void on_row_taken(void *arg, int rc, const struct pgs_res *r)
{
    struct call *k = arg;
    if (rc != 0) {
        reply(k, -1, 0, 0, NULL);
        return;
    }
    switch (r->code) {
    case PGS_OK: {
        struct held *h = pgb_held_add(k->s, k->token, SCHEME_ROW);
        h->c = k->c;
        h->txn = r->txn;
        reply(k, 0, STORE_OK, r->stock, NULL);
        return;
    }
    case PGS_BUSY:
        reply(k, 0, STORE_BUSY, -1, NULL);
        return;
    case PGS_SHORT:
        reply(k, 0, STORE_SHORT, r->stock, NULL);
        return;
    default:
        reply(k, 0, STORE_MISSING, 0, NULL);
    }
}

/* A row deduction that ends its transaction (or takes the row lock in its own
 * statement) and is not answered yet, for (sku, seg); NULL when none. */
static struct call *ending_find(struct pg_store *s, const char *sku, int seg)
{
    for (struct call *k = s->ending; k != NULL; k = k->end_next)
        if (k->seg == seg && strcmp(k->sku, sku) == 0)
            return k;
    return NULL;
}

static void ending_add(struct pg_store *s, struct call *k)
{
    k->end_next = s->ending;
    s->ending = k;
}

static void ending_drop(struct pg_store *s, struct call *k)
{
    for (struct call **p = &s->ending; *p != NULL; p = &(*p)->end_next)
        if (*p == k) {
            *p = k->end_next;
            return;
        }
}

/* A new row hold (its call `k`): the engine hands a segment's claim on as the
 * DEDUCT goes out, so the row may still be locked by that deduction, and a NOWAIT on
 * another connection would find it so (BUSY: the order backs off and the segment
 * idles). Its BEGIN goes on the ending transaction's connection, behind the COMMIT;
 * behind a deduction on the loop's plain connection (no transaction of ours to queue
 * behind) it waits for that answer. Else on the pool's pick. */
static void row_open(struct pg_store *s, struct call *k)
{
    struct call *e = ending_find(s, k->sku, k->seg);
    if (e != NULL && e->c == s->plain && e->then == NULL) {
        e->then = k;
        return;
    }
    k->c = e != NULL && e->c != s->plain ? e->c : pgp_pick(s->pool);
    pgs_row_take(k->c, k->sku, k->seg, k->qty, on_row_taken, k);
}

static void acquire(store *st, const char *sku, long long epoch, int i, const char *id,
                    long long qty, const char *token, int ttl_ms, store_reply_fn fn,
                    void *arg)
{
    struct pg_store *s = self(st);
    struct call *k = pgb_call_new(s, arg, sku);
    k->fn.reply = fn;
    k->seg = i;
    k->qty = qty;
    k->epoch = epoch;
    k->scheme = pgb_scheme_of(s, sku);
    snprintf(k->token, sizeof k->token, "%s", token);
    snprintf(k->id, sizeof k->id, "%s", id);
    if (k->scheme == SCHEME_ROW) {
        /* The transaction is the lock: it stays open on its connection across the
         * hold (an order id recorded already is found by the deduction's INSERT). */
        row_open(s, k);
        return;
    }
    char seg[16], q[24], ttl[16], ep[24];
    snprintf(seg, sizeof seg, "%d", i);
    snprintf(q, sizeof q, "%lld", qty);
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    snprintf(ep, sizeof ep, "%lld", epoch);
    const char *p[] = {sku, seg, token, id, ttl, q, ep};
    const struct pgc_stmt lease = {
        "WITH o AS (SELECT record FROM orders WHERE order_id = $4),"
        " k AS (SELECT epoch FROM skus WHERE sku = $1),"
        " u AS (UPDATE segments SET lease_token = $3, lease_until = now() +"
        " $5::int * interval '1 millisecond', fence = fence + 1 WHERE sku = $1 AND"
        " seg = $2::int AND stock >= $6::bigint AND (lease_token IS NULL OR"
        " lease_until <= now() OR lease_token = $3) AND NOT EXISTS (SELECT 1 FROM o)"
        " AND (SELECT epoch FROM k) = $7::bigint RETURNING stock)"
        " SELECT s.stock, (SELECT stock FROM u), (SELECT record FROM o),"
        " (SELECT epoch FROM k), s.version FROM segments s WHERE s.sku = $1 AND"
        " s.seg = $2::int",
        7, p};
    const char *po[] = {sku, seg, id};
    const struct pgc_stmt opt = {
        "SELECT s.stock, NULL, (SELECT record FROM orders WHERE order_id = $3),"
        " (SELECT epoch FROM skus WHERE sku = $1), s.version FROM segments s"
        " WHERE s.sku = $1 AND s.seg = $2::int",
        3, po};
    pgc_call(s->plain, 0, PGC_PREPARE, k->scheme == SCHEME_LEASE ? &lease : &opt, 1,
             on_acquire, k);
}

static void on_lease_int(void *arg, int rc, const struct pgs_res *r)
{
    struct call *k = arg;
    if (k->fn.num != NULL)
        k->fn.num(k->arg, rc, rc == 0 && r->code == PGS_OK);
    pgb_call_free(k);
}

/* row and optimistic: the deduction takes the row lock (checks the version) in its
 * own statement, so the lock alone is had at once. */
static void lock(store *st, const char *sku, int i, const char *token, int ttl_ms,
                 store_int_fn fn, void *arg)
{
    struct pg_store *s = self(st);
    if (pgb_scheme_of(s, sku) != SCHEME_LEASE) {
        later_int(s, fn, arg, 1);
        return;
    }
    struct call *k = pgb_call_new(s, arg, sku);
    k->fn.num = fn;
    pgs_lease_take(s->plain, sku, i, token, ttl_ms, on_lease_int, k);
}

/* The transaction is over (its session ended): the lock is lost, the entry goes. */
static void on_row_renewed(void *arg, int rc, PGresult *const *res, int n)
{
    struct call *k = arg;
    bool ok = pgb_results_ok(rc, res, n);
    if (!ok)
        free(pgb_held_find(k->s, k->token, true));
    if (k->fn.num != NULL)
        k->fn.num(k->arg, 0, ok);
    pgb_call_free(k);
}

static void renew(store *st, const char *sku, int i, const char *token, int ttl_ms,
                  store_int_fn fn, void *arg)
{
    struct pg_store *s = self(st);
    enum scheme sc = pgb_scheme_of(s, sku);
    if (sc == SCHEME_LEASE) {
        struct call *k = pgb_call_new(s, arg, sku);
        k->fn.num = fn;
        pgs_lease_renew(s->plain, sku, i, token, ttl_ms, on_lease_int, k);
        return;
    }
    struct held *h = sc == SCHEME_ROW ? pgb_held_find(s, token, false) : NULL;
    if (h != NULL) {
        /* row: the session's idle_in_transaction_session_timeout is the lease; a
         * statement in the transaction renews it (a frozen holder sends none). */
        struct call *k = pgb_call_new(s, arg, sku);
        k->fn.num = fn;
        snprintf(k->token, sizeof k->token, "%s", token);
        h->at_ms = base_now_ms();
        static const struct pgc_stmt q = {"SELECT 1", 0, NULL};
        pgc_call(h->c, h->txn, 0, &q, 1, on_row_renewed, k);
        return;
    }
    /* a row lock handed on with keep is taken again by the deduction's own statement;
     * optimistic: the version decides at the deduction */
    later_int(s, fn, arg, 1);
}

static void release(store *st, const char *sku, int i, const char *token, store_int_fn fn,
                    void *arg)
{
    struct pg_store *s = self(st);
    if (pgb_scheme_of(s, sku) == SCHEME_LEASE) {
        struct call *k = pgb_call_new(s, arg, sku);
        k->fn.num = fn;
        pgs_lease_release(s->plain, sku, i, token, on_lease_int, k);
        return;
    }
    struct held *h = pgb_held_find(s, token, true);
    if (h != NULL && h->scheme == SCHEME_ROW)
        pgs_row_release(h->c, h->txn, NULL, NULL);
    free(h);
    later_int(s, fn, arg, 1);
}

/* ---- deductions ------------------------------------------------------------------- */

static void on_deducted(void *arg, int rc, const struct pgs_res *r)
{
    struct call *k = arg;
    ending_drop(k->s, k);
    if (k->then != NULL)
        row_open(k->s, k->then);
    if (k->scheme == SCHEME_LEASE && (rc != 0 || r->code != PGS_OK) && k->token[0])
        pgs_lease_release(k->s->plain, k->sku, k->seg, k->token, NULL, NULL);
    if (k->scheme == SCHEME_OPT && rc == 0 && r->code == PGS_OK && k->keep)
        pgb_held_add(k->s, k->token, SCHEME_OPT)->version = r->version;
    if (k->scheme == SCHEME_ROW && rc == 0 && r->code == PGS_OK && r->txn != 0) {
        struct held *h = pgb_held_add(k->s, k->token, SCHEME_ROW); /* kept */
        h->c = k->c;
        h->txn = r->txn;
    }
    reply_pgs(k, rc, r);
}

static void on_opt_read(void *arg, int rc, const struct pgs_res *r)
{
    struct call *k = arg;
    if (rc != 0 || r->code != PGS_OK) {
        reply_pgs(k, rc, r);
        return;
    }
    pgs_opt_deduct(k->s->plain, k->sku, k->seg, r->version, k->id, k->qty, k->record,
                   on_deducted, k);
}

/* The pool's connections besides `c` that no transaction holds. A kept row lock
 * holds its connection across orders (up to 16): the loop's other holds need the
 * rest, or their BEGIN waits for a kept transaction to end. */
static int pool_spare(struct pg_store *s, const pgc_conn *c)
{
    int spare = 0;
    for (int i = 0; i < pgp_size(s->pool); i++)
        spare += pgp_at(s->pool, i) != c && !pgc_held(pgp_at(s->pool, i));
    return spare;
}

static bool deduct(store *st, const char *sku, long long epoch, int i, const char *token,
                   long long fence, const char *attempt, const char *id, long long qty,
                   const char *record, long long until, bool keep, store_reply_fn fn,
                   void *arg)
{
    (void)attempt, (void)until;
    struct pg_store *s = self(st);
    if (token[0] == '\0' && fence != STORE_NO_FENCE) { /* a lock service's hold */
        pgf_deduct(s, sku, epoch, i, fence, id, qty, record, fn, arg);
        return true;
    }
    struct call *k = pgb_call_new(s, arg, sku);
    k->fn.reply = fn;
    k->seg = i;
    k->qty = qty;
    k->keep = keep;
    k->record = seg_strdup(record);
    snprintf(k->id, sizeof k->id, "%s", id);
    snprintf(k->token, sizeof k->token, "%s", token);
    if (token[0] == '\0') { /* mode atomic */
        k->scheme = SCHEME_ROW;
        pgs_atomic_deduct(s->plain, sku, i, id, qty, record, on_deducted, k);
        return true;
    }
    k->scheme = pgb_scheme_of(s, sku);
    struct held *h = pgb_held_find(s, token, true);
    if (k->scheme == SCHEME_LEASE) {
        pgs_lease_deduct(s->plain, sku, i, token, id, qty, record, keep, on_deducted, k);
    } else if (k->scheme == SCHEME_ROW && h != NULL && h->scheme == SCHEME_ROW) {
        /* kept: the row locked again behind the COMMIT, for the next order's hold --
         * while two more of the pool's connections stay free for the loop's other
         * ACQUIREs (else COMMIT ends the hold and the next holder's deduction takes
         * the row lock: keeping at any cost held every connection of a loop at 20
         * segments, its other ACQUIREs waiting behind the kept transactions) */
        k->c = h->c;
        if (keep && pool_spare(s, h->c) > 1) {
            pgs_row_deduct_keep(h->c, h->txn, sku, i, id, qty, record, on_deducted, k);
        } else {
            ending_add(s, k);
            pgs_row_deduct(h->c, h->txn, sku, i, id, qty, record, on_deducted, k);
        }
    } else if (k->scheme == SCHEME_ROW) {
        k->c = s->plain;
        ending_add(s, k);
        pgs_row_deduct_now(s->plain, sku, i, id, qty, record, on_deducted, k);
    } else if (h != NULL && h->scheme == SCHEME_OPT) {
        pgs_opt_deduct(s->plain, sku, i, h->version, id, qty, record, on_deducted, k);
    } else {
        pgs_opt_read(s->plain, sku, i, on_opt_read, k);
    }
    free(h);
    return true;
}

static void id_for_segment(store *s, const char *sku, int i, char *id)
{
    (void)s, (void)sku, (void)i, (void)id; /* one orders table: any id will do */
}

/* A COMMIT answered is durable on the server (synchronous_commit): nothing to wait
 * for. `value` 1: the durability "replicated" is met as far as this store knows. */
static void wait_durable(store *st, const char *sku, int i, const char *id,
                         int timeout_ms, store_int_fn fn, void *arg)
{
    (void)sku, (void)i, (void)id, (void)timeout_ms;
    later_int(self(st), fn, arg, 1);
}

/* store_ops.adjust: the loop's spread or rebalance under the caller's locks, or an
 * admin's restock or rebalance (no tokens: the transaction locks the rows). */
static void adjust(store *st, const char *sku, long long epoch, int segments,
                   const char *const *tok, const long long *fence, const char *op,
                   long long add, long long limit, const char *rid, const char *sig,
                   int wait_ms, store_reply_fn fn, void *arg)
{
    (void)wait_ms; /* one transaction on one server */
    if (tok == NULL && (strcmp(op, "restock") == 0 || strcmp(op, "rebalance") == 0))
        pgb_admin_adjust(st, sku, epoch, segments, op, add, limit, rid, sig, fn, arg);
    else
        pgb_adjust(st, sku, epoch, segments, tok, fence, op, add, limit, rid, sig, fn,
                   arg);
}

static const struct store_ops pg_ops = {
    .name = "postgres",
    .caps = caps,
    .free = store_free,
    .error = error,
    .stats = stats,
    .meta_read = meta_read,
    .record_read = record_read,
    .stocks_read = stocks_read,
    .find_order = find_order,
    .acquire = acquire,
    .hold = pgf_hold,
    .lock = lock,
    .renew = renew,
    .release = release,
    .deduct = deduct,
    .deduct_batch = pgb_deduct_batch,
    .deduct_multi = pgb_deduct_multi,
    .adjust = adjust,
    .reset = pgb_reset,
    .cancel = pgb_cancel,
    .id_for_segment = id_for_segment,
    .hold_place_any = pgh_place_any,
    .hold_by_id = pgh_by_id,
    .wait = wait_durable,
};

store *pgb_store_create(struct event_base *base, const struct pgb_opts *o)
{
    struct pg_store *s = seg_calloc(1, sizeof *s);
    s->base.ops = &pg_ops;
    s->ev = base;
    s->ttl_ms = o->lock_ttl_ms > 0 ? o->lock_ttl_ms : 5000;
    struct pgc_opts co = {
        .conninfo = o->conninfo,
        .lock_ttl_ms = o->lock_ttl_ms,
        .call_timeout_ms = o->timeout_ms,
        .app_name = "inventoryd loop",
        .no_prepare = o->no_prepare,
        .ledger = o->ledger,
    };
    s->shared = o->shared;
    if (!s->shared)
        s->plain = pgc_create(base, &co);
    co.app_name = "inventoryd pool";
    s->pool = pgp_create(base, &co, s->shared ? 1 : o->pool > 0 ? o->pool : 4);
    if (s->shared)
        s->plain = pgp_at(s->pool, 0);
    return &s->base;
}
