/* parse.c -- turn request bodies, path names and headers into validated values. */
#include "api/parse.h"

#include <ctype.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "segments/reserve.h"

static int fail(struct api_parse_error *err, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct api_parse_error *err, const char *code, const char *fmt, ...)
{
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->detail, sizeof(err->detail), fmt, ap);
    va_end(ap);
    /* Details may quote client bytes; keep them printable ASCII (valid JSON text). */
    for (char *p = err->detail; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            *p = '?';
    return -1;
}

/* Parse `body` as a JSON object; the caller owns the result. */
static json_t *load_object(const char *body, size_t len, struct api_parse_error *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(body != NULL ? body : "", body != NULL ? len : 0,
                              JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        fail(err, "bad_json", "line %d column %d: %s", jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        fail(err, "bad_json", "the body must be a JSON object");
        return NULL;
    }
    return root;
}

/* Reject any key of `obj` not in the NULL-terminated `known`. */
static int check_fields(json_t *obj, const char *const known[],
                        struct api_parse_error *err)
{
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        (void)val;
        bool ok = false;
        for (size_t i = 0; known[i] != NULL && !ok; i++)
            ok = strcmp(key, known[i]) == 0;
        if (!ok)
            return fail(err, "invalid_field", "%.40s: unknown field", key);
    }
    return 0;
}

