/* it_hostile.c -- hostile requests beyond it_badinput.c: framing, header floods, NUL
 * bytes and bad UTF-8, deep nesting, extreme numbers, percent-encoded names, odd
 * methods, slow clients and thousands of idle connections.
 *
 * Each table case must be answered with the expected 4xx JSON error (or, for damage
 * at the HTTP framing level that libmicrohttpd refuses on its own, any 4xx or a closed
 * connection), leave the process up, leave every key and value in Redis as it was,
 * and -- being refused before the domain is called -- send Redis no command at all:
 * so no byte of user text reaches Redis, not even as an argument.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/harness_net.h"

#define SKU "valid-sku"
#define STOCK 1000
#define IDLE_CONNECTIONS 2000

struct env {
    struct h_env *h;
    redisContext *rc; /* direct connection for snapshots and command counts */
};

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    if (e == NULL)
        return -1;
    *state = e;
    e->h = h_env_start(NULL);
    if (e->h == NULL)
        return -1;
    e->rc = h_redis_connect(e->h->redis);
    if (e->rc == NULL)
        return -1;
    return h_put_sku(e->h->port, NULL, SKU, STOCK, 4, "lock", 0);
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    if (e == NULL)
        return 0;
    if (e->rc != NULL)
        redisFree(e->rc);
    /* After all that, the service must still be up and stop cleanly on SIGTERM (a
     * sanitizer report makes its exit non-zero). */
    int rc = h_env_stop(e->h);
    free(e);
    return rc;
}

/* ---- Redis observation ----------------------------------------------------------- */

/* Commands Redis has processed so far (this INFO call not yet counted); -1 on error. */
/* The calls of `cmd` in an INFO commandstats text (0 when it has none). */
static long long calls_of(const char *info, const char *cmd)
{
    char key[64];
    snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
    const char *p = strstr(info, key);
    return p != NULL ? atoll(p + strlen(key)) : 0;
}

/* Commands Redis processed, less what the service's background sends whatever the
 * requests: the hold sweeper's TIME and ZRANGEBYSCORE every 250 ms (holdsweep.h), and
 * the SCRIPT LOADs of each new connection (a thread's first call: 36 of them, some
 * landing in a case's window under a sanitizer; counted, they failed a case now and
 * then: "Redis ran 7 commands for this request", the hold sweeper's connection
 * loading its scripts). One INFO: the caller's +1. */
static long long commands_processed(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO all");
    long long n = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "total_commands_processed:");
        if (p != NULL)
            n = atoll(p + strlen("total_commands_processed:")) -
                calls_of(r->str, "time") - calls_of(r->str, "zrangebyscore") -
                calls_of(r->str, "script|load");
    }
    if (r != NULL)
        freeReplyObject(r);
    return n;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Append the elements of an array reply, sorted, as "a,b,c". */
static void append_elements(char **out, size_t *len, size_t *cap, redisReply *r);

static void append(char **out, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        while (*len + n + 1 > *cap)
            *cap = *cap ? *cap * 2 : 4096;
        *out = realloc(*out, *cap);
        if (*out == NULL)
            abort();
    }
    memcpy(*out + *len, s, n);
    *len += n;
    (*out)[*len] = '\0';
}

static void append_elements(char **out, size_t *len, size_t *cap, redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        append(out, len, cap, "?", 1);
        return;
    }
    char **v = calloc(r->elements + 1, sizeof *v);
    if (v == NULL)
        abort();
    for (size_t i = 0; i < r->elements; i++)
        v[i] = r->element[i]->str != NULL ? r->element[i]->str : (char *)"";
    /* Hash replies alternate field, value: sort the pairs, not the items. */
    qsort(v, r->elements, sizeof *v, cmp_str);
    for (size_t i = 0; i < r->elements; i++) {
        append(out, len, cap, v[i], strlen(v[i]));
        append(out, len, cap, ",", 1);
    }
    free(v);
}

/* Every key with its type and value, sorted: a malloc'd text, NULL on error. Lock
 * keys carry a TTL, but no lock is held while a hostile case runs. */
