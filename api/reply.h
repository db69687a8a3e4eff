/* reply.h -- an HTTP reply as plain data (status, JSON body, a few headers), and the
 * one mapping from a domain inv_status to an HTTP status and error code.
 *
 * Every body is JSON text (the server sends it as application/json). Errors look
 * like {"error": "<code>", "detail": "..."} (api/problem.h turns them into RFC 9457
 * problem details for a client that asks). A reply owns its body: set one with the
 * api_reply_* functions and release it with api_reply_clear(). Setting a reply
 * twice replaces the first. Out of memory aborts.
 *
 * Domain status -> HTTP:
 *   INV_OK 200, INV_REPLAYED 200, INV_SOLD_OUT 409 sold_out,
 *   INV_INSUFFICIENT 409 insufficient_stock, INV_CONFLICT 409 order_id_conflict,
 *   INV_UNKNOWN_SKU 404 unknown_sku, INV_NOT_FOUND 404 not_found,
 *   INV_BUSY 503 busy, INV_UNAVAILABLE 503 backend_unavailable (both with
 *   Retry-After: 1), INV_INVALID 400 invalid_field; anything else 500 internal.
 */
#ifndef API_REPLY_H
#define API_REPLY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "segments/inventory.h"

#define API_REPLY_HEADERS_MAX 3
/* Room for the longest value set: "Location: /orders/" plus a 64-character id. */
#define API_HEADER_VALUE_MAX 96

struct api_header {
    const char *name; /* static string */
    char value[API_HEADER_VALUE_MAX];
};

struct api_reply {
    int status;               /* HTTP status; 0 until a reply is set */
    char *body;               /* JSON text (or content_type), owned; NULL until set */
    const char *content_type; /* static; NULL means application/json */
    size_t body_len;
    bool error; /* the body is {"error","detail"} from api_reply_error/status (which
                   api/problem.h may rewrite); false for any other body */
    struct api_header headers[API_REPLY_HEADERS_MAX];
    int nheaders;
};

/* An empty reply (status 0, no body, no headers). */
void api_reply_init(struct api_reply *r);

/* Free the body and return to the empty state. */
void api_reply_clear(struct api_reply *r);

/* Add a header (name static, value copied, truncated to API_HEADER_VALUE_MAX - 1);
 * ignored past API_REPLY_HEADERS_MAX. */
void api_reply_header(struct api_reply *r, const char *name, const char *value);

/* Reply `status` with `body` serialised compactly; steals the reference. */
void api_reply_json(struct api_reply *r, int status, json_t *body);

/* Reply `status` with a copy of `len` bytes of ready JSON text (e.g. a stored
 * order record, passed through verbatim). */
void api_reply_text(struct api_reply *r, int status, const char *text, size_t len);

/* Reply `status` with a body that is not JSON: `body` (malloc'd, `len` bytes) is
 * taken over; `content_type` must be a static string. */
void api_reply_raw(struct api_reply *r, int status, const char *content_type, char *body,
                   size_t len);

struct embed_file;
/* Reply 200 with a copy of embedded file `f` (base/embed.h) as `content_type` (a
 * static string), Cache-Control: no-cache: a file the binary serves may change with
 * the next build. */
void api_reply_file(struct api_reply *r, const struct embed_file *f,
                    const char *content_type);

/* Reply `status` with {"error": code, "detail": printf(fmt, ...)}. Non-printable
 * bytes of the detail are replaced by '?'. */
void api_reply_error(struct api_reply *r, int status, const char *code, const char *fmt,
                     ...) __attribute__((format(printf, 4, 5)));

/* The error reply for a failed domain status (see the table above), with
 * Retry-After where the client should retry. */
void api_reply_status(struct api_reply *r, inv_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* HTTP status and error code of a domain status (code NULL for INV_OK/REPLAYED). */
/* json_object_set_new that cannot fail: a NULL `val` (a failed allocation) or a
 * failed set aborts as out of memory. */
void api_json_set(json_t *obj, const char *key, json_t *val);

int api_status_http(inv_status s);
const char *api_status_code(inv_status s);

#endif
