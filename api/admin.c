/* admin.c -- SKU administration, counters and health: domain calls to JSON. */
#include "api/admin.h"
#include "api/gauges.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/ledger.h"
#include "segments/sku.h"
#include "segments/stats.h"
#include "api/reply.h"
#include "base/xalloc.h"

static int bad_condition(struct api_parse_error *err, const char *detail)
{
    err->code = "invalid_field";
    snprintf(err->detail, sizeof err->detail, "%s", detail);
    return -1;
}

/* One strong entity tag as GET gives it, "<epoch>.<gen>" with the quotes, into *v. */
static bool parse_etag(const char *s, struct sku_version *v)
{
    long long epoch, gen;
    int end = 0;
    if (strlen(s) > 44 || sscanf(s, "\"%lld.%lld\"%n", &epoch, &gen, &end) != 2 ||
        s[end] != '\0' || epoch < 1 || gen < epoch)
        return false;
    for (const char *p = s + 1; p[1] != '\0'; p++) /* digits and the dot only: no sign, */
        if ((*p < '0' || *p > '9') && *p != '.') /* space or leading "+" sscanf allows */
            return false;
    *v = (struct sku_version){epoch, gen};
    return true;
}

/* Which version a PUT may replace: If-Match (one ETag, or *), else If-None-Match: *
 * (create only, refused 412), else ?reset=true (anything), else create only (refused
 * 409). 0, or -1 with err set. */
static int parse_replace(struct api_request *req, struct api_parse_error *err)
{
    bool reset = false;
    if (req->reset != NULL && strcmp(req->reset, "true") == 0)
        reset = true;
    else if (req->reset != NULL && strcmp(req->reset, "false") != 0)
        return bad_condition(err, "reset: must be true or false");
    if (req->if_match != NULL && req->if_none_match != NULL)
        return bad_condition(err, "If-Match and If-None-Match: send one of them");
    if (req->if_none_match != NULL) {
        if (strcmp(req->if_none_match, "*") != 0)
            return bad_condition(err, "If-None-Match: only * (create only) on a PUT");
        if (reset)
            return bad_condition(err, "If-None-Match: * (create only) contradicts "
                                      "reset=true");
        req->replace = SKU_REPLACE_NONE;
        req->create_only_asked = true;
    } else if (req->if_match != NULL && strcmp(req->if_match, "*") == 0) {
        req->replace = SKU_REPLACE_EXISTING;
    } else if (req->if_match != NULL) {
        if (!parse_etag(req->if_match, &req->version))
            return bad_condition(err, "If-Match: one ETag as GET /admin/skus/{sku} "
                                      "gives it (\"<epoch>.<gen>\", a strong tag), or *");
        req->replace = SKU_REPLACE_VERSION;
    } else {
        req->replace = reset ? SKU_REPLACE_ANY : SKU_REPLACE_NONE;
    }
    return 0;
}

int api_admin_parse_sku(struct api_request *req, struct api_parse_error *err)
{
    if (api_parse_sku_config(req->body, req->body_len, req->default_replicated,
                             &req->in.sku, req->request_id, err) != 0 ||
        api_parse_sku_lock(req->body, req->body_len, req->sku_lock, err) != 0)
        return -1;
    const struct sku_config *cfg = &req->in.sku;
    if (cfg->lock != SKU_LOCK_STORE && !(req->lock_services & (1u << cfg->lock))) {
        err->code = "invalid_field";
        snprintf(err->detail, sizeof err->detail,
                 "lock: \"%s\" is not configured (start with --%s)",
                 sku_lock_name(cfg->lock), sku_lock_name(cfg->lock));
        return -1;
    }
    if (cfg->unfenced && !req->lab) {
        err->code = "invalid_field";
        snprintf(err->detail, sizeof err->detail,
                 "fencing: false is only accepted when started with --lab");
        return -1;
    }
    return parse_replace(req, err);
}

static json_t *int_array(const long long *v, int n)
{
    json_t *a = seg_must(json_array());
    for (int i = 0; i < n; i++)
        json_array_append_new(a, seg_must(json_integer(v[i])));
    return a;
}

static json_t *bool_array(const bool *v, int n)
{
    json_t *a = seg_must(json_array());
    for (int i = 0; i < n; i++)
        json_array_append_new(a, seg_must(json_boolean(v[i])));
    return a;
}

