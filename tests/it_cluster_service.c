/* it_cluster_service.c -- inventoryd against a real Redis Cluster (3 masters with a
 * replica each, started by the harness), found to be one by INFO cluster at start.
 *
 * What works on a cluster so far: creating, resetting and deleting a SKU (a reset
 * in per-slot steps) and reading it back, the segments' keys on the masters of their
 * slots; orders in every mode (the id claimed in its slot, the deduction in the
 * segment's, the record confirmed after), exact sell-outs, replays, the last units
 * found by the ring, an order whose process died between its deduction and its
 * record recovered by the retry with its id, cancels, and two instances at once.
 * Restock and rebalance on a cluster: it_cluster_admin.c.
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

#include "segments/redis/keys.h"
#include "segments/redis/slots.h"
#include "tests/harness.h"

/* How many keys of SKU `sku`'s segments the masters hold together. */
/* Keys matching `pattern` over the masters. */
static long long count_keys(struct h_cluster_env *f, const char *pattern)
{
    long long n = 0;
    for (int i = 0; i < h_cluster_size(f->cluster); i++) {
        redisContext *rc = h_redis_connect(h_cluster_node(f->cluster, i));
        assert_non_null(rc);
        redisReply *role = redisCommand(rc, "ROLE");
        bool master = role != NULL && role->type == REDIS_REPLY_ARRAY &&
                      strcmp(role->element[0]->str, "master") == 0;
        if (role != NULL)
            freeReplyObject(role);
        if (master) {
            redisReply *keys = redisCommand(rc, "KEYS %s", pattern);
            assert_non_null(keys);
            n += (long long)keys->elements;
            freeReplyObject(keys);
        }
        redisFree(rc);
    }
    return n;
}

/* The keys of `sku`'s segments (graveyards of a reset included) over the masters. */
static long long segment_keys(struct h_cluster_env *f, const char *sku)
{
    char pattern[128];
    snprintf(pattern, sizeof pattern, "inv:{%s[:/]*", sku);
    return count_keys(f, pattern);
}

/* A SKU made, read, reset to fewer segments and deleted on a cluster: each step in
 * per-slot scripts, the segments spread over the masters, nothing left behind: the
 * reset drops the records of the orders before it (with and without a client's id:
 * the latter name the SKU as its segments are keyed, "clu/salt") and the graveyards
 * it read them from. */
static void test_sku_lifecycle(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    assert_int_equal(h_put_sku(f->port, NULL, "clu", 1500, 20, "lock", 0), 0);
    json_t *j = h_get_sku(f->port, NULL, "clu");
    assert_non_null(j);
    assert_int_equal(h_jint(j, "remaining"), 1500);
    assert_int_equal(h_jint(j, "segments"), 20);
    json_t *ss = json_object_get(j, "segment_stock");
    assert_int_equal(json_array_size(ss), 20);
    for (size_t i = 0; i < 20; i++)
        assert_int_equal(json_integer_value(json_array_get(ss, i)), 75);
    /* Placed: 20 segments over 3 masters, most minus fewest <= 1. */
    json_t *nodes = json_object_get(j, "segment_node");
    assert_int_equal(json_array_size(nodes), 20);
    int per[3] = {0};
    const char *seen[3] = {NULL};
    for (size_t i = 0; i < 20; i++) {
        const char *node = json_string_value(json_array_get(nodes, i));
        assert_non_null(node);
        int k = 0;
        while (k < 3 && seen[k] != NULL && strcmp(seen[k], node) != 0)
            k++;
        assert_true(k < 3);
        seen[k] = node;
        per[k]++;
    }
    int most = per[0], fewest = per[0];
    for (int k = 1; k < 3; k++) {
        most = per[k] > most ? per[k] : most;
        fewest = per[k] < fewest ? per[k] : fewest;
    }
    fprintf(stderr, "placement of 20 segments as %s: %d / %d / %d\n",
            json_string_value(json_object_get(j, "placed_as")), per[0], per[1], per[2]);
    assert_true(most - fewest <= 1);
    json_decref(j);
    assert_int_equal(segment_keys(f, "clu"), 20 * 3); /* stock, sold, epoch */
    for (int i = 0; i < 6; i++) {
        char id[32];
        snprintf(id, sizeof id, "clu-life-%d", i);
        assert_int_equal(h_order(f->port, "clu", 1, i % 2 ? id : NULL, NULL), 201);
    }
    assert_int_equal(count_keys(f, "inv:order:*"), 6);

    assert_int_equal(h_put_sku(f->port, NULL, "clu", 100, 8, "atomic", 0), 0);
    j = h_get_sku(f->port, NULL, "clu");
    assert_non_null(j);
    assert_int_equal(h_jint(j, "remaining"), 100);
    assert_int_equal(h_jint(j, "segments"), 8);
    json_decref(j);
    assert_int_equal(segment_keys(f, "clu"), 8 * 3);
    assert_int_equal(count_keys(f, "inv:order:*"), 0);
    assert_int_equal(h_audit(f->port, NULL, "clu", 100, true), 0);

    struct h_resp r;
    assert_int_equal(h_req(f->port, "DELETE", "/admin/skus/clu", NULL, NULL, &r), 200);
    h_resp_free(&r);
    assert_int_equal(h_req(f->port, "GET", "/admin/skus/clu", NULL, NULL, &r), 404);
    h_resp_free(&r);
    assert_int_equal(segment_keys(f, "clu"), 0);
}

