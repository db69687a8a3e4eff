/* reply.c -- build JSON replies and map domain statuses to HTTP. */
#include "api/reply.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/embed.h"
#include "base/xalloc.h"

void api_reply_init(struct api_reply *r)
{
    memset(r, 0, sizeof(*r));
}

void api_reply_clear(struct api_reply *r)
{
    free(r->body);
    api_reply_init(r);
}

void api_reply_header(struct api_reply *r, const char *name, const char *value)
{
    if (r->nheaders >= API_REPLY_HEADERS_MAX)
        return;
    struct api_header *h = &r->headers[r->nheaders++];
    h->name = name;
    snprintf(h->value, sizeof(h->value), "%s", value);
}

static void set_body(struct api_reply *r, int status, char *body, size_t len)
{
    free(r->body);
    r->status = status;
    r->body = body;
    r->body_len = len;
    r->content_type = NULL;
    r->error = false;
}

void api_reply_json(struct api_reply *r, int status, json_t *body)
{
    char *text = seg_must(json_dumps(seg_must(body), JSON_COMPACT));
    json_decref(body);
    set_body(r, status, text, strlen(text));
}

void api_reply_text(struct api_reply *r, int status, const char *text, size_t len)
{
    char *copy = seg_must(malloc(len + 1));
    memcpy(copy, text, len);
    copy[len] = '\0';
    set_body(r, status, copy, len);
}

void api_reply_raw(struct api_reply *r, int status, const char *content_type, char *body,
                   size_t len)
{
    set_body(r, status, body, len);
    r->content_type = content_type;
}

static void reply_errorv(struct api_reply *r, int status, const char *code,
                         const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* Write printable-ASCII `s` at `out` as the inside of a JSON string: only '"' and
 * '\\' need escaping. Returns the bytes written (at most 2 * strlen(s)). */
static size_t escape_into(char *out, const char *s)
{
    size_t n = 0;
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            out[n++] = '\\';
        out[n++] = *s;
    }
    return n;
}

/* Error bodies are built by hand rather than through jansson: they are most of what
 * a sold-out storm answers, on the HTTP thread, and the object and its dump cost
 * more than the rest of such a request's own work. */
static void reply_errorv(struct api_reply *r, int status, const char *code,
                         const char *fmt, va_list ap)
{
    char detail[256];
    vsnprintf(detail, sizeof(detail), fmt, ap);
    for (char *p = detail; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            *p = '?';
    size_t cap = 32 + 2 * (strlen(code) + strlen(detail)), n = 0;
    char *body = seg_must(malloc(cap));
    n += (size_t)snprintf(body, cap, "{\"error\":\"");
    n += escape_into(body + n, code);
    n += (size_t)snprintf(body + n, cap - n, "\",\"detail\":\"");
    n += escape_into(body + n, detail);
    n += (size_t)snprintf(body + n, cap - n, "\"}");
    set_body(r, status, body, n);
    r->error = true;
}

void api_reply_error(struct api_reply *r, int status, const char *code, const char *fmt,
                     ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_errorv(r, status, code, fmt, ap);
    va_end(ap);
}

void api_reply_status(struct api_reply *r, inv_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *code = api_status_code(s);
    reply_errorv(r, api_status_http(s), code != NULL ? code : "internal", fmt, ap);
    va_end(ap);
    if (s == INV_BUSY || s == INV_UNAVAILABLE || s == INV_NOT_REPLICATED)
        api_reply_header(r, "Retry-After", "1");
}

int api_status_http(inv_status s)
{
    switch (s) {
    case INV_OK:
    case INV_REPLAYED:
        return 200;
    case INV_SOLD_OUT:
    case INV_INSUFFICIENT:
    case INV_CONFLICT:
    case INV_REQUEST_CONFLICT:
        return 409;
    case INV_UNKNOWN_SKU:
    case INV_NOT_FOUND:
        return 404;
    case INV_BUSY:
    case INV_UNAVAILABLE:
    case INV_NOT_REPLICATED:
        return 503;
    case INV_INVALID:
        return 400;
    case INV_SKU_EXISTS:
        return 409;
    case INV_PRECONDITION:
        return 412;
    }
    return 500;
}

const char *api_status_code(inv_status s)
{
    if (s == INV_OK || s == INV_REPLAYED)
        return NULL;
    /* The domain's names are the API's error codes; anything it does not name is
     * a bug here, reported as such. */
    const char *name = inv_status_name(s);
    return strcmp(name, "unknown") == 0 ? "internal" : name;
}

void api_json_set(json_t *obj, const char *key, json_t *val)
{
    if (json_object_set_new(obj, key, seg_must(val)) != 0)
        seg_must(NULL); /* out of memory (our keys are valid UTF-8, obj an object) */
}

void api_reply_file(struct api_reply *r, const struct embed_file *f,
                    const char *content_type)
{
    char *body = seg_malloc(f->len + 1);
    memcpy(body, f->data, f->len + 1);
    api_reply_raw(r, 200, content_type, body, f->len);
    api_reply_header(r, "Cache-Control", "no-cache");
}