json_t *api_admin_sku_json(const char *sku, const struct sku_status *st)
{
    int n = st->cfg.segments;
    if (n < 0 || n > SEG_MAX_SEGMENTS)
        n = n < 0 ? 0 : SEG_MAX_SEGMENTS;
    json_t *o = seg_must(json_object());
    api_json_set(o, "sku", json_string(sku));
    api_json_set(o, "segments", json_integer(st->cfg.segments));
    api_json_set(o, "mode", json_string(sku_mode_name(st->cfg.mode)));
    api_json_set(o, "hold_ms", json_integer(st->cfg.hold_ms));
    api_json_set(o, "batch", json_integer(st->cfg.batch > 1 ? st->cfg.batch : 1));
    api_json_set(o, "rebalance", json_boolean(st->cfg.rebalance));
    api_json_set(o, "durability",
                 json_string(st->cfg.replicated ? "replicated" : "async"));
    if (st->lock[0] != '\0') /* the lock scheme, as the store names it */
        api_json_set(o, "lock", json_string(st->lock));
    api_json_set(o, "fencing", json_boolean(!st->cfg.unfenced));
    api_json_set(o, "initial", json_integer(st->cfg.stock));
    api_json_set(o, "remaining", json_integer(st->remaining));
    api_json_set(o, "sold", json_integer(st->sold));
    api_json_set(o, "reserved", json_integer(st->reserved));
    api_json_set(o, "orders", json_integer(st->orders));
    api_json_set(o, "segment_stock", int_array(st->segment_stock, n));
    if (st->nnodes > 0) { /* a Redis Cluster: where each segment lives */
        json_t *slots = seg_must(json_array()), *nodes = seg_must(json_array());
        for (int i = 0; i < n; i++) {
            json_array_append_new(slots, seg_must(json_integer(st->segment_slot[i])));
            int k = st->segment_node[i];
            json_array_append_new(
                nodes, seg_must(k >= 0 ? json_string(st->nodes[k]) : json_null()));
        }
        api_json_set(o, "segment_slot", slots);
        api_json_set(o, "segment_node", nodes);
        api_json_set(o, "placed_as", json_string(st->placed));
    }
    api_json_set(o, "segment_sold", int_array(st->segment_sold, n));
    api_json_set(o, "segment_reserved", int_array(st->segment_reserved, n));
    api_json_set(o, "segment_locked", bool_array(st->segment_locked, n));
    api_json_set(o, "locks_held", json_integer(st->locks_held));
    return o;
}

/* Answer GET /admin/skus/{sku} for req->name, with its version as the ETag, and
 * `status` (200; 201 after a create, with its Location). */
