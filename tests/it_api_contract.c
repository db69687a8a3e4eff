/* it_api_contract.c -- the API contract over HTTP: GET /openapi.json (served without a
 * token, and valid OpenAPI 3.1 by an npm validator), cursor pagination of GET
 * /admin/skus, and RFC 9457 problem details for clients that ask for them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tests/harness.h"

#define TOKEN "contract-tok"
#define AUTH "Authorization: Bearer " TOKEN "\r\n"
#define PROBLEM "Accept: application/problem+json\r\n"
#define OPENAPI_DIR "tests/openapi"

static int group_setup(void **state)
{
    const char *args[] = {"--admin-token", TOKEN, NULL};
    struct h_env *h = h_env_start(args);
    *state = h;
    return h == NULL ? -1 : 0;
}

static int group_teardown(void **state)
{
    return h_env_stop(*state);
}

/* GET `path` with the admin token and `extra` header lines (may be NULL). */
static int get(const struct h_env *h, const char *path, const char *extra,
               struct h_resp *r)
{
    char headers[512];
    snprintf(headers, sizeof headers, "%s%s", AUTH, extra != NULL ? extra : "");
    return h_http(h->port, "GET", path, headers, NULL, 0, r);
}

/* ---- the OpenAPI document --------------------------------------------------------- */

static void test_openapi_is_served(void **state)
{
    struct h_env *h = *state;
    struct h_resp r;
    /* No token, although the service has an admin token. */
    assert_int_equal(h_http(h->port, "GET", "/openapi.json", NULL, NULL, 0, &r), 200);
    assert_true(strncasecmp(r.content_type, "application/json", 16) == 0);
    json_t *doc = h_resp_json(&r);
    assert_non_null(doc);
    const char *version = json_string_value(json_object_get(doc, "openapi"));
    assert_non_null(version);
    assert_true(strncmp(version, "3.1.", 4) == 0);
    json_t *paths = json_object_get(doc, "paths");
    assert_non_null(json_object_get(paths, "/admin/skus"));
    assert_non_null(json_object_get(paths, "/openapi.json"));
    assert_non_null(
        json_object_get(json_object_get(doc, "components"), "securitySchemes"));
    json_decref(doc);
    assert_non_null(strcasestr(r.headers, "Cache-Control: no-cache"));
    h_resp_free(&r);
    /* HEAD is checked with every GET route's in it_http.c. */
}

/* Why node cannot validate here, or NULL when it can. */
static const char *validator_missing(void)
{
    const char *argv[] = {"node", "--version", NULL};
    if (h_run_cmd(argv, NULL, 10000, NULL, NULL) != 0)
        return "no node on PATH (Debian: apt-get install nodejs)";
    if (access(OPENAPI_DIR
               "/node_modules/@seriousme/openapi-schema-validator/package.json",
               R_OK) != 0)
        return "no " OPENAPI_DIR "/node_modules (run: npm ci --prefix " OPENAPI_DIR ")";
    return NULL;
}

