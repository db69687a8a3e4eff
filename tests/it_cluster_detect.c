/* it_cluster_detect.c -- an inventoryd started before its Redis Cluster answers finds
 * out at run time that it is a cluster (issue 28 item 3).
 *
 * The scenario: the service is started while its seed, a cluster node, is down (as
 * when the service comes up before its cluster). No seed answers INFO cluster at
 * start, so the service takes Redis as standalone. Then the node comes back and the
 * cluster is whole again. Before, the service stayed standalone for good: every PUT
 * answered 503 with `CROSSSLOT Keys in request don't hash to the same slot` while
 * /healthz said ok. Now the answer (or the periodic INFO cluster check) switches the
 * process to cluster mode, and /healthz names the mode.
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

/* Wait up to timeout_ms for the node at `port` to say cluster_state:ok. */
static bool cluster_ok(int port, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 100) {
        redisReply *r = h_port_command(port, "CLUSTER INFO");
        bool ok = r != NULL && r->type == REDIS_REPLY_STRING &&
                  strstr(r->str, "cluster_state:ok") != NULL;
        if (r != NULL)
            freeReplyObject(r);
        if (ok)
            return true;
        h_sleep_ms(100);
    }
    return false;
}

/* GET /healthz: its status, and its "redis_mode" into mode ("" when absent). */
static int healthz(int port, char *mode, size_t len)
{
    struct h_resp r;
    int st = h_req(port, "GET", "/healthz", NULL, NULL, &r);
    json_t *j = h_resp_json(&r);
    const char *m =
        j != NULL ? json_string_value(json_object_get(j, "redis_mode")) : NULL;
    snprintf(mode, len, "%s", m != NULL ? m : "");
    fprintf(stderr, "GET /healthz -> %d %s\n", st, r.body);
    json_decref(j);
    h_resp_free(&r);
    return st;
}

static void test_cluster_after_start(void **state)
{
    (void)state;
    h_deadline(120);
    h_cluster *cl = h_cluster_start(3, 0);
    assert_non_null(cl);
    h_redis *seed = h_cluster_node(cl, 0);
    assert_int_equal(h_redis_stop(seed), 0);
    h_svc *svc = h_svc_start(seed, NULL); /* --redis the seed, down */
    assert_non_null(svc);
    int port = h_svc_port(svc);
    char before[32], after[32];
    healthz(port, before, sizeof before); /* 503: Redis is down; the mode it took */

    assert_int_equal(h_redis_restart(seed), 0);
    assert_true(cluster_ok(h_cluster_port(cl, 0), 20000));
    assert_true(cluster_ok(h_cluster_port(cl, 1), 20000));

    /* A create, retried for 10 s: the first may meet the switch (503). */
    const char *body =
        "{\"stock\": 60, \"segments\": 6, \"mode\": \"lock\", \"hold_ms\": 0}";
    int st = -1;
    for (int tries = 0; tries < 50 && st != 201; tries++) {
        struct h_resp r;
        st = h_req(port, "PUT", "/admin/skus/late", NULL, body, &r);
        if (st != 201 && (tries == 0 || tries % 10 == 9)) {
            char m[32];
            fprintf(stderr, "PUT /admin/skus/late -> %d %s; ", st, r.body);
            healthz(port, m, sizeof m);
        }
        if (st != 201)
            h_sleep_ms(200);
        h_resp_free(&r);
    }
    assert_int_equal(st, 201);
    assert_int_equal(healthz(port, after, sizeof after), 200);
    assert_string_equal(before, "standalone");
    assert_string_equal(after, "cluster");

    /* The cluster's order path from the loops, and its reads from the workers: the
     * segments were placed over the masters (segment_node is shown on a cluster). */
    assert_int_equal(h_order(port, "late", 5, "late-1", NULL), 201);
    assert_int_equal(h_order(port, "late", 7, NULL, NULL), 201);
    assert_int_equal(h_order(port, "late", 5, "late-1", NULL), 200); /* a replay */
    json_t *j = h_get_sku(port, NULL, "late");
    assert_non_null(j);
    assert_int_equal(h_jint(j, "remaining"), 48);
    assert_non_null(json_object_get(j, "segment_node"));
    json_decref(j);
    assert_int_equal(h_audit(port, NULL, "late", 60, false), 0);
    assert_int_equal(h_order_status(port, "late-1"), 200);

    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
    h_cluster_free(cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_after_start),
    };
    return h_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
