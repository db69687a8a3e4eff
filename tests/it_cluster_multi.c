/* it_cluster_multi.c -- orders whose steps span slots on a real Redis Cluster (3
 * masters with a replica each, started by the harness), and instances killed between
 * the steps.
 *
 * An order no single segment can fill takes parts of several, whose keys live on
 * different masters: its intent is recorded first (the id in the intents set, the
 * plan in the id's claim), then each part is deducted in its own slot, then the
 * record is written. Shown here: such orders in both modes, replayed, read and
 * cancelled; and an instance SIGKILLed between the parts (one landed, the other held
 * up by CLIENT PAUSE on its master), after which the retry with the order's id, or
 * when nobody retries the sweeper of the surviving instance, gives the landed part
 * back, so the audit holds and the order is placed at most once; the sweeper also
 * settles intents planted by hand (a placed order's id, a dead claim whose plan
 * never landed). And orders without a client id, whose id is made for their
 * segment's slot so that the record is written with the sale: an instance killed
 * while other masters pause leaves no sale without its record. And such an order
 * cancelled through the store's op (store.h cancel, segments/redis/cancel.c) on a
 * loop of the test's own.
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
#include <time.h>

#include "segments/redis/backend.h"
#include "segments/redis/calls.h"
#include "segments/redis/keys.h"
#include "tests/harness.h"

/* The cluster node (index) that masters `key`. */
static int master_of(struct h_cluster_env *f, const char *key)
{
    int i = h_cluster_master_of(f->cluster, key);
    if (i < 0)
        fail_msg("no master serves %s", key);
    return i;
}

/* A command on node i; the reply's integer, 0 for a status (OK), -1 for an error. */
static long long node_int(struct h_cluster_env *f, int i, const char *fmt, ...)
{
    redisContext *rc = h_redis_connect(h_cluster_node(f->cluster, i));
    assert_non_null(rc);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    long long v = r == NULL                        ? -1
                  : r->type == REDIS_REPLY_INTEGER ? r->integer
                  : r->type == REDIS_REPLY_STATUS  ? 0
                                                   : -1;
    if (r != NULL)
        freeReplyObject(r);
    redisFree(rc);
    return v;
}

/* Orders over several segments: placed (the record lists the parts), replayed,
 * read back, refused when the rest cannot fill them, cancelled; the audit holds. */
static void multi_segment(struct h_cluster_env *f, const char *sku, const char *mode)
{
    char id[64];
    snprintf(id, sizeof id, "%s-1", sku);
    assert_int_equal(h_put_sku(f->port, NULL, sku, 6, 3, mode, 0), 0);
    long long multi0 = h_stat(f->port, NULL, "multi_segment_orders");
    struct h_resp r;
    assert_int_equal(h_order(f->port, sku, 5, id, &r), 201);
    json_t *o = h_resp_json(&r);
    assert_non_null(o);
    json_t *parts = json_object_get(o, "segments");
    assert_true(json_array_size(parts) >= 3);
    long long sum = 0;
    for (size_t k = 0; k < json_array_size(parts); k++)
        sum += h_jint(json_array_get(parts, k), "qty");
    assert_int_equal(sum, 5);
    json_decref(o);
    h_resp_free(&r);
    assert_int_equal(h_stat(f->port, NULL, "multi_segment_orders"), multi0 + 1);

    assert_int_equal(h_order(f->port, sku, 5, id, NULL), 200); /* the replay */
    assert_int_equal(h_order_status(f->port, id), 200);
    h_order(f->port, sku, 2, NULL, &r);
    assert_int_equal(h_expect_error(&r, 409, "insufficient_stock"), 0);
    h_resp_free(&r);
    assert_int_equal(h_audit(f->port, NULL, sku, 6, false), 0);

    char path[96];
    snprintf(path, sizeof path, "/orders/%s", id);
    assert_int_equal(h_req(f->port, "DELETE", path, NULL, NULL, &r), 200);
    h_resp_free(&r);
    json_t *j = h_get_sku(f->port, NULL, sku);
    assert_non_null(j);
    assert_int_equal(h_jint(j, "remaining"), 6);
    assert_int_equal(h_jint(j, "sold"), 0);
    assert_int_equal(h_jint(j, "locks_held"), 0); /* the cancel let its locks go */
    json_decref(j);
    assert_int_equal(h_audit(f->port, NULL, sku, 6, false), 0);

    /* All of it, with no id: every segment gives its part. */
    h_order(f->port, sku, 6, NULL, &r);
    if (r.status != 201)
        fail_msg("%d %s", r.status, r.body);
    h_resp_free(&r);
    h_order(f->port, sku, 1, NULL, &r);
    assert_int_equal(h_expect_error(&r, 409, "sold_out"), 0);
    h_resp_free(&r);
    json_t *after = h_get_sku(f->port, NULL, sku);
    assert_int_equal(h_jint(after, "locks_held"), 0);
    json_decref(after);
    assert_int_equal(h_audit(f->port, NULL, sku, 6, false), 0);
}

