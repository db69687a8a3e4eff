/* it_durability.c -- a SKU's durability "replicated" against a real redis-server and
 * its replica: an order is 201 only once WAIT says a replica has it; without a
 * replica it is 503 not_replicated naming the order id, the order stands on the
 * master, and its retry answers 200; likewise a cancel and a restock; "async" SKUs are
 * untouched. A service started
 * with --durability replicated gives that durability to SKUs created without one.
 */
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
    *state = h_env_start(NULL);
    return *state != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    return h_env_stop(*state);
}

static void put_stock(int port, const char *sku, const char *durability, long long stock)
{
    char path[128], body[160];
    snprintf(path, sizeof path, "/admin/skus/%s?reset=true", sku);
    snprintf(body, sizeof body,
             "{\"stock\": %lld, \"segments\": 2, \"durability\": \"%s\"}", stock,
             durability);
    struct h_resp r;
    int st = h_req(port, "PUT", path, NULL, body, &r);
    if (st != 200 && st != 201)
        fail_msg("PUT %s: %d %s", path, st, r.body);
    h_resp_free(&r);
}

static void put(int port, const char *sku, const char *durability)
{
    put_stock(port, sku, durability, 10);
}

/* True once the master has a replica streaming (online, not waiting for its first
 * REPLCONF ACK after the sync) that acknowledged every byte the master has written. */
static bool replica_caught_up(redisContext *rc)
{
    redisReply *r = redisCommand(rc, "INFO replication");
    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        if (r != NULL)
            freeReplyObject(r);
        return false;
    }
    const char *slave = strstr(r->str, "slave0:");
    const char *state = slave != NULL ? strstr(slave, "state=") : NULL;
    const char *off = slave != NULL ? strstr(slave, "offset=") : NULL;
    const char *master = strstr(r->str, "master_repl_offset:");
    bool ok = state != NULL && off != NULL && master != NULL &&
              strncmp(state + 6, "online", 6) == 0 &&
              atoll(off + 7) >= atoll(master + strlen("master_repl_offset:"));
    freeReplyObject(r);
    return ok;
}

/* Start a replica of `e`'s redis-server and place orders ("<prefix>-N") on the
 * "replicated" SKU `sku` through `port` until one is 201: the replica has synced;
 * then wait until it streams and has acknowledged everything. Right after a diskless
 * sync a master streams to the replica only once the replica's first REPLCONF ACK
 * has come (once a second): until then an order whose write came after the snapshot
 * is honestly 503 not_replicated, which made this test fail now and then. The master
 * syncs at once (repl-diskless-sync-delay 0, not the default 5 s, in which the 503s
 * of the loop could use up the SKU's stock of 10). Returns the replica (h_redis_free
 * it); fails the test when none is 201 in 20 s. */
static h_redis *attach_replica(struct h_env *e, int port, const char *sku,
                               const char *prefix)
{
    char master[16];
    snprintf(master, sizeof master, "%d", h_redis_port(e->redis));
    redisContext *rc = h_redis_connect(e->redis);
    assert_non_null(rc);
    redisReply *set = redisCommand(rc, "CONFIG SET repl-diskless-sync-delay 0");
    assert_non_null(set);
    freeReplyObject(set);
    /* No AOF on the replica: one that is writing its first AOF after the initial
     * sync ignores SIGTERM, and its stop then waited out the harness's 10 s grace. */
    const char *args[] = {"--replicaof", "127.0.0.1", master, "--appendonly", "no", NULL};
    h_redis *replica = h_redis_start_args(args);
    assert_non_null(replica);
    long long end = h_now_ms() + 20000;
    int st = 0;
    for (int i = 0; h_now_ms() < end && st != 201; i++) {
        char id[48];
        snprintf(id, sizeof id, "%s-%d", prefix, i);
        if ((st = h_order(port, sku, 1, id, NULL)) != 201)
            h_sleep_ms(200);
    }
    assert_int_equal(st, 201);
    while (!replica_caught_up(rc) && h_now_ms() < end)
        h_sleep_ms(50);
    assert_true(replica_caught_up(rc));
    redisFree(rc);
    return replica;
}

