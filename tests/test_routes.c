/* test_routes.c -- routing and the inline checks before any Redis call (api/routes.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "api/routes.h"

static const char *error_code(const struct api_reply *r)
{
    static char code[64];
    json_t *o = json_loads(r->body, 0, NULL);
    assert_non_null(o);
    snprintf(code, sizeof(code), "%s", json_string_value(json_object_get(o, "error")));
    json_decref(o);
    return code;
}

static const char *header(const struct api_reply *r, const char *name)
{
    for (int i = 0; i < r->nheaders; i++)
        if (strcmp(r->headers[i].name, name) == 0)
            return r->headers[i].value;
    return NULL;
}

/* Prepare a request; returns the route (NULL on an error reply, left in *rep). */
static const struct api_route *prep(const char *method, const char *path,
                                    const char *ctype, const char *body, const char *auth,
                                    const char *token, struct api_request *req,
                                    struct api_reply *rep)
{
    memset(req, 0, sizeof(*req));
    api_reply_init(rep);
    req->method = method;
    req->path = path;
    req->content_type = ctype;
    req->authorization = auth;
    req->body = body;
    req->body_len = body ? strlen(body) : 0;
    struct api_tokens tokens = {token, "metrics-tok"};
    return api_route_prepare(req, &tokens, rep);
}

static void expect_error(const char *method, const char *path, const char *ctype,
                         const char *body, const char *auth, const char *token,
                         int status, const char *code)
{
    struct api_request req;
    struct api_reply rep;
    const struct api_route *rt = prep(method, path, ctype, body, auth, token, &req, &rep);
    if (rt != NULL)
        fail_msg("%s %s: routed, want %d %s", method, path, status, code);
    if (rep.status != status || strcmp(error_code(&rep), code) != 0)
        fail_msg("%s %s: got %d %s, want %d %s", method, path, rep.status, rep.body,
                 status, code);
    api_reply_clear(&rep);
}

static void known_routes(void **state)
{
    (void)state;
    static const struct {
        const char *method, *path;
        unsigned flags;
        const char *name;
    } ok[] = {
        {"POST", "/orders", API_ROUTE_BACKEND, ""},
        {"GET", "/orders/o-1", API_ROUTE_BACKEND, "o-1"},
        {"GET", "/admin/skus", API_ROUTE_BACKEND | API_ROUTE_ADMIN, ""},
        {"GET", "/admin/skus/tv", API_ROUTE_BACKEND | API_ROUTE_ADMIN, "tv"},
        {"PUT", "/admin/skus/tv", API_ROUTE_BACKEND | API_ROUTE_ADMIN | API_ROUTE_WRITE,
         "tv"},
        {"DELETE", "/admin/skus/tv",
         API_ROUTE_BACKEND | API_ROUTE_ADMIN | API_ROUTE_WRITE, "tv"},
        {"GET", "/admin/stats", API_ROUTE_ADMIN, ""},
        {"GET", "/livez", 0, ""},
        {"GET", "/healthz", API_ROUTE_BACKEND, ""},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct api_request req;
        struct api_reply rep;
        const char *body = NULL;
        if (strcmp(ok[i].method, "POST") == 0)
            body = "{\"sku\":\"tv\"}";
        if (strcmp(ok[i].method, "PUT") == 0)
            body = "{\"stock\":5}";
        const struct api_route *rt = prep(ok[i].method, ok[i].path, "application/json",
                                          body, NULL, "", &req, &rep);
        if (rt == NULL)
            fail_msg("%s %s not routed: %s", ok[i].method, ok[i].path, rep.body);
        assert_int_equal(rt->flags, ok[i].flags);
        assert_string_equal(req.name, ok[i].name);
        assert_null(rep.body);
    }
}

static void parsed_bodies_reach_the_request(void **state)
{
    (void)state;
    struct api_request req;
    struct api_reply rep;
    assert_non_null(prep("POST", "/orders", "application/json",
                         "{\"sku\":\"tv\",\"qty\":4,\"order_id\":\"x\"}", NULL, NULL,
                         &req, &rep));
    assert_string_equal(req.in.order.sku, "tv");
    assert_int_equal(req.in.order.qty, 4);
    assert_string_equal(req.in.order.order_id, "x");
    assert_non_null(prep("PUT", "/admin/skus/tv", "application/json; charset=utf-8",
                         "{\"stock\":9,\"segments\":3,\"mode\":\"atomic\"}", NULL, NULL,
                         &req, &rep));
    assert_int_equal(req.in.sku.stock, 9);
    assert_int_equal(req.in.sku.segments, 3);
    assert_int_equal(req.in.sku.mode, SKU_MODE_ATOMIC);
}

