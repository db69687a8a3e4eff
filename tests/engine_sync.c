/* engine_sync.c -- one order through the engine, waited for on the test's own loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void es_on_done(void *arg, struct order_result *res)
{
    struct es_tally *t = arg;
    t->done++;
    t->by[res->status]++;
    if (res->record != NULL)
        snprintf(t->last_record, sizeof t->last_record, "%s", res->record);
    order_result_clear(res);
}

void es_start(engine *e, const char *sku, long long qty, int n, const char *prefix,
              struct es_tally *t)
{
    memset(t, 0, sizeof *t);
    char id[64];
    for (int k = 0; k < n; k++) {
        snprintf(id, sizeof id, "%s-%d", prefix ? prefix : "", k);
        struct order_request req = {sku, qty, prefix ? id : NULL};
        engine_order(e, &req, es_on_done, t);
    }
    assert_int_equal(t->done, 0); /* never answered from inside the call */
}

void es_finish(engine *e, struct event_base *base, int n, struct es_tally *t)
{
    long long end = h_now_ms() + ANSWER_WAIT_MS;
    while (t->done < n && h_now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
    assert_int_equal(t->done, n);
    assert_int_equal(engine_in_flight(e), 0);
}

void es_run(engine *e, struct event_base *base, const char *sku, long long qty, int n,
            const char *prefix, struct es_tally *t)
{
    es_start(e, sku, qty, n, prefix, t);
    es_finish(e, base, n, t);
}
