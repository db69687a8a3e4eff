/* it_races.c -- issue 8's defects, one deterministic regression test each, over HTTP
 * with two instances on one Redis where the defect needs two.
 *
 *  1. restock/rebalance on an instance whose cached segment count is stale;
 *  2. restocks past the stock limit (checked against a stale cached initial);
 *  3. a cancel that read an order, waited for its lock, and meanwhile the SKU was
 *     reset and the same order_id placed again with another qty;
 *  4. DELETE + PUT (or Redis losing its data) leaving another instance's cached
 *     "sold out" alive;
 *  5. shrinking a hot SKU and growing it back leaking a local segment claim;
 *  6. replies lost on the wire (a proxy that lets a command run and then resets the
 *     connection before the reply arrives) turning into false answers;
 * and the minor one: concurrent resets with different segment counts orphaning keys.
 *
 * Instance A is the group's service; it caches SKU settings for a minute, so every
 * test can make A's view stale on purpose. Instance B (default settings) is started
 * by the tests that need it. Stale views are made by the test, never by timing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "tests/proxy.h"

#define STOCK_MAX 9007199254740991LL /* 2^53 - 1, the service's limit */
#define RESTOCK_MAX 1000000000000LL

struct env {
    struct h_env *h; /* h->svc is A: settings cached for a minute */
    h_svc *b;        /* a second instance with default settings, when started */
};

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    if (e == NULL)
        return -1;
    *state = e;
    e->h = h_env_start_redis();
    if (e->h == NULL)
        return -1;
    const struct h_svc_opts opts = {
        .config_json = "{\"meta_cache_ms\": 60000, \"lock_wait_ms\": 5000}"};
    e->h->svc = h_svc_start(e->h->redis, &opts);
    e->h->port = e->h->svc != NULL ? h_svc_port(e->h->svc) : 0;
    return e->h->svc != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    if (e == NULL)
        return 0;
    int rc = h_svc_stop_clean(e->b) | h_env_stop(e->h);
    h_svc_free(e->b);
    free(e);
    return rc;
}

/* Instance B's port, starting it (with `args`) on first use. */
static int port_b(struct env *e, const char *const *args)
{
    if (e->b == NULL)
        e->b = h_svc_start_args(e->h->redis, args);
    assert_non_null(e->b);
    return h_svc_port(e->b);
}

static void stop_b(struct env *e)
{
    int rc = h_svc_stop_clean(e->b);
    h_svc_free(e->b);
    e->b = NULL;
    assert_int_equal(rc, 0);
}

/* One field of GET /admin/skus/SKU (asked of `port`). */
static long long sku_field(int port, const char *sku, const char *key)
{
    json_t *j = h_get_sku(port, NULL, sku);
    assert_non_null(j);
    long long v = h_jint(j, key);
    json_decref(j);
    return v;
}

/* POST /admin/skus/SKU/ACTION with `body` (may be NULL); returns the status. */
static int admin_post(int port, const char *sku, const char *action, const char *body)
{
    char path[160];
    snprintf(path, sizeof path, "/admin/skus/%s/%s", sku, action);
    struct h_resp r;
    int st = h_req(port, "POST", path, NULL, body, &r);
    if (st != 200)
        fprintf(stderr, "POST %s -> %d %s\n", path, st, r.body);
    h_resp_free(&r);
    return st;
}

static int restock(int port, const char *sku, long long qty)
{
    char body[64];
    snprintf(body, sizeof body, "{\"qty\": %lld}", qty);
    return admin_post(port, sku, "restock", body);
}

/* Make A cache `sku`'s settings as they are now (an order reads them). */
static void prime_cache(int port, const char *sku)
{
    int st = h_order(port, sku, 1, NULL, NULL);
    assert_true(st == 201 || st == 409);
}

/* ---- 1: restock / rebalance with a stale segment count ------------------------ */