/* PUT `sku` with `headers` ("Name: value\r\n" lines, NULL: none): the status; its
 * ETag into etag[64] when not NULL. */
static int put_cond(int port, const char *sku, const char *headers, const char *body,
                    char *etag, const char *code)
{
    char path[96], head[256];
    snprintf(path, sizeof path, "/admin/skus/%s", sku);
    snprintf(head, sizeof head, "Content-Type: application/json\r\n%s",
             headers != NULL ? headers : "");
    struct h_resp r;
    int st = h_http(port, "PUT", path, head, body, strlen(body), &r);
    if (code != NULL)
        assert_int_equal(h_expect_error(&r, st, code), 0);
    if (etag != NULL)
        snprintf(etag, 64, "%s", r.etag);
    h_resp_free(&r);
    return st;
}

/* Issue 28 item 1 on a cluster, where the version is compared in RESET_BEGIN: a
 * second PUT is 409 and leaves the sale alone, a stale If-Match (a restock since) is
 * 412, the current one resets, and its replay under the same request id answers 200
 * again without a second reset. */
static void test_put_replaces_only_what_it_names(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    const char *body = "{\"stock\": 90, \"segments\": 6}";
    char etag[64], now[64], hdr[160];
    assert_in_range(put_cond(f->port, "c-live", NULL, body, etag, NULL), 200,
                    201); /* 201 */
    assert_int_equal(h_order(f->port, "c-live", 5, "CL-1", NULL), 201);
    assert_int_equal(put_cond(f->port, "c-live", NULL, body, NULL, "sku_exists"), 409);
    assert_int_equal(put_cond(f->port, "c-live", "If-None-Match: *\r\n", body, NULL,
                              "precondition_failed"),
                     412);
    struct h_resp r;
    assert_int_equal(
        h_req(f->port, "POST", "/admin/skus/c-live/restock", NULL, "{\"qty\": 6}", &r),
        200);
    snprintf(now, sizeof now, "%s", r.etag);
    h_resp_free(&r);
    assert_string_not_equal(now, etag);
    snprintf(hdr, sizeof hdr, "If-Match: %s\r\n", etag);
    assert_int_equal(put_cond(f->port, "c-live", hdr, body, NULL, "precondition_failed"),
                     412);
    json_t *j = h_get_sku(f->port, NULL, "c-live");
    assert_non_null(j);
    assert_int_equal(h_jint(j, "sold"), 5);
    assert_int_equal(h_jint(j, "initial"), 96);
    json_decref(j);
    assert_int_equal(h_order_status(f->port, "CL-1"), 200);

    snprintf(hdr, sizeof hdr, "If-Match: %s\r\nIdempotency-Key: c-live-reset\r\n", now);
    assert_int_equal(put_cond(f->port, "c-live", hdr, body, NULL, NULL), 200);
    assert_int_equal(h_order_status(f->port, "CL-1"), 404);
    assert_int_equal(h_order(f->port, "c-live", 2, "CL-2", NULL), 201);
    assert_int_equal(put_cond(f->port, "c-live", hdr, body, NULL, NULL),
                     200); /* replay */
    assert_int_equal(h_order_status(f->port, "CL-2"), 200);
    assert_int_equal(h_audit(f->port, NULL, "c-live", 90, false), 0);
}

/* ---- orders --------------------------------------------------------------------- */