static void test_multi_lock(void **state)
{
    h_deadline(60);
    multi_segment(*state, "cm-lock", "lock");
}

static void test_multi_atomic(void **state)
{
    h_deadline(60);
    multi_segment(*state, "cm-atomic", "atomic");
}

/* Durability "replicated": a multi-segment order is 201 once a replica of each part's
 * master, and of the record's, has it (WAIT on each). */
static void test_multi_replicated(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    struct h_resp r;
    h_req(f->port, "PUT", "/admin/skus/cm-repl", NULL,
          "{\"stock\": 6, \"segments\": 3, \"durability\": \"replicated\"}", &r);
    assert_true(r.status == 200 || r.status == 201);
    h_resp_free(&r);
    for (int i = 0; i < 2; i++) { /* 2 units a segment: 3 take two of them */
        h_order(f->port, "cm-repl", 3, NULL, &r);
        if (r.status != 201)
            fail_msg("%d %s", r.status, r.body);
        h_resp_free(&r);
    }
    assert_int_equal(h_audit(f->port, NULL, "cm-repl", 6, false), 0);
}

struct placing {
    int port;
    const char *sku, *id;
    int status;
};

static void *place(void *arg)
{
    struct placing *p = arg;
    p->status = h_order(p->port, p->sku, 3, p->id, NULL);
    return NULL;
}

/* An instance dies between the parts of a multi-segment order: SKU `sku` (2
 * segments of 2 units, on two masters), an order of 3 with `id` (NULL: none) sent to
 * a second instance while the master of one part's segment pauses writes; once the
 * other part has landed, that instance is SIGKILLed. `id` (64 bytes) is filled with
 * the order's id, one whose claim lives on a master not paused. */
static void die_between_parts(struct h_cluster_env *f, const char *sku, char *id)
{
    /* One loop, so that what it learns below holds for the order. */
    const char *const one_loop[] = {"--threads", "1", NULL};
    h_svc *second = h_svc_start_args(h_cluster_node(f->cluster, 1), one_loop);
    assert_non_null(second);
    assert_int_equal(h_put_sku(f->port, NULL, sku, 4, 2, "atomic", 0), 0);
    json_t *j = h_get_sku(f->port, NULL, sku);
    assert_non_null(j);
    const char *placed = json_string_value(json_object_get(j, "placed_as"));
    char key[2][160];
    int node[2];
    for (int i = 0; i < 2; i++) {
        snprintf(key[i], sizeof key[i], "inv:{%s:%d}:%s", placed, i,
                 i == 0 ? "orders" : "parts");
        node[i] = master_of(f, key[i]);
    }
    json_decref(j);
    assert_int_not_equal(node[0], node[1]); /* placement spread them */
    /* The paused part's master serves neither the intents set nor the id's claim. */
    int intents = master_of(f, "inv:intents");
    int paused = node[1] != intents ? 1 : 0, landed = 1 - paused;
    for (int k = 0;; k++) {
        char rec[96];
        snprintf(id, 64, "%s-%d", sku, k);
        snprintf(rec, sizeof rec, "inv:order:{%s}", id);
        if (master_of(f, rec) != node[paused])
            break;
    }

    /* Orders bigger than the stock: the second instance learns that neither segment
     * holds 3, so the order below goes straight to its parts. */
    for (int i = 0; i < 2; i++)
        assert_int_equal(h_order(h_svc_port(second), sku, 5, NULL, NULL), 409);

    assert_int_equal(node_int(f, node[paused], "CLIENT PAUSE 4000 WRITE"), 0);
    struct placing p = {h_svc_port(second), sku, id, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, place, &p), 0);
    bool seen = false;
    for (long long until = h_now_ms() + 3000; !seen && h_now_ms() < until;) {
        seen = node_int(f, node[landed], "HLEN %s", key[landed]) > 0;
        if (!seen)
            h_sleep_ms(2);
    }
    if (!seen) { /* what the instance did instead */
        struct h_resp d;
        h_req(h_svc_port(second), "GET", "/admin/stats", NULL, NULL, &d);
        fprintf(stderr, "no part landed on node %d (node %d paused): %.2000s\n",
                node[landed], node[paused], d.body);
        h_resp_free(&d);
    }
    assert_true(h_svc_kill(second) >= 0);
    pthread_join(t, NULL);
    h_svc_free(second);
    assert_true(seen);
    assert_int_equal(node_int(f, node[paused], "CLIENT UNPAUSE"), 0);
}

