/* routes.c -- the route table; matching, auth and validation before any Redis call. */
#include "api/routes.h"

#include <string.h>

#include "api/admin.h"
#include "api/events.h"
#include "api/metrics.h"
#include "api/openapi.h"
#include "api/orders.h"
#include "api/reservations.h"
#include "api/simulate.h"
#include "api/ui_embed.h"

#define B API_ROUTE_BACKEND
#define A API_ROUTE_ADMIN
#define S API_ROUTE_SLOW
#define W API_ROUTE_WRITE
#define P API_ROUTE_PAGED

static const struct api_route routes[] = {
    /* method, pattern, name, flags, parse, handle, fast, start */
    {"POST", "/orders", NULL, B, api_orders_parse, NULL, api_orders_fast,
     api_orders_start},
    {"GET", "/orders/{}", "order_id", B, NULL, api_orders_get, NULL, NULL},
    {"DELETE", "/orders/{}", "order_id", B | S, NULL, api_orders_cancel, NULL, NULL},
    {"POST", "/reservations", NULL, B, api_resv_parse, NULL, api_resv_fast,
     api_resv_start_place},
    {"GET", "/reservations/{}", "reservation_id", B, NULL, api_resv_get, NULL, NULL},
    {"DELETE", "/reservations/{}", "reservation_id", B, NULL, api_resv_release, NULL,
     NULL},
    {"POST", "/reservations/{}/confirm", "reservation_id", B, NULL, NULL, api_resv_fast,
     api_resv_start_confirm},
    {"GET", "/admin/skus", NULL, A | B | P, NULL, api_admin_sku_list, NULL, NULL},
    {"GET", "/admin/skus/{}", "sku", A | B, NULL, api_admin_sku_get, NULL, NULL},
    {"PUT", "/admin/skus/{}", "sku", A | B | W, api_admin_parse_sku, api_admin_sku_put,
     NULL, NULL},
    {"DELETE", "/admin/skus/{}", "sku", A | B | W, NULL, api_admin_sku_delete, NULL,
     NULL},
    {"POST", "/admin/skus/{}/restock", "sku", A | B | S | W, api_admin_parse_restock,
     api_admin_restock, NULL, NULL},
    {"POST", "/admin/skus/{}/rebalance", "sku", A | B | S | W, NULL, api_admin_rebalance,
     NULL, NULL},
    {"GET", "/admin/skus/{}/reconcile", "sku", A | B, NULL, api_admin_reconcile, NULL,
     NULL},
    {"GET", "/admin/stats", NULL, A, NULL, api_admin_stats, NULL, NULL},
    {"GET", "/livez", NULL, 0, NULL, api_livez, NULL, NULL},
    {"GET", "/metrics", NULL, A | API_ROUTE_METRICS, NULL, api_metrics, NULL, NULL},
    {"GET", "/healthz", NULL, B, NULL, api_healthz, NULL, NULL},
    /* The dashboard (api/ui_embed.h, api/events.h, api/simulate.h). */
    {"GET", "/", NULL, 0, NULL, api_ui_get, NULL, NULL},
    {"GET", "/ui/{}", "file", 0, NULL, api_ui_get, NULL, NULL},
    {"GET", "/admin/events", NULL, API_ROUTE_STREAM, NULL, api_events_unrouted, NULL,
     NULL},
    {"POST", "/admin/events/ticket", NULL, A, NULL, api_events_ticket, NULL, NULL},
    {"POST", "/admin/skus/{}/simulate", "sku", A | B, api_sim_parse, api_sim_start, NULL,
     NULL},
    {"GET", "/admin/skus/{}/simulate", "sku", A, NULL, api_sim_get, NULL, NULL},
    {"DELETE", "/admin/skus/{}/simulate", "sku", A, NULL, api_sim_stop, NULL, NULL},
    /* This API's OpenAPI description (api/openapi.h). */
    {"GET", "/openapi.json", NULL, 0, NULL, api_openapi_get, NULL, NULL},
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))
_Static_assert(NROUTES <= API_ROUTES_MAX, "raise API_ROUTES_MAX");

const struct api_route *api_routes(size_t *n)
{
    *n = NROUTES;
    return routes;
}

/* Match `path` against `pattern`; on a match copy the "{}" segment (at most
 * `cap` - 1 bytes; a longer one is cut, which makes it an invalid name). */
