/* routes.h -- the route table and the inline (no Redis) part of every request.
 *
 * A route is a method plus a path pattern, where "{}" stands for one non-empty path
 * segment (a SKU or order id), as in "/orders/{}". api_route_prepare() does everything
 * that needs no Redis, in this order: find the route (unknown path 404 `not_found`,
 * known path with another method 405 `method_not_allowed` plus Allow; HEAD runs the
 * GET route of its path -- the server sends that reply's status and headers without
 * its body -- unless that is an event stream), check the admin token (401
 * `unauthorized` plus WWW-Authenticate), validate the path name (400
 * `invalid_field`), check the Content-Type of a body (415 `unsupported_media_type`),
 * parse the body (400 `bad_json`/`invalid_field`) or, for a list, its ?limit and
 * ?cursor (400 `invalid_field`) and, for admin writes, take the
 * request id from the body or the Idempotency-Key header. The server then runs
 * route->start on the request's event loop when the route has one (POST /orders:
 * the order engine, no thread blocks), else route->handle: on a pool worker with
 * its own inv_conn when the route has API_ROUTE_BACKEND, inline otherwise.
 */
#ifndef API_ROUTES_H
#define API_ROUTES_H

#include <stddef.h>
#include <time.h>

#include "api/parse.h"
#include "api/reply.h"
#include "segments/engine.h"
#include "segments/inventory.h"
#include "segments/sku.h"

struct api_http_stats; /* api/metrics.h */
struct api_events;     /* api/events.h */
struct api_sim;        /* api/simulate.h */
struct api_gauges;     /* api/gauges.h */

/* What a handler may use. */
struct api_ctx {
    inv *inv;                    /* process-wide domain handle (stats) */
    inv_conn *conn;              /* the worker's connection; NULL for inline routes */
    engine *engine;              /* the request's event loop's order engine; NULL on a
                                    pool worker */
    struct timespec started;     /* CLOCK_MONOTONIC at server start (uptime) */
    struct api_http_stats *http; /* the server's request counters (GET /metrics) */
    struct api_events *events;   /* the event streams and their tickets */
    struct api_sim *sim;         /* the simulated-order runs */
    struct api_gauges *gauges;   /* GET /metrics: the per-SKU gauges, kept in memory */
};

/* One request as the handlers see it. The server fills the first group (all
 * borrowed, valid until the reply is sent); api_route_prepare() the rest. */
struct api_request {
    const char *method;
    const char *path;            /* decoded path, no query string */
    const char *content_type;    /* NULL when absent */
    const char *authorization;   /* NULL when absent */
    const char *idempotency_key; /* NULL when absent */
    const char *limit;           /* the ?limit query parameter; NULL when absent */
    const char *cursor;          /* the ?cursor query parameter; NULL when absent */
    const char *if_match;        /* NULL when absent */
    const char *if_none_match;   /* NULL when absent */
    const char *reset;           /* the `reset` query argument; NULL when absent */
    const char *body;            /* NULL or body_len bytes, not NUL-terminated */
    size_t body_len;
    /* The durability setting: a PUT /admin/skus/{sku} body that names none gets
     * "replicated" when true (api_options.default_replicated). */
    bool default_replicated;
    /* PUT /admin/skus/{sku}: the lock services configured (bit 1 << sku_lock; the
     * store's own always), and whether "fencing": false is allowed (--lab). */
    unsigned lock_services;
    bool lab;