/* With a client's id: the retry undoes the dead attempt's plan, then places the order
 * once. */
static void test_dead_between_parts_retry(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(90);
    char id[64];
    die_between_parts(f, "cm-dead", id);
    int st = 0;
    long long until = h_now_ms() + 30000;
    while (h_now_ms() < until && (st = h_order(f->port, "cm-dead", 3, id, NULL)) == 503)
        h_sleep_ms(200);
    assert_int_equal(st, 201);
    assert_int_equal(h_order(f->port, "cm-dead", 3, id, NULL), 200);
    json_t *j = h_get_sku(f->port, NULL, "cm-dead");
    assert_non_null(j);
    assert_int_equal(h_jint(j, "sold"), 3);
    assert_int_equal(h_jint(j, "remaining"), 1);
    assert_int_equal(h_jint(j, "orders"), 1);
    json_decref(j);
    assert_int_equal(h_audit(f->port, NULL, "cm-dead", 4, false), 0);
}

/* Nobody retries (as for an order without a client id, which the sweeper treats the
 * same): the sweeper of the surviving instance gives the landed part back once the
 * claim has run out. */
static void test_dead_between_parts_swept(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(90);
    long long undone0 = h_stat(f->port, NULL, "intents_undone");
    char id[64];
    die_between_parts(f, "cm-swept", id);
    long long until = h_now_ms() + 30000, sold = -1;
    while (h_now_ms() < until && sold != 0) {
        json_t *j = h_get_sku(f->port, NULL, "cm-swept");
        assert_non_null(j);
        sold = h_jint(j, "sold");
        json_decref(j);
        if (sold != 0)
            h_sleep_ms(200);
    }
    assert_int_equal(sold, 0);
    assert_true(h_stat(f->port, NULL, "intents_undone") >= undone0 + 1);
    json_t *j = h_get_sku(f->port, NULL, "cm-swept");
    assert_non_null(j);
    assert_int_equal(h_jint(j, "remaining"), 4);
    assert_int_equal(h_jint(j, "orders"), 0);
    json_decref(j);
    assert_int_equal(h_audit(f->port, NULL, "cm-swept", 4, false), 0);
    /* And the stock sells as usual after it. */
    assert_int_equal(h_order(f->port, "cm-swept", 3, NULL, NULL), 201);
    assert_int_equal(h_audit(f->port, NULL, "cm-swept", 4, false), 0);
}

/* What else the sweeper meets in the intents set, planted by hand: the id of an order
 * placed (its process died between CONFIRM and taking the id out: no claim left),
 * and a claim that ran out with a plan none of whose parts landed. Both go out of
 * the set; the second is taken over, its plan undone (nothing to give back) and its
 * claim given up, which leaves no key. */
