/* test_parse.c -- request validation (api/parse.c): bodies, names, headers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "api/parse.h"

/* One body and what parsing it must give: code NULL means accepted. */
struct body_case {
    const char *body;
    const char *code;   /* "bad_json" / "invalid_field" / NULL */
    const char *detail; /* prefix of the detail (names the field), or NULL */
};

static void check_prefix(const char *body, const struct api_parse_error *err,
                         const char *prefix)
{
    if (prefix != NULL && strncmp(err->detail, prefix, strlen(prefix)) != 0)
        fail_msg("body %s: detail '%s' does not start with '%s'", body, err->detail,
                 prefix);
}

/* Judge one table case by what the parser returned: `rc` 0 when c->code is NULL, else
 * -1 with err->code == c->code and the detail starting with c->detail. */
static void check_case(const struct body_case *c, int rc,
                       const struct api_parse_error *err)
{
    if (c->code == NULL) {
        if (rc != 0)
            fail_msg("body %s rejected: %s %s", c->body, err->code, err->detail);
        return;
    }
    if (rc != -1 || err->code == NULL || strcmp(err->code, c->code) != 0)
        fail_msg("body %s: want %s, got rc %d code %s", c->body, c->code, rc,
                 err->code ? err->code : "(none)");
    check_prefix(c->body, err, c->detail);
}

static void run_order_case(const struct body_case *c)
{
    struct api_order_body out;
    struct api_parse_error err = {NULL, ""};
    int rc = api_parse_order(c->body, strlen(c->body), &out, &err);
    check_case(c, rc, &err);
}

