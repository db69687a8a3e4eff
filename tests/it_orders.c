/* it_orders.c -- the order path over HTTP: concurrent sell-outs, fall-through, errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

static int group_setup(void **state)
{
    *state = h_env_start(NULL);
    return *state != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    return h_env_stop(*state);
}

/* ---- a burst of concurrent single-unit orders ----------------------------------- */

struct burst {
    int port;
    const char *sku;
    int segments;
    int per_thread;
    pthread_mutex_t mu; /* guards everything below */
    int created, sold_out, other, malformed;
    char other_example[400];
    char (*ids)[80];
    int *segment_of; /* per created order */
    int *per_segment;
};

static void burst_note_other(struct burst *b, const char *fmt, int status,
                             const char *body)
{
    if (b->other_example[0] == '\0')
        snprintf(b->other_example, sizeof b->other_example, fmt, status, body);
}

static void burst_worker(int idx, void *ctx)
{
    (void)idx;
    struct burst *b = ctx;
    for (int i = 0; i < b->per_thread; i++) {
        struct h_resp r;
        int st = h_order(b->port, b->sku, 1, NULL, &r);
        json_t *j = st > 0 ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
        pthread_mutex_lock(&b->mu);
        if (st == 201) {
            json_t *id = json_object_get(j, "order_id");
            json_t *seg = json_object_get(j, "segment");
            json_t *sku = json_object_get(j, "sku");
            json_t *qty = json_object_get(j, "qty");
            json_t *status = json_object_get(j, "status");
            bool ok =
                json_is_string(id) && json_is_integer(seg) && json_is_string(sku) &&
                strcmp(json_string_value(sku), b->sku) == 0 && json_is_integer(qty) &&
                json_integer_value(qty) == 1 && json_is_string(status) &&
                strcmp(json_string_value(status), "confirmed") == 0 &&
                json_integer_value(seg) >= 0 && json_integer_value(seg) < b->segments;
            if (ok) {
                int k = b->created;
                snprintf(b->ids[k], sizeof b->ids[k], "%s", json_string_value(id));
                b->segment_of[k] = (int)json_integer_value(seg);
                b->per_segment[b->segment_of[k]]++;
            } else {
                b->malformed++;
                burst_note_other(b, "malformed %d body: %.300s", st, r.body);
            }
            b->created++;
        } else if (st == 409 && json_is_string(json_object_get(j, "error")) &&
                   strcmp(json_string_value(json_object_get(j, "error")), "sold_out") ==
                       0) {
            b->sold_out++;
        } else {
            b->other++;
            burst_note_other(b, "status %d body: %.300s", st, r.body);
        }
        pthread_mutex_unlock(&b->mu);
        json_decref(j);
        h_resp_free(&r);
    }
}

static int cmp_id(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* PUT the SKU, fire threads x per_thread orders at once, then check the counts
 * exactly, the order ids, the per-segment sales and the audit. */
static void sell_out(int port, const char *sku, long long stock, int segments,
                     const char *mode, int threads, int per_thread)
{
    assert_int_equal(h_put_sku(port, NULL, sku, stock, segments, mode, 0), 0);
    int total = threads * per_thread;
    struct burst b;
    memset(&b, 0, sizeof b);
    b.port = port;
    b.sku = sku;
    b.segments = segments;
    b.per_thread = per_thread;
    pthread_mutex_init(&b.mu, NULL);
    b.ids = calloc((size_t)total, sizeof *b.ids);
    b.segment_of = calloc((size_t)total, sizeof *b.segment_of);
    b.per_segment = calloc((size_t)segments, sizeof *b.per_segment);
    assert_true(b.ids && b.segment_of && b.per_segment);

    assert_int_equal(h_parallel(threads, burst_worker, &b), 0);

    if (b.other_example[0] != '\0')
        fprintf(stderr, "first unexpected reply: %s\n", b.other_example);
    fprintf(stderr, "%s (%s, %d segments): %d x 201, %d x 409 sold_out, %d other\n", sku,
            mode, segments, b.created, b.sold_out, b.other);
    assert_int_equal(b.other, 0);
    assert_int_equal(b.malformed, 0);
    assert_int_equal(b.created, stock);
    assert_int_equal(b.sold_out, total - stock);

    /* Every generated order id is distinct. */
    qsort(b.ids, (size_t)b.created, sizeof *b.ids, cmp_id);
    for (int i = 1; i < b.created; i++) {
        if (strcmp(b.ids[i - 1], b.ids[i]) == 0)
            fail_msg("order id %s was handed out twice", b.ids[i]);
    }

    json_t *j = h_get_sku(port, NULL, sku);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "remaining")), 0);
    assert_int_equal(json_integer_value(json_object_get(j, "sold")), stock);
    assert_int_equal(json_integer_value(json_object_get(j, "orders")), stock);
    assert_int_equal(json_integer_value(json_object_get(j, "initial")), stock);
    /* What each segment says it sold is what the 201s said came from it. */
    json_t *segsold = json_object_get(j, "segment_sold");
    if (json_is_array(segsold)) {
        assert_int_equal(json_array_size(segsold), segments);
        for (int i = 0; i < segments; i++)
            assert_int_equal(json_integer_value(json_array_get(segsold, (size_t)i)),
                             b.per_segment[i]);
    }
    json_decref(j);
    assert_int_equal(h_audit(port, NULL, sku, stock, true), 0);

    /* A few of the records read back as they were confirmed. */
    for (int i = 0; i < b.created && i < 5; i++) {
        char path[128];
        snprintf(path, sizeof path, "/orders/%s", b.ids[i]);
        struct h_resp r;
        assert_int_equal(h_req(port, "GET", path, NULL, NULL, &r), 200);
        json_t *o = h_resp_json(&r);
        assert_non_null(o);
        assert_string_equal(json_string_value(json_object_get(o, "order_id")), b.ids[i]);
        assert_string_equal(json_string_value(json_object_get(o, "sku")), sku);
        json_decref(o);
        h_resp_free(&r);
    }

    /* Sold out stays sold out. */
    struct h_resp r;
    h_order(port, sku, 1, NULL, &r);
    assert_int_equal(h_expect_error(&r, 409, "sold_out"), 0);
    h_resp_free(&r);

    free(b.ids);
    free(b.segment_of);
    free(b.per_segment);
    pthread_mutex_destroy(&b.mu);
}