struct burst {
    int port;
    int port2; /* a second instance: the odd threads order there (0: none) */
    const char *sku;
    int per_thread;
    pthread_mutex_t mu;
    int created, sold_out, other;
    char (*ids)[64]; /* the ids of the 201s */
    char other_example[400];
};

static void burst_worker(int idx, void *ctx)
{
    struct burst *b = ctx;
    for (int k = 0; k < b->per_thread; k++) {
        char id[64];
        snprintf(id, sizeof id, "%s-%d-%d", b->sku, idx, k);
        struct h_resp r;
        char code[64];
        int st;
        /* 503 busy (no segment lock within lock_wait_ms: a loaded machine, e.g. CI's
         * ASan pass beside other work) is retried under the same id, as a client
         * does; the retry is the order, and the sell-out must still be exact. */
        for (int tries = 0;; tries++) {
            st = h_order(idx % 2 && b->port2 ? b->port2 : b->port, b->sku, 1, id, &r);
            h_error_code(&r, code, sizeof code);
            if (st != 503 || strcmp(code, "busy") != 0 || tries == 20)
                break;
            h_resp_free(&r);
        }
        pthread_mutex_lock(&b->mu);
        if (st == 201)
            snprintf(b->ids[b->created++], sizeof b->ids[0], "%s", id);
        else if (st == 409 && strcmp(code, "sold_out") == 0)
            b->sold_out++;
        else if (b->other++ == 0)
            snprintf(b->other_example, sizeof b->other_example, "%d %.300s", st, r.body);
        pthread_mutex_unlock(&b->mu);
        h_resp_free(&r);
    }
}

/* `threads` x `per` orders with client ids against `stock` units: exactly `stock`
 * 201s, the rest 409 sold_out, every 201 readable by its id and replayed as 200, and
 * the audit holds. */
static void sell_out2(struct h_cluster_env *f, int port2, const char *sku,
                      long long stock, int segments, const char *mode, int hold_ms,
                      int threads, int per)
{
    assert_int_equal(h_put_sku(f->port, NULL, sku, stock, segments, mode, hold_ms), 0);
    struct burst b = {.port = f->port, .port2 = port2, .sku = sku, .per_thread = per};
    pthread_mutex_init(&b.mu, NULL);
    b.ids = calloc((size_t)(threads * per), sizeof *b.ids);
    assert_non_null(b.ids);
    assert_int_equal(h_parallel(threads, burst_worker, &b), 0);
    fprintf(stderr,
            "%s (%s, %d segments, hold %d ms): %d x 201, %d x 409, %d other%s%s\n", sku,
            mode, segments, hold_ms, b.created, b.sold_out, b.other, b.other ? ": " : "",
            b.other_example);
    assert_int_equal(b.other, 0);
    assert_int_equal(b.created, stock);
    assert_int_equal(b.sold_out, threads * per - stock);
    assert_int_equal(h_audit(f->port, NULL, sku, stock, true), 0);
    for (int i = 0; i < b.created; i++) {
        assert_int_equal(h_order_status(f->port, b.ids[i]), 200);
        if (i % 50 == 0) /* a retry of a placed order is its replay, even sold out */
            assert_int_equal(h_order(f->port, sku, 1, b.ids[i], NULL), 200);
    }
    json_t *j = h_get_sku(f->port, NULL, sku);
    assert_non_null(j);
    assert_int_equal(h_jint(j, "sold"), stock);
    assert_int_equal(h_jint(j, "orders"), stock);
    json_decref(j);
    free(b.ids);
    pthread_mutex_destroy(&b.mu);
}

static void sell_out(struct h_cluster_env *f, const char *sku, long long stock,
                     int segments, const char *mode, int hold_ms, int threads, int per)
{
    sell_out2(f, 0, sku, stock, segments, mode, hold_ms, threads, per);
}

/* Two instances against one cluster at once, half the clients on each: still
 * exactly the stock, every 201 readable on the first. */
static void test_two_instances(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(120);
    h_svc *second = h_svc_start(h_cluster_node(f->cluster, 1), NULL);
    assert_non_null(second);
    sell_out2(f, h_svc_port(second), "c-two", 600, 10, "lock", 0, 10, 90);
    assert_int_equal(h_svc_stop_clean(second), 0);
    h_svc_free(second);
}

static void test_sell_out_lock(void **state)
{
    h_deadline(120);
    sell_out(*state, "c-lock", 1000, 20, "lock", 0, 10, 150);
}

