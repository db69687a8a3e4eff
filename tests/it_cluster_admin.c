/* it_cluster_admin.c -- restock and rebalance on a real Redis Cluster (3 masters with a
 * replica each, started by the harness): an intent in the meta, then one step per slot
 * (segments/redis/adjust.h).
 *
 * Restock and rebalance answer as on a standalone Redis (replays, request id conflicts,
 * the audit), also while orders run from other threads; an adjust whose process died
 * half way (put in place by hand: the intent in the meta with its lease run out, some
 * of its steps applied) is rolled forward by the next adjust of the SKU, exactly once.
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

#include <event2/event.h>

#include "segments/redis/adjust.h"
#include "segments/redis/calls.h"
#include "segments/redis/keys.h"
#include "segments/redis/proto.h"
#include "segments/redis/store.h"
#include "tests/harness.h"

/* GET /admin/skus/{sku} field `key` (an integer). */
static long long sku_field(int port, const char *sku, const char *key)
{
    json_t *j = h_get_sku(port, NULL, sku);
    assert_non_null(j);
    long long v = h_jint(j, key);
    json_decref(j);
    return v;
}

/* POST /admin/skus/{sku}/{what} with `body` (NULL: none) and `headers`: the status. */
static int admin_post(int port, const char *sku, const char *what, const char *body,
                      const char *headers, struct h_resp *out)
{
    char path[160];
    snprintf(path, sizeof path, "/admin/skus/%s/%s", sku, what);
    return h_http(port, "POST", path,
                  body != NULL ? "Content-Type: application/json\r\n" : headers, body,
                  body != NULL ? strlen(body) : 0, out);
}

static int restock(int port, const char *sku, long long qty, const char *rid,
                   struct h_resp *out)
{
    char body[160];
    if (rid != NULL)
        snprintf(body, sizeof body, "{\"qty\": %lld, \"request_id\": \"%s\"}", qty, rid);
    else
        snprintf(body, sizeof body, "{\"qty\": %lld}", qty);
    struct h_resp r;
    int st = admin_post(port, sku, "restock", body, NULL, out != NULL ? out : &r);
    if (out == NULL)
        h_resp_free(&r);
    return st;
}

static int rebalance(int port, const char *sku, const char *rid, struct h_resp *out)
{
    char headers[128] = "";
    if (rid != NULL)
        snprintf(headers, sizeof headers, "Idempotency-Key: %s\r\n", rid);
    struct h_resp r;
    int st = admin_post(port, sku, "rebalance", NULL, rid != NULL ? headers : NULL,
                        out != NULL ? out : &r);
    if (out == NULL)
        h_resp_free(&r);
    return st;
}

/* Segment stocks of `sku` into stock[0..n-1]; the count n. */
static int segment_stocks(int port, const char *sku, long long *stock, int max)
{
    json_t *j = h_get_sku(port, NULL, sku);
    assert_non_null(j);
    json_t *ss = json_object_get(j, "segment_stock");
    int n = (int)json_array_size(ss);
    assert_true(n <= max);
    for (int i = 0; i < n; i++)
        stock[i] = json_integer_value(json_array_get(ss, (size_t)i));
    json_decref(j);
    return n;
}

/* Every segment within 1 of every other. */
static void assert_even(int port, const char *sku)
{
    long long stock[64];
    int n = segment_stocks(port, sku, stock, 64);
    long long lo = stock[0], hi = stock[0];
    for (int i = 1; i < n; i++) {
        lo = stock[i] < lo ? stock[i] : lo;
        hi = stock[i] > hi ? stock[i] : hi;
    }
    if (hi - lo > 1) {
        for (int i = 0; i < n; i++)
            fprintf(stderr, "%s segment %d: %lld\n", sku, i, stock[i]);
        fail_msg("%s: segments from %lld to %lld after a rebalance", sku, lo, hi);
    }
}

/* ---- direct access to the cluster --------------------------------------------- */

/* A command on the master of `key`'s slot (found by asking every node), which must
 * not fail: its reply (caller frees). */
static redisReply *vquery_on(struct h_cluster_env *f, const char *key, const char *fmt,
                             va_list ap)
{
    int i = h_cluster_master_of(f->cluster, key);
    if (i < 0)
        fail_msg("no master serves %s", key);
    redisContext *rc = h_redis_connect(h_cluster_node(f->cluster, i));
    assert_non_null(rc);
    redisReply *r = redisvCommand(rc, fmt, ap);
    redisFree(rc);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("%s: %s", key, r->str);
    return r;
}

static void command_on(struct h_cluster_env *f, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    freeReplyObject(vquery_on(f, key, fmt, ap));
    va_end(ap);
}

static long long integer_on(struct h_cluster_env *f, const char *key, const char *fmt,
                            ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vquery_on(f, key, fmt, ap);
    va_end(ap);
    long long v = r->type == REDIS_REPLY_INTEGER  ? r->integer
                  : r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10)
                                                  : -1;
    freeReplyObject(r);
    return v;
}

