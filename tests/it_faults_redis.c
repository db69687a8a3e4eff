/* it_faults_redis.c -- Redis killed under load and restarted from its AOF, and Redis
 * hung (SIGSTOP) under load, with the service running throughout.
 *
 * Clients give every order its own order_id, so each outcome can be checked against
 * Redis afterwards: a 201 must survive the crash; an order whose answer was lost or
 * was a 503 may or may not have happened, and GET /orders/{id} settles which. The
 * audit then demands sold = 201s + the settled ones, exactly.
 */
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

struct outcome {
    int status;
    char code[32];
    long long sent_ms, done_ms;
};

static void place(int port, const char *sku, const char *id, struct outcome *o)
{
    struct h_resp r;
    o->sent_ms = h_now_ms();
    o->status = h_order(port, sku, 1, id, &r);
    o->done_ms = h_now_ms();
    h_error_code(&r, o->code, sizeof o->code);
    h_resp_free(&r);
}

static long long sku_sold(int port, const char *sku)
{
    json_t *j = h_get_sku(port, NULL, sku);
    long long n = j != NULL ? json_integer_value(json_object_get(j, "sold")) : -1;
    json_decref(j);
    return n;
}

/* Poll GET /healthz until 200; false after timeout_ms. */
static bool wait_healthy(int port, int timeout_ms)
{
    long long end = h_now_ms() + timeout_ms;
    do {
        struct h_resp r;
        int st = h_req(port, "GET", "/healthz", NULL, NULL, &r);
        h_resp_free(&r);
        if (st == 200)
            return true;
        h_sleep_ms(100);
    } while (h_now_ms() < end);
    return false;
}

/* ---- SIGKILL under load, restart from the AOF ----------------------------------- */

#define LOAD_THREADS 8
#define LOAD_MAX 6000 /* orders per thread, at most */
#define LOAD_STOCK 1000000

struct load {
    h_redis *redis;
    int port;
    atomic_bool stop;
    struct outcome *out[LOAD_THREADS];
    int n[LOAD_THREADS];
    long long killed_ms, restarted_ms;
    int killed_status, restart_rc;
};

static void load_id(char *buf, size_t len, int t, int i)
{
    snprintf(buf, len, "aof-%d-%d", t, i);
}

struct load_arg {
    struct load *l;
    int idx;
};

static void *load_main(void *p)
{
    struct load_arg *a = p;
    struct load *l = a->l;
    int idx = a->idx;
    for (int i = 0; i < LOAD_MAX && !atomic_load(&l->stop); i++) {
        char id[48];
        load_id(id, sizeof id, idx, i);
        place(l->port, "aof", id, &l->out[idx][i]);
        l->n[idx] = i + 1;
        if (l->out[idx][i].status == 503)
            h_sleep_ms(20); /* a client backing off, not a hot loop on a dead backend */
    }
    return NULL;
}

struct verify {
    struct load *l;
    int lost;       /* 201s without a record */
    int settled;    /* unanswered/503 orders that did happen */
    int bad_status; /* answers that are neither 201, 409 nor 503 */
};

static void verify_main(int idx, void *ctx)
{
    struct verify *v = ctx;
    struct load *l = v->l;
    int lost = 0, settled = 0, bad = 0;
    for (int i = 0; i < l->n[idx]; i++) {
        const struct outcome *o = &l->out[idx][i];
        char id[48];
        load_id(id, sizeof id, idx, i);
        if (o->status == 201) {
            if (h_order_status(l->port, id) != 200) {
                fprintf(stderr, "order %s got a 201 but has no record\n", id);
                lost++;
            }
        } else if (o->status == 503 || o->status < 0) {
            int st = h_order_status(l->port, id);
            if (st == 200)
                settled++;
            else if (st != 404)
                bad++;
        } else {
            fprintf(stderr, "order %s answered %d %s\n", id, o->status, o->code);
            bad++;
        }
    }
    __atomic_add_fetch(&v->lost, lost, __ATOMIC_RELAXED);
    __atomic_add_fetch(&v->settled, settled, __ATOMIC_RELAXED);
    __atomic_add_fetch(&v->bad_status, bad, __ATOMIC_RELAXED);
}

/* Redis dies (SIGKILL) in the middle of a stream of orders and comes back from its
 * AOF on the same port. Every 201 is still there; the service, never restarted,
 * answers 503 while Redis is away and confirms orders again once it is back. */
