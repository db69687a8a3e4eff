/* it_cluster_service.c -- inventoryd against a real Redis Cluster (3 masters with a
 * replica each, started by the harness), found to be one by INFO cluster at start.
 *
 * What works on a cluster so far: creating, resetting and deleting a SKU (a reset
 * in per-slot steps) and reading it back; the segments' keys land on the masters of
 * their slots.
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

#define MASTERS 3
#define REPLICAS 1

struct fixture {
    h_cluster *cluster;
    h_svc *svc;
    int port;
};

static int group_setup(void **state)
{
    h_deadline(90);
    struct fixture *f = calloc(1, sizeof *f);
    *state = f;
    f->cluster = h_cluster_start(MASTERS, REPLICAS);
    if (f->cluster == NULL)
        return -1;
    f->svc = h_svc_start(h_cluster_node(f->cluster, 0), NULL);
    if (f->svc == NULL)
        return -1;
    f->port = h_svc_port(f->svc);
    return 0;
}

static int group_teardown(void **state)
{
    struct fixture *f = *state;
    int rc = h_svc_stop_clean(f->svc);
    h_svc_free(f->svc);
    h_cluster_free(f->cluster);
    free(f);
    return rc;
}

static long long jint(json_t *j, const char *key)
{
    return json_integer_value(json_object_get(j, key));
}

/* How many keys of SKU `sku`'s segments the masters hold together. */
static long long segment_keys(struct fixture *f, const char *sku)
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
            redisReply *keys = redisCommand(rc, "KEYS inv:{%s:*", sku);
            assert_non_null(keys);
            n += (long long)keys->elements;
            freeReplyObject(keys);
        }
        redisFree(rc);
    }
    return n;
}

/* A SKU made, read, reset to fewer segments and deleted on a cluster: each step in
 * per-slot scripts, the segments spread over the masters, nothing left behind. */
static void test_sku_lifecycle(void **state)
{
    struct fixture *f = *state;
    h_deadline(60);
    assert_int_equal(h_put_sku(f->port, NULL, "clu", 1500, 20, "lock", 0), 0);
    json_t *j = h_get_sku(f->port, NULL, "clu");
    assert_non_null(j);
    assert_int_equal(jint(j, "remaining"), 1500);
    assert_int_equal(jint(j, "segments"), 20);
    json_t *ss = json_object_get(j, "segment_stock");
    assert_int_equal(json_array_size(ss), 20);
    for (size_t i = 0; i < 20; i++)
        assert_int_equal(json_integer_value(json_array_get(ss, i)), 75);
    json_decref(j);
    assert_int_equal(segment_keys(f, "clu"), 20 * 3); /* stock, sold, epoch */

    assert_int_equal(h_put_sku(f->port, NULL, "clu", 100, 8, "atomic", 0), 0);
    j = h_get_sku(f->port, NULL, "clu");
    assert_non_null(j);
    assert_int_equal(jint(j, "remaining"), 100);
    assert_int_equal(jint(j, "segments"), 8);
    json_decref(j);
    assert_int_equal(segment_keys(f, "clu"), 8 * 3);
    assert_int_equal(h_audit(f->port, NULL, "clu", 100, true), 0);

    struct h_resp r;
    assert_int_equal(h_req(f->port, "DELETE", "/admin/skus/clu", NULL, NULL, &r), 200);
    h_resp_free(&r);
    assert_int_equal(h_req(f->port, "GET", "/admin/skus/clu", NULL, NULL, &r), 404);
    h_resp_free(&r);
    assert_int_equal(segment_keys(f, "clu"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sku_lifecycle),
    };
    int failed = cmocka_run_group_tests_name("cluster_service", tests, group_setup,
                                             group_teardown);
    return h_exit_status(failed);
}