static void reply_sku_as(const struct api_ctx *ctx, struct api_request *req,
                         struct api_reply *rep, int status)
{
    struct sku_status *st = calloc(1, sizeof(*st)); /* ~24 KiB: keep it off the stack */
    if (st == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    inv_status s = sku_get(ctx->conn, req->name, st);
    if (s != INV_OK) {
        api_reply_status(rep, s, "%s %s",
                         s == INV_UNKNOWN_SKU ? "no sku" : "cannot read sku", req->name);
        free(st);
        return;
    }
    api_reply_json(rep, status, api_admin_sku_json(req->name, st));
    char etag[48];
    snprintf(etag, sizeof etag, "\"%lld.%lld\"", st->version.epoch, st->version.gen);
    api_reply_header(rep, "ETag", etag);
    if (status == 201) {
        char location[API_HEADER_VALUE_MAX];
        snprintf(location, sizeof location, "/admin/skus/%s", req->name);
        api_reply_header(rep, "Location", location);
    }
    free(st);
}

static void reply_sku(const struct api_ctx *ctx, struct api_request *req,
                      struct api_reply *rep)
{
    reply_sku_as(ctx, req, rep, 200);
}

/* The error reply of an admin write `what` ("restock", ...) that failed with `s`.
 * When the backend did not answer, the write may or may not have been applied:
 * say so, and how a retry is made safe. */
static void write_failed(const struct api_ctx *ctx, struct api_request *req,
                         struct api_reply *rep, inv_status s, const char *what)
{
    const char *why = inv_conn_error(ctx->conn);
    if (s == INV_UNAVAILABLE && req->request_id[0] != '\0')
        api_reply_status(rep, s,
                         "%s sku %s: the backend did not answer (%s), so whether it was "
                         "applied is unknown; retrying with request id %s is safe",
                         what, req->name, why, req->request_id);
    else if (s == INV_UNAVAILABLE)
        api_reply_status(rep, s,
                         "%s sku %s: the backend did not answer (%s), so whether it was "
                         "applied is unknown; send an Idempotency-Key to retry safely",
                         what, req->name, why);
    else if (s == INV_REQUEST_CONFLICT)
        api_reply_status(rep, s, "request id %s was used for a different admin write",
                         req->request_id);
    else if (s == INV_UNKNOWN_SKU)
        api_reply_status(rep, s, "no sku %s", req->name);
    else if (s == INV_NOT_REPLICATED)
        api_reply_status(
            rep, s,
            "%s sku %s: no replica confirmed it in time (applied, or on a cluster "
            "stopped part way), so a failover may lose it%s%s%s",
            what, req->name, req->request_id[0] != '\0' ? "; retry with request id " : "",
            req->request_id, req->request_id[0] != '\0' ? ": 200 once it holds" : "");
    else
        api_reply_status(rep, s, "cannot %s sku %s", what, req->name);
}

void api_admin_sku_put(const struct api_ctx *ctx, struct api_request *req,
                       struct api_reply *rep)
{
    bool created = false;
    inv_status s = sku_put_lock(ctx->conn, req->name, &req->in.sku, req->sku_lock,
                                req->replace, &req->version, req->request_id, &created);
    if (s == INV_SKU_EXISTS && req->create_only_asked)
        api_reply_error(rep, 412, "precondition_failed",
                        "sku %s exists and If-None-Match: * asks to create it only",
                        req->name);
    else if (s == INV_SKU_EXISTS)
        api_reply_status(rep, s,
                         "sku %s exists; to replace it (a new sale: its stock, sold "
                         "counts and orders start over) send If-Match with the ETag of "
                         "GET /admin/skus/%s, or PUT /admin/skus/%s?reset=true",
                         req->name, req->name, req->name);
    else if (s == INV_PRECONDITION && req->replace == SKU_REPLACE_EXISTING)
        api_reply_status(rep, s, "no sku %s to replace (If-Match: *)", req->name);
    else if (s == INV_PRECONDITION)
        api_reply_status(rep, s,
                         "sku %s is not the version If-Match names (changed or gone "
                         "since): GET it again for its ETag",
                         req->name);
    else if (s == INV_INVALID && req->in.sku.batch > 1) /* (sku.h: checked there) */
        api_reply_error(rep, 400, "invalid_field",
                        "batch: this store sells one order per lock hold (batch 1)");
    else if (s != INV_OK)
        write_failed(ctx, req, rep, s, "create");
    if (s != INV_OK)
        return;
    if (ctx->gauges != NULL)
        api_gauges_changed(ctx->gauges);
    reply_sku_as(ctx, req, rep, created ? 201 : 200);
}

void api_admin_sku_get(const struct api_ctx *ctx, struct api_request *req,
                       struct api_reply *rep)
{
    reply_sku(ctx, req, rep);
}

void api_admin_sku_delete(const struct api_ctx *ctx, struct api_request *req,
                          struct api_reply *rep)
{
    inv_status s = sku_delete(ctx->conn, req->name, req->request_id);
    if (s != INV_OK) {
        write_failed(ctx, req, rep, s, "delete");
        return;
    }
    if (ctx->gauges != NULL)
        api_gauges_forget(ctx->gauges, req->name);
    json_t *o = seg_must(json_object());
    api_json_set(o, "sku", json_string(req->name));
    api_json_set(o, "deleted", json_true());
    api_reply_json(rep, 200, o);
}

int api_admin_parse_restock(struct api_request *req, struct api_parse_error *err)
{
    return api_parse_restock(req->body, req->body_len, &req->in.restock_qty,
                             req->request_id, err);
}

void api_admin_restock(const struct api_ctx *ctx, struct api_request *req,
                       struct api_reply *rep)
{
    inv_status s =
        sku_restock(ctx->conn, req->name, req->in.restock_qty, req->request_id);
    if (s == INV_INVALID)
        api_reply_error(rep, 400, "invalid_field",
                        "qty: sku %s would hold more than %lld units", req->name,
                        SKU_STOCK_MAX);
    else if (s != INV_OK)
        write_failed(ctx, req, rep, s, "restock");
    else
        reply_sku(ctx, req, rep);
}

void api_admin_rebalance(const struct api_ctx *ctx, struct api_request *req,
                         struct api_reply *rep)
{
    inv_status s = sku_rebalance(ctx->conn, req->name, req->request_id);
    if (s != INV_OK)
        write_failed(ctx, req, rep, s, "rebalance");
    else
        reply_sku(ctx, req, rep);
}

void api_admin_reconcile(const struct api_ctx *ctx, struct api_request *req,
                         struct api_reply *rep)
{
    struct ledger_recon r;
    inv_status s = ledger_reconcile(ctx->conn, req->name, &r);
    if (s == INV_INVALID) {
        api_reply_error(rep, 409, "no_ledger", "this service has no ledger configured");
        return;
    }
    if (s != INV_OK) {
        api_reply_status(rep, s, "cannot reconcile sku '%s'", req->name);
        return;
    }
    json_t *o = seg_must(json_object());
    api_json_set(o, "sku", json_string(req->name));
    api_json_set(o, "epoch", json_integer(r.epoch));
    json_t *st = seg_must(json_object());
    api_json_set(st, "remaining", json_integer(r.store_stock));
    api_json_set(st, "sold", json_integer(r.store_sold));
    api_json_set(o, "store", st);
    json_t *lg = seg_must(json_object());
    api_json_set(lg, "remaining", json_integer(r.ledger_stock));
    api_json_set(lg, "sold", json_integer(r.ledger_sold));
    api_json_set(lg, "events", json_integer(r.ledger_events));
    api_json_set(o, "ledger", lg);
    api_json_set(o, "drift", json_integer(r.drift));
    api_reply_json(rep, 200, o);
}

void api_admin_sku_list(const struct api_ctx *ctx, struct api_request *req,
                        struct api_reply *rep)
{
    char **names = NULL;
    size_t n = 0;
    bool more = false;
    const struct api_page *page = &req->in.page;
    inv_status s = sku_list_page(ctx->conn, page->after, page->limit, &names, &n, &more);
    if (s != INV_OK) {
        api_reply_status(rep, s, "cannot list skus");
        return;
    }
    json_t *a = seg_must(json_array());
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, seg_must(json_string(names[i])));
    json_t *o = seg_must(json_object());
    api_json_set(o, "skus", a);
    if (more && n > 0) {
        char cursor[API_CURSOR_MAX];
        api_page_cursor(names[n - 1], cursor);
        api_json_set(o, "next_cursor", json_string(cursor));
    } else {
        api_json_set(o, "next_cursor", json_null());
    }
    sku_list_free(names, n);
    api_reply_json(rep, 200, o);
}

