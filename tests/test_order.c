/* test_order.c -- multi-segment orders, cancel, restock, rebalance and the sold-out
 * fast path against a real redis-server: orders through the event-driven engine, one
 * per instance on its own loop, the rest called directly (segments/engine.c, order.c,
 * sku.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "segments/engine.h"
#include "segments/inventory.h"
#include "segments/order.h"
#include "segments/sku.h"
#include "segments/stats.h"
#include "tests/engine_sync.h"
#include "tests/harness.h"

#define CACHE_MS 100

struct fixture {
    h_redis *redis;
    inv *v, *other;                  /* two instances on one Redis */
    inv_conn *c;                     /* v's, for everything but orders */
    struct event_base *base, *obase; /* each instance's loop, turned by place */
    engine *e, *oe;                  /* each instance's engine on its loop */
};

static inv *instance(h_redis *r)
{
    struct inv_options opt = {.redis_host = "127.0.0.1",
                              .redis_port = h_redis_port(r),
                              .redis_timeout_ms = 2000,
                              .lock_ttl_ms = 2000,
                              .lock_wait_ms = 1000,
                              .meta_cache_ms = CACHE_MS};
    char err[128];
    return inv_create(&opt, err, sizeof err);
}

static int setup(void **state)
{
    static struct fixture f;
    if ((f.redis = h_redis_start()) == NULL || (f.v = instance(f.redis)) == NULL ||
        (f.other = instance(f.redis)) == NULL)
        return -1;
    f.c = inv_conn_create(f.v);
    if ((f.base = event_base_new()) == NULL || (f.obase = event_base_new()) == NULL)
        return -1;
    f.e = engine_create(f.v, f.base, 0, 1);
    f.oe = engine_create(f.other, f.obase, 0, 1);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    engine_free(f->e);
    engine_free(f->oe);
    event_base_free(f->base);
    event_base_free(f->obase);
    inv_conn_free(f->c);
    inv_free(f->v);
    inv_free(f->other);
    h_redis_free(f->redis);
    return 0;
}

static void put(struct fixture *f, const char *sku, long long stock, int segments,
                bool rebalance)
{
    struct sku_config cfg = {.stock = stock,
                             .segments = segments,
                             .mode = SKU_MODE_LOCK,
                             .rebalance = rebalance};
    assert_int_equal(sku_put(f->c, sku, &cfg, SKU_REPLACE_ANY, NULL, NULL, NULL), INV_OK);
}

static struct sku_status *status(struct fixture *f, const char *sku)
{
    static struct sku_status st;
    assert_int_equal(sku_get(f->c, sku, &st), INV_OK);
    long long sum = 0;
    for (int i = 0; i < st.cfg.segments; i++) {
        assert_true(st.segment_stock[i] >= 0);
        sum += st.segment_stock[i];
    }
    assert_int_equal(sum, st.remaining);
    assert_int_equal(st.remaining + st.sold, st.cfg.stock);
    return &st;
}

static long long counter(inv *v, enum stat_id id)
{
    long long s[STAT__COUNT];
    stat_snapshot(v, s);
    return s[id];
}

static void multi_segment_order_is_all_or_nothing(void **state)
{
    struct fixture *f = *state;
    put(f, "multi", 10, 5, false); /* 2 per segment */
    char *rec;
    assert_int_equal(place(f->e, f->base, "multi", 5, "m-1", &rec), INV_OK);
    json_t *o = json_loads(rec, 0, NULL);
    json_t *segs = json_object_get(o, "segments");
    assert_int_equal(json_array_size(segs), 3);
    long long sum = 0;
    int prev = -1;
    for (size_t k = 0; k < json_array_size(segs); k++) {
        json_t *e = json_array_get(segs, k);
        int seg = (int)json_integer_value(json_object_get(e, "segment"));
        assert_true(seg > prev); /* ascending: the lock order */
        prev = seg;
        sum += json_integer_value(json_object_get(e, "qty"));
    }
    assert_int_equal(sum, 5);
    json_decref(o);
    free(rec);
    struct sku_status *st = status(f, "multi");
    assert_int_equal(st->sold, 5);
    assert_int_equal(st->orders, 1);
    assert_int_equal(place(f->e, f->base, "multi", 6, NULL, NULL), INV_INSUFFICIENT);
    assert_int_equal(status(f, "multi")->sold, 5);
    assert_true(counter(f->v, STAT_MULTI_SEGMENT) >= 1);
}

static void cancel_returns_stock_and_is_idempotent(void **state)
{
    struct fixture *f = *state;
    put(f, "cx", 6, 3, false);
    assert_int_equal(place(f->e, f->base, "cx", 3, "c-1", NULL), INV_OK); /* multi */
    assert_int_equal(place(f->e, f->base, "cx", 1, "c-2", NULL), INV_OK);
    assert_int_equal(status(f, "cx")->sold, 4);

    char *rec;
    assert_int_equal(order_cancel(f->c, "c-1", &rec), INV_OK);
    assert_non_null(strstr(rec, "\"status\":\"cancelled\""));
    free(rec);
    struct sku_status *st = status(f, "cx");
    assert_int_equal(st->sold, 1);
    assert_int_equal(st->remaining, 5);
    assert_int_equal(st->orders, 1);
    assert_int_equal(order_cancel(f->c, "c-1", &rec), INV_OK);
    assert_non_null(strstr(rec, "cancelled"));
    free(rec);
    assert_int_equal(status(f, "cx")->sold, 1);
    assert_int_equal(order_get(f->c, "c-1", &rec), INV_OK);
    assert_non_null(strstr(rec, "cancelled"));
    free(rec);
    assert_int_equal(order_cancel(f->c, "nope", &rec), INV_NOT_FOUND);
    /* Reusing a cancelled id replays the cancelled record, deducting nothing. */
    assert_int_equal(place(f->e, f->base, "cx", 3, "c-1", NULL), INV_REPLAYED);
    assert_int_equal(status(f, "cx")->sold, 1);
}

