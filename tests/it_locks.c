/* it_locks.c -- segment locks against a real Redis: dead holders, leases, fencing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

static int group_setup(void **state)
{
    *state = h_env_start_redis();
    return *state != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    return h_env_stop(*state);
}

/* Poll until `key` exists (want=1) or is gone (want=0); false after timeout_ms. */
static bool wait_key(const h_redis *r, const char *key, int want, int timeout_ms)
{
    long long end = h_now_ms() + timeout_ms;
    char buf[128];
    do {
        if (h_redis_get(r, key, buf, sizeof buf) == want)
            return true;
        h_sleep_ms(10);
    } while (h_now_ms() < end);
    return false;
}

static void test_dead_holder_taken_over_after_ttl(void **state)
{
    struct h_env *e = *state;
    h_deadline(120);
    const char *args[] = {"--lock-wait-ms", "300", NULL};
    h_svc *s = h_svc_start_args(e->redis, args);
    assert_non_null(s);
    int port = h_svc_port(s);
    assert_int_equal(h_put_sku(port, NULL, "orphan", 5, 1, "lock", 0), 0);

    /* A holder that took the only lock and died: nobody will release it. */
    char key[160], buf[128];
    h_key_lock(key, "orphan", 0);
    assert_int_equal(h_redis_set_px(e->redis, key, "dead-holder-token", 2500, true), 0);

    struct h_resp r;
    h_order(port, "orphan", 1, NULL, &r);
    assert_int_equal(h_expect_error(&r, 503, "busy"), 0);
    assert_true(r.retry_after[0] != '\0');
    h_resp_free(&r);
    assert_true(h_stat(port, NULL, "busy_skips") > 0);

    /* Nothing was sold, and the service did not delete a lock it does not own. */
    assert_int_equal(h_redis_get(e->redis, key, buf, sizeof buf), 1);
    assert_string_equal(buf, "dead-holder-token");
    json_t *j = h_get_sku(port, NULL, "orphan");
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "remaining")), 5);
    json_t *held = json_object_get(j, "locks_held");
    if (held != NULL)
        assert_int_equal(json_integer_value(held), 1);
    json_decref(j);

    /* Once the lease runs out in Redis, the next order takes the segment over. */
    assert_true(wait_key(e->redis, key, 0, 10000));
    assert_int_equal(h_order(port, "orphan", 1, NULL, &r), 201);
    h_resp_free(&r);
    assert_int_equal(h_audit(port, NULL, "orphan", 5, true), 0);
    j = h_get_sku(port, NULL, "orphan");
    assert_int_equal(json_integer_value(json_object_get(j, "remaining")), 4);
    json_decref(j);
    /* And it released what it took. */
    assert_int_equal(h_redis_get(e->redis, key, buf, sizeof buf), 0);
    assert_true(h_svc_alive(s));
    h_svc_free(s);
}

/* A hold longer than the lease: the watchdog keeps renewing, the order completes. */
static void test_watchdog_renews_long_hold(void **state)
{
    struct h_env *e = *state;
    h_deadline(120);
    const char *args[] = {"--lock-ttl-ms", "300", NULL};
    h_svc *s = h_svc_start_args(e->redis, args);
    assert_non_null(s);
    int port = h_svc_port(s);
    assert_int_equal(h_put_sku(port, NULL, "slow", 3, 1, "lock", 1000), 0);
    long long before = h_stat(port, NULL, "lease_renewals");
    assert_true(before >= 0);

    struct h_resp r;
    assert_int_equal(h_order(port, "slow", 1, "slow-1", &r), 201);
    h_resp_free(&r);
    long long renewals = h_stat(port, NULL, "lease_renewals");
    fprintf(stderr, "lease_renewals %lld -> %lld\n", before, renewals);
    assert_true(renewals > before);
    assert_int_equal(h_stat(port, NULL, "fenced_rejections"), 0);
    assert_int_equal(h_audit(port, NULL, "slow", 3, true), 0);
    char key[160], buf[128];
    assert_int_equal(h_redis_get(e->redis, h_key_lock(key, "slow", 0), buf, sizeof buf),
                     0);
    assert_true(h_svc_alive(s));
    h_svc_free(s);
}

/* A restock waits past the lease for a segment held elsewhere (a lock planted for
 * 1.2 s, ttl 300 ms): the locks it took before keep being renewed on the worker's
 * loop (lease.c), so its ADJUST passes their fence: 200, the units all there. Without
 * the renewal segment 0's lock would lapse meanwhile and the ADJUST answer FENCED
 * (503 busy). */
