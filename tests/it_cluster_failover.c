/* it_cluster_failover.c -- failover under load on a real Redis Cluster (3 masters
 * with a replica each): orders run from client threads, every 201 goes into a
 * client-side ledger, and a master holding hot segments is SIGKILLed 5 times (its
 * replica promoted each time, the old master restarted as a replica).
 *
 * Before each kill the victim's replica is cut off for 300 ms (SIGSTOP, and its
 * link dropped with CLIENT KILL TYPE replica), so the master acknowledges writes no
 * replica has: with durability "async" those orders
 * are lost in the failover (the test counts them: the ledger check catches a loss),
 * with "replicated" WAIT holds their 201 back (503 not_replicated) and the test
 * demands that no ledger order is lost. Afterwards every ledger order must be found
 * by GET /orders/{id} (replicated) and the audit hold: remaining + sold = initial, no
 * segment below zero, one record per sale. And orders with a client's id (one
 * segment, and several) whose id's master fails over after their 503
 * not_replicated: the retry places each once. And a restock and a rebalance of a
 * replicated SKU whose meta's or segment's master fails over after their 503
 * not_replicated: the retry under the request id applies each exactly once.
 * And reads of acknowledged orders right after a master was SIGKILLed or frozen and
 * its replica promoted: every one 200 (one slot map per process).
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

#define KILLS 5
#define CLIENTS 4
#define LEDGER_MAX 200000

/* The cluster index of the node at `port`, or -1. */
static int node_at(struct h_cluster_env *f, int port)
{
    for (int i = 0; i < h_cluster_size(f->cluster); i++)
        if (h_cluster_port(f->cluster, i) == port)
            return i;
    return -1;
}

/* The map as some live node sees it: 0, or -1 when none answers. */
static int fetch_any(struct h_cluster_env *f, int skip, struct rd_slot_map *m)
{
    for (int i = 0; i < h_cluster_size(f->cluster); i++) {
        if (i == skip)
            continue;
        const struct rd_target seed = {.host = "127.0.0.1",
                                       .port = h_cluster_port(f->cluster, i),
                                       .timeout_ms = 500};
        char err[256];
        if (rd_slot_map_fetch(&seed, m, err, sizeof err) == 0 &&
            rd_slot_map_assigned(m) == RD_SLOTS)
            return 0;
        rd_slot_map_clear(m);
    }
    return -1;
}

/* True when node i answers ROLE as a replica whose link to its master is up. */
static bool synced_replica(struct h_cluster_env *f, int i)
{
    redisContext *rc = h_redis_connect(h_cluster_node(f->cluster, i));
    if (rc == NULL)
        return false;
    redisReply *r = redisCommand(rc, "ROLE");
    bool ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= 4 &&
              strcmp(r->element[0]->str, "slave") == 0 &&
              strcmp(r->element[3]->str, "connected") == 0;
    if (r != NULL)
        freeReplyObject(r);
    redisFree(rc);
    return ok;
}

struct run {
    struct h_cluster_env *f;
    const char *sku;
    char placed[96]; /* the name its segments are keyed under (GET "placed_as") */
    atomic_bool stop;
    pthread_mutex_t mu;
    char (*ledger)[48];
    int acked, failed, not_replicated;
    int kills;
    long long failover_ms[KILLS];
    char error[160];
};

/* The master serving `slot` and its replica (cluster indexes), waiting up to 10 s for
 * the map to show a replica (after a failover the old master rejoins as one before
 * every node has cleared its failure flag): 0, or -1 with the reason in err. */
static int shard_of(struct h_cluster_env *f, int slot, int *victim, int *replica,
                    char *err, size_t errlen)
{
    long long until = h_now_ms() + 10000;
    for (;;) {
        struct rd_slot_map m;
        if (fetch_any(f, -1, &m) != 0) {
            snprintf(err, errlen, "no node gives a full map");
            return -1;
        }
        const struct rd_shard *sh = &m.masters[m.slot[slot]];
        *victim = node_at(f, sh->master.port);
        *replica = sh->nreplicas > 0 ? node_at(f, sh->replicas[0].port) : -1;
        rd_slot_map_clear(&m);
        if (*victim >= 0 && *replica >= 0)
            return 0;
        if (h_now_ms() > until) {
            snprintf(err, errlen, "the slot's master has no replica");
            return -1;
        }
        h_sleep_ms(100);
    }
}

/* The replica of `master` stopped and its link dropped by the master, so that what
 * the master acknowledges from now on reaches no replica; then cut(arg). */
static void cut_and_run(h_redis *master, h_redis *standby, void (*cut)(void *), void *arg)
{
    h_redis_pause(standby);
    redisContext *rc = h_redis_connect(master);
    if (rc != NULL) {
        redisReply *x = redisCommand(rc, "CLIENT KILL TYPE replica");
        if (x != NULL)
            freeReplyObject(x);
        redisFree(rc);
    }
    cut(arg);
}

/* The replica of the master serving `slot` cut off while cut(arg) runs, then resumed
 * (no failover): it reconnects and catches up. 0, or -1 with the reason in err. */
static int cut_off(struct h_cluster_env *f, int slot, void (*cut)(void *), void *arg,
                   char *err, size_t errlen)
{
    int victim, replica;
    if (shard_of(f, slot, &victim, &replica, err, errlen) != 0)
        return -1;
    h_redis *standby = h_cluster_node(f->cluster, replica);
    cut_and_run(h_cluster_node(f->cluster, victim), standby, cut, arg);
    h_redis_resume(standby);
    return 0;
}

/* One failover of the master serving `slot`: its replica cut off (stopped, and its
 * link dropped by the master) while cut(arg) runs, so what the master acknowledges
 * meanwhile reaches no replica; then the master SIGKILLed (`freeze`: SIGSTOPped, so
 * its connections stay open and unanswered), the replica resumed and promoted,
 * then(arg) run when `then` is not NULL (the old master still down), the old master
 * restarted (resumed) until it is a synced replica of the new one. Returns 0 (*ms:
 * how long the promotion took after the kill), or -1 with the reason in err. */