static char *snapshot(redisContext *c)
{
    size_t nkeys = 0, kcap = 64;
    char **keys = calloc(kcap, sizeof *keys);
    char cursor[32] = "0";
    do {
        redisReply *r = redisCommand(c, "SCAN %s COUNT 1000", cursor);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            if (r != NULL)
                freeReplyObject(r);
            for (size_t i = 0; i < nkeys; i++)
                free(keys[i]);
            free(keys);
            return NULL;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            if (nkeys == kcap)
                keys = realloc(keys, (kcap *= 2) * sizeof *keys);
            keys[nkeys++] = strdup(r->element[1]->element[i]->str);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    qsort(keys, nkeys, sizeof *keys, cmp_str);

    char *out = NULL;
    size_t len = 0, cap = 0;
    append(&out, &len, &cap, "", 0);
    for (size_t i = 0; i < nkeys; i++) {
        append(&out, &len, &cap, keys[i], strlen(keys[i]));
        append(&out, &len, &cap, "=", 1);
        redisReply *t = redisCommand(c, "TYPE %s", keys[i]);
        const char *type = t != NULL && t->type == REDIS_REPLY_STATUS ? t->str : "?";
        redisReply *v = NULL;
        if (strcmp(type, "string") == 0) {
            v = redisCommand(c, "GET %s", keys[i]);
            if (v != NULL && v->type == REDIS_REPLY_STRING)
                append(&out, &len, &cap, v->str, v->len);
        } else if (strcmp(type, "hash") == 0) {
            v = redisCommand(c, "HGETALL %s", keys[i]);
            append_elements(&out, &len, &cap, v);
        } else if (strcmp(type, "set") == 0) {
            v = redisCommand(c, "SMEMBERS %s", keys[i]);
            append_elements(&out, &len, &cap, v);
        } else {
            append(&out, &len, &cap, type, strlen(type));
        }
        append(&out, &len, &cap, "\n", 1);
        if (v != NULL)
            freeReplyObject(v);
        if (t != NULL)
            freeReplyObject(t);
        free(keys[i]);
    }
    free(keys);
    return out;
}

/* Print the lines only in `a` ("-") or only in `b` ("+"), at most 20 of each; both
 * are sorted snapshots. */
static void print_diff(const char *a, const char *b)
{
    int shown = 0;
    fprintf(stderr, "Redis changed:\n");
    while ((*a != '\0' || *b != '\0') && shown < 40) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        int c = *a == '\0'   ? 1
                : *b == '\0' ? -1
                             : strncmp(a, b, la < lb ? la + 1 : lb + 1);
        if (c == 0 && la == lb) {
            a += la + (a[la] != '\0');
            b += lb + (b[lb] != '\0');
            continue;
        }
        if (c <= 0) {
            fprintf(stderr, "  - %.*s\n", (int)la, a);
            a += la + (a[la] != '\0');
        } else {
            fprintf(stderr, "  + %.*s\n", (int)lb, b);
            b += lb + (b[lb] != '\0');
        }
        shown++;
    }
}

/* ---- the table ------------------------------------------------------------------- */

/* Any 4xx (even libmicrohttpd's own HTML) or a closed connection. */
#define ANY_REJECT 0

struct hcase {
    char what[80];
    char *req; /* the raw request, malloc'd */
    size_t len;
    int status;       /* expected status, or ANY_REJECT */
    const char *code; /* expected error code, NULL: any */
    const char *allow;
};

struct table {
    struct hcase *c;
    size_t n, cap;
};

static struct hcase *add_raw(struct table *t, const char *what, const void *bytes,
                             size_t len, int status, const char *code, const char *allow)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        t->c = realloc(t->c, t->cap * sizeof *t->c);
        if (t->c == NULL)
            abort();
    }
    struct hcase *c = &t->c[t->n++];
    memset(c, 0, sizeof *c);
    snprintf(c->what, sizeof c->what, "%s", what);
    c->req = malloc(len + 1);
    if (c->req == NULL)
        abort();
    memcpy(c->req, bytes, len);
    c->req[len] = '\0';
    c->len = len;
    c->status = status;
    c->code = code;
    c->allow = allow;
    return c;
}

