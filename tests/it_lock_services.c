/* it_lock_services.c -- SKUs whose segment locks live in a lock service (RedLock over
 * three redis-servers, memcached, ZooKeeper), every write fenced by the Redis store:
 * exact sell-out over HTTP, multi-segment orders (all or nothing, each part fenced), a
 * holder frozen past its lease (fenced: nothing oversold; the lab's "fencing": false:
 * the oversell shown), RedLock masters killed under orders (one: still sells; two: 503,
 * nothing sold), ZooKeeper restarted under orders (503 while down, sells again after),
 * and the settings refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness_lock.h"
#include "tests/harness_zk.h"

#define TTL_MS                                                                           \
    2000 /* the lease: renewed every ttl/3, so a hold of 600 ms renews none              \
          */
#define HOLD_MS 600

struct env {
    h_redis *store;
    h_redis *nodes[3];
    h_memcached *mc;
    h_zk *zk;
    h_svc *a, *b; /* two instances on the same store and lock services */
    char redlock[256];
};

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    *state = e;
    e->store = h_redis_start();
    e->mc = h_memcached_start();
    e->zk = h_zk_start();
    if (e->store == NULL || e->mc == NULL || e->zk == NULL ||
        h_redlock_nodes_start(e->nodes, 3, false, e->redlock, sizeof e->redlock) != 0)
        return -1;
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", TTL_MS);
    const char *args[] = {"--redlock",
                          e->redlock,
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
                          NULL};
    e->a = h_svc_start_args(e->store, args);
    e->b = h_svc_start_args(e->store, args);
    return e->a != NULL && e->b != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    int rc = h_svc_stop_clean(e->a) | h_svc_stop_clean(e->b);
    h_svc_free(e->a);
    h_svc_free(e->b);
    for (int i = 0; i < 3; i++)
        h_redis_free(e->nodes[i]);
    h_memcached_free(e->mc);
    h_zk_free(e->zk);
    h_redis_free(e->store);
    free(e);
    return rc;
}

/* PUT /admin/skus/SKU?reset=true with `body`: its status. */
static int put_sku(int port, const char *sku, const char *body)
{
    char path[128];
    snprintf(path, sizeof path, "/admin/skus/%s?reset=true", sku);
    struct h_resp r;
    int st = h_req(port, "PUT", path, NULL, body, &r);
    if (st != 200 && st != 201)
        fprintf(stderr, "PUT %s %s: %d %s\n", sku, body, st, r.body);
    h_resp_free(&r);
    return st;
}

/* ---- exact sell-out ------------------------------------------------------------ */

struct sellout {
    const char *sku;
    int ports[2];
    bool ids;      /* every other order with a client's order id */
    long long qty; /* each order's (0: 1) */
    atomic_int sold, busy, other;
};

static void sell(int idx, void *arg)
{
    struct sellout *s = arg;
    long long until = h_now_ms() + 40000;
    for (int k = 0; h_now_ms() < until; k++) {
        char id[64];
        snprintf(id, sizeof id, "%s-%d-%d", s->sku, idx, k);
        int st = h_order(s->ports[(idx + k) % 2], s->sku, s->qty > 0 ? s->qty : 1,
                         s->ids && k % 2 ? id : NULL, NULL);
        if (st == 201)
            atomic_fetch_add(&s->sold, 1);
        else if (st == 409)
            return; /* sold out */
        else if (st == 503)
            atomic_fetch_add(&s->busy, 1);
        else
            atomic_fetch_add(&s->other, 1);
    }
}

/* 120 units on 4 segments sold by 8 clients over instances a and b. */
static void sell_out_on(h_svc *a, h_svc *b, const char *lock, const char *sku, bool ids)
{
    h_deadline(60);
    char body[160];
    snprintf(body, sizeof body,
             "{\"stock\": 120, \"segments\": 4, \"hold_ms\": 2, \"lock\": \"%s\"}", lock);
    int pa = h_svc_port(a), pb = h_svc_port(b);
    assert_int_equal(put_sku(pa, sku, body), 201);
    json_t *j = h_get_sku(pb, NULL, sku);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "lock")), lock);
    assert_true(json_is_true(json_object_get(j, "fencing")));
    assert_true(json_is_false(json_object_get(j, "rebalance")));
    json_decref(j);
    long long acquired =
        h_stat(pa, NULL, "lock_acquired") + h_stat(pb, NULL, "lock_acquired");

    struct sellout s = {.sku = sku, .ports = {pa, pb}, .ids = ids};
    assert_int_equal(h_parallel(8, sell, &s), 0);
    fprintf(stderr, "%s sell-out: %d sold, %d busy, %d other\n", lock, s.sold, s.busy,
            s.other);
    assert_int_equal(s.sold, 120);
    assert_int_equal(s.other, 0);
    assert_int_equal(h_audit(pa, NULL, sku, 120, true), 0);
    json_t *st = h_get_sku(pb, NULL, sku);
    assert_int_equal(h_jint(st, "orders"), 120);
    json_decref(st);
    /* every sale held a lock of the service's */
    assert_true(h_stat(pa, NULL, "lock_acquired") + h_stat(pb, NULL, "lock_acquired") -
                    acquired >=
                120);
    assert_int_equal(h_order(pa, sku, 1, NULL, NULL), 409);
}

