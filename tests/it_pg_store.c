/* it_pg_store.c -- the PostgreSQL store (segments/postgres/) against a real PostgreSQL
 * 15 started by the harness (harness_pg.h).
 *
 * The schema is created by two instances migrating at once, and migrating again is a
 * no-op. Each of the four schemes (row, lease, optimistic, atomic) sells a SKU out
 * exactly: many concurrent orders on 2 pipelined connections, remaining + sold =
 * initial, one order row per sale, no segment below zero. An order id sells once,
 * whatever the scheme, also when two connections send it at the same moment. row: a
 * holder frozen (its loop not run) past idle_in_transaction_session_timeout loses its
 * session and its row lock to another seller, and its late COMMIT fails. lease: a
 * holder past its expiry is fenced, and only the owner releases. optimistic: a lost
 * race is reported as CONFLICT and writes nothing. A backend killed with
 * pg_terminate_backend answers -1 and the connection comes back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "segments/postgres/conn.h"
#include "segments/postgres/pool.h"
#include "segments/postgres/store.h"
#include "tests/harness.h"
#include "tests/harness_pg.h"

struct env {
    h_pg *pg;
    struct event_base *base;
    pgc_conn *c[2];
};

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* Run `base` until *count reaches `want` or ms pass: true when it did. */
static bool run_until(struct event_base *base, const int *count, int want, int ms)
{
    struct event *tick = event_new(base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval tv = {0, 10000};
    event_add(tick, &tv);
    long long end = h_now_ms() + ms;
    while (*count < want && h_now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(tick);
    return *count >= want;
}

/* Run `base` for ms, whatever happens. */
static void run_for(struct event_base *base, int ms)
{
    int never = 0;
    run_until(base, &never, 1, ms);
}

struct wait {
    int done, rc;
    struct pgs_res r;
};

static void on_res(void *arg, int rc, const struct pgs_res *r)
{
    struct wait *w = arg;
    w->rc = rc;
    if (rc == 0)
        w->r = *r;
    w->done++;
}

static void wait_for(struct event_base *base, struct wait *w)
{
    if (!run_until(base, &w->done, 1, 10000))
        fail_msg("no answer within 10 s");
}

static pgc_conn *connect_to(struct event_base *base, const h_pg *pg, int lock_ttl_ms)
{
    const struct pgc_opts o = {.conninfo = h_pg_conninfo(pg),
                               .lock_ttl_ms = lock_ttl_ms,
                               .call_timeout_ms = 10000};
    return pgc_create(base, &o);
}

static void put_sku(struct env *e, const char *sku, long long stock, int segments,
                    const char *mode, const char *lock)
{
    struct wait w = {0};
    pgs_sku_put(e->c[0], sku, stock, segments, mode, lock, 0, on_res, &w);
    wait_for(e->base, &w);
    if (w.rc != 0)
        fail_msg("pgs_sku_put %s: %s", sku, pgc_error(e->c[0]));
}

static long long scalar(const struct env *e, const char *fmt, const char *sku)
{
    char sql[512];
    snprintf(sql, sizeof sql, fmt, sku);
    return h_pg_scalar(e->pg, sql);
}

/* remaining + sold == initial, the units of the order rows == sold, `orders` rows, no
 * segment below zero (the CHECK makes that impossible; asserted anyway). */
static void audit_rows(const struct env *e, const char *sku, long long initial,
                       long long sold, long long orders)
{
    long long left = scalar(e, "SELECT sum(stock) FROM segments WHERE sku = '%s'", sku);
    long long rows = scalar(e, "SELECT count(*) FROM orders WHERE sku = '%s'", sku);
    long long units = scalar(e, "SELECT sum(qty) FROM orders WHERE sku = '%s'", sku);
    long long neg =
        scalar(e, "SELECT count(*) FROM segments WHERE sku = '%s' AND stock < 0", sku);
    assert_int_equal(left + sold, initial);
    assert_int_equal(units, sold);
    assert_int_equal(rows, orders);
    assert_int_equal(neg, 0);
}

/* The same for orders of one unit each. */
static void audit(const struct env *e, const char *sku, long long initial, long long sold)
{
    audit_rows(e, sku, initial, sold, sold);
}

struct migrated {
    int done, ok;
    int version[2];
};

static void on_migrated(void *arg, int rc, const struct pgs_res *r)
{
    struct migrated *m = arg;
    if (rc == 0)
        m->version[m->ok++] = (int)r->version;
    m->done++;
}

static int group_setup(void **state)
{
    h_deadline(120);
    struct env *e = calloc(1, sizeof *e);
    e->pg = h_pg_start();
    if (e->pg == NULL) {
        free(e);
        return -1;
    }
    e->base = event_base_new();
    for (int i = 0; i < 2; i++)
        e->c[i] = connect_to(e->base, e->pg, 5000);
    /* Two instances starting together: the advisory lock puts one after the other. */
    struct migrated m = {0};
    pgs_migrate(e->c[0], on_migrated, &m);
    pgs_migrate(e->c[1], on_migrated, &m);
    if (!run_until(e->base, &m.done, 2, 20000) || m.ok != 2) {
        fprintf(stderr, "migrate: %s / %s\n", pgc_error(e->c[0]), pgc_error(e->c[1]));
        return -1;
    }
    *state = e;
    return 0;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    if (e == NULL)
        return 0;
    pgc_free(e->c[0]);
    pgc_free(e->c[1]);
    event_base_free(e->base);
    h_pg_free(e->pg);
    free(e);
    return 0;
}

static void test_migrate(void **state)
{
    struct env *e = *state;
    assert_int_equal(h_pg_scalar(e->pg, "SELECT max(version) FROM schema_version"),
                     pgs_schema_latest());
    assert_int_equal(h_pg_scalar(e->pg, "SELECT count(*) FROM schema_version"), 1);
    struct migrated m = {0};
    pgs_migrate(e->c[0], on_migrated, &m);
    assert_true(run_until(e->base, &m.done, 1, 10000));
    assert_int_equal(m.ok, 1);
    assert_int_equal(m.version[0], pgs_schema_latest());
    assert_int_equal(h_pg_scalar(e->pg, "SELECT count(*) FROM schema_version"), 1);
    /* A database a newer build migrated is refused, and left as it is. */
    assert_int_equal(h_pg_exec(e->pg, "UPDATE schema_version SET version = version + 1"),
                     0);
    struct migrated newer = {0};
    pgs_migrate(e->c[0], on_migrated, &newer);
    assert_true(run_until(e->base, &newer.done, 1, 10000));
    assert_int_equal(newer.ok, 0);
    assert_int_equal(h_pg_scalar(e->pg, "SELECT max(version) FROM schema_version"),
                     pgs_schema_latest() + 1);
    assert_int_equal(h_pg_exec(e->pg, "UPDATE schema_version SET version = version - 1"),
                     0);
    assert_int_equal(h_pg_scalar(e->pg, "SELECT count(*) FROM pg_tables WHERE tablename"
                                        " IN ('skus', 'segments', 'orders')"),
                     3);
}

/* ---- selling out: one small state machine per order ----------------------------- */

enum scheme { ROW, LEASE, OPTIMISTIC, ATOMIC };

/* An order's states. */
enum ostate {
    O_PICK,     /* choose the next segment to try (or check whether stock is left) */
    O_TAKE,     /* row: take sent; lease: take sent; optimistic: read sent */
    O_DEDUCT,   /* the deduction sent */
    O_STOCKS,   /* every segment tried: reading what is left */
    O_RETRY,    /* stock is left but was held: waiting a moment */
    O_HOLD,     /* row: holding the segment's row lock for hold_ms */
    O_SOLD,     /* answered: sold */
    O_SOLD_OUT, /* answered: none left */
    O_FAILED,   /* answered: no answer from the store */
};

struct sellout;

struct order {
    struct sellout *s;
    pgc_conn *c;
    int idx;
    enum ostate st;
    int seg, tried;
    char id[32], token[32];
    unsigned long long txn;
    long long version;
    struct event *timer;
};

struct sellout {
    enum scheme scheme;
    const char *sku;
    int segments;
    int answered;
    long long sold;
    int conflicts, busy;
    pgp_pool *pool; /* row: each order's connection picked from it */
    int hold_ms;    /* row: the hold between the lock and the deduction */
    int holding, most_holding;
};

static void order_step(struct order *o);
static void on_deducted(void *arg, int rc, const struct pgs_res *r);

static void order_done(struct order *o, enum ostate st)
{
    o->st = st;
    if (st == O_SOLD)
        o->s->sold++;
    o->s->answered++;
}

static void on_order_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct order *o = arg;
    if (o->st == O_HOLD) {
        static const char record[] = "{\"sku\":\"test\",\"qty\":1}";
        o->s->holding--;
        o->st = O_DEDUCT;
        pgs_row_deduct(o->c, o->txn, o->s->sku, o->seg, o->id, 1, record, on_deducted, o);
        return;
    }
    o->st = O_PICK;
    o->tried = 0;
    order_step(o);
}

static void on_left(void *arg, int rc, int n, const long long *stocks)
{
    struct order *o = arg;
    long long left = 0;
    for (int i = 0; rc == 0 && i < n; i++)
        left += stocks[i];
    if (rc != 0) {
        order_done(o, O_FAILED);
    } else if (left == 0) {
        order_done(o, O_SOLD_OUT);
    } else {
        o->st = O_RETRY;
        struct timeval tv = {0, 2000};
        evtimer_add(o->timer, &tv);
    }
}

static void on_deducted(void *arg, int rc, const struct pgs_res *r)
{
    struct order *o = arg;
    if (rc != 0) {
        order_done(o, O_FAILED);
        return;
    }
    switch (r->code) {
    case PGS_OK:
        order_done(o, O_SOLD);
        return;
    case PGS_CONFLICT:
        o->s->conflicts++;
        o->st = O_PICK; /* read the same segment again */
        o->tried--;
        order_step(o);
        return;
    default: /* SHORT, FENCED: the next segment */
        o->st = O_PICK;
        order_step(o);
        return;
    }
}

static void on_taken(void *arg, int rc, const struct pgs_res *r)
{
    struct order *o = arg;
    if (rc != 0) {
        order_done(o, O_FAILED);
        return;
    }
    if (r->code != PGS_OK) {
        if (r->code == PGS_BUSY)
            o->s->busy++;
        o->st = O_PICK;
        if (o->s->scheme == ROW) /* SKIP LOCKED found none free with stock */
            o->tried = o->s->segments;
        order_step(o);
        return;
    }
    static const char record[] = "{\"sku\":\"test\",\"qty\":1}";
    o->st = O_DEDUCT;
    switch (o->s->scheme) {
    case ROW:
        o->seg = r->seg;
        if (o->s->hold_ms > 0) {
            o->st = O_HOLD;
            o->txn = r->txn;
            if (++o->s->holding > o->s->most_holding)
                o->s->most_holding = o->s->holding;
            struct timeval tv = {0, o->s->hold_ms * 1000};
            evtimer_add(o->timer, &tv);
            return;
        }
        pgs_row_deduct(o->c, r->txn, o->s->sku, r->seg, o->id, 1, record, on_deducted, o);
        break;
    case LEASE:
        if (r->stock < 1) {
            pgs_lease_release(o->c, o->s->sku, o->seg, o->token, NULL, NULL);
            o->st = O_PICK;
            order_step(o);
            return;
        }
        pgs_lease_deduct(o->c, o->s->sku, o->seg, o->token, o->id, 1, record, 0,
                         on_deducted, o);
        break;
    case OPTIMISTIC:
        if (r->stock < 1) {
            o->st = O_PICK;
            order_step(o);
            return;
        }
        pgs_opt_deduct(o->c, o->s->sku, o->seg, r->version, o->id, 1, record, on_deducted,
                       o);
        break;
    case ATOMIC:
        break;
    }
}

static void order_step(struct order *o)
{
    static const char record[] = "{\"sku\":\"test\",\"qty\":1}";
    if (o->st != O_PICK)
        return;
    if (o->tried >= o->s->segments) {
        o->st = O_STOCKS;
        pgs_stocks_read(o->c, o->s->sku, on_left, o);
        return;
    }
    o->seg = (o->idx + o->tried) % o->s->segments;
    o->tried++;
    o->st = O_TAKE;
    switch (o->s->scheme) {
    case ROW:
        if (o->s->pool != NULL)
            o->c = pgp_pick(o->s->pool);
        pgs_row_take(o->c, o->s->sku, -1, 1, on_taken, o);
        break;
    case LEASE:
        pgs_lease_take(o->c, o->s->sku, o->seg, o->token, 2000, on_taken, o);
        break;
    case OPTIMISTIC:
        pgs_opt_read(o->c, o->s->sku, o->seg, on_taken, o);
        break;
    case ATOMIC:
        o->st = O_DEDUCT;
        pgs_atomic_deduct(o->c, o->s->sku, o->seg, o->id, 1, record, on_deducted, o);
        break;
    }
}

#define SELL_ORDERS 160
#define SELL_STOCK 100
#define SELL_SEGMENTS 5

static void sell_out(struct env *e, enum scheme scheme, const char *sku)
{
    static const char *const modes[] = {"lock", "lock", "lock", "atomic"};
    static const char *const locks[] = {"row", "lease", "optimistic", ""};
    put_sku(e, sku, SELL_STOCK, SELL_SEGMENTS, modes[scheme], locks[scheme]);
    struct sellout s = {.scheme = scheme, .sku = sku, .segments = SELL_SEGMENTS};
    struct order *o = calloc(SELL_ORDERS, sizeof *o);
    for (int i = 0; i < SELL_ORDERS; i++) {
        o[i] = (struct order){.s = &s, .c = e->c[i % 2], .idx = i, .st = O_PICK};
        snprintf(o[i].id, sizeof o[i].id, "%s-%d", sku, i);
        snprintf(o[i].token, sizeof o[i].token, "tok-%d", i);
        o[i].timer = evtimer_new(e->base, on_order_timer, &o[i]);
    }
    struct pgc_stats st0;
    pgc_stats(e->c[0], &st0);
    for (int i = 0; i < SELL_ORDERS; i++)
        order_step(&o[i]);
    bool all = run_until(e->base, &s.answered, SELL_ORDERS, 20000);
    int failed = 0, sold = 0;
    for (int i = 0; i < SELL_ORDERS; i++) {
        failed += o[i].st == O_FAILED;
        sold += o[i].st == O_SOLD;
        event_free(o[i].timer);
    }
    free(o);
    struct pgc_stats st;
    pgc_stats(e->c[0], &st);
    st.calls -= st0.calls;
    st.writes -= st0.writes;
    printf("%s: %lld sold, %d answered, %d failed, %d conflicts, %d busy;"
           " connection 0: %lld calls in %lld writes\n",
           sku, s.sold, s.answered, failed, s.conflicts, s.busy, st.calls, st.writes);
    assert_true(all);
    assert_int_equal(failed, 0);
    assert_int_equal(sold, SELL_STOCK);
    audit(e, sku, SELL_STOCK, SELL_STOCK);
    if (scheme == OPTIMISTIC) /* 80 orders per connection read the same versions */
        assert_true(s.conflicts > 0);
}

static void test_sellout_row(void **state)
{
    sell_out(*state, ROW, "sell-row");
}

static void test_sellout_lease(void **state)
{
    sell_out(*state, LEASE, "sell-lease");
}

static void test_sellout_optimistic(void **state)
{
    sell_out(*state, OPTIMISTIC, "sell-opt");
}

static void test_sellout_atomic(void **state)
{
    sell_out(*state, ATOMIC, "sell-atomic");
}

struct got {
    int done, found;
    char sku[16], record[32];
    long long qty;
};

static void on_got(void *arg, int rc, const struct pgs_order *ord)
{
    struct got *g = arg;
    if (rc == 0 && ord != NULL) {
        g->found++;
        snprintf(g->sku, sizeof g->sku, "%s", ord->sku);
        snprintf(g->record, sizeof g->record, "%s", ord->record);
        g->qty = ord->qty;
    }
    g->done++;
}

/* row with a hold, on a pool of connections: while one transaction holds a
 * connection, the others take theirs on the rest. */
#define POOL_SIZE 3
#define POOL_ORDERS 40
#define POOL_STOCK 30

static void test_pool_row_hold(void **state)
{
    struct env *e = *state;
    put_sku(e, "pool-row", POOL_STOCK, POOL_SIZE, "lock", "row");
    const struct pgc_opts opts = {
        .conninfo = h_pg_conninfo(e->pg), .lock_ttl_ms = 5000, .call_timeout_ms = 10000};
    pgp_pool *pool = pgp_create(e->base, &opts, POOL_SIZE);
    struct sellout s = {.scheme = ROW,
                        .sku = "pool-row",
                        .segments = POOL_SIZE,
                        .pool = pool,
                        .hold_ms = 10};
    struct order *o = calloc(POOL_ORDERS, sizeof *o);
    for (int i = 0; i < POOL_ORDERS; i++) {
        o[i] = (struct order){.s = &s, .c = pgp_at(pool, 0), .idx = i, .st = O_PICK};
        snprintf(o[i].id, sizeof o[i].id, "pool-%d", i);
        o[i].timer = evtimer_new(e->base, on_order_timer, &o[i]);
    }
    for (int i = 0; i < POOL_ORDERS; i++)
        order_step(&o[i]);
    bool all = run_until(e->base, &s.answered, POOL_ORDERS, 30000);
    int failed = 0, sold = 0;
    for (int i = 0; i < POOL_ORDERS; i++) {
        failed += o[i].st == O_FAILED;
        sold += o[i].st == O_SOLD;
        event_free(o[i].timer);
    }
    free(o);
    printf("pool-row: %d sold, %d failed, at most %d held at once\n", sold, failed,
           s.most_holding);
    assert_true(all);
    assert_int_equal(failed, 0);
    assert_int_equal(sold, POOL_STOCK);
    /* One connection would hold one at a time. */
    assert_true(s.most_holding >= 2 && s.most_holding <= POOL_SIZE);
    audit(e, "pool-row", POOL_STOCK, POOL_STOCK);
    pgp_free(pool);
}

/* ---- idempotent order ids ---------------------------------------------------------- */

static void test_idempotent_ids(void **state)
{
    struct env *e = *state;
    put_sku(e, "idem", 10, 1, "atomic", "");
    /* The same id from both connections at the same moment: one sale. */
    struct wait a = {0}, b = {0};
    pgs_atomic_deduct(e->c[0], "idem", 0, "idem-1", 1, "{\"n\":1}", on_res, &a);
    pgs_atomic_deduct(e->c[1], "idem", 0, "idem-1", 1, "{\"n\":1}", on_res, &b);
    wait_for(e->base, &a);
    wait_for(e->base, &b);
    assert_int_equal(a.rc, 0);
    assert_int_equal(b.rc, 0);
    assert_true((a.r.code == PGS_OK && b.r.code == PGS_EXISTS) ||
                (a.r.code == PGS_EXISTS && b.r.code == PGS_OK));
    audit(e, "idem", 10, 1);

    /* A replay of it through each other scheme writes nothing either. */
    struct wait w = {0};
    pgs_lease_take(e->c[0], "idem", 0, "tok", 2000, on_res, &w);
    wait_for(e->base, &w);
    assert_int_equal(w.r.code, PGS_OK);
    w = (struct wait){0};
    pgs_lease_deduct(e->c[0], "idem", 0, "tok", "idem-1", 1, "{}", 1, on_res, &w);
    wait_for(e->base, &w);
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.r.code, PGS_EXISTS);

    w = (struct wait){0};
    pgs_opt_read(e->c[0], "idem", 0, on_res, &w);
    wait_for(e->base, &w);
    long long v = w.r.version;
    w = (struct wait){0};
    pgs_opt_deduct(e->c[0], "idem", 0, v, "idem-1", 1, "{}", on_res, &w);
    wait_for(e->base, &w);
    assert_int_equal(w.r.code, PGS_EXISTS);

    w = (struct wait){0};
    pgs_row_take(e->c[0], "idem", 0, 1, on_res, &w);
    wait_for(e->base, &w);
    assert_int_equal(w.r.code, PGS_OK);
    unsigned long long txn = w.r.txn;
    w = (struct wait){0};
    pgs_row_deduct(e->c[0], txn, "idem", 0, "idem-1", 1, "{}", on_res, &w);
    wait_for(e->base, &w);
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.r.code, PGS_EXISTS);
    audit(e, "idem", 10, 1);

    /* The record reads back as written; an unknown id reads as none. */
    struct got g = {0};
    pgs_order_read(e->c[1], "idem-1", on_got, &g);
    pgs_order_read(e->c[1], "idem-none", on_got, &g);
    assert_true(run_until(e->base, &g.done, 2, 10000));
    assert_int_equal(g.found, 1);
    assert_string_equal(g.sku, "idem");
    assert_string_equal(g.record, "{\"n\":1}");
    assert_int_equal(g.qty, 1);
    /* The connection is free again after the rolled-back transaction. */
    w = (struct wait){0};
    pgs_atomic_deduct(e->c[0], "idem", 0, "idem-2", 1, "{}", on_res, &w);
    wait_for(e->base, &w);
    assert_int_equal(w.r.code, PGS_OK);
    audit(e, "idem", 10, 2);
}

