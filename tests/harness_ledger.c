/* harness_ledger.c -- the ledger suites' service calls (harness_ledger.h). */
#include "tests/harness_ledger.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <hiredis.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/harness_pg.h"

long long h_wait_drift(int port, const char *sku, int ms)
{
    char path[128];
    snprintf(path, sizeof path, "/admin/skus/%s/reconcile", sku);
    long long drift = -1;
    for (int waited = 0; waited <= ms; waited += 100) {
        struct h_resp r;
        if (h_req(port, "GET", path, NULL, NULL, &r) == 200) {
            json_t *o = h_resp_json(&r);
            drift = h_jint(o, "drift");
            json_decref(o);
        }
        h_resp_free(&r);
        if (drift == 0)
            return 0;
        usleep(100 * 1000);
    }
    return drift;
}

void h_order_ok(int port, const char *sku, const char *id)
{
    int st = h_order(port, sku, 1, id, NULL);
    if (st != 201)
        fail_msg("order %s: %d", id, st);
}

long long h_ledger_scalar(const h_pg *pg, const char *fmt, const char *sku)
{
    char sql[512];
    snprintf(sql, sizeof sql, fmt, sku);
    return h_pg_scalar(pg, sql);
}

void h_ledger_assert_once(const h_pg *pg, const char *sku, long long sales)
{
    assert_int_equal(h_ledger_scalar(pg,
                                     "SELECT count(*) FROM ledger.order_events"
                                     " WHERE sku = '%s' AND kind = 'sale'",
                                     sku),
                     sales);
    assert_int_equal(
        h_ledger_scalar(pg,
                        "SELECT count(DISTINCT order_id) FROM ledger.order_events"
                        " WHERE sku = '%s' AND kind = 'sale'",
                        sku),
        sales);
    assert_int_equal(
        h_ledger_scalar(pg, "SELECT count(*) FROM ledger.orders WHERE sku = '%s'", sku),
        sales);
}

long long h_ledger_fields(int port, const char *placed)
{
    redisReply *k = h_port_command(port, "KEYS inv:{%s:*}:*", placed);
    if (k == NULL || k->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(k);
        return -1;
    }
    long long n = 0;
    for (size_t j = 0; j < k->elements && n >= 0; j++) {
        const char *key = k->element[j]->str;
        const char *cmd = strstr(key, ":orders") || strstr(key, ":parts") ? "HLEN"
                          : strstr(key, ":cancelled")                     ? "SCARD"
                                                                          : NULL;
        if (cmd == NULL)
            continue;
        redisReply *x = h_port_command(port, "%s %s", cmd, key);
        n = x != NULL && x->type == REDIS_REPLY_INTEGER ? n + x->integer : -1;
        freeReplyObject(x);
    }
    freeReplyObject(k);
    return n;
}