/* A well-framed request: `body` of `blen` bytes (-1: strlen; NULL: none). */
static void add(struct table *t, const char *what, const char *method, const char *path,
                const char *ctype, const char *body, long blen, int status,
                const char *code, const char *allow)
{
    size_t bl = body == NULL ? 0 : blen < 0 ? strlen(body) : (size_t)blen;
    size_t cap = strlen(method) + strlen(path) + bl + 512;
    char *req = malloc(cap);
    if (req == NULL)
        abort();
    int n =
        snprintf(req, cap, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n",
                 method, path);
    if (ctype != NULL)
        n += snprintf(req + n, cap - (size_t)n, "Content-Type: %s\r\n", ctype);
    if (body != NULL)
        n += snprintf(req + n, cap - (size_t)n, "Content-Length: %zu\r\n", bl);
    n += snprintf(req + n, cap - (size_t)n, "\r\n");
    if (body != NULL)
        memcpy(req + n, body, bl);
    add_raw(t, what, req, (size_t)n + bl, status, code, allow);
    free(req);
}

#define JSON "application/json"
#define ORDER(what, body, status, code)                                                  \
    add(t, what, "POST", "/orders", JSON, body, -1, status, code, NULL)
#define ORDERN(what, body, len, status, code)                                            \
    add(t, what, "POST", "/orders", JSON, body, len, status, code, NULL)
#define PUT(what, body, status, code)                                                    \
    add(t, what, "PUT", "/admin/skus/hostile-put", JSON, body, -1, status, code, NULL)
#define GETP(what, path, status, code)                                                   \
    add(t, what, "GET", path, NULL, NULL, 0, status, code, NULL)

/* A string of `n` copies of `s` followed by `tail`; malloc'd. */
static char *repeat(const char *head, const char *s, size_t n, const char *tail)
{
    size_t sl = strlen(s), hl = strlen(head), tl = strlen(tail);
    char *out = malloc(hl + sl * n + tl + 1);
    if (out == NULL)
        abort();
    memcpy(out, head, hl);
    for (size_t i = 0; i < n; i++)
        memcpy(out + hl + i * sl, s, sl);
    memcpy(out + hl + n * sl, tail, tl + 1);
    return out;
}

