/* it_pg_locks.c -- SKUs whose segment locks live in a lock service (memcached,
 * ZooKeeper) on the PostgreSQL store: the store registers each hold's fence and refuses
 * a write with a lower one (issue 27). Exact sell-out, a multi-segment order, and the
 * frozen holders of lock_env.h, the automatic rebalance (fenced by every segment's
 * hold), on two instances of one database (one of them with pg_prepare off). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/postgres/backend.h"
#include "tests/harness_pg.h"
#include "tests/lock_env.h"

struct pl_env {
    h_pg *pg;
    h_memcached *mc;
    h_zk *zk;
    h_svc *a, *b; /* two instances on the same database and lock services */
};

static int group_setup(void **state)
{
    struct pl_env *e = calloc(1, sizeof *e);
    *state = e;
    e->pg = h_pg_start();
    e->mc = h_memcached_start();
    e->zk = h_zk_start();
    if (e->pg == NULL || e->mc == NULL || e->zk == NULL)
        return -1;
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", TTL_MS);
    const char *args[] = {"--store",
                          h_pg_conninfo(e->pg),
                          "--memcached",
                          h_memcached_addr(e->mc),
                          "--zookeeper",
                          h_zk_addr(e->zk),
                          "--lab",
                          "true",
                          "--threads",
                          "2",
                          "--lock-ttl-ms",
                          ttl,
                          "--lock-wait-ms",
                          "1000",
                          NULL, /* b: --pg-prepare off */
                          NULL,
                          NULL};
    struct h_svc_opts o = {.args = args, .no_redis_flag = true};
    e->a = h_svc_start(NULL, &o);
    /* b sends the same functions unprepared, as behind PgBouncer (pg_prepare off) */
    args[14] = "--pg-prepare";
    args[15] = "off";
    e->b = h_svc_start(NULL, &o);
    return e->a != NULL && e->b != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    struct pl_env *e = *state;
    int rc = h_svc_stop_clean(e->a) | h_svc_stop_clean(e->b);
    h_svc_free(e->a);
    h_svc_free(e->b);
    h_memcached_free(e->mc);
    h_zk_free(e->zk);
    h_pg_free(e->pg);
    free(e);
    return rc;
}

/* The fence the store registered last for segment `seg` of `sku`. */
static long long svc_fence(const struct pl_env *e, const char *sku, int seg)
{
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT svc_fence FROM segments WHERE sku = '%s' AND seg = %d", sku, seg);
    return h_pg_scalar(e->pg, sql);
}

/* 120 units over 4 segments, 8 clients on two instances: exactly, every sale under a
 * lock of memcached's, each hold's fence issued by the store (1, 2, ...), a hold
 * handed on to the loop's next order keeping its fence. */
static void test_sellout_memcached(void **state)
{
    struct pl_env *e = *state;
    int pa = h_svc_port(e->a), pb = h_svc_port(e->b);
    long long handed =
        h_stat(pa, NULL, "lock_handed_on") + h_stat(pb, NULL, "lock_handed_on");
    lse_sell_out_on(e->a, e->b, "memcached", "pl-mc", true);
    handed =
        h_stat(pa, NULL, "lock_handed_on") + h_stat(pb, NULL, "lock_handed_on") - handed;
    long long fences = 0;
    for (int i = 0; i < 4; i++)
        fences += svc_fence(e, "pl-mc", i);
    /* one a hold; each sale under one, its own or one handed on to it */
    assert_true(fences + handed >= 120);
}

/* ZooKeeper gives its own fence (the lock node's czxid): the store keeps it as is. */
static void test_sellout_zookeeper(void **state)
{
    struct pl_env *e = *state;
    lse_sell_out_on(e->a, e->b, "zookeeper", "pl-zk", false);
    long long top = 0;
    for (int i = 0; i < 4; i++)
        if (svc_fence(e, "pl-zk", i) > top)
            top = svc_fence(e, "pl-zk", i);
    /* a czxid: the last hold came after 120 lock nodes made (a count of the segment's
     * holds, as the store issues for memcached, would be about 30) */
    assert_true(top > 120);
}

/* An order no segment fills: each part's lock from the service, its fence registered,
 * then one deduction over the parts, all or nothing. */
static void test_multi_memcached(void **state)
{
    struct pl_env *e = *state;
    int pa = h_svc_port(e->a), pb = h_svc_port(e->b);
    assert_int_equal(lse_put_sku(pa, "pl-multi",
                                 "{\"stock\": 10, \"segments\": 5, \"hold_ms\": 2, "
                                 "\"lock\": \"memcached\"}"),
                     201);
    assert_int_equal(h_order(pa, "pl-multi", 5, NULL, NULL), 201); /* 3 segments */
    assert_int_equal(h_order(pb, "pl-multi", 6, NULL, NULL), 409); /* 5 left */
    assert_int_equal(h_order(pb, "pl-multi", 5, NULL, NULL), 201);
    assert_int_equal(h_order(pa, "pl-multi", 1, NULL, NULL), 409);
    assert_int_equal(h_audit(pa, NULL, "pl-multi", 10, false), 0);
    assert_int_equal(
        h_pg_scalar(e->pg, "SELECT count(*) FROM orders WHERE sku = 'pl-multi'"), 2);
    assert_int_equal(h_pg_scalar(e->pg, "SELECT sum(stock) FROM segments"
                                        " WHERE sku = 'pl-multi'"),
                     0);
}