static void test_sellout_1000_over_20_segments(void **state)
{
    struct h_env *e = *state;
    h_deadline(240);
    sell_out(e->port, "burst-lock", 1000, 20, "lock", 50, 30);
}

static void test_sellout_atomic_mode(void **state)
{
    struct h_env *e = *state;
    h_deadline(240);
    sell_out(e->port, "burst-atomic", 500, 20, "atomic", 25, 30);
}

static void test_sellout_single_segment(void **state)
{
    struct h_env *e = *state;
    h_deadline(240);
    sell_out(e->port, "burst-one", 200, 1, "lock", 20, 15);
}

/* 3 units over 20 segments: wherever an order starts, walking the ring finds them. */
static void test_fall_through_finds_all(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    assert_int_equal(h_put_sku(e->port, NULL, "sparse", 3, 20, "lock", 0), 0);
    int used[20] = {0};
    for (int i = 0; i < 3; i++) {
        struct h_resp r;
        assert_int_equal(h_order(e->port, "sparse", 1, NULL, &r), 201);
        json_t *j = h_resp_json(&r);
        assert_non_null(j);
        json_int_t seg = json_integer_value(json_object_get(j, "segment"));
        assert_in_range(seg, 0, 19);
        used[seg]++;
        assert_int_equal(used[seg], 1); /* each segment held one unit */
        json_decref(j);
        h_resp_free(&r);
    }
    struct h_resp r;
    h_order(e->port, "sparse", 1, NULL, &r);
    assert_int_equal(h_expect_error(&r, 409, "sold_out"), 0);
    h_resp_free(&r);
    assert_int_equal(h_audit(e->port, NULL, "sparse", 3, true), 0);
}

/* Sum of the "qty" of a record's "segments" and their count; the count is -1 when
 * the segments are not in ascending order (the lock order). */
static long long segment_parts(json_t *order, int *count)
{
    json_t *segs = json_object_get(order, "segments");
    long long sum = 0;
    int prev = -1;
    *count = (int)json_array_size(segs);
    for (size_t k = 0; k < json_array_size(segs); k++) {
        json_t *p = json_array_get(segs, k);
        int seg = (int)json_integer_value(json_object_get(p, "segment"));
        if (seg <= prev)
            *count = -1;
        prev = seg;
        sum += json_integer_value(json_object_get(p, "qty"));
    }
    return sum;
}

static void test_insufficient_stock(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    /* 10 over 5 segments: 2 in each. */
    assert_int_equal(h_put_sku(e->port, NULL, "thin", 10, 5, "lock", 0), 0);
    struct h_resp r;
    h_order(e->port, "thin", 11, NULL, &r);
    assert_int_equal(h_expect_error(&r, 409, "insufficient_stock"), 0);
    h_resp_free(&r);

    /* No segment holds 3: the order takes 2 + 1 from two segments, all or nothing. */
    assert_int_equal(h_order(e->port, "thin", 3, NULL, &r), 201);
    json_t *j = h_resp_json(&r);
    int parts;
    assert_int_equal(json_integer_value(json_object_get(j, "qty")), 3);
    assert_int_equal(segment_parts(j, &parts), 3);
    assert_int_equal(parts, 2);
    json_decref(j);
    h_resp_free(&r);

    json_t *s = h_get_sku(e->port, NULL, "thin");
    assert_non_null(s);
    assert_int_equal(json_integer_value(json_object_get(s, "remaining")), 7);
    assert_int_equal(json_integer_value(json_object_get(s, "sold")), 3);
    assert_int_equal(json_integer_value(json_object_get(s, "orders")), 1);
    json_decref(s);

    h_order(e->port, "thin", 8, NULL, &r);
    assert_int_equal(h_expect_error(&r, 409, "insufficient_stock"), 0);
    h_resp_free(&r);
    assert_int_equal(h_order(e->port, "thin", 7, NULL, &r), 201);
    j = h_resp_json(&r);
    assert_int_equal(segment_parts(j, &parts), 7);
    assert_int_equal(parts, 4);
    json_decref(j);
    h_resp_free(&r);
    h_order(e->port, "thin", 1, NULL, &r);
    assert_int_equal(h_expect_error(&r, 409, "sold_out"), 0);
    h_resp_free(&r);
    assert_int_equal(h_audit(e->port, NULL, "thin", 10, false), 0);
}

