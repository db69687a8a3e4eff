/* it_sku_put.c -- PUT /admin/skus/{sku} creates, and replaces a live SKU only when told
 * which version (If-Match with GET's ETag) or told to reset (?reset=true). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

#define BODY100 "{\"stock\": 100, \"segments\": 4}"

static int group_setup(void **state)
{
    *state = h_env_start(NULL);
    return *state != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    return h_env_stop(*state);
}

/* PUT `path` with `body` and the extra header lines `headers` (NULL: none). */
static int put(int port, const char *path, const char *headers, const char *body,
               struct h_resp *r)
{
    char head[512];
    snprintf(head, sizeof head, "Content-Type: application/json\r\n%s",
             headers != NULL ? headers : "");
    return h_http(port, "PUT", path, head, body, strlen(body), r);
}

/* GET /admin/skus/{sku}: its ETag into etag[64] and a field of its body. */
static long long get_sku(int port, const char *sku, char etag[64], const char *field)
{
    char path[128];
    snprintf(path, sizeof path, "/admin/skus/%s", sku);
    struct h_resp r;
    assert_int_equal(h_req(port, "GET", path, NULL, NULL, &r), 200);
    if (etag != NULL)
        snprintf(etag, 64, "%s", r.etag);
    json_t *j = h_resp_json(&r);
    assert_non_null(j);
    long long v = field != NULL ? h_jint(j, field) : 0;
    json_decref(j);
    h_resp_free(&r);
    return v;
}

/* A sale under way: `sku` created with 100 units, order `oid` of 5 placed. */
static void live_sale(int port, const char *sku, const char *oid)
{
    char path[128];
    snprintf(path, sizeof path, "/admin/skus/%s", sku);
    struct h_resp r;
    assert_in_range(put(port, path, NULL, BODY100, &r), 200, 201); /* 201: below */
    h_resp_free(&r);
    assert_int_equal(h_order(port, sku, 5, oid, NULL), 201);
}

/* The sale of `live_sale` is intact: sold 5 in one order, the order readable. */
static void sale_intact(int port, const char *sku, const char *oid)
{
    assert_int_equal(get_sku(port, sku, NULL, "initial"), 100);
    assert_int_equal(get_sku(port, sku, NULL, "sold"), 5);
    assert_int_equal(get_sku(port, sku, NULL, "orders"), 1);
    assert_int_equal(h_order_status(port, oid), 200);
}

/* Issue 28 item 1: a second PUT, even create-only, wiped the sale (200, sold 0). */
static void test_reput_keeps_a_live_sale(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    live_sale(e->port, "live", "L-1");
    struct h_resp r;
    assert_int_equal(put(e->port, "/admin/skus/live", NULL, BODY100, &r), 409);
    assert_int_equal(h_expect_error(&r, 409, "sku_exists"), 0);
    h_resp_free(&r);
    sale_intact(e->port, "live", "L-1");

    put(e->port, "/admin/skus/live", "If-None-Match: *\r\n", BODY100, &r);
    assert_int_equal(h_expect_error(&r, 412, "precondition_failed"), 0);
    h_resp_free(&r);
    sale_intact(e->port, "live", "L-1");
}

/* Create answers 201 with Location and the ETag GET gives; If-None-Match: * creates. */
static void test_create_is_201_with_etag(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    struct h_resp r;
    assert_int_equal(
        put(e->port, "/admin/skus/fresh", "If-None-Match: *\r\n", BODY100, &r), 201);
    assert_string_equal(r.location, "/admin/skus/fresh");
    char etag[64];
    get_sku(e->port, "fresh", etag, NULL);
    assert_true(etag[0] == '"' && strlen(etag) > 4);
    assert_string_equal(r.etag, etag);
    h_resp_free(&r);
    /* an order does not change it, a restock does */
    assert_int_equal(h_order(e->port, "fresh", 3, NULL, NULL), 201);
    char after[64];
    get_sku(e->port, "fresh", after, NULL);
    assert_string_equal(after, etag);
    assert_int_equal(
        h_req(e->port, "POST", "/admin/skus/fresh/restock", NULL, "{\"qty\": 10}", &r),
        200);
    assert_string_not_equal(r.etag, etag);
    get_sku(e->port, "fresh", after, NULL);
    assert_string_equal(r.etag, after);
    h_resp_free(&r);
}