json_t *api_admin_stats_json(const long long counters[STAT__COUNT])
{
    json_t *o = seg_must(json_object());
    for (int i = 0; i < STAT__COUNT; i++)
        api_json_set(o, stat_name((enum stat_id)i), json_integer(counters[i]));
    return o;
}

void api_admin_stats(const struct api_ctx *ctx, struct api_request *req,
                     struct api_reply *rep)
{
    (void)req;
    long long counters[STAT__COUNT];
    stat_snapshot(ctx->inv, counters);
    json_t *o = api_admin_stats_json(counters);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    api_json_set(o, "uptime_s",
                 json_integer((json_int_t)(now.tv_sec - ctx->started.tv_sec)));
    api_reply_json(rep, 200, o);
}

void api_livez(const struct api_ctx *ctx, struct api_request *req, struct api_reply *rep)
{
    (void)ctx;
    (void)req;
    static const char ok[] = "{\"status\":\"ok\"}";
    api_reply_text(rep, 200, ok, sizeof(ok) - 1);
}

void api_healthz(const struct api_ctx *ctx, struct api_request *req,
                 struct api_reply *rep)
{
    (void)req;
    /* "store" names the store in use, and a field of its name its state; on Redis,
     * redis_mode: what the process routes by now (standalone may become cluster). */
    bool up = inv_ping(ctx->conn) == INV_OK;
    const char *name = inv_store_name(ctx->inv);
    bool redis = strcmp(name, "redis") == 0;
    json_t *o = seg_must(json_object());
    api_json_set(o, "status", json_string(up ? "ok" : "degraded"));
    api_json_set(o, "store", json_string(name));
    api_json_set(o, name, json_string(up ? "up" : "down"));
    if (redis)
        api_json_set(o, "redis_mode",
                     json_string(inv_redis_cluster(ctx->inv) ? "cluster" : "standalone"));
    if (up) {
        api_reply_json(rep, 200, o);
        return;
    }
    api_json_set(o, "error", json_string("backend_unavailable"));
    const char *why = inv_conn_error(ctx->conn);
    char detail[200];
    snprintf(detail, sizeof detail, "%s: %s", name,
             why[0] != '\0' ? why
             : redis        ? "no answer to PING"
                            : "no answer");
    api_json_set(o, "detail", json_string(detail));
    api_reply_json(rep, 503, o);
    api_reply_header(rep, "Retry-After", "1");
}
