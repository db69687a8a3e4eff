/* test_reply.c -- domain status -> HTTP mapping and JSON reply bodies (api/reply.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <string.h>

#include "api/problem.h"
#include "api/reply.h"

/* Parse a reply body, which must be a JSON object; the caller decrefs. */
static json_t *body_of(const struct api_reply *r)
{
    assert_non_null(r->body);
    assert_int_equal(strlen(r->body), r->body_len);
    json_error_t jerr;
    json_t *o = json_loads(r->body, 0, &jerr);
    if (o == NULL)
        fail_msg("reply body is not JSON: %s (%s)", r->body, jerr.text);
    assert_true(json_is_object(o));
    return o;
}

static const char *header(const struct api_reply *r, const char *name)
{
    for (int i = 0; i < r->nheaders; i++)
        if (strcmp(r->headers[i].name, name) == 0)
            return r->headers[i].value;
    return NULL;
}

static void status_mapping(void **state)
{
    (void)state;
    static const struct {
        inv_status s;
        int http;
        const char *code;
    } table[] = {
        {INV_OK, 200, NULL},
        {INV_REPLAYED, 200, NULL},
        {INV_SOLD_OUT, 409, "sold_out"},
        {INV_INSUFFICIENT, 409, "insufficient_stock"},
        {INV_CONFLICT, 409, "order_id_conflict"},
        {INV_UNKNOWN_SKU, 404, "unknown_sku"},
        {INV_NOT_FOUND, 404, "not_found"},
        {INV_BUSY, 503, "busy"},
        {INV_UNAVAILABLE, 503, "backend_unavailable"},
        {INV_INVALID, 400, "invalid_field"},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        assert_int_equal(api_status_http(table[i].s), table[i].http);
        if (table[i].code == NULL)
            assert_null(api_status_code(table[i].s));
        else
            assert_string_equal(api_status_code(table[i].s), table[i].code);
    }
    assert_int_equal(api_status_http((inv_status)999), 500);
    assert_string_equal(api_status_code((inv_status)999), "internal");
}

static void error_body(void **state)
{
    (void)state;
    struct api_reply r;
    api_reply_init(&r);
    api_reply_error(&r, 400, "invalid_field", "qty: must be at most %d", 5);
    assert_int_equal(r.status, 400);
    assert_int_equal(r.nheaders, 0);
    json_t *o = body_of(&r);
    assert_int_equal(json_object_size(o), 2);
    assert_string_equal(json_string_value(json_object_get(o, "error")), "invalid_field");
    assert_string_equal(json_string_value(json_object_get(o, "detail")),
                        "qty: must be at most 5");
    json_decref(o);
    api_reply_clear(&r);
    assert_null(r.body);
    assert_int_equal(r.status, 0);
}

static void error_detail_is_sanitised(void **state)
{
    (void)state;
    struct api_reply r;
    api_reply_init(&r);
    api_reply_error(&r, 404, "not_found", "no order %s", "a\"b\n\xff");
    json_t *o = body_of(&r);
    assert_string_equal(json_string_value(json_object_get(o, "detail")),
                        "no order a\"b??");
    json_decref(o);
    api_reply_error(&r, 400, "bad_json", "%s", "\\\"}{\\");
    o = body_of(&r);
    assert_string_equal(json_string_value(json_object_get(o, "detail")), "\\\"}{\\");
    assert_string_equal(json_string_value(json_object_get(o, "error")), "bad_json");
    assert_int_equal(json_object_size(o), 2);
    json_decref(o);
    api_reply_clear(&r);
}

static void status_replies_and_retry_after(void **state)
{
    (void)state;
    static const inv_status retry[] = {INV_BUSY, INV_UNAVAILABLE};
    for (size_t i = 0; i < 2; i++) {
        struct api_reply r;
        api_reply_init(&r);
        api_reply_status(&r, retry[i], "try later");
        assert_int_equal(r.status, 503);
        assert_non_null(header(&r, "Retry-After"));
        assert_string_equal(header(&r, "Retry-After"), "1");
        json_t *o = body_of(&r);
        assert_string_equal(json_string_value(json_object_get(o, "error")),
                            api_status_code(retry[i]));
        json_decref(o);
        api_reply_clear(&r);
    }
    static const inv_status plain[] = {INV_SOLD_OUT,    INV_INSUFFICIENT, INV_CONFLICT,
                                       INV_UNKNOWN_SKU, INV_NOT_FOUND,    INV_INVALID};
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
        struct api_reply r;
        api_reply_init(&r);
        api_reply_status(&r, plain[i], "x %d", 1);
        assert_int_equal(r.status, api_status_http(plain[i]));
        assert_null(header(&r, "Retry-After"));
        json_t *o = body_of(&r);
        assert_string_equal(json_string_value(json_object_get(o, "error")),
                            api_status_code(plain[i]));
        assert_string_equal(json_string_value(json_object_get(o, "detail")), "x 1");
        json_decref(o);
        api_reply_clear(&r);
    }
}