static void order_validation_table(void **state)
{
    (void)state;
    static const struct body_case cases[] = {
        {"{\"sku\":\"tv\"}", NULL, NULL},
        {"{\"sku\":\"tv\",\"qty\":1000000,\"order_id\":\"A-1.b_2\"}", NULL, NULL},
        {" {\"qty\": 3, \"sku\": \"tv\"} ", NULL, NULL},
        {"", "bad_json", NULL},
        {"{", "bad_json", NULL},
        {"{\"sku\":\"tv\"} x", "bad_json", NULL},
        {"[]", "bad_json", NULL},
        {"\"tv\"", "bad_json", NULL},
        {"null", "bad_json", NULL},
        {"{\"sku\":\"tv\",\"sku\":\"tv\"}", "bad_json", NULL},
        {"{\"qty\":1}", "invalid_field", "sku"},
        {"{\"sku\":null}", "invalid_field", "sku"},
        {"{\"sku\":7}", "invalid_field", "sku"},
        {"{\"sku\":\"\"}", "invalid_field", "sku"},
        {"{\"sku\":\"a b\"}", "invalid_field", "sku"},
        {"{\"sku\":\"a{b}\"}", "invalid_field", "sku"},
        {"{\"sku\":\"a\\u0000b\"}", "bad_json", NULL},
        {"{\"sku\":\"tv\",\"qty\":0}", "invalid_field", "qty"},
        {"{\"sku\":\"tv\",\"qty\":-1}", "invalid_field", "qty"},
        {"{\"sku\":\"tv\",\"qty\":1000001}", "invalid_field", "qty"},
        {"{\"sku\":\"tv\",\"qty\":1.0}", "invalid_field", "qty"},
        {"{\"sku\":\"tv\",\"qty\":1e2}", "invalid_field", "qty"},
        {"{\"sku\":\"tv\",\"qty\":\"1\"}", "invalid_field", "qty"},
        {"{\"sku\":\"tv\",\"qty\":true}", "invalid_field", "qty"},
        {"{\"sku\":\"tv\",\"qty\":null}", "invalid_field", "qty"},
        {"{\"sku\":\"tv\",\"qty\":99999999999999999999}", "bad_json", NULL},
        {"{\"sku\":\"tv\",\"order_id\":\"\"}", "invalid_field", "order_id"},
        {"{\"sku\":\"tv\",\"order_id\":5}", "invalid_field", "order_id"},
        {"{\"sku\":\"tv\",\"order_id\":\"x*\"}", "invalid_field", "order_id"},
        {"{\"sku\":\"tv\",\"extra\":1}", "invalid_field", "extra"},
        {"{\"sku\":\"tv\",\"Qty\":1}", "invalid_field", "Qty"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_order_case(&cases[i]);
}

static void order_values_and_defaults(void **state)
{
    (void)state;
    struct api_order_body out;
    struct api_parse_error err;
    const char *b = "{\"sku\":\"tv\"}";
    assert_int_equal(api_parse_order(b, strlen(b), &out, &err), 0);
    assert_string_equal(out.sku, "tv");
    assert_int_equal(out.qty, 1);
    assert_string_equal(out.order_id, "");

    b = "{\"sku\":\"tv-2\",\"qty\":7,\"order_id\":\"o.9\"}";
    assert_int_equal(api_parse_order(b, strlen(b), &out, &err), 0);
    assert_string_equal(out.sku, "tv-2");
    assert_int_equal(out.qty, 7);
    assert_string_equal(out.order_id, "o.9");

    /* The body need not be NUL-terminated: only `len` bytes are read. */
    char buf[32];
    memcpy(buf, "{\"sku\":\"ab\"}GARBAGE", 20);
    assert_int_equal(api_parse_order(buf, 12, &out, &err), 0);
    assert_string_equal(out.sku, "ab");

    assert_int_equal(api_parse_order(NULL, 0, &out, &err), -1);
    assert_string_equal(err.code, "bad_json");
}

/* The order body without a JSON tree: the shapes clients send are read by the fast
 * path, and give what jansson gives; everything else is left to jansson. */
static void order_fast_path(void **state)
{
    (void)state;
    static const char *const fast[] = {
        "{\"sku\":\"tv\"}",
        "{\"sku\":\"tv\",\"qty\":1,\"order_id\":\"lt1-t0-1\"}",
        " {\r\n \"order_id\" : \"o.9\" ,\t\"qty\":1000000, \"sku\":\"A_b-9.z\" }\n ",
        "{\"qty\":12,\"sku\":\"x\"}",
    };
    static const char *const slow[] = {
        "",
        "{}",
        "[]",
        "{\"sku\":\"tv\"",
        "{\"sku\":\"tv\"}x",
        "{\"sku\":\"tv\",}",
        "{\"sku\":\"t\\u0076\"}",          /* an escape: jansson reads "tv" */
        "{\"sk\\u0075\":\"tv\"}",          /* ... and the key "sku" */
        "{\"sku\":\"tv\",\"sku\":\"tv\"}", /* a duplicate */
        "{\"sku\":\"tv\",\"qty\":0}",
        "{\"sku\":\"tv\",\"qty\":01}",
        "{\"sku\":\"tv\",\"qty\":-1}",
        "{\"sku\":\"tv\",\"qty\":1.0}",
        "{\"sku\":\"tv\",\"qty\":1e2}",
        "{\"sku\":\"tv\",\"qty\":1000001}",
        "{\"sku\":\"tv\",\"qty\":99999999999999999999}",
        "{\"sku\":\"\"}",
        "{\"sku\":\"tv\",\"qty\":\"1\"}",
        "{\"sku\":\"x*\"}",
        "{\"qty\":1}",
        "{\"sku\":\"tv\",\"extra\":1}",
        "{\"sku\":\"tv\",\"order_id\":null}",
        "{\"sku\"\f:\"tv\"}",
    };
    struct api_order_body a, b;
    struct api_parse_error err;
    for (size_t i = 0; i < sizeof fast / sizeof fast[0]; i++) {
        assert_true(api_parse_order_fast(fast[i], strlen(fast[i]), &a));
        assert_int_equal(api_parse_order_json(fast[i], strlen(fast[i]), &b, &err), 0);
        assert_string_equal(a.sku, b.sku);
        assert_int_equal(a.qty, b.qty);
        assert_string_equal(a.order_id, b.order_id);
    }
    for (size_t i = 0; i < sizeof slow / sizeof slow[0]; i++)
        assert_false(api_parse_order_fast(slow[i], strlen(slow[i]), &a));
    /* A key read raw must be the key: "qty" then a NUL and other bytes is not "qty"
     * (the fuzzer found the fast path taking it for one, where jansson refuses it). */
    static const char nul_key[] = "{\"sku\":\"x\",\"qty\0\0\x7f\xff*-\xe9\xd0\":1000000}";
    assert_false(api_parse_order_fast(nul_key, sizeof nul_key - 1, &a));
    assert_int_equal(api_parse_order(nul_key, sizeof nul_key - 1, &a, &err), -1);
    /* Left to jansson, an escaped name is still read. */
    const char *esc = slow[6];
    assert_int_equal(api_parse_order(esc, strlen(esc), &a, &err), 0);
    assert_string_equal(a.sku, "tv");
    /* Only `len` bytes are read, and a name of SEG_NAME_MAX + 1 is left to jansson. */
    assert_false(api_parse_order_fast("{\"sku\":\"tv\"}", 10, &a));
    char body[256], name[SEG_NAME_MAX + 2];
    memset(name, 'n', SEG_NAME_MAX + 1);
    name[SEG_NAME_MAX + 1] = '\0';
    snprintf(body, sizeof body, "{\"sku\":\"%s\"}", name);
    assert_false(api_parse_order_fast(body, strlen(body), &a));
    name[SEG_NAME_MAX] = '\0';
    snprintf(body, sizeof body, "{\"sku\":\"%s\"}", name);
    assert_true(api_parse_order_fast(body, strlen(body), &a));
    assert_string_equal(a.sku, name);
}

/* The reservation body's fast read takes what clients send, with the values jansson
 * reads, and leaves everything else to jansson (which words the error). */
static void reservation_fast_path(void **state)
{
    (void)state;
    static const char *const fast[] = {
        "{\"sku\":\"tv\",\"qty\":2,\"ttl_s\":60,\"reservation_id\":\"r-1\"}",
        "{ \"ttl_s\" : 86400 , \"sku\" : \"tv\" }",
        "{\"reservation_id\":\"a.b_c\",\"ttl_s\":1,\"sku\":\"x\",\"qty\":1000000}",
    };
    static const char *const slow[] = {
        "{\"sku\":\"tv\"}",                                 /* no ttl_s */
        "{\"ttl_s\":60}",                                   /* no sku */
        "{\"sku\":\"tv\",\"ttl_s\":0}",                     /* out of range */
        "{\"sku\":\"tv\",\"ttl_s\":86401}",                 /* out of range */
        "{\"sku\":\"tv\",\"ttl_s\":60,\"ttl_s\":60}",       /* a duplicate */
        "{\"sku\":\"tv\",\"ttl_s\":60,\"order_id\":\"o\"}", /* an order's key */
        "{\"sku\":\"t\\u0076\",\"ttl_s\":60}",              /* an escape */
        "{\"sku\":\"tv\",\"ttl_s\":\"60\"}",
        "{\"sku\":\"tv\",\"ttl_s\":60}x",
    };
    struct api_resv_body a, b;
    struct api_parse_error err;
    for (size_t i = 0; i < sizeof fast / sizeof fast[0]; i++) {
        assert_true(api_parse_reservation_fast(fast[i], strlen(fast[i]), &a));
        assert_int_equal(api_parse_reservation(fast[i], strlen(fast[i]), &b, &err), 0);
        assert_string_equal(a.sku, b.sku);
        assert_int_equal(a.qty, b.qty);
        assert_int_equal(a.ttl_s, b.ttl_s);
        assert_string_equal(a.id, b.id);
    }
    for (size_t i = 0; i < sizeof slow / sizeof slow[0]; i++)
        assert_false(api_parse_reservation_fast(slow[i], strlen(slow[i]), &a));
    /* Left to jansson: the escape is read, the missing ttl_s is an error. */
    assert_int_equal(api_parse_reservation(slow[6], strlen(slow[6]), &a, &err), 0);
    assert_string_equal(a.sku, "tv");
    assert_int_equal(api_parse_reservation(slow[0], strlen(slow[0]), &a, &err), -1);
}

static void name_length_limits(void **state)
{
    (void)state;
    char body[256], name[SEG_NAME_MAX + 2];
    struct api_order_body out;
    struct api_parse_error err;
    memset(name, 'n', SEG_NAME_MAX);
    name[SEG_NAME_MAX] = '\0';
    snprintf(body, sizeof(body), "{\"sku\":\"%s\"}", name);
    assert_int_equal(api_parse_order(body, strlen(body), &out, &err), 0);
    assert_string_equal(out.sku, name);
    name[SEG_NAME_MAX] = 'n';
    name[SEG_NAME_MAX + 1] = '\0';
    snprintf(body, sizeof(body), "{\"sku\":\"%s\"}", name);
    assert_int_equal(api_parse_order(body, strlen(body), &out, &err), -1);
    assert_string_equal(err.code, "invalid_field");
}

static void run_sku_case(const struct body_case *c)
{
    struct sku_config out;
    char rid[SEG_NAME_MAX + 1];
    struct api_parse_error err = {NULL, ""};
    int rc = api_parse_sku_config(c->body, strlen(c->body), false, &out, rid, &err);
    check_case(c, rc, &err);
}

static void sku_validation_table(void **state)
{
    (void)state;
    static const struct body_case cases[] = {
        {"{\"stock\":0}", NULL, NULL},
        {"{\"stock\":9007199254740991,\"segments\":1024,\"mode\":\"atomic\",\"hold_ms\":"
         "10000}",
         NULL, NULL},
        {"{\"stock\":5,\"segments\":1,\"mode\":\"lock\",\"hold_ms\":0}", NULL, NULL},
        {"{}", "invalid_field", "stock"},
        {"{\"stock\":-1}", "invalid_field", "stock"},
        {"{\"stock\":9007199254740992}", "invalid_field", "stock"},
        {"{\"stock\":1.5}", "invalid_field", "stock"},
        {"{\"stock\":\"5\"}", "invalid_field", "stock"},
        {"{\"stock\":5,\"segments\":0}", "invalid_field", "segments"},
        {"{\"stock\":5,\"segments\":1025}", "invalid_field", "segments"},
        {"{\"stock\":5,\"segments\":false}", "invalid_field", "segments"},
        {"{\"stock\":5,\"mode\":\"LOCK\"}", "invalid_field", "mode"},
        {"{\"stock\":5,\"mode\":\"\"}", "invalid_field", "mode"},
        {"{\"stock\":5,\"mode\":1}", "invalid_field", "mode"},
        {"{\"stock\":5,\"hold_ms\":-1}", "invalid_field", "hold_ms"},
        {"{\"stock\":5,\"hold_ms\":10001}", "invalid_field", "hold_ms"},
        {"{\"stock\":5,\"durability\":\"replicated\"}", NULL, NULL},
        {"{\"stock\":5,\"durability\":\"Replicated\"}", "invalid_field", "durability"},
        {"{\"stock\":5,\"durability\":\"\"}", "invalid_field", "durability"},
        {"{\"stock\":5,\"durability\":true}", "invalid_field", "durability"},
        {"{\"stock\":5,\"color\":\"red\"}", "invalid_field", "color"},
        {"{\"stock\":5", "bad_json", NULL},
        {"[{\"stock\":5}]", "bad_json", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_sku_case(&cases[i]);
}

static void sku_values_and_defaults(void **state)
{
    (void)state;
    struct sku_config out;
    char rid[SEG_NAME_MAX + 1];
    struct api_parse_error err;
    const char *b = "{\"stock\":1000}";
    assert_int_equal(api_parse_sku_config(b, strlen(b), false, &out, rid, &err), 0);
    assert_int_equal(out.stock, 1000);
    assert_int_equal(out.segments, 20);
    assert_int_equal(out.mode, SKU_MODE_LOCK);
    assert_int_equal(out.hold_ms, 0);

    b = "{\"stock\":3,\"segments\":7,\"mode\":\"atomic\",\"hold_ms\":20}";
    assert_int_equal(api_parse_sku_config(b, strlen(b), false, &out, rid, &err), 0);
    assert_int_equal(out.stock, 3);
    assert_int_equal(out.segments, 7);
    assert_int_equal(out.mode, SKU_MODE_ATOMIC);
    assert_int_equal(out.hold_ms, 20);
}

/* The durability setting is the default of a body without "durability"; a body that
 * names one wins over it either way. */
static void sku_durability_default(void **state)
{
    (void)state;
    struct sku_config out;
    char rid[SEG_NAME_MAX + 1];
    struct api_parse_error err;
    const char *b = "{\"stock\":1}";
    assert_int_equal(api_parse_sku_config(b, strlen(b), false, &out, rid, &err), 0);
    assert_false(out.replicated);
    assert_int_equal(api_parse_sku_config(b, strlen(b), true, &out, rid, &err), 0);
    assert_true(out.replicated);

    b = "{\"stock\":1,\"durability\":\"async\"}";
    assert_int_equal(api_parse_sku_config(b, strlen(b), true, &out, rid, &err), 0);
    assert_false(out.replicated);
    b = "{\"stock\":1,\"durability\":\"replicated\"}";
    assert_int_equal(api_parse_sku_config(b, strlen(b), false, &out, rid, &err), 0);
    assert_true(out.replicated);

    /* A bad value is refused whatever the default. */
    b = "{\"stock\":1,\"durability\":\"sync\"}";
    assert_int_equal(api_parse_sku_config(b, strlen(b), true, &out, rid, &err), -1);
    assert_string_equal(err.code, "invalid_field");
    assert_non_null(strstr(err.detail, "durability"));
}

static void run_simulate_case(const struct body_case *c)
{
    struct api_sim_body out;
    struct api_parse_error err = {NULL, ""};
    int rc = api_parse_simulate(c->body, strlen(c->body), &out, &err);
    check_case(c, rc, &err);
}

static void simulate_validation_and_defaults(void **state)
{
    (void)state;
    static const struct body_case cases[] = {
        {"{\"orders\":1}", NULL, NULL},
        {"{\"orders\":1000000,\"concurrency\":64,\"qty\":1000000}", NULL, NULL},
        {"{}", "invalid_field", "orders"},
        {"{\"orders\":0}", "invalid_field", "orders"},
        {"{\"orders\":1000001}", "invalid_field", "orders"},
        {"{\"orders\":\"5\"}", "invalid_field", "orders"},
        {"{\"orders\":5,\"concurrency\":0}", "invalid_field", "concurrency"},
        {"{\"orders\":5,\"concurrency\":65}", "invalid_field", "concurrency"},
        {"{\"orders\":5,\"qty\":0}", "invalid_field", "qty"},
        {"{\"orders\":5,\"qty\":1.0}", "invalid_field", "qty"},
        {"{\"orders\":5,\"rate\":10}", "invalid_field", "rate"},
        {"{\"orders\":5,\"orders\":6}", "bad_json", NULL},
        {"[5]", "bad_json", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_simulate_case(&cases[i]);
    struct api_sim_body out;
    struct api_parse_error err;
    const char *b = "{\"orders\":400}";
    assert_int_equal(api_parse_simulate(b, strlen(b), &out, &err), 0);
    assert_int_equal(out.orders, 400);
    assert_int_equal(out.concurrency, API_SIM_CONCURRENCY_DEFAULT);
    assert_int_equal(out.qty, 1);
}

static void details_are_printable(void **state)
{
    (void)state;
    /* A client-chosen field name is echoed; control and non-ASCII bytes are masked. */
    const char *b = "{\"a\\n\\u00e9\":1}";
    struct api_order_body out;
    struct api_parse_error err;
    assert_int_equal(api_parse_order(b, strlen(b), &out, &err), -1);
    assert_string_equal(err.code, "invalid_field");
    for (const char *p = err.detail; *p; p++)
        assert_true(*p >= 0x20 && *p < 0x7f);
}

static void path_names(void **state)
{
    (void)state;
    struct api_parse_error err;
    assert_int_equal(api_parse_name("sku", "tv-1", &err), 0);
    assert_int_equal(api_parse_name("sku", "", &err), -1);
    assert_string_equal(err.code, "invalid_field");
    assert_int_equal(strncmp(err.detail, "sku", 3), 0);
    assert_int_equal(api_parse_name("order_id", "a b", &err), -1);
    assert_int_equal(strncmp(err.detail, "order_id", 8), 0);
}

static void content_types(void **state)
{
    (void)state;
    assert_true(api_is_json_content_type("application/json"));
    assert_true(api_is_json_content_type("Application/JSON"));
    assert_true(api_is_json_content_type("application/json; charset=utf-8"));
    assert_true(api_is_json_content_type("application/json;charset=UTF-8"));
    assert_true(api_is_json_content_type(" application/json "));
    assert_false(api_is_json_content_type(NULL));
    assert_false(api_is_json_content_type(""));
    assert_false(api_is_json_content_type("text/plain"));
    assert_false(api_is_json_content_type("application/jsonx"));
    assert_false(api_is_json_content_type("application/json-patch+json"));
    assert_false(api_is_json_content_type("application/x-www-form-urlencoded"));
}

static void bearer_tokens(void **state)
{
    (void)state;
    assert_true(api_bearer_matches("Bearer s3cret", "s3cret"));
    assert_true(api_bearer_matches("bearer s3cret", "s3cret"));
    assert_false(api_bearer_matches("Bearer s3cre", "s3cret"));
    assert_false(api_bearer_matches("Bearer s3cretX", "s3cret"));
    assert_false(api_bearer_matches("Bearer S3cret", "s3cret"));
    assert_false(api_bearer_matches("Bearer ", "s3cret"));
    assert_false(api_bearer_matches("Basic s3cret", "s3cret"));
    assert_false(api_bearer_matches("s3cret", "s3cret"));
    assert_false(api_bearer_matches(NULL, "s3cret"));
    assert_false(api_bearer_matches("Bearer ", ""));
}

static void page_parameters(void **state)
{
    (void)state;
    struct api_page pg;
    struct api_parse_error err;
    assert_int_equal(api_parse_page(NULL, NULL, &pg, &err), 0);
    assert_int_equal(pg.limit, API_PAGE_LIMIT_DEFAULT);
    assert_string_equal(pg.after, "");
    assert_int_equal(api_parse_page("1", NULL, &pg, &err), 0);
    assert_int_equal(pg.limit, 1);
    assert_int_equal(api_parse_page("1000", NULL, &pg, &err), 0);
    assert_int_equal(pg.limit, 1000);
    static const char *bad_limits[] = {"",
                                       "0",
                                       "1001",
                                       "-1",
                                       "+1",
                                       " 1",
                                       "1 ",
                                       "1e2",
                                       "0x10",
                                       "00001",
                                       "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_limits / sizeof bad_limits[0]; i++) {
        if (api_parse_page(bad_limits[i], NULL, &pg, &err) != -1)
            fail_msg("limit '%s' accepted", bad_limits[i]);
        assert_string_equal(err.code, "invalid_field");
    }

    /* A cursor round-trips every name, the longest too. */
    char name[SEG_NAME_MAX + 1], cursor[API_CURSOR_MAX];
    memset(name, 'z', SEG_NAME_MAX);
    name[SEG_NAME_MAX] = '\0';
    const char *names[] = {"a", "tv", "A-1_b.c", name};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        api_page_cursor(names[i], cursor);
        assert_int_equal(strlen(cursor), 2 * strlen(names[i]));
        assert_int_equal(api_parse_page("5", cursor, &pg, &err), 0);
        assert_string_equal(pg.after, names[i]);
    }
    assert_int_equal(api_parse_page(NULL, "7476", &pg, &err), 0); /* "tv" */
    assert_string_equal(pg.after, "tv");
    assert_int_equal(api_parse_page(NULL, "7A7A", &pg, &err), 0);
    assert_string_equal(pg.after, "zz");
    char longer[2 * SEG_NAME_MAX + 3];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0'; /* 130 hex digits: one name too long */
    const char *bad_cursors[] = {"",     "7",    "747",  "zz",  "2f2f",
                                 "0020", "7400", "74 6", longer};
    for (size_t i = 0; i < sizeof bad_cursors / sizeof bad_cursors[0]; i++) {
        if (api_parse_page(NULL, bad_cursors[i], &pg, &err) != -1)
            fail_msg("cursor '%s' accepted", bad_cursors[i]);
        assert_string_equal(err.code, "invalid_field");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(order_validation_table),
        cmocka_unit_test(order_values_and_defaults),
        cmocka_unit_test(order_fast_path),
        cmocka_unit_test(name_length_limits),
        cmocka_unit_test(sku_validation_table),
        cmocka_unit_test(sku_values_and_defaults),
        cmocka_unit_test(sku_durability_default),
        cmocka_unit_test(simulate_validation_and_defaults),
        cmocka_unit_test(reservation_fast_path),
        cmocka_unit_test(details_are_printable),
        cmocka_unit_test(path_names),
        cmocka_unit_test(content_types),
        cmocka_unit_test(bearer_tokens),
        cmocka_unit_test(page_parameters),
    };
    return cmocka_run_group_tests_name("parse", tests, NULL, NULL);
}
