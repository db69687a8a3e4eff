/* test_engine_mem.c -- the engine's state machine (segments/engine.c) over a store that
 * is not Redis (tests/memstore.h): test_engine.c's cases that apply to any store, and
 * what a lease lost in the store does (the DEDUCT fenced), a busy segment fallen
 * through (and waited for until the deadline), a fence number refused, a store that gives
 * no answer, and the capability bits in place of a backend's name (STORE_CAP_KEEP).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/engine.h"
#include "segments/stats.h"
#include "tests/engine_sync.h"
#include "tests/harness.h"
#include "tests/memstore.h"

#define TTL_MS 300

struct fixture {
    inv *v;
    struct event_base *base;
    store *st; /* the engine's (engine_free frees it) */
    engine *e;
};

/* An engine over a memstore offering `caps`, whose orders wait `wait_ms` for a lock,
 * as loop 0 of `homes`. The inv's Redis is a unix socket nobody listens on: the engine
 * never asks it (its store is the memstore). */
static struct fixture *make_loop(unsigned caps, int wait_ms, int homes)
{
    struct fixture *f = calloc(1, sizeof *f);
    struct inv_options opt = {.redis_unix = "/nonexistent/memstore.sock",
                              .redis_timeout_ms = 2000,
                              .lock_ttl_ms = TTL_MS,
                              .lock_wait_ms = wait_ms,
                              .meta_cache_ms = 100};
    char err[128];
    f->v = inv_create(&opt, err, sizeof err);
    assert_non_null(f->v);
    f->base = event_base_new();
    f->st = mem_create(f->base, caps);
    f->e = engine_create_on(f->v, f->base, 0, homes, f->st);
    return f;
}

static struct fixture *make_waiting(unsigned caps, int wait_ms)
{
    return make_loop(caps, wait_ms, 1);
}

static struct fixture *make(unsigned caps)
{
    return make_waiting(caps, 3000);
}

static int setup(void **state)
{
    *state = make(STORE_CAP_KEEP | STORE_CAP_FENCE);
    return 0;
}

static void destroy(struct fixture *f)
{
    engine_free(f->e);
    event_base_free(f->base);
    inv_free(f->v);
    free(f);
}

static int teardown(void **state)
{
    destroy(*state);
    return 0;
}

static void put(struct fixture *f, const char *sku, long long stock, int n,
                const char *mode, int hold_ms)
{
    mem_put(f->st, sku, stock, n, mode, hold_ms, false);
    engine_invalidate(f->e, sku); /* as an admin write does */
}

static void audit(struct fixture *f, const char *sku, long long initial, int n,
                  long long sold)
{
    long long left = 0;
    for (int i = 0; i < n; i++) {
        assert_true(mem_stock(f->st, sku, i) >= 0);
        left += mem_stock(f->st, sku, i);
    }
    assert_int_equal(mem_sold(f->st, sku), sold);
    assert_int_equal(left + sold, initial);
    assert_int_equal(mem_locks_held(f->st, sku), 0);
}

static long long stat(struct fixture *f, enum stat_id id)
{
    long long s[STAT__COUNT];
    stat_snapshot(f->v, s);
    return s[id];
}

static void exact_sell_out(void **state)
{
    struct fixture *f = *state;
    put(f, "hot", 1000, 20, "lock", 0);
    struct es_tally t;
    es_run(f->e, f->base, "hot", 1, 1500, NULL, &t);
    assert_int_equal(t.by[INV_OK], 1000);
    assert_int_equal(t.by[INV_SOLD_OUT], 500);
    audit(f, "hot", 1000, 20, 1000);
}

static void hold_hands_claims_over_fifo(void **state)
{
    struct fixture *f = *state;
    put(f, "one", 100, 1, "lock", 20);
    long long waits = stat(f, STAT_LOCK_WAITS);
    struct es_tally t;
    es_run(f->e, f->base, "one", 1, 20, NULL, &t);
    assert_int_equal(t.by[INV_OK], 20);
    assert_true(stat(f, STAT_LOCK_WAITS) > waits);
    audit(f, "one", 100, 1, 20);
}

/* With STORE_CAP_KEEP the lock goes on from order to order (fewer ACQUIREs than
 * orders); a store without it is never asked to keep: one ACQUIRE per order. The bit,
 * not the backend's name, decides. */
