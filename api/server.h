/* server.h -- the HTTP front: one libmicrohttpd daemon per event loop, plus worker
 * pools.
 *
 * `threads` event loops (api/loop.h) share one listening socket; each drives its own
 * daemon, which owns the connections it accepted (thousands of idle keep-alive
 * connections cost a socket each, no thread). For each request the loop accumulates
 * the body (at most `max_body_bytes`, else 413 `payload_too_large`) and runs the
 * inline checks of routes.h. An order starts on the loop's engine (segments/engine.h)
 * and its connection is suspended until the engine answers, on the same thread. The
 * other Redis-backed routes go to a worker pool (api/pool.h): a small control pool
 * for the quick calls (healthz, admin reads, order lookups) and a slow one for those
 * that wait for segment locks (cancel, restock, rebalance); the worker runs the
 * handler on its own inv_conn, stores the reply, resumes the connection and wakes
 * the loop, which sends it. Per-request state lives in MHD's con_cls, from the
 * request line (MHD's URI-log callback) to the request-completed callback, which
 * frees it.
 *
 * Before any route runs, the head is checked (400 `bad_header`: HTTP/1.1 without a
 * Host, two Hosts, Content-Lengths that disagree; 414 `uri_too_long`; 431
 * `headers_too_large`; 413 for an announced body over the limit) and the request
 * gets its X-Request-Id (the client's when valid, else 16 random hex characters),
 * which every reply of ours carries. Each finished request writes one access-log
 * line (log_access) from the completed callback. What libmicrohttpd answers by
 * itself, before any of this, is listed in server.c: it is HTML and has no id.
 *
 * The server also owns the dashboard's parts (api/events.h, api/simulate.h): the
 * event-stream publisher thread, whose streams it opens for GET /admin/events
 * (routes flagged API_ROUTE_STREAM), and the simulated-order runs. It owns GET /metrics's
 * per-SKU gauges too (api/gauges.h): their refresher thread, stopped last.
 *
 * Shutdown (api_server_stop): stop accepting connections, tell the simulations to
 * stop, end every event stream (its shutdown event, then the end of the response),
 * drain the pools (every suspended connection is resumed with its reply; a request
 * arriving meanwhile on an open connection gets 503 `shutting_down`), then stop the
 * daemon, join the simulations and free everything.
 */
#ifndef API_SERVER_H
#define API_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "segments/inventory.h"

struct api_server;

/* What the server needs of the configuration; the process fills it (service/main.c
 * from its `struct cfg`, whose checks guarantee the ranges noted here). */
struct api_options {
    const char *bind;         /* numeric IPv4 or IPv6 address; borrowed */
    int port;                 /* 1..65535 */
    int threads;              /* event loops, each with its own daemon; >= 1 */
    int max_connections;      /* open connections, shared out among the loops; >= 1 */
    int connection_timeout_s; /* idle connection timeout; 0 = none */
    int max_body_bytes;       /* larger request bodies get 413; >= 1 */
    /* The admin API's bearer token; NULL or "" leaves it open. Borrowed. */
    const char *admin_token;
    /* A read-only bearer token for GET /metrics alone (the admin token works there
     * too); NULL or "": none. Borrowed. */
    const char *metrics_token;
    int metrics_segments_max; /* GET /metrics: per-segment series up to this many */
    int metrics_sku_limit;    /* GET /metrics: per-SKU series for at most this many
                                 SKUs, 0..API_GAUGES_LIMIT_MAX (api/gauges.h) */
    /* The durability setting: a SKU whose PUT /admin/skus/{sku} body names none is
     * "replicated" when true, "async" when false. */
    bool default_replicated;
    /* The lock services configured (bit 1 << sku_lock, skumode.h) and --lab: what a
     * PUT /admin/skus/{sku} may name ("lock", "fencing": false). */
    unsigned lock_services;
    bool lab;
    /* The domain's own limits (as given to inv_create), to bound the wait at
     * shutdown for the orders in flight: */
    int lock_wait_ms;
    int redis_timeout_ms;
};

/* Start the pools (one inv_conn per worker), the event loops and their daemons on
 * opt->bind:opt->port. `opt` is copied; the strings it points to and `v` are borrowed
 * and must outlive the server. Returns NULL with `err` filled when the address cannot
 * be bound or a thread cannot be started. */
struct api_server *api_server_start(const struct api_options *opt, inv *v, char *err,
                                    size_t errlen);

/* Shut down as described above and free the server. NULL is a no-op. */
void api_server_stop(struct api_server *s);

#endif