static void test_restock_renews_its_locks_while_waiting(void **state)
{
    struct h_env *e = *state;
    h_deadline(120);
    const char *args[] = {"--lock-ttl-ms", "300", "--lock-wait-ms", "5000", NULL};
    h_svc *s = h_svc_start_args(e->redis, args);
    assert_non_null(s);
    int port = h_svc_port(s);
    assert_int_equal(h_put_sku(port, NULL, "waits", 4, 2, "lock", 0), 0);
    char key[160];
    assert_int_equal(
        h_redis_set_px(e->redis, h_key_lock(key, "waits", 1), "other", 1200, true), 0);
    long long before = h_stat(port, NULL, "lease_renewals");
    assert_true(before >= 0);
    struct h_resp r;
    assert_int_equal(
        h_req(port, "POST", "/admin/skus/waits/restock", NULL, "{\"qty\": 6}", &r), 200);
    h_resp_free(&r);
    long long renewals = h_stat(port, NULL, "lease_renewals");
    fprintf(stderr, "lease_renewals %lld -> %lld\n", before, renewals);
    assert_true(renewals > before);
    assert_int_equal(h_audit(port, NULL, "waits", 10, true), 0);
    assert_true(h_svc_alive(s));
    h_svc_free(s);
}

struct slow_order {
    int port;
    struct h_resp resp;
};

static void slow_order_main(int idx, void *ctx)
{
    struct slow_order *o = ctx;
    if (idx == 0)
        h_order(o->port, "fenced", 1, "fenced-1", &o->resp);
}

struct stall {
    h_redis *redis;
    h_svc *svc;
    const char *key;
    int ok;
};

/* Stop the service while it holds the lock, let the lease lapse, plant a new
 * holder, resume: the stalled holder must write nothing and not free the lock. */
static void stall_main(int idx, void *ctx)
{
    struct stall *st = ctx;
    if (idx != 1)
        return;
    if (!wait_key(st->redis, st->key, 1, 10000)) {
        fprintf(stderr, "the order never took the lock\n");
        return;
    }
    h_svc_pause(st->svc);
    bool lapsed = wait_key(st->redis, st->key, 0, 10000);
    int planted =
        lapsed ? h_redis_set_px(st->redis, st->key, "new-holder", 60000, true) : -1;
    h_svc_resume(st->svc);
    st->ok = lapsed && planted == 0;
    if (!st->ok)
        fprintf(stderr, "lease did not lapse (%d) or plant failed (%d)\n", lapsed,
                planted);
}

struct both {
    struct slow_order *o;
    struct stall *st;
};

static void both_main(int idx, void *ctx)
{
    struct both *b = ctx;
    if (idx == 0)
        slow_order_main(0, b->o);
    else
        stall_main(1, b->st);
}

static void test_stalled_holder_is_fenced(void **state)
{
    struct h_env *e = *state;
    h_deadline(120);
    const char *args[] = {"--lock-ttl-ms", "300", "--lock-wait-ms", "500", NULL};
    h_svc *s = h_svc_start_args(e->redis, args);
    assert_non_null(s);
    int port = h_svc_port(s);
    assert_int_equal(h_put_sku(port, NULL, "fenced", 3, 1, "lock", 2000), 0);

    char key[160], buf[128];
    h_key_lock(key, "fenced", 0);
    struct slow_order o = {.port = port};
    struct stall st = {.redis = e->redis, .svc = s, .key = key};
    struct both b = {&o, &st};
    assert_int_equal(h_parallel(2, both_main, &b), 0);
    assert_true(st.ok);

    /* The stalled holder lost its lease: no sale, and the new holder's lock stands. */
    fprintf(stderr, "stalled order answered %d %s\n", o.resp.status, o.resp.body);
    assert_int_equal(h_expect_error(&o.resp, 503, "busy"), 0);
    h_resp_free(&o.resp);
    assert_int_equal(h_redis_get(e->redis, key, buf, sizeof buf), 1);
    assert_string_equal(buf, "new-holder");
    json_t *j = h_get_sku(port, NULL, "fenced");
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "sold")), 0);
    json_decref(j);
    struct h_resp r;
    h_req(port, "GET", "/orders/fenced-1", NULL, NULL, &r);
    assert_int_equal(r.status, 404);
    h_resp_free(&r);
    long long fenced = h_stat(port, NULL, "fenced_rejections");
    long long lost = h_stat(port, NULL, "lease_lost");
    fprintf(stderr, "fenced_rejections %lld, lease_lost %lld\n", fenced, lost);
    assert_true(fenced > 0 || lost > 0);

    /* The new holder goes away; the same order id then sells once. */
    redisContext *c = h_redis_connect(e->redis);
    assert_non_null(c);
    redisReply *rep = redisCommand(c, "DEL %s", key);
    assert_non_null(rep);
    freeReplyObject(rep);
    redisFree(c);
    assert_int_equal(h_order(port, "fenced", 1, "fenced-1", NULL), 201);
    assert_int_equal(h_audit(port, NULL, "fenced", 3, true), 0);
    assert_true(h_svc_alive(s));
    h_svc_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dead_holder_taken_over_after_ttl),
        cmocka_unit_test(test_watchdog_renews_long_hold),
        cmocka_unit_test(test_restock_renews_its_locks_while_waiting),
        cmocka_unit_test(test_stalled_holder_is_fenced),
    };
    return cmocka_run_group_tests_name("locks", tests, group_setup, group_teardown);
}