static int failover_then(struct h_cluster_env *f, int slot, bool freeze,
                         void (*cut)(void *), void (*then)(void *), void *arg,
                         long long *ms, char *err, size_t errlen)
{
    struct rd_slot_map m;
    int victim, replica;
    if (shard_of(f, slot, &victim, &replica, err, errlen) != 0)
        return -1;
    h_redis *master = h_cluster_node(f->cluster, victim);
    h_redis *standby = h_cluster_node(f->cluster, replica);
    cut_and_run(master, standby, cut, arg);
    int st = freeze ? h_redis_pause(master) : h_redis_kill(master);
    long long killed = h_now_ms();
    h_redis_resume(standby);
    if (st == -1) {
        snprintf(err, errlen, "the master was not running");
        return -1;
    }

    /* The replica is promoted: the slot has a new master. */
    bool promoted = false;
    while (!promoted && h_now_ms() - killed < 30000) {
        h_sleep_ms(100);
        if (fetch_any(f, victim, &m) == 0) {
            const struct rd_node *n = rd_slot_map_master(&m, slot);
            promoted = n != NULL && n->port == h_cluster_port(f->cluster, replica);
            rd_slot_map_clear(&m);
        }
    }
    if (!promoted) {
        snprintf(err, errlen, "no failover within 30 s");
        return -1;
    }
    *ms = h_now_ms() - killed;
    if (then != NULL)
        then(arg);

    /* The old master comes back as a replica of the new one. */
    if ((freeze ? h_redis_resume(master) : h_redis_restart(master)) != 0) {
        snprintf(err, errlen, "the old master did not restart");
        return -1;
    }
    long long back = h_now_ms();
    while (!synced_replica(f, victim) && h_now_ms() - back < 30000)
        h_sleep_ms(100);
    if (!synced_replica(f, victim)) {
        snprintf(err, errlen, "the old master did not rejoin as a replica");
        return -1;
    }
    return 0;
}

static int failover(struct h_cluster_env *f, int slot, void (*cut)(void *), void *arg,
                    long long *ms, char *err, size_t errlen)
{
    return failover_then(f, slot, false, cut, NULL, arg, ms, err, errlen);
}

static void sleep_300(void *arg)
{
    (void)arg;
    h_sleep_ms(300);
}

/* The killer: r->error stays "" when all KILLS went as planned, else says what went
 * wrong (the client threads are stopped and joined before the test fails on it). */
static void kill_masters(struct run *r)
{
    for (int k = 0; k < KILLS; k++) {
        h_sleep_ms(700); /* orders flow on the healthy cluster first */
        char key[SEG_KEY_MAX], err[120];
        seg_key_stock(key, r->placed, k % 20); /* a different hot segment each time */
        if (failover(r->f, rd_key_slot(key, strlen(key)), sleep_300, NULL,
                     &r->failover_ms[k], err, sizeof err) != 0) {
            snprintf(r->error, sizeof r->error, "kill %d: %s", k, err);
            return;
        }
        r->kills++;
    }
}

static void load(struct run *r, int idx)
{
    for (int k = 0; !atomic_load(&r->stop); k++) {
        char id[48];
        snprintf(id, sizeof id, "%s-%d-%d", r->sku, idx, k);
        struct h_resp resp;
        int st = h_order(r->f->port, r->sku, 1, id, &resp);
        char code[64];
        h_error_code(&resp, code, sizeof code);
        h_resp_free(&resp);
        pthread_mutex_lock(&r->mu);
        if (st == 201 && r->acked < LEDGER_MAX)
            snprintf(r->ledger[r->acked++], sizeof r->ledger[0], "%s", id);
        else if (strcmp(code, "not_replicated") == 0)
            r->not_replicated++;
        else if (st != 201)
            r->failed++;
        pthread_mutex_unlock(&r->mu);
    }
}

struct client {
    pthread_t thread;
    struct run *r;
    int idx;
};

static void *client_main(void *arg)
{
    struct client *c = arg;
    load(c->r, c->idx);
    return NULL;
}

/* One run: returns how many ledger orders were lost. */
static int run_failovers(struct h_cluster_env *f, const char *sku, const char *durability)
{
    char path[128], body[160];
    snprintf(path, sizeof path, "/admin/skus/%s?reset=true", sku);
    snprintf(body, sizeof body,
             "{\"stock\": 1000000, \"segments\": 20, \"durability\": \"%s\"}",
             durability);
    struct h_resp resp;
    int st = h_req(f->port, "PUT", path, NULL, body, &resp);
    h_resp_free(&resp);
    assert_true(st == 200 || st == 201);

    struct run *r = calloc(1, sizeof *r);
    r->f = f;
    r->sku = sku;
    json_t *j = h_get_sku(f->port, NULL, sku);
    assert_non_null(j);
    snprintf(r->placed, sizeof r->placed, "%s",
             json_string_value(json_object_get(j, "placed_as")));
    json_decref(j);
    r->ledger = calloc(LEDGER_MAX, sizeof *r->ledger);
    assert_true(r->ledger != NULL);
    pthread_mutex_init(&r->mu, NULL);
    /* The killer is this thread: the harness ties each redis-server it starts to the
     * thread that started it (PR_SET_PDEATHSIG), so a restart from a thread that ends
     * would take the node down with it. */
    struct client clients[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        clients[i] = (struct client){.r = r, .idx = i + 1};
        assert_int_equal(
            pthread_create(&clients[i].thread, NULL, client_main, &clients[i]), 0);
    }
    kill_masters(r);
    atomic_store(&r->stop, true);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(clients[i].thread, NULL);
    if (r->error[0] != '\0')
        fail_msg("%s", r->error);

    fprintf(stderr, "%s: %d kills, %d acknowledged; reading them back\n", durability,
            r->kills, r->acked);
    /* Every acknowledged order, read back through the service. */
    int lost = 0;
    for (int i = 0; i < r->acked; i++) {
        int got = h_order_status(f->port, r->ledger[i]);
        for (int t = 0; got != 200 && got != 404 && t < 3; t++) { /* settle first */
            h_sleep_ms(100);
            got = h_order_status(f->port, r->ledger[i]);
        }
        if (got != 200) {
            if (lost < 5)
                fprintf(stderr, "%s: acknowledged order %s lost (GET %d)\n", durability,
                        r->ledger[i], got);
            if (lost == 0 && got != 404) {
                char where[96];
                snprintf(where, sizeof where, "/orders/%s", r->ledger[i]);
                struct h_resp g;
                h_req(f->port, "GET", where, NULL, NULL, &g);
                fprintf(stderr, "GET %s: %d %s\n", where, g.status, g.body);
                h_resp_free(&g);
                h_svc_dump_log(f->svc, 6000);
                for (int n = 0; n < h_cluster_size(f->cluster); n++) {
                    redisContext *rc = h_redis_connect(h_cluster_node(f->cluster, n));
                    redisReply *x = rc ? redisCommand(rc, "CLUSTER NODES") : NULL;
                    fprintf(stderr, "node %d (port %d): %s\n", n,
                            h_cluster_port(f->cluster, n),
                            x && x->type == REDIS_REPLY_STRING ? x->str : "no answer");
                    if (x)
                        freeReplyObject(x);
                    if (rc)
                        redisFree(rc);
                }
            }
            lost++;
        }
    }
    j = h_get_sku(f->port, NULL, sku);
    assert_non_null(j);
    long long sold = json_integer_value(json_object_get(j, "sold"));
    json_decref(j);
    fprintf(stderr,
            "failover %s: %d kills (failover %lld, %lld, %lld, %lld, %lld ms), %d "
            "acknowledged, %d lost, %d not_replicated, %d other failures, %lld sold\n",
            durability, r->kills, r->failover_ms[0], r->failover_ms[1], r->failover_ms[2],
            r->failover_ms[3], r->failover_ms[4], r->acked, lost, r->not_replicated,
            r->failed, sold);
    assert_int_equal(r->kills, KILLS);
    assert_true(r->acked > 0);
    assert_int_equal(h_audit(f->port, NULL, sku, 1000000, true), 0);
    pthread_mutex_destroy(&r->mu);
    free(r->ledger);
    free(r);
    return lost;
}

