/* engine_sync.c -- one order through the engine, waited for on the test's own loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>

#include "tests/engine_sync.h"
#include "tests/harness.h"

#define ANSWER_WAIT_MS 30000

struct waiter {
    bool done;
    struct order_result *res;
};

/* The engine's callback: take the result over, record included. */
static void on_done(void *arg, struct order_result *res)
{
    struct waiter *w = arg;
    *w->res = *res;
    w->done = true;
}

inv_status place_order(engine *e, struct event_base *base,
                       const struct order_request *req, struct order_result *res)
{
    struct waiter w = {false, res};
    engine_order(e, req, on_done, &w);
    long long end = h_now_ms() + ANSWER_WAIT_MS;
    while (!w.done && h_now_ms() < end)
        if (event_base_loop(base, EVLOOP_ONCE) != 0) /* error, or nothing pending */
            break;
    assert_true(w.done);
    return res->status;
}

inv_status place(engine *e, struct event_base *base, const char *sku, long long qty,
                 const char *id, char **record)
{
    struct order_request req = {.sku = sku, .qty = qty, .order_id = id};
    struct order_result res;
    inv_status st = place_order(e, base, &req, &res);
    if (record != NULL)
        *record = res.record;
    else
        order_result_clear(&res);
    return st;
}