static void sell_out(struct env *e, const char *lock)
{
    char sku[32];
    snprintf(sku, sizeof sku, "ls-%s", lock);
    sell_out_on(e->a, e->b, lock, sku, false);
}

static void test_sellout_redlock(void **state)
{
    sell_out(*state, "redlock");
}

static void test_sellout_memcached(void **state)
{
    sell_out(*state, "memcached");
}

static void test_sellout_zookeeper(void **state)
{
    sell_out(*state, "zookeeper");
}

/* A lock service's SKU through the rest of its life: an order id replayed, a cancel, a
 * restock, an order no segment fills (sold from two, under both segments' locks), then
 * sold out exactly. */
static void test_replay_cancel_restock_redlock(void **state)
{
    struct env *e = *state;
    h_deadline(60);
    int pa = h_svc_port(e->a), pb = h_svc_port(e->b);
    const char *sku = "ls-life";
    assert_int_equal(
        put_sku(pa, sku, "{\"stock\": 10, \"segments\": 2, \"lock\": \"redlock\"}"), 201);
    assert_int_equal(h_order(pa, sku, 2, "ls-life-1", NULL), 201);
    assert_int_equal(h_order(pb, sku, 2, "ls-life-1", NULL), 200); /* replayed */
    struct h_resp r;
    assert_int_equal(h_req(pb, "DELETE", "/orders/ls-life-1", NULL, NULL, &r), 200);
    h_resp_free(&r);
    char path[96];
    snprintf(path, sizeof path, "/admin/skus/%s/restock", sku);
    assert_int_equal(h_req(pa, "POST", path, NULL, "{\"qty\": 5}", &r), 200);
    h_resp_free(&r);
    json_t *j = h_get_sku(pa, NULL, sku);
    assert_int_equal(h_jint(j, "remaining"), 15);
    json_decref(j);
    assert_int_equal(h_order(pb, sku, 9, NULL, NULL), 201); /* 8 + 7: none holds 9 */
    for (int k = 0; k < 6; k++)
        assert_int_equal(h_order(k % 2 ? pa : pb, sku, 1, NULL, NULL), 201);
    assert_int_equal(h_order(pa, sku, 1, NULL, NULL), 409);
    assert_int_equal(h_audit(pa, NULL, sku, 15, false), 0);
}

/* ---- multi-segment orders ---------------------------------------------------------- */

/* An order no segment fills, under a lock service: the segments' locks taken from the
 * service in ascending order, each fenced, the parts deducted all or nothing. 12 units
 * on 3 segments: 10 sold from all three, 3 refused with nothing taken (2 left), the 2
 * sold; then 40 units on 4 segments sold exactly by 4 clients ordering 4 at a time
 * (each segment serves two such orders alone, its last 2 units only with another's). */
static void multi_on(struct env *e, const char *lock)
{
    h_deadline(60);
    int pa = h_svc_port(e->a), pb = h_svc_port(e->b);
    char sku[32], body[160];
    snprintf(sku, sizeof sku, "lm-%s", lock);
    snprintf(body, sizeof body,
             "{\"stock\": 12, \"segments\": 3, \"hold_ms\": 2, \"lock\": \"%s\"}", lock);
    assert_int_equal(put_sku(pa, sku, body), 201);
    long long multi = h_stat(pa, NULL, "multi_segment_orders");
    struct h_resp r;
    int st = h_order(pa, sku, 10, NULL, &r);
    if (st != 201)
        fail_msg("%s: an order of 10 from 4 + 4 + 4: %d %s", lock, st, r.body);
    h_resp_free(&r);
    assert_int_equal(h_stat(pa, NULL, "multi_segment_orders"), multi + 1);
    char code[64];
    assert_int_equal(h_order(pb, sku, 3, NULL, &r), 409);
    assert_string_equal(h_error_code(&r, code, sizeof code), "insufficient_stock");
    h_resp_free(&r);
    json_t *j = h_get_sku(pb, NULL, sku);
    assert_int_equal(h_jint(j, "remaining"), 2); /* nothing of the 3 taken */
    json_decref(j);
    assert_int_equal(h_order(pb, sku, 2, NULL, NULL), 201);
    assert_int_equal(h_order(pa, sku, 1, NULL, NULL), 409);
    assert_int_equal(h_audit(pa, NULL, sku, 12, false), 0);

    snprintf(sku, sizeof sku, "lm-%s-4", lock);
    snprintf(body, sizeof body,
             "{\"stock\": 40, \"segments\": 4, \"hold_ms\": 2, \"lock\": \"%s\"}", lock);
    assert_int_equal(put_sku(pa, sku, body), 201);
    struct sellout s = {.sku = sku, .ports = {pa, pb}, .qty = 4};
    assert_int_equal(h_parallel(4, sell, &s), 0);
    fprintf(stderr, "%s multi-segment sell-out: %d orders of 4, %d busy, %d other\n",
            lock, s.sold, s.busy, s.other);
    assert_int_equal(s.sold, 10);
    assert_int_equal(s.other, 0);
    j = h_get_sku(pb, NULL, sku);
    assert_int_equal(h_jint(j, "sold"), 40);
    assert_int_equal(h_jint(j, "remaining"), 0);
    json_decref(j);
    assert_int_equal(h_audit(pa, NULL, sku, 40, false), 0);
}

