/* it_cluster_route.c -- the asynchronous seam routing calls over a real Redis Cluster
 * (3 masters with a replica each, started by the harness): each call reaches the
 * master of its key's slot; a slot moved to another master is followed on MOVED, a
 * slot in migration on ASK; after its master is killed, calls reach the promoted
 * replica once the cluster has failed over, without a new handle.
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

#include "segments/redis/async.h"
#include "segments/redis/keys.h"
#include "segments/redis/proto.h"
#include "segments/redis/slots.h"
#include "segments/redis/store.h"
#include "tests/harness.h"

#define MASTERS 3
#define REPLICAS 1

struct fixture {
    h_cluster *cluster;
    struct event_base *base;
    rda_conn *rd;
};

static int group_setup(void **state)
{
    h_deadline(90);
    struct fixture *f = calloc(1, sizeof *f);
    *state = f;
    f->cluster = h_cluster_start(MASTERS, REPLICAS);
    f->base = event_base_new();
    if (f->cluster == NULL || f->base == NULL)
        return -1;
    const struct rd_target seed = {.host = "127.0.0.1",
                                   .port = h_cluster_port(f->cluster, 0),
                                   .timeout_ms = 1000,
                                   .cluster = true};
    f->rd = rda_create(f->base, &seed, NULL);
    return 0;
}

static int group_teardown(void **state)
{
    struct fixture *f = *state;
    rda_free(f->rd);
    if (f->base != NULL)
        event_base_free(f->base);
    h_cluster_free(f->cluster);
    free(f);
    return 0;
}

/* The map as node i of the cluster sees it. */
static void fetch(struct fixture *f, int i, struct rd_slot_map *m)
{
    const struct rd_target seed = {
        .host = "127.0.0.1", .port = h_cluster_port(f->cluster, i), .timeout_ms = 2000};
    char err[256];
    if (rd_slot_map_fetch(&seed, m, err, sizeof err) != 0)
        fail_msg("rd_slot_map_fetch from node %d: %s", i, err);
}

/* A reply to a command on a fresh connection to `port` (caller frees). */
static redisReply *command(int port, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = h_port_vcommand(port, fmt, ap);
    va_end(ap);
    if (r == NULL)
        fail_msg("no reply from port %d", port);
    return r;
}

static void expect_status(int port, const char *fmt, int slot, const char *id)
{
    redisReply *r = command(port, fmt, slot, id);
    if (r->type != REDIS_REPLY_STATUS)
        fail_msg("port %d: %s", port, r->type == REDIS_REPLY_ERROR ? r->str : "?");
    freeReplyObject(r);
}

/* What a call's callback saw. */
struct seen {
    int done, rc, value;
};

static void on_int(void *arg, int rc, int value)
{
    struct seen *s = arg;
    s->done = 1;
    s->rc = rc;
    s->value = value;
}

/* Turn the loop until the call is answered (or 10 s pass). */
static struct seen wait_for(struct fixture *f, struct seen *s)
{
    long long end = h_now_ms() + 10000;
    while (!s->done && h_now_ms() < end)
        event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    if (!s->done)
        fail_msg("no answer within 10 s");
    return *s;
}

static struct seen lock(struct fixture *f, const char *sku, int seg, const char *token)
{
    struct seen s = {0};
    rda_lock(f->rd, sku, seg, token, 60000, on_int, &s);
    return wait_for(f, &s);
}

static struct seen release(struct fixture *f, const char *sku, int seg, const char *token)
{
    struct seen s = {0};
    rda_release(f->rd, sku, seg, token, on_int, &s);
    return wait_for(f, &s);
}

static struct seen renew(struct fixture *f, const char *sku, int seg, const char *token)
{
    struct seen s = {0};
    rda_renew(f->rd, sku, seg, token, 60000, on_int, &s);
    return wait_for(f, &s);
}

