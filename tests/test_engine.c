/* test_engine.c -- the order path on an event loop (segments/engine.c) against a real
 * redis-server: exact sell-out under 1500 concurrent orders, the FIFO hand-off of
 * claims under a long hold, the lock passed on from order to order (and taken by an
 * intruder in between), lease renewal past the TTL, fall-through, replay and
 * conflict, several segments, mode atomic, a reset under a cached view, an unknown
 * SKU, and a hung Redis answered and recovered from.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/engine.h"
#include "segments/redis/keys.h"
#include "segments/sku.h"
#include "segments/stats.h"
#include "tests/engine_sync.h"
#include "tests/harness.h"

#define TTL_MS 300

struct fixture {
    h_redis *redis;
    inv *v;
    inv_conn *c; /* blocking, for setting SKUs up and auditing them */
    struct event_base *base;
    engine *e;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    *state = f;
    f->redis = h_redis_start();
    if (f->redis == NULL)
        return -1;
    struct inv_options opt = {.redis_host = "127.0.0.1",
                              .redis_port = h_redis_port(f->redis),
                              .redis_timeout_ms = 2000,
                              .lock_ttl_ms = TTL_MS,
                              .lock_wait_ms = 3000,
                              .meta_cache_ms = 100};
    char err[128];
    f->v = inv_create(&opt, err, sizeof err);
    f->c = inv_conn_create(f->v);
    f->base = event_base_new();
    f->e = engine_create(f->v, f->base, 0, 1);
    return f->v != NULL && f->base != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    engine_free(f->e);
    event_base_free(f->base);
    inv_conn_free(f->c);
    inv_free(f->v);
    h_redis_free(f->redis);
    free(f);
    return 0;
}

static void put(struct fixture *f, const char *sku, long long stock, int n, sku_mode mode,
                int hold_ms)
{
    struct sku_config cfg = {stock,          n,     mode, hold_ms, false, false,
                             SKU_LOCK_STORE, false, 1};
    assert_int_equal(sku_put(f->c, sku, &cfg, SKU_REPLACE_ANY, NULL, NULL, NULL), INV_OK);
}

static void audit(struct fixture *f, const char *sku, long long initial, long long sold)
{
    struct sku_status *st = calloc(1, sizeof *st);
    assert_int_equal(sku_get(f->c, sku, st), INV_OK);
    assert_int_equal(st->cfg.stock, initial);
    assert_int_equal(st->sold, sold);
    assert_int_equal(st->remaining + st->sold, initial);
    for (int i = 0; i < st->cfg.segments; i++)
        assert_true(st->segment_stock[i] >= 0);
    assert_int_equal(st->locks_held, 0);
    free(st);
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
    put(f, "hot", 1000, 20, SKU_MODE_LOCK, 0);
    struct es_tally t;
    es_run(f->e, f->base, "hot", 1, 1500, NULL, &t);
    assert_int_equal(t.by[INV_OK], 1000);
    assert_int_equal(t.by[INV_SOLD_OUT], 500);
    audit(f, "hot", 1000, 1000);
    long long commands, writes;
    engine_pipeline(f->e, &commands, &writes);
    fprintf(stderr, "pipeline: %lld commands in %lld writes\n", commands, writes);
    assert_true(writes < commands);
}

static void hold_hands_claims_over_fifo(void **state)
{
    struct fixture *f = *state;
    put(f, "one", 100, 1, SKU_MODE_LOCK, 20);
    long long waits = stat(f, STAT_LOCK_WAITS);
    struct es_tally t;
    es_run(f->e, f->base, "one", 1, 20, NULL, &t);
    assert_int_equal(t.by[INV_OK], 20);
    assert_true(stat(f, STAT_LOCK_WAITS) > waits);
    audit(f, "one", 100, 20);
}

/* The lock goes on from order to order of the loop (the DEDUCT keeps it): fewer
 * ACQUIREs than orders, at most ttl/3 (100 ms here: 5 holds of 20 ms) per lock. A
 * lock taken by an intruder in the middle (as if ours had run out): the DEDUCT of
 * the order holding it is fenced, the orders after it take the segment again with
 * ACQUIREs once the intruder's lock is gone, and every order sells exactly once. */