/* ---- row: a frozen holder -----------------------------------------------------------
 */

#define FROZEN_TTL_MS 400

static void test_row_frozen_holder(void **state)
{
    struct env *e = *state;
    put_sku(e, "frozen", 5, 1, "lock", "row");
    /* The holder: its own loop, so that not running it is a frozen process. */
    struct event_base *hb = event_base_new();
    pgc_conn *holder = connect_to(hb, e->pg, FROZEN_TTL_MS);
    struct wait w = {0};
    pgs_row_take(holder, "frozen", 0, 1, on_res, &w);
    wait_for(hb, &w);
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.r.code, PGS_OK);
    unsigned long long txn = w.r.txn;
    long long frozen_at = h_now_ms();

    /* Held: another seller is refused at once. */
    struct wait b = {0};
    pgs_row_take(e->c[0], "frozen", 0, 1, on_res, &b);
    wait_for(e->base, &b);
    assert_int_equal(b.r.code, PGS_BUSY);

    /* The server ends the idle holder's session: the other sells everything. */
    int sold = 0;
    while (sold < 5 && h_now_ms() - frozen_at < 5000) {
        struct wait t = {0};
        pgs_row_take(e->c[0], "frozen", 0, 1, on_res, &t);
        wait_for(e->base, &t);
        if (t.rc != 0 || t.r.code != PGS_OK) {
            run_for(e->base, 20);
            continue;
        }
        char id[32];
        snprintf(id, sizeof id, "frozen-%d", sold);
        struct wait d = {0};
        pgs_row_deduct(e->c[0], t.r.txn, "frozen", 0, id, 1, "{}", on_res, &d);
        wait_for(e->base, &d);
        assert_int_equal(d.rc, 0);
        assert_int_equal(d.r.code, PGS_OK);
        sold++;
    }
    assert_int_equal(sold, 5);
    assert_true(h_now_ms() - frozen_at >= FROZEN_TTL_MS - 50);
    /* It was the server that ended the holder's session (the holder never ran). */
    assert_int_equal(h_pg_scalar(e->pg, "SELECT count(*) FROM pg_stat_activity"
                                        " WHERE state LIKE 'idle in transaction%'"),
                     0);

    /* The holder wakes up and commits: it fails, and writes nothing. */
    struct wait late = {0};
    pgs_row_deduct(holder, txn, "frozen", 0, "frozen-late", 1, "{}", on_res, &late);
    wait_for(hb, &late);
    printf("late commit: rc %d (%s)\n", late.rc, pgc_error(holder));
    assert_int_equal(late.rc, -1);
    assert_int_equal(
        h_pg_scalar(e->pg, "SELECT count(*) FROM orders WHERE order_id = 'frozen-late'"),
        0);
    audit(e, "frozen", 5, 5);
    pgc_free(holder);
    event_base_free(hb);
}