static void build_table(struct table *t)
{
    /* framing, refused by libmicrohttpd or by the body limit */
    static const char huge_cl[] =
        "POST /orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        "Content-Type: application/json\r\n"
        "Content-Length: 99999999999999999999999\r\n\r\n{}";
    add_raw(t, "content-length beyond 2^64", huge_cl, sizeof huge_cl - 1, ANY_REJECT,
            NULL, NULL);
    static const char two_cl[] =
        "POST /orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        "Content-Type: application/json\r\nContent-Length: 2\r\n"
        "Content-Length: 27\r\n\r\n{\"sku\": \"valid-sku\", \"x\":1}";
    add_raw(t, "two different content-lengths", two_cl, sizeof two_cl - 1, ANY_REJECT,
            NULL, NULL);
    static const char chunk_ovf[] =
        "POST /orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        "ffffffffffffffffffff\r\n{}\r\n0\r\n\r\n";
    add_raw(t, "chunk size beyond 2^64", chunk_ovf, sizeof chunk_ovf - 1, ANY_REJECT,
            NULL, NULL);
    static const char nul_ctype[] =
        "POST /orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        "Content-Type: text/plain\0application/json\r\nContent-Length: 19\r\n\r\n"
        "{\"sku\":\"valid-sku\"}";
    /* libmicrohttpd 0.9.75 keeps a header value only up to an embedded NUL and reports
     * that shorter length, so the service cannot see what followed. What it must
     * never do is let the bytes after the NUL count: this type reads as text/plain. */
    add_raw(t, "NUL byte inside the Content-Type value", nul_ctype, sizeof nul_ctype - 1,
            ANY_REJECT, NULL, NULL);

    /* header flood: 5000 small headers (it_badinput has one huge header) */
    char *flood = repeat("GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n",
                         "X-Flood: aaaaaaaaaaaaaaaa\r\n", 5000, "\r\n");
    add_raw(t, "5000 headers", flood, strlen(flood), ANY_REJECT, NULL, NULL);
    free(flood);
    char *long_method = repeat("", "X", 3000,
                               " /orders HTTP/1.1\r\nHost: x\r\n"
                               "Connection: close\r\n\r\n");
    add_raw(t, "3000-byte method", long_method, strlen(long_method), ANY_REJECT, NULL,
            NULL);
    free(long_method);
    char *long_path = repeat("GET /admin/skus/", "a", 20000,
                             " HTTP/1.1\r\nHost: x\r\n"
                             "Connection: close\r\n\r\n");
    add_raw(t, "20000-byte sku in the path", long_path, strlen(long_path), ANY_REJECT,
            NULL, NULL);
    free(long_path);

    /* NUL bytes and bad UTF-8 in JSON strings */
    static const char nul_in_str[] = "{\"sku\": \"valid\0-sku\"}";
    ORDERN("raw NUL inside a string", nul_in_str, sizeof nul_in_str - 1, 400, "bad_json");
    static const char nul_after[] = "{\"sku\": \"valid-sku\"}\0{\"junk\": 1}";
    ORDERN("NUL after the object, junk after it", nul_after, sizeof nul_after - 1, 400,
           "bad_json");
    ORDER("\\u0000 inside the sku", "{\"sku\": \"valid-sku\\u0000x\"}", 400, "bad_json");
    ORDER("\\u0000 inside a key", "{\"sku\\u0000\": \"valid-sku\"}", 400, "bad_json");
    ORDER("overlong UTF-8 '/'", "{\"sku\": \"valid-sku\xc0\xaf\"}", 400, "bad_json");
    ORDER("UTF-8 encoded surrogate", "{\"sku\": \"valid-sku\xed\xa0\x80\"}", 400,
          "bad_json");
    ORDER("lone continuation byte", "{\"sku\": \"\x80valid-sku\"}", 400, "bad_json");
    ORDER("escaped lone surrogate", "{\"sku\": \"\\ud800\"}", 400, "bad_json");
    ORDER("non-ASCII sku", "{\"sku\": \"v\xc3\xa4lid-sku\"}", 400, "invalid_field");
    ORDER("sku with newline", "{\"sku\": \"valid-sku\\n\"}", 400, "invalid_field");
    ORDER("sku with CRLF and a command", "{\"sku\": \"valid-sku\\r\\nFLUSHALL\\r\\n\"}",
          400, "invalid_field");
    ORDER("sku is a glob", "{\"sku\": \"*\"}", 400, "invalid_field");
    ORDER("sku is a hash tag", "{\"sku\": \"{valid-sku:0}\"}", 400, "invalid_field");
    ORDER("order_id with glob", "{\"sku\": \"valid-sku\", \"order_id\": \"o*\"}", 400,
          "invalid_field");
    ORDER("order_id with braces", "{\"sku\": \"valid-sku\", \"order_id\": \"{x}\"}", 400,
          "invalid_field");
    ORDER("order_id with newline", "{\"sku\": \"valid-sku\", \"order_id\": \"a\\nb\"}",
          400, "invalid_field");

    /* nesting and size */
    char *deep_arr = repeat("", "[", 30000, "");
    ORDER("30000 nested arrays", deep_arr, 400, "bad_json");
    free(deep_arr);
    char *deep_obj = repeat("", "{\"a\":", 5000, "1");
    ORDER("5000 nested objects", deep_obj, 400, "bad_json");
    free(deep_obj);
    char *deep_field = repeat("{\"sku\": \"valid-sku\", \"qty\": ", "[", 3000, "1");
    ORDER("3000 nested arrays as qty", deep_field, 400, "bad_json");
    free(deep_field);
    char *many_keys = malloc(3000 * 16 + 64);
    int k = sprintf(many_keys, "{\"sku\": \"valid-sku\"");
    for (int i = 0; i < 3000; i++)
        k += sprintf(many_keys + k, ", \"k%d\": %d", i, i);
    strcpy(many_keys + k, "}");
    ORDER("3000 unknown keys (under the body limit)", many_keys, 400, "invalid_field");
    free(many_keys);
    char *long_sku = repeat("{\"sku\": \"", "a", 60000, "\"}");
    ORDER("60000-character sku", long_sku, 400, "invalid_field");
    free(long_sku);

    /* numbers */
    ORDER("qty -0", "{\"sku\": \"valid-sku\", \"qty\": -0}", 400, "invalid_field");
    ORDER("qty 1E0", "{\"sku\": \"valid-sku\", \"qty\": 1E0}", 400, "invalid_field");
    ORDER("qty 01", "{\"sku\": \"valid-sku\", \"qty\": 01}", 400, "bad_json");
    ORDER("qty +1", "{\"sku\": \"valid-sku\", \"qty\": +1}", 400, "bad_json");
    ORDER("qty NaN", "{\"sku\": \"valid-sku\", \"qty\": NaN}", 400, "bad_json");
    ORDER("qty Infinity", "{\"sku\": \"valid-sku\", \"qty\": Infinity}", 400, "bad_json");
    ORDER("qty 0x1", "{\"sku\": \"valid-sku\", \"qty\": 0x1}", 400, "bad_json");
    ORDER("qty 2^63-1", "{\"sku\": \"valid-sku\", \"qty\": 9223372036854775807}", 400,
          "invalid_field");
    ORDER("qty -2^63", "{\"sku\": \"valid-sku\", \"qty\": -9223372036854775808}", 400,
          "invalid_field");
    ORDER("qty 10^20", "{\"sku\": \"valid-sku\", \"qty\": 99999999999999999999}", 400,
          "bad_json");
    PUT("stock 1e20", "{\"stock\": 1e20}", 400, "invalid_field");
    PUT("stock -0.0", "{\"stock\": -0.0}", 400, "invalid_field");
    PUT("stock 2^53", "{\"stock\": 9007199254740992}", 400, "invalid_field");
    PUT("stock 2^64-1", "{\"stock\": 18446744073709551615}", 400, "bad_json");
    PUT("stock 2^63-1", "{\"stock\": 9223372036854775807}", 400, "invalid_field");
    PUT("segments 2^32+1 (1 if cast to int)", "{\"stock\": 5, \"segments\": 4294967297}",
        400, "invalid_field");
    PUT("segments -(2^32-1)", "{\"stock\": 5, \"segments\": -4294967295}", 400,
        "invalid_field");
    PUT("hold_ms 2^32 (0 if cast to int)", "{\"stock\": 5, \"hold_ms\": 4294967296}", 400,
        "invalid_field");
    PUT("mode LOCK", "{\"stock\": 5, \"mode\": \"LOCK\"}", 400, "invalid_field");
    PUT("mode lock + NUL", "{\"stock\": 5, \"mode\": \"lock\\u0000\"}", 400, "bad_json");
    PUT("mode 0", "{\"stock\": 5, \"mode\": 0}", 400, "invalid_field");

    /* content types */
    add(t, "content type list", "POST", "/orders", "application/json, text/plain",
        "{\"sku\": \"valid-sku\"}", -1, 415, "unsupported_media_type", NULL);
    add(t, "content type prefix", "POST", "/orders", "application/jsonx",
        "{\"sku\": \"valid-sku\"}", -1, 415, "unsupported_media_type", NULL);

    /* percent-encoded names in the path */
    GETP("sku with %0A", "/admin/skus/a%0Ab", 400, "invalid_field");
    GETP("sku with %0D%0A and a command", "/admin/skus/a%0D%0AFLUSHALL", 400,
         "invalid_field");
    GETP("sku %2A", "/admin/skus/%2A", 400, "invalid_field");
    GETP("sku %7B%7D", "/admin/skus/%7B%7D", 400, "invalid_field");
    GETP("sku closing brace", "/admin/skus/valid-sku%7D", 400, "invalid_field");
    GETP("sku %09", "/admin/skus/a%09b", 400, "invalid_field");
    GETP("sku %C3%A9", "/admin/skus/%C3%A9", 400, "invalid_field");
    GETP("sku bad escape", "/admin/skus/%zz", 400, "invalid_field");
    GETP("sku %25", "/admin/skus/%25", 400, "invalid_field");
    GETP("sku %2F", "/admin/skus/a%2Fb", 404, "not_found");
    GETP("raw space in the path", "/admin/skus/a b", 400, "invalid_field");
    GETP("order id %2A", "/orders/%2A", 400, "invalid_field");
    GETP("order id %20", "/orders/a%20b", 400, "invalid_field");
    add(t, "put sku %2A", "PUT", "/admin/skus/%2A", JSON, "{\"stock\": 5}", -1, 400,
        "invalid_field", NULL);
    add(t, "delete sku %2A", "DELETE", "/admin/skus/%2A", NULL, NULL, 0, 400,
        "invalid_field", NULL);
    add(t, "delete sku with %0A", "DELETE", "/admin/skus/valid-sku%0A", NULL, NULL, 0,
        400, "invalid_field", NULL);
    /* %00 decodes to a NUL that must not cut the name short */
    GETP("order id with %00", "/orders/x%00y", 400, "invalid_field");
    add(t, "put sku with %00", "PUT", "/admin/skus/ab%00xyz", JSON, "{\"stock\": 5}", -1,
        400, "invalid_field", NULL);
    add(t, "delete sku with %00", "DELETE", "/admin/skus/valid-sku%00x", NULL, NULL, 0,
        400, "invalid_field", NULL);

    /* routes and methods (it_badinput has GET/DELETE/PUT/PATCH on the known routes) */
    add(t, "method BREW", "BREW", "/orders", NULL, NULL, 0, 405, "method_not_allowed",
        "POST");
    add(t, "method OPTIONS", "OPTIONS", "/orders", NULL, NULL, 0, 405,
        "method_not_allowed", "POST");
    add(t, "method TRACE", "TRACE", "/livez", NULL, NULL, 0, 405, "method_not_allowed",
        "GET");
    add(t, "lower-case get", "get", "/livez", NULL, NULL, 0, 405, "method_not_allowed",
        "GET");
    add(t, "PUT /admin/stats", "PUT", "/admin/stats", JSON, "{}", -1, 405,
        "method_not_allowed", "GET");
    add(t, "DELETE /admin/skus", "DELETE", "/admin/skus", NULL, NULL, 0, 405,
        "method_not_allowed", "GET");
    add(t, "POST /healthz", "POST", "/healthz", JSON, "{}", -1, 405, "method_not_allowed",
        "GET");
    GETP("empty order id", "/orders/", 404, "not_found");
    GETP("double slash", "//livez", 404, "not_found");
    GETP("trailing slash", "/livez/", 404, "not_found");
    GETP("below a sku", "/admin/skus/valid-sku/extra", 404, "not_found");
    GETP("upper-case route", "/ADMIN/STATS", 404, "not_found");
}

