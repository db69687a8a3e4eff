/* ui_embed.c -- serve the dashboard's files from the arrays compiled into the binary. */
#include "api/ui_embed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/events.h"

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

void api_ui_get(const struct api_ctx *ctx, struct api_request *req, struct api_reply *rep)
{
    const char *name = req->name[0] != '\0' ? req->name : "index.html";
    if (strcmp(name, "config.json") == 0) {
        bool bearer = ctx->events != NULL && api_events_need_auth(ctx->events);
        const char *body = bearer ? "{\"auth\":\"bearer\"}" : "{\"auth\":\"none\"}";
        api_reply_text(rep, 200, body, strlen(body));
        api_reply_header(rep, "Cache-Control", "no-store");
        return;
    }
    const struct embed_file *f = embed_find(api_ui_files, name);
    if (f == NULL) {
        api_reply_error(rep, 404, "not_found", "no such resource: %.100s", req->path);
        return;
    }
    char *body = malloc(f->len + 1);
    if (body == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    memcpy(body, f->data, f->len + 1);
    api_reply_raw(rep, 200, content_type(name), body, f->len);
    api_reply_header(rep, "Cache-Control", "no-cache");
    api_reply_header(rep, "Content-Security-Policy", UI_CSP);
    api_reply_header(rep, "X-Content-Type-Options", "nosniff");
}