static bool match(const char *pattern, const char *path, char *name, size_t cap)
{
    name[0] = '\0';
    while (*pattern != '\0') {
        if (pattern[0] == '{' && pattern[1] == '}') {
            size_t n = strcspn(path, "/");
            if (n == 0)
                return false;
            size_t k = n < cap - 1 ? n : cap - 1;
            memcpy(name, path, k);
            name[k] = '\0';
            path += n;
            pattern += 2;
        } else if (*pattern++ != *path++) {
            return false;
        }
    }
    return *path == '\0';
}

/* Append `method` to the comma-separated list `allow` (of API_HEADER_VALUE_MAX). */
static void allow_add(char *allow, const char *method)
{
    if (strlen(allow) + strlen(method) + 3 > API_HEADER_VALUE_MAX)
        return;
    if (allow[0] != '\0')
        strcat(allow, ", ");
    strcat(allow, method);
}

/* True when HEAD runs `route`: a GET with a body of known length. Not an event
 * stream: its length is unknown, and libmicrohttpd 0.9.75 answers HEAD with such a
 * (chunked) response by sending the terminating chunk after the head anyway. */
static bool head_runs(const struct api_route *route)
{
    return strcmp(route->method, "GET") == 0 && !(route->flags & API_ROUTE_STREAM);
}

/* True when a request with `method` runs `route`: its own method, or HEAD for GET. */
static bool method_runs(const char *method, const struct api_route *route)
{
    return strcmp(route->method, method) == 0 ||
           (strcmp(method, "HEAD") == 0 && head_runs(route));
}

/* True when the request may run `route`: it needs no token, or no admin token is
 * set, or it shows one that opens the route. */
static bool authorised(const struct api_route *route, const struct api_request *req,
                       const struct api_tokens *tokens)
{
    const char *admin = tokens != NULL ? tokens->admin : NULL;
    const char *metrics = tokens != NULL ? tokens->metrics : NULL;
    if (!(route->flags & API_ROUTE_ADMIN) || admin == NULL || admin[0] == '\0')
        return true;
    if (api_bearer_matches(req->authorization, admin))
        return true;
    return (route->flags & API_ROUTE_METRICS) && metrics != NULL && metrics[0] != '\0' &&
           api_bearer_matches(req->authorization, metrics);
}

const struct api_route *api_route_prepare(struct api_request *req,
                                          const struct api_tokens *tokens,
                                          struct api_reply *rep)
{
    const struct api_route *route = NULL;
    char allow[API_HEADER_VALUE_MAX] = "";
    for (size_t i = 0; i < NROUTES && route == NULL; i++) {
        if (!match(routes[i].pattern, req->path, req->name, sizeof(req->name)))
            continue;
        if (method_runs(req->method, &routes[i])) {
            route = &routes[i];
        } else {
            allow_add(allow, routes[i].method);
            if (head_runs(&routes[i]))
                allow_add(allow, "HEAD");
        }
    }
    if (route == NULL && allow[0] == '\0') {
        api_reply_error(rep, 404, "not_found", "no such resource: %.100s", req->path);
        return NULL;
    }
    if (route == NULL) {
        api_reply_error(rep, 405, "method_not_allowed",
                        "%.16s is not allowed here; use %s", req->method, allow);
        api_reply_header(rep, "Allow", allow);
        return NULL;
    }

    if (!authorised(route, req, tokens)) {
        api_reply_error(rep, 401, "unauthorized",
                        "the admin API needs Authorization: Bearer <token>");
        api_reply_header(rep, "WWW-Authenticate", "Bearer");
        return NULL;
    }

    struct api_parse_error perr;
    if (route->name != NULL && api_parse_name(route->name, req->name, &perr) != 0) {
        api_reply_error(rep, 400, perr.code, "%s", perr.detail);
        return NULL;
    }

    if (route->parse != NULL) {
        if (!api_is_json_content_type(req->content_type)) {
            api_reply_error(rep, 415, "unsupported_media_type",
                            "the body must be JSON with Content-Type: application/json");
            return NULL;
        }
        if (route->parse(req, &perr) != 0) {
            api_reply_error(rep, 400, perr.code, "%s", perr.detail);
            return NULL;
        }
    }
    if ((route->flags & API_ROUTE_PAGED) &&
        api_parse_page(req->limit, req->cursor, &req->in.page, &perr) != 0) {
        api_reply_error(rep, 400, perr.code, "%s", perr.detail);
        return NULL;
    }
    if ((route->flags & API_ROUTE_WRITE) &&
        api_parse_request_id("request_id", req->idempotency_key, req->request_id,
                             &perr) != 0) {
        api_reply_error(rep, 400, perr.code, "%s", perr.detail);
        return NULL;
    }
    return route;
}