static void test_sell_out_hold(void **state)
{
    h_deadline(120);
    sell_out(*state, "c-hold", 200, 8, "lock", 20, 10, 30);
}

static void test_sell_out_atomic(void **state)
{
    h_deadline(120);
    sell_out(*state, "c-atomic", 500, 20, "atomic", 0, 10, 60);
}

/* Group commit on a cluster: orders without an id (a fresh one is made in the
 * segment's slot, so each record goes with the batch's deduction) ride on one hold. */
struct fresh {
    int port;
    const char *sku;
    pthread_mutex_t mu;
    int created, sold_out, other;
    char ids[80][64];
};

static void fresh_worker(int idx, void *ctx)
{
    (void)idx;
    struct fresh *b = ctx;
    for (int k = 0; k < 2; k++) {
        struct h_resp r;
        int st = h_order(b->port, b->sku, 1, NULL, &r);
        char code[64];
        h_error_code(&r, code, sizeof code);
        json_t *j = st == 201 ? h_resp_json(&r) : NULL;
        pthread_mutex_lock(&b->mu);
        if (st == 201 && b->created < 80)
            snprintf(b->ids[b->created++], sizeof b->ids[0], "%s",
                     json_string_value(json_object_get(j, "order_id")));
        else if (st == 409 && strcmp(code, "sold_out") == 0)
            b->sold_out++;
        else if (b->other++ == 0)
            fprintf(stderr, "%s: %d %.300s\n", b->sku, st, r.body);
        pthread_mutex_unlock(&b->mu);
        json_decref(j);
        h_resp_free(&r);
    }
}

/* `settings` (a SKU's body but its stock) on 2 segments of 30: 40 clients x 2 orders
 * with no id sell exactly the 60 units, each 201's record readable, in batches. */
static void sell_out_fresh(struct h_cluster_env *f, const char *sku, const char *settings)
{
    char path[128], body[256];
    snprintf(path, sizeof path, "/admin/skus/%s?reset=true", sku);
    snprintf(body, sizeof body, "{\"stock\": 60, \"segments\": 2, %s}", settings);
    struct h_resp r;
    assert_int_equal(h_req(f->port, "PUT", path, NULL, body, &r), 201);
    h_resp_free(&r);
    long long batches0 = h_stat(f->port, NULL, "batches");
    struct fresh b = {.port = f->port, .sku = sku};
    pthread_mutex_init(&b.mu, NULL);
    assert_int_equal(h_parallel(40, fresh_worker, &b), 0);
    pthread_mutex_destroy(&b.mu);
    long long batches = h_stat(f->port, NULL, "batches") - batches0;
    fprintf(stderr, "%s: %d x 201, %d x 409, %d other; %lld batches\n", sku, b.created,
            b.sold_out, b.other, batches);
    assert_int_equal(b.other, 0);
    assert_int_equal(b.created, 60);
    assert_int_equal(b.sold_out, 20);
    assert_true(batches >= 1);
    assert_int_equal(h_audit(f->port, NULL, sku, 60, true), 0);
    for (int i = 0; i < b.created; i++)
        assert_int_equal(h_order_status(f->port, b.ids[i]), 200);
}

static void test_sell_out_batch(void **state)
{
    h_deadline(120);
    sell_out_fresh(*state, "c-batch", "\"hold_ms\": 50, \"batch\": 32");
    /* hold 0: a loop's orders of the SKU in one script (batch_join) */
    sell_out_fresh(*state, "c-batch0", "\"mode\": \"atomic\", \"batch\": 32");
    sell_out_fresh(*state, "c-batch0l", "\"hold_ms\": 0, \"batch\": 32");
}