static void test_replicated_needs_a_replica(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    put(e->port, "dur-rep", "replicated");
    json_t *j = h_get_sku(e->port, NULL, "dur-rep");
    assert_string_equal(json_string_value(json_object_get(j, "durability")),
                        "replicated");
    json_decref(j);

    /* No replica: applied on the master, but not acknowledged. */
    struct h_resp r;
    h_order(e->port, "dur-rep", 1, "dur-1", &r);
    assert_int_equal(h_expect_error(&r, 503, "not_replicated"), 0);
    assert_non_null(strstr(r.body, "dur-1"));
    h_resp_free(&r);
    assert_int_equal(h_order_status(e->port, "dur-1"), 200);
    assert_int_equal(h_order(e->port, "dur-rep", 1, "dur-1", NULL), 200);

    /* An "async" SKU on the same Redis: 201 as ever. */
    put(e->port, "dur-async", "async");
    assert_int_equal(h_order(e->port, "dur-async", 1, "dur-2", NULL), 201);

    /* With a replica attached and in sync, "replicated" is 201. */
    h_redis *replica = attach_replica(e, e->port, "dur-rep", "dur-sync");
    assert_int_equal(h_order(e->port, "dur-rep", 1, "dur-4", NULL), 201);
    h_redis_free(replica);
    assert_int_equal(h_audit(e->port, NULL, "dur-rep", 10, true), 0);
}

/* Cancel and restock of a "replicated" SKU: without a replica each is applied but
 * answered 503 not_replicated; once a replica is in sync their retries answer 200,
 * each applied once. */
static void test_cancel_and_restock_replicated(void **state)
{
    struct h_env *e = *state;
    h_deadline(90);
    put(e->port, "dur-adm", "replicated");
    struct h_resp r;
    h_order(e->port, "dur-adm", 2, "dur-a1", &r);
    assert_int_equal(h_expect_error(&r, 503, "not_replicated"), 0);
    h_resp_free(&r);

    h_req(e->port, "DELETE", "/orders/dur-a1", NULL, NULL, &r);
    assert_int_equal(h_expect_error(&r, 503, "not_replicated"), 0);
    assert_non_null(strstr(r.body, "dur-a1"));
    h_resp_free(&r);
    const char *restock = "{\"qty\": 5, \"request_id\": \"dur-rs-1\"}";
    h_req(e->port, "POST", "/admin/skus/dur-adm/restock", NULL, restock, &r);
    assert_int_equal(h_expect_error(&r, 503, "not_replicated"), 0);
    assert_non_null(strstr(r.body, "dur-rs-1"));
    h_resp_free(&r);

    h_redis *replica = attach_replica(e, e->port, "dur-adm", "dur-adm-sync");
    assert_int_equal(h_req(e->port, "DELETE", "/orders/dur-a1", NULL, NULL, &r), 200);
    json_t *o = h_resp_json(&r);
    assert_string_equal(json_string_value(json_object_get(o, "status")), "cancelled");
    json_decref(o);
    h_resp_free(&r);
    assert_int_equal(
        h_req(e->port, "POST", "/admin/skus/dur-adm/restock", NULL, restock, &r), 200);
    h_resp_free(&r);
    h_redis_free(replica);
    json_t *j = h_get_sku(e->port, NULL, "dur-adm");
    assert_int_equal(json_integer_value(json_object_get(j, "initial")), 15);
    json_decref(j);
    assert_int_equal(h_audit(e->port, NULL, "dur-adm", 15, true), 0);
}

/* --durability replicated: a SKU created without "durability" is "replicated" (no
 * replica: 503 not_replicated; with one: 201); a body that names "async" wins. */
