/* metrics.h -- GET /metrics: this process's counters in Prometheus text format, and
 * the per-route HTTP counters the server feeds.
 *
 * Families (`promtool check metrics` passes on all of them; tests/it_metrics.c):
 *   inventory_build_info{version,revision}          1; revision from -DINVENTORYD_COMMIT
 *   inventory_orders_total{outcome}                 orders by outcome (stats.h)
 *   inventory_<counter>_total                       every other stats.h counter
 *   inventory_order_seconds, inventory_lock_wait_seconds      histograms (stats.h)
 *   inventory_sku_orders_total{sku,outcome}         per SKU this process served, of
 *                                                   the SKUs shown (below)
 *   inventory_sku_remaining, _sold, _initial, _locks_held {sku}, and
 *   inventory_segment_stock{sku,segment}            what Redis holds, of the SKUs shown
 *   inventory_sku_gauges_age_seconds                since those were read in full
 *   inventory_store_up{store}                       see below; store="redis" or
 * "postgres" inventory_redis_up                              the same, on the Redis store
 * only inventory_http_requests_total{method,route,code}    code is the class:
 * "2xx".."5xx" inventory_http_request_duration_seconds{method,route}   histogram, headers
 * in to reply queued process_cpu_seconds_total, process_start_time_seconds,
 * process_resident_memory_bytes, process_virtual_memory_bytes, process_open_fds,
 * process_max_fds   (/proc/self) `route` is the route's pattern ("/orders/{}"), never the
 * raw path, so the number of series is bounded; requests refused before a route was
 * chosen (404, 405, 401, 400, 413) are counted under method="", route="unmatched". A
 * series appears once it has counted something.
 *
 * inventory_store_up (and inventory_redis_up, its older name, on Redis): 1 when the
 * most recent request that called the store -- Redis or PostgreSQL -- (one whose
 * handler ran on a pool worker: orders, the admin SKU calls, GET /healthz, which sends
 * a PING) ended within the last API_REDIS_UP_WINDOW_S seconds and the store answered it;
 * 0 when it failed as backend_unavailable, or when no such request ended within the
 * window (the last known state is too old to vouch for), as at start. A 503 busy or
 * shutting_down says nothing either way. A readiness probe on /healthz keeps the
 * value fresh on an idle instance.
 *
 * The SKUs shown: at most metrics_sku_limit of them, those with the most orders this
 * process answered first (api/gauges.h), whose stock gauges a background thread reads
 * from Redis about once a second while /metrics is scraped; per-segment stock only
 * for SKUs of at most metrics_segments_max segments. So the number of series is
 * bounded whatever the catalogue, and a SKU deleted through this process leaves the
 * scrape at once (one deleted elsewhere, at the next refresh).
 *
 * The route runs inline on the event loop and never calls Redis: a scrape costs no
 * round trip, cannot hang with Redis and takes no worker from order lookups. When an
 * admin token is configured it needs it (Authorization: Bearer), as the /admin/
 * routes do. Counters are this process's, as Prometheus expects of each instance.
 */
#ifndef API_METRICS_H
#define API_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "api/reply.h"
#include "api/routes.h"

#define API_REDIS_UP_WINDOW_S 60
#define API_HTTP_BUCKETS 16 /* latency buckets, 100 us .. 10 s, plus +Inf */
#define API_HTTP_CLASSES 4  /* 2xx, 3xx, 4xx, 5xx (anything else counts as 5xx) */

/* Per-route request counters; row API_ROUTES_MAX is "unmatched". Zeroed memory is
 * the initial state (the server embeds one in its calloc'd struct). */
struct api_http_stats {
    _Atomic long long requests[API_ROUTES_MAX + 1][API_HTTP_CLASSES];
    _Atomic long long bucket[API_ROUTES_MAX + 1][API_HTTP_BUCKETS + 1];
    _Atomic long long sum_us[API_ROUTES_MAX + 1];
    _Atomic long long redis_ok_us;   /* CLOCK_MONOTONIC of the last request Redis
                                        answered; 0: none yet */
    _Atomic long long redis_fail_us; /* ... of the last backend_unavailable */
};

/* Count one reply about to be sent: `route` (NULL when the request was refused
 * before one was chosen), its status and the time since `started` (CLOCK_MONOTONIC,
 * when the request's headers were in). `on_worker`: the handler ran on a pool worker,
 * so it called Redis, and the reply says whether Redis answered (inventory_redis_up).
 * Lock-free; any thread. */
void api_http_observe(struct api_http_stats *h, const struct api_route *route,
                      const struct api_reply *rep, const struct timespec *started,
                      bool on_worker);

/* The handler of GET /metrics. */
void api_metrics(const struct api_ctx *ctx, struct api_request *req,
                 struct api_reply *rep);

#endif