/* A frozen past its lease, B sells the unit under a higher fence, A's write refused
 * (FENCED, counted), 0 oversold; the fence B registered is the segment's. */
static void test_frozen_holder_memcached_fenced(void **state)
{
    struct pl_env *e = *state;
    lse_frozen_fenced(e->a, e->b, "memcached", "pl-frozen");
    assert_int_equal(svc_fence(e, "pl-frozen", 0), 2); /* A's 1, then B's 2 */
}

/* ZooKeeper's fences are its own (czxids): A's session expires while it is frozen, B's
 * lock node is younger, so B's fence is higher and A's write is refused. */
static void test_frozen_holder_zookeeper_fenced(void **state)
{
    struct pl_env *e = *state;
    lse_frozen_fenced(e->a, e->b, "zookeeper", "pl-frozen-zk");
}

/* The lab's "fencing": false: the write skips the fence, but PostgreSQL still checks
 * the stock (and its CHECK would refuse the oversale): A finds none, 0 oversold --
 * the demonstration of it_lock_faults (remaining -1 on Redis) shows nothing here. */
static void test_frozen_holder_unfenced_cannot_oversell(void **state)
{
    struct pl_env *e = *state;
    long long sold, remaining;
    h_deadline(60);
    int a = lse_frozen_holder(e->a, e->b, "memcached", "pl-unfenced", false, &sold,
                              &remaining, NULL);
    assert_int_equal(a, 409);
    assert_int_equal(sold, 1);
    assert_int_equal(remaining, 0);
}

/* The same with an order over both segments: both of A's parts refused at once. */
static void test_frozen_multi_memcached_fenced(void **state)
{
    struct pl_env *e = *state;
    lse_frozen_multi(e->a, e->b, "memcached", "pl-fm");
}

/* A reservation takes no part in the service's fences: refused, as on Redis (409
 * reservations_unsupported), nothing taken. */
static void test_reservations_refused(void **state)
{
    struct pl_env *e = *state;
    int pa = h_svc_port(e->a);
    assert_int_equal(
        lse_put_sku(pa, "pl-resv",
                    "{\"stock\": 4, \"segments\": 2, \"lock\": \"memcached\"}"),
        201);
    struct h_resp r;
    h_req(pa, "POST", "/reservations", NULL,
          "{\"sku\":\"pl-resv\",\"qty\":1,\"ttl_s\":60}", &r);
    assert_int_equal(h_expect_error(&r, 409, "reservations_unsupported"), 0);
    h_resp_free(&r);
    assert_int_equal(
        h_pg_scalar(e->pg, "SELECT count(*) FROM holds WHERE sku = 'pl-resv'"), 0);
    assert_int_equal(h_audit(pa, NULL, "pl-resv", 4, false), 0);
}

/* "rebalance": true with a lock service on PostgreSQL: the spread takes every
 * segment's hold from memcached, its one statement fenced by them all. */
static void test_spread_memcached(void **state)
{
    struct pl_env *e = *state;
    h_deadline(60);
    lse_spread_on(e->a, "memcached", "pl-spread");
}

/* The spread statement refuses a fence below its segment's svc_fence: FENCED, nothing
 * moved (spread.h's $7), on the seam. */
static void test_spread_fenced(void **state)
{
    struct pl_env *e = *state;
    h_deadline(60);
    struct event_base *base = event_base_new();
    const struct pgb_opts o = {
        .conninfo = h_pg_conninfo(e->pg), .lock_ttl_ms = TTL_MS, .timeout_ms = 5000};
    store *st = pgb_store_create(base, &o);
    assert_non_null(st);
    lse_spread_fenced(e->a, st, base, "memcached", "pl-spread-fenced");
    st->ops->free(st);
    event_base_free(base);
}

int main(void)
{
    lse_tsan_options();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sellout_memcached),
        cmocka_unit_test(test_sellout_zookeeper),
        cmocka_unit_test(test_multi_memcached),
        cmocka_unit_test(test_frozen_holder_memcached_fenced),
        cmocka_unit_test(test_frozen_holder_zookeeper_fenced),
        cmocka_unit_test(test_frozen_holder_unfenced_cannot_oversell),
        cmocka_unit_test(test_frozen_multi_memcached_fenced),
        cmocka_unit_test(test_reservations_refused),
        cmocka_unit_test(test_spread_memcached),
        cmocka_unit_test(test_spread_fenced),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