/* Write `len` bytes of `data` to DIR/NAME.json and add "SCHEMA=that file" to argv. */
static void save(const char *dir, const char *schema, const char *data, size_t len,
                 const char **argv, int *argc, char paths[][1100])
{
    char *p = paths[*argc];
    snprintf(p, 1100, "%s=%s/%d.json", schema, dir, *argc);
    FILE *f = fopen(strchr(p, '=') + 1, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    argv[(*argc)++] = p;
}

/* One real answer of `method path` (with the admin token and `extra` headers, JSON
 * `body` when not NULL), expected `status`, saved for schema `schema`. */
static void sample(const struct h_env *h, const char *method, const char *path,
                   const char *extra, const char *body, int status, const char *schema,
                   const char *dir, const char **argv, int *argc, char paths[][1100])
{
    char headers[512];
    snprintf(headers, sizeof headers, "%s%s%s", AUTH, extra != NULL ? extra : "",
             body != NULL ? "Content-Type: application/json\r\n" : "");
    struct h_resp r;
    h_http(h->port, method, path, headers, body, body != NULL ? strlen(body) : 0, &r);
    if (r.status != status)
        fail_msg("%s %s: %d, expected %d: %s", method, path, r.status, status, r.body);
    save(dir, schema, r.body, r.body_len, argv, argc, paths);
    h_resp_free(&r);
}

/* The document the service serves passes an OpenAPI 3.1 schema validator, and real
 * answers of the service are valid against the schemas it gives for them. */
static void test_openapi_validates(void **state)
{
    struct h_env *h = *state;
    const char *why = validator_missing();
    if (why != NULL) {
        printf("it_api_contract: OpenAPI validation skipped: %s\n", why);
        skip();
    }
    char *dir = h_tempdir("openapi");
    assert_non_null(dir);
    static char paths[24][1100];
    const char *argv[32] = {"node", OPENAPI_DIR "/validate.js"};
    int argc = 2;
    struct h_resp r;
    assert_int_equal(h_http(h->port, "GET", "/openapi.json", NULL, NULL, 0, &r), 200);
    save(dir, "doc", r.body, r.body_len, argv, &argc, paths);
    argv[2] = strchr(argv[2], '=') + 1; /* the document itself, no schema */
    h_resp_free(&r);

    sample(h, "PUT", "/admin/skus/oa-sku", NULL, "{\"stock\": 10, \"segments\": 2}", 201,
           "Sku", dir, argv, &argc, paths);
    sample(h, "PUT", "/admin/skus/oa-sku", NULL, "{\"stock\": 10, \"segments\": 2}", 409,
           "Error", dir, argv, &argc, paths);
    sample(h, "GET", "/admin/skus?limit=1", NULL, NULL, 200, "SkuPage", dir, argv, &argc,
           paths);
    sample(h, "POST", "/orders", NULL, "{\"sku\": \"oa-sku\", \"qty\": 2}", 201, "Order",
           dir, argv, &argc, paths);
    sample(h, "GET", "/admin/skus/oa-missing", NULL, NULL, 404, "Error", dir, argv, &argc,
           paths);
    sample(h, "GET", "/admin/skus/oa-missing", PROBLEM, NULL, 404, "Problem", dir, argv,
           &argc, paths);
    sample(h, "POST", "/admin/skus/oa-sku/simulate", NULL, "{\"orders\": 2}", 202,
           "Simulation", dir, argv, &argc, paths);
    sample(h, "GET", "/admin/stats", NULL, NULL, 200, "Stats", dir, argv, &argc, paths);
    sample(h, "GET", "/healthz", NULL, NULL, 200, "Health", dir, argv, &argc, paths);
    sample(h, "GET", "/livez", NULL, NULL, 200, "Live", dir, argv, &argc, paths);
    sample(h, "POST", "/admin/events/ticket", NULL, NULL, 200, "Ticket", dir, argv, &argc,
           paths);
    sample(h, "GET", "/ui/config.json", NULL, NULL, 200, "UiConfig", dir, argv, &argc,
           paths);
    sample(h, "DELETE", "/admin/skus/oa-sku", NULL, NULL, 200, "Deleted", dir, argv,
           &argc, paths);
    argv[argc] = NULL;

    char *out = NULL, *err = NULL;
    int rc = h_run_cmd(argv, NULL, 60000, &out, &err);
    printf("%s%s", out != NULL ? out : "", err != NULL ? err : "");
    free(out);
    free(err);
    h_rmtree(dir);
    free(dir);
    assert_int_equal(rc, 0);
}

/* ---- pagination of GET /admin/skus ------------------------------------------------ */

/* Walk GET /admin/skus with ?limit=`limit`, appending every name to `all`. Before
 * asking for page `at_page` (1-based), runs `between` (may be NULL). Returns the
 * number of pages; each page holds at most `limit` names, every one but the last
 * exactly `limit`. */
static int walk(const struct h_env *h, int limit, json_t *all, int at_page,
                void (*between)(const struct h_env *))
{
    char cursor[512] = "";
    int pages = 0;
    for (;;) {
        if (pages + 1 == at_page && between != NULL)
            between(h);
        char path[700];
        if (cursor[0] != '\0')
            snprintf(path, sizeof path, "/admin/skus?limit=%d&cursor=%s", limit, cursor);
        else
            snprintf(path, sizeof path, "/admin/skus?limit=%d", limit);
        struct h_resp r;
        assert_int_equal(get(h, path, NULL, &r), 200);
        json_t *j = h_resp_json(&r);
        assert_non_null(j);
        json_t *skus = json_object_get(j, "skus");
        json_t *next = json_object_get(j, "next_cursor");
        assert_true(json_is_array(skus));
        assert_true(next != NULL && (json_is_null(next) || json_is_string(next)));
        assert_true(json_array_size(skus) <= (size_t)limit);
        if (json_is_string(next))
            assert_int_equal(json_array_size(skus), limit);
        json_array_extend(all, skus);
        pages++;
        bool end = json_is_null(next);
        if (!end)
            snprintf(cursor, sizeof cursor, "%s", json_string_value(next));
        json_decref(j);
        h_resp_free(&r);
        if (end)
            return pages;
        assert_true(pages < 1000);
    }
}

static bool has(const json_t *list, const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(list, i,
                       v) if (strcmp(json_string_value(v), name) == 0) return true;
    return false;
}

/* Between pages: delete one SKU not yet listed, add one before the cursor and one
 * after it. */
static void churn(const struct h_env *h)
{
    struct h_resp r;
    assert_int_equal(h_req(h->port, "DELETE", "/admin/skus/pg-07", TOKEN, NULL, &r), 200);
    h_resp_free(&r);
    assert_int_equal(h_put_sku(h->port, TOKEN, "pg-00a", 5, 1, "lock", 0), 0);
    assert_int_equal(h_put_sku(h->port, TOKEN, "pg-99", 5, 1, "lock", 0), 0);
}

static void test_sku_list_pages(void **state)
{
    struct h_env *h = *state;
    char name[32];
    for (int i = 1; i <= 10; i++) {
        snprintf(name, sizeof name, "pg-%02d", i);
        assert_int_equal(h_put_sku(h->port, TOKEN, name, 5, 1, "lock", 0), 0);
    }

    /* The whole list, sorted, as one page of the default size. */
    struct h_resp r;
    assert_int_equal(get(h, "/admin/skus", NULL, &r), 200);
    json_t *j = h_resp_json(&r);
    assert_non_null(j);
    json_t *full = json_deep_copy(json_object_get(j, "skus"));
    assert_true(json_is_null(json_object_get(j, "next_cursor")));
    size_t n = json_array_size(full);
    assert_true(n >= 10);
    for (size_t i = 1; i < n; i++)
        assert_true(strcmp(json_string_value(json_array_get(full, i - 1)),
                           json_string_value(json_array_get(full, i))) < 0);
    json_decref(j);
    h_resp_free(&r);

    /* ?limit=3: pages of 3 that add up to the same list, in the same order. */
    json_t *all = json_array();
    int pages = walk(h, 3, all, 0, NULL);
    assert_int_equal(pages, (int)((n + 2) / 3)); /* the last page says it is the last */
    assert_true(json_equal(all, full));
    json_decref(all);

    /* A SKU created or deleted during the walk: every name present throughout is
     * listed once, in order; the deleted one (not yet reached) is not; the one created
     * past the cursor is. */
    all = json_array();
    walk(h, 2, all, 2, churn);
    size_t m = json_array_size(all);
    for (size_t i = 1; i < m; i++)
        assert_true(strcmp(json_string_value(json_array_get(all, i - 1)),
                           json_string_value(json_array_get(all, i))) < 0);
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(full, i));
        if (strcmp(s, "pg-07") != 0)
            assert_true(has(all, s));
    }
    assert_false(has(all, "pg-07"));
    assert_true(has(all, "pg-99"));
    json_decref(all);
    json_decref(full);
}