static void hold_passes_the_lock_on_where_the_store_keeps(void **state)
{
    struct fixture *f = *state;
    put(f, "kept", 100, 1, "lock", 20);
    long long acquires = mem_count(f->st, MEM_ACQUIRES);
    struct es_tally t;
    es_run(f->e, f->base, "kept", 1, 20, NULL, &t);
    assert_int_equal(t.by[INV_OK], 20);
    acquires = mem_count(f->st, MEM_ACQUIRES) - acquires;
    fprintf(stderr, "keep: 20 orders, %lld ACQUIREs\n", acquires);
    assert_true(acquires >= 4 && acquires < 20);
    audit(f, "kept", 100, 1, 20);

    struct fixture *g = make(0);
    put(g, "kept", 100, 1, "lock", 20);
    es_run(g->e, g->base, "kept", 1, 20, NULL, &t);
    assert_int_equal(t.by[INV_OK], 20);
    fprintf(stderr, "no keep: 20 orders, %lld ACQUIREs\n",
            mem_count(g->st, MEM_ACQUIRES));
    assert_true(mem_count(g->st, MEM_ACQUIRES) >= 20);
    audit(g, "kept", 100, 1, 20);
    destroy(g);
}

/* The engine as loop 0 of 2 (segment 0 at home, segment 1 away), its orders waiting:
 * the lock of the segment away from home goes on to the loop's next waiting order as
 * well (a few in a row, then it goes back free for the loop it is at home on). Before,
 * a hold away from home ended in a release with the claim freed, and the orders
 * waiting here (for a claim handed on) left the segment idle until a round of theirs
 * found it. */
static void kept_away_from_home(void **state)
{
    (void)state;
    struct fixture *f = make_loop(STORE_CAP_KEEP | STORE_CAP_FENCE, 3000, 2);
    put(f, "away", 100, 2, "lock", 5);
    struct es_tally t;
    es_run(f->e, f->base, "away", 1, 40, NULL, &t);
    assert_int_equal(t.by[INV_OK], 40);
    long long acquires = mem_count(f->st, MEM_ACQUIRES);
    long long away = 50 - mem_stock(f->st, "away", 1);
    fprintf(stderr,
            "loop 0 of 2, 2 segments: 40 orders, %lld sold away from home, %lld ACQUIREs,"
            " %lld handed on\n",
            away, acquires, stat(f, STAT_LOCK_HANDED_ON));
    assert_true(away >= 3);      /* kept there 3 in a row (KEEP_AWAY_MAX); before: 1 */
    assert_true(acquires <= 10); /* at home kept up to 16 orders in a row */
    audit(f, "away", 100, 2, 40);
    destroy(f);
}

static void lease_renewed_past_the_ttl(void **state)
{
    struct fixture *f = *state;
    put(f, "slow", 5, 1, "lock", 3 * TTL_MS);
    long long renewals = stat(f, STAT_LEASE_RENEWALS);
    struct es_tally t;
    es_run(f->e, f->base, "slow", 1, 1, NULL, &t);
    assert_int_equal(t.by[INV_OK], 1);
    assert_true(stat(f, STAT_LEASE_RENEWALS) >= renewals + 2);
    audit(f, "slow", 5, 1, 1);
}

/* The lease runs out in the store during the hold (its clock moved past the TTL before
 * the first renewal) and an intruder takes the lock: the holder's DEDUCT is refused
 * FENCED, writes nothing, leaves the intruder's lock alone, and the order sells once
 * the intruder's lock is gone. */
static void fenced_deduct_after_a_lost_lease(void **state)
{
    struct fixture *f = *state;
    put(f, "lost", 10, 1, "lock", TTL_MS / 6);
    long long fenced = mem_count(f->st, MEM_FENCED);
    long long rejections = stat(f, STAT_FENCED_REJECTIONS);
    struct es_tally t;
    es_start(f->e, "lost", 1, 1, NULL, &t);
    while (mem_locks_held(f->st, "lost") == 0) /* the order holds it now */
        event_base_loop(f->base, EVLOOP_ONCE);
    mem_advance(f->st, TTL_MS + 1);
    assert_int_equal(mem_locks_held(f->st, "lost"), 0); /* the lease ran out */
    mem_take_lock(f->st, "lost", 0, "intruder", TTL_MS / 2);
    es_finish(f->e, f->base, 1, &t);
    assert_int_equal(t.by[INV_OK], 1);
    assert_true(mem_count(f->st, MEM_FENCED) > fenced);
    assert_true(stat(f, STAT_FENCED_REJECTIONS) > rejections);
    audit(f, "lost", 10, 1, 1);
}

