/* it_pg_sellout.c -- each of the PostgreSQL store's four schemes (row, lease,
 * optimistic, atomic) sells a SKU out exactly against a real PostgreSQL 15: many
 * concurrent orders on 2 pipelined connections, remaining + sold = initial, one order
 * row per sale, no segment below zero; and row orders holding their lock on a pool of
 * connections hold several at once.
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
#include "tests/pg_env.h"

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

static void sell_out(struct pg_env *e, enum scheme scheme, const char *sku)
{
    static const char *const modes[] = {"lock", "lock", "lock", "atomic"};
    static const char *const locks[] = {"row", "lease", "optimistic", ""};
    pge_put_sku(e, sku, SELL_STOCK, SELL_SEGMENTS, modes[scheme], locks[scheme]);
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
    bool all = pge_run_until(e->base, &s.answered, SELL_ORDERS, 20000);
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
    pge_audit(e, sku, SELL_STOCK, SELL_STOCK);
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

/* row with a hold, on a pool of connections: while one transaction holds a
 * connection, the others take theirs on the rest. */
#define POOL_SIZE 3
#define POOL_ORDERS 40
#define POOL_STOCK 30

static void test_pool_row_hold(void **state)
{
    struct pg_env *e = *state;
    pge_put_sku(e, "pool-row", POOL_STOCK, POOL_SIZE, "lock", "row");
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
    bool all = pge_run_until(e->base, &s.answered, POOL_ORDERS, 30000);
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
    pge_audit(e, "pool-row", POOL_STOCK, POOL_STOCK);
    pgp_free(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sellout_row),        cmocka_unit_test(test_sellout_lease),
        cmocka_unit_test(test_sellout_optimistic), cmocka_unit_test(test_sellout_atomic),
        cmocka_unit_test(test_pool_row_hold),
    };
    int failed = cmocka_run_group_tests_name("pg_sellout", tests, pge_group_setup,
                                             pge_group_teardown);
    return h_exit_status(failed);
}