/* The value of `key` on the node at `port` ("" when it has none, or not that slot). */
static void value_on(int port, const char *key, char *buf, size_t len)
{
    redisReply *r = command(port, "GET %s", key);
    snprintf(buf, len, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
}

/* Each segment's lock (a plain SET) and its renewal and release (scripts) land on the
 * master that owns the lock key's slot, over all three masters. */
static void test_calls_reach_the_slot_master(void **state)
{
    struct fixture *f = *state;
    h_deadline(60);
    struct rd_slot_map m;
    fetch(f, 0, &m);
    int per_master[MASTERS] = {0};
    for (int seg = 0; seg < 60; seg++) {
        char key[SEG_KEY_MAX], got[64];
        seg_key_lock(key, "route", seg);
        const struct rd_node *owner =
            rd_slot_map_master(&m, rd_key_slot(key, strlen(key)));
        assert_non_null(owner);
        per_master[m.slot[rd_key_slot(key, strlen(key))]]++;

        struct seen s = lock(f, "route", seg, "tok-route");
        assert_int_equal(s.rc, 0);
        assert_int_equal(s.value, 1);
        value_on(owner->port, key, got, sizeof got);
        assert_string_equal(got, "tok-route");
        s = renew(f, "route", seg, "tok-route");
        assert_int_equal(s.rc, 0);
        assert_int_equal(s.value, 1);
        s = release(f, "route", seg, "tok-route");
        assert_int_equal(s.rc, 0);
        assert_int_equal(s.value, 1);
        value_on(owner->port, key, got, sizeof got);
        assert_string_equal(got, "");
    }
    for (int i = 0; i < MASTERS; i++)
        assert_true(per_master[i] > 0);
    struct rda_stats st;
    rda_stats(f->rd, &st);
    assert_int_equal(st.links, MASTERS);
    assert_true(st.map_refreshes >= 1);
    rd_slot_map_clear(&m);
}

/* A blocking call (store.h: the router above, waited for): segment i's lock taken
 * (1), renewed or released (1 done, 0 not ours), or -1. */
static int blocking_lock(rd_conn *rd, const char *sku, int i, const char *token, int ttl)
{
    struct rd_cmd cmd;
    proto_lock(&cmd, sku, i, token, ttl);
    redisReply *r = store_call(rd, &cmd);
    int taken = 0;
    int rc = r != NULL ? proto_taken(r, token, &taken) : -1;
    if (r != NULL)
        freeReplyObject(r);
    return rc < 0 ? -1 : taken;
}

static int blocking_done(rd_conn *rd, struct rd_cmd *cmd)
{
    redisReply *r = store_call(rd, cmd);
    int done = 0;
    int rc = r != NULL ? proto_done(r, &done) : -1;
    if (r != NULL)
        freeReplyObject(r);
    return rc < 0 ? -1 : done;
}

static int blocking_renew(rd_conn *rd, const char *sku, int i, const char *token, int ttl)
{
    struct rd_cmd cmd;
    proto_renew(&cmd, sku, i, token, ttl);
    return blocking_done(rd, &cmd);
}

static int blocking_release(rd_conn *rd, const char *sku, int i, const char *token)
{
    struct rd_cmd cmd;
    proto_release(&cmd, sku, i, token);
    return blocking_done(rd, &cmd);
}

/* The blocking seam (store.h) routes the same way: each segment's lock, renewal and
 * release on its slot's master, over all three. */
static void test_blocking_calls_route(void **state)
{
    struct fixture *f = *state;
    h_deadline(60);
    struct rd_slot_map m;
    fetch(f, 0, &m);
    const struct rd_target seed = {.host = "127.0.0.1",
                                   .port = h_cluster_port(f->cluster, 1),
                                   .timeout_ms = 1000,
                                   .cluster = true};
    rd_conn *rd = rd_conn_create(&seed, NULL);
    for (int seg = 0; seg < 60; seg++) {
        char key[SEG_KEY_MAX], got[64];
        seg_key_lock(key, "blocking", seg);
        const struct rd_node *owner =
            rd_slot_map_master(&m, rd_key_slot(key, strlen(key)));
        assert_int_equal(blocking_lock(rd, "blocking", seg, "tok-b", 60000), 1);
        value_on(owner->port, key, got, sizeof got);
        assert_string_equal(got, "tok-b");
        assert_int_equal(blocking_renew(rd, "blocking", seg, "tok-b", 60000), 1);
    }
    for (int seg = 0; seg < 60; seg++) {
        char key[SEG_KEY_MAX], got[64];
        seg_key_lock(key, "blocking", seg);
        const struct rd_node *owner =
            rd_slot_map_master(&m, rd_key_slot(key, strlen(key)));
        assert_int_equal(blocking_release(rd, "blocking", seg, "tok-b"), 1);
        value_on(owner->port, key, got, sizeof got);
        assert_string_equal(got, ""); /* gone from its master */
    }
    rd_conn_free(rd);
    rd_slot_map_clear(&m);
}

/* The slot of a segment's lock key, its master (a) and another master (b). */
struct move {
    char key[SEG_KEY_MAX];
    int slot;
    const struct rd_node *a, *b;
};

static void pick(struct rd_slot_map *m, const char *sku, int seg, struct move *mv)
{
    seg_key_lock(mv->key, sku, seg);
    mv->slot = rd_key_slot(mv->key, strlen(mv->key));
    int a = m->slot[mv->slot];
    assert_true(a >= 0);
    mv->a = &m->masters[a].master;
    mv->b = &m->masters[(a + 1) % m->nmasters].master;
}

/* Give the slot to b on every master (its keys are gone from a already). */
static void assign(struct rd_slot_map *m, const struct move *mv)
{
    for (int i = 0; i < m->nmasters; i++)
        expect_status(m->masters[i].master.port, "CLUSTER SETSLOT %d NODE %s", mv->slot,
                      mv->b->id);
}

/* A slot handed to another master behind the handle's back: the old master answers
 * MOVED, the call follows it there and the route is learnt. */
static void test_moved_when_a_slot_moved(void **state)
{
    struct fixture *f = *state;
    h_deadline(60);
    struct rd_slot_map m;
    fetch(f, 0, &m);
    struct move mv;
    pick(&m, "moved", 0, &mv);
    assert_int_equal(lock(f, "moved", 0, "t1").value, 1); /* the route to a is known */
    assert_int_equal(release(f, "moved", 0, "t1").value, 1);

    expect_status(mv.b->port, "CLUSTER SETSLOT %d IMPORTING %s", mv.slot, mv.a->id);
    expect_status(mv.a->port, "CLUSTER SETSLOT %d MIGRATING %s", mv.slot, mv.b->id);
    assign(&m, &mv);

    struct rda_stats before, after;
    rda_stats(f->rd, &before);
    struct seen s = lock(f, "moved", 0, "t2");
    assert_int_equal(s.rc, 0);
    assert_int_equal(s.value, 1);
    char got[64];
    value_on(mv.b->port, mv.key, got, sizeof got);
    assert_string_equal(got, "t2");
    rda_stats(f->rd, &after);
    assert_true(after.moved >= before.moved + 1);
    /* Learnt: the next call goes straight to b. */
    rda_stats(f->rd, &before);
    assert_int_equal(release(f, "moved", 0, "t2").value, 1);
    rda_stats(f->rd, &after);
    assert_int_equal(after.moved, before.moved);

    /* A blocking connection whose map predates the move follows MOVED too. */
    const struct rd_target seed = {.host = "127.0.0.1",
                                   .port = h_cluster_port(f->cluster, 0),
                                   .timeout_ms = 1000,
                                   .cluster = true};
    rd_conn *rd = rd_conn_create(&seed, NULL);
    assert_int_equal(blocking_lock(rd, "moved", 1, "warm", 1000),
                     1); /* fetches the map */
    expect_status(mv.a->port, "CLUSTER SETSLOT %d IMPORTING %s", mv.slot, mv.b->id);
    expect_status(mv.b->port, "CLUSTER SETSLOT %d MIGRATING %s", mv.slot, mv.a->id);
    for (int i = 0; i < m.nmasters; i++)
        expect_status(m.masters[i].master.port, "CLUSTER SETSLOT %d NODE %s", mv.slot,
                      mv.a->id);
    assert_int_equal(blocking_lock(rd, "moved", 0, "t3", 60000),
                     1); /* b's map: MOVED to a */
    value_on(mv.a->port, mv.key, got, sizeof got);
    assert_string_equal(got, "t3");
    assert_int_equal(blocking_release(rd, "moved", 0, "t3"), 1);
    rd_conn_free(rd);
    rd_slot_map_clear(&m);
}

/* A slot in migration from a to b whose key already left a: a answers ASK, the call
 * goes to b after ASKING, and the map stays as it was. */
static void test_ask_during_migration(void **state)
{
    struct fixture *f = *state;
    h_deadline(60);
    struct rd_slot_map m;
    fetch(f, 0, &m);
    struct move mv;
    pick(&m, "asked", 0, &mv);
    assert_int_equal(lock(f, "asked", 0, "t1").value, 1);
    assert_int_equal(release(f, "asked", 0, "t1").value, 1); /* no key left on a */

    expect_status(mv.b->port, "CLUSTER SETSLOT %d IMPORTING %s", mv.slot, mv.a->id);
    expect_status(mv.a->port, "CLUSTER SETSLOT %d MIGRATING %s", mv.slot, mv.b->id);
    struct rda_stats before, after;
    rda_stats(f->rd, &before);
    struct seen s = lock(f, "asked", 0, "t2");
    assert_int_equal(s.rc, 0);
    assert_int_equal(s.value, 1);
    char got[64];
    value_on(mv.a->port, mv.key, got, sizeof got); /* a redirects: nothing there */
    assert_string_equal(got, "");
    rda_stats(f->rd, &after);
    assert_true(after.asked >= before.asked + 1);
    assert_int_equal(after.moved, before.moved);

    /* Finish the migration: the key is b's, and so is the slot. */
    assign(&m, &mv);
    value_on(mv.b->port, mv.key, got, sizeof got);
    assert_string_equal(got, "t2");
    assert_int_equal(release(f, "asked", 0, "t2").value, 1);
    rd_slot_map_clear(&m);
}

/* A blocking call made right after the kill (struct blocked_call): its command cannot
 * reach the dead master, so it never goes out, and the router sends it again by the
 * newest map until that names the promoted replica (async.h rda_raw_blocking). */
struct blocked_call {
    rd_conn *rd;
    const char *sku;
    int seg;
    int taken;      /* blocking_lock's answer */
    long long took; /* ms */
};

static void *blocked_call_main(void *arg)
{
    struct blocked_call *b = arg;
    long long start = h_now_ms();
    b->taken = blocking_lock(b->rd, b->sku, b->seg, "tb", 60000);
    b->took = h_now_ms() - start;
    return NULL;
}

/* The master of a segment's slot is killed: calls fail while the cluster notices,
 * then reach the promoted replica (the map refreshed after the connection errors),
 * on the same handle. A blocking call made meanwhile (its timeout longer than the
 * failover) waits for the promotion instead of failing. */
static void test_failover_reroutes(void **state)
{
    struct fixture *f = *state;
    h_deadline(90);
    struct rd_slot_map m;
    fetch(f, 0, &m);
    char key[SEG_KEY_MAX];
    int seg = 0, victim = -1;
    /* A segment whose master is not node 0 (the seed stays up). */
    for (; victim < 0; seg++) {
        seg_key_lock(key, "failover", seg);
        const struct rd_node *n = rd_slot_map_master(&m, rd_key_slot(key, strlen(key)));
        for (int i = 1; i < h_cluster_size(f->cluster); i++)
            if (h_cluster_port(f->cluster, i) == n->port)
                victim = i;
    }
    seg--;
    assert_int_equal(lock(f, "failover", seg, "t0").value, 1);
    assert_int_equal(release(f, "failover", seg, "t0").value, 1);
    const struct rd_target seed = {.host = "127.0.0.1",
                                   .port = h_cluster_port(f->cluster, 0),
                                   .timeout_ms = 20000,
                                   .cluster = true};
    /* Its own lock (of another SKU) on the same master, so as not to hold the one the
     * calls below take. */
    struct blocked_call b = {.rd = rd_conn_create(&seed, NULL), .sku = "failover-b"};
    for (;; b.seg++) {
        char other[SEG_KEY_MAX];
        seg_key_lock(other, b.sku, b.seg);
        if (rd_slot_map_master(&m, rd_key_slot(other, strlen(other)))->port ==
            h_cluster_port(f->cluster, victim))
            break;
    }
    assert_int_equal(blocking_lock(b.rd, b.sku, b.seg, "tb", 60000), 1); /* routed */
    assert_int_equal(blocking_release(b.rd, b.sku, b.seg, "tb"), 1);

    assert_int_not_equal(h_redis_kill(h_cluster_node(f->cluster, victim)), -1);
    long long killed = h_now_ms(), back = 0;
    pthread_t blocked;
    assert_int_equal(pthread_create(&blocked, NULL, blocked_call_main, &b), 0);
    int failed = 0;
    for (int i = 0; back == 0 && h_now_ms() - killed < 30000; i++) {
        char token[32];
        snprintf(token, sizeof token, "t%d", i + 1);
        struct seen s = lock(f, "failover", seg, token);
        if (s.rc == 0 && s.value == 1) {
            back = h_now_ms();
            assert_int_equal(release(f, "failover", seg, token).value, 1);
        } else {
            failed++;
            h_sleep_ms(100);
        }
    }
    if (back == 0)
        fail_msg("no call succeeded within 30 s of the kill (%d failed)", failed);
    fprintf(stderr, "failover: calls succeed again %lld ms after the kill (%d failed)\n",
            back - killed, failed);
    pthread_join(blocked, NULL);
    fprintf(stderr, "failover: the blocking call answered %d after %lld ms (%s)\n",
            b.taken, b.took, rd_conn_error(b.rd));
    assert_int_equal(b.taken, 1); /* on the promoted replica, not -1 at the kill */
    assert_int_equal(blocking_release(b.rd, b.sku, b.seg, "tb"), 1);
    rd_conn_free(b.rd);
    struct rd_slot_map now;
    fetch(f, 0, &now);
    const struct rd_node *n = rd_slot_map_master(&now, rd_key_slot(key, strlen(key)));
    assert_int_not_equal(n->port, h_cluster_port(f->cluster, victim));
    rd_slot_map_clear(&now);
    rd_slot_map_clear(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calls_reach_the_slot_master),
        cmocka_unit_test(test_blocking_calls_route),
        cmocka_unit_test(test_moved_when_a_slot_moved),
        cmocka_unit_test(test_ask_during_migration),
        cmocka_unit_test(test_failover_reroutes),
    };
    int failed =
        cmocka_run_group_tests_name("cluster_route", tests, group_setup, group_teardown);
    return h_exit_status(failed);
}
