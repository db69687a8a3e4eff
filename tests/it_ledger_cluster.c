/* it_ledger_cluster.c -- the order ledger (segments/ledger.h) on a 3+3 Redis Cluster
 * with a real PostgreSQL 15 (the standalone cases: it_ledger.c): SKUs whose whole life
 * falls between two of the sink's readings of the registry still drained (the
 * registries are per slot, found through inv:ledger:slots); the segments forget orders
 * past record_retention_s (1 s here) and a cancel after gives back once; then a master
 * dies with sales its replica never had, and the ledger (the sink WAITs before it copies)
 * has none of them (without the WAIT: `0x17 != 0x14`, 23 sales in the ledger, 20 in
 * Redis). About 12 s.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "tests/harness.h"
#include "tests/harness_ledger.h"
#include "tests/harness_pg.h"

struct cenv {
    h_cluster *cluster;
    h_pg *pg;
    h_svc *svc;
};

static int cluster_setup(void **state)
{
    struct cenv *e = calloc(1, sizeof *e);
    e->cluster = h_cluster_start(3, 1);
    e->pg = e->cluster ? h_pg_start() : NULL;
    if (e->pg != NULL) {
        const char *args[] = {"--ledger", h_pg_conninfo(e->pg), "--record-retention-s",
                              "1", NULL};
        e->svc = h_svc_start_args(h_cluster_node(e->cluster, 0), args);
    }
    if (e->svc == NULL) {
        h_pg_free(e->pg);
        h_cluster_free(e->cluster);
        free(e);
        return -1;
    }
    *state = e;
    return 0;
}

static int cluster_teardown(void **state)
{
    struct cenv *e = *state;
    int rc = h_svc_stop_clean(e->svc);
    h_svc_free(e->svc);
    h_pg_free(e->pg);
    h_cluster_free(e->cluster);
    free(e);
    return rc;
}

/* The node index of the replica of node `master` (ROLE), or -1. */
static int replica_of(struct cenv *e, int master)
{
    for (int i = 0; i < h_cluster_size(e->cluster); i++) {
        redisReply *x = h_port_command(h_cluster_port(e->cluster, i), "ROLE");
        bool mine = x != NULL && x->type == REDIS_REPLY_ARRAY && x->elements >= 3 &&
                    strcmp(x->element[0]->str, "slave") == 0 &&
                    x->element[2]->integer == h_cluster_port(e->cluster, master);
        freeReplyObject(x);
        if (mine)
            return i;
    }
    return -1;
}

static long long ledger_sold(struct cenv *e, const char *sku)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT sold FROM ledger.movements WHERE sku = '%s'", sku);
    return h_pg_scalar(e->pg, sql);
}

/* Sales the segment's master acknowledged while its replica was cut off are not
 * copied (the sink WAITs for a replica first); the master dies, its replica takes
 * over without them, and the ledger holds exactly what Redis kept: drift 0. */