static void json_and_text_bodies(void **state)
{
    (void)state;
    struct api_reply r;
    api_reply_init(&r);
    json_t *o = json_pack("{s:s, s:b}", "sku", "tv", "deleted", 1);
    api_reply_json(&r, 200, o); /* steals o */
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"sku\":\"tv\",\"deleted\":true}");

    /* A second reply replaces the first (and frees it: ASan would notice). */
    const char *rec = "{\"order_id\":\"o1\",\"status\":\"confirmed\"}";
    api_reply_text(&r, 201, rec, strlen(rec));
    assert_int_equal(r.status, 201);
    assert_string_equal(r.body, rec);
    assert_int_equal(r.body_len, strlen(rec));
    assert_ptr_not_equal(r.body, rec);
    api_reply_clear(&r);
}

static void headers(void **state)
{
    (void)state;
    struct api_reply r;
    api_reply_init(&r);
    api_reply_header(&r, "Allow", "GET, PUT, DELETE");
    api_reply_header(&r, "WWW-Authenticate", "Bearer");
    api_reply_header(&r, "Retry-After", "1");
    api_reply_header(&r, "X-Ignored", "past the limit");
    assert_int_equal(r.nheaders, API_REPLY_HEADERS_MAX);
    assert_string_equal(header(&r, "Allow"), "GET, PUT, DELETE");
    assert_null(header(&r, "X-Ignored"));
    char longv[200];
    memset(longv, 'v', sizeof(longv) - 1);
    longv[sizeof(longv) - 1] = '\0';
    api_reply_init(&r);
    api_reply_header(&r, "X-Long", longv);
    assert_int_equal(strlen(header(&r, "X-Long")), API_HEADER_VALUE_MAX - 1);
    api_reply_clear(&r);
}

static void problem_negotiation(void **state)
{
    (void)state;
    static const char *yes[] = {
        "application/problem+json",
        "Application/Problem+JSON",
        "application/json, application/problem+json",
        "application/json;q=0.9, application/problem+json",
        "application/problem+json; charset=utf-8",
        " application/problem+json ;q=1.0 , */*;q=0.1",
        "text/html, application/problem+json;q=0.5",
    };
    static const char *no[] = {
        NULL,
        "",
        "*/*",
        "application/json",
        "application/*",
        "application/problem+json;q=0",
        "application/problem+json;q=0.5, */*",
        "application/problem+json;q=0.5, application/json",
        "application/problem+jsonx",
        "application/problem+json;q=x",
        "application/problem+json;q=2",
        ",,;",
    };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        if (!api_problem_preferred(yes[i]))
            fail_msg("'%s' does not prefer problem details", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (api_problem_preferred(no[i]))
            fail_msg("'%s' prefers problem details", no[i] ? no[i] : "(null)");
}

static void problem_rewrite(void **state)
{
    (void)state;
    struct api_reply r;
    api_reply_init(&r);
    api_reply_status(&r, INV_BUSY, "no lock for sku %s", "tv");
    api_problem_apply(&r);
    assert_string_equal(r.content_type, "application/problem+json");
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "type")),
                        API_PROBLEM_TYPE_PREFIX "busy");
    assert_string_equal(json_string_value(json_object_get(j, "title")),
                        api_problem_title("busy"));
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 503);
    assert_string_equal(json_string_value(json_object_get(j, "detail")),
                        "no lock for sku tv");
    assert_string_equal(json_string_value(json_object_get(j, "code")), "busy");
    assert_int_equal(json_object_size(j), 5);
    json_decref(j);
    assert_int_equal(r.nheaders, 1); /* Retry-After stays */
    api_reply_clear(&r);

    /* Not an error reply: left alone. */
    api_reply_json(&r, 503, json_pack("{s:s, s:s}", "error", "x", "detail", "y"));
    api_problem_apply(&r);
    assert_null(r.content_type);
    api_reply_clear(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(status_mapping),
        cmocka_unit_test(error_body),
        cmocka_unit_test(error_detail_is_sanitised),
        cmocka_unit_test(status_replies_and_retry_after),
        cmocka_unit_test(json_and_text_bodies),
        cmocka_unit_test(headers),
        cmocka_unit_test(problem_negotiation),
        cmocka_unit_test(problem_rewrite),
    };
    return cmocka_run_group_tests_name("reply", tests, NULL, NULL);
}