static void test_failover_replicated_loses_nothing(void **state)
{
    h_deadline(240);
    assert_int_equal(run_failovers(*state, "fo-repl", "replicated"), 0);
}

static void test_failover_async_counts_losses(void **state)
{
    h_deadline(240);
    int lost = run_failovers(*state, "fo-async", "async");
    fprintf(stderr, "async: %d acknowledged orders lost (reported, not judged)\n", lost);
}

struct cut_order {
    int port;
    const char *sku;
    long long qty;
    const char *id;
    pthread_t thread;
    int status;
    char code[64];
};

static void order_while_cut_off(void *arg)
{
    struct cut_order *x = arg;
    struct h_resp r;
    x->status = h_order(x->port, x->sku, x->qty, x->id, &r);
    h_error_code(&r, x->code, sizeof x->code);
    h_resp_free(&r);
}

static void *order_main(void *arg)
{
    order_while_cut_off(arg);
    return NULL;
}

/* The order was sent before the cut: it ends while the replica is cut off. */
static void order_joined(void *arg)
{
    struct cut_order *x = arg;
    pthread_join(x->thread, NULL);
}

/* A SKU of `stock` units in 2 segments (on two masters, m[0] and m[1]) with
 * durability replicated, and an id whose record lives on the third master: the
 * one the test fails over. */
struct retry_case {
    char placed[96];
    int m[2];
    char id[32];
    char rec[SEG_KEY_MAX];
};

static void retry_case_setup(struct h_cluster_env *f, const char *sku, int stock,
                             int hold_ms, struct retry_case *c)
{
    struct h_resp r;
    char body[160], path[96];
    snprintf(body, sizeof body,
             "{\"stock\": %d, \"segments\": 2, \"mode\": \"lock\", "
             "\"hold_ms\": %d, \"durability\": \"replicated\"}",
             stock, hold_ms);
    snprintf(path, sizeof path, "/admin/skus/%s?reset=true", sku);
    int st;
    long long until =
        h_now_ms() + 30000; /* 503 not_replicated while a failover settles */
    while ((st = h_req(f->port, "PUT", path, NULL, body, &r)) == 503 &&
           h_now_ms() < until) {
        h_resp_free(&r);
        h_sleep_ms(200);
    }
    h_resp_free(&r);
    assert_true(st == 200 || st == 201);
    json_t *j = h_get_sku(f->port, NULL, sku);
    assert_non_null(j);
    snprintf(c->placed, sizeof c->placed, "%s",
             json_string_value(json_object_get(j, "placed_as")));
    json_decref(j);
    for (int i = 0; i < 2; i++) {
        char seg[SEG_KEY_MAX];
        seg_key_stock(seg, c->placed, i);
        c->m[i] = h_cluster_master_of(f->cluster, seg);
    }
    assert_true(c->m[0] >= 0 && c->m[1] >= 0 && c->m[0] != c->m[1]); /* spread */
    for (int k = 0;; k++) {
        snprintf(c->id, sizeof c->id, "%s-%d", sku, k);
        seg_key_order(c->rec, c->id);
        int n = h_cluster_master_of(f->cluster, c->rec);
        if (n != c->m[0] && n != c->m[1])
            break;
    }
}

/* The id's master fails over while cut(x) runs, after which x must have answered
 * 503 not_replicated; then the retry on `second` must place the order once: 201,
 * a replay 200, GET 200, and `sold` units sold in all (the test's other orders
 * included), with the audit exact. */
static void retry_case_check(struct h_cluster_env *f, const struct retry_case *c,
                             h_svc *second, void (*cut)(void *), struct cut_order *x,
                             long long sold_after, int stock)
{
    long long ms;
    char err[120];
    if (failover(f, rd_key_slot(c->rec, strlen(c->rec)), cut, x, &ms, err, sizeof err) !=
        0)
        fail_msg("failover: %s", err);
    fprintf(stderr, "%s cut off: %d %s; failover %lld ms\n", x->sku, x->status, x->code,
            ms);
    assert_int_equal(x->status, 503);
    assert_string_equal(x->code, "not_replicated");

    int st;
    long long until = h_now_ms() + 30000;
    while ((st = h_order(h_svc_port(second), x->sku, x->qty, c->id, NULL)) == 503 &&
           h_now_ms() < until)
        h_sleep_ms(200);
    assert_int_equal(st, 201);
    assert_int_equal(h_order(h_svc_port(second), x->sku, x->qty, c->id, NULL), 200);
    assert_int_equal(h_order_status(f->port, c->id), 200);
    json_t *j = h_get_sku(f->port, NULL, x->sku);
    assert_non_null(j);
    long long sold = json_integer_value(json_object_get(j, "sold"));
    json_decref(j);
    assert_int_equal(h_svc_stop_clean(second), 0);
    h_svc_free(second);
    assert_int_equal(sold, sold_after); /* one id, one sale */
    assert_int_equal(h_audit(f->port, NULL, x->sku, stock, x->qty == 1), 0);
}