static void test_multi_redlock(void **state)
{
    multi_on(*state, "redlock");
}

static void test_multi_memcached(void **state)
{
    multi_on(*state, "memcached");
}

static void test_multi_zookeeper(void **state)
{
    multi_on(*state, "zookeeper");
}

/* A multi-segment order whose work under its holds (hold_ms) outlasts the lease: the
 * holds are renewed every ttl/3 as one segment's are, so it sells (not lost, not
 * fenced: 503 busy at its deadline). */
static void test_multi_renewed_redlock(void **state)
{
    struct env *e = *state;
    h_deadline(30);
    int pa = h_svc_port(e->a);
    char body[160];
    snprintf(body, sizeof body,
             "{\"stock\": 4, \"segments\": 2, \"hold_ms\": %d, \"lock\": \"redlock\"}",
             TTL_MS + 500);
    assert_int_equal(put_sku(pa, "lm-renewed", body), 201);
    long long renewals = h_stat(pa, NULL, "lease_renewals");
    long long lost = h_stat(pa, NULL, "lease_lost");
    struct h_resp r;
    int st = h_order(pa, "lm-renewed", 3, NULL, &r);
    if (st != 201)
        fail_msg("an order of 3 from 2 + 2 held %d ms: %d %s", TTL_MS + 500, st, r.body);
    h_resp_free(&r);
    assert_true(h_stat(pa, NULL, "lease_renewals") >= renewals + 2);
    assert_int_equal(h_stat(pa, NULL, "lease_lost"), lost);
    assert_int_equal(h_audit(pa, NULL, "lm-renewed", 4, false), 0);
}

struct frozen_order {
    int port;
    const char *sku;
    long long qty;
    int status;
};

static void *order_thread(void *arg)
{
    struct frozen_order *f = arg;
    f->status = h_order(f->port, f->sku, f->qty, NULL, NULL);
    return NULL;
}

/* A multi-segment order's holder frozen: A takes both segments' locks (1 unit each) for
 * an order of 2 and is frozen (SIGSTOP) within HOLD_MS; its leases run out, B takes
 * both and sells the 2; A, woken, sends its write: refused by the fences (FENCED,
 * counted), A answered 409, 0 oversold. */
static void frozen_multi(struct env *e, const char *lock)
{
    h_deadline(60);
    int pa = h_svc_port(e->a), pb = h_svc_port(e->b);
    char sku[32], body[160];
    snprintf(sku, sizeof sku, "fm-%s", lock);
    snprintf(body, sizeof body,
             "{\"stock\": 2, \"segments\": 2, \"hold_ms\": %d, \"lock\": \"%s\"}",
             HOLD_MS, lock);
    assert_int_equal(put_sku(pa, sku, body), 201);
    long long acquired = h_stat(pa, NULL, "lock_acquired");
    long long fenced = h_stat(pa, NULL, "fenced_rejections");
    struct frozen_order fa = {pa, sku, 2, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, order_thread, &fa), 0);
    /* both locks held: HOLD_MS remain */
    long long until = h_now_ms() + 5000;
    while (h_stat(pa, NULL, "lock_acquired") < acquired + 2 && h_now_ms() < until)
        h_sleep_ms(5);
    if (h_stat(pa, NULL, "lock_acquired") < acquired + 2) {
        pthread_join(t, NULL);
        fail_msg("%s: A never held both segments' locks (A answered %d)", lock,
                 fa.status);
    }
    assert_int_equal(h_svc_pause(e->a), 0);
    long long paused = h_now_ms();
    int st = 0;
    until = h_now_ms() + 15000;
    while (h_now_ms() < until) {
        st = h_order(pb, sku, 2, NULL, NULL);
        if (st != 503)
            break;
        h_sleep_ms(50);
    }
    long long sold_after = h_now_ms() - paused;
    assert_int_equal(h_svc_resume(e->a), 0);
    pthread_join(t, NULL);
    json_t *j = h_get_sku(pb, NULL, sku);
    assert_non_null(j);
    long long sold = h_jint(j, "sold"), remaining = h_jint(j, "remaining");
    json_decref(j);
    fprintf(stderr,
            "%s frozen multi-segment holder: B %d after %lld ms, A %d, sold %lld, "
            "remaining %lld, oversold %lld, fenced rejections +%lld\n",
            lock, st, sold_after, fa.status, sold, remaining, sold > 2 ? sold - 2 : 0,
            h_stat(pa, NULL, "fenced_rejections") - fenced);
    assert_int_equal(st, 201);
    assert_int_equal(fa.status, 409); /* its write refused, the SKU is sold out */
    assert_int_equal(sold, 2);
    assert_int_equal(remaining, 0);
    assert_int_equal(h_audit(pb, NULL, sku, 2, false), 0);
    assert_true(h_stat(pa, NULL, "fenced_rejections") > fenced);
}