static void test_sweeper_settles_planted(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    assert_int_equal(h_put_sku(f->port, NULL, "cm-plant", 4, 2, "atomic", 0), 0);
    json_t *j = h_get_sku(f->port, NULL, "cm-plant");
    assert_non_null(j);
    char placed[96], key[160];
    snprintf(placed, sizeof placed, "%s",
             json_string_value(json_object_get(j, "placed_as")));
    json_decref(j);
    snprintf(key, sizeof key, "inv:{%s:0}:epoch", placed); /* the plan's epoch */
    redisContext *rc = h_redis_connect(h_cluster_node(f->cluster, master_of(f, key)));
    assert_non_null(rc);
    redisReply *r = redisCommand(rc, "GET %s", key);
    assert_true(r != NULL && r->type == REDIS_REPLY_STRING);
    long long epoch = atoll(r->str);
    freeReplyObject(r);
    redisFree(rc);
    char plan[160];
    snprintf(plan, sizeof plan, "%s %lld 0:1 1:1", placed, epoch);
    long long undone0 = h_stat(f->port, NULL, "intents_undone");
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long old = (long long)now.tv_sec * 1000 - 10000; /* past SWEEP_AGE_MS */
    const char *rec = "inv:order:{cm-plant-dead}";
    assert_int_equal(node_int(f, master_of(f, rec),
                              "HSET %s c deadbeef u 1 p %s k %s e %lld", rec, plan,
                              "cm-plant", epoch),
                     5);
    int in = master_of(f, "inv:intents");
    assert_int_equal(node_int(f, in,
                              "ZADD inv:intents %lld cm-plant-placed %lld cm-plant-dead",
                              old, old),
                     2);
    bool gone = false; /* the sweeper looks every second */
    for (long long until = h_now_ms() + 10000; !gone && h_now_ms() < until;) {
        gone = node_int(f, in, "ZRANK inv:intents cm-plant-placed") < 0 &&
               node_int(f, in, "ZRANK inv:intents cm-plant-dead") < 0;
        if (!gone)
            h_sleep_ms(100);
    }
    assert_true(gone);
    assert_int_equal(node_int(f, master_of(f, rec), "EXISTS %s", rec), 0);
    assert_true(h_stat(f->port, NULL, "intents_undone") >= undone0 + 1);
    assert_int_equal(h_audit(f->port, NULL, "cm-plant", 4, false), 0);
}

struct fresh {
    int port;
    int status[6];
};

static void place_fresh(int idx, void *arg)
{
    struct fresh *p = arg;
    __atomic_store_n(&p->status[idx], h_order(p->port, "cm-fresh", 1, NULL, NULL),
                     __ATOMIC_SEQ_CST);
}

static void *place_all_fresh(void *arg)
{
    h_parallel(6, place_fresh, arg);
    return NULL;
}

/* Orders without a client id: each id is made for its segment's slot, so the DEDUCT
 * writes the record with the sale. (It was written by CONFIRM on the id's own master:
 * an instance that died between the two left the sale standing with no record.)
 * Every master but the segment's pauses writes while 6 such orders run on a second
 * instance, which is then SIGKILLed: each sale in the segment must have its record. */
static void test_fresh_id_record_with_sale(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    const char *const one_loop[] = {"--threads", "1", NULL};
    h_svc *second = h_svc_start_args(h_cluster_node(f->cluster, 1), one_loop);
    assert_non_null(second);
    assert_int_equal(h_put_sku(f->port, NULL, "cm-fresh", 10, 1, "atomic", 0), 0);
    json_t *j = h_get_sku(f->port, NULL, "cm-fresh");
    assert_non_null(j);
    char orders[160];
    snprintf(orders, sizeof orders, "inv:{%s:0}:orders",
             json_string_value(json_object_get(j, "placed_as")));
    json_decref(j);
    int seg = master_of(f, orders);
    bool paused[16] = {false}; /* the other masters, found by the keys they serve */
    for (int k = 0; k < 64; k++) {
        char key[32];
        snprintf(key, sizeof key, "k%d", k);
        int m = master_of(f, key);
        if (m != seg && !paused[m]) {
            assert_int_equal(node_int(f, m, "CLIENT PAUSE 10000 WRITE"), 0);
            paused[m] = true;
        }
    }

    struct fresh p = {.port = h_svc_port(second)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, place_all_fresh, &p), 0);
    long long until = h_now_ms() + 3000;
    while (h_now_ms() < until && node_int(f, seg, "HLEN %s", orders) < 6)
        h_sleep_ms(2);
    for (until = h_now_ms() + 1500; h_now_ms() < until;) { /* their answers */
        int done = 0;
        for (int k = 0; k < 6; k++)
            done += __atomic_load_n(&p.status[k], __ATOMIC_SEQ_CST) != 0;
        if (done == 6)
            break;
        h_sleep_ms(10);
    }
    assert_true(h_svc_kill(second) >= 0);
    pthread_join(t, NULL);
    h_svc_free(second);
    for (int m = 0; m < 16; m++)
        if (paused[m])
            assert_int_equal(node_int(f, m, "CLIENT UNPAUSE"), 0);

    /* Every sale in the segment has its record, wherever the record lives. */
    redisContext *rc = h_redis_connect(h_cluster_node(f->cluster, seg));
    assert_non_null(rc);
    redisReply *ids = redisCommand(rc, "HKEYS %s", orders);
    assert_non_null(ids);
    assert_int_equal(ids->type, REDIS_REPLY_ARRAY);
    assert_int_equal(ids->elements, 6);
    int missing = 0;
    for (size_t k = 0; k < ids->elements; k++) {
        char rec[96];
        snprintf(rec, sizeof rec, "inv:order:{%s}", ids->element[k]->str);
        if (node_int(f, master_of(f, rec), "HEXISTS %s r", rec) != 1) {
            fprintf(stderr, "sale %s has no record\n", ids->element[k]->str);
            missing++;
        }
    }
    freeReplyObject(ids);
    redisFree(rc);
    assert_int_equal(missing, 0);
    for (int k = 0; k < 6; k++)
        assert_int_equal(p.status[k], 201);
    assert_int_equal(h_audit(f->port, NULL, "cm-fresh", 10, true), 0);
}