/* ---- lease: expiry and fencing ------------------------------------------------------
 */

static struct pgs_res lease_call(struct env *e, int op, const char *token, const char *id)
{
    struct wait w = {0};
    switch (op) {
    case 0:
        pgs_lease_take(e->c[0], "lease", 0, token, 1000, on_res, &w);
        break;
    case 1:
        pgs_lease_deduct(e->c[0], "lease", 0, token, id, 1, "{}", 1, on_res, &w);
        break;
    case 2:
        pgs_lease_release(e->c[0], "lease", 0, token, on_res, &w);
        break;
    default:
        pgs_lease_renew(e->c[0], "lease", 0, token, 1000, on_res, &w);
        break;
    }
    wait_for(e->base, &w);
    assert_int_equal(w.rc, 0);
    return w.r;
}

static void test_lease_fenced(void **state)
{
    struct env *e = *state;
    put_sku(e, "lease", 10, 1, "lock", "lease");
    struct pgs_res a = lease_call(e, 0, "A", NULL);
    assert_int_equal(a.code, PGS_OK);
    assert_int_equal(lease_call(e, 0, "B", NULL).code, PGS_BUSY);
    assert_int_equal(lease_call(e, 1, "B", "lease-b0").code, PGS_FENCED);
    assert_int_equal(lease_call(e, 2, "B", NULL).code, PGS_FENCED); /* owner only */
    assert_int_equal(lease_call(e, 1, "A", "lease-a1").code, PGS_OK);
    assert_int_equal(lease_call(e, 3, "A", NULL).code, PGS_OK);

    /* A stops (past its 1000 ms): its next write is fenced, though nobody took over. */
    run_for(e->base, 1200);
    assert_int_equal(lease_call(e, 1, "A", "lease-a2").code, PGS_FENCED);
    assert_int_equal(lease_call(e, 3, "A", NULL).code, PGS_FENCED);
    struct pgs_res b = lease_call(e, 0, "B", NULL);
    assert_int_equal(b.code, PGS_OK);
    assert_true(b.fence > a.fence);
    assert_int_equal(lease_call(e, 1, "A", "lease-a3").code, PGS_FENCED);
    assert_int_equal(lease_call(e, 1, "B", "lease-b1").code, PGS_OK);
    assert_int_equal(lease_call(e, 2, "A", NULL).code, PGS_FENCED);
    assert_int_equal(lease_call(e, 2, "B", NULL).code, PGS_OK);
    assert_int_equal(h_pg_scalar(e->pg, "SELECT count(*) FROM orders WHERE sku = 'lease'"
                                        " AND order_id IN ('lease-a2', 'lease-a3', "
                                        "'lease-b0')"),
                     0);
    audit(e, "lease", 10, 2);
}