/* If-Match with the current ETag resets exactly that version; a stale one is 412. */
static void test_if_match(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    live_sale(e->port, "matched", "M-1");
    char etag[64], hdr[128];
    get_sku(e->port, "matched", etag, NULL);
    struct h_resp r;
    /* the version changes under the caller: a restock */
    assert_int_equal(
        h_req(e->port, "POST", "/admin/skus/matched/restock", NULL, "{\"qty\": 4}", &r),
        200);
    h_resp_free(&r);
    snprintf(hdr, sizeof hdr, "If-Match: %s\r\n", etag);
    put(e->port, "/admin/skus/matched", hdr, BODY100, &r);
    assert_int_equal(h_expect_error(&r, 412, "precondition_failed"), 0);
    h_resp_free(&r);
    assert_int_equal(get_sku(e->port, "matched", NULL, "sold"), 5);
    assert_int_equal(get_sku(e->port, "matched", NULL, "initial"), 104);

    get_sku(e->port, "matched", etag, NULL);
    snprintf(hdr, sizeof hdr, "If-Match: %s\r\n", etag);
    assert_int_equal(put(e->port, "/admin/skus/matched", hdr, BODY100, &r), 200);
    assert_true(r.etag[0] == '"');
    assert_string_not_equal(r.etag, etag);
    h_resp_free(&r);
    assert_int_equal(get_sku(e->port, "matched", NULL, "initial"), 100);
    assert_int_equal(get_sku(e->port, "matched", NULL, "sold"), 0);
    assert_int_equal(h_order_status(e->port, "M-1"), 404);
    /* the ETag it replaced is gone with it */
    put(e->port, "/admin/skus/matched", hdr, BODY100, &r);
    assert_int_equal(h_expect_error(&r, 412, "precondition_failed"), 0);
    h_resp_free(&r);
    /* If-Match on no SKU at all: nothing to match */
    put(e->port, "/admin/skus/nowhere", hdr, BODY100, &r);
    assert_int_equal(h_expect_error(&r, 412, "precondition_failed"), 0);
    h_resp_free(&r);
    put(e->port, "/admin/skus/nowhere", "If-Match: *\r\n", BODY100, &r);
    assert_int_equal(h_expect_error(&r, 412, "precondition_failed"), 0);
    h_resp_free(&r);
    /* If-Match: * replaces whatever version exists */
    assert_int_equal(put(e->port, "/admin/skus/matched", "If-Match: *\r\n",
                         "{\"stock\": 7, \"segments\": 1}", &r),
                     200);
    h_resp_free(&r);
    assert_int_equal(get_sku(e->port, "matched", NULL, "initial"), 7);
}

/* ?reset=true replaces any version: 200, a new sale. */
static void test_explicit_reset(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    live_sale(e->port, "wiped", "W-1");
    char etag[64];
    get_sku(e->port, "wiped", etag, NULL);
    struct h_resp r;
    assert_int_equal(
        put(e->port, "/admin/skus/wiped?reset=true", NULL, "{\"stock\": 50}", &r), 200);
    assert_string_not_equal(r.etag, etag);
    h_resp_free(&r);
    assert_int_equal(get_sku(e->port, "wiped", NULL, "initial"), 50);
    assert_int_equal(get_sku(e->port, "wiped", NULL, "sold"), 0);
    assert_int_equal(h_order_status(e->port, "W-1"), 404);
    /* on no SKU it creates */
    assert_int_equal(
        put(e->port, "/admin/skus/wiped-new?reset=true", NULL, "{\"stock\": 5}", &r),
        201);
    h_resp_free(&r);
}

/* A replay under the same request id answers as the first did, though the version it
 * named is gone by then. */