/* ---- the cancel as the store's op (store.h cancel, segments/redis/cancel.c) ---- */

/* GET /admin/skus/{sku} field `key` (an integer). */
static long long sku_field(int port, const char *sku, const char *key)
{
    json_t *j = h_get_sku(port, NULL, sku);
    assert_non_null(j);
    long long v = h_jint(j, key);
    json_decref(j);
    return v;
}

/* The name the segments of `sku` are placed as ("placed_as"). */
static void placed_as(int port, const char *sku, char *buf, size_t len)
{
    json_t *j = h_get_sku(port, NULL, sku);
    assert_non_null(j);
    snprintf(buf, len, "%s", json_string_value(json_object_get(j, "placed_as")));
    json_decref(j);
}

struct answer {
    int done, rc, code;
    char *record;
};

static void on_answer(void *arg, int rc, struct store_reply *r)
{
    struct answer *a = arg;
    a->done++;
    a->rc = rc;
    a->code = rc == 0 ? r->code : -1;
    free(a->record);
    a->record = NULL;
    if (rc == 0 && r->record != NULL) {
        a->record = r->record;
        r->record = NULL;
    }
}

static void on_lock(void *arg, int rc, int value)
{
    struct answer *a = arg;
    a->done++;
    a->rc = rc;
    a->code = value;
}