static void table_free(struct table *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->c[i].req);
    free(t->c);
}

/* Check one case's answer; 0 or -1 after printing why. */
static int judge(const struct hcase *c, const struct h_resp *r)
{
    if (c->status == ANY_REJECT) {
        if (r->status == -1 || (r->status >= 400 && r->status < 500))
            return 0;
        fprintf(stderr, "expected a 4xx or a closed connection, got %d: %.200s\n",
                r->status, r->body != NULL ? r->body : "");
        return -1;
    }
    int bad = h_expect_error(r, c->status, c->code);
    if (c->allow != NULL && strstr(r->allow, c->allow) == NULL) {
        fprintf(stderr, "Allow is '%s', expected it to name %s\n", r->allow, c->allow);
        bad = -1;
    }
    return bad;
}

static void test_hostile_table(void **state)
{
    struct env *e = *state;
    h_deadline(120);
    h_http_set_timeout(10000);
    struct table t = {0};
    build_table(&t);
    char *before = snapshot(e->rc);
    assert_non_null(before);
    assert_non_null(strstr(before, "inv:sku:{" SKU "}"));
    int failures = 0;
    for (size_t i = 0; i < t.n; i++) {
        const struct hcase *c = &t.c[i];
        long long c0 = commands_processed(e->rc);
        struct h_resp r;
        h_http_raw(e->h->port, c->req, c->len, false, &r);
        int bad = judge(c, &r);
        h_resp_free(&r);

        struct h_resp lr;
        int live = h_req(e->h->port, "GET", "/livez", NULL, NULL, &lr);
        h_resp_free(&lr);
        if (live != 200 || !h_svc_alive(e->h->svc)) {
            h_svc_dump_log(e->h->svc, 4000);
            fail_msg("the service is down after case \"%s\" (/livez %d)", c->what, live);
        }
        long long c1 = commands_processed(e->rc);
        if (c0 < 0 || c1 - c0 != 1) {
            fprintf(stderr, "Redis ran %lld commands for this request, expected none\n",
                    c1 - c0 - 1);
            bad = -1;
        }
        char *after = snapshot(e->rc);
        assert_non_null(after);
        if (strcmp(before, after) != 0) {
            print_diff(before, after);
            bad = -1;
            /* Judge the next case against the state it starts from. */
            free(before);
            before = after;
            if (strstr(before, "inv:sku:{" SKU "}") == NULL) {
                h_put_sku(e->h->port, NULL, SKU, STOCK, 4, "lock", 0);
                free(before);
                before = snapshot(e->rc);
                assert_non_null(before);
            }
        } else {
            free(after);
        }
        if (bad) {
            fprintf(stderr, "FAILED hostile case \"%s\"\n\n", c->what);
            failures++;
        }
    }
    free(before);
    fprintf(stderr, "%zu hostile cases, %d failed\n", t.n, failures);
    table_free(&t);
    h_http_set_timeout(30000);
    assert_int_equal(h_audit(e->h->port, NULL, SKU, STOCK, true), 0);
    assert_int_equal(failures, 0);
}

