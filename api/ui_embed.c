/* ui_embed.c -- serve the dashboard's files from the arrays compiled into the binary. */
#include "api/ui_embed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/events.h"
#include "api/reply.h"
#include "segments/inventory.h"
#include "segments/skumode.h"
#include "base/xalloc.h"

/* Only this origin, for everything; data: for the inline favicon. */
#define UI_CSP                                                                           \
    "default-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'"

static const char *content_type(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (dot == NULL)
        return "application/octet-stream";
    if (strcmp(dot, ".html") == 0)
        return "text/html; charset=utf-8";
    if (strcmp(dot, ".css") == 0)
        return "text/css; charset=utf-8";
    if (strcmp(dot, ".js") == 0)
        return "text/javascript; charset=utf-8";
    if (strcmp(dot, ".svg") == 0)
        return "image/svg+xml";
    return "application/octet-stream";
}

/* One strategy the comparison may pick: `lock` NULL for mode atomic. A lock service
 * this process was not started with is there, unavailable, saying why. */
static json_t *strategy(const char *mode, const char *lock, unsigned services)
{
    json_t *o = seg_must(json_object());
    api_json_set(o, "mode", json_string(mode));
    bool ok = true;
    if (lock != NULL) {
        api_json_set(o, "lock", json_string(lock));
        sku_lock l;
        bool service = sku_lock_parse(lock, &l) == 0 && l != SKU_LOCK_STORE;
        api_json_set(o, "service", json_boolean(service));
        if (service && !(services & (1u << l))) {
            char why[64];
            snprintf(why, sizeof why, "not started with --%s", lock);
            api_json_set(o, "why", json_string(why));
            ok = false;
        }
    }
    api_json_set(o, "available", json_boolean(ok));
    return o;
}

/* GET /ui/config.json: the token question, and what the comparison may pit. */
static void config_json(const struct api_ctx *ctx, const struct api_request *req,
                        struct api_reply *rep)
{
    bool bearer = ctx->events != NULL && api_events_need_auth(ctx->events);
    json_t *o = seg_must(json_object());
    api_json_set(o, "auth", json_string(bearer ? "bearer" : "none"));
    api_json_set(o, "store", json_string(inv_store_name(ctx->inv)));
    api_json_set(o, "lab", json_boolean(req->lab));
    json_t *a = seg_must(json_array());
    for (const char *const *l = inv_store_locks(ctx->inv); *l != NULL; l++)
        json_array_append_new(a, strategy("lock", *l, req->lock_services));
    json_array_append_new(a, strategy("atomic", NULL, req->lock_services));
    api_json_set(o, "strategies", a);
    api_reply_json(rep, 200, o);
    api_reply_header(rep, "Cache-Control", "no-store");
}

void api_ui_get(const struct api_ctx *ctx, struct api_request *req, struct api_reply *rep)
{
    const char *name = req->name[0] != '\0' ? req->name : "index.html";
    if (strcmp(name, "config.json") == 0) {
        config_json(ctx, req, rep);
        return;
    }
    const struct embed_file *f = embed_find(api_ui_files, name);
    if (f == NULL) {
        api_reply_error(rep, 404, "not_found", "no such resource: %.100s", req->path);
        return;
    }
    api_reply_file(rep, f, content_type(name));
    api_reply_header(rep, "Content-Security-Policy", UI_CSP);
    api_reply_header(rep, "X-Content-Type-Options", "nosniff");
}