/* 3 units over 20 segments: the ring finds them wherever an order starts. */
static void test_last_units(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    assert_int_equal(h_put_sku(f->port, NULL, "c-last", 3, 20, "lock", 0), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(h_order(f->port, "c-last", 1, NULL, NULL), 201);
    struct h_resp r;
    h_order(f->port, "c-last", 1, NULL, &r);
    assert_int_equal(h_expect_error(&r, 409, "sold_out"), 0);
    h_resp_free(&r);
    assert_int_equal(h_audit(f->port, NULL, "c-last", 3, true), 0);
}

/* Sold out on a cluster: once an order has seen every segment empty, the next ones
 * are answered from what the loops learned (the fast path), without Redis; a reset
 * clears it at once. */
static void test_sold_out_fast_path(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    assert_int_equal(h_put_sku(f->port, NULL, "c-fast", 3, 3, "lock", 0), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(h_order(f->port, "c-fast", 1, NULL, NULL), 201);
    struct h_resp r;
    for (int round = 0; round < 2; round++) {
        h_order(f->port, "c-fast", 1, NULL, &r); /* learns it */
        assert_int_equal(h_expect_error(&r, 409, "sold_out"), 0);
        h_resp_free(&r);
        long long fast0 = h_stat(f->port, NULL, "sold_out_fast");
        for (int i = 0; i < 5; i++) {
            h_order(f->port, "c-fast", 1 + i, NULL, &r);
            assert_int_equal(h_expect_error(&r, 409, "sold_out"), 0);
            h_resp_free(&r);
        }
        assert_int_equal(h_stat(f->port, NULL, "sold_out_fast"), fast0 + 5);
        if (round == 0) { /* a reset: stock again, sold at once */
            assert_int_equal(h_put_sku(f->port, NULL, "c-fast", 2, 3, "lock", 0), 0);
            for (int i = 0; i < 2; i++)
                assert_int_equal(h_order(f->port, "c-fast", 1, NULL, NULL), 201);
        }
    }
    assert_int_equal(h_audit(f->port, NULL, "c-fast", 2, true), 0);
}

/* The slot's master of key `key`, as a fresh connection. */
static redisContext *master_of(struct h_cluster_env *f, const char *key)
{
    int i = h_cluster_master_of(f->cluster, key);
    if (i < 0)
        fail_msg("no master serves %s", key);
    redisContext *rc = h_redis_connect(h_cluster_node(f->cluster, i));
    assert_non_null(rc);
    return rc;
}

static void command_on(struct h_cluster_env *f, const char *key, const char *fmt,
                       const char *a1, const char *a2)
{
    redisContext *rc = master_of(f, key);
    redisReply *r = redisCommand(rc, fmt, key, a1, a2);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("%s: %s", key, r->str);
    freeReplyObject(r);
    redisFree(rc);
}

/* Key `what` of segment i of `sku`, under the name its segments are placed as
 * (GET /admin/skus/{sku} "placed_as"). */
static char *seg_key(char *buf, struct h_cluster_env *f, const char *sku, int i,
                     const char *what)
{
    json_t *j = h_get_sku(f->port, NULL, sku);
    assert_non_null(j);
    snprintf(buf, 160, "inv:{%s:%d}:%s",
             json_string_value(json_object_get(j, "placed_as")), i, what);
    json_decref(j);
    return buf;
}

/* A process that died between its deduction and its record (put in place by hand: a
 * claim that ran out, and the order in segment 3's orders hash with its stock taken)
 * is found by the retry with its id: 200 with the record of segment 3, no second
 * sale. A dead claim with no order anywhere is taken over: a new sale. */
static void test_dead_claim_recovered(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    assert_int_equal(h_put_sku(f->port, NULL, "c-dead", 40, 4, "lock", 0), 0);
    json_t *j = h_get_sku(f->port, NULL, "c-dead");
    char epoch[32];
    snprintf(epoch, sizeof epoch, "%lld", h_jint(j, "epoch"));
    json_decref(j);

    command_on(f, "inv:order:{died-1}", "HSET %s c dead-attempt u 1 k c-dead e %s", epoch,
               NULL);
    char key[160];
    command_on(f, seg_key(key, f, "c-dead", 3, "orders"), "HSET %s died-1 %s", "2", NULL);
    command_on(f, seg_key(key, f, "c-dead", 3, "stock"), "DECRBY %s %s", "2", NULL);
    command_on(f, seg_key(key, f, "c-dead", 3, "sold"), "INCRBY %s %s", "2", NULL);

    struct h_resp r;
    assert_int_equal(h_order(f->port, "c-dead", 2, "died-1", &r), 200);
    json_t *o = h_resp_json(&r);
    assert_non_null(o);
    assert_int_equal(h_jint(o, "segment"), 3);
    assert_int_equal(h_jint(o, "qty"), 2);
    json_decref(o);
    h_resp_free(&r);
    assert_int_equal(h_order_status(f->port, "died-1"), 200);
    j = h_get_sku(f->port, NULL, "c-dead");
    assert_int_equal(h_jint(j, "sold"), 2);
    json_decref(j);

    command_on(f, "inv:order:{died-2}", "HSET %s c dead-attempt u 1 k c-dead e %s", epoch,
               NULL);
    assert_int_equal(h_order(f->port, "c-dead", 1, "died-2", NULL), 201);
    assert_int_equal(h_order(f->port, "c-dead", 1, "died-2", NULL), 200);
    j = h_get_sku(f->port, NULL, "c-dead");
    assert_int_equal(h_jint(j, "sold"), 3);
    json_decref(j);
    assert_int_equal(h_audit(f->port, NULL, "c-dead", 40, false), 0);
}

/* An order id sent to an instance whose view of the SKU is from before a reset (every
 * loop keeps the settings for meta_cache_ms; 60 s here, so that the test needs no
 * race), after another instance placed it under the reset's epoch: the same order,
 * 200. Its CLAIM carried the old epoch and took the live record for one a reset left
 * behind: deleted it, claimed the id, met STALE in the segment, read the settings
 * again and sold a second time (201, sold 2, one record; the harsh history mode:
 * two instances' 201s for one id while a reset ran, record-sums). */
static void test_claim_with_old_view(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    assert_int_equal(h_put_sku(f->port, NULL, "c-view", 40, 4, "lock", 0), 0);
    const char *const one_loop[] = {"--threads", "1", NULL};
    const struct h_svc_opts opts = {.config_json = "{\"meta_cache_ms\": 60000}",
                                    .args = one_loop};
    h_svc *old = h_svc_start(h_cluster_node(f->cluster, 1), &opts);
    assert_non_null(old);
    /* Its loop's view of the SKU: the second order reads it again (the first one's
     * read told every loop of the process to), and from then on it is kept. */
    for (int i = 0; i < 2; i++)
        assert_int_equal(h_order(h_svc_port(old), "c-view", 1, NULL, NULL), 201);
    assert_int_equal(h_put_sku(f->port, NULL, "c-view", 40, 4, "lock", 0), 0); /* reset */
    assert_int_equal(h_order(f->port, "c-view", 1, "view-1", NULL), 201);
    assert_int_equal(h_order(h_svc_port(old), "c-view", 1, "view-1", NULL), 200);
    assert_int_equal(h_order(h_svc_port(old), "c-view", 1, "view-2", NULL), 201);
    assert_int_equal(h_order_status(f->port, "view-1"), 200);
    /* A record a reset did leave behind (another epoch) is still no order. */
    command_on(f, "inv:order:{view-3}", "HSET %s r %s k c-view e 12345 t gone",
               "{\"order_id\":\"view-3\"}", NULL);
    assert_int_equal(h_order(h_svc_port(old), "c-view", 1, "view-3", NULL), 201);
    json_t *j = h_get_sku(f->port, NULL, "c-view");
    assert_int_equal(h_jint(j, "sold"), 3);
    json_decref(j);
    assert_int_equal(h_audit(f->port, NULL, "c-view", 40, true), 0);
    assert_int_equal(h_svc_stop_clean(old), 0);
    h_svc_free(old);
}

/* A cancel on a cluster: the units back in their segment, the record cancelled, the
 * cancel answered again the same; a cancel that died after the segment's part (put in
 * place by hand) is finished by the retry. */
static void test_cancel(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    assert_int_equal(h_put_sku(f->port, NULL, "c-cancel", 10, 4, "lock", 0), 0);
    struct h_resp r;
    assert_int_equal(h_order(f->port, "c-cancel", 3, "cc-1", NULL), 201);
    assert_int_equal(h_req(f->port, "DELETE", "/orders/cc-1", NULL, NULL, &r), 200);
    json_t *o = h_resp_json(&r);
    assert_string_equal(json_string_value(json_object_get(o, "status")), "cancelled");
    json_decref(o);
    h_resp_free(&r);
    assert_int_equal(h_req(f->port, "DELETE", "/orders/cc-1", NULL, NULL, &r), 200);
    h_resp_free(&r);
    json_t *j = h_get_sku(f->port, NULL, "c-cancel");
    assert_int_equal(h_jint(j, "remaining"), 10);
    assert_int_equal(h_jint(j, "sold"), 0);
    json_decref(j);

    /* Died half way: the segment gave the units back, the record still says
     * confirmed. The retry finishes the record. */
    assert_int_equal(h_order(f->port, "c-cancel", 2, "cc-2", &r), 201);
    o = h_resp_json(&r);
    int seg = (int)h_jint(o, "segment");
    json_decref(o);
    h_resp_free(&r);
    char orders[160], cancelled[160], stock[160], sold[160], n[16];
    seg_key(orders, f, "c-cancel", seg, "orders");
    seg_key(cancelled, f, "c-cancel", seg, "cancelled");
    seg_key(stock, f, "c-cancel", seg, "stock");
    seg_key(sold, f, "c-cancel", seg, "sold");
    snprintf(n, sizeof n, "%d", 2);
    command_on(f, orders, "HDEL %s %s", "cc-2", NULL);
    command_on(f, cancelled, "SADD %s %s", "cc-2", NULL);
    command_on(f, stock, "INCRBY %s %s", n, NULL);
    command_on(f, sold, "DECRBY %s %s", n, NULL);
    assert_int_equal(h_req(f->port, "DELETE", "/orders/cc-2", NULL, NULL, &r), 200);
    h_resp_free(&r);
    assert_int_equal(h_req(f->port, "GET", "/orders/cc-2", NULL, NULL, &r), 200);
    o = h_resp_json(&r);
    assert_string_equal(json_string_value(json_object_get(o, "status")), "cancelled");
    json_decref(o);
    h_resp_free(&r);
    j = h_get_sku(f->port, NULL, "c-cancel");
    assert_int_equal(h_jint(j, "remaining"), 10);
    json_decref(j);
    assert_int_equal(h_audit(f->port, NULL, "c-cancel", 10, false), 0);
}

/* Durability "replicated": a record that says cancelled while its segment never got
 * the units back (put in place by hand: what a failover of the segment's master left
 * when the record was marked before the give-back was on a replica). The cancel's
 * retry checks the segment's part before its 200: the units come back, once. Before,
 * it answered 200 from the record: sold 2, the units never sold again. */
static void test_cancelled_record_checked(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    struct h_resp r;
    assert_int_equal(h_req(f->port, "PUT", "/admin/skus/c-lost", NULL,
                           "{\"stock\": 10, \"segments\": 2, "
                           "\"durability\": \"replicated\"}",
                           &r),
                     201);
    h_resp_free(&r);
    assert_int_equal(h_order(f->port, "c-lost", 2, "cl-1", NULL), 201);
    assert_int_equal(h_req(f->port, "GET", "/orders/cl-1", NULL, NULL, &r), 200);
    char rec[512], key[SEG_KEY_MAX];
    const char *at = strstr(r.body, "\"status\":\"confirmed\"");
    assert_non_null(at);
    snprintf(rec, sizeof rec, "%.*s\"status\":\"cancelled\"%s", (int)(at - r.body),
             r.body, at + strlen("\"status\":\"confirmed\""));
    h_resp_free(&r);
    command_on(f, seg_key_order(key, "cl-1"), "HSET %s r %s", rec, NULL);
    for (int k = 0; k < 2; k++) { /* the retry, and once more: given back once */
        assert_int_equal(h_req(f->port, "DELETE", "/orders/cl-1", NULL, NULL, &r), 200);
        h_resp_free(&r);
        json_t *j = h_get_sku(f->port, NULL, "c-lost");
        assert_int_equal(h_jint(j, "sold"), 0);
        assert_int_equal(h_jint(j, "remaining"), 10);
        json_decref(j);
    }
    assert_int_equal(h_audit(f->port, NULL, "c-lost", 10, false), 0);
}

/* ---- a hot segment's slot resharded mid-sale ----------------------------------- */

struct ledger {
    struct h_cluster_env *f;
    const char *sku;
    atomic_bool stop;
    pthread_mutex_t mu;
    char (*ids)[48];
    int acked, max, failed;
};

static void *ledger_client(void *arg)
{
    struct ledger *l = arg;
    static atomic_int next;
    int me = atomic_fetch_add(&next, 1);
    for (int k = 0; !atomic_load(&l->stop); k++) {
        char id[48];
        snprintf(id, sizeof id, "rs-%d-%d", me, k);
        int st = h_order(l->f->port, l->sku, 1, id, NULL);
        pthread_mutex_lock(&l->mu);
        if (st == 201 && l->acked < l->max)
            snprintf(l->ids[l->acked++], sizeof l->ids[0], "%s", id);
        else if (st != 201 && st != 409)
            l->failed++;
        pthread_mutex_unlock(&l->mu);
    }
    return NULL;
}

static void expect_ok(int port, redisReply *r)
{
    if (r == NULL || r->type == REDIS_REPLY_ERROR)
        fail_msg("port %d: %s", port, r != NULL ? r->str : "no reply");
    freeReplyObject(r);
}

/* While orders run, the slot of a hot segment moves to another master key by key
 * (MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE), slowly enough that orders meet the
 * slot half moved (TRYAGAIN for the scripts whose keys are split, ASK for keys gone).
 * Orders keep being placed, every 201 is readable after, and the audit holds. */
static void test_reshard_mid_sale(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(120);
    assert_int_equal(h_put_sku(f->port, NULL, "c-rs", 100000, 4, "lock", 0), 0);
    const struct rd_target seed = {
        .host = "127.0.0.1", .port = h_cluster_port(f->cluster, 0), .timeout_ms = 2000};
    struct rd_slot_map m;
    char err[256];
    if (rd_slot_map_fetch(&seed, &m, err, sizeof err) != 0)
        fail_msg("map: %s", err);
    char key[SEG_KEY_MAX];
    seg_key(key, f, "c-rs", 0, "stock");
    int slot = rd_key_slot(key, strlen(key));
    const struct rd_node *a = &m.masters[m.slot[slot]].master;
    const struct rd_node *b = &m.masters[(m.slot[slot] + 1) % m.nmasters].master;

    struct ledger l = {.f = f, .sku = "c-rs", .max = 200000};
    pthread_mutex_init(&l.mu, NULL);
    l.ids = calloc((size_t)l.max, sizeof *l.ids);
    assert_non_null(l.ids);
    pthread_t clients[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&clients[i], NULL, ledger_client, &l), 0);
    h_sleep_ms(300);
    pthread_mutex_lock(&l.mu);
    int before = l.acked;
    pthread_mutex_unlock(&l.mu);

    expect_ok(b->port,
              h_port_command(b->port, "CLUSTER SETSLOT %d IMPORTING %s", slot, a->id));
    expect_ok(a->port,
              h_port_command(a->port, "CLUSTER SETSLOT %d MIGRATING %s", slot, b->id));
    for (int moved = 0;; moved++) { /* one key at a time, with orders in between */
        redisReply *keys = h_port_command(a->port, "CLUSTER GETKEYSINSLOT %d 1", slot);
        assert_non_null(keys);
        if (keys->elements == 0 || moved > 50) {
            freeReplyObject(keys);
            break;
        }
        char one[SEG_KEY_MAX];
        snprintf(one, sizeof one, "%s", keys->element[0]->str);
        freeReplyObject(keys);
        expect_ok(a->port,
                  h_port_command(a->port, "MIGRATE 127.0.0.1 %d %s 0 5000 KEYS %s",
                                 b->port, "", one));
        h_sleep_ms(100);
    }
    for (int i = 0; i < m.nmasters; i++)
        expect_ok(m.masters[i].master.port,
                  h_port_command(m.masters[i].master.port, "CLUSTER SETSLOT %d NODE %s",
                                 slot, b->id));
    h_sleep_ms(500);
    atomic_store(&l.stop, true);
    for (int i = 0; i < 4; i++)
        pthread_join(clients[i], NULL);
    fprintf(stderr, "reshard: %d orders placed (%d after the move began), %d failed\n",
            l.acked, l.acked - before, l.failed);
    assert_true(l.acked > before);
    for (int i = 0; i < l.acked; i++)
        assert_int_equal(h_order_status(f->port, l.ids[i]), 200);
    assert_int_equal(h_audit(f->port, NULL, "c-rs", 100000, true), 0);
    /* The segment's keys are b's now. */
    redisReply *r = h_port_command(b->port, "EXISTS %s", key);
    assert_non_null(r);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    free(l.ids);
    pthread_mutex_destroy(&l.mu);
    rd_slot_map_clear(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sku_lifecycle),
        cmocka_unit_test(test_put_replaces_only_what_it_names),
        cmocka_unit_test(test_sell_out_lock),
        cmocka_unit_test(test_sell_out_hold),
        cmocka_unit_test(test_sell_out_atomic),
        cmocka_unit_test(test_sell_out_batch),
        cmocka_unit_test(test_last_units),
        cmocka_unit_test(test_sold_out_fast_path),
        cmocka_unit_test(test_dead_claim_recovered),
        cmocka_unit_test(test_claim_with_old_view),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_cancelled_record_checked),
        cmocka_unit_test(test_two_instances),
        cmocka_unit_test(test_reshard_mid_sale),
    };
    int failed = cmocka_run_group_tests_name(
        "cluster_service", tests, h_cluster_group_setup, h_cluster_group_teardown);
    return h_exit_status(failed);
}