static void test_failover_copies_only_replicated(void **state)
{
    struct cenv *e = *state;
    int port = h_svc_port(e->svc);
    struct h_resp r;
    assert_int_equal(
        h_req(port, "PUT", "/admin/skus/lc", NULL,
              "{\"stock\": 1000, \"segments\": 1, \"durability\": \"replicated\"}", &r),
        201);
    h_resp_free(&r);
    json_t *j = h_get_sku(port, NULL, "lc");
    char key[160];
    snprintf(key, sizeof key, "inv:{%s:0}:stock",
             json_string_value(json_object_get(j, "placed_as")));
    json_decref(j);
    char id[64];
    for (int i = 0; i < 20; i++) {
        snprintf(id, sizeof id, "lc-o%d", i);
        h_order_ok(port, "lc", id);
    }
    assert_int_equal(h_wait_drift(port, "lc", 10000), 0);
    assert_int_equal(ledger_sold(e, "lc"), 20);

    int master = h_cluster_master_of(e->cluster, key);
    assert_true(master >= 0);
    int replica = replica_of(e, master);
    assert_true(replica >= 0);
    h_redis *standby = h_cluster_node(e->cluster, replica);
    assert_int_equal(h_redis_pause(standby), 0);
    redisReply *x =
        h_port_command(h_cluster_port(e->cluster, master), "CLIENT KILL TYPE replica");
    freeReplyObject(x);
    int unreplicated = 0;
    for (int i = 20; i < 25; i++) {
        snprintf(id, sizeof id, "lc-o%d", i);
        unreplicated += h_order(port, "lc", 1, id, NULL) == 503;
    }
    assert_int_equal(unreplicated, 5); /* applied on the master, on no replica */
    h_sleep_ms(1500);                  /* the sink has read them by now */
    assert_int_equal(ledger_sold(e, "lc"), 20);

    assert_true(h_redis_kill(h_cluster_node(e->cluster, master)) != -1);
    assert_int_equal(h_redis_resume(standby), 0);
    long long until = h_now_ms() + 30000;
    while (h_cluster_master_of(e->cluster, key) != replica && h_now_ms() < until)
        h_sleep_ms(100);
    assert_int_equal(h_cluster_master_of(e->cluster, key), replica);
    assert_int_equal(h_wait_drift(port, "lc", 20000),
                     0); /* Redis lost the 5: so has the ledger */
    assert_int_equal(ledger_sold(e, "lc"), 20);
    j = h_get_sku(port, NULL, "lc");
    assert_int_equal(h_jint(j, "sold"), 20);
    json_decref(j);
}

/* The fields the segments of `sku` hold per order (orders and parts hashes,
 * cancelled sets), summed over the cluster's masters; -1 when one does not
 * answer. */
static long long cluster_fields(struct cenv *e, const char *sku)
{
    json_t *view = h_get_sku(h_svc_port(e->svc), NULL, sku);
    const char *placed = json_string_value(json_object_get(view, "placed_as"));
    if (placed == NULL) {
        json_decref(view);
        return -1;
    }
    long long n = 0;
    for (int i = 0; i < h_cluster_size(e->cluster) && n >= 0; i++) {
        int p = h_cluster_port(e->cluster, i);
        redisReply *role = h_port_command(p, "ROLE");
        bool master = role != NULL && role->type == REDIS_REPLY_ARRAY &&
                      strcmp(role->element[0]->str, "master") == 0;
        freeReplyObject(role);
        if (!master)
            continue; /* a replica answers MOVED */
        long long f = h_ledger_fields(p, placed);
        n = f < 0 ? -1 : n + f;
    }
    json_decref(view);
    return n;
}

/* Issue 24 on a cluster: once the ledger has an order and record_retention_s passed,
 * the segments forget it (orders and parts hashes, cancelled sets), as on one Redis;
 * a cancel after that gives the units back once, from the record, however often it
 * is asked, and the record RESTORE wrote back for it expires again. Before, a cluster
 * kept every field for good: `0x15 != 0`. */