/* Durability "replicated", an order with a client's id whose id's master is cut off
 * from its replica and then fails over: the order answers 503 not_replicated, and
 * its retry places it once. The claim is WAITed for before anything is sold under
 * it: without that, the first attempt sold in one segment, its claim and record
 * were lost with the master, and the retry, finding neither, sold again in the
 * other segment (sold 2 for one id). hold_ms 1: an order asks a segment's stock
 * (ACQUIRE) before it deducts, so the retry never meets the first attempt's sale in
 * the emptied segment (a DEDUCT there would know its own id). */
static void test_replicated_retry_after_failover(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(120);
    struct retry_case c;
    retry_case_setup(f, "fo-claim", 2, 1, &c);
    /* One loop, so that the retry knows the first segment it sold from is empty. */
    const char *const one_loop[] = {"--threads", "1", NULL};
    h_svc *second = h_svc_start_args(h_cluster_node(f->cluster, c.m[0]), one_loop);
    assert_non_null(second);
    struct cut_order x = {
        .port = h_svc_port(second), .sku = "fo-claim", .qty = 1, .id = c.id};
    retry_case_check(f, &c, second, order_while_cut_off, &x, 1, 2);
}

/* The same for a multi-segment order, whose claim holds its plan: that claim is
 * WAITed for too. The order's first claim must be on the replica before the cut and
 * its plan go out during it, so the order first waits 2 s for a segment that could
 * fill it alone: stock 8 (4 + 4), an order of 2 leaves 2 in one segment and 4 in the
 * other; an order of 3 holds the 4 for 2 s (hold_ms 2000); the test's order of 3
 * finds it busy, waits, and then finds 1 and 2: a multi-segment order (1 + 2).
 * Without the WAIT the parts were sold, plan and record lost with the master, and
 * the retry, finding one part in a segment and taking it for the whole order,
 * answered 409 conflict (its record said fewer units). */
static void test_replicated_multi_retry_after_failover(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(120);
    struct retry_case c;
    retry_case_setup(f, "fo-plan", 8, 2000, &c);
    const char *const args[] = {"--threads", "1", "--lock-wait-ms", "8000", NULL};
    h_svc *second = h_svc_start_args(h_cluster_node(f->cluster, c.m[0]), args);
    assert_non_null(second);
    assert_int_equal(h_order(f->port, "fo-plan", 2, NULL, NULL), 201);
    struct cut_order holder = {.port = f->port, .sku = "fo-plan", .qty = 3};
    assert_int_equal(pthread_create(&holder.thread, NULL, order_main, &holder), 0);
    h_sleep_ms(300); /* it holds the 4 */
    struct cut_order x = {
        .port = h_svc_port(second), .sku = "fo-plan", .qty = 3, .id = c.id};
    assert_int_equal(pthread_create(&x.thread, NULL, order_main, &x), 0);
    h_sleep_ms(400); /* its first claim is on the replica */
    retry_case_check(f, &c, second, order_joined, &x, 8, 8);
    pthread_join(holder.thread, NULL);
    assert_int_equal(holder.status, 201);
}

/* Durability "replicated", an order with a client's id whose SEGMENT's master (not
 * the id's) is cut off from its replica and then fails over: the sale is lost with
 * it. The record, on the id's master, must not outlive it: the order answers 503
 * not_replicated and its retry sells afresh (201, sold 1). Before, the CONFIRM went
 * before any WAIT: the record survived the sale, the retry answered 200 from it and
 * the SKU showed the unit unsold (records 1, sold 0). */
/* A replicated order of `qty` on a SKU of `stock` in `segments` (qty over one
 * segment's stock: in parts), its id's record on another master than segment 0's,
 * placed while segment 0's replica is cut off and its master then failed over: it
 * answers 503 not_replicated, and its retry sells afresh (201), never replays a record
 * whose sale the failover lost. */
static void record_follows_sale(struct h_cluster_env *f, const char *sku, int stock,
                                int segments, int qty)
{
    struct h_resp r;
    int st;
    char path[96], body[160];
    snprintf(path, sizeof path, "/admin/skus/%s?reset=true", sku);
    snprintf(body, sizeof body,
             "{\"stock\": %d, \"segments\": %d, \"mode\": \"lock\", "
             "\"hold_ms\": 1, \"durability\": \"replicated\"}",
             stock, segments);
    long long until =
        h_now_ms() + 30000; /* 503 not_replicated while a failover settles */
    while ((st = h_req(f->port, "PUT", path, NULL, body, &r)) == 503 &&
           h_now_ms() < until) {
        h_resp_free(&r);
        h_sleep_ms(200);
    }
    h_resp_free(&r);
    assert_true(st == 200 || st == 201);
    json_t *j = h_get_sku(f->port, NULL, sku);
    assert_non_null(j);
    char placed[96], seg[SEG_KEY_MAX], rec[SEG_KEY_MAX], id[32];
    snprintf(placed, sizeof placed, "%s",
             json_string_value(json_object_get(j, "placed_as")));
    json_decref(j);
    seg_key_stock(seg, placed, 0);
    int m = h_cluster_master_of(f->cluster, seg);
    assert_true(m >= 0);
    for (int k = 0;; k++) { /* an id whose record is on another master */
        snprintf(id, sizeof id, "%s-%d", sku, k);
        seg_key_order(rec, id);
        if (h_cluster_master_of(f->cluster, rec) != m)
            break;
    }
    struct cut_order x = {.port = f->port, .sku = sku, .qty = qty, .id = id};
    long long ms;
    char err[120];
    if (failover(f, rd_key_slot(seg, strlen(seg)), order_while_cut_off, &x, &ms, err,
                 sizeof err) != 0)
        fail_msg("failover: %s", err);
    fprintf(stderr, "%s cut off: %d %s; failover %lld ms\n", sku, x.status, x.code, ms);
    assert_int_equal(x.status, 503);
    assert_string_equal(x.code, "not_replicated");

    until = h_now_ms() + 30000; /* 503 busy until the kept claim runs out */
    while ((st = h_order(f->port, sku, qty, id, NULL)) == 503 && h_now_ms() < until)
        h_sleep_ms(200);
    assert_int_equal(st, 201); /* the sale was lost: sold afresh, not replayed */
    assert_int_equal(h_order(f->port, sku, qty, id, NULL), 200);
    j = h_get_sku(f->port, NULL, sku);
    assert_non_null(j);
    long long sold = json_integer_value(json_object_get(j, "sold"));
    json_decref(j);
    assert_int_equal(sold, qty); /* the record's units are sold */
    assert_int_equal(h_audit(f->port, NULL, sku, stock, qty == 1), 0);
}