static void test_stale_segment_count(void **state)
{
    struct env *e = *state;
    h_deadline(120);
    int a = e->h->port, b = port_b(e, NULL);

    /* Restock: A believes 20 segments, Redis has 4. */
    assert_int_equal(h_put_sku(b, NULL, "shrunk", 101, 20, "lock", 0), 0);
    prime_cache(a, "shrunk"); /* sells 1: 100 left */
    assert_int_equal(h_put_sku(b, NULL, "shrunk", 100, 4, "lock", 0), 0);
    assert_int_equal(restock(a, "shrunk", 1000), 200);
    assert_int_equal(h_audit(b, NULL, "shrunk", 1100, true), 0);
    assert_int_equal(sku_field(b, "shrunk", "remaining"), 1100);

    /* Rebalance: the same staleness must not spread stock into segments 4..19. */
    assert_int_equal(h_put_sku(b, NULL, "shrunk2", 101, 20, "lock", 0), 0);
    prime_cache(a, "shrunk2");
    assert_int_equal(h_put_sku(b, NULL, "shrunk2", 100, 4, "lock", 0), 0);
    assert_int_equal(admin_post(a, "shrunk2", "rebalance", NULL), 200);
    assert_int_equal(h_audit(b, NULL, "shrunk2", 100, true), 0);
    assert_int_equal(sku_field(b, "shrunk2", "remaining"), 100);
}

/* ---- 2: the stock limit under restocks from two instances ---------------------- */

struct restock_race {
    int port[2];
    int status[2];
};

static void restock_one(int idx, void *ctx)
{
    struct restock_race *r = ctx;
    r->status[idx] = restock(r->port[idx], "limit2", RESTOCK_MAX);
}

static void test_restock_limit(void **state)
{
    struct env *e = *state;
    h_deadline(120);
    int a = e->h->port, b = port_b(e, NULL);

    /* Sequential: B's restock reaches the limit; A still caches the old initial. */
    assert_int_equal(h_put_sku(b, NULL, "limit", STOCK_MAX - RESTOCK_MAX, 1, "lock", 0),
                     0);
    prime_cache(a, "limit");
    assert_int_equal(h_order(b, "limit", 1, NULL, NULL), 201);
    assert_int_equal(restock(b, "limit", RESTOCK_MAX), 200);
    struct h_resp r;
    char body[64];
    snprintf(body, sizeof body, "{\"qty\": %lld}", RESTOCK_MAX);
    h_req(a, "POST", "/admin/skus/limit/restock", NULL, body, &r);
    assert_int_equal(h_expect_error(&r, 400, "invalid_field"), 0);
    h_resp_free(&r);
    assert_int_equal(h_audit(b, NULL, "limit", STOCK_MAX, true), 0);
    assert_int_equal(sku_field(b, "limit", "remaining"), STOCK_MAX - 2);

    /* Concurrent: two restocks of which only one fits. */
    assert_int_equal(h_put_sku(b, NULL, "limit2", STOCK_MAX - RESTOCK_MAX, 1, "lock", 0),
                     0);
    prime_cache(a, "limit2");
    assert_int_equal(h_order(b, "limit2", 1, NULL, NULL), 201);
    struct restock_race race = {{a, b}, {0, 0}};
    assert_int_equal(h_parallel(2, restock_one, &race), 0);
    assert_true((race.status[0] == 200 && race.status[1] == 400) ||
                (race.status[0] == 400 && race.status[1] == 200));
    assert_int_equal(h_audit(b, NULL, "limit2", STOCK_MAX, true), 0);
}

/* ---- 3: a cancel whose order was replaced while it waited for the lock --------- */

struct bg_req {
    pthread_t thread;
    int port;
    const char *method;
    char path[128];
    struct h_resp resp;
};

static void *bg_run(void *arg)
{
    struct bg_req *q = arg;
    h_req(q->port, q->method, q->path, NULL, NULL, &q->resp);
    return NULL;
}