static void test_durability_setting_is_the_default(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    const char *args[] = {"--durability", "replicated", NULL};
    h_svc *svc = h_svc_start_args(e->redis, args);
    assert_non_null(svc);
    int port = h_svc_port(svc);
    assert_int_equal(h_put_sku(port, NULL, "dur-def", 10, 2, "lock", 0), 0);
    json_t *j = h_get_sku(port, NULL, "dur-def");
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "durability")),
                        "replicated");
    json_decref(j);
    assert_int_equal(h_order(port, "dur-def", 1, "dur-def-0", NULL), 503);

    put(port, "dur-def-async", "async");
    assert_int_equal(h_order(port, "dur-def-async", 1, "dur-def-a", NULL), 201);

    h_redis *replica = attach_replica(e, port, "dur-def", "dur-def-sync");
    h_redis_free(replica);
    assert_int_equal(h_audit(port, NULL, "dur-def", 10, true), 0);
    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
}

/* ---- a replica outage costs only the replicated SKU (issue 21 item 6) ------------ */

#define OUTAGE_MS 3000
#define OUTAGE_THREADS 4 /* 0, 1: the async SKU; 2, 3: the replicated one */
#define OUTAGE_SAMPLES 20000

/* What one client thread saw: its own, so that no two threads share a counter. */
struct outage_client {
    int port;
    const char *sku;
    int created, not_replicated, other; /* 201, 503 not_replicated, anything else */
    int other_status;
    char other_error[40]; /* the first "anything else" */
    int n;
    long long ms[OUTAGE_SAMPLES]; /* each order's time to its answer */
};

static void outage_client(int idx, void *ctx)
{
    struct outage_client *c = (struct outage_client *)ctx + idx;
    long long end = h_now_ms() + OUTAGE_MS;
    while (h_now_ms() < end) {
        struct h_resp r;
        long long t0 = h_now_ms();
        int st = h_order(c->port, c->sku, 1, NULL, &r);
        if (c->n < OUTAGE_SAMPLES)
            c->ms[c->n++] = h_now_ms() - t0;
        char code[40];
        h_error_code(&r, code, sizeof code);
        if (st == 201) {
            c->created++;
        } else if (st == 503 && strcmp(code, "not_replicated") == 0) {
            c->not_replicated++;
        } else {
            if (c->other++ == 0) {
                c->other_status = st;
                snprintf(c->other_error, sizeof c->other_error, "%s", code);
            }
        }
        h_resp_free(&r);
    }
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* The replica is frozen (SIGSTOP) and its link cut (CLIENT KILL TYPE replica), so
 * the master has none and every WAIT 1 runs out its whole timeout. With both SKUs on
 * one loop (--threads 1), orders of the async SKU go on as before: all 201, no 503,
 * and their median time stays far below a WAIT's 500 ms. Orders of the replicated SKU
 * are 503 not_replicated (never backend_unavailable). Once the replica is back, the
 * replicated SKU sells again. Before the fix the WAITs sat on the loop's one
 * pipelined connection: two in a row outlasted its 1 s reply deadline, the
 * connection was dropped and every order on it answered 503 backend_unavailable
 * (the async SKU fell from thousands of orders a second to a dozen, median 2 ms to
 * 0.59 s). */
static void test_replica_outage_spares_async_skus(void **state)
{
    struct h_env *e = *state;
    h_deadline(90);
    const char *args[] = {"--threads", "1", NULL};
    h_svc *svc = h_svc_start_args(e->redis, args);
    assert_non_null(svc);
    int port = h_svc_port(svc);
    put_stock(port, "out-rep", "replicated", 100000);
    put_stock(port, "out-async", "async", 1000000);
    h_redis *replica = attach_replica(e, port, "out-rep", "out-sync");

    assert_int_equal(h_redis_pause(replica), 0);
    redisContext *rc = h_redis_connect(e->redis);
    assert_non_null(rc);
    redisReply *x = redisCommand(rc, "CLIENT KILL TYPE replica");
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_INTEGER);
    assert_true(x->integer >= 1);
    freeReplyObject(x);
    redisFree(rc);

    struct outage_client *cl = calloc(OUTAGE_THREADS, sizeof *cl);
    assert_non_null(cl);
    for (int i = 0; i < OUTAGE_THREADS; i++) {
        cl[i].port = port;
        cl[i].sku = i < 2 ? "out-async" : "out-rep";
    }
    assert_int_equal(h_parallel(OUTAGE_THREADS, outage_client, cl), 0);
    assert_int_equal(h_redis_resume(replica), 0);

    int async_created = 0, async_other = 0, rep_nr = 0, rep_other = 0, n = 0;
    long long *ms = calloc(2 * OUTAGE_SAMPLES, sizeof *ms);
    assert_non_null(ms);
    for (int i = 0; i < OUTAGE_THREADS; i++) {
        struct outage_client *c = &cl[i];
        if (c->other > 0)
            print_message("%s: %d answers neither 201 nor 503 not_replicated, the "
                          "first %d %s\n",
                          c->sku, c->other, c->other_status, c->other_error);
        if (i < 2) {
            async_created += c->created;
            async_other += c->other + c->not_replicated;
            memcpy(ms + n, c->ms, (size_t)c->n * sizeof *ms);
            n += c->n;
        } else {
            rep_nr += c->not_replicated;
            rep_other += c->other + c->created;
        }
    }
    qsort(ms, (size_t)n, sizeof *ms, cmp_ll);
    long long median = n > 0 ? ms[n / 2] : -1;
    print_message("replica outage: async %d created, %d not; median %lld ms; "
                  "replicated %d not_replicated, %d other\n",
                  async_created, async_other, median, rep_nr, rep_other);
    free(ms);
    free(cl);
    assert_int_equal(async_other, 0);
    assert_true(async_created > 0);
    /* Latency is the defect here: 590 ms broken, a few ms working; 100 ms parts the
     * two by an order of magnitude either way, even under a sanitizer. */
    assert_true(median < 100);
    assert_true(rep_nr > 0);
    assert_int_equal(rep_other, 0);

    /* The replica back: the replicated SKU sells again. */
    long long end = h_now_ms() + 20000;
    int st = 0;
    while (h_now_ms() < end && (st = h_order(port, "out-rep", 1, NULL, NULL)) != 201)
        h_sleep_ms(100);
    assert_int_equal(st, 201);
    h_redis_free(replica);
    assert_int_equal(h_audit(port, NULL, "out-rep", 100000, true), 0);
    assert_int_equal(h_audit(port, NULL, "out-async", 1000000, true), 0);
    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
}