static void test_replicated_record_follows_sale(void **state)
{
    h_deadline(120);
    record_follows_sale(*state, "fo-rec", 2, 1, 1);
}

/* The same for an order in parts: its record waits for every part's replica. */
static void test_replicated_record_follows_parts(void **state)
{
    h_deadline(120);
    record_follows_sale(*state, "fo-recm", 4, 2, 3);
}

/* A request sent while a replica is cut off (body: JSON or NULL; key: its
 * Idempotency-Key or NULL), and what it answered. */
struct cut_req {
    int port;
    const char *method, *path, *body, *key;
    int status;
    char code[64];
};

static int send_req(const struct cut_req *x, struct h_resp *r)
{
    char headers[128];
    snprintf(headers, sizeof headers, "%s%s%s%s",
             x->body != NULL ? "Content-Type: application/json\r\n" : "",
             x->key != NULL ? "Idempotency-Key: " : "", x->key != NULL ? x->key : "",
             x->key != NULL ? "\r\n" : "");
    return h_http(x->port, x->method, x->path, headers, x->body,
                  x->body != NULL ? strlen(x->body) : 0, r);
}

static void req_while_cut_off(void *arg)
{
    struct cut_req *x = arg;
    struct h_resp r;
    x->status = send_req(x, &r);
    h_error_code(&r, x->code, sizeof x->code);
    h_resp_free(&r);
}

/* Send x's request again until it is not a 503 (the cluster settles), within 30 s:
 * the last status. */
static int retry_req(const struct cut_req *x, json_t **body)
{
    struct h_resp r;
    int st;
    long long until = h_now_ms() + 30000;
    while ((st = send_req(x, &r)) == 503 && h_now_ms() < until) {
        h_resp_free(&r);
        h_sleep_ms(200);
    }
    if (body != NULL)
        *body = st == 200 ? h_resp_json(&r) : NULL;
    h_resp_free(&r);
    return st;
}

/* Order `qty` of `sku` under `id`, again while it is 503 (right after a failover a
 * master may not yet stream to its rejoined replica, so WAIT finds none for a second),
 * within 30 s: placed (201, or 200 for the retry of one placed). */
static void order_placed(int port, const char *sku, const char *id)
{
    int st;
    long long until = h_now_ms() + 30000;
    while ((st = h_order(port, sku, 1, id, NULL)) == 503 && h_now_ms() < until)
        h_sleep_ms(200);
    assert_true(st == 201 || st == 200);
}

static long long sku_field(int port, const char *sku, const char *name)
{
    json_t *j = h_get_sku(port, NULL, sku);
    assert_non_null(j);
    long long v = json_integer_value(json_object_get(j, name));
    json_decref(j);
    return v;
}

/* Durability "replicated", a PUT (a reset) of a SKU while the replica of a master
 * holding some of its segments (not its meta) is cut off, and then that master fails
 * over. The PUT must not answer 200 for segments no replica has: 503 not_replicated
 * (or 200 with everything surviving), and its retry under the same request id ends
 * with the whole SKU: 600 units in 6 segments of 100, none sold, the audit exact.
 * Before, the PUT answered 200 without a WAIT, the failover took the victim's
 * segments back to the old sale (50 units each, their sales), and the retry
 * answered 200 (replayed) over that. */
static void test_replicated_reset_across_failover(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(120);
    const char *sku = "fo-reset";
    const struct cut_req create = {.port = f->port,
                                   .method = "PUT",
                                   .path = "/admin/skus/fo-reset",
                                   .body = "{\"stock\": 300, \"segments\": 6, "
                                           "\"durability\": \"replicated\"}",
                                   .key = "fo-reset-0"};
    assert_int_equal(retry_req(&create, NULL), 201);
    for (int k = 0; k < 3; k++) {
        char id[32];
        snprintf(id, sizeof id, "fo-reset-o%d", k);
        order_placed(f->port, sku, id);
    }
    json_t *j = h_get_sku(f->port, NULL, sku);
    assert_non_null(j);
    char placed[96], key[SEG_KEY_MAX];
    snprintf(placed, sizeof placed, "%s",
             json_string_value(json_object_get(j, "placed_as")));
    json_decref(j);
    int meta = h_cluster_master_of(f->cluster, seg_key_meta(key, sku));
    int victim = -1;
    for (int i = 0; i < 6 && victim < 0; i++)
        if (h_cluster_master_of(f->cluster, seg_key_stock(key, placed, i)) != meta)
            victim = i;
    assert_true(meta >= 0 && victim >= 0);
    seg_key_stock(key, placed, victim);

    struct cut_req x = {.port = f->port,
                        .method = "PUT",
                        .path = "/admin/skus/fo-reset?reset=true",
                        .body = "{\"stock\": 600, \"segments\": 6, \"durability\": "
                                "\"replicated\", \"request_id\": \"fo-reset-1\"}"};
    long long ms;
    char err[120];
    if (failover(f, rd_key_slot(key, strlen(key)), req_while_cut_off, &x, &ms, err,
                 sizeof err) != 0)
        fail_msg("failover: %s", err);
    fprintf(stderr, "PUT while cut off: %d %s; failover %lld ms\n", x.status, x.code, ms);
    if (x.status == 200) /* allowed only when everything survived */
        assert_int_equal(h_audit(f->port, NULL, sku, 600, true), 0);
    else
        assert_string_equal(x.code, "not_replicated");
    assert_int_equal(retry_req(&x, NULL), 200);
    assert_int_equal(h_audit(f->port, NULL, sku, 600, true), 0);
    assert_int_equal(sku_field(f->port, sku, "remaining"), 600);
    assert_int_equal(sku_field(f->port, sku, "sold"), 0);
    order_placed(f->port, sku, "fo-reset-o3");
    assert_int_equal(h_audit(f->port, NULL, sku, 600, true), 0);
}

/* Durability "replicated", a DELETE of a SKU while the replica of its meta's master
 * is cut off (no failover): 503 not_replicated, not 200; once the replica is back,
 * the SKU is whole and takes a restock, and the DELETE's retry under the same request
 * id answers 200 and the SKU is gone. Before, the DELETE answered 200 with nothing on
 * a replica. */