static void test_cancel_of_replaced_order(void **state)
{
    struct env *e = *state;
    h_deadline(120);
    int a = e->h->port;
    const char *args[] = {"--lock-wait-ms", "10000", NULL};
    int b = port_b(e, args);

    assert_int_equal(h_put_sku(a, NULL, "recancel", 10, 1, "lock", 0), 0);
    assert_int_equal(h_order(a, "recancel", 1, "X-3", NULL), 201);

    /* A foreign holder keeps the only lock: B's cancel reads X-3 (qty 1) and waits. */
    char key[160];
    h_key_lock(key, "recancel", 0);
    assert_int_equal(h_redis_set_px(e->h->redis, key, "someone-else", 30000, true), 0);
    struct bg_req cancel = {.port = b, .method = "DELETE", .path = "/orders/X-3"};
    assert_int_equal(pthread_create(&cancel.thread, NULL, bg_run, &cancel), 0);
    h_sleep_ms(500);

    /* Meanwhile (B frozen so the order of events is fixed): reset, and X-3 again. */
    assert_int_equal(h_svc_pause(e->b), 0);
    assert_int_equal(h_put_sku(a, NULL, "recancel", 10, 1, "lock", 0), 0);
    assert_int_equal(h_order(a, "recancel", 5, "X-3", NULL), 201);
    assert_int_equal(h_svc_resume(e->b), 0);
    pthread_join(cancel.thread, NULL);

    /* The cancel gave back exactly the units of the order it cancelled. */
    assert_int_equal(cancel.resp.status, 200);
    json_t *rec = h_resp_json(&cancel.resp);
    assert_non_null(rec);
    assert_int_equal(h_jint(rec, "qty"), 5);
    assert_string_equal(json_string_value(json_object_get(rec, "status")), "cancelled");
    json_decref(rec);
    h_resp_free(&cancel.resp);
    assert_int_equal(h_audit(a, NULL, "recancel", 10, false), 0);
    assert_int_equal(sku_field(a, "recancel", "sold"), 0);
    assert_int_equal(sku_field(a, "recancel", "remaining"), 10);
    stop_b(e);
}

/* ---- 4: a SKU deleted and created again is a new SKU everywhere ----------------- */

static void sell_out(int port, const char *sku, int stock)
{
    for (int i = 0; i < stock; i++)
        assert_int_equal(h_order(port, sku, 1, NULL, NULL), 201);
    assert_int_equal(h_order(port, sku, 1, NULL, NULL), 409);
}

static void test_recreated_sku_not_sold_out(void **state)
{
    struct env *e = *state;
    h_deadline(120);
    int a = e->h->port, b = port_b(e, NULL); /* B: the default 100 ms cache */

    assert_int_equal(h_put_sku(a, NULL, "reborn", 4, 2, "lock", 0), 0);
    sell_out(b, "reborn", 4);
    struct h_resp r;
    assert_int_equal(h_req(a, "DELETE", "/admin/skus/reborn", NULL, NULL, &r), 200);
    h_resp_free(&r);
    assert_int_equal(h_put_sku(a, NULL, "reborn", 100, 2, "lock", 0), 0);
    h_sleep_ms(300); /* past B's meta_cache_ms */
    assert_int_equal(h_order(b, "reborn", 1, NULL, NULL), 201);

    /* The same when Redis loses its data (a restart without persistence). */
    assert_int_equal(h_put_sku(a, NULL, "amnesia", 3, 1, "lock", 0), 0);
    sell_out(b, "amnesia", 3);
    redisContext *rc = h_redis_connect(e->h->redis);
    assert_non_null(rc);
    redisReply *fl = redisCommand(rc, "FLUSHALL");
    assert_non_null(fl);
    freeReplyObject(fl);
    redisFree(rc);
    assert_int_equal(h_put_sku(a, NULL, "amnesia", 3, 1, "lock", 0), 0);
    h_sleep_ms(300);
    assert_int_equal(h_order(b, "amnesia", 1, NULL, NULL), 201);
}

/* ---- 5: shrinking a hot SKU and growing it back --------------------------------- */