/* A replica frozen with its link still up: the master lists it online, with the
 * offset it acknowledged before it stopped, until repl-timeout (60 s). WAIT must not
 * count it for a write it does not have: a WAIT counts from the offset its own
 * connection reached, so on the connection of WAITs each round writes a mark first
 * (waits.h); without it the first WAIT after the freeze counted from before it
 * (Redis 7.0 sets that offset after every command; newer servers only after a
 * write, and would count from 0) and answered 201. */
static void test_frozen_replica_is_not_counted(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    put_stock(e->port, "frz-rep", "replicated", 1000);
    h_redis *replica = attach_replica(e, e->port, "frz-rep", "frz-sync");
    assert_int_equal(h_redis_pause(replica), 0);
    for (int i = 0; i < 3; i++) {
        struct h_resp r;
        h_order(e->port, "frz-rep", 1, NULL, &r);
        assert_int_equal(h_expect_error(&r, 503, "not_replicated"), 0);
        h_resp_free(&r);
    }
    assert_int_equal(h_redis_resume(replica), 0);
    h_redis_free(replica);
    assert_int_equal(h_audit(e->port, NULL, "frz-rep", 1000, true), 0);
}

static void test_durability_is_checked(void **state)
{
    struct h_env *e = *state;
    h_deadline(30);
    struct h_resp r;
    h_req(e->port, "PUT", "/admin/skus/dur-bad", NULL,
          "{\"stock\": 1, \"durability\": \"sometimes\"}", &r);
    assert_int_equal(h_expect_error(&r, 400, "invalid_field"), 0);
    h_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicated_needs_a_replica),
        cmocka_unit_test(test_cancel_and_restock_replicated),
        cmocka_unit_test(test_durability_setting_is_the_default),
        cmocka_unit_test(test_replica_outage_spares_async_skus),
        cmocka_unit_test(test_frozen_replica_is_not_counted),
        cmocka_unit_test(test_durability_is_checked),
    };
    int failed =
        cmocka_run_group_tests_name("durability", tests, group_setup, group_teardown);
    return h_exit_status(failed);
}