/* Without ?limit a page holds 100 names, so the list no longer grows with the
 * catalogue; next_cursor leads on. */
static void test_sku_list_default_limit(void **state)
{
    struct h_env *h = *state;
    char name[32];
    for (int i = 0; i < 101; i++) {
        snprintf(name, sizeof name, "dl-%03d", i);
        assert_int_equal(h_put_sku(h->port, TOKEN, name, 1, 1, "atomic", 0), 0);
    }
    struct h_resp r;
    assert_int_equal(get(h, "/admin/skus", NULL, &r), 200);
    json_t *j = h_resp_json(&r);
    assert_non_null(j);
    assert_int_equal(json_array_size(json_object_get(j, "skus")), 100);
    assert_true(json_is_string(json_object_get(j, "next_cursor")));
    json_decref(j);
    h_resp_free(&r);
    assert_int_equal(get(h, "/admin/skus?limit=1000", NULL, &r), 200);
    j = h_resp_json(&r);
    assert_non_null(j);
    assert_true(json_array_size(json_object_get(j, "skus")) >= 101);
    assert_true(json_is_null(json_object_get(j, "next_cursor")));
    json_decref(j);
    h_resp_free(&r);
}

static void test_sku_list_bad_parameters(void **state)
{
    struct h_env *h = *state;
    static const char *bad[] = {
        "/admin/skus?limit=0",
        "/admin/skus?limit=1001",
        "/admin/skus?limit=-1",
        "/admin/skus?limit=abc",
        "/admin/skus?limit=5x",
        "/admin/skus?limit=",
        "/admin/skus?limit=99999999999999999999",
        "/admin/skus?cursor=",
        "/admin/skus?cursor=zz",
        "/admin/skus?cursor=abc",          /* odd length */
        "/admin/skus?cursor=2f2f",         /* "//": not a SKU name */
        "/admin/skus?limit=2&cursor=0x41", /* not hex */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct h_resp r;
        get(h, bad[i], NULL, &r);
        if (h_expect_error(&r, 400, "invalid_field") != 0)
            fail_msg("%s", bad[i]);
        h_resp_free(&r);
    }
}