struct storm {
    int port;
    int n;
    int ok, other;
    pthread_mutex_t mu;
};

static void storm_one(int idx, void *ctx)
{
    (void)idx;
    struct storm *s = ctx;
    int st = h_order(s->port, "breathe", 1, NULL, NULL);
    pthread_mutex_lock(&s->mu);
    if (st == 201)
        s->ok++;
    else
        s->other++;
    pthread_mutex_unlock(&s->mu);
}

static void *storm_run(void *arg)
{
    struct storm *s = arg;
    h_parallel(s->n, storm_one, s);
    return NULL;
}

static void test_shrink_and_grow_keeps_claims(void **state)
{
    struct env *e = *state;
    h_deadline(240);
    int a = e->h->port;
    for (int cycle = 0; cycle < 6; cycle++) {
        /* Each of A's 20 segments claimed by an order holding its lock. */
        assert_int_equal(h_put_sku(a, NULL, "breathe", 100000, 20, "lock", 400), 0);
        struct storm old = {.port = a, .n = 20, .mu = PTHREAD_MUTEX_INITIALIZER};
        pthread_t t_old, t_new;
        assert_int_equal(pthread_create(&t_old, NULL, storm_run, &old), 0);
        h_sleep_ms(150);
        /* Shrink: orders that start now see 4 segments, all claimed, and queue; the
         * old orders, fenced by the reset, hand them claims of segments 0..19. */
        assert_int_equal(h_put_sku(a, NULL, "breathe", 100000, 4, "lock", 0), 0);
        struct storm young = {.port = a, .n = 6, .mu = PTHREAD_MUTEX_INITIALIZER};
        assert_int_equal(pthread_create(&t_new, NULL, storm_run, &young), 0);
        pthread_join(t_old, NULL);
        pthread_join(t_new, NULL);
    }
    /* Grown back: every claim came back, so restock and rebalance (which need all
     * 20 segments' locks) are not busy. */
    assert_int_equal(h_put_sku(a, NULL, "breathe", 100000, 20, "lock", 0), 0);
    assert_int_equal(restock(a, "breathe", 20), 200);
    assert_int_equal(admin_post(a, "breathe", "rebalance", NULL), 200);
    assert_int_equal(h_audit(a, NULL, "breathe", 100020, true), 0);
}

/* ---- 6: replies lost on the wire ----------------------------------------------- */

/* Lose the reply of the next command that contains `pattern`; count it. */
static void arm(h_proxy *p, const char *pattern, int *drops)
{
    h_proxy_drop_reply(p, pattern, 1);
    (*drops)++;
}