static void test_replicated_delete_waits(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(60);
    struct h_resp r;
    const struct cut_req create = {
        .port = f->port,
        .method = "PUT",
        .path = "/admin/skus/fo-del",
        .body = "{\"stock\": 30, \"segments\": 3, \"durability\": \"replicated\"}",
        .key = "fo-del-0"};
    assert_int_equal(retry_req(&create, NULL), 201);
    char key[SEG_KEY_MAX];
    seg_key_meta(key, "fo-del");
    struct cut_req x = {.port = f->port,
                        .method = "DELETE",
                        .path = "/admin/skus/fo-del",
                        .key = "fo-del-1"};
    char err[120];
    if (cut_off(f, rd_key_slot(key, strlen(key)), req_while_cut_off, &x, err,
                sizeof err) != 0)
        fail_msg("cut off: %s", err);
    fprintf(stderr, "DELETE while cut off: %d %s\n", x.status, x.code);
    assert_int_equal(x.status, 503);
    assert_string_equal(x.code, "not_replicated");
    /* It stopped before any segment, and took its pending mark away: the SKU is as
     * it was, and a restock is not held up behind a half reset (503 busy). */
    const struct cut_req restock = {.port = f->port,
                                    .method = "POST",
                                    .path = "/admin/skus/fo-del/restock",
                                    .body = "{\"qty\": 3, \"request_id\": \"fo-del-r\"}"};
    assert_int_equal(retry_req(&restock, NULL), 200);
    assert_int_equal(h_audit(f->port, NULL, "fo-del", 33, true), 0);
    assert_int_equal(retry_req(&x, NULL), 200);
    assert_int_equal(h_req(f->port, "GET", "/admin/skus/fo-del", NULL, NULL, &r), 404);
    h_resp_free(&r);
}

/* Durability "replicated", a cancel while the replica of the master of the order's
 * segment is cut off, and then that master fails over. The give-back must be on a
 * replica before the record is marked cancelled: the cancel answers 503
 * not_replicated, and its retry gives the unit back exactly once (sold 0, the audit
 * exact, a second retry changes nothing). Before, the record was marked while the
 * give-back was on the master alone; the failover lost the give-back and the retry
 * answered 200 from the cancelled record: sold 1, orders 1, that unit never sold
 * again. */
static void test_replicated_cancel_across_failover(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(120);
    struct retry_case c;
    retry_case_setup(f, "fo-cancel", 4, 0, &c);
    order_placed(f->port, "fo-cancel", c.id);
    char path[96], key[SEG_KEY_MAX];
    snprintf(path, sizeof path, "/orders/%s", c.id);
    struct h_resp r;
    assert_int_equal(h_req(f->port, "GET", path, NULL, NULL, &r), 200);
    json_t *o = h_resp_json(&r);
    h_resp_free(&r);
    json_t *segs = json_object_get(o, "segments");
    assert_int_equal(json_array_size(segs), 1);
    int seg =
        (int)json_integer_value(json_object_get(json_array_get(segs, 0), "segment"));
    json_decref(o);
    seg_key_stock(key, c.placed, seg);

    struct cut_req x = {.port = f->port, .method = "DELETE", .path = path};
    long long ms;
    char err[120];
    if (failover(f, rd_key_slot(key, strlen(key)), req_while_cut_off, &x, &ms, err,
                 sizeof err) != 0)
        fail_msg("failover: %s", err);
    fprintf(stderr, "cancel while cut off: %d %s; failover %lld ms\n", x.status, x.code,
            ms);
    assert_int_equal(x.status, 503);
    assert_string_equal(x.code, "not_replicated");
    for (int k = 0; k < 2; k++) { /* the retry, and once more: applied once */
        json_t *rec = NULL;
        assert_int_equal(retry_req(&x, &rec), 200);
        assert_string_equal(json_string_value(json_object_get(rec, "status")),
                            "cancelled");
        json_decref(rec);
        assert_int_equal(sku_field(f->port, "fo-cancel", "sold"), 0);
        assert_int_equal(sku_field(f->port, "fo-cancel", "orders"), 0);
        assert_int_equal(h_audit(f->port, NULL, "fo-cancel", 4, true), 0);
    }
}

/* ---- a replicated restock or rebalance across a failover ------------------------ */

struct cut_admin {
    int port; /* the instance that sends it */
    const char *sku;
    const char *op; /* "restock" (of qty) or "rebalance" */
    long long qty;
    const char *rid;
    int status;
    char code[64];
};

/* POST /admin/skus/{sku}/{op} under request id x->rid: status and error code in x. */
static void admin_once(struct cut_admin *x)
{
    char path[128], headers[128], body[64] = "";
    snprintf(path, sizeof path, "/admin/skus/%s/%s", x->sku, x->op);
    snprintf(headers, sizeof headers, "Idempotency-Key: %s\r\n%s", x->rid,
             x->qty > 0 ? "Content-Type: application/json\r\n" : "");
    if (x->qty > 0)
        snprintf(body, sizeof body, "{\"qty\": %lld}", x->qty);
    struct h_resp r;
    x->status = h_http(x->port, "POST", path, headers, x->qty > 0 ? body : NULL,
                       strlen(body), &r);
    h_error_code(&r, x->code, sizeof x->code);
    h_resp_free(&r);
}

static void admin_while_cut_off(void *arg)
{
    admin_once(arg);
}

/* A SKU of 60 units in 3 segments (one per master) with durability replicated; its
 * placed name into placed[0..96). */
static void replicated_sku(struct h_cluster_env *f, const char *sku, char *placed)
{
    char path[96];
    snprintf(path, sizeof path, "/admin/skus/%s?reset=true", sku);
    struct h_resp resp;
    int st =
        h_req(f->port, "PUT", path, NULL,
              "{\"stock\": 60, \"segments\": 3, \"durability\": \"replicated\"}", &resp);
    h_resp_free(&resp);
    assert_true(st == 200 || st == 201);
    json_t *j = h_get_sku(f->port, NULL, sku);
    assert_non_null(j);
    snprintf(placed, 96, "%s", json_string_value(json_object_get(j, "placed_as")));
    json_decref(j);
}

/* x (an admin write of x->sku, placed as `placed`) is sent while the master serving
 * `key` is cut off from its replica, and that master then fails over: x must answer
 * 503 not_replicated, and its retry under the same request id 200 (503 meanwhile), a
 * replay 200 too. Then the SKU must hold `initial` with `remaining` left, and selling
 * out sell exactly those. */