/* ---- sockets held open by the test ------------------------------------------------ */

static int send_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Wait until the server closes `fd` (EOF or reset), draining whatever it sends.
 * Returns the milliseconds since `start` (h_now_ms) when it did, or -1 when it is
 * still open at start + timeout_ms. */
static long long wait_closed(int fd, long long start, int timeout_ms)
{
    long long end = start + timeout_ms;
    char buf[4096];
    for (;;) {
        long long left = end - h_now_ms();
        if (left <= 0)
            return -1;
        struct pollfd p = {fd, POLLIN, 0};
        int rc = poll(&p, 1, (int)left);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return -1;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            return h_now_ms() - start;
    }
}

/* Half a request, then silence: with connection_timeout_s 2 the server must drop
 * each such connection on its own within a bound, and keep serving meanwhile. */
static void test_slow_clients_are_dropped(void **state)
{
    struct env *e = *state;
    h_deadline(90);
    struct h_svc_opts o;
    memset(&o, 0, sizeof o);
    o.config_json = "{\"connection_timeout_s\": 2}";
    h_svc *s = h_svc_start(e->h->redis, &o);
    assert_non_null(s);
    int port = h_svc_port(s);
    json_t *j = h_get_sku(port, NULL, SKU);
    assert_non_null(j);
    long long sold0 = json_integer_value(json_object_get(j, "sold"));
    json_decref(j);

    static const char *const partial[] = {
        "",          /* connected, nothing sent */
        "POST /ord", /* half a request line */
        "POST /orders HTTP/1.1\r\nHost: x\r\nContent-Type: appli",
        "POST /orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 40\r\n\r\n{\"sku\": \"valid-sku\"",
        "POST /orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n40\r\n{\"sku\": \"valid-sku\"",
    };
    enum { N = sizeof partial / sizeof partial[0] };
    int fds[N];
    long long sent = h_now_ms();
    for (int i = 0; i < N; i++) {
        fds[i] = h_connect(port);
        assert_true(fds[i] >= 0);
        assert_int_equal(send_all(fds[i], partial[i], strlen(partial[i])), 0);
    }
    /* The same with a half-close: a client that gave up mid-request. */
    int half = h_connect(port);
    assert_true(half >= 0);
    assert_int_equal(send_all(half, partial[3], strlen(partial[3])), 0);
    shutdown(half, SHUT_WR);

    /* Others are served while those hang. */
    struct h_resp r;
    assert_int_equal(h_req(port, "GET", "/livez", NULL, NULL, &r), 200);
    h_resp_free(&r);
    assert_int_equal(h_order(port, SKU, 1, "slow-neighbour", &r), 201);
    h_resp_free(&r);

    int failures = 0;
    for (int i = 0; i < N; i++) {
        long long ms = wait_closed(fds[i], sent, 15000);
        fprintf(stderr, "slow client %d closed after %lld ms\n", i, ms);
        if (ms < 0) {
            fprintf(stderr, "FAILED: partial request %d still open after 15 s\n", i);
            failures++;
        }
        close(fds[i]);
    }
    long long ms = wait_closed(half, sent, 15000);
    fprintf(stderr, "half-closed slow client closed after %lld ms\n", ms);
    if (ms < 0) {
        fprintf(stderr, "FAILED: half-closed partial request still open after 15 s\n");
        failures++;
    }
    close(half);
    assert_true(h_svc_alive(s));
    assert_int_equal(h_req(port, "GET", "/livez", NULL, NULL, &r), 200);
    h_resp_free(&r);

    /* Only the neighbour's order sold; the partial ones, valid as far as they went,
     * sold nothing. */
    assert_int_equal(h_req(port, "GET", "/orders/slow-neighbour", NULL, NULL, &r), 200);
    h_resp_free(&r);
    j = h_get_sku(port, NULL, SKU);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "sold")), sold0 + 1);
    json_decref(j);
    assert_int_equal(h_audit(port, NULL, SKU, STOCK, true), 0);
    h_svc_free(s);
    assert_int_equal(failures, 0);
}