static void test_frozen_multi_redlock_fenced(void **state)
{
    frozen_multi(*state, "redlock");
}

static void test_frozen_multi_memcached_fenced(void **state)
{
    frozen_multi(*state, "memcached");
}

static void test_frozen_multi_zookeeper_fenced(void **state)
{
    frozen_multi(*state, "zookeeper");
}

/* ---- a holder frozen past its lease -------------------------------------------- */

/* Instance A takes the only segment's lock for HOLD_MS and is frozen (SIGSTOP) while
 * it holds; its lease runs out, B takes the lock and sells the last unit; A, woken,
 * sends the write it was about to send (its hold timer fires before its lease's end
 * is noticed: the pause fell between the check and the write). Returns A's answer;
 * *sold and *remaining as GET /admin/skus has them after. */
static int frozen_holder(h_svc *a, h_svc *b, const char *lock, const char *sku,
                         bool fencing, long long *sold, long long *remaining,
                         struct env *restart)
{
    char body[192];
    snprintf(body, sizeof body,
             "{\"stock\": 1, \"segments\": 1, \"hold_ms\": %d, \"lock\": \"%s\", "
             "\"fencing\": %s}",
             HOLD_MS, lock, fencing ? "true" : "false");
    int pa = h_svc_port(a), pb = h_svc_port(b);
    assert_int_equal(put_sku(pa, sku, body), 201);
    long long acquired = h_stat(pa, NULL, "lock_acquired");
    long long fenced0 = h_stat(pa, NULL, "fenced_rejections");

    struct frozen_order fa = {pa, sku, 1, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, order_thread, &fa), 0);
    /* frozen while holding: once A counts the lock acquired, HOLD_MS remain */
    long long until = h_now_ms() + 5000;
    while (h_stat(pa, NULL, "lock_acquired") == acquired && h_now_ms() < until)
        h_sleep_ms(5);
    assert_true(h_stat(pa, NULL, "lock_acquired") > acquired);
    assert_int_equal(h_svc_pause(a), 0);
    long long paused = h_now_ms();
    /* the services' known failures: two of three RedLock masters restarted without
     * persistence forget A's keys, and B wins a majority within A's lease; memcached
     * restarted forgets every lock */
    for (int i = 1; restart != NULL && strcmp(lock, "redlock") == 0 && i < 3; i++)
        assert_int_equal(h_redis_restart(restart->nodes[i]), 0);
    if (restart != NULL && strcmp(lock, "memcached") == 0)
        assert_int_equal(h_memcached_restart(restart->mc), 0);

    /* B sells the unit once the service lets A's lock go (memcached: whole seconds) */
    int st = 0;
    until = h_now_ms() + 15000;
    while (h_now_ms() < until) {
        st = h_order(pb, sku, 1, NULL, NULL);
        if (st != 503)
            break;
        h_sleep_ms(50);
    }
    long long sold_after = h_now_ms() - paused;
    assert_int_equal(h_svc_resume(a), 0);
    pthread_join(t, NULL);
    json_t *j = h_get_sku(pb, NULL, sku);
    assert_non_null(j);
    *sold = h_jint(j, "sold");
    *remaining = h_jint(j, "remaining");
    json_decref(j);
    /* the figures of docs/BENCHMARKS.md's safety table: oversold = sold - 1 (the
     * stock was 1), fenced = A's fenced_rejections during the test */
    fprintf(stderr,
            "%s frozen holder%s, fencing %s: B %d after %lld ms, A %d, sold %lld, "
            "remaining %lld, oversold %lld, fenced rejections +%lld\n",
            lock, restart ? " (restarted)" : "", fencing ? "on" : "off", st, sold_after,
            fa.status, *sold, *remaining, *sold > 1 ? *sold - 1 : 0,
            h_stat(pa, NULL, "fenced_rejections") - fenced0);
    /* with the masters restarted, B was granted the lock within A's lease: B's sale,
     * its own hold included, ends before A's lease would have (~0.7 s here; a grant
     * only after the lease ran out takes more than TTL_MS + HOLD_MS) */
    if (restart != NULL)
        assert_true(sold_after < TTL_MS);
    assert_int_equal(st, 201);
    return fa.status;
}

static void frozen_fenced_on(h_svc *a, h_svc *b, const char *lock, const char *sku)
{
    h_deadline(60);
    long long fenced = h_stat(h_svc_port(a), NULL, "fenced_rejections");
    long long sold, remaining;
    int st = frozen_holder(a, b, lock, sku, true, &sold, &remaining, NULL);
    assert_int_equal(st, 409); /* its write refused, the SKU is sold out */
    assert_int_equal(sold, 1);
    assert_int_equal(remaining, 0);
    assert_int_equal(h_audit(h_svc_port(b), NULL, sku, 1, true), 0);
    /* the stale fence was refused by the store, and counted */
    assert_true(h_stat(h_svc_port(a), NULL, "fenced_rejections") > fenced);
    struct h_resp m;
    assert_int_equal(h_http(h_svc_port(a), "GET", "/metrics", NULL, NULL, 0, &m), 200);
    assert_true(h_metric(m.body, "inventory_fenced_rejections_total") >= 1);
    h_resp_free(&m);
}

