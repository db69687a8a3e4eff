/* admin.h -- SKU administration, counters and health endpoints.
 *
 *   PUT    /admin/skus/{sku}  create (201, Location) or reset (200) (sku_put), then
 *                             answer as GET does; a body without "durability" gets
 *                             the durability setting's. What it may replace: no
 *                             header, create only (409 sku_exists); If-None-Match: *
 *                             create only (412 precondition_failed); If-Match: the
 *                             ETag, that version (or *: any; else 412); ?reset=true
 *                             anything. A bad condition is 400 invalid_field.
 *   GET    /admin/skus/{sku}  ETag "<epoch>.<gen>" (sku.h: the SKU's version; so
 *                             on every answer that reads as GET does);
 *                             {"sku","segments","mode","hold_ms","rebalance",
 *                             "durability","initial",
 *                             "remaining","sold","orders","segment_stock",
 *                             "segment_sold","segment_locked","locks_held"};
 *                             404 unknown_sku
 *   DELETE /admin/skus/{sku}  {"sku": name, "deleted": true}; 404 unknown_sku
 *   POST   /admin/skus/{sku}/restock   {"qty": n}: spread n more units (sku_restock),
 *                             then answer as GET does; 503 busy when the locks
 *                             could not be had within lock_wait_ms
 *   POST   /admin/skus/{sku}/rebalance even the remaining stock out (sku_rebalance),
 *                             then answer as GET does
 *   GET    /admin/skus        {"skus": [names, sorted], "next_cursor": cursor|null}:
 *                             one page (?limit, ?cursor: api_parse_page)
 *   GET    /admin/stats       every stats.h counter by stat_name(), plus uptime_s
 *   GET    /livez             {"status":"ok"}, never touches Redis
 *   GET    /healthz           PING: 200 {"status":"ok","redis":"up"} or 503
 *                             {"status":"degraded","redis":"down","error":...}
 * /admin/stats and /livez run inline; the rest on a pool worker.
 */
#ifndef API_ADMIN_H
#define API_ADMIN_H

#include <jansson.h>

#include "api/routes.h"
#include "segments/sku.h"
#include "segments/stats.h"

/* The body of GET /admin/skus/{sku} for `st` (new reference; also what each SKU of
 * an event stream carries, api/events.h). */
json_t *api_admin_sku_json(const char *sku, const struct sku_status *st);

/* The counters of GET /admin/stats, by stat_name(), without uptime_s (new
 * reference). */
json_t *api_admin_stats_json(const long long counters[STAT__COUNT]);

/* Body parser for PUT /admin/skus/{sku}: fills req->in.sku, and from If-Match,
 * If-None-Match and ?reset req->replace, req->version and req->create_only_asked. */
int api_admin_parse_sku(struct api_request *req, struct api_parse_error *err);

void api_admin_sku_put(const struct api_ctx *ctx, struct api_request *req,
                       struct api_reply *rep);
void api_admin_sku_get(const struct api_ctx *ctx, struct api_request *req,
                       struct api_reply *rep);
void api_admin_sku_delete(const struct api_ctx *ctx, struct api_request *req,
                          struct api_reply *rep);
int api_admin_parse_restock(struct api_request *req, struct api_parse_error *err);
void api_admin_restock(const struct api_ctx *ctx, struct api_request *req,
                       struct api_reply *rep);
/* GET /admin/skus/{sku}/reconcile: the SKU's remaining and sold in the store and in
 * the ledger of this epoch, and their `drift` (0 once the sink caught up); 409
 * `no_ledger` without one (segments/ledger.h). */
void api_admin_reconcile(const struct api_ctx *ctx, struct api_request *req,
                         struct api_reply *rep);
void api_admin_rebalance(const struct api_ctx *ctx, struct api_request *req,
                         struct api_reply *rep);
void api_admin_sku_list(const struct api_ctx *ctx, struct api_request *req,
                        struct api_reply *rep);
void api_admin_stats(const struct api_ctx *ctx, struct api_request *req,
                     struct api_reply *rep);
void api_livez(const struct api_ctx *ctx, struct api_request *req, struct api_reply *rep);
void api_healthz(const struct api_ctx *ctx, struct api_request *req,
                 struct api_reply *rep);

#endif