static void admin_across_failover(struct h_cluster_env *f, struct cut_admin *x,
                                  const char *placed, const char *key, long long initial,
                                  long long remaining)
{
    /* A fresh instance sends the write and its retries: an admin worker of the main one
     * may still route a slot to a node that an earlier test's failover made a replica,
     * perhaps the very one cut off here, and time out before its first step (503
     * backend_unavailable, seen once in five runs). Seeded with another master. */
    int victim = h_cluster_master_of(f->cluster, key), seed = -1;
    char other[SEG_KEY_MAX];
    for (int i = 0; i < 3 && (seed < 0 || seed == victim); i++)
        seed = h_cluster_master_of(f->cluster, seg_key_stock(other, placed, i));
    assert_true(seed >= 0 && seed != victim);
    h_svc *svc = h_svc_start(h_cluster_node(f->cluster, seed), NULL);
    assert_non_null(svc);
    x->port = h_svc_port(svc);

    long long ms;
    char err[120];
    if (failover(f, rd_key_slot(key, strlen(key)), admin_while_cut_off, x, &ms, err,
                 sizeof err) != 0)
        fail_msg("failover: %s", err);
    fprintf(stderr, "%s: %s cut off (%s): %d %s; failover %lld ms\n", x->sku, x->op, key,
            x->status, x->code, ms);
    if (strcmp(x->code, "not_replicated") != 0)
        h_svc_dump_log(svc, 4000);
    assert_int_equal(x->status, 503);
    assert_string_equal(x->code, "not_replicated");

    /* The first attempt stopped with nothing in flight and ended its lease: its
     * retry is never held up as busy (else it waited out the 15 s lease). */
    long long until = h_now_ms() + 30000, first = h_now_ms();
    int tries = 0, busy = 0;
    do {
        if (tries++ > 0)
            h_sleep_ms(200);
        admin_once(x);
        busy += x->status == 503 && strcmp(x->code, "busy") == 0;
    } while (x->status == 503 && h_now_ms() < until);
    fprintf(stderr, "%s: retry %d after %d tries (%d busy), %lld ms\n", x->sku, x->status,
            tries, busy, h_now_ms() - first);
    assert_int_equal(x->status, 200);
    assert_int_equal(busy, 0);
    json_t *j = h_get_sku(f->port, NULL, x->sku);
    assert_non_null(j);
    long long got_initial = h_jint(j, "initial"), got_remaining = h_jint(j, "remaining");
    json_decref(j);
    fprintf(stderr, "%s: after the retry initial %lld, remaining %lld\n", x->sku,
            got_initial, got_remaining);
    assert_int_equal(got_initial, initial);
    assert_int_equal(got_remaining, remaining);
    admin_once(x); /* a replay: nothing done again */
    assert_int_equal(x->status, 200);
    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
    assert_int_equal(h_audit(f->port, NULL, x->sku, initial, false), 0);

    /* Sell out: every unit the audit counts is sold once. (The automatic rebalance
     * runs as the segments empty: while its units are in transit an order may find
     * every segment empty and answer sold_out; go on while any stock is left.) */
    int sold = 0, early = 0;
    for (;;) {
        struct h_resp resp;
        int st = h_order(f->port, x->sku, 1, NULL, &resp);
        char code[64];
        h_error_code(&resp, code, sizeof code);
        h_resp_free(&resp);
        if (st == 409 && strcmp(code, "sold_out") == 0) {
            j = h_get_sku(f->port, NULL, x->sku);
            assert_non_null(j);
            long long left = h_jint(j, "remaining");
            json_decref(j);
            if (left == 0)
                break;
            assert_true(++early < 50);
            h_sleep_ms(100);
            continue;
        }
        assert_int_equal(st, 201);
        sold++;
        assert_true(sold <= 1000);
    }
    fprintf(stderr, "%s: sold %d (%d sold_out with stock left)\n", x->sku, sold, early);
    assert_int_equal(sold, remaining);
    assert_int_equal(h_audit(f->port, NULL, x->sku, initial, false), 0);
}

/* A restock of 60 (60 in stock) whose meta master fails over after its 503
 * not_replicated. Before, BEGIN and COMMIT ran on that master and WAIT only after
 * COMMIT: the gives on the other masters survived, intent, commit and request id did
 * not (initial 60, remaining 100), and the retry restocked again (initial 120,
 * remaining 160). */
static void test_replicated_restock_meta_failover(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(120);
    char placed[96], meta[SEG_KEY_MAX];
    replicated_sku(f, "fo-rs-meta", placed);
    struct cut_admin x = {.sku = "fo-rs-meta", .op = "restock", .qty = 60, .rid = "rs-m"};
    admin_across_failover(f, &x, placed, seg_key_meta(meta, x.sku), 120, 120);
}

/* The same restock, but the master of a segment (not the meta's) fails over. Before,
 * every give and the commit ran before the WAIT: the commit survived, that segment's
 * give did not, and the retry replayed the commit (initial 120, remaining 100). */
static void test_replicated_restock_segment_failover(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(120);
    char placed[96], meta[SEG_KEY_MAX], key[SEG_KEY_MAX];
    replicated_sku(f, "fo-rs-seg", placed);
    int m = h_cluster_master_of(f->cluster, seg_key_meta(meta, "fo-rs-seg")), i = 0;
    while (i < 3 && h_cluster_master_of(f->cluster, seg_key_stock(key, placed, i)) == m)
        i++;
    assert_true(i < 3);
    struct cut_admin x = {.sku = "fo-rs-seg", .op = "restock", .qty = 60, .rid = "rs-s"};
    admin_across_failover(f, &x, placed, key, 120, 120);
}

/* A rebalance after one segment was sold empty (20 + 20 + 0: it takes from the other
 * two and gives that one 13 or 14); the emptied segment's master fails over after the
 * 503 not_replicated. Before, takes, give and commit had all run: the give was lost
 * with the master (or, on the meta's master, give and commit), the takes were not, and
 * the retry replayed: 13 units gone (remaining 27, not 40, after 20 sold of 60). */
static void test_replicated_rebalance_failover(void **state)
{
    struct h_cluster_env *f = *state;
    h_deadline(120);
    char placed[96], key[SEG_KEY_MAX];
    replicated_sku(f, "fo-rb", placed);
    assert_int_equal(h_order(f->port, "fo-rb", 20, NULL, NULL), 201);
    json_t *j = h_get_sku(f->port, NULL, "fo-rb");
    assert_non_null(j);
    int empty = -1;
    for (int i = 0; i < 3; i++)
        if (json_integer_value(
                json_array_get(json_object_get(j, "segment_stock"), (size_t)i)) == 0)
            empty = i;
    json_decref(j);
    assert_true(empty >= 0);
    struct cut_admin x = {.sku = "fo-rb", .op = "rebalance", .rid = "rb"};
    admin_across_failover(f, &x, placed, seg_key_stock(key, placed, empty), 60, 40);
}