static void frozen_fenced(struct env *e, const char *lock)
{
    char sku[32];
    snprintf(sku, sizeof sku, "fz-%s-1", lock);
    frozen_fenced_on(e->a, e->b, lock, sku);
}

static void frozen_unfenced(struct env *e, const char *lock)
{
    h_deadline(60);
    long long sold, remaining;
    char sku[32];
    snprintf(sku, sizeof sku, "fz-%s-0", lock);
    int a = frozen_holder(e->a, e->b, lock, sku, false, &sold, &remaining, NULL);
    /* the lab's demonstration: both holders sold the one unit */
    assert_int_equal(a, 201);
    assert_int_equal(sold, 2);
    assert_int_equal(remaining, -1);
}

static void test_frozen_holder_redlock_fenced(void **state)
{
    frozen_fenced(*state, "redlock");
}

static void test_frozen_holder_redlock_unfenced_oversells(void **state)
{
    frozen_unfenced(*state, "redlock");
}

static void test_frozen_holder_memcached_fenced(void **state)
{
    frozen_fenced(*state, "memcached");
}

static void test_frozen_holder_memcached_unfenced_oversells(void **state)
{
    frozen_unfenced(*state, "memcached");
}

/* ZooKeeper: the frozen holder's session expires (its lease: the session timeout it
 * asked, ttl), its node goes, B's node is the lowest; the fence is the node's czxid */
static void test_frozen_holder_zookeeper_fenced(void **state)
{
    frozen_fenced(*state, "zookeeper");
}

static void test_frozen_holder_zookeeper_unfenced_oversells(void **state)
{
    frozen_unfenced(*state, "zookeeper");
}

/* The lock service restarted while A holds (frozen, but well within its lease): two
 * RedLock masters without persistence, or memcached. B is granted the same lock and
 * sells the unit; A's write is refused by the fence (0 oversold), or without it the
 * unit is sold twice. */
/* After a restart of the lock service, the first call on each connection of the
 * instances' handles (one per loop; memcached: a pool of them) may find the old socket
 * dead and answer 503: orders on a scratch SKU until each instance sold 12 in a row. */
static void settle(struct env *e, const char *lock)
{
    char body[96];
    snprintf(body, sizeof body, "{\"stock\": 1000, \"segments\": 4, \"lock\": \"%s\"}",
             lock);
    int put = put_sku(h_svc_port(e->a), "ls-settle", body);
    assert_true(put == 201 || put == 200); /* made, or reset by an earlier settle */
    for (int k = 0; k < 2; k++) {
        int port = h_svc_port(k ? e->b : e->a), row = 0;
        for (int tries = 0; row < 12 && tries < 200; tries++)
            row = h_order(port, "ls-settle", 1, NULL, NULL) == 201 ? row + 1 : 0;
        assert_int_equal(row, 12);
    }
}

static void restart_double_grant(struct env *e, const char *lock)
{
    h_deadline(60);
    int pa = h_svc_port(e->a);
    long long fenced = h_stat(pa, NULL, "fenced_rejections");
    long long sold, remaining;
    char sku[32];
    snprintf(sku, sizeof sku, "rr-%s-1", lock);
    int st = frozen_holder(e->a, e->b, lock, sku, true, &sold, &remaining, e);
    assert_int_equal(st, 409);
    assert_int_equal(sold, 1);
    assert_int_equal(remaining, 0);
    /* refused by the store's fence: A thawed could not have known (its hold ends at
     * HOLD_MS, before its first renewal at TTL_MS / 3 and its lease's end, so the write
     * leaves before any news of the loss) */
    assert_true(h_stat(pa, NULL, "fenced_rejections") > fenced);
    settle(e, lock);
    snprintf(sku, sizeof sku, "rr-%s-0", lock);
    st = frozen_holder(e->a, e->b, lock, sku, false, &sold, &remaining, e);
    assert_int_equal(st, 201);
    assert_int_equal(sold, 2);
    settle(e, lock);
}

static void test_redlock_restart_double_grant(void **state)
{
    restart_double_grant(*state, "redlock");
}

static void test_memcached_restart_double_grant(void **state)
{
    restart_double_grant(*state, "memcached");
}

/* ---- RedLock masters killed under orders ----------------------------------------- */

struct killed_sale {
    const char *sku;
    int ports[2];
    atomic_bool stop;
    atomic_int sold, busy, other; /* 201, 503, anything else but 409 */
    char code[64];                /* a 503's error code */
};

static void *killed_seller(void *arg)
{
    struct killed_sale *s = arg;
    for (int k = 0; !atomic_load(&s->stop); k++) {
        struct h_resp r;
        int st = h_order(s->ports[k % 2], s->sku, 1, NULL, &r);
        if (st == 201) {
            atomic_fetch_add(&s->sold, 1);
        } else if (st == 503) {
            if (atomic_fetch_add(&s->busy, 1) == 0)
                h_error_code(&r, s->code, sizeof s->code);
            h_sleep_ms(5); /* answered at once with no majority: spare the CPU */
        } else if (st != 409) {
            atomic_fetch_add(&s->other, 1);
        }
        h_resp_free(&r);
        if (st == 409)
            break;
    }
    return NULL;
}

