/* metrics.h -- GET /metrics: the counters and histograms in Prometheus text format.
 *
 *   inventory_orders_total{outcome="confirmed"|...}    orders by outcome
 *   inventory_<counter>_total                          every other stats.h counter
 *   inventory_order_seconds, inventory_lock_wait_seconds   histograms
 *   inventory_sku_orders_total{sku="...",outcome="..."}    per SKU served here
 * Runs inline (no Redis): the numbers are this process's, as Prometheus expects
 * of each instance. Not behind the admin token, as scrapers usually are not.
 */
#ifndef API_METRICS_H
#define API_METRICS_H

#include "api/routes.h"

void api_metrics(const struct api_ctx *ctx, struct api_request *req,
                 struct api_reply *rep);

#endif