static void test_retention_forgets_fields_cluster(void **state)
{
    struct cenv *e = *state;
    int port = h_svc_port(e->svc); /* record_retention_s 1 */
    assert_int_equal(h_put_sku(port, NULL, "lr", 1000, 2, "lock", 0), 0);
    assert_int_equal(h_put_sku(port, NULL, "lm", 4, 2, "lock", 0), 0);
    char id[32];
    for (int i = 0; i < 20; i++) {
        snprintf(id, sizeof id, "lr-o%d", i);
        h_order_ok(port, "lr", id);
    }
    assert_int_equal(h_order(port, "lr", 3, "lr-three", NULL), 201);
    assert_int_equal(h_order(port, "lm", 3, "lm-split", NULL),
                     201); /* 2 a segment: parts */
    struct h_resp r;
    assert_int_equal(h_req(port, "DELETE", "/orders/lr-o0", NULL, NULL, &r), 200);
    h_resp_free(&r);
    long long fields = -1, split = -1;
    for (int waited = 0; waited < 15000 && (fields != 0 || split != 0); waited += 200) {
        fields = cluster_fields(e, "lr");
        split = cluster_fields(e, "lm");
        h_sleep_ms(200);
    }
    assert_int_equal(fields, 0);
    assert_int_equal(split, 0);
    const char *ids[] = {"lr-three", "lm-split"};
    const char *skus[] = {"lr", "lm"};
    const long long left[] = {1000 - 19, 4};
    for (int o = 0; o < 2; o++)
        for (int twice = 0; twice < 2; twice++) { /* given back once, whoever asks */
            char path[64];
            snprintf(path, sizeof path, "/orders/%s", ids[o]);
            assert_int_equal(h_req(port, "DELETE", path, NULL, NULL, &r), 200);
            assert_non_null(strstr(r.body, "\"cancelled\""));
            h_resp_free(&r);
            json_t *sku = h_get_sku(port, NULL, skus[o]);
            assert_int_equal(h_jint(sku, "remaining"), left[o]);
            assert_int_equal(h_jint(sku, "remaining") + h_jint(sku, "sold"),
                             o == 0 ? 1000 : 4);
            json_decref(sku);
        }
    for (int o = 0; o < 2; o++) { /* restored, cancelled: it goes again */
        char key[64];
        snprintf(key, sizeof key, "inv:order:{%s}", ids[o]);
        int node = h_cluster_master_of(e->cluster, key);
        assert_true(node >= 0);
        redisReply *ttl =
            h_port_command(h_cluster_port(e->cluster, node), "PTTL %s", key);
        assert_non_null(ttl);
        assert_true(ttl->type == REDIS_REPLY_INTEGER && ttl->integer != -1);
        freeReplyObject(ttl);
    }
    assert_int_equal(h_wait_drift(port, "lr", 10000), 0);
    assert_int_equal(h_wait_drift(port, "lm", 10000), 0);
}

/* Issue 24 on a cluster: a SKU created, sold from and deleted between two readings
 * of the SKU list (each segment's registry is in that segment's slot, the slots
 * listed in inv:ledger:slots), and one shrunk right after its sales: every sale in
 * the ledger. */
static void test_short_life_drained_cluster(void **state)
{
    struct cenv *e = *state;
    int port = h_svc_port(e->svc);
    struct h_resp r;
    for (int k = 0; k < 3; k++) {
        char sku[32], path[64];
        snprintf(sku, sizeof sku, "lcd%d", k);
        assert_int_equal(h_put_sku(port, NULL, sku, 100, 3, "lock", 0), 0);
        for (int i = 0; i < 4; i++)
            assert_int_equal(h_order(port, sku, 1, NULL, NULL), 201);
        snprintf(path, sizeof path, "/admin/skus/%s", sku);
        assert_int_equal(h_req(port, "DELETE", path, NULL, NULL, &r), 200);
        h_resp_free(&r);
        snprintf(sku, sizeof sku, "lcr%d", k);
        assert_int_equal(h_put_sku(port, NULL, sku, 100, 3, "lock", 0), 0);
        for (int i = 0; i < 6; i++)
            assert_int_equal(h_order(port, sku, 1, NULL, NULL), 201);
        assert_int_equal(h_put_sku(port, NULL, sku, 100, 1, "lock", 0), 0);
    }
    long long n = -1, m = -1;
    for (int waited = 0; waited <= 10000 && (n != 12 || m != 18); waited += 100) {
        h_sleep_ms(100);
        if (h_pg_scalar(e->pg,
                        "SELECT count(*) FROM pg_tables WHERE schemaname = 'ledger'"
                        " AND tablename = 'order_events'") != 1)
            continue; /* the sink has not made the schema yet */
        n = h_pg_scalar(e->pg, "SELECT count(*) FROM ledger.order_events"
                               " WHERE sku LIKE 'lcd%' AND kind = 'sale'");
        m = h_pg_scalar(e->pg, "SELECT count(*) FROM ledger.order_events"
                               " WHERE sku LIKE 'lcr%' AND kind = 'sale'");
    }
    assert_int_equal(n, 12);
    assert_int_equal(m, 18);
}

int main(void)
{
    h_deadline(120);
    const struct CMUnitTest cluster[] = {
        cmocka_unit_test(test_short_life_drained_cluster),
        cmocka_unit_test(test_retention_forgets_fields_cluster),
        cmocka_unit_test(test_failover_copies_only_replicated),
    };
    int failed = cmocka_run_group_tests_name("ledger_cluster", cluster, cluster_setup,
                                             cluster_teardown);
    return h_exit_status(failed);
}