/* ---- optimistic: a lost race ------------------------------------------------------- */

static void test_optimistic_conflict(void **state)
{
    struct env *e = *state;
    put_sku(e, "opt", 10, 1, "lock", "optimistic");
    struct wait r0 = {0}, r1 = {0};
    pgs_opt_read(e->c[0], "opt", 0, on_res, &r0);
    pgs_opt_read(e->c[1], "opt", 0, on_res, &r1);
    wait_for(e->base, &r0);
    wait_for(e->base, &r1);
    assert_int_equal(r0.r.version, r1.r.version);
    /* Both deduct against the version they read, at the same moment. */
    struct wait d0 = {0}, d1 = {0};
    pgs_opt_deduct(e->c[0], "opt", 0, r0.r.version, "opt-0", 3, "{}", on_res, &d0);
    pgs_opt_deduct(e->c[1], "opt", 0, r1.r.version, "opt-1", 3, "{}", on_res, &d1);
    wait_for(e->base, &d0);
    wait_for(e->base, &d1);
    assert_int_equal(d0.rc, 0);
    assert_int_equal(d1.rc, 0);
    struct wait *won = d0.r.code == PGS_OK ? &d0 : &d1;
    struct wait *lost = won == &d0 ? &d1 : &d0;
    assert_int_equal(won->r.code, PGS_OK);
    assert_int_equal(lost->r.code, PGS_CONFLICT);
    assert_int_equal(won->r.stock, 7);
    assert_int_equal(won->r.version, r0.r.version + 1);
    assert_int_equal(
        h_pg_scalar(e->pg, "SELECT sum(stock) FROM segments WHERE sku = 'opt'"), 7);
    assert_int_equal(h_pg_scalar(e->pg, "SELECT count(*) FROM orders WHERE sku = 'opt'"),
                     1);
    /* The loser reads again and wins; short is short, not a conflict. */
    struct wait again = {0};
    pgs_opt_read(e->c[0], "opt", 0, on_res, &again);
    wait_for(e->base, &again);
    struct wait d2 = {0};
    pgs_opt_deduct(e->c[0], "opt", 0, again.r.version, "opt-2", 3, "{}", on_res, &d2);
    wait_for(e->base, &d2);
    assert_int_equal(d2.r.code, PGS_OK);
    struct wait d3 = {0};
    pgs_opt_deduct(e->c[0], "opt", 0, d2.r.version, "opt-3", 5, "{}", on_res, &d3);
    wait_for(e->base, &d3);
    assert_int_equal(d3.r.code, PGS_SHORT);
    assert_int_equal(d3.r.stock, 4);
    audit_rows(e, "opt", 10, 6, 2);
}