/* Sales counted between now and `ms` from now. */
static int sold_during(struct killed_sale *s, int ms)
{
    int before = atomic_load(&s->sold);
    h_sleep_ms(ms);
    return atomic_load(&s->sold) - before;
}

/* Four clients sell over both instances while one of the three RedLock masters is
 * killed (SIGKILL): a majority of two still grants, sales go on; then a second: no
 * majority, every order 503 backend_unavailable and nothing sold, none oversold. The
 * audit is exact (the store's sold equals the 201s counted); the masters come back empty
 * and sales resume. Prints the figures of docs/BENCHMARKS.md's safety table. */
static void test_redlock_masters_killed(void **state)
{
    struct env *e = *state;
    h_deadline(90);
    /* 4 segments held 20 ms a sale: at most 200 sales a second, so the stock lasts */
    enum { STOCK = 1000, CLIENTS = 4 };
    const char *sku = "rk-redlock";
    int pa = h_svc_port(e->a), pb = h_svc_port(e->b);
    assert_int_equal(put_sku(pa, sku,
                             "{\"stock\": 1000, \"segments\": 4, \"hold_ms\": 20, "
                             "\"lock\": \"redlock\"}"),
                     201);
    struct killed_sale s = {.sku = sku, .ports = {pa, pb}};
    pthread_t t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, killed_seller, &s), 0);
    int three = sold_during(&s, 500);
    assert_int_equal(h_redis_kill(e->nodes[0]), 137);
    int busy1 = atomic_load(&s.busy);
    int two = sold_during(&s, 1000); /* one master down: still sells */
    busy1 = atomic_load(&s.busy) - busy1;
    assert_int_equal(h_redis_kill(e->nodes[1]), 137);
    /* a hold granted before the kill may still end in a sale: one per client at most,
     * and none after that; lock_wait_ms is 1000, so wait past it */
    int tail = sold_during(&s, 1500);
    int busy2 = atomic_load(&s.busy);
    int one = sold_during(&s, 2000); /* one master of three: nothing */
    busy2 = atomic_load(&s.busy) - busy2;
    atomic_store(&s.stop, true);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(t[i], NULL);
    json_t *j = h_get_sku(pa, NULL, sku);
    assert_non_null(j);
    long long sold = h_jint(j, "sold"), remaining = h_jint(j, "remaining");
    json_decref(j);
    fprintf(
        stderr,
        "redlock masters killed under orders: 3 up %d sold in 500 ms; 1 killed %d sold "
        "in 1000 ms (%d x 503); 2 killed %d sold in the next 1500 ms (holds granted "
        "before), then %d sold in 2000 ms, %d x 503 (%s); store sold %lld = %d 201s, "
        "remaining %lld, oversold %lld, other answers %d\n",
        three, two, busy1, tail, one, busy2, s.code, sold, atomic_load(&s.sold),
        remaining, sold > STOCK ? sold - STOCK : 0, atomic_load(&s.other));
    assert_true(three > 0);
    assert_true(two > 0);         /* a majority of 2 of 3 still grants */
    assert_true(tail <= CLIENTS); /* at most the holds granted before the kill */
    assert_int_equal(one, 0);     /* no majority: nothing sold */
    assert_true(busy2 > 0);       /* and the orders said so */
    /* fewer than a majority answered: UNAVAIL, not BUSY (DESIGN.md, RedLock) */
    assert_string_equal(s.code, "backend_unavailable");
    assert_int_equal(atomic_load(&s.other), 0);
    assert_int_equal(sold, atomic_load(&s.sold)); /* exact: every sale answered 201 */
    assert_true(remaining > 0 && remaining + sold == STOCK);
    assert_int_equal(h_audit(pa, NULL, sku, STOCK, true), 0);
    /* The masters back (empty): sales resume, exactly. */
    assert_int_equal(h_redis_restart(e->nodes[0]), 0);
    assert_int_equal(h_redis_restart(e->nodes[1]), 0);
    settle(e, "redlock");
    for (int k = 0; k < 20; k++)
        assert_int_equal(h_order(k % 2 ? pa : pb, sku, 1, NULL, NULL), 201);
    j = h_get_sku(pa, NULL, sku);
    assert_int_equal(h_jint(j, "sold"), sold + 20);
    json_decref(j);
    assert_int_equal(h_audit(pa, NULL, sku, STOCK, true), 0);
}

/* ---- ZooKeeper restarted under orders -------------------------------------------- */

/* Four clients sell a ZooKeeper SKU over both instances; the server is stopped (by
 * pid): holds granted before may still end in a sale (one per client at most), then
 * every order answers 503 backend_unavailable and nothing sells; started again on
 * its data dir, the handles reconnect (or open new sessions) and sales resume. The
 * audit is exact: the store's sold equals the 201s counted, none oversold. */