/* Read optional integer field `name` in lo..hi; `*out` keeps its default when absent. */
static int get_int(json_t *obj, const char *name, bool required, long long lo,
                   long long hi, long long *out, struct api_parse_error *err)
{
    json_t *v = json_object_get(obj, name);
    if (v == NULL) {
        if (required)
            return fail(err, "invalid_field", "%s: required", name);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return fail(err, "invalid_field", "%s: must be an integer in %lld..%lld", name,
                    lo, hi);
    *out = json_integer_value(v);
    return 0;
}

/* Field `name` when it is a string; NULL with *rc = 0 when absent and optional,
 * NULL with *rc = -1 (and `err` filled) when missing but required or not a string. */
static json_t *get_string(json_t *obj, const char *name, bool required,
                          struct api_parse_error *err, int *rc)
{
    *rc = 0;
    json_t *v = json_object_get(obj, name);
    if (v == NULL) {
        if (required)
            *rc = fail(err, "invalid_field", "%s: required", name);
        return NULL;
    }
    if (!json_is_string(v)) {
        *rc = fail(err, "invalid_field", "%s: must be a string", name);
        return NULL;
    }
    return v;
}

/* Copy a valid name from JSON string `v` into `out` (SEG_NAME_MAX + 1 bytes). */
static int get_name(json_t *obj, const char *name, bool required, char *out,
                    struct api_parse_error *err)
{
    int rc;
    json_t *v = get_string(obj, name, required, err, &rc);
    out[0] = '\0';
    if (v == NULL)
        return rc;
    const char *s = json_string_value(v);
    if (json_string_length(v) != strlen(s) || !seg_valid_name(s))
        return fail(err, "invalid_field", "%s: must be 1-%d characters of [A-Za-z0-9_.-]",
                    name, SEG_NAME_MAX);
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

/* ---- the order body without a JSON tree ---------------------------------------- */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* A JSON string at p that is a valid name (no escapes: a name has none to escape),
 * copied to out (SEG_NAME_MAX + 1 bytes); the end, or NULL. */
static const char *fast_name(const char *p, const char *end, char *out)
{
    if (p == end || *p++ != '"')
        return NULL;
    size_t n = 0;
    while (p < end && *p != '"') {
        char c = *p++;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
        if (!ok || n == SEG_NAME_MAX)
            return NULL;
        out[n++] = c;
    }
    if (p == end || n == 0)
        return NULL;
    out[n] = '\0';
    return p + 1;
}

/* A JSON number at p that is an integer in 1..hi; the end, or NULL. */
static const char *fast_int(const char *p, const char *end, long long hi, long long *out)
{
    long long v = 0;
    const char *start = p;
    while (p < end && *p >= '0' && *p <= '9' && p - start < 12)
        v = v * 10 + (*p++ - '0');
    if (p == start || *start == '0' || v > hi ||
        (p < end && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E')))
        return NULL;
    *out = v;
    return p;
}

/* A field of a body read without a JSON tree: a name (into `name`, SEG_NAME_MAX + 1
 * bytes) or, when `name` is NULL, an integer in 1..hi (into `num`). */
struct fast_field {
    const char *key;
    char *name;
    long long *num;
    long long hi;
    bool seen;
};

/* A body {"key": value, ...} whose keys are among the n fields, each once, each value
 * of its field's kind, read into the fields; false for anything else (out of range,
 * an unknown or repeated key, an escape, a value of another type...), where jansson
 * decides and words the error. */
static bool fast_object(const char *body, size_t len, struct fast_field *f, int n)
{
    if (body == NULL)
        return false;
    const char *p = skip_ws(body, body + len), *end = body + len;
    if (p == end || *p++ != '{')
        return false;
    for (;;) {
        char key[16];
        p = skip_ws(p, end);
        if (p == end || *p++ != '"')
            return false;
        /* The known keys are of [a-z_]: anything else (an escape, a NUL, a byte of
         * UTF-8) is no key of ours read raw, so jansson decides. */
        const char *k = p;
        while (p < end && ((*p >= 'a' && *p <= 'z') || *p == '_'))
            p++;
        size_t klen = (size_t)(p - k);
        if (p == end || *p != '"' || klen >= sizeof key)
            return false;
        memcpy(key, k, klen);
        key[klen] = '\0';
        p = skip_ws(p + 1, end);
        if (p == end || *p++ != ':')
            return false;
        p = skip_ws(p, end);
        int i = 0;
        while (i < n && strcmp(key, f[i].key) != 0)
            i++;
        if (i == n || f[i].seen)
            return false;
        f[i].seen = true;
        p = f[i].name != NULL ? fast_name(p, end, f[i].name)
                              : fast_int(p, end, f[i].hi, f[i].num);
        if (p == NULL)
            return false;
        p = skip_ws(p, end);
        if (p == end)
            return false;
        if (*p == '}')
            break;
        if (*p++ != ',')
            return false;
    }
    return skip_ws(p + 1, end) == end;
}

bool api_parse_order_fast(const char *body, size_t len, struct api_order_body *out)
{
    struct api_order_body o = {.qty = 1};
    struct fast_field f[] = {{"sku", o.sku, NULL, 0, false},
                             {"qty", NULL, &o.qty, ORDER_QTY_MAX, false},
                             {"order_id", o.order_id, NULL, 0, false}};
    if (!fast_object(body, len, f, 3) || !f[0].seen)
        return false;
    *out = o;
    return true;
}

int api_parse_order(const char *body, size_t len, struct api_order_body *out,
                    struct api_parse_error *err)
{
    if (api_parse_order_fast(body, len, out))
        return 0;
    return api_parse_order_json(body, len, out, err);
}

int api_parse_order_json(const char *body, size_t len, struct api_order_body *out,
                         struct api_parse_error *err)
{
    static const char *const known[] = {"sku", "qty", "order_id", NULL};
    json_t *root = load_object(body, len, err);
    if (root == NULL)
        return -1;
    out->qty = 1;
    int rc = check_fields(root, known, err);
    if (rc == 0)
        rc = get_name(root, "sku", true, out->sku, err);
    if (rc == 0)
        rc = get_int(root, "qty", false, 1, ORDER_QTY_MAX, &out->qty, err);
    if (rc == 0)
        rc = get_name(root, "order_id", false, out->order_id, err);
    json_decref(root);
    return rc;
}

bool api_parse_reservation_fast(const char *body, size_t len, struct api_resv_body *out)
{
    struct api_resv_body r = {.qty = 1};
    struct fast_field f[] = {{"sku", r.sku, NULL, 0, false},
                             {"qty", NULL, &r.qty, ORDER_QTY_MAX, false},
                             {"ttl_s", NULL, &r.ttl_s, RESV_TTL_MAX_S, false},
                             {"reservation_id", r.id, NULL, 0, false}};
    if (!fast_object(body, len, f, 4) || !f[0].seen || !f[2].seen)
        return false;
    *out = r;
    return true;
}

int api_parse_reservation(const char *body, size_t len, struct api_resv_body *out,
                          struct api_parse_error *err)
{
    static const char *const known[] = {"sku", "qty", "ttl_s", "reservation_id", NULL};
    if (api_parse_reservation_fast(body, len, out))
        return 0;
    json_t *root = load_object(body, len, err);
    if (root == NULL)
        return -1;
    out->qty = 1;
    int rc = check_fields(root, known, err);
    if (rc == 0)
        rc = get_name(root, "sku", true, out->sku, err);
    if (rc == 0)
        rc = get_int(root, "qty", false, 1, ORDER_QTY_MAX, &out->qty, err);
    if (rc == 0)
        rc = get_int(root, "ttl_s", true, 1, RESV_TTL_MAX_S, &out->ttl_s, err);
    if (rc == 0)
        rc = get_name(root, "reservation_id", false, out->id, err);
    json_decref(root);
    return rc;
}

int api_parse_sku_lock(const char *body, size_t len, char lock[SKU_LOCK_MAX],
                       struct api_parse_error *err)
{
    lock[0] = '\0';
    json_t *root = load_object(body, len, err);
    if (root == NULL)
        return -1;
    int rc = 0;
    json_t *v = get_string(root, "lock", false, err, &rc);
    if (v != NULL &&
        (json_string_length(v) == 0 || json_string_length(v) >= SKU_LOCK_MAX))
        rc = fail(err, "invalid_field",
                  "lock: must be \"redis\", \"redlock\", \"memcached\" or "
                  "\"zookeeper\" (Redis), or \"row\", \"lease\" or \"optimistic\" "
                  "(PostgreSQL)");
    else if (v != NULL)
        snprintf(lock, SKU_LOCK_MAX, "%s", json_string_value(v));
    json_decref(root);
    return rc;
}

int api_parse_sku_config(const char *body, size_t len, bool default_replicated,
                         struct sku_config *out, char request_id[SEG_NAME_MAX + 1],
                         struct api_parse_error *err)
{
    static const char *const known[] = {
        "stock",      "segments", "mode",    "hold_ms", "rebalance", "request_id",
        "durability", "lock",     "fencing", "batch",   NULL};
    json_t *root = load_object(body, len, err);
    if (root == NULL)
        return -1;
    long long stock = 0, segments = 20, hold_ms = 0, batch = 1;
    int rc = check_fields(root, known, err);
    if (rc == 0)
        rc = get_int(root, "stock", true, 0, SKU_STOCK_MAX, &stock, err);
    if (rc == 0)
        rc = get_int(root, "segments", false, 1, SEG_MAX_SEGMENTS, &segments, err);
    if (rc == 0)
        rc = get_int(root, "hold_ms", false, 0, SKU_HOLD_MAX_MS, &hold_ms, err);
    if (rc == 0)
        rc = get_int(root, "batch", false, 1, SKU_BATCH_MAX, &batch, err);
    out->mode = SKU_MODE_LOCK;
    if (rc == 0) {
        json_t *v = get_string(root, "mode", false, err, &rc);
        if (v != NULL && strcmp(json_string_value(v), "lock") == 0)
            out->mode = SKU_MODE_LOCK;
        else if (v != NULL && strcmp(json_string_value(v), "atomic") == 0)
            out->mode = SKU_MODE_ATOMIC;
        else if (v != NULL)
            rc = fail(err, "invalid_field", "mode: must be \"lock\" or \"atomic\"");
    }
    out->rebalance = true;
    if (rc == 0) {
        json_t *v = json_object_get(root, "rebalance");
        if (v != NULL && !json_is_boolean(v))
            rc = fail(err, "invalid_field", "rebalance: must be true or false");
        else if (v != NULL)
            out->rebalance = json_is_true(v);
    }
    out->replicated = default_replicated;
    if (rc == 0) {
        json_t *v = get_string(root, "durability", false, err, &rc);
        if (v != NULL && strcmp(json_string_value(v), "replicated") == 0)
            out->replicated = true;
        else if (v != NULL && strcmp(json_string_value(v), "async") == 0)
            out->replicated = false;
        else if (v != NULL)
            rc = fail(err, "invalid_field",
                      "durability: must be \"async\" or \"replicated\"");
    }
    out->lock = SKU_LOCK_STORE; /* a string naming no service: a store's scheme, its
                                   own to check (api_parse_sku_lock, sku_put_lock) */
    if (rc == 0) {
        json_t *v = json_object_get(root, "lock");
        if (json_is_string(v) && sku_lock_parse(json_string_value(v), &out->lock) != 0)
            out->lock = SKU_LOCK_STORE;
    }
    out->unfenced = false;
    if (rc == 0) {
        json_t *v = json_object_get(root, "fencing");
        if (v != NULL && !json_is_boolean(v))
            rc = fail(err, "invalid_field", "fencing: must be true or false");
        else if (v != NULL)
            out->unfenced = json_is_false(v);
    }
    if (rc == 0 && out->lock != SKU_LOCK_STORE) {
        /* the automatic rebalance takes every segment's hold from the service
         * (spread.c): on when asked for, off by default */
        if (out->mode != SKU_MODE_LOCK)
            rc = fail(err, "invalid_field", "lock: a lock service needs mode \"lock\"");
        else if (json_object_get(root, "rebalance") == NULL)
            out->rebalance = false;
    } else if (rc == 0 && out->unfenced) {
        rc = fail(err, "invalid_field", "fencing: false needs a lock service (\"lock\")");
    }
    if (rc == 0)
        rc = get_name(root, "request_id", false, request_id, err);
    out->stock = stock;
    out->segments = (int)segments;
    out->hold_ms = (int)hold_ms;
    out->batch = (int)batch;
    json_decref(root);
    return rc;
}

int api_parse_restock(const char *body, size_t len, long long *qty,
                      char request_id[SEG_NAME_MAX + 1], struct api_parse_error *err)
{
    static const char *const known[] = {"qty", "request_id", NULL};
    json_t *root = load_object(body, len, err);
    if (root == NULL)
        return -1;
    int rc = check_fields(root, known, err);
    if (rc == 0)
        rc = get_int(root, "qty", true, 1, SKU_RESTOCK_MAX, qty, err);
    if (rc == 0)
        rc = get_name(root, "request_id", false, request_id, err);
    json_decref(root);
    return rc;
}

int api_parse_simulate(const char *body, size_t len, struct api_sim_body *out,
                       struct api_parse_error *err)
{
    static const char *const known[] = {"orders", "concurrency", "qty", NULL};
    json_t *root = load_object(body, len, err);
    if (root == NULL)
        return -1;
    long long orders = 0, concurrency = API_SIM_CONCURRENCY_DEFAULT, qty = 1;
    int rc = check_fields(root, known, err);
    if (rc == 0)
        rc = get_int(root, "orders", true, 1, API_SIM_ORDERS_MAX, &orders, err);
    if (rc == 0)
        rc = get_int(root, "concurrency", false, 1, API_SIM_CONCURRENCY_MAX, &concurrency,
                     err);
    if (rc == 0)
        rc = get_int(root, "qty", false, 1, ORDER_QTY_MAX, &qty, err);
    out->orders = orders;
    out->concurrency = (int)concurrency;
    out->qty = qty;
    json_decref(root);
    return rc;
}

int api_parse_name(const char *field, const char *s, struct api_parse_error *err)
{
    if (!seg_valid_name(s))
        return fail(err, "invalid_field", "%s: must be 1-%d characters of [A-Za-z0-9_.-]",
                    field, SEG_NAME_MAX);
    return 0;
}

int api_parse_page(const char *limit, const char *cursor, struct api_page *out,
                   struct api_parse_error *err)
{
    out->limit = API_PAGE_LIMIT_DEFAULT;
    out->after[0] = '\0';
    if (limit != NULL) {
        /* Digits only (no sign, space or exponent), and few enough to compare. */
        size_t n = strspn(limit, "0123456789");
        if (n == 0 || limit[n] != '\0' || n > 4 || atoi(limit) < 1 ||
            atoi(limit) > API_PAGE_LIMIT_MAX)
            return fail(err, "invalid_field", "limit: must be an integer 1-%d",
                        API_PAGE_LIMIT_MAX);
        out->limit = (size_t)atoi(limit);
    }
    if (cursor == NULL)
        return 0;
    size_t len = strlen(cursor);
    if (len == 0 || len % 2 != 0 || len > 2 * SEG_NAME_MAX ||
        strspn(cursor, "0123456789abcdefABCDEF") != len)
        return fail(err, "invalid_field", "cursor: not a cursor this service gave");
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i += 2) {
        int hi = (int)(strchr(hex, tolower((unsigned char)cursor[i])) - hex);
        int lo = (int)(strchr(hex, tolower((unsigned char)cursor[i + 1])) - hex);
        out->after[i / 2] = (char)(hi * 16 + lo);
    }
    out->after[len / 2] = '\0';
    if (strlen(out->after) != len / 2 || !seg_valid_name(out->after))
        return fail(err, "invalid_field", "cursor: not a cursor this service gave");
    return 0;
}

void api_page_cursor(const char *name, char out[API_CURSOR_MAX])
{
    static const char hex[] = "0123456789abcdef";
    size_t i = 0;
    for (; name[i] != '\0' && i < SEG_NAME_MAX; i++) {
        out[2 * i] = hex[(unsigned char)name[i] >> 4];
        out[2 * i + 1] = hex[(unsigned char)name[i] & 15];
    }
    out[2 * i] = '\0';
}

int api_parse_request_id(const char *field, const char *header, char id[SEG_NAME_MAX + 1],
                         struct api_parse_error *err)
{
    if (header == NULL)
        return 0;
    if (!seg_valid_name(header))
        return fail(err, "invalid_field",
                    "Idempotency-Key: must be 1-%d characters of [A-Za-z0-9_.-]",
                    SEG_NAME_MAX);
    if (id[0] != '\0' && strcmp(id, header) != 0)
        return fail(err, "invalid_field", "%s: differs from the Idempotency-Key header",
                    field);
    snprintf(id, SEG_NAME_MAX + 1, "%s", header);
    return 0;
}

bool api_is_json_content_type(const char *ct)
{
    static const char want[] = "application/json";
    if (ct == NULL)
        return false;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (strncasecmp(ct, want, sizeof(want) - 1) != 0)
        return false;
    ct += sizeof(want) - 1;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return *ct == '\0' || *ct == ';';
}

bool api_bearer_matches(const char *authorization, const char *token)
{
    static const char scheme[] = "Bearer ";
    if (authorization == NULL || token == NULL || token[0] == '\0')
        return false;
    if (strncasecmp(authorization, scheme, sizeof(scheme) - 1) != 0)
        return false;
    const char *given = authorization + sizeof(scheme) - 1;
    size_t glen = strlen(given), tlen = strlen(token);
    /* Touch every byte of the secret whatever the input, so the time taken says
     * nothing about how much of it matched. */
    unsigned char diff = glen != tlen;
    for (size_t i = 0; i < tlen; i++)
        diff |= (unsigned char)token[i] ^ (unsigned char)(i < glen ? given[i] : 0);
    return diff == 0;
}