static void not_found_and_method_not_allowed(void **state)
{
    (void)state;
    /* GET / is the dashboard (api/ui_embed.h): nothing else is there. */
    expect_error("POST", "/", NULL, NULL, NULL, NULL, 405, "method_not_allowed");
    expect_error("GET", "/ui", NULL, NULL, NULL, NULL, 404, "not_found");
    expect_error("GET", "/nope", NULL, NULL, NULL, NULL, 404, "not_found");
    expect_error("GET", "/orders/", NULL, NULL, NULL, NULL, 404, "not_found");
    expect_error("GET", "/orders/a/b", NULL, NULL, NULL, NULL, 404, "not_found");
    expect_error("GET", "/livez/", NULL, NULL, NULL, NULL, 404, "not_found");
    expect_error("GET", "/admin", NULL, NULL, NULL, NULL, 404, "not_found");

    struct api_request req;
    struct api_reply rep;
    assert_null(prep("DELETE", "/orders", NULL, NULL, NULL, NULL, &req, &rep));
    assert_int_equal(rep.status, 405);
    assert_string_equal(error_code(&rep), "method_not_allowed");
    assert_string_equal(header(&rep, "Allow"), "POST");
    api_reply_clear(&rep);

    assert_null(prep("POST", "/admin/skus/tv", NULL, NULL, NULL, NULL, &req, &rep));
    assert_int_equal(rep.status, 405);
    assert_string_equal(header(&rep, "Allow"), "GET, HEAD, PUT, DELETE");
    api_reply_clear(&rep);

    assert_null(prep("PUT", "/livez", NULL, NULL, NULL, NULL, &req, &rep));
    assert_int_equal(rep.status, 405);
    assert_string_equal(header(&rep, "Allow"), "GET, HEAD");
    api_reply_clear(&rep);

    /* HEAD is the GET route of its path (the server leaves the body out); it is
     * nothing on a path without GET, and the method name is case-sensitive. */
    const struct api_route *rt =
        prep("HEAD", "/livez", NULL, NULL, NULL, NULL, &req, &rep);
    assert_non_null(rt);
    assert_string_equal(rt->method, "GET");
    assert_string_equal(rt->pattern, "/livez");
    rt = prep("HEAD", "/orders/A-1", NULL, NULL, NULL, NULL, &req, &rep);
    assert_non_null(rt);
    assert_string_equal(rt->pattern, "/orders/{}");
    assert_string_equal(req.name, "A-1");
    assert_null(prep("HEAD", "/orders", NULL, NULL, NULL, NULL, &req, &rep));
    assert_int_equal(rep.status, 405);
    assert_string_equal(header(&rep, "Allow"), "POST");
    api_reply_clear(&rep);
    assert_null(prep("head", "/livez", NULL, NULL, NULL, NULL, &req, &rep));
    assert_int_equal(rep.status, 405);
    api_reply_clear(&rep);
}

static void admin_token(void **state)
{
    (void)state;
    struct api_request req;
    struct api_reply rep;
    assert_null(prep("GET", "/admin/skus", NULL, NULL, NULL, "tok", &req, &rep));
    assert_int_equal(rep.status, 401);
    assert_string_equal(error_code(&rep), "unauthorized");
    assert_string_equal(header(&rep, "WWW-Authenticate"), "Bearer");
    api_reply_clear(&rep);

    expect_error("GET", "/admin/stats", NULL, NULL, "Bearer nope", "tok", 401,
                 "unauthorized");
    expect_error("DELETE", "/admin/skus/tv", NULL, NULL, "tok", "tok", 401,
                 "unauthorized");
    /* Auth comes before path validation: no probing of names without the token. */
    expect_error("GET", "/admin/skus/bad name", NULL, NULL, NULL, "tok", 401,
                 "unauthorized");

    assert_non_null(
        prep("GET", "/admin/skus", NULL, NULL, "Bearer tok", "tok", &req, &rep));
    /* Non-admin routes never need it. */
    assert_non_null(prep("GET", "/livez", NULL, NULL, NULL, "tok", &req, &rep));
    assert_non_null(prep("GET", "/orders/o1", NULL, NULL, NULL, "tok", &req, &rep));
    /* No token configured: the admin API is open. */
    assert_non_null(prep("GET", "/admin/stats", NULL, NULL, NULL, "", &req, &rep));

    /* The read-only metrics token ("metrics-tok" in prep) opens GET /metrics and
     * nothing else; the admin token opens it too. */
    assert_non_null(
        prep("GET", "/metrics", NULL, NULL, "Bearer metrics-tok", "tok", &req, &rep));
    assert_non_null(prep("GET", "/metrics", NULL, NULL, "Bearer tok", "tok", &req, &rep));
    expect_error("GET", "/metrics", NULL, NULL, NULL, "tok", 401, "unauthorized");
    expect_error("GET", "/metrics", NULL, NULL, "Bearer nope", "tok", 401,
                 "unauthorized");
    expect_error("GET", "/admin/stats", NULL, NULL, "Bearer metrics-tok", "tok", 401,
                 "unauthorized");
    expect_error("GET", "/admin/skus", NULL, NULL, "Bearer metrics-tok", "tok", 401,
                 "unauthorized");
    expect_error("DELETE", "/admin/skus/tv", NULL, NULL, "Bearer metrics-tok", "tok", 401,
                 "unauthorized");
}