static void test_lost_replies_tell_the_truth(void **state)
{
    struct env *e = *state;
    h_deadline(120);
    h_proxy *p = h_proxy_start(h_redis_port(e->h->redis));
    assert_non_null(p);
    char via[32];
    snprintf(via, sizeof via, "127.0.0.1:%d", h_proxy_port(p));
    /* Leases far longer than the wait: a lock left behind would show as 503 busy. */
    const char *args[] = {"--redis", via, "--lock-wait-ms", "1000", "--lock-ttl-ms",
                          "10000",   NULL};
    const struct h_svc_opts opts = {.args = args, .no_redis_flag = true};
    h_svc *c = h_svc_start(NULL, &opts);
    assert_non_null(c);
    int port = h_svc_port(c), drops = 0;
    assert_int_equal(h_put_sku(port, NULL, "lost", 10, 1, "lock", 0), 0);
    struct h_resp r;

    /* DEDUCT ran, its reply was lost, it was sent again: a first placement is 201.
     * The command is found by its record, packed (recpack.h: "#qty seg part ..."). */
    arm(p, "\r\n#1 0 1\r\n", &drops);
    assert_int_equal(h_order(port, "lost", 1, "L-1", NULL), 201);
    assert_int_equal(h_proxy_drops(p), drops);

    /* The same for an order over two segments, and for mode atomic. */
    assert_int_equal(h_put_sku(port, NULL, "lost2", 2, 2, "lock", 0), 0);
    arm(p, "\r\n#2 ", &drops);
    assert_int_equal(h_order(port, "lost2", 2, "L-2", NULL), 201);
    assert_int_equal(h_put_sku(port, NULL, "lost3", 5, 2, "atomic", 0), 0);
    arm(p, "\r\n#1 ", &drops);
    assert_int_equal(h_order(port, "lost3", 1, "L-3", NULL), 201);
    assert_int_equal(h_proxy_drops(p), drops);

    /* A restock that took effect is 200, and applied once. */
    arm(p, "\r\nrestock\r\n", &drops); /* an argument: not the script's source */
    assert_int_equal(restock(port, "lost", 5), 200);
    assert_int_equal(h_proxy_drops(p), drops);
    assert_int_equal(h_audit(port, NULL, "lost", 15, true), 0);

    /* A cancel that took effect is 200 and gave its unit back once. */
    arm(p, "\"status\":\"cancelled\"", &drops);
    assert_int_equal(h_req(port, "DELETE", "/orders/L-1", NULL, NULL, &r), 200);
    h_resp_free(&r);
    assert_int_equal(h_proxy_drops(p), drops);
    assert_int_equal(sku_field(port, "lost", "sold"), 0);
    assert_int_equal(sku_field(port, "lost", "remaining"), 15);

    /* A lock taken by SET NX whose reply was lost is ours, not busy. */
    arm(p, "\r\nNX\r\n", &drops);
    assert_int_equal(admin_post(port, "lost", "rebalance", NULL), 200);
    assert_int_equal(h_proxy_drops(p), drops);
    assert_int_equal(sku_field(port, "lost", "locks_held"), 0);

    assert_int_equal(h_audit(port, NULL, "lost", 15, true), 0);
    assert_int_equal(h_audit(port, NULL, "lost2", 2, false), 0);
    assert_int_equal(h_audit(port, NULL, "lost3", 5, true), 0);
    assert_int_equal(h_svc_stop_clean(c), 0);
    h_svc_free(c);
    h_proxy_free(p);
}

/* ---- minor: concurrent resets with different segment counts -------------------- */

struct put_race {
    int port[2];
    int segments[2];
};

static void put_one(int idx, void *ctx)
{
    struct put_race *r = ctx;
    h_put_sku(r->port[idx], NULL, "orph", 100, r->segments[idx], "lock", 0);
}

static void test_concurrent_resets_leave_no_orphans(void **state)
{
    struct env *e = *state;
    h_deadline(120);
    struct put_race race = {{e->h->port, port_b(e, NULL)}, {20, 4}};
    for (int round = 0; round < 200; round++)
        assert_int_equal(h_parallel(2, put_one, &race), 0);
    long long segments = sku_field(race.port[1], "orph", "segments");
    redisContext *rc = h_redis_connect(e->h->redis);
    assert_non_null(rc);
    redisReply *keys = redisCommand(rc, "KEYS inv:{orph:*");
    assert_non_null(keys);
    int orphans = 0;
    for (size_t i = 0; i < keys->elements; i++) {
        int seg = atoi(keys->element[i]->str + strlen("inv:{orph:"));
        if (seg >= segments) {
            fprintf(stderr, "orphan key %s (segments %lld)\n", keys->element[i]->str,
                    segments);
            orphans++;
        }
    }
    freeReplyObject(keys);
    redisFree(rc);
    assert_int_equal(orphans, 0);
    assert_int_equal(h_audit(race.port[1], NULL, "orph", 100, true), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stale_segment_count),
        cmocka_unit_test(test_restock_limit),
        cmocka_unit_test(test_cancel_of_replaced_order),
        cmocka_unit_test(test_recreated_sku_not_sold_out),
        cmocka_unit_test(test_shrink_and_grow_keeps_claims),
        cmocka_unit_test(test_lost_replies_tell_the_truth),
        cmocka_unit_test(test_concurrent_resets_leave_no_orphans),
    };
    return h_exit_status(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