/* A segment locked elsewhere (its lock sent with the DEDUCT, hold 0, finds it taken;
 * the DEDUCT is refused FENCED and changes nothing): the orders fall through to the
 * other segment; once that one is sold out, the rest wait for the busy one until
 * their deadline (lock_wait_ms) and answer busy, and the busy segment keeps its
 * stock. */
static void busy_segment_falls_through(void **state)
{
    struct fixture *f = *state;
    put(f, "busy", 20, 2, "lock", 0);
    mem_take_lock(f->st, "busy", 0, "elsewhere", 60000);
    long long skips = stat(f, STAT_BUSY_SKIPS);
    struct es_tally t;
    es_run(f->e, f->base, "busy", 1, 12, NULL, &t);
    assert_int_equal(t.by[INV_OK], 10);
    assert_int_equal(t.by[INV_BUSY], 2);
    assert_true(stat(f, STAT_BUSY_SKIPS) >= skips + 2);
    assert_int_equal(mem_stock(f->st, "busy", 0), 10);
    assert_int_equal(mem_stock(f->st, "busy", 1), 0);
    mem_take_lock(f->st, "busy", 0, "elsewhere", 0); /* gone */
    audit(f, "busy", 20, 2, 10);
}

static void on_reply(void *arg, int rc, struct store_reply *r)
{
    int *code = arg;
    *code = rc < 0 ? -1 : r->code;
}

/* STORE_CAP_FENCE: a write under a lock service's hold names its fence, and the store
 * refuses a lower one than the highest it accepted for the segment. */
static void lower_fence_refused(void **state)
{
    struct fixture *f = *state;
    put(f, "fence", 10, 1, "atomic", 0);
    int code[3] = {-2, -2, -2};
    f->st->ops->deduct(f->st, "fence", 1, 0, "", 7, "a1", "id-f1", 1, "{}", 0, false,
                       on_reply, &code[0]);
    f->st->ops->deduct(f->st, "fence", 1, 0, "", 5, "a2", "id-f2", 1, "{}", 0, false,
                       on_reply, &code[1]);
    f->st->ops->deduct(f->st, "fence", 1, 0, "", 8, "a3", "id-f3", 1, "{}", 0, false,
                       on_reply, &code[2]);
    assert_int_equal(code[0], -2); /* answered on the loop, never inside the call */
    while (code[2] == -2)
        event_base_loop(f->base, EVLOOP_ONCE);
    assert_int_equal(code[0], STORE_OK);
    assert_int_equal(code[1], STORE_FENCED);
    assert_int_equal(code[2], STORE_OK);
    assert_int_equal(mem_sold(f->st, "fence"), 2);
}

static void falls_through_to_every_unit(void **state)
{
    struct fixture *f = *state;
    put(f, "few", 3, 20, "lock", 0);
    struct es_tally t;
    es_run(f->e, f->base, "few", 1, 5, NULL, &t);
    assert_int_equal(t.by[INV_OK], 3);
    assert_int_equal(t.by[INV_SOLD_OUT], 2);
    audit(f, "few", 3, 20, 3);
}

static void replay_conflict_and_multi_segment(void **state)
{
    struct fixture *f = *state;
    put(f, "ids", 20, 20, "lock", 0);
    struct es_tally t;
    es_run(f->e, f->base, "ids", 5, 1, "x", &t); /* no segment holds 5: several */
    assert_int_equal(t.by[INV_OK], 1);
    assert_non_null(strstr(t.last_record, "\"segments\":[{"));
    assert_int_equal(stat(f, STAT_MULTI_SEGMENT) >= 1, 1);
    es_run(f->e, f->base, "ids", 5, 1, "x", &t);
    assert_int_equal(t.by[INV_REPLAYED], 1);
    es_run(f->e, f->base, "ids", 2, 1, "x", &t);
    assert_int_equal(t.by[INV_CONFLICT], 1);
    es_run(f->e, f->base, "ids", 1, 30, NULL, &t); /* sell the rest out */
    assert_int_equal(t.by[INV_OK], 15);
    /* sold out, but a confirmed id gets its record */
    es_run(f->e, f->base, "ids", 5, 1, "x", &t);
    assert_int_equal(t.by[INV_REPLAYED], 1);
    audit(f, "ids", 20, 20, 20);
}