/* ---- a backend killed ----------------------------------------------------------------
 */

static void test_backend_killed(void **state)
{
    struct env *e = *state;
    put_sku(e, "killed", 10, 1, "atomic", "");
    /* A call stuck behind a lock, then its backend killed by another session. */
    struct event_base *hb = event_base_new();
    pgc_conn *holder = connect_to(hb, e->pg, 5000);
    struct wait t = {0};
    pgs_row_take(holder, "killed", 0, 1, on_res, &t);
    wait_for(hb, &t);
    assert_int_equal(t.r.code, PGS_OK);
    struct wait w = {0};
    pgs_atomic_deduct(e->c[1], "killed", 0, "killed-1", 1, "{}", on_res, &w);
    run_for(e->base, 100);
    assert_int_equal(w.done, 0); /* waiting for the row lock */
    assert_int_equal(h_pg_exec(e->pg, "SELECT pg_terminate_backend(pid) FROM"
                                      " pg_stat_activity WHERE wait_event_type = 'Lock'"),
                     0);
    wait_for(e->base, &w);
    assert_int_equal(w.rc, -1);
    pgs_row_release(holder, t.r.txn, NULL, NULL);
    run_for(hb, 50);
    /* The connection comes back; the id makes the retry safe. */
    struct wait r = {0};
    pgs_atomic_deduct(e->c[1], "killed", 0, "killed-1", 1, "{}", on_res, &r);
    wait_for(e->base, &r);
    assert_int_equal(r.rc, 0);
    assert_true(r.r.code == PGS_OK || r.r.code == PGS_EXISTS);
    audit(e, "killed", 10, 1);
    pgc_free(holder);
    event_base_free(hb);
}