/* Turn `base` until `a` is answered (within 10 s). */
static void await(struct event_base *base, struct answer *a)
{
    long long end = h_now_ms() + 10000;
    while (!a->done && h_now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    assert_true(a->done == 1);
}

/* Segment i's lock of `placed` taken by `token` through the store: 1 taken. */
static int store_lock(struct event_base *base, store *st, const char *placed, int i,
                      const char *token)
{
    struct answer a = {0};
    STORE_CALL(st, lock, placed, i, token, 5000, on_lock, &a);
    await(base, &a);
    assert_int_equal(a.rc, 0);
    return a.code;
}

static int store_cancel(struct event_base *base, store *st, const char *placed,
                        long long epoch, const char *id, const char *cancelled,
                        const char *expected, const struct store_parts *p, char **record)
{
    struct answer a = {0};
    STORE_CALL(st, cancel, placed, epoch, id, cancelled, expected, p, 0, on_answer, &a);
    await(base, &a);
    assert_int_equal(a.rc, 0);
    if (record != NULL)
        *record = a.record;
    else
        free(a.record);
    return a.code;
}

/* A two-part order cancelled through the store's op on a cluster: a part whose lock
 * is not the caller's answers FENCED, gives nothing back and releases the locks of
 * the parts after it; with the locks, OK (units back, record cancelled, every lock
 * released); again, EXISTS with the cancelled record; a record not the one read,
 * STALE; an unknown id, MISSING. */
static void test_cancel_in_seam(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    const char *sku = "m-cancel";
    assert_int_equal(h_put_sku(f->port, NULL, sku, 8, 4, "lock", 0), 0);
    assert_int_equal(h_order(f->port, sku, 3, "mc-1", NULL), 201); /* two segments */
    struct h_resp r;
    assert_int_equal(h_req(f->port, "GET", "/orders/mc-1", NULL, NULL, &r), 200);
    char *rec = strdup(r.body), cancelled[512];
    h_resp_free(&r);
    const char *at = strstr(rec, "\"status\":\"confirmed\"");
    assert_non_null(at);
    snprintf(cancelled, sizeof cancelled, "%.*s\"status\":\"cancelled\"%s",
             (int)(at - rec), rec, at + strlen("\"status\":\"confirmed\""));
    json_t *o = json_loads(rec, 0, NULL), *segs = json_object_get(o, "segments");
    assert_int_equal(json_array_size(segs), 2);
    int seg[2];
    long long part[2];
    for (int k = 0; k < 2; k++) {
        json_t *e = json_array_get(segs, (size_t)k);
        seg[k] = (int)json_integer_value(json_object_get(e, "segment"));
        part[k] = json_integer_value(json_object_get(e, "qty"));
    }
    json_decref(o);
    char placed[64];
    placed_as(f->port, sku, placed, sizeof placed);
    const struct rd_target seed = {.host = "127.0.0.1",
                                   .port = h_cluster_port(f->cluster, 0),
                                   .timeout_ms = 2000,
                                   .cluster = true};
    rd_conn *c = rd_conn_create(&seed, NULL);
    struct rd_meta meta;
    assert_int_equal(rd_meta_read(c, sku, &meta), 1);
    rd_conn_free(c);
    struct event_base *base = event_base_new();
    store *st = rd_store_create(base, &seed, NULL);

    /* Part 0's lock is another's: FENCED, and part 1's lock (ours) given back. */
    assert_int_equal(store_lock(base, st, placed, seg[0], "someone-else"), 1);
    assert_int_equal(store_lock(base, st, placed, seg[1], "ours-1"), 1);
    const char *bad[] = {"not-ours", "ours-1"};
    const struct store_parts fenced = {2, seg, part, bad, NULL};
    assert_int_equal(
        store_cancel(base, st, placed, meta.epoch, "mc-1", cancelled, rec, &fenced, NULL),
        STORE_FENCED);
    assert_int_equal(store_lock(base, st, placed, seg[1], "next-1"), 1);
    assert_int_equal(sku_field(f->port, sku, "remaining"), 5);

    /* With both locks: OK, the units back, the record cancelled, the locks free. */
    const char *tok[] = {"mine-0", "mine-1"};
    for (int k = 0; k < 2; k++) { /* as a worker's cancel holds them */
        char key[SEG_KEY_MAX];
        seg_key_lock(key, placed, seg[k]);
        assert_int_equal(node_int(f, master_of(f, key), "SET %s %s", key, tok[k]), 0);
    }
    const struct store_parts ok = {2, seg, part, tok, NULL};
    assert_int_equal(
        store_cancel(base, st, placed, meta.epoch, "mc-1", cancelled, rec, &ok, NULL),
        STORE_OK);
    assert_int_equal(sku_field(f->port, sku, "remaining"), 8);
    assert_int_equal(h_req(f->port, "GET", "/orders/mc-1", NULL, NULL, &r), 200);
    assert_string_equal(r.body, cancelled);
    h_resp_free(&r);
    for (int k = 0; k < 2; k++)
        assert_int_equal(store_lock(base, st, placed, seg[k], "after"), 1);

    /* Again: EXISTS with that record; nothing given back twice. */
    char *got = NULL;
    const char *none[] = {"", ""};
    const struct store_parts again = {2, seg, part, none, NULL};
    assert_int_equal(
        store_cancel(base, st, placed, meta.epoch, "mc-1", cancelled, rec, &again, &got),
        STORE_EXISTS);
    assert_non_null(got);
    assert_string_equal(got, cancelled);
    free(got);
    /* Not the record read: STALE. No such order: MISSING. */
    assert_int_equal(h_order(f->port, sku, 1, "mc-2", NULL), 201);
    assert_int_equal(
        store_cancel(base, st, placed, meta.epoch, "mc-2", cancelled, rec, &again, NULL),
        STORE_STALE);
    assert_int_equal(store_cancel(base, st, placed, meta.epoch, "mc-none", cancelled, rec,
                                  &again, NULL),
                     STORE_MISSING);
    st->ops->free(st);
    event_base_free(base);
    free(rec);
    assert_int_equal(sku_field(f->port, sku, "remaining"), 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi_lock),
        cmocka_unit_test(test_multi_atomic),
        cmocka_unit_test(test_multi_replicated),
        cmocka_unit_test(test_dead_between_parts_retry),
        cmocka_unit_test(test_dead_between_parts_swept),
        cmocka_unit_test(test_sweeper_settles_planted),
        cmocka_unit_test(test_fresh_id_record_with_sale),
        cmocka_unit_test(test_cancel_in_seam),
    };
    return h_exit_status(
        cmocka_run_group_tests(tests, h_cluster_group_setup, h_cluster_group_teardown));
}