static void test_get_order(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    assert_int_equal(h_put_sku(e->port, NULL, "lookup", 5, 2, "lock", 0), 0);
    struct h_resp r;
    assert_int_equal(h_order(e->port, "lookup", 2, "get-me-1", &r), 201);
    assert_true(strncmp(r.content_type, "application/json", 16) == 0);
    json_t *created = h_resp_json(&r);
    assert_non_null(created);
    assert_string_equal(json_string_value(json_object_get(created, "order_id")),
                        "get-me-1");
    assert_string_equal(json_string_value(json_object_get(created, "status")),
                        "confirmed");
    h_resp_free(&r);

    assert_int_equal(h_req(e->port, "GET", "/orders/get-me-1", NULL, NULL, &r), 200);
    json_t *got = h_resp_json(&r);
    assert_non_null(got);
    assert_string_equal(json_string_value(json_object_get(got, "order_id")), "get-me-1");
    assert_string_equal(json_string_value(json_object_get(got, "sku")), "lookup");
    assert_int_equal(json_integer_value(json_object_get(got, "qty")), 2);
    assert_int_equal(json_integer_value(json_object_get(got, "segment")),
                     json_integer_value(json_object_get(created, "segment")));
    json_decref(got);
    json_decref(created);
    h_resp_free(&r);

    h_req(e->port, "GET", "/orders/never-placed", NULL, NULL, &r);
    assert_int_equal(h_expect_error(&r, 404, "not_found"), 0);
    h_resp_free(&r);
}

static void test_unknown_and_deleted_sku(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    struct h_resp r;
    h_order(e->port, "no-such-sku", 1, NULL, &r);
    assert_int_equal(h_expect_error(&r, 404, "unknown_sku"), 0);
    h_resp_free(&r);
    h_req(e->port, "GET", "/admin/skus/no-such-sku", NULL, NULL, &r);
    assert_int_equal(r.status, 404);
    h_resp_free(&r);

    assert_int_equal(h_put_sku(e->port, NULL, "doomed", 5, 2, "lock", 0), 0);
    assert_int_equal(h_order(e->port, "doomed", 1, NULL, NULL), 201);
    h_req(e->port, "DELETE", "/admin/skus/doomed", NULL, NULL, &r);
    assert_in_range(r.status, 200, 204);
    h_resp_free(&r);
    h_order(e->port, "doomed", 1, NULL, &r);
    assert_int_equal(h_expect_error(&r, 404, "unknown_sku"), 0);
    h_resp_free(&r);
}

/* PUT on an existing SKU resets it: new stock and layout, no sales carried over. */
static void test_reset_sku(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    assert_int_equal(h_put_sku(e->port, NULL, "resettable", 5, 2, "lock", 0), 0);
    assert_int_equal(h_order(e->port, "resettable", 1, NULL, NULL), 201);
    assert_int_equal(h_order(e->port, "resettable", 1, NULL, NULL), 201);
    assert_int_equal(h_put_sku(e->port, NULL, "resettable", 3, 3, "lock", 0), 0);
    json_t *j = h_get_sku(e->port, NULL, "resettable");
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "segments")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "remaining")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "sold")), 0);
    json_decref(j);
    for (int i = 0; i < 3; i++)
        assert_int_equal(h_order(e->port, "resettable", 1, NULL, NULL), 201);
    struct h_resp r;
    h_order(e->port, "resettable", 1, NULL, &r);
    assert_int_equal(h_expect_error(&r, 409, "sold_out"), 0);
    h_resp_free(&r);
    assert_int_equal(h_audit(e->port, NULL, "resettable", 3, true), 0);
}

static void test_service_still_up(void **state)
{
    struct h_env *e = *state;
    h_deadline(30);
    assert_true(h_svc_alive(e->svc));
    struct h_resp r;
    assert_int_equal(h_req(e->port, "GET", "/healthz", NULL, NULL, &r), 200);
    h_resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sellout_1000_over_20_segments),
        cmocka_unit_test(test_sellout_atomic_mode),
        cmocka_unit_test(test_sellout_single_segment),
        cmocka_unit_test(test_fall_through_finds_all),
        cmocka_unit_test(test_insufficient_stock),
        cmocka_unit_test(test_get_order),
        cmocka_unit_test(test_unknown_and_deleted_sku),
        cmocka_unit_test(test_reset_sku),
        cmocka_unit_test(test_service_still_up),
    };
    int failed =
        cmocka_run_group_tests_name("orders", tests, group_setup, group_teardown);
    return h_exit_status(failed);
}