/* ---- problem details --------------------------------------------------------------- */

/* 0 when `r` is an RFC 9457 problem of `status` with extension code `code`. */
static void expect_problem(const struct h_resp *r, int status, const char *code)
{
    assert_int_equal(r->status, status);
    assert_string_equal(r->content_type, "application/problem+json");
    json_t *j = h_resp_json(r);
    assert_non_null(j);
    const char *type = json_string_value(json_object_get(j, "type"));
    assert_non_null(type);
    assert_non_null(strstr(type, code));
    assert_non_null(json_string_value(json_object_get(j, "title")));
    assert_non_null(json_string_value(json_object_get(j, "detail")));
    assert_int_equal(h_jint(j, "status"), status);
    assert_string_equal(json_string_value(json_object_get(j, "code")), code);
    assert_null(json_object_get(j, "error"));
    json_decref(j);
}

static void test_problem_details_when_asked(void **state)
{
    struct h_env *h = *state;
    struct h_resp r;
    get(h, "/admin/skus/no-such-sku", PROBLEM, &r);
    expect_problem(&r, 404, "unknown_sku");
    h_resp_free(&r);

    /* The error's headers stay: 401 WWW-Authenticate, 405 Allow. */
    h_http(h->port, "GET", "/admin/stats", PROBLEM, NULL, 0, &r);
    expect_problem(&r, 401, "unauthorized");
    assert_non_null(strcasestr(r.headers, "WWW-Authenticate: Bearer"));
    h_resp_free(&r);
    get(h, "/openapi.json", PROBLEM, &r);
    assert_int_equal(r.status, 200); /* a success is never a problem */
    h_resp_free(&r);
    h_http(h->port, "POST", "/livez", PROBLEM, "", 0, &r);
    expect_problem(&r, 405, "method_not_allowed");
    assert_non_null(strstr(r.allow, "GET"));
    h_resp_free(&r);

    /* Refusals made before any route runs, and a bad page parameter. */
    get(h, "/admin/skus?limit=0", PROBLEM, &r);
    expect_problem(&r, 400, "invalid_field");
    h_resp_free(&r);
    char big[200];
    snprintf(big, sizeof big, "%sContent-Type: application/json\r\n", PROBLEM);
    char *body = malloc(70000);
    assert_non_null(body);
    memset(body, ' ', 70000);
    h_http(h->port, "POST", "/orders", big, body, 70000, &r);
    free(body);
    expect_problem(&r, 413, "payload_too_large");
    h_resp_free(&r);
}

static void test_problem_details_only_when_preferred(void **state)
{
    struct h_env *h = *state;
    static const char *classic[] = {
        NULL,
        "Accept: */*\r\n",
        "Accept: application/json\r\n",
        "Accept: application/json, application/problem+json;q=0.5\r\n",
        "Accept: application/problem+json;q=0\r\n",
        "Accept: application/problem+jsonx\r\n",
    };
    for (size_t i = 0; i < sizeof classic / sizeof classic[0]; i++) {
        struct h_resp r;
        get(h, "/admin/skus/no-such-sku", classic[i], &r);
        if (h_expect_error(&r, 404, "unknown_sku") != 0)
            fail_msg("Accept: %s", classic[i] ? classic[i] : "(none)");
        h_resp_free(&r);
    }
    static const char *problem[] = {
        PROBLEM,
        "Accept: application/json;q=0.9, application/problem+json\r\n",
        "Accept: APPLICATION/Problem+JSON ; charset=utf-8\r\n",
        "Accept: application/problem+json, */*;q=0.1\r\n",
    };
    for (size_t i = 0; i < sizeof problem / sizeof problem[0]; i++) {
        struct h_resp r;
        get(h, "/admin/skus/no-such-sku", problem[i], &r);
        expect_problem(&r, 404, "unknown_sku");
        h_resp_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openapi_is_served),
        cmocka_unit_test(test_openapi_validates),
        cmocka_unit_test(test_sku_list_pages),
        cmocka_unit_test(test_sku_list_default_limit),
        cmocka_unit_test(test_sku_list_bad_parameters),
        cmocka_unit_test(test_problem_details_when_asked),
        cmocka_unit_test(test_problem_details_only_when_preferred),
    };
    return h_exit_status(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
