/* test_openapi.c -- the compiled-in OpenAPI document against the route table: the
 * same paths and methods both ways, the path parameters' names, security by route
 * flags and the page parameters of the list routes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/openapi.h"
#include "api/routes.h"

static const char *const methods[] = {"get",     "put",  "post",  "delete",
                                      "options", "head", "patch", "trace"};

static json_t *load(void)
{
    const struct embed_file *f = embed_find(api_openapi_files, "openapi.json");
    assert_non_null(f);
    json_error_t e;
    json_t *doc = json_loadb((const char *)f->data, f->len, JSON_REJECT_DUPLICATES, &e);
    if (doc == NULL)
        fail_msg("openapi.json line %d: %s", e.line, e.text);
    return doc;
}

/* `path` with every "{name}" as "{}" (the route table's form) into `out`; the last
 * name into `name` ("" when none). */
static void pattern_of(const char *path, char *out, size_t cap, char *name, size_t ncap)
{
    size_t n = 0;
    name[0] = '\0';
    for (const char *p = path; *p != '\0' && n + 3 < cap; p++) {
        if (*p == '{') {
            const char *end = strchr(p, '}');
            assert_non_null(end);
            snprintf(name, ncap, "%.*s", (int)(end - p - 1), p + 1);
            out[n++] = '{';
            out[n++] = '}';
            p = end;
        } else {
            out[n++] = *p;
        }
    }
    out[n] = '\0';
}

/* The document's path item for route pattern `pattern`, or NULL; its "{}" name into
 * `name`. */
static json_t *path_item(json_t *doc, const char *pattern, char *name, size_t ncap)
{
    const char *key;
    json_t *item;
    json_object_foreach(json_object_get(doc, "paths"), key, item)
    {
        char pat[256];
        pattern_of(key, pat, sizeof pat, name, ncap);
        if (strcmp(pat, pattern) == 0)
            return item;
    }
    return NULL;
}

static void lower(const char *in, char *out, size_t cap)
{
    size_t i = 0;
    for (; in[i] != '\0' && i + 1 < cap; i++)
        out[i] = (char)tolower((unsigned char)in[i]);
    out[i] = '\0';
}

static void every_route_is_described(void **state)
{
    (void)state;
    json_t *doc = load();
    assert_non_null(json_object_get(doc, "openapi"));
    assert_int_equal(
        strncmp(json_string_value(json_object_get(doc, "openapi")), "3.1.", 4), 0);
    size_t n;
    const struct api_route *routes = api_routes(&n);
    for (size_t i = 0; i < n; i++) {
        const struct api_route *rt = &routes[i];
        char name[64], method[16];
        json_t *item = path_item(doc, rt->pattern, name, sizeof name);
        if (item == NULL)
            fail_msg("route %s %s: no such path in openapi.json", rt->method,
                     rt->pattern);
        lower(rt->method, method, sizeof method);
        json_t *op = json_object_get(item, method);
        if (op == NULL)
            fail_msg("route %s %s: no %s operation in openapi.json", rt->method,
                     rt->pattern, method);
        if (rt->name != NULL && strcmp(name, rt->name) != 0)
            fail_msg("route %s %s: the path parameter is {%s}, the table says %s",
                     rt->method, rt->pattern, name, rt->name);
        json_t *responses = json_object_get(op, "responses");
        if (json_object_get(responses, "200") == NULL &&
            json_object_get(responses, "201") == NULL &&
            json_object_get(responses, "202") == NULL)
            fail_msg("route %s %s: no 2xx response described", rt->method, rt->pattern);

        /* Security follows the flags: admin routes take the admin token (the metrics
         * route the metrics token too), the others none. */
        json_t *sec = json_object_get(op, "security");
        assert_true(json_is_array(sec));
        bool admin = false, metrics = false;
        size_t k;
        json_t *req;
        json_array_foreach(sec, k, req)
        {
            admin |= json_object_get(req, "adminToken") != NULL;
            metrics |= json_object_get(req, "metricsToken") != NULL;
        }
        bool want_admin = (rt->flags & API_ROUTE_ADMIN) || (rt->flags & API_ROUTE_STREAM);
        if (admin != want_admin || metrics != ((rt->flags & API_ROUTE_METRICS) != 0))
            fail_msg("route %s %s: security %s does not match its flags %#x", rt->method,
                     rt->pattern, json_dumps(sec, JSON_COMPACT), rt->flags);

        /* A list route takes limit and cursor. */
        if (rt->flags & API_ROUTE_PAGED) {
            char *text = json_dumps(json_object_get(op, "parameters"), JSON_COMPACT);
            assert_non_null(text);
            assert_non_null(strstr(text, "#/components/parameters/Limit"));
            assert_non_null(strstr(text, "#/components/parameters/Cursor"));
            free(text);
        }
    }
    json_decref(doc);
}

static void nothing_described_that_the_table_lacks(void **state)
{
    (void)state;
    json_t *doc = load();
    size_t n;
    const struct api_route *routes = api_routes(&n);
    const char *key;
    json_t *item;
    json_object_foreach(json_object_get(doc, "paths"), key, item)
    {
        char pat[256], name[64];
        pattern_of(key, pat, sizeof pat, name, sizeof name);
        for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
            if (json_object_get(item, methods[m]) == NULL)
                continue;
            bool found = false;
            for (size_t i = 0; i < n && !found; i++) {
                char method[16];
                lower(routes[i].method, method, sizeof method);
                found = strcmp(routes[i].pattern, pat) == 0 &&
                        strcmp(method, methods[m]) == 0;
            }
            if (!found)
                fail_msg("openapi.json describes %s %s, which the route table lacks",
                         methods[m], key);
        }
    }
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_route_is_described),
        cmocka_unit_test(nothing_described_that_the_table_lacks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