static void test_redis_killed_under_load(void **state)
{
    struct h_env *e = *state;
    h_deadline(90);
    /* A 201 survives the crash only if Redis wrote it before answering: with
     * appendfsync everysec Redis may postpone that write by up to 2 s when the disk is
     * slow (a loaded machine), and the kill would take it. Durability is Redis's
     * setting; the service's promise is that what Redis acknowledged is what it says. */
    redisContext *rc = h_redis_connect(e->redis);
    assert_non_null(rc);
    redisReply *rr = redisCommand(rc, "CONFIG SET appendfsync always");
    assert_non_null(rr);
    freeReplyObject(rr);
    redisFree(rc);
    const char *args[] = {"--redis-timeout-ms", "500", "--lock-wait-ms", "1000", NULL};
    h_svc *s = h_svc_start_args(e->redis, args);
    assert_non_null(s);
    struct load l;
    memset(&l, 0, sizeof l);
    l.redis = e->redis;
    l.port = h_svc_port(s);
    for (int t = 0; t < LOAD_THREADS; t++) {
        l.out[t] = calloc(LOAD_MAX, sizeof *l.out[t]);
        assert_non_null(l.out[t]);
    }
    assert_int_equal(h_put_sku(l.port, NULL, "aof", LOAD_STOCK, 20, "lock", 0), 0);

    /* Redis is restarted from this (the main) thread: the harness's children die
     * with the thread that forked them (PR_SET_PDEATHSIG). */
    pthread_t th[LOAD_THREADS];
    struct load_arg args_of[LOAD_THREADS];
    for (int t = 0; t < LOAD_THREADS; t++) {
        args_of[t] = (struct load_arg){&l, t};
        assert_int_equal(pthread_create(&th[t], NULL, load_main, &args_of[t]), 0);
    }
    h_sleep_ms(800);
    l.killed_status = h_redis_kill(l.redis);
    l.killed_ms = h_now_ms();
    h_sleep_ms(700);
    l.restart_rc = h_redis_restart(l.redis);
    l.restarted_ms = h_now_ms();
    h_sleep_ms(1500);
    atomic_store(&l.stop, true);
    for (int t = 0; t < LOAD_THREADS; t++)
        pthread_join(th[t], NULL);
    assert_int_equal(l.killed_status, 128 + 9);
    assert_int_equal(l.restart_rc, 0);

    int ok_before = 0, unavailable = 0, ok_after = 0, total = 0, unanswered = 0;
    for (int t = 0; t < LOAD_THREADS; t++) {
        for (int i = 0; i < l.n[t]; i++) {
            const struct outcome *o = &l.out[t][i];
            total++;
            ok_before += o->status == 201 && o->done_ms < l.killed_ms;
            ok_after += o->status == 201 && o->sent_ms > l.restarted_ms;
            unavailable += o->status == 503;
            unanswered += o->status < 0;
        }
    }
    fprintf(stderr,
            "%d orders: %d confirmed before the kill, %d after the restart, %d answered "
            "503, %d unanswered\n",
            total, ok_before, ok_after, unavailable, unanswered);
    assert_true(ok_before > 0);
    assert_true(unavailable > 0);
    assert_true(ok_after > 0); /* recovered with no service restart */
    assert_int_equal(unanswered, 0);

    struct verify v = {.l = &l};
    assert_int_equal(h_parallel(LOAD_THREADS, verify_main, &v), 0);
    int confirmed = 0;
    for (int t = 0; t < LOAD_THREADS; t++)
        for (int i = 0; i < l.n[t]; i++)
            confirmed += l.out[t][i].status == 201;
    long long sold = sku_sold(l.port, "aof");
    fprintf(stderr,
            "sold %lld = %d confirmed + %d that happened without a 201; lost %d\n", sold,
            confirmed, v.settled, v.lost);
    assert_int_equal(v.lost, 0);
    assert_int_equal(v.bad_status, 0);
    /* Only orders in flight at the kill can have happened unconfirmed. */
    assert_true(v.settled <= LOAD_THREADS);
    assert_int_equal(sold, confirmed + v.settled);
    assert_int_equal(h_audit(l.port, NULL, "aof", LOAD_STOCK, true), 0);

    struct h_resp r;
    assert_int_equal(h_order(l.port, "aof", 1, "aof-final", &r), 201);
    h_resp_free(&r);
    assert_true(h_svc_alive(s));
    for (int t = 0; t < LOAD_THREADS; t++)
        free(l.out[t]);
    h_svc_free(s);
}

/* ---- Redis hung (SIGSTOP) under load ------------------------------------------------
 */

#define HANG_ORDERS 16
#define HANG_WORKERS 4
#define HANG_BOUND_MS 20000 /* a generous bound on any answer during the hang */

struct hang {
    int port;
    struct outcome out[HANG_ORDERS];
    int livez_status;
    long long livez_ms;
};