struct idle_order {
    int port;
    int status[8];
};

static void idle_order_main(int idx, void *ctx)
{
    struct idle_order *o = ctx;
    char id[32];
    snprintf(id, sizeof id, "idle-%d", idx);
    o->status[idx] = h_order(o->port, SKU, 1, id, NULL);
}

/* 2000 connections that never send a byte: /livez, orders and admin calls still
 * answer, the process stays up, and closing them all changes nothing. */
static void test_thousands_of_idle_connections(void **state)
{
    struct env *e = *state;
    h_deadline(90);
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < IDLE_CONNECTIONS + 500) {
        fprintf(stderr, "RLIMIT_NOFILE %llu is too low for %d sockets\n",
                (unsigned long long)rl.rlim_cur, IDLE_CONNECTIONS);
        fail();
    }
    json_t *j0 = h_get_sku(e->h->port, NULL, SKU);
    assert_non_null(j0);
    long long sold0 = json_integer_value(json_object_get(j0, "sold"));
    json_decref(j0);

    int *fds = malloc(IDLE_CONNECTIONS * sizeof *fds);
    assert_non_null(fds);
    int opened = 0;
    for (int i = 0; i < IDLE_CONNECTIONS; i++) {
        fds[i] = h_connect(e->h->port);
        if (fds[i] < 0) {
            fprintf(stderr, "connect %d failed: %s\n", i, strerror(errno));
            break;
        }
        opened++;
    }
    fprintf(stderr, "%d idle connections open\n", opened);
    assert_int_equal(opened, IDLE_CONNECTIONS);
    h_sleep_ms(300); /* let the server accept them all */

    struct h_resp r;
    assert_int_equal(h_req(e->h->port, "GET", "/livez", NULL, NULL, &r), 200);
    h_resp_free(&r);
    struct idle_order o = {.port = e->h->port};
    assert_int_equal(h_parallel(8, idle_order_main, &o), 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(o.status[i], 201);
    assert_int_equal(h_req(e->h->port, "GET", "/admin/stats", NULL, NULL, &r), 200);
    h_resp_free(&r);
    assert_true(h_svc_alive(e->h->svc));

    /* None of the idle ones got an answer or was dropped in the meantime. */
    int closed = 0;
    for (int i = 0; i < opened; i++) {
        struct pollfd p = {fds[i], POLLIN, 0};
        if (poll(&p, 1, 0) > 0)
            closed++;
    }
    fprintf(stderr, "%d of the idle connections were closed by the server\n", closed);
    for (int i = 0; i < opened; i++)
        close(fds[i]);
    free(fds);
    h_sleep_ms(200);
    assert_int_equal(h_req(e->h->port, "GET", "/livez", NULL, NULL, &r), 200);
    h_resp_free(&r);
    assert_true(h_svc_alive(e->h->svc));
    json_t *j = h_get_sku(e->h->port, NULL, SKU);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "sold")), sold0 + 8);
    json_decref(j);
    assert_int_equal(h_audit(e->h->port, NULL, SKU, STOCK, true), 0);
}

int main(void)
{
    /* The idle-connection case needs a few thousand descriptors, here and in the
     * service (which inherits the limit). */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 8192) {
        rl.rlim_cur =
            rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 8192 ? 8192 : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_table),
        cmocka_unit_test(test_slow_clients_are_dropped),
        cmocka_unit_test(test_thousands_of_idle_connections),
    };
    int failed =
        cmocka_run_group_tests_name("hostile", tests, group_setup, group_teardown);
    return h_exit_status(failed);
}