/* Reads right after a failover: orders with ids on every master, read many times
 * in parallel so that every worker of the service has used connections to every
 * master; then the master of some of them SIGKILLed (`freeze`: SIGSTOPped), and once
 * its replica is promoted and cluster-node-timeout + 2 s have passed since the kill,
 * every order read once, in parallel: all 200. Before, each worker's connection kept
 * a slot map of its own and learned the new master only by failing a read on the
 * old one: the first read there of each of the 4 control workers answered 503 (4 of
 * 90; on a frozen master each after its own 1 s timeout). */
#define READ_IDS 90
#define READERS 8

struct reads {
    struct h_cluster_env *f;
    char ids[READ_IDS][32];
    atomic_int next;
    int status[READ_IDS];
    long long killed_ms;
    long long read_from_ms, read_ms; /* the kill to the start and end of the reads */
};

static void *reader_main(void *arg)
{
    struct reads *x = arg;
    for (int i; (i = atomic_fetch_add(&x->next, 1)) < READ_IDS;)
        x->status[i] = h_order_status(x->f->port, x->ids[i]);
    return NULL;
}

/* Every id read once by READERS threads at a time. */
static void read_all(struct reads *x)
{
    atomic_store(&x->next, 0);
    pthread_t t[READERS];
    for (int i = 0; i < READERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, reader_main, x), 0);
    for (int i = 0; i < READERS; i++)
        pthread_join(t[i], NULL);
}

static void note_kill(void *arg)
{
    struct reads *x = arg;
    x->killed_ms = h_now_ms();
}

/* The promotion is seen: the reads (the old master still down), once the
 * cluster-node-timeout (1 s here) and 2 s have passed since the kill, and at least
 * 500 ms after the promotion (so every node has heard of it). */
static void read_after_promotion(void *arg)
{
    struct reads *x = arg;
    long long wait = x->killed_ms + 1000 + 2000 - h_now_ms();
    h_sleep_ms(wait > 500 ? (int)wait : 500);
    x->read_from_ms = h_now_ms() - x->killed_ms;
    read_all(x);
    x->read_ms = h_now_ms() - x->killed_ms;
}

static void reads_after_failover(struct h_cluster_env *f, const char *sku, bool freeze)
{
    struct reads *x = calloc(1, sizeof *x);
    assert_non_null(x);
    x->f = f;
    char path[96];
    snprintf(path, sizeof path, "/admin/skus/%s", sku);
    struct h_resp resp;
    int st = h_req(f->port, "PUT", path, NULL,
                   "{\"stock\": 1000, \"segments\": 6, \"durability\": \"replicated\"}",
                   &resp);
    h_resp_free(&resp);
    assert_true(st == 200 || st == 201);
    int per_node[16] = {0};
    for (int i = 0; i < READ_IDS; i++) {
        snprintf(x->ids[i], sizeof x->ids[i], "%s-%d", sku, i);
        assert_int_equal(h_order(f->port, sku, 1, x->ids[i], NULL), 201);
        char rec[SEG_KEY_MAX];
        seg_key_order(rec, x->ids[i]);
        int n = h_cluster_master_of(f->cluster, rec);
        assert_true(n >= 0 && n < 16);
        per_node[n]++;
    }
    int masters = 0;
    for (int n = 0; n < 16; n++)
        masters += per_node[n] > 0;
    assert_int_equal(masters, 3);             /* ids on every master */
    for (int round = 0; round < 4; round++) { /* every worker meets every master */
        read_all(x);
        for (int i = 0; i < READ_IDS; i++)
            assert_int_equal(x->status[i], 200);
    }

    char rec[SEG_KEY_MAX], err[120];
    seg_key_order(rec, x->ids[0]);
    long long ms;
    if (failover_then(f, rd_key_slot(rec, strlen(rec)), freeze, note_kill,
                      read_after_promotion, x, &ms, err, sizeof err) != 0)
        fail_msg("failover: %s", err);
    int unavailable = 0, first = -1;
    for (int i = 0; i < READ_IDS; i++)
        if (x->status[i] != 200 && unavailable++ == 0)
            first = i;
    fprintf(stderr,
            "reads after %s: promotion %lld ms after it, %d reads from %lld to %lld ms "
            "after it, %d not 200%s%s\n",
            freeze ? "a freeze" : "a kill", ms, READ_IDS, x->read_from_ms, x->read_ms,
            unavailable, first >= 0 ? ", first: " : "", first >= 0 ? x->ids[first] : "");
    assert_int_equal(first >= 0 ? x->status[first] : 200, 200);
    free(x);
}

static void test_reads_after_failover(void **state)
{
    h_deadline(120);
    reads_after_failover(*state, "fo-read", false);
}

/* The same with the master frozen, not dead: its connections stay open and a command
 * on one waits for its timeout. */
static void test_reads_after_freeze(void **state)
{
    h_deadline(120);
    reads_after_failover(*state, "fo-frozen", true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_after_failover),
        cmocka_unit_test(test_reads_after_freeze),
        cmocka_unit_test(test_failover_replicated_loses_nothing),
        cmocka_unit_test(test_failover_async_counts_losses),
        cmocka_unit_test(test_replicated_retry_after_failover),
        /* Right after a failover the service's loop made no call about: its next
         * order must route by the process's newer map (async_conn.c
         * follow_process_map), not to the old master, frozen here as the new one's
         * replica (before: 503 backend_unavailable, "no reply within 1000 ms"). */
        cmocka_unit_test(test_replicated_record_follows_sale),
        cmocka_unit_test(test_replicated_multi_retry_after_failover),
        cmocka_unit_test(test_replicated_record_follows_parts),
        cmocka_unit_test(test_replicated_reset_across_failover),
        cmocka_unit_test(test_replicated_delete_waits),
        cmocka_unit_test(test_replicated_cancel_across_failover),
        cmocka_unit_test(test_replicated_restock_meta_failover),
        cmocka_unit_test(test_replicated_restock_segment_failover),
        cmocka_unit_test(test_replicated_rebalance_failover),
    };
    cmocka_set_test_filter(getenv("IT_CASE")); /* IT_CASE=test_x: that one alone */
    int failed = cmocka_run_group_tests_name(
        "cluster_failover", tests, h_cluster_group_setup, h_cluster_group_teardown);
    return h_exit_status(failed);
}