/* ---- a call's deadline, and a restarted server ---------------------------------------
 */

static void test_call_deadline(void **state)
{
    struct env *e = *state;
    put_sku(e, "deadline", 10, 1, "atomic", "");
    struct event_base *hb = event_base_new();
    pgc_conn *holder = connect_to(hb, e->pg, 5000);
    struct wait t = {0};
    pgs_row_take(holder, "deadline", 0, 1, on_res, &t);
    wait_for(hb, &t);
    assert_int_equal(t.r.code, PGS_OK);

    const struct pgc_opts o = {.conninfo = h_pg_conninfo(e->pg), .call_timeout_ms = 300};
    pgc_conn *d = pgc_create(e->base, &o);
    struct wait w = {0};
    long long t0 = h_now_ms();
    pgs_atomic_deduct(d, "deadline", 0, "dl-1", 1, "{}", on_res, &w);
    wait_for(e->base, &w);
    long long took = h_now_ms() - t0;
    /* Answered at its deadline, not when the lock goes: a bound 10x the deadline. */
    assert_int_equal(w.rc, -1);
    assert_true(took >= 250 && took < 3000);
    struct pgc_stats st;
    pgc_stats(d, &st);
    assert_int_equal(st.timeouts, 1);

    pgs_row_release(holder, t.r.txn, NULL, NULL);
    run_for(hb, 50);
    /* The outcome was unknown: the statement may have run once the lock went. The same
     * id makes the retry safe either way. */
    struct wait r = {0};
    pgs_atomic_deduct(d, "deadline", 0, "dl-1", 1, "{}", on_res, &r);
    wait_for(e->base, &r);
    assert_int_equal(r.rc, 0);
    assert_true(r.r.code == PGS_OK || r.r.code == PGS_EXISTS);
    audit(e, "deadline", 10, 1);
    pgc_free(d);
    pgc_free(holder);
    event_base_free(hb);
}