static void restock_spreads_and_raises_initial(void **state)
{
    struct fixture *f = *state;
    put(f, "rs", 10, 4, false);                                 /* 3 3 2 2 */
    assert_int_equal(sku_restock(f->c, "rs", 6, NULL), INV_OK); /* + 2 2 1 1 */
    struct sku_status *st = status(f, "rs");
    assert_int_equal(st->cfg.stock, 16);
    long long want[] = {5, 5, 3, 3};
    for (int i = 0; i < 4; i++)
        assert_int_equal(st->segment_stock[i], want[i]);
    assert_int_equal(sku_restock(f->c, "rs", 0, NULL), INV_INVALID);
    assert_int_equal(sku_restock(f->c, "nope", 1, NULL), INV_UNKNOWN_SKU);
}

static void rebalance_evens_the_rest(void **state)
{
    struct fixture *f = *state;
    put(f, "rb", 8, 4, false); /* 2 each; qty 2 empties one segment per order */
    for (int k = 0; k < 3; k++)
        assert_int_equal(place(f->e, f->base, "rb", 2, NULL, NULL), INV_OK);
    assert_int_equal(status(f, "rb")->remaining, 2);
    assert_int_equal(sku_rebalance(f->c, "rb", NULL), INV_OK);
    struct sku_status *st = status(f, "rb");
    int ones = 0;
    for (int i = 0; i < 4; i++)
        ones += st->segment_stock[i] == 1;
    assert_int_equal(ones, 2);
    assert_int_equal(st->locks_held, 0);
}

static void rebalance_evens_a_skew_with_no_empty_segment(void **state)
{
    struct fixture *f = *state;
    put(f, "skew", 12, 3, false); /* 4 4 4; two qty-3 orders leave 1 1 4 in some order */
    assert_int_equal(place(f->e, f->base, "skew", 3, NULL, NULL), INV_OK);
    assert_int_equal(place(f->e, f->base, "skew", 3, NULL, NULL), INV_OK);
    struct sku_status *st = status(f, "skew");
    assert_true(st->segment_stock[0] > 0 && st->segment_stock[1] > 0 &&
                st->segment_stock[2] > 0);
    assert_int_equal(sku_rebalance(f->c, "skew", NULL), INV_OK);
    st = status(f, "skew");
    for (int i = 0; i < 3; i++)
        assert_int_equal(st->segment_stock[i], 2);
}

static void automatic_rebalance_when_half_empty(void **state)
{
    struct fixture *f = *state;
    put(f, "auto", 8, 4, true);
    long long before = counter(f->v, STAT_REBALANCES);
    assert_int_equal(place(f->e, f->base, "auto", 2, NULL, NULL), INV_OK);
    assert_int_equal(place(f->e, f->base, "auto", 2, NULL, NULL), INV_OK);
    /* Two of four segments are empty, 4 units in the others: the next order first
     * spreads them over all four. */
    assert_int_equal(place(f->e, f->base, "auto", 1, NULL, NULL), INV_OK);
    assert_int_equal(counter(f->v, STAT_REBALANCES), before + 1);
    struct sku_status *st = status(f, "auto");
    int ones = 0;
    for (int i = 0; i < 4; i++)
        ones += st->segment_stock[i] == 1;
    assert_int_equal(ones, 3);
}

static void sold_out_fast_path_and_restock_elsewhere(void **state)
{
    struct fixture *f = *state;
    put(f, "so", 2, 2, false);
    assert_int_equal(place(f->oe, f->obase, "so", 1, NULL, NULL), INV_OK);
    assert_int_equal(place(f->oe, f->obase, "so", 1, NULL, NULL), INV_OK);
    assert_int_equal(place(f->oe, f->obase, "so", 1, NULL, NULL), INV_SOLD_OUT);
    long long fast = counter(f->other, STAT_SOLD_OUT_FAST);
    assert_int_equal(place(f->oe, f->obase, "so", 1, NULL, NULL), INV_SOLD_OUT);
    assert_int_equal(counter(f->other, STAT_SOLD_OUT_FAST), fast + 1);
    /* Restocked through the first instance: the second sees it after its cache time. */
    assert_int_equal(sku_restock(f->c, "so", 1, NULL), INV_OK);
    usleep((CACHE_MS + 50) * 1000);
    assert_int_equal(place(f->oe, f->obase, "so", 1, NULL, NULL), INV_OK);
    assert_int_equal(status(f, "so")->sold, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(multi_segment_order_is_all_or_nothing),
        cmocka_unit_test(cancel_returns_stock_and_is_idempotent),
        cmocka_unit_test(restock_spreads_and_raises_initial),
        cmocka_unit_test(rebalance_evens_the_rest),
        cmocka_unit_test(rebalance_evens_a_skew_with_no_empty_segment),
        cmocka_unit_test(automatic_rebalance_when_half_empty),
        cmocka_unit_test(sold_out_fast_path_and_restock_elsewhere),
    };
    h_deadline(120);
    return cmocka_run_group_tests_name("order", tests, setup, teardown);
}