static void test_replay_answers_as_first(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    struct h_resp r;
    assert_int_equal(put(e->port, "/admin/skus/replayed",
                         "Idempotency-Key: rp-create\r\n", BODY100, &r),
                     201);
    h_resp_free(&r);
    assert_int_equal(put(e->port, "/admin/skus/replayed",
                         "Idempotency-Key: rp-create\r\n", BODY100, &r),
                     201);
    h_resp_free(&r);
    assert_int_equal(h_order(e->port, "replayed", 5, "R-1", NULL), 201);
    char etag[64], hdr[160];
    get_sku(e->port, "replayed", etag, NULL);
    snprintf(hdr, sizeof hdr, "Idempotency-Key: rp-reset\r\nIf-Match: %s\r\n", etag);
    assert_int_equal(put(e->port, "/admin/skus/replayed", hdr, BODY100, &r), 200);
    h_resp_free(&r);
    assert_int_equal(h_order(e->port, "replayed", 2, "R-2", NULL), 201);
    assert_int_equal(put(e->port, "/admin/skus/replayed", hdr, BODY100, &r), 200);
    h_resp_free(&r);
    assert_int_equal(get_sku(e->port, "replayed", NULL, "sold"), 2); /* not reset again */
    assert_int_equal(h_order_status(e->port, "R-2"), 200);
}

/* Conditions the service cannot honour are 400, not a guess. */
static void test_bad_conditions(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    static const char *const bad[][2] = {
        {"/admin/skus/cond", "If-Match: 12.12\r\n"},       /* unquoted */
        {"/admin/skus/cond", "If-Match: W/\"12.12\"\r\n"}, /* weak: never matches */
        {"/admin/skus/cond", "If-Match: \"1.2\", \"3.4\"\r\n"},
        {"/admin/skus/cond", "If-None-Match: \"12.12\"\r\n"}, /* only * on a PUT */
        {"/admin/skus/cond?reset=maybe", ""},
        {"/admin/skus/cond?reset=true", "If-None-Match: *\r\n"}, /* contradicts */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct h_resp r;
        put(e->port, bad[i][0], bad[i][1], BODY100, &r);
        if (h_expect_error(&r, 400, "invalid_field") != 0)
            fail_msg("%s %s", bad[i][0], bad[i][1]);
        h_resp_free(&r);
    }
    struct h_resp r;
    assert_int_equal(h_req(e->port, "GET", "/admin/skus/cond", NULL, NULL, &r), 404);
    h_resp_free(&r);
}

/* A SKU's "lock" on the Redis store: "redis" (its only scheme) is taken and shown; a
 * PostgreSQL scheme, an empty or a non-string one is 400 and creates nothing. */
static void test_lock_scheme(void **state)
{
    struct h_env *e = *state;
    h_deadline(60);
    static const char *const bad[] = {
        "{\"stock\":5,\"lock\":\"row\"}",
        "{\"stock\":5,\"lock\":\"\"}",
        "{\"stock\":5,\"lock\":5}",
    };
    struct h_resp r;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h_req(e->port, "PUT", "/admin/skus/lk", NULL, bad[i], &r);
        if (h_expect_error(&r, 400, "invalid_field") != 0)
            fail_msg("%s", bad[i]);
        h_resp_free(&r);
    }
    assert_int_equal(h_req(e->port, "GET", "/admin/skus/lk", NULL, NULL, &r), 404);
    h_resp_free(&r);
    assert_int_equal(h_req(e->port, "PUT", "/admin/skus/lk", NULL,
                           "{\"stock\":5,\"lock\":\"redis\"}", &r),
                     201);
    h_resp_free(&r);
    json_t *j = h_get_sku(e->port, NULL, "lk");
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "lock")), "redis");
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reput_keeps_a_live_sale),
        cmocka_unit_test(test_create_is_201_with_etag),
        cmocka_unit_test(test_if_match),
        cmocka_unit_test(test_explicit_reset),
        cmocka_unit_test(test_replay_answers_as_first),
        cmocka_unit_test(test_bad_conditions),
        cmocka_unit_test(test_lock_scheme),
    };
    int failed =
        cmocka_run_group_tests_name("sku_put", tests, group_setup, group_teardown);
    return h_exit_status(failed);
}
