/* resv_env.c -- the reservation suites' shared calls and view check (resv_env.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>

#include "tests/resv_env.h"

int rve_reserve(int port, const char *sku, long long qty, long long ttl_s, const char *id,
                struct h_resp *out)
{
    char body[256];
    if (id != NULL)
        snprintf(body, sizeof body,
                 "{\"sku\":\"%s\",\"qty\":%lld,\"ttl_s\":%lld,\"reservation_id\":\"%s\"}",
                 sku, qty, ttl_s, id);
    else
        snprintf(body, sizeof body, "{\"sku\":\"%s\",\"qty\":%lld,\"ttl_s\":%lld}", sku,
                 qty, ttl_s);
    struct h_resp r;
    int st = h_req(port, "POST", "/reservations", NULL, body, &r);
    if (out != NULL)
        *out = r;
    else
        h_resp_free(&r);
    return st;
}

int rve_on_resv(int port, const char *method, const char *id, const char *suffix,
                char *code)
{
    char path[160];
    snprintf(path, sizeof path, "/reservations/%s%s", id, suffix);
    struct h_resp r;
    int st = h_req(port, method, path, NULL, NULL, &r);
    if (code != NULL)
        h_error_code(&r, code, 64);
    h_resp_free(&r);
    return st;
}

struct rve_nums rve_sku_nums(int port, const char *token, const char *sku)
{
    json_t *j = h_get_sku(port, token, sku);
    assert_non_null(j);
    struct rve_nums n = {h_jint(j, "initial"), h_jint(j, "remaining"),
                         h_jint(j, "reserved"), h_jint(j, "sold")};
    json_t *st = json_object_get(j, "segment_stock"),
           *rs = json_object_get(j, "segment_reserved"),
           *sd = json_object_get(j, "segment_sold");
    assert_true(json_is_array(rs));
    long long sum = 0, res = 0;
    for (size_t i = 0; i < json_array_size(st); i++) {
        long long r = json_integer_value(json_array_get(rs, i));
        assert_true(r >= 0);
        res += r;
        sum += json_integer_value(json_array_get(st, i)) + r +
               json_integer_value(json_array_get(sd, i));
    }
    json_decref(j);
    assert_int_equal(res, n.reserved);
    assert_int_equal(sum, n.initial);
    assert_int_equal(n.remaining + n.reserved + n.sold, n.initial);
    return n;
}