static void validation_errors(void **state)
{
    (void)state;
    char longname[SEG_NAME_MAX + 20] = "/orders/";
    memset(longname + 8, 'x', SEG_NAME_MAX + 1);
    longname[8 + SEG_NAME_MAX + 1] = '\0';
    expect_error("GET", longname, NULL, NULL, NULL, NULL, 400, "invalid_field");
    expect_error("GET", "/orders/a b", NULL, NULL, NULL, NULL, 400, "invalid_field");
    expect_error("PUT", "/admin/skus/a{1}", "application/json", "{\"stock\":1}", NULL,
                 NULL, 400, "invalid_field");
    expect_error("POST", "/orders", NULL, "{\"sku\":\"tv\"}", NULL, NULL, 415,
                 "unsupported_media_type");
    expect_error("POST", "/orders", "text/json", "{\"sku\":\"tv\"}", NULL, NULL, 415,
                 "unsupported_media_type");
    expect_error("PUT", "/admin/skus/tv", "application/x-www-form-urlencoded", "stock=1",
                 NULL, NULL, 415, "unsupported_media_type");
    expect_error("POST", "/orders", "application/json", "{", NULL, NULL, 400, "bad_json");
    expect_error("POST", "/orders", "application/json", NULL, NULL, NULL, 400,
                 "bad_json");
    expect_error("POST", "/orders", "application/json", "{\"qty\":1}", NULL, NULL, 400,
                 "invalid_field");
    expect_error("PUT", "/admin/skus/tv", "application/json", "{\"stock\":-1}", NULL,
                 NULL, 400, "invalid_field");
}

/* Admin writes take a request id from the body or the Idempotency-Key header. */
static void request_ids_of_admin_writes(void **state)
{
    (void)state;
    struct api_request req;
    struct api_reply rep;
    const char *json = "application/json";
    assert_non_null(prep("POST", "/admin/skus/tv/restock", json,
                         "{\"qty\":3,\"request_id\":\"r-1\"}", NULL, NULL, &req, &rep));
    assert_string_equal(req.request_id, "r-1");
    memset(&req, 0, sizeof req);
    api_reply_init(&rep);
    req.method = "POST";
    req.path = "/admin/skus/tv/rebalance";
    req.idempotency_key = "k.2";
    assert_non_null(api_route_prepare(&req, NULL, &rep));
    assert_string_equal(req.request_id, "k.2");
    req.idempotency_key = "not valid!";
    req.request_id[0] = '\0';
    assert_null(api_route_prepare(&req, NULL, &rep));
    assert_int_equal(rep.status, 400);
    assert_string_equal(error_code(&rep), "invalid_field");
    api_reply_clear(&rep);
    /* Body and header must agree. */
    memset(&req, 0, sizeof req);
    req.method = "PUT";
    req.path = "/admin/skus/tv";
    req.content_type = json;
    req.body = "{\"stock\":1,\"request_id\":\"a\"}";
    req.body_len = strlen(req.body);
    req.idempotency_key = "b";
    assert_null(api_route_prepare(&req, NULL, &rep));
    assert_int_equal(rep.status, 400);
    api_reply_clear(&rep);
    expect_error("POST", "/admin/skus/tv/restock", json,
                 "{\"qty\":3,\"request_id\":\"\"}", NULL, NULL, 400, "invalid_field");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(known_routes),
        cmocka_unit_test(parsed_bodies_reach_the_request),
        cmocka_unit_test(not_found_and_method_not_allowed),
        cmocka_unit_test(admin_token),
        cmocka_unit_test(validation_errors),
        cmocka_unit_test(request_ids_of_admin_writes),
    };
    return cmocka_run_group_tests_name("routes", tests, NULL, NULL);
}