static void test_server_restart(void **state)
{
    struct env *e = *state;
    put_sku(e, "restart", 10, 1, "atomic", "");
    struct pgc_stats before;
    pgc_stats(e->c[0], &before);
    assert_int_equal(h_pg_stop(e->pg), 0);
    run_for(e->base, 100); /* the connections see it close */
    assert_false(pgc_ready(e->c[0]));
    /* A call made while the server is down waits for the next connection. */
    struct wait w = {0};
    pgs_atomic_deduct(e->c[0], "restart", 0, "rs-1", 1, "{}", on_res, &w);
    run_for(e->base, 200);
    assert_int_equal(w.done, 0);
    assert_int_equal(h_pg_restart(e->pg), 0);
    wait_for(e->base, &w);
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.r.code, PGS_OK);
    struct pgc_stats after;
    pgc_stats(e->c[0], &after);
    assert_true(after.connects > before.connects);
    assert_true(after.failures > before.failures);
    audit(e, "restart", 10, 1);
}

/* ---- answered once, never inside the call, and on close ---------------------------- */

static void test_answered_on_close(void **state)
{
    struct env *e = *state;
    put_sku(e, "close", 10, 1, "atomic", "");
    struct event_base *b = event_base_new();
    pgc_conn *c = connect_to(b, e->pg, 5000);
    struct wait w[4] = {{0}};
    /* Queued before the connection is up: none is answered from inside the call. */
    pgs_atomic_deduct(c, "close", 0, "close-0", 1, "{}", on_res, &w[0]);
    pgs_opt_read(c, "close", 0, on_res, &w[1]);
    assert_int_equal(w[0].done + w[1].done, 0);
    wait_for(b, &w[0]);
    wait_for(b, &w[1]);
    assert_int_equal(w[0].r.code, PGS_OK);
    /* Sent and unsent calls alike are answered -1, once, when the handle is freed. */
    pgs_row_take(c, "close", 0, 1, on_res, &w[2]);
    pgs_atomic_deduct(c, "close", 0, "close-1", 1, "{}", on_res, &w[3]);
    event_base_loop(b, EVLOOP_NONBLOCK); /* sends them */
    pgc_free(c);
    for (int i = 2; i < 4; i++) {
        assert_int_equal(w[i].done, 1);
        assert_int_equal(w[i].rc, -1);
    }
    run_for(b, 50);
    assert_int_equal(w[2].done + w[3].done, 2);
    event_base_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate),
        cmocka_unit_test(test_sellout_row),
        cmocka_unit_test(test_sellout_lease),
        cmocka_unit_test(test_sellout_optimistic),
        cmocka_unit_test(test_sellout_atomic),
        cmocka_unit_test(test_pool_row_hold),
        cmocka_unit_test(test_idempotent_ids),
        cmocka_unit_test(test_row_frozen_holder),
        cmocka_unit_test(test_lease_fenced),
        cmocka_unit_test(test_optimistic_conflict),
        cmocka_unit_test(test_backend_killed),
        cmocka_unit_test(test_call_deadline),
        cmocka_unit_test(test_answered_on_close),
        cmocka_unit_test(test_server_restart),
    };
    int failed =
        cmocka_run_group_tests_name("pg_store", tests, group_setup, group_teardown);
    return h_exit_status(failed);
}
