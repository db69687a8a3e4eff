/* harness_ledger.c -- the ledger suites' service calls (harness_ledger.h). */
#include "tests/harness_ledger.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <unistd.h>

#include "tests/harness.h"

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