static void test_zookeeper_restarted_under_orders(void **state)
{
    struct env *e = *state;
    h_deadline(90);
    enum { STOCK = 1000, CLIENTS = 4 };
    const char *sku = "zr-zookeeper";
    int pa = h_svc_port(e->a), pb = h_svc_port(e->b);
    assert_int_equal(put_sku(pa, sku,
                             "{\"stock\": 1000, \"segments\": 4, \"hold_ms\": 20, "
                             "\"lock\": \"zookeeper\"}"),
                     201);
    struct killed_sale s = {.sku = sku, .ports = {pa, pb}};
    pthread_t t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, killed_seller, &s), 0);
    int up = sold_during(&s, 500);
    assert_int_equal(h_zk_stop(e->zk), 0);
    /* a hold granted before the stop may still sell; lock_wait_ms is 1000 and an
     * acquire answers within 1 s of the loss (DESIGN.md, ZooKeeper: deadlines) */
    int tail = sold_during(&s, 1500);
    int busy = atomic_load(&s.busy);
    int down = sold_during(&s, 1500); /* no lock service: nothing sold */
    busy = atomic_load(&s.busy) - busy;
    long long stopped = h_now_ms();
    assert_int_equal(h_zk_restart(e->zk), 0);
    long long restarted = h_now_ms();
    /* sales resume once the handles are back (their old sessions revived or expired) */
    int before = atomic_load(&s.sold);
    long long until = h_now_ms() + 20000;
    while (atomic_load(&s.sold) == before && h_now_ms() < until)
        h_sleep_ms(20);
    long long resumed = h_now_ms();
    int again = sold_during(&s, 500);
    atomic_store(&s.stop, true);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(t[i], NULL);
    json_t *j = h_get_sku(pa, NULL, sku);
    assert_non_null(j);
    long long sold = h_jint(j, "sold"), remaining = h_jint(j, "remaining");
    json_decref(j);
    fprintf(
        stderr,
        "zookeeper restarted under orders: up %d sold in 500 ms; stopped: %d sold in "
        "the next 1500 ms (holds granted before), then %d in 1500 ms, %d x 503 (%s); "
        "restart took %lld ms, sales resumed %lld ms after it, %d sold in 500 ms; "
        "store sold %lld = %d 201s, remaining %lld, oversold %lld, other answers %d\n",
        up, tail, down, busy, s.code, restarted - stopped, resumed - restarted, again,
        sold, atomic_load(&s.sold), remaining, sold > STOCK ? sold - STOCK : 0,
        atomic_load(&s.other));
    assert_true(up > 0);
    assert_true(tail <= CLIENTS); /* at most the holds granted before the stop */
    assert_int_equal(down, 0);    /* no lock service: nothing sold */
    assert_true(busy > 0);        /* and the orders said so */
    assert_string_equal(s.code, "backend_unavailable");
    assert_true(again > 0); /* back: sells again */
    assert_int_equal(atomic_load(&s.other), 0);
    assert_int_equal(sold, atomic_load(&s.sold)); /* exact: every sale answered 201 */
    assert_true(remaining > 0 && remaining + sold == STOCK);
    assert_int_equal(h_audit(pa, NULL, sku, STOCK, true), 0);
}

/* ---- a Redis Cluster as the store ----------------------------------------------- */

/* The fenced scripts of a cluster (acquire_slot.lua, deduct_slot.lua; deduct.lua for a
 * fresh id made for its segment's slot): a sell-out with client ids and without, the
 * frozen holder refused, and a multi-segment order (6 of 4 + 4; 2 of what is left). */
static void test_cluster_store_redlock(void **state)
{
    struct env *e = *state;
    h_deadline(90);
    h_cluster *c = h_cluster_start(3, 0);
    assert_non_null(c);
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", TTL_MS);
    const char *args[] = {
        "--redlock", e->redlock,       "--threads", "2", "--lock-ttl-ms",
        ttl,         "--lock-wait-ms", "1000",      NULL};
    h_svc *a = h_svc_start_args(h_cluster_node(c, 0), args);
    h_svc *b = h_svc_start_args(h_cluster_node(c, 1), args);
    assert_non_null(a);
    assert_non_null(b);
    sell_out_on(a, b, "redlock", "lc-sell", true);
    frozen_fenced_on(a, b, "redlock", "lc-frozen");
    /* a multi-segment order: its plan claimed, one fenced deduction per part */
    int pa = h_svc_port(a), pb = h_svc_port(b);
    assert_int_equal(put_sku(pa, "lc-multi",
                             "{\"stock\": 8, \"segments\": 2, \"hold_ms\": 2, "
                             "\"lock\": \"redlock\"}"),
                     201);
    assert_int_equal(h_order(pa, "lc-multi", 6, NULL, NULL), 201);
    assert_int_equal(h_order(pb, "lc-multi", 3, NULL, NULL), 409);
    assert_int_equal(h_order(pb, "lc-multi", 2, "lc-multi-2", NULL), 201);
    assert_int_equal(h_order(pa, "lc-multi", 1, NULL, NULL), 409);
    assert_int_equal(h_audit(pa, NULL, "lc-multi", 8, false), 0);
    assert_int_equal(h_svc_stop_clean(a), 0);
    assert_int_equal(h_svc_stop_clean(b), 0);
    h_svc_free(a);
    h_svc_free(b);
    h_cluster_free(c);
}

/* ---- settings refused ------------------------------------------------------------ */

