/* parse.h -- request validation: bodies, path names and headers into plain values.
 *
 * Pure functions with no HTTP or Redis in them: they depend only on jansson and the
 * limits in base/names.h, order.h and sku.h, so the fuzzer links this file and
 * base/names.c alone. Bodies are parsed whole with duplicate keys rejected; a
 * body that is not a JSON object is `bad_json`; a missing, unknown, wrongly typed or
 * out-of-range field is `invalid_field` with a detail that starts with the field
 * name. Numbers must be JSON integers (no reals, strings or booleans).
 *
 * Every parse function returns 0 with `out` filled, or -1 with `err` filled (then
 * `out` is unspecified). Nothing is allocated that the caller must free.
 */
#ifndef API_PARSE_H
#define API_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/names.h"
#include "segments/order.h"
#include "segments/sku.h"

#define API_DETAIL_MAX 160

struct api_parse_error {
    const char *code;            /* "bad_json" or "invalid_field" (static) */
    char detail[API_DETAIL_MAX]; /* printable ASCII, safe to echo */
};

/* POST /orders: {"sku": name, "qty": 1..ORDER_QTY_MAX = 1, "order_id": name}. */
struct api_order_body {
    char sku[SEG_NAME_MAX + 1];
    long long qty;
    char order_id[SEG_NAME_MAX + 1]; /* "" when absent: the domain generates one */
};

int api_parse_order(const char *body, size_t len, struct api_order_body *out,
                    struct api_parse_error *err);
/* The two ways api_parse_order reads a body, for their tests. The fast one reads the
 * body as clients send it -- the three fields in any order, JSON whitespace, names
 * that need no escape, a plain integer qty -- without building a JSON tree (jansson
 * cost ~11k instructions an order); anything else, valid or not, it leaves (false,
 * `out` untouched) to jansson, which decides and explains. What it accepts, jansson
 * accepts with the same values. */
bool api_parse_order_fast(const char *body, size_t len, struct api_order_body *out);
int api_parse_order_json(const char *body, size_t len, struct api_order_body *out,
                         struct api_parse_error *err);

/* POST /reservations: {"sku": name, "qty": 1..ORDER_QTY_MAX = 1, "ttl_s":
 * 1..RESV_TTL_MAX_S (required), "reservation_id": name}. */
struct api_resv_body {
    char sku[SEG_NAME_MAX + 1];
    long long qty;
    long long ttl_s;
    char id[SEG_NAME_MAX + 1]; /* "" when absent: one is made */
};

int api_parse_reservation(const char *body, size_t len, struct api_resv_body *out,
                          struct api_parse_error *err);

/* The common reservation body read without a JSON tree, as api_parse_order_fast
 * reads an order's: true and *out set when the body is an object of those keys only,
 * each once, sku and ttl_s present, names plain and integers in range; false for
 * anything else (api_parse_reservation then reads it with jansson and words the
 * error). */
bool api_parse_reservation_fast(const char *body, size_t len, struct api_resv_body *out);

/* PUT /admin/skus/{sku}: {"stock": 0..SKU_STOCK_MAX, "segments": 1..SEG_MAX_SEGMENTS
 * = 20, "mode": "lock"|"atomic" = "lock", "hold_ms": 0..SKU_HOLD_MAX_MS = 0,
 * "rebalance": true|false = true, "durability": "async"|"replicated" =
 * `default_replicated` ? "replicated" : "async" (the durability setting), "lock":
 * a name (api_parse_sku_lock); when it names a lock service ("redlock", "memcached",
 * "zookeeper") out->lock is that service (mode lock; rebalance false unless given), else
 * SKU_LOCK_STORE; "fencing": true|false = true (false: with a lock service),
 * "request_id": name}. `request_id` is "" when the body has none. Whether the lock
 * service is configured and the lab allows no fencing is the caller's to check. */
/* The "lock" of a PUT /admin/skus/{sku} body (a string of 1..15 characters; which
 * ones the store has, sku_put_lock decides) into lock, "" when absent: 0 or -1. */
int api_parse_sku_lock(const char *body, size_t len, char lock[SKU_LOCK_MAX],
                       struct api_parse_error *err);
int api_parse_sku_config(const char *body, size_t len, bool default_replicated,
                         struct sku_config *out, char request_id[SEG_NAME_MAX + 1],
                         struct api_parse_error *err);

/* POST /admin/skus/{sku}/restock: {"qty": 1..SKU_RESTOCK_MAX, "request_id": name}. */
int api_parse_restock(const char *body, size_t len, long long *qty,
                      char request_id[SEG_NAME_MAX + 1], struct api_parse_error *err);

/* POST /admin/skus/{sku}/simulate: {"orders": 1..API_SIM_ORDERS_MAX, "concurrency":
 * 1..API_SIM_CONCURRENCY_MAX = API_SIM_CONCURRENCY_DEFAULT, "qty": 1..ORDER_QTY_MAX =
 * 1} (api/simulate.h). */
#define API_SIM_ORDERS_MAX 1000000
#define API_SIM_CONCURRENCY_MAX 64
#define API_SIM_CONCURRENCY_DEFAULT 8
struct api_sim_body {
    long long orders;
    int concurrency;
    long long qty;
};

int api_parse_simulate(const char *body, size_t len, struct api_sim_body *out,
                       struct api_parse_error *err);

/* Merge the Idempotency-Key header (`header`, NULL when absent) into the id a body
 * gave (`id`, "" when none; `field` names it in the error: "request_id" for admin
 * writes, "order_id" for orders): the header must be a valid name, and equal to the
 * body's when both are given (400 invalid_field otherwise, `id` unchanged). */
int api_parse_request_id(const char *field, const char *header, char id[SEG_NAME_MAX + 1],
                         struct api_parse_error *err);

/* A page of a list (GET /admin/skus): ?limit=1..API_PAGE_LIMIT_MAX =
 * API_PAGE_LIMIT_DEFAULT names, after the one the opaque ?cursor stands for. A cursor
 * is the lowercase hex of the last name of the page before (api_page_cursor), so it
 * stays valid whatever is created or deleted meanwhile; `after` is "" without one.
 * `limit`/`cursor` NULL: absent; present but empty, out of range, not hex or not a
 * name: 400 invalid_field. */
#define API_PAGE_LIMIT_DEFAULT 100
#define API_PAGE_LIMIT_MAX 1000
#define API_CURSOR_MAX (2 * SEG_NAME_MAX + 1)
struct api_page {
    size_t limit;
    char after[SEG_NAME_MAX + 1];
};

int api_parse_page(const char *limit, const char *cursor, struct api_page *out,
                   struct api_parse_error *err);

/* The cursor of the page after the one that ended with `name` (a valid name). */
void api_page_cursor(const char *name, char out[API_CURSOR_MAX]);

/* A SKU or order id taken from the path; `field` ("sku", "order_id") names it in
 * the error. */
int api_parse_name(const char *field, const char *s, struct api_parse_error *err);

/* True for "application/json", any case, optionally followed by parameters such
 * as "; charset=utf-8". NULL is false. */
bool api_is_json_content_type(const char *content_type);

/* True when `authorization` is "Bearer <token>" (scheme in any case). The token
 * bytes are compared in time independent of where they differ. An empty `token`
 * never matches. */
bool api_bearer_matches(const char *authorization, const char *token);

#endif