/* The SKU's generation, as its meta holds it. */
static long long meta_gen(struct h_cluster_env *f, const char *sku)
{
    char meta[SEG_KEY_MAX];
    return integer_on(f, seg_key_meta(meta, sku), "HGET %s gen", meta);
}

/* The name the segments of `sku` are placed as ("placed_as"). */
static void placed_as(int port, const char *sku, char *buf, size_t len)
{
    json_t *j = h_get_sku(port, NULL, sku);
    assert_non_null(j);
    snprintf(buf, len, "%s", json_string_value(json_object_get(j, "placed_as")));
    json_decref(j);
}

/* ---- restock and rebalance ---------------------------------------------------- */

/* Restock on a cluster: orders before and after, initial raised, the units spread
 * over the segments, the audit; a replay under the same request id answers 200 and
 * adds nothing; another write under that id is 409 request_id_conflict. */
static void test_restock(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    const char *sku = "a-rs";
    assert_int_equal(h_put_sku(f->port, NULL, sku, 70, 7, "lock", 0), 0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(h_order(f->port, sku, 1, NULL, NULL), 201);
    long long before[8];
    segment_stocks(f->port, sku, before, 8);
    long long gen0 = meta_gen(f, sku);

    struct h_resp r;
    assert_int_equal(restock(f->port, sku, 45, "rs-1", &r), 200);
    json_t *j = h_resp_json(&r);
    assert_non_null(j);
    assert_int_equal(h_jint(j, "initial"), 115);
    assert_int_equal(h_jint(j, "remaining"), 105);
    json_decref(j);
    h_resp_free(&r);
    long long after[8];
    segment_stocks(f->port, sku, after, 8);
    for (int i = 0; i < 7; i++) /* 45 over 7: 7 each, the first three one more */
        assert_int_equal(after[i] - before[i], 6 + (i < 3));
    assert_int_equal(meta_gen(f, sku), gen0 + 1);
    assert_int_equal(h_audit(f->port, NULL, sku, 115, true), 0);

    /* The replay: 200, nothing added. */
    assert_int_equal(restock(f->port, sku, 45, "rs-1", NULL), 200);
    assert_int_equal(meta_gen(f, sku), gen0 + 1);
    assert_int_equal(sku_field(f->port, sku, "initial"), 115);
    assert_int_equal(sku_field(f->port, sku, "remaining"), 105);
    /* The same id for another write. */
    restock(f->port, sku, 46, "rs-1", &r);
    assert_int_equal(h_expect_error(&r, 409, "request_id_conflict"), 0);
    h_resp_free(&r);
    assert_int_equal(sku_field(f->port, sku, "initial"), 115);

    for (int i = 0; i < 5; i++)
        assert_int_equal(h_order(f->port, sku, 1, NULL, NULL), 201);
    assert_int_equal(restock(f->port, sku, 1, NULL, NULL), 200); /* no request id */
    assert_int_equal(h_audit(f->port, NULL, sku, 116, true), 0);
    assert_int_equal(sku_field(f->port, sku, "sold"), 15);

    /* The most one restock may add, exactly. */
    restock(f->port, sku, 1000000000000LL, NULL, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    assert_int_equal(sku_field(f->port, sku, "initial"), 1000000000116LL);
    assert_int_equal(h_audit(f->port, NULL, sku, 1000000000116LL, true), 0);
}

/* Rebalance on a cluster: segments sold empty (orders of a whole segment each), then
 * the rest evened out, each segment within 1 of the others, the audit; the replay
 * changes nothing. */
static void test_rebalance(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    const char *sku = "a-rb";
    assert_int_equal(h_put_sku(f->port, NULL, sku, 60, 6, "lock", 0), 0);
    for (int i = 0; i < 3; i++) /* each takes one whole segment */
        assert_int_equal(h_order(f->port, sku, 10, NULL, NULL), 201);
    long long stock[8];
    int n = segment_stocks(f->port, sku, stock, 8);
    int empty = 0;
    for (int i = 0; i < n; i++)
        empty += stock[i] == 0;
    assert_int_equal(empty, 3);

    struct h_resp r;
    assert_int_equal(rebalance(f->port, sku, "rb-1", &r), 200);
    h_resp_free(&r);
    segment_stocks(f->port, sku, stock, 8);
    for (int i = 0; i < n; i++)
        assert_int_equal(stock[i], 5);
    assert_int_equal(h_audit(f->port, NULL, sku, 60, false), 0);

    /* Uneven again, in whatever way the ring's random starts make it: 12 units sold
     * (a segment still held 4 after the first 8); the rebalance evens out the 18. */
    for (int i = 0; i < 8; i++)
        assert_int_equal(h_order(f->port, sku, 1, NULL, NULL), 201);
    assert_int_equal(h_order(f->port, sku, 4, NULL, NULL), 201);
    assert_int_equal(rebalance(f->port, sku, "rb-2", NULL), 200);
    assert_even(f->port, sku);
    assert_int_equal(sku_field(f->port, sku, "remaining"), 18);
    assert_int_equal(h_audit(f->port, NULL, sku, 60, false), 0);

    /* The replay of rb-1 changes nothing. */
    long long gen = meta_gen(f, sku);
    assert_int_equal(rebalance(f->port, sku, "rb-1", NULL), 200);
    assert_int_equal(meta_gen(f, sku), gen);
    /* Another write under rb-1. */
    restock(f->port, sku, 3, "rb-1", &r);
    assert_int_equal(h_expect_error(&r, 409, "request_id_conflict"), 0);
    h_resp_free(&r);
    assert_int_equal(h_audit(f->port, NULL, sku, 60, false), 0);

    /* Unknown SKU. */
    rebalance(f->port, "a-none", NULL, &r);
    assert_int_equal(h_expect_error(&r, 404, "unknown_sku"), 0);
    h_resp_free(&r);
}

/* ---- while orders run --------------------------------------------------------- */

struct traffic {
    int port;
    const char *sku;
    atomic_bool stop;
    atomic_int created, sold_out, other;
    char other_example[300];
    pthread_mutex_t mu;
};

static void *order_client(void *arg)
{
    struct traffic *t = arg;
    while (!atomic_load(&t->stop)) {
        struct h_resp r;
        int st = h_order(t->port, t->sku, 1, NULL, &r);
        char code[64];
        h_error_code(&r, code, sizeof code);
        if (st == 201)
            atomic_fetch_add(&t->created, 1);
        else if (st == 409 && strcmp(code, "sold_out") == 0)
            atomic_fetch_add(&t->sold_out, 1);
        else if (atomic_fetch_add(&t->other, 1) == 0) {
            pthread_mutex_lock(&t->mu);
            snprintf(t->other_example, sizeof t->other_example, "%d %.200s", st, r.body);
            pthread_mutex_unlock(&t->mu);
        }
        h_resp_free(&r);
    }
    return NULL;
}

struct admin_burst {
    int port;
    const char *sku;
    int status[2];
};

/* Two restocks at once, from two threads: one waits for the other's turn. */
static void restock_worker(int idx, void *ctx)
{
    struct admin_burst *b = ctx;
    char rid[32];
    snprintf(rid, sizeof rid, "par-%d", idx);
    b->status[idx] = restock(b->port, b->sku, 10, rid, NULL);
}

/* Restocks and rebalances while three client threads order, in `mode`: every admin
 * write 200, and in the end the audit holds with initial raised by every restock and
 * sold = the 201s. */
static void adjust_under_load(struct h_cluster_env *f, const char *sku, const char *mode)
{
    h_deadline(90);
    assert_int_equal(h_put_sku(f->port, NULL, sku, 10000, 10, mode, 0), 0);
    struct traffic t = {.port = f->port, .sku = sku};
    pthread_mutex_init(&t.mu, NULL);
    pthread_t clients[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&clients[i], NULL, order_client, &t), 0);
    long long initial = 10000;
    int statuses[16], k = 0;
    for (int round = 0; round < 5; round++) {
        h_sleep_ms(60);
        char rid[32];
        snprintf(rid, sizeof rid, "load-%s-%d", mode, round);
        statuses[k++] = restock(f->port, sku, 100 + round, rid, NULL);
        initial += 100 + round;
        h_sleep_ms(60);
        snprintf(rid, sizeof rid, "load-rb-%s-%d", mode, round);
        statuses[k++] = rebalance(f->port, sku, rid, NULL);
    }
    struct admin_burst b = {.port = f->port, .sku = sku};
    assert_int_equal(h_parallel(2, restock_worker, &b), 0);
    initial += 20;
    h_sleep_ms(200);
    atomic_store(&t.stop, true);
    for (int i = 0; i < 3; i++)
        pthread_join(clients[i], NULL);
    fprintf(stderr, "%s (%s): %d x 201, %d x sold_out, %d other%s%s; %lld left of %lld\n",
            sku, mode, atomic_load(&t.created), atomic_load(&t.sold_out),
            atomic_load(&t.other), atomic_load(&t.other) ? ": " : "", t.other_example,
            sku_field(f->port, sku, "remaining"), initial);
    for (int i = 0; i < k; i++)
        assert_int_equal(statuses[i], 200);
    assert_int_equal(b.status[0], 200);
    assert_int_equal(b.status[1], 200);
    assert_int_equal(atomic_load(&t.other), 0);
    assert_true(atomic_load(&t.created) > 0);
    assert_int_equal(h_audit(f->port, NULL, sku, initial, true), 0);
    assert_int_equal(sku_field(f->port, sku, "sold"), atomic_load(&t.created));
    pthread_mutex_destroy(&t.mu);
}

static void test_adjust_under_load_lock(void **state)
{
    adjust_under_load(*state, "a-load-lock", "lock");
}

static void test_adjust_under_load_atomic(void **state)
{
    adjust_under_load(*state, "a-load-atomic", "atomic");
}

/* ---- an adjust whose process died --------------------------------------------- */

/* Put a dead intent into the meta of `sku`: its lease ended long ago. */
static void dead_intent(struct h_cluster_env *f, const char *sku, const char *id,
                        const char *op, const char *add, const char *plan,
                        const char *rid, const char *sig)
{
    char meta[SEG_KEY_MAX];
    seg_key_meta(meta, sku);
    command_on(f, meta,
               "HSET %s adj %s adj_op %s adj_add %s adj_plan %s adj_rid %s adj_sig %s "
               "adj_owner dead-runner adj_until 1",
               meta, id, op, add, plan, rid, sig);
}

/* A restock that died after one give (segment 1's, with its mark) and a rebalance that
 * died after its take (units in transit): each is rolled forward by the next adjust
 * over HTTP, exactly once, before that one's own; the audit holds after; the dead
 * restock's request id then answers as applied. */
static void test_dead_adjust_taken_over(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    const char *sku = "a-dead";
    char placed[96], key[SEG_KEY_MAX];
    assert_int_equal(h_put_sku(f->port, NULL, sku, 40, 4, "lock", 0), 0);
    placed_as(f->port, sku, placed, sizeof placed);

    /* A restock of 8 (2 per segment) that gave segment 1 its 2 and died. */
    dead_intent(f, sku, "dead-restock", "restock", "8", "2,2,2,2", "dead-rs",
                "restock:8");
    command_on(f, seg_key_stock(key, placed, 1), "INCRBY %s 2", key);
    command_on(f, seg_key_adjust(key, placed, 1), "HSET %s dead-restock 2", key);
    assert_int_equal(restock(f->port, sku, 4, "new-rs", NULL), 200);
    assert_int_equal(h_audit(f->port, NULL, sku, 52, false), 0);
    long long stock[4];
    segment_stocks(f->port, sku, stock, 4);
    for (int i = 0; i < 4; i++) /* 10 + 2 (the dead one) + 1 (the new one) */
        assert_int_equal(stock[i], 13);
    /* The dead restock's own retry is its replay: nothing added. */
    assert_int_equal(restock(f->port, sku, 8, "dead-rs", NULL), 200);
    assert_int_equal(sku_field(f->port, sku, "initial"), 52);
    /* Its marks went with its commit. */
    assert_int_equal(integer_on(f, seg_key_adjust(key, placed, 1), "HLEN %s", key), 0);

    /* A rebalance that took 6 from segment 0 (as planned: 16 there, 12 elsewhere, so 2
     * for each other segment) and died with the units in transit. */
    dead_intent(f, sku, "dead-rebalance", "rebalance", "0", "-6,2,2,2", "dead-rb",
                "rebalance:0");
    command_on(f, seg_key_stock(key, placed, 0), "DECRBY %s 6", key);
    command_on(f, seg_key_adjust(key, placed, 0), "HSET %s dead-rebalance 6", key);
    assert_int_equal(sku_field(f->port, sku, "remaining"), 46); /* 6 in transit */
    assert_int_equal(rebalance(f->port, sku, "new-rb", NULL), 200);
    assert_int_equal(h_audit(f->port, NULL, sku, 52, false), 0);
    segment_stocks(f->port, sku, stock, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(stock[i], 13);
    assert_int_equal(rebalance(f->port, sku, "dead-rb", NULL), 200);
    assert_int_equal(h_audit(f->port, NULL, sku, 52, false), 0);

    /* A live intent (its lease running) is waited for, then 503 busy; nothing done. */
    char meta[SEG_KEY_MAX], until[32];
    seg_key_meta(meta, sku);
    snprintf(until, sizeof until, "%lld", 4102444800000LL); /* 2100 */
    dead_intent(f, sku, "live", "restock", "4", "1,1,1,1", "live-rs", "restock:4");
    command_on(f, meta, "HSET %s adj_until %s", meta, until);
    struct h_resp resp;
    restock(f->port, sku, 4, "blocked", &resp);
    assert_int_equal(h_expect_error(&resp, 503, "busy"), 0);
    h_resp_free(&resp);
    /* Once it is dead it is finished by the next one. */
    command_on(f, meta, "HSET %s adj_until 1", meta);
    assert_int_equal(restock(f->port, sku, 4, "blocked", NULL), 200);
    assert_int_equal(h_audit(f->port, NULL, sku, 60, false), 0);
    segment_stocks(f->port, sku, stock, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(stock[i], 15);
}

/* One step of a reset sent by hand on `c`: its reply's first element (the code), and
 * its second as a string into `second` (may be NULL). */
static long long reset_step(rd_conn *c, struct rd_cmd *cmd, char *second, size_t len)
{
    redisReply *r = store_call(c, cmd);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long code = r->element[0]->integer;
    if (second != NULL && r->elements > 1) {
        const redisReply *e = r->element[1];
        if (e->type == REDIS_REPLY_STRING)
            snprintf(second, len, "%s", e->str);
        else
            snprintf(second, len, "%lld", e->integer);
    }
    freeReplyObject(r);
    return code;
}

/* A reset that died after resetting segment 0 (epoch 111), then a second that took it
 * over and stopped right after its BEGIN (as one stops whose BEGIN no replica has):
 * the next reset reaches segment 0 too. Before, the second BEGIN forgot the first's
 * epoch, and every later reset met segment 0 in an epoch it did not know: STALE, 503
 * busy for good (the harsh history mode on a cluster: a delete across a failover,
 * then a PUT, left a SKU half deleted for the rest of the run). */
static void test_reset_after_two_dead_resets(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    const char *sku = "a-chain";
    assert_int_equal(h_put_sku(f->port, NULL, sku, 40, 4, "lock", 0), 0);
    assert_int_equal(h_order(f->port, sku, 3, "a-chain-1", NULL), 201);
    char placed[96], dead[64];
    placed_as(f->port, sku, placed, sizeof placed);
    const struct rd_target seed = {.host = "127.0.0.1",
                                   .port = h_cluster_port(f->cluster, 0),
                                   .timeout_ms = 2000,
                                   .cluster = true};
    rd_conn *c = rd_conn_create(&seed, NULL);
    struct rd_meta meta;
    assert_int_equal(rd_meta_read(c, sku, &meta), 1);
    struct rd_cmd cmd;
    /* The first: BEGIN, segment 0, then its lease gone (as a dead one's runs out). */
    proto_reset_begin(&cmd, sku, meta.epoch, 4, 111, 4, 15000, "", NULL, NULL, false);
    assert_int_equal(reset_step(c, &cmd, NULL, 0), RD_OK);
    proto_reset_segment(&cmd, placed, 0, meta.epoch, "0", 111, 10, false, false);
    assert_int_equal(reset_step(c, &cmd, NULL, 0), RD_OK);
    proto_reset_yield(&cmd, sku, 111, false);
    assert_int_equal(reset_step(c, &cmd, NULL, 0), RD_OK);
    /* The second takes the first over and stops at once, its lease given up. */
    proto_reset_begin(&cmd, sku, meta.epoch, 4, 222, 4, 15000, "", NULL, NULL, false);
    assert_int_equal(reset_step(c, &cmd, dead, sizeof dead), RD_OK);
    assert_string_equal(dead, "111");
    proto_reset_yield(&cmd, sku, 222, false);
    assert_int_equal(reset_step(c, &cmd, NULL, 0), RD_OK);
    rd_conn_free(c);
    /* The next reset finishes what both left, at once. */
    assert_int_equal(h_put_sku(f->port, NULL, sku, 20, 4, "lock", 0), 0);
    assert_int_equal(h_audit(f->port, NULL, sku, 20, true), 0);
    assert_int_equal(sku_field(f->port, sku, "sold"), 0);
    assert_int_equal(h_order_status(f->port, "a-chain-1"), 404);
}

/* PUT /admin/skus/SKU?reset=true with `body` under Idempotency-Key `rid`: the status
 * (`out` may be NULL). */
static int put_keyed(int port, const char *sku, const char *body, const char *rid,
                     struct h_resp *out)
{
    char path[160], headers[160];
    snprintf(path, sizeof path, "/admin/skus/%s?reset=true", sku);
    snprintf(headers, sizeof headers,
             "Content-Type: application/json\r\nIdempotency-Key: %s\r\n", rid);
    struct h_resp r;
    int st =
        h_http(port, "PUT", path, headers, body, strlen(body), out != NULL ? out : &r);
    if (out == NULL)
        h_resp_free(&r);
    return st;
}

/* A replicated PUT whose attempt died half way (a failover: 503, its lease left
 * running), then its retry under the same request id: it takes its own attempt over
 * at once, 200. Before, 503 busy for the 15 s lease; a client that gave up sooner
 * left the SKU half reset (the harsh history mode on a cluster). Another request
 * still waits the lease out. */
static void test_reset_retry_takes_own_over(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    const char *sku = "a-own", *probe = "a-own-probe";
    const char *body = "{\"stock\": 20, \"segments\": 2, \"mode\": \"lock\", "
                       "\"hold_ms\": 0, \"durability\": \"replicated\"}";
    assert_int_equal(h_put_sku(f->port, NULL, sku, 40, 4, "lock", 0), 0);
    assert_int_equal(h_order(f->port, sku, 3, "a-own-1", NULL), 201);
    /* The signature the service records for `body` (the same on any SKU). */
    assert_int_equal(put_keyed(f->port, probe, body, "own-probe", NULL), 201);
    char key[SEG_KEY_MAX], sig[160], placed[96];
    redisContext *rc = h_redis_connect(h_cluster_node(
        f->cluster,
        h_cluster_master_of(f->cluster, seg_key_request(key, probe, "own-probe"))));
    redisReply *r = redisCommand(rc, "GET %s", key);
    redisFree(rc);
    assert_true(r != NULL && r->type == REDIS_REPLY_STRING);
    snprintf(sig, sizeof sig, "%.*s", (int)strcspn(r->str, "|"), r->str);
    freeReplyObject(r);
    placed_as(f->port, sku, placed, sizeof placed);
    /* Its first attempt: BEGIN, segment 0 reset, segment 3 gone, then nothing. */
    const struct rd_target seed = {.host = "127.0.0.1",
                                   .port = h_cluster_port(f->cluster, 0),
                                   .timeout_ms = 2000,
                                   .cluster = true};
    rd_conn *c = rd_conn_create(&seed, NULL);
    struct rd_meta meta;
    assert_int_equal(rd_meta_read(c, sku, &meta), 1);
    struct rd_cmd cmd;
    proto_reset_begin(&cmd, sku, meta.epoch, 4, 444, 2, 15000, "", "own-put", sig, false);
    assert_int_equal(reset_step(c, &cmd, NULL, 0), RD_OK);
    proto_reset_segment(&cmd, placed, 0, meta.epoch, "0", 444, 10, false, false);
    assert_int_equal(reset_step(c, &cmd, NULL, 0), RD_OK);
    proto_reset_segment(&cmd, placed, 3, meta.epoch, "0", 444, -1, false, false);
    assert_int_equal(reset_step(c, &cmd, NULL, 0), RD_OK);
    rd_conn_free(c);
    struct h_resp resp;
    put_keyed(f->port, sku, body, "other-put", &resp);
    assert_int_equal(h_expect_error(&resp, 503, "busy"), 0);
    h_resp_free(&resp);
    assert_int_equal(put_keyed(f->port, sku, body, "own-put", NULL), 200);
    assert_int_equal(h_audit(f->port, NULL, sku, 20, true), 0);
    assert_int_equal(sku_field(f->port, sku, "segments"), 2);
    assert_int_equal(sku_field(f->port, sku, "sold"), 0);
    assert_int_equal(h_order_status(f->port, "a-own-1"), 404);
    assert_int_equal(restock(f->port, sku, 4, NULL, NULL), 200);
}

/* A reset removes an adjust's intent: the dead one is not rolled forward into the new
 * sale, and the SKU adjusts again at once. */
static void test_reset_clears_intent(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    const char *sku = "a-reset";
    assert_int_equal(h_put_sku(f->port, NULL, sku, 40, 4, "lock", 0), 0);
    dead_intent(f, sku, "before-reset", "restock", "8", "2,2,2,2", "old-rs", "restock:8");
    assert_int_equal(h_put_sku(f->port, NULL, sku, 20, 4, "lock", 0), 0);
    assert_int_equal(restock(f->port, sku, 4, NULL, NULL), 200);
    assert_int_equal(h_audit(f->port, NULL, sku, 24, false), 0);
    long long stock[4];
    segment_stocks(f->port, sku, stock, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(stock[i], 6);
}

struct seam_answer {
    bool done;
    int rc, code;
    long long value;
};

static void on_seam_adjust(void *arg, int rc, struct store_reply *r)
{
    struct seam_answer *a = arg;
    a->done = true;
    a->rc = rc;
    a->code = r->code;
    a->value = r->value;
}

/* The loop's ADJUST `op` of the SKU at `placed` on a cluster handle (adjust.c),
 * waited for: its code (rc -1: -1). */
static int seam_adjust(struct event_base *base, rda_conn *c, const char *placed,
                       long long epoch, const char *op, long long *value)
{
    struct seam_answer a = {0};
    rda_adjust_cluster(c, placed, epoch, 4, op, 0, 1000, NULL, NULL, 0, on_seam_adjust,
                       &a);
    while (!a.done)
        event_base_loop(base, EVLOOP_ONCE);
    *value = a.value;
    return a.rc < 0 ? -1 : a.code;
}

/* The seam's "spread" on a cluster (the automatic rebalance's op, which the sweeper
 * thread runs through sku_spread): a rebalance only when it puts stock in more
 * segments, without a request id. */
static void test_spread_in_seam(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    const char *sku = "a-spread";
    assert_int_equal(h_put_sku(f->port, NULL, sku, 8, 4, "lock", 0), 0);
    for (int i = 0; i < 2; i++) /* each empties a segment */
        assert_int_equal(h_order(f->port, sku, 2, NULL, NULL), 201);
    const struct rd_target seed = {.host = "127.0.0.1",
                                   .port = h_cluster_port(f->cluster, 0),
                                   .timeout_ms = 2000,
                                   .cluster = true};
    rd_conn *c = rd_conn_create(&seed, NULL);
    struct rd_meta meta;
    assert_int_equal(rd_meta_read(c, sku, &meta), 1);
    rd_conn_free(c);
    struct event_base *base = event_base_new();
    rda_conn *ac = rda_create(base, &seed, NULL);
    char placed[RD_SKU_PLACED_MAX];
    seg_key_placed(placed, sku, meta.salt);
    long long value = 0;
    assert_int_equal(seam_adjust(base, ac, placed, meta.epoch, "spread", &value), RD_OK);
    assert_true(value > meta.gen);
    long long stock[4];
    segment_stocks(f->port, sku, stock, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(stock[i], 1);
    /* Every segment holds stock: nothing to do. */
    assert_int_equal(seam_adjust(base, ac, placed, meta.epoch, "spread", &value), RD_OK);
    assert_int_equal(value, 0);
    /* A stale view is refused. */
    assert_int_equal(seam_adjust(base, ac, placed, meta.epoch + 1, "rebalance", &value),
                     RD_STALE);
    rda_free(ac);
    event_base_free(base);
    assert_int_equal(h_audit(f->port, NULL, sku, 8, false), 0);
}

/* The automatic rebalance on a cluster (mode lock, "rebalance" on by default): once
 * most segments are seen empty with stock left, a loop hands the SKU to the sweeper
 * thread, which spreads the stock over every segment. (Before, a cluster never
 * rebalanced by itself: the counter stayed put and half the segments stayed empty.) */
static void test_rebalance_automatic(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    const char *sku = "a-auto";
    assert_int_equal(h_put_sku(f->port, NULL, sku, 40, 4, "lock", 0), 0);
    for (int i = 0; i < 2; i++) /* each empties a segment of 10 */
        assert_int_equal(h_order(f->port, sku, 10, NULL, NULL), 201);
    long long rebal0 = h_stat(f->port, NULL, "rebalances");
    long long sold = 20;
    /* Orders of one until a loop has seen most segments empty and the spread ran. */
    long long until = h_now_ms() + 10000;
    while (h_stat(f->port, NULL, "rebalances") == rebal0 && h_now_ms() < until) {
        if (sold < 30) {
            assert_int_equal(h_order(f->port, sku, 1, NULL, NULL), 201);
            sold++;
        }
        h_sleep_ms(20);
    }
    assert_true(h_stat(f->port, NULL, "rebalances") > rebal0);
    h_sleep_ms(300);
    /* One spread, counted once: the loops that found it due in that generation
     * asked for one, and the new generation is not due. (The sweeper counted it a
     * second time before, 2.) */
    assert_int_equal(h_stat(f->port, NULL, "rebalances") - rebal0, 1);
    long long stock[4];
    assert_int_equal(segment_stocks(f->port, sku, stock, 4), 4);
    for (int i = 0; i < 4; i++) /* 10 or more left, spread: none empty */
        if (stock[i] < 1)
            fail_msg("segment %d holds %lld after the rebalance", i, stock[i]);
    assert_int_equal(sku_field(f->port, sku, "sold"), sold);
    assert_int_equal(h_audit(f->port, NULL, sku, 40, false), 0);
}

/* ---- no 409 while units are in transit (issue 21, item 4) --------------------- */

/* Wait until no adjust of `sku` is under way (no intent in its meta), so that the
 * remaining read next counts every unit. */
static void adjust_settled(struct h_cluster_env *f, const char *sku)
{
    char meta[SEG_KEY_MAX];
    seg_key_meta(meta, sku);
    long long until = h_now_ms() + 5000;
    while (integer_on(f, meta, "HEXISTS %s adj", meta) != 0) {
        if (h_now_ms() > until)
            fail_msg("%s: an adjust still under way after 5 s", sku);
        h_sleep_ms(10);
    }
}

/* Orders of 10 into `sku`, one after another, until one is refused: the number of
 * 201s, the refusal's status and error code. */
static int sell_by_tens(int port, const char *sku, int *status, char *code, size_t len)
{
    for (int placed = 0;; placed++) {
        struct h_resp r;
        *status = h_order(port, sku, 10, NULL, &r);
        h_error_code(&r, code, len);
        h_resp_free(&r);
        if (*status != 201)
            return placed;
    }
}

/* The refusal must be 409 sold_out after 16 orders of 10, with less than 10 left
 * (read once no adjust is under way). */
static void check_sold_out(struct h_cluster_env *f, const char *sku, const char *what,
                           int placed, int status, const char *code)
{
    adjust_settled(f, sku);
    long long left = sku_field(f->port, sku, "remaining");
    if (status != 409 || left >= 10 || strcmp(code, "sold_out") != 0 || placed != 16)
        fail_msg("%s, %s: order %d answered %d %s with %lld left", sku, what, placed + 1,
                 status, code, left);
    assert_int_equal(h_audit(f->port, NULL, sku, 160, false), 0);
}

/* A lone client, the automatic rebalance on (mode lock): 16 segments of 10, orders of
 * 10. Once half the segments are seen empty the sweeper spreads the rest, and again
 * in the next generation; an order that meets the units in transit (taken from one
 * segment, not yet given to another, or given to one the loop saw empty in that
 * generation) must wait for the commit or look again, not answer 409. Before: order
 * 14, 15 or 16 answered 409 insufficient_stock or sold_out with 30, 20 or 10 left.
 * Each cycle a new SKU, as a client would meet it; a few cycles, the window being
 * milliseconds. */
static void test_spread_lone_client(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(90);
    long long rebal0 = h_stat(f->port, NULL, "rebalances");
    for (int cycle = 0; cycle < 4; cycle++) {
        char sku[32], code[64];
        snprintf(sku, sizeof sku, "a-lone-%d", cycle);
        assert_int_equal(h_put_sku(f->port, NULL, sku, 160, 16, "lock", 0), 0);
        int status, placed = sell_by_tens(f->port, sku, &status, code, sizeof code);
        check_sold_out(f, sku, "automatic rebalance", placed, status, code);
    }
    assert_true(h_stat(f->port, NULL, "rebalances") > rebal0); /* it did spread */
}

struct rebalancer {
    int port;
    const char *sku;
    atomic_bool stop;
    atomic_int done, refused;
};

static void *rebalance_loop(void *arg)
{
    struct rebalancer *b = arg;
    while (!atomic_load(&b->stop)) {
        struct h_resp r;
        if (rebalance(b->port, b->sku, NULL, &r) == 200)
            atomic_fetch_add(&b->done, 1);
        else if (atomic_fetch_add(&b->refused, 1) == 0)
            fprintf(stderr, "%s: rebalance answered %d %.200s\n", b->sku, r.status,
                    r.body);
        h_resp_free(&r);
        h_sleep_ms(3);
    }
    return NULL;
}

/* The manual rebalance racing a lone client's orders of 10 likewise, in `mode` (16
 * segments of 10): no 409 while 10 are left. Before: 409 insufficient_stock or
 * sold_out on order 14, 15 or 16 with 30, 20 or 10 left. */
static void manual_rebalance_race(struct h_cluster_env *f, const char *mode)
{
    h_deadline(90);
    for (int cycle = 0; cycle < 3; cycle++) {
        char sku[32], code[64];
        snprintf(sku, sizeof sku, "a-race-%s-%d", mode, cycle);
        assert_int_equal(h_put_sku(f->port, NULL, sku, 160, 16, mode, 0), 0);
        struct rebalancer b = {.port = f->port, .sku = sku};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, rebalance_loop, &b), 0);
        long long until = h_now_ms() + 10000; /* the rebalances under way first */
        while (atomic_load(&b.done) == 0 && atomic_load(&b.refused) == 0 &&
               h_now_ms() < until)
            h_sleep_ms(1);
        int status, placed = sell_by_tens(f->port, sku, &status, code, sizeof code);
        atomic_store(&b.stop, true);
        pthread_join(t, NULL);
        check_sold_out(f, sku, "manual rebalance", placed, status, code);
        assert_true(atomic_load(&b.done) > 0);
    }
}

static void test_rebalance_race_lock(void **state)
{
    manual_rebalance_race(*state, "lock");
}

static void test_rebalance_race_atomic(void **state)
{
    manual_rebalance_race(*state, "atomic");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restock),
        cmocka_unit_test(test_rebalance),
        cmocka_unit_test(test_adjust_under_load_lock),
        cmocka_unit_test(test_adjust_under_load_atomic),
        cmocka_unit_test(test_dead_adjust_taken_over),
        cmocka_unit_test(test_reset_clears_intent),
        cmocka_unit_test(test_reset_after_two_dead_resets),
        cmocka_unit_test(test_reset_retry_takes_own_over),
        cmocka_unit_test(test_spread_in_seam),
        cmocka_unit_test(test_rebalance_automatic),
        cmocka_unit_test(test_spread_lone_client),
        cmocka_unit_test(test_rebalance_race_lock),
        cmocka_unit_test(test_rebalance_race_atomic),
    };
    int failed = cmocka_run_group_tests_name(
        "cluster_admin", tests, h_cluster_group_setup, h_cluster_group_teardown);
    return h_exit_status(failed);
}