static void hang_main(int idx, void *ctx)
{
    struct hang *h = ctx;
    if (idx == HANG_ORDERS) {
        /* /livez must not queue behind the stuck orders. */
        h_sleep_ms(200);
        long long t0 = h_now_ms();
        struct h_resp r;
        h->livez_status = h_req(h->port, "GET", "/livez", NULL, NULL, &r);
        h->livez_ms = h_now_ms() - t0;
        h_resp_free(&r);
        return;
    }
    char id[48];
    snprintf(id, sizeof id, "hang-%d", idx);
    place(h->port, "hang", id, &h->out[idx]);
}

static void orders_main(int idx, void *ctx)
{
    struct hang *h = ctx;
    char id[48];
    snprintf(id, sizeof id, "after-hang-%d", idx);
    place(h->port, "hang", id, &h->out[idx]);
}

/* Redis stops answering but keeps its connections open. With four workers and
 * sixteen orders, every order must come back 503 within a bound (command timeouts,
 * not a hang), /livez keeps answering, and once Redis resumes all workers serve
 * orders again. Nothing sent into the hang is sold. */
static void test_redis_hung_under_load(void **state)
{
    struct h_env *e = *state;
    h_deadline(90);
    char workers[8];
    snprintf(workers, sizeof workers, "%d", HANG_WORKERS);
    const char *args[] = {"--redis-timeout-ms", "500", "--threads", workers, NULL};
    h_svc *s = h_svc_start_args(e->redis, args);
    assert_non_null(s);
    struct hang h;
    memset(&h, 0, sizeof h);
    h.port = h_svc_port(s);
    assert_int_equal(h_put_sku(h.port, NULL, "hang", 1000, 10, "lock", 0), 0);
    int confirmed = 0;
    for (int i = 0; i < 10; i++) {
        char id[32];
        snprintf(id, sizeof id, "pre-hang-%d", i);
        confirmed += h_order(h.port, "hang", 1, id, NULL) == 201;
    }
    assert_int_equal(confirmed, 10);

    /* Pause while idle, and let the SKU settings cache expire, so that whatever an
     * order sends into the hang is a read that can do no harm when Redis wakes. */
    assert_int_equal(h_redis_pause(e->redis), 0);
    h_sleep_ms(300);
    long long t0 = h_now_ms();
    assert_int_equal(h_parallel(HANG_ORDERS + 1, hang_main, &h), 0);
    long long all_ms = h_now_ms() - t0;
    struct h_resp r;
    int health = h_req(h.port, "GET", "/healthz", NULL, NULL, &r);
    h_resp_free(&r);
    assert_int_equal(h_redis_resume(e->redis), 0);

    long long slowest = 0;
    int unavailable = 0;
    for (int i = 0; i < HANG_ORDERS; i++) {
        const struct outcome *o = &h.out[i];
        long long ms = o->done_ms - o->sent_ms;
        if (ms > slowest)
            slowest = ms;
        if (o->status == 503 && strcmp(o->code, "backend_unavailable") == 0)
            unavailable++;
        else
            fprintf(stderr, "hang-%d answered %d %s after %lld ms\n", i, o->status,
                    o->code, ms);
    }
    fprintf(stderr,
            "during the hang: %d/%d orders 503 backend_unavailable, slowest %lld ms, all "
            "in %lld ms; /livez %d in %lld ms; /healthz %d\n",
            unavailable, HANG_ORDERS, slowest, all_ms, h.livez_status, h.livez_ms,
            health);
    assert_int_equal(unavailable, HANG_ORDERS);
    assert_true(slowest <= HANG_BOUND_MS);
    assert_int_equal(h.livez_status, 200);
    assert_true(h.livez_ms <= 5000);
    assert_int_equal(health, 503);

    /* Back: every worker serves again, without a restart. */
    assert_true(wait_healthy(h.port, 15000));
    struct hang after;
    memset(&after, 0, sizeof after);
    after.port = h.port;
    assert_int_equal(h_parallel(HANG_ORDERS, orders_main, &after), 0);
    for (int i = 0; i < HANG_ORDERS; i++) {
        if (after.out[i].status != 201)
            fprintf(stderr, "after-hang-%d answered %d %s\n", i, after.out[i].status,
                    after.out[i].code);
        confirmed += after.out[i].status == 201;
    }
    assert_int_equal(confirmed, 10 + HANG_ORDERS);
    for (int i = 0; i < HANG_ORDERS; i++) {
        char id[48];
        snprintf(id, sizeof id, "hang-%d", i);
        assert_int_equal(h_order_status(h.port, id), 404);
    }
    assert_int_equal(sku_sold(h.port, "hang"), confirmed);
    assert_int_equal(h_audit(h.port, NULL, "hang", 1000, true), 0);
    assert_true(h_svc_alive(s));
    h_svc_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redis_killed_under_load),
        cmocka_unit_test(test_redis_hung_under_load),
    };
    return cmocka_run_group_tests_name("faults_redis", tests, group_setup,
                                       group_teardown);
}