static void expect_put_refused(int port, const char *body, const char *detail)
{
    char path[64] = "/admin/skus/ls-bad?reset=true";
    struct h_resp r;
    h_req(port, "PUT", path, NULL, body, &r);
    if (h_expect_error(&r, 400, "invalid_field") != 0 || strstr(r.body, detail) == NULL)
        fail_msg("%s: %d %s (wanted 400 naming \"%s\")", body, r.status, r.body, detail);
    h_resp_free(&r);
}

static void test_bad_settings_refused(void **state)
{
    struct env *e = *state;
    h_deadline(30);
    int pa = h_svc_port(e->a);
    expect_put_refused(pa, "{\"stock\": 1, \"lock\": \"etcd\"}",
                       ""); /* the store has none */
    expect_put_refused(pa, "{\"stock\": 1, \"lock\": 3}", "lock");
    expect_put_refused(pa, "{\"stock\": 1, \"lock\": \"redlock\", \"mode\": \"atomic\"}",
                       "mode");
    expect_put_refused(pa, "{\"stock\": 1, \"lock\": \"redlock\", \"rebalance\": true}",
                       "rebalance");
    expect_put_refused(pa, "{\"stock\": 1, \"fencing\": false}", "lock service");
    expect_put_refused(pa, "{\"stock\": 1, \"lock\": \"redlock\", \"fencing\": 0}",
                       "fencing");
    /* an instance without the services nor --lab */
    h_svc *c = h_svc_start_args(e->store, NULL);
    assert_non_null(c);
    int pc = h_svc_port(c);
    expect_put_refused(pc, "{\"stock\": 1, \"lock\": \"redlock\"}", "--redlock");
    expect_put_refused(pc, "{\"stock\": 1, \"lock\": \"memcached\"}", "--memcached");
    expect_put_refused(pc, "{\"stock\": 1, \"lock\": \"zookeeper\"}", "--zookeeper");
    char body[128];
    snprintf(body, sizeof body,
             "{\"stock\": 1, \"lock\": \"redlock\", \"fencing\": false}");
    assert_int_equal(put_sku(pa, "ls-lab", body), 201); /* A has --lab */
    h_svc *d =
        h_svc_start_args(e->store, (const char *const[]){"--redlock", e->redlock, NULL});
    assert_non_null(d);
    expect_put_refused(h_svc_port(d), body, "--lab");
    /* the default is the store's own lock, named */
    assert_int_equal(put_sku(pc, "ls-plain", "{\"stock\": 3}"), 201);
    json_t *j = h_get_sku(pc, NULL, "ls-plain");
    assert_string_equal(json_string_value(json_object_get(j, "lock")), "redis");
    json_decref(j);
    /* an instance without the service cannot sell a SKU that needs it: 503 */
    assert_int_equal(h_order(pc, "ls-lab", 1, NULL, NULL), 503);
    assert_int_equal(h_svc_stop_clean(c), 0);
    assert_int_equal(h_svc_stop_clean(d), 0);
    h_svc_free(c);
    h_svc_free(d);
}

int main(void)
{
    /* the services inherit it: see tests/tsan_zookeeper.supp (no-op without TSan) */
    char supp[4096], opts[4608];
    const char *old = getenv("TSAN_OPTIONS");
    if (realpath("tests/tsan_zookeeper.supp", supp) != NULL) {
        snprintf(opts, sizeof opts, "%s%ssuppressions=%s", old ? old : "",
                 old && old[0] ? " " : "", supp);
        setenv("TSAN_OPTIONS", opts, 1);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_settings_refused),
        cmocka_unit_test(test_sellout_redlock),
        cmocka_unit_test(test_sellout_memcached),
        cmocka_unit_test(test_sellout_zookeeper),
        cmocka_unit_test(test_replay_cancel_restock_redlock),
        cmocka_unit_test(test_multi_redlock),
        cmocka_unit_test(test_multi_memcached),
        cmocka_unit_test(test_multi_zookeeper),
        cmocka_unit_test(test_multi_renewed_redlock),
        cmocka_unit_test(test_frozen_multi_redlock_fenced),
        cmocka_unit_test(test_frozen_multi_memcached_fenced),
        cmocka_unit_test(test_frozen_multi_zookeeper_fenced),
        cmocka_unit_test(test_frozen_holder_redlock_fenced),
        cmocka_unit_test(test_frozen_holder_redlock_unfenced_oversells),
        cmocka_unit_test(test_frozen_holder_memcached_fenced),
        cmocka_unit_test(test_frozen_holder_memcached_unfenced_oversells),
        cmocka_unit_test(test_frozen_holder_zookeeper_fenced),
        cmocka_unit_test(test_frozen_holder_zookeeper_unfenced_oversells),
        cmocka_unit_test(test_redlock_restart_double_grant),
        cmocka_unit_test(test_memcached_restart_double_grant),
        cmocka_unit_test(test_cluster_store_redlock),
        cmocka_unit_test(test_redlock_masters_killed),
        cmocka_unit_test(test_zookeeper_restarted_under_orders),
    };
    return h_exit_status(
        cmocka_run_group_tests_name("lock_services", tests, group_setup, group_teardown));
}