static void atomic_mode(void **state)
{
    struct fixture *f = *state;
    put(f, "atom", 100, 20, "atomic", 0);
    struct es_tally t;
    es_run(f->e, f->base, "atom", 1, 150, NULL, &t);
    assert_int_equal(t.by[INV_OK], 100);
    assert_int_equal(t.by[INV_SOLD_OUT], 50);
    audit(f, "atom", 100, 20, 100);
}

/* The store reset under the loop's cached view (no invalidation: the view is as a
 * loop of another process would hold it): STALE, read again, sold in the new epoch. */
static void reset_under_a_cached_view(void **state)
{
    struct fixture *f = *state;
    put(f, "shift", 40, 20, "lock", 0);
    struct es_tally t;
    es_run(f->e, f->base, "shift", 1, 10, NULL, &t); /* the loop caches 20 segments */
    mem_put(f->st, "shift", 8, 4, "lock", 0, false);
    es_run(f->e, f->base, "shift", 1, 12, NULL, &t);
    assert_int_equal(t.by[INV_OK], 8);
    assert_int_equal(t.by[INV_SOLD_OUT], 4);
    audit(f, "shift", 8, 4, 8);
}

static void unknown_sku_and_a_store_that_fails(void **state)
{
    struct fixture *f = *state;
    struct es_tally t;
    es_run(f->e, f->base, "nope", 1, 1, NULL, &t);
    assert_int_equal(t.by[INV_UNKNOWN_SKU], 1);

    put(f, "down", 10, 2, "lock", 0);
    es_run(f->e, f->base, "down", 1, 1, NULL, &t);
    assert_int_equal(t.by[INV_OK], 1);
    mem_fail(f->st, 1000);
    engine_invalidate(f->e, "down");
    es_run(f->e, f->base, "down", 1, 3, "h", &t);
    assert_int_equal(t.by[INV_UNAVAILABLE], 3);
    mem_fail(f->st, 0);
    es_run(f->e, f->base, "down", 1, 1, "after", &t);
    assert_int_equal(t.by[INV_OK], 1);
    audit(f, "down", 10, 2, 2);
}

/* Three orders of one loop on two segments held 50 ms each: the third waits for a
 * claim to be handed over. The loop's cached view of the SKU is dropped meanwhile
 * (an admin write does it; so do a rebalance and a multi-segment order refused
 * SHORT): the waiter looks again, finds both segments claimed still and waits again.
 * When the holders give their claims back, it must get one (or be told to look
 * again), not sit until its deadline: lock_wait_ms is 20 s here, and the loop is
 * given 10 s (the orders need about 100 ms). */
static void waiter_not_stranded_by_a_dropped_view(void **state)
{
    (void)state;
    struct fixture *f = make_waiting(STORE_CAP_KEEP | STORE_CAP_FENCE, 20000);
    put(f, "strand", 30, 2, "lock", 50);
    struct es_tally t;
    es_start(f->e, "strand", 1, 3, NULL, &t);
    while (mem_locks_held(f->st, "strand") < 2) /* two hold, the third waits */
        event_base_loop(f->base, EVLOOP_ONCE);
    assert_int_equal(t.done, 0);
    engine_invalidate(f->e, "strand");
    struct timeval limit = {10, 0};
    event_base_loopexit(f->base, &limit); /* wakes the loop below at the latest then */
    long long end = h_now_ms() + 10000;
    while (t.done < 3 && h_now_ms() < end)
        event_base_loop(f->base, EVLOOP_ONCE);
    fprintf(stderr, "strand: %d of 3 answered\n", t.done);
    assert_int_equal(t.done, 3);
    assert_int_equal(t.by[INV_OK], 3);
    audit(f, "strand", 30, 2, 3);
    destroy(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exact_sell_out),
        cmocka_unit_test(hold_hands_claims_over_fifo),
        cmocka_unit_test(hold_passes_the_lock_on_where_the_store_keeps),
        cmocka_unit_test(kept_away_from_home),
        cmocka_unit_test(lease_renewed_past_the_ttl),
        cmocka_unit_test(fenced_deduct_after_a_lost_lease),
        cmocka_unit_test(busy_segment_falls_through),
        cmocka_unit_test(lower_fence_refused),
        cmocka_unit_test(falls_through_to_every_unit),
        cmocka_unit_test(replay_conflict_and_multi_segment),
        cmocka_unit_test(atomic_mode),
        cmocka_unit_test(reset_under_a_cached_view),
        cmocka_unit_test(unknown_sku_and_a_store_that_fails),
        cmocka_unit_test(waiter_not_stranded_by_a_dropped_view),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