    char name[SEG_NAME_MAX + 2]; /* the "{}" path segment, validated; "" when none */
    char request_id[SEG_NAME_MAX + 1]; /* API_ROUTE_WRITE: the body's request_id or
                                          the Idempotency-Key header; "" when none */
    /* The request's X-Request-Id, for logs: the client's header when it is a valid
     * name (1..64 of [A-Za-z0-9_.-]), else 16 random hex characters. Set by the
     * server before api_route_prepare(), echoed in every reply the service writes. */
    char x_request_id[SEG_NAME_MAX + 1];
    union {
        struct api_order_body order;  /* POST /orders */
        struct api_resv_body resv;    /* POST /reservations */
        struct sku_config sku;        /* PUT /admin/skus/{sku} */
        long long restock_qty;        /* POST /admin/skus/{sku}/restock */
        struct api_sim_body simulate; /* POST /admin/skus/{sku}/simulate */
        struct api_page page;         /* API_ROUTE_PAGED: ?limit and ?cursor */
    } in;
    /* PUT /admin/skus/{sku}: which version it may replace (api/admin.h), from
     * If-Match, If-None-Match and ?reset=true */
    enum sku_replace replace;
    struct sku_version version;  /* SKU_REPLACE_VERSION: the If-Match ETag's */
    bool create_only_asked;      /* If-None-Match: * (a refusal is 412, not 409) */
    char sku_lock[SKU_LOCK_MAX]; /* PUT /admin/skus/{sku}: its "lock", "" for none */
};

enum api_route_flags {
    API_ROUTE_BACKEND = 1,  /* needs Redis: run on a pool worker (or `start`) */
    API_ROUTE_ADMIN = 2,    /* needs the admin token when one is configured */
    API_ROUTE_SLOW = 4,     /* may block for lock waits (cancel, restock, rebalance):
                               kept on its own pool so health and admin reads never
                               queue behind them */
    API_ROUTE_WRITE = 8,    /* an admin write: applied once per request id */
    API_ROUTE_STREAM = 16,  /* an event stream: the server opens it with
                               api_events_open() instead of running `handle` */
    API_ROUTE_METRICS = 32, /* with ADMIN: the metrics token is enough too */
    API_ROUTE_PAGED = 64,   /* a list: ?limit and ?cursor are parsed into in.page
                               (400 invalid_field when bad) */
};

/* The bearer tokens of the service; NULL or "" each: not set. */
struct api_tokens {
    const char *admin;   /* every API_ROUTE_ADMIN route; not set: they are open */
    const char *metrics; /* read-only: the API_ROUTE_METRICS routes (GET /metrics) as
                            well as the admin token, so a scraper needs no token that
                            can write */
};

typedef int (*api_parse_fn)(struct api_request *req, struct api_parse_error *err);
typedef void (*api_handler_fn)(const struct api_ctx *ctx, struct api_request *req,
                               struct api_reply *rep);
/* Starts the request on its event loop (ctx->engine), without blocking; calls
 * done(tag) on that loop, later, once `rep` holds the reply. */
typedef void (*api_start_fn)(const struct api_ctx *ctx, struct api_request *req,
                             struct api_reply *rep, void (*done)(void *tag), void *tag);
/* Answers inline, on the HTTP thread, when it can without blocking (true, reply set);
 * false sends the request on to `handle` on a worker. */
typedef bool (*api_fast_fn)(const struct api_ctx *ctx, struct api_request *req,
                            struct api_reply *rep);

struct api_route {
    const char *method;
    const char *pattern; /* e.g. "/admin/skus/{}" */
    const char *name;    /* field name of the "{}" segment for errors, or NULL */
    unsigned flags;
    api_parse_fn parse; /* body parser (POST/PUT), or NULL: body ignored */
    api_handler_fn handle;
    api_fast_fn fast;   /* NULL, or tried inline before a BACKEND route is queued */
    api_start_fn start; /* NULL, or the route runs on the request's event loop (it
                           then has no `handle`) */
};

/* The most routes the table may hold: api/metrics.c keeps counters per route. */
#define API_ROUTES_MAX 32

/* The route table, *n entries; a route's index is its offset in it (static). */
const struct api_route *api_routes(size_t *n);

/* Run the inline checks above on `req`. Returns the route to run, or NULL with the
 * error reply in `rep`. `tokens` (NULL: none set) say which bearer tokens open which
 * routes. */
const struct api_route *api_route_prepare(struct api_request *req,
                                          const struct api_tokens *tokens,
                                          struct api_reply *rep);

#endif