static void hold_passes_the_lock_on(void **state)
{
    struct fixture *f = *state;
    put(f, "kept", 100, 1, SKU_MODE_LOCK, 20);
    long long attempts = stat(f, STAT_LOCK_ATTEMPTS);
    struct es_tally t;
    es_run(f->e, f->base, "kept", 1, 20, NULL, &t);
    assert_int_equal(t.by[INV_OK], 20);
    long long acquires = stat(f, STAT_LOCK_ATTEMPTS) - attempts;
    fprintf(stderr, "20 orders, %lld ACQUIREs\n", acquires);
    assert_true(acquires >= 4 && acquires < 20);
    audit(f, "kept", 100, 20);

    long long fenced = stat(f, STAT_FENCED_REJECTIONS);
    memset(&t, 0, sizeof t);
    for (int k = 0; k < 20; k++) {
        struct order_request req = {"kept", 1, NULL};
        engine_order(f->e, &req, es_on_done, &t);
    }
    long long steal = h_now_ms() + 50, end = h_now_ms() + 30000;
    while (h_now_ms() < steal)
        event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    redisContext *rc = h_redis_connect(f->redis);
    assert_non_null(rc);
    char key[SEG_KEY_MAX];
    redisReply *r =
        redisCommand(rc, "SET %s intruder PX 150", seg_key_lock(key, "kept", 0));
    assert_true(r != NULL && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    redisFree(rc);
    while (t.done < 20 && h_now_ms() < end)
        event_base_loop(f->base, EVLOOP_ONCE);
    assert_int_equal(t.by[INV_OK], 20);
    assert_true(stat(f, STAT_FENCED_REJECTIONS) > fenced);
    audit(f, "kept", 100, 40);
}

static void lease_renewed_past_the_ttl(void **state)
{
    struct fixture *f = *state;
    put(f, "slow", 5, 1, SKU_MODE_LOCK, 3 * TTL_MS);
    long long renewals = stat(f, STAT_LEASE_RENEWALS);
    struct es_tally t;
    es_run(f->e, f->base, "slow", 1, 1, NULL, &t);
    assert_int_equal(t.by[INV_OK], 1);
    assert_true(stat(f, STAT_LEASE_RENEWALS) >= renewals + 2);
    audit(f, "slow", 5, 1);
}

static void falls_through_to_every_unit(void **state)
{
    struct fixture *f = *state;
    put(f, "few", 3, 20, SKU_MODE_LOCK, 0);
    struct es_tally t;
    es_run(f->e, f->base, "few", 1, 5, NULL, &t);
    assert_int_equal(t.by[INV_OK], 3);
    assert_int_equal(t.by[INV_SOLD_OUT], 2);
    audit(f, "few", 3, 3);
}

static void replay_conflict_and_multi_segment(void **state)
{
    struct fixture *f = *state;
    put(f, "ids", 20, 20, SKU_MODE_LOCK, 0);
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
    audit(f, "ids", 20, 20);
}

static void atomic_mode(void **state)
{
    struct fixture *f = *state;
    put(f, "atom", 100, 20, SKU_MODE_ATOMIC, 0);
    struct es_tally t;
    es_run(f->e, f->base, "atom", 1, 150, NULL, &t);
    assert_int_equal(t.by[INV_OK], 100);
    assert_int_equal(t.by[INV_SOLD_OUT], 50);
    audit(f, "atom", 100, 100);
}

static void reset_under_a_cached_view(void **state)
{
    struct fixture *f = *state;
    put(f, "shift", 40, 20, SKU_MODE_LOCK, 0);
    struct es_tally t;
    es_run(f->e, f->base, "shift", 1, 10, NULL, &t); /* the loop caches 20 segments */
    put(f, "shift", 8, 4, SKU_MODE_LOCK, 0);
    es_run(f->e, f->base, "shift", 1, 12, NULL, &t);
    assert_int_equal(t.by[INV_OK], 8);
    assert_int_equal(t.by[INV_SOLD_OUT], 4);
    audit(f, "shift", 8, 8);
}

static void unknown_sku_and_hung_redis(void **state)
{
    struct fixture *f = *state;
    struct es_tally t;
    es_run(f->e, f->base, "nope", 1, 1, NULL, &t);
    assert_int_equal(t.by[INV_UNKNOWN_SKU], 1);

    put(f, "hang", 10, 2, SKU_MODE_LOCK, 0);
    es_run(f->e, f->base, "hang", 1, 1, NULL, &t);
    assert_int_equal(t.by[INV_OK], 1);
    assert_int_equal(h_redis_pause(f->redis), 0);
    es_run(f->e, f->base, "hang", 1, 3, "h", &t);
    assert_int_equal(t.by[INV_UNAVAILABLE], 3);
    assert_int_equal(h_redis_resume(f->redis), 0);
    int ok = 0;
    for (int tries = 0; tries < 100 && ok == 0; tries++) {
        es_run(f->e, f->base, "hang", 1, 1, "after", &t);
        ok = t.by[INV_OK] + t.by[INV_REPLAYED];
        if (ok == 0)
            h_sleep_ms(50);
    }
    assert_int_equal(ok, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exact_sell_out),
        cmocka_unit_test(hold_hands_claims_over_fifo),
        cmocka_unit_test(hold_passes_the_lock_on),
        cmocka_unit_test(lease_renewed_past_the_ttl),
        cmocka_unit_test(falls_through_to_every_unit),
        cmocka_unit_test(replay_conflict_and_multi_segment),
        cmocka_unit_test(atomic_mode),
        cmocka_unit_test(reset_under_a_cached_view),
        cmocka_unit_test(unknown_sku_and_hung_redis),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
