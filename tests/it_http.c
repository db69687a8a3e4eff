/* it_http.c -- the HTTP layer as bytes on the wire: one response per request, every
 * refusal of ours a JSON error carrying X-Request-Id, what libmicrohttpd answers by
 * itself (api/server.c, docs/FAULTS.md), the Host check, HEAD on every GET route,
 * Location on 201, request ids, and the access log.
 *
 * Requests go out through raw sockets and the answer is read to EOF (every request
 * here says Connection: close), so a second status line or a body after a HEAD reply
 * cannot hide behind a parser that stops at Content-Length.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/harness_net.h"

#define SKU "http-sku"
#define STOCK 1000

/* ---- raw exchanges --------------------------------------------------------------- */

/* Everything the server sent for one connection, up to its EOF. */
struct raw {
    char *buf; /* NUL-terminated */
    size_t len;
    int status;      /* of the first status line; -1 when none */
    size_t head_len; /* bytes up to and including the first blank line; 0 when none */
};

static void raw_free(struct raw *r)
{
    free(r->buf);
    memset(r, 0, sizeof *r);
}

/* Send `len` bytes of `req` to 127.0.0.1:port and read until the server closes (10 s
 * at most). Returns r->status. Send errors are not fatal: a server that refuses early
 * and closes may still have left its answer to read. */
static int fetch(int port, const char *req, size_t len, struct raw *r)
{
    memset(r, 0, sizeof *r);
    r->status = -1;
    size_t cap = 4096;
    r->buf = calloc(1, cap);
    if (r->buf == NULL)
        abort();
    int fd = h_connect(port);
    if (fd < 0)
        return -1;
    for (size_t off = 0; off < len;) {
        ssize_t w = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    long long end = h_now_ms() + 10000;
    for (;;) {
        long long left = end - h_now_ms();
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)left) == 0) {
            fprintf(stderr, "no EOF from the server within 10 s\n");
            break;
        }
        if (r->len + 1 >= cap) {
            cap *= 2;
            r->buf = realloc(r->buf, cap);
            if (r->buf == NULL)
                abort();
        }
        ssize_t n = recv(fd, r->buf + r->len, cap - r->len - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* EOF, or a reset after the answer */
        r->len += (size_t)n;
    }
    close(fd);
    r->buf[r->len] = '\0';
    int major, minor, status;
    if (sscanf(r->buf, "HTTP/%d.%d %d", &major, &minor, &status) == 3)
        r->status = status;
    const char *blank = memmem(r->buf, r->len, "\r\n\r\n", 4);
    if (blank != NULL)
        r->head_len = (size_t)(blank - r->buf) + 4;
    return r->status;
}

static int fetch_str(int port, const char *req, struct raw *r)
{
    return fetch(port, req, strlen(req), r);
}

/* Status lines in the answer: "HTTP/1.x NNN " anywhere (a body before the next
 * answer on the connection does not end in a line break). */
static int status_lines(const struct raw *r)
{
    int n = 0;
    for (const char *p = r->buf; (p = strstr(p, "HTTP/1.")) != NULL; p++)
        if (isdigit((unsigned char)p[7]) && p[8] == ' ' && isdigit((unsigned char)p[9]) &&
            isdigit((unsigned char)p[10]) && isdigit((unsigned char)p[11]) &&
            p[12] == ' ')
            n++;
    return n;
}

/* Value of header `name` in the header block `block` (case-insensitive name, trimmed
 * value) into `out`; false when absent. The block ends at its first blank line. */
static bool block_header(const char *block, const char *name, char *out, size_t cap)
{
    size_t nlen = strlen(name);
    out[0] = '\0';
    const char *line = strstr(block, "\r\n"); /* skip a status line if there is one */
    line = strncmp(block, "HTTP/", 5) == 0 && line != NULL ? line + 2 : block;
    while (*line != '\0' && strncmp(line, "\r\n", 2) != 0) {
        const char *eol = strstr(line, "\r\n");
        size_t llen = eol != NULL ? (size_t)(eol - line) : strlen(line);
        if (llen > nlen && strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
            const char *v = line + nlen + 1;
            while (*v == ' ')
                v++;
            size_t vlen = (size_t)(line + llen - v);
            if (vlen >= cap)
                vlen = cap - 1;
            memcpy(out, v, vlen);
            out[vlen] = '\0';
            return true;
        }
        if (eol == NULL)
            break;
        line = eol + 2;
    }
    return false;
}

static bool raw_header(const struct raw *r, const char *name, char *out, size_t cap)
{
    out[0] = '\0';
    return r->head_len > 0 && block_header(r->buf, name, out, cap);
}

/* Header names of the first head, lower-cased, one per line, "Date" left out. */
static void header_names(const struct raw *r, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    const char *line = strstr(r->buf, "\r\n");
    while (line != NULL && (size_t)(line - r->buf) + 2 < r->head_len) {
        line += 2;
        const char *colon = strchr(line, ':');
        const char *eol = strstr(line, "\r\n");
        if (colon == NULL || eol == NULL || colon > eol)
            break;
        if (!(colon - line == 4 && strncasecmp(line, "date", 4) == 0)) {
            for (const char *c = line; c < colon && n + 2 < cap; c++)
                out[n++] = (char)tolower((unsigned char)*c);
            if (n + 2 < cap)
                out[n++] = '\n';
            out[n] = '\0';
        }
        line = eol;
    }
}

static bool valid_request_id(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
            return false;
    return true;
}

static bool generated_request_id(const char *s)
{
    if (strlen(s) != 16)
        return false;
    for (int i = 0; i < 16; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
            return false;
    return true;
}

/* 0 when `r` is exactly one answer, status `status`, application/json, a valid
 * X-Request-Id, Content-Length the body's, and a body that is exactly
 * {"error": `code`, "detail": "..."}; else prints what differs and returns -1. */
static int expect_json_error(const struct raw *r, int status, const char *code)
{
    int bad = 0;
    char v[256] = "";
    if (status_lines(r) != 1) {
        fprintf(stderr, "%d status lines, expected one\n", status_lines(r));
        bad = -1;
    }
    if (r->status != status) {
        fprintf(stderr, "status %d, expected %d\n", r->status, status);
        bad = -1;
    }
    if (!raw_header(r, "Content-Type", v, sizeof v) || strcmp(v, "application/json")) {
        fprintf(stderr, "Content-Type '%s', expected application/json\n", v);
        bad = -1;
    }
    if (!raw_header(r, "X-Request-Id", v, sizeof v) || !valid_request_id(v)) {
        fprintf(stderr, "X-Request-Id '%s' missing or invalid\n", v);
        bad = -1;
    }
    size_t blen = r->len - r->head_len;
    if (!raw_header(r, "Content-Length", v, sizeof v) || strtoull(v, NULL, 10) != blen) {
        fprintf(stderr, "Content-Length '%s', body has %zu bytes\n", v, blen);
        bad = -1;
    }
    json_error_t e;
    json_t *j = json_loadb(r->buf + r->head_len, blen, 0, &e);
    const char *got = j != NULL ? json_string_value(json_object_get(j, "error")) : NULL;
    if (j == NULL || json_object_size(j) != 2 || got == NULL || strcmp(got, code) != 0 ||
        !json_is_string(json_object_get(j, "detail"))) {
        fprintf(stderr, "body is not {\"error\": \"%s\", \"detail\": ...}\n", code);
        bad = -1;
    }
    json_decref(j);
    if (bad)
        fprintf(stderr, "answer was:\n%.600s\n", r->buf);
    return bad;
}

/* printf into a malloc'd string. */
static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));

static char *fmt(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    if (vasprintf(&s, f, ap) < 0)
        abort();
    va_end(ap);
    return s;
}

/* `n` copies of `s`, malloc'd. */
static char *rep(const char *s, size_t n)
{
    size_t l = strlen(s);
    char *out = malloc(l * n + 1);
    if (out == NULL)
        abort();
    for (size_t i = 0; i < n; i++)
        memcpy(out + i * l, s, l);
    out[l * n] = '\0';
    return out;
}

static void expect_alive(const struct h_env *h, const char *after)
{
    struct h_resp lr;
    int live = h_req(h->port, "GET", "/livez", NULL, NULL, &lr);
    h_resp_free(&lr);
    if (live != 200 || !h_svc_alive(h->svc)) {
        h_svc_dump_log(h->svc, 4000);
        fail_msg("the service is down after \"%s\" (/livez %d)", after, live);
    }
}

/* ---- group fixture --------------------------------------------------------------- */

static int group_setup(void **state)
{
    struct h_env *h = h_env_start(NULL);
    *state = h;
    if (h == NULL)
        return -1;
    return h_put_sku(h->port, NULL, SKU, STOCK, 4, "lock", 0);
}

static int group_teardown(void **state)
{
    return h_env_stop(*state);
}

/* ---- refusals of ours: one JSON answer each -------------------------------------- */

struct refusal {
    const char *what;
    char *req; /* malloc'd */
    int status;
    const char *code;
};

static void test_our_refusals_are_single_json_answers(void **state)
{
    struct h_env *h = *state;
    h_deadline(60);
    char *path = rep("a", 9000), *big = rep("b", 9000), *many = rep("X-A: b\r\n", 150);
    char *body = rep("x", 70000);
    struct refusal cases[] = {
        {"HTTP/1.1 without Host", fmt("GET /livez HTTP/1.1\r\nConnection: close\r\n\r\n"),
         400, "bad_header"},
        {"HTTP/1.1 without Host, with a body",
         fmt("POST /orders HTTP/1.1\r\nConnection: close\r\nContent-Type: "
             "application/json\r\nContent-Length: 2\r\n\r\n{}"),
         400, "bad_header"},
        {"two Host headers",
         fmt("GET /livez HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n"),
         400, "bad_header"},
        {"Content-Length headers that disagree",
         fmt("POST /orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
             "application/json\r\nContent-Length: 2\r\nContent-Length: 27\r\n\r\n"
             "{\"sku\": \"" SKU "\", \"x\": 1}"),
         400, "bad_header"},
        {"path over 8192 bytes",
         fmt("GET /admin/skus/%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path),
         414, "uri_too_long"},
        {"a 9000-byte header",
         fmt("GET /livez HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\nConnection: close\r\n\r\n",
             big),
         431, "headers_too_large"},
        {"150 header lines",
         fmt("GET /livez HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", many), 431,
         "headers_too_large"},
        {"Content-Length over max_body_bytes",
         fmt("POST /orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
             "application/json\r\nContent-Length: 100000\r\n\r\n{}"),
         413, "payload_too_large"},
        {"chunked body over max_body_bytes",
         fmt("POST /orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
             "application/json\r\nTransfer-Encoding: "
             "chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
             70000, body),
         413, "payload_too_large"},
        {"unknown path",
         fmt("GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 404,
         "not_found"},
        {"method not allowed",
         fmt("DELETE /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 405,
         "method_not_allowed"},
        {"wrong content type",
         fmt("POST /orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
             "text/plain\r\nContent-Length: 2\r\n\r\n{}"),
         415, "unsupported_media_type"},
        {"bad JSON",
         fmt("POST /orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
             "application/json\r\nContent-Length: 1\r\n\r\n{"),
         400, "bad_json"},
        {"unknown sku (answered by a worker)",
         fmt("GET /admin/skus/no-such-sku HTTP/1.1\r\nHost: x\r\nConnection: "
             "close\r\n\r\n"),
         404, "unknown_sku"},
    };
    free(path);
    free(big);
    free(many);
    free(body);
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct raw r;
        fetch_str(h->port, cases[i].req, &r);
        if (expect_json_error(&r, cases[i].status, cases[i].code) != 0) {
            fprintf(stderr, "FAILED: %s\n\n", cases[i].what);
            failures++;
        }
        if (cases[i].status == 405) {
            char allow[128];
            raw_header(&r, "Allow", allow, sizeof allow);
            if (strcmp(allow, "GET, HEAD") != 0) {
                fprintf(stderr, "FAILED: %s: Allow '%s', expected 'GET, HEAD'\n",
                        cases[i].what, allow);
                failures++;
            }
        }
        raw_free(&r);
        free(cases[i].req);
        expect_alive(h, cases[i].what);
    }
    assert_int_equal(failures, 0);
}

/* HTTP/1.0 needs no Host; HTTP/1.2 is taken as HTTP/1.1 and does. */
static void test_host_by_version(void **state)
{
    struct h_env *h = *state;
    struct raw r;
    assert_int_equal(fetch_str(h->port, "GET /livez HTTP/1.0\r\n\r\n", &r), 200);
    assert_int_equal(status_lines(&r), 1);
    assert_string_equal(r.buf + r.head_len, "{\"status\":\"ok\"}");
    raw_free(&r);
    fetch_str(h->port, "GET /livez HTTP/1.2\r\nConnection: close\r\n\r\n", &r);
    assert_int_equal(expect_json_error(&r, 400, "bad_header"), 0);
    raw_free(&r);
    assert_int_equal(
        fetch_str(h->port, "GET /livez HTTP/1.1\r\nhOsT: x\r\nConnection: close\r\n\r\n",
                  &r),
        200);
    raw_free(&r);
}

/* Requests pipelined on one connection get one answer each, in order. */
static void test_pipelined_requests_one_answer_each(void **state)
{
    struct h_env *h = *state;
    static const char req[] =
        "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"
        "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
        "HEAD /livez HTTP/1.1\r\nHost: x\r\n\r\n"
        "GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    struct raw r;
    assert_int_equal(fetch_str(h->port, req, &r), 200);
    assert_int_equal(status_lines(&r), 4);
    const char *second = strstr(r.buf + 1, "HTTP/1.1 ");
    assert_non_null(second);
    assert_int_equal(atoi(second + 9), 404);
    raw_free(&r);
}

/* ---- what libmicrohttpd answers by itself ----------------------------------------- */

/* libmicrohttpd 0.9.75 sends the status line and headers of a refusal made while it
 * parses the headers twice (api/server.c, docs/FAULTS.md); no other version may. */
static bool mhd_sends_head_twice(void)
{
    return strcmp(MHD_get_version(), "0.9.75") == 0;
}

static void test_library_refusals(void **state)
{
    struct h_env *h = *state;
    h_deadline(60);
    char *path = rep("a", 20000), *big = rep("b", 20000), *many = rep("X-A: b\r\n", 300);
    struct {
        const char *what;
        char *req;
        int status;      /* -1: closed without an answer */
        bool head_twice; /* the 0.9.75 defect applies */
    } cases[] = {
        {"HTTP/2.0", fmt("GET /livez HTTP/2.0\r\nHost: x\r\n\r\n"), 505, false},
        {"HTTP/0.9", fmt("GET /livez HTTP/0.9\r\nHost: x\r\n\r\n"), 505, false},
        {"malformed version", fmt("GET /livez HTTX/1.1\r\nHost: x\r\n\r\n"), 400, false},
        {"request line without a space", fmt("GARBAGE\r\n\r\n"), -1, false},
        {"header line without a colon",
         fmt("GET /livez HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n"), 400, false},
        {"20000-byte path", fmt("GET /%s HTTP/1.1\r\nHost: x\r\n\r\n", path), 414, false},
        {"20000-byte header",
         fmt("GET /livez HTTP/1.1\r\nHost: x\r\nX-B: %s\r\n\r\n", big), 431, false},
        {"300 header lines", fmt("GET /livez HTTP/1.1\r\nHost: x\r\n%s\r\n", many), 431,
         false},
        {"Content-Length: abc",
         fmt("POST /orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: abc\r\nConnection: close\r\n\r\n{}"),
         400, true},
        {"Content-Length beyond 2^64",
         fmt("POST /orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: 99999999999999999999999\r\nConnection: close\r\n\r\n{}"),
         413, true},
    };
    free(path);
    free(big);
    free(many);
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct raw r;
        fetch_str(h->port, cases[i].req, &r);
        int want_lines = cases[i].status < 0 ? 0 : 1;
        if (cases[i].head_twice && mhd_sends_head_twice())
            want_lines = 2;
        if (r.status != cases[i].status || status_lines(&r) != want_lines) {
            fprintf(
                stderr, "FAILED: %s: status %d in %d status lines, expected %d in %d\n",
                cases[i].what, r.status, status_lines(&r), cases[i].status, want_lines);
            fprintf(stderr, "answer was:\n%.600s\n\n", r.buf);
            failures++;
        }
        if (want_lines == 2) {
            /* Exactly the same head twice (but the Date), then one body. */
            char cl[32], cl2[32];
            const char *second = r.buf + r.head_len;
            size_t blen = 0;
            if (raw_header(&r, "Content-Length", cl, sizeof cl) &&
                block_header(second, "Content-Length", cl2, sizeof cl2) &&
                strcmp(cl, cl2) == 0 && strstr(second, "\r\n\r\n") != NULL)
                blen = r.len - (size_t)(strstr(second, "\r\n\r\n") + 4 - r.buf);
            if (blen == 0 || blen != strtoull(cl, NULL, 10)) {
                fprintf(stderr, "FAILED: %s: not two heads and one body\n%.600s\n\n",
                        cases[i].what, r.buf);
                failures++;
            }
        }
        raw_free(&r);
        free(cases[i].req);
        expect_alive(h, cases[i].what);
    }
    assert_int_equal(failures, 0);
}

/* ---- HEAD ------------------------------------------------------------------------- */

static void test_head_matches_get(void **state)
{
    struct h_env *h = *state;
    h_deadline(60);
    assert_int_equal(h_order(h->port, SKU, 1, "http-head-1", NULL), 201);
    struct {
        const char *path;
        bool stable; /* the GET body cannot change between the two requests */
    } paths[] = {
        {"/livez", true},
        {"/healthz", true},
        {"/admin/skus", true},
        {"/admin/skus/" SKU, true},
        {"/orders/http-head-1", true},
        {"/orders/no-such-order", true},
        {"/admin/skus/nope", true},
        {"/admin/stats", false},
        {"/metrics", false},
        {"/openapi.json", true},
    };
    /* HEAD where there is no GET: 405, no body. */
    struct raw r;
    fetch_str(h->port, "HEAD /orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
              &r);
    char allow[64];
    assert_int_equal(r.status, 405);
    assert_int_equal(status_lines(&r), 1);
    assert_int_equal(r.len, r.head_len);
    assert_true(raw_header(&r, "Allow", allow, sizeof allow));
    assert_string_equal(allow, "POST");
    raw_free(&r);

    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        char *get =
            fmt("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", paths[i].path);
        char *head = fmt("HEAD %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                         paths[i].path);
        struct raw g, hd;
        fetch_str(h->port, get, &g);
        fetch_str(h->port, head, &hd);
        char gnames[512], hnames[512], gct[128], hct[128], hcl[32], hid[80];
        header_names(&g, gnames, sizeof gnames);
        header_names(&hd, hnames, sizeof hnames);
        raw_header(&g, "Content-Type", gct, sizeof gct);
        raw_header(&hd, "Content-Type", hct, sizeof hct);
        bool has_cl = raw_header(&hd, "Content-Length", hcl, sizeof hcl);
        raw_header(&hd, "X-Request-Id", hid, sizeof hid);
        size_t glen = g.len - g.head_len;
        if (g.status < 200 || hd.status != g.status || status_lines(&hd) != 1 ||
            hd.head_len == 0 || hd.len != hd.head_len || strcmp(gnames, hnames) != 0 ||
            strcmp(gct, hct) != 0 || !has_cl || !generated_request_id(hid) ||
            (paths[i].stable ? strtoull(hcl, NULL, 10) != glen
                             : strtoull(hcl, NULL, 10) == 0)) {
            fprintf(stderr, "GET answer:\n%.400s\n\nHEAD answer:\n%.400s\n", g.buf,
                    hd.buf);
            fail_msg("HEAD %s does not match its GET", paths[i].path);
        }
        raw_free(&g);
        raw_free(&hd);
        free(get);
        free(head);
    }
}

/* ---- Location -----------------------------------------------------------------------
 */

static void test_created_order_has_location(void **state)
{
    struct h_env *h = *state;
    char loc[128];
    struct h_resp r;
    assert_int_equal(h_order(h->port, SKU, 1, "http-loc-1", &r), 201);
    assert_true(block_header(r.headers, "Location", loc, sizeof loc));
    assert_string_equal(loc, "/orders/http-loc-1");
    h_resp_free(&r);

    assert_int_equal(h_order(h->port, SKU, 1, "http-loc-1", &r), 200); /* a replay */
    assert_false(block_header(r.headers, "Location", loc, sizeof loc));
    h_resp_free(&r);

    /* A 64-character id: the longest Location there is. */
    char id[65];
    memset(id, 'L', 64);
    id[64] = '\0';
    assert_int_equal(h_order(h->port, SKU, 1, id, &r), 201);
    assert_true(block_header(r.headers, "Location", loc, sizeof loc));
    assert_int_equal(strlen(loc), strlen("/orders/") + 64);
    assert_string_equal(loc + strlen("/orders/"), id);
    h_resp_free(&r);

    /* Without an order_id the Location names the one the service made up. */
    assert_int_equal(h_order(h->port, SKU, 1, NULL, &r), 201);
    assert_true(block_header(r.headers, "Location", loc, sizeof loc));
    json_t *j = h_resp_json(&r);
    assert_non_null(j);
    char want[128];
    snprintf(want, sizeof want, "/orders/%s",
             json_string_value(json_object_get(j, "order_id")));
    assert_string_equal(loc, want);
    struct h_resp g;
    assert_int_equal(h_req(h->port, "GET", loc, NULL, NULL, &g), 200);
    assert_string_equal(g.body, r.body);
    json_decref(j);
    h_resp_free(&g);
    h_resp_free(&r);
    assert_int_equal(h_audit(h->port, NULL, SKU, STOCK, true), 0);
}

/* ---- X-Request-Id --------------------------------------------------------------------
 */

/* Send `method path` with `headers` and `body` (NULL: none); the X-Request-Id of the
 * answer into `out` ("" when none). Returns the status; the body's length in *blen
 * when `blen` is not NULL. */
static int answer_id(int port, const char *method, const char *path, const char *headers,
                     const char *body, char *out, size_t cap, size_t *blen)
{
    struct h_resp r;
    int st = h_http(port, method, path, headers, body, body ? strlen(body) : 0, &r);
    if (!block_header(r.headers, "X-Request-Id", out, cap))
        out[0] = '\0';
    if (blen != NULL)
        *blen = r.body_len;
    h_resp_free(&r);
    return st;
}

static void test_request_ids(void **state)
{
    struct h_env *h = *state;
    char id[128];

    /* A valid one is echoed, on success, on errors and from a worker alike. */
    static const char *const hj = "X-Request-Id: abc.DEF_1-2\r\n"
                                  "Content-Type: application/json\r\n";
    assert_int_equal(answer_id(h->port, "GET", "/livez", hj, NULL, id, sizeof id, NULL),
                     200);
    assert_string_equal(id, "abc.DEF_1-2");
    assert_int_equal(answer_id(h->port, "GET", "/nope", hj, NULL, id, sizeof id, NULL),
                     404);
    assert_string_equal(id, "abc.DEF_1-2");
    assert_int_equal(answer_id(h->port, "PUT", "/livez", hj, "{}", id, sizeof id, NULL),
                     405);
    assert_string_equal(id, "abc.DEF_1-2");
    assert_int_equal(answer_id(h->port, "POST", "/orders", hj, "{", id, sizeof id, NULL),
                     400);
    assert_string_equal(id, "abc.DEF_1-2");
    assert_int_equal(
        answer_id(h->port, "GET", "/orders/nope", hj, NULL, id, sizeof id, NULL), 404);
    assert_string_equal(id, "abc.DEF_1-2");
    char *big = rep("x", 70000);
    assert_int_equal(answer_id(h->port, "POST", "/orders", hj, big, id, sizeof id, NULL),
                     413);
    assert_string_equal(id, "abc.DEF_1-2");
    free(big);
    struct raw r;
    fetch_str(h->port,
              "GET /livez HTTP/1.1\r\nX-Request-Id: no-host\r\nConnection: close\r\n\r\n",
              &r);
    assert_int_equal(r.status, 400);
    assert_true(raw_header(&r, "X-Request-Id", id, sizeof id));
    assert_string_equal(id, "no-host");
    raw_free(&r);

    /* 64 characters is the longest taken. */
    char h64[128], want[65];
    memset(want, '7', 64);
    want[64] = '\0';
    snprintf(h64, sizeof h64, "X-Request-Id: %s\r\n", want);
    answer_id(h->port, "GET", "/livez", h64, NULL, id, sizeof id, NULL);
    assert_string_equal(id, want);

    /* Anything else is replaced by a generated one, never refused. */
    static const char *const invalid[] = {
        "X-Request-Id: "
        "77777777777777777777777777777777777777777777777777777777777777777\r\n",
        "X-Request-Id: a b\r\n",
        "X-Request-Id: x*y\r\n",
        "X-Request-Id: {tag}\r\n",
        "X-Request-Id: caf\xc3\xa9\r\n",
        "X-Request-Id: \r\n",
        NULL, /* absent */
    };
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        assert_int_equal(
            answer_id(h->port, "GET", "/livez", invalid[i], NULL, id, sizeof id, NULL),
            200);
        if (!generated_request_id(id))
            fail_msg("case %zu: X-Request-Id '%s' is not 16 hex characters", i, id);
    }

    /* Generated ones differ. */
    char seen[50][20];
    for (int i = 0; i < 50; i++) {
        answer_id(h->port, "GET", "/livez", NULL, NULL, seen[i], sizeof seen[i], NULL);
        assert_true(generated_request_id(seen[i]));
        for (int k = 0; k < i; k++)
            assert_string_not_equal(seen[i], seen[k]);
    }
}

/* ---- access log ------------------------------------------------------------------ */

/* The access lines of a JSON log file: a new array of objects (NULL when unreadable). */
static json_t *access_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    json_t *out = json_array();
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        const char *msg = j != NULL ? json_string_value(json_object_get(j, "msg")) : NULL;
        if (msg != NULL && strcmp(msg, "access") == 0)
            json_array_append(out, j);
        json_decref(j);
    }
    free(line);
    fclose(f);
    return out;
}

/* The access line with request_id `id` (borrowed from `lines`), waiting up to 3 s for
 * it to be written: the line is written after the answer has been sent. */
static json_t *wait_line(const char *path, const char *id, json_t **lines)
{
    long long end = h_now_ms() + 3000;
    for (;;) {
        json_decref(*lines);
        *lines = access_lines(path);
        size_t i;
        json_t *l;
        json_array_foreach(*lines, i, l)
        {
            const char *rid = json_string_value(json_object_get(l, "request_id"));
            if (rid != NULL && strcmp(rid, id) == 0)
                return l;
        }
        if (h_now_ms() > end)
            return NULL;
        h_sleep_ms(20);
    }
}

static void expect_line(const char *path, const char *id, const char *method,
                        const char *target, int status, long long bytes)
{
    json_t *lines = NULL;
    json_t *l = wait_line(path, id, &lines);
    if (l == NULL)
        fail_msg("no access line with request_id %s", id);
    const char *m = json_string_value(json_object_get(l, "method"));
    const char *p = json_string_value(json_object_get(l, "path"));
    json_t *ms = json_object_get(l, "ms");
    if (m == NULL || strcmp(m, method) != 0 || p == NULL || strcmp(p, target) != 0 ||
        json_integer_value(json_object_get(l, "status")) != status ||
        json_integer_value(json_object_get(l, "bytes")) != bytes || !json_is_number(ms) ||
        json_number_value(ms) < 0 || json_number_value(ms) > 5000) {
        char *text = json_dumps(l, JSON_COMPACT);
        fail_msg("access line %s, expected %s %s %d %lld bytes", text, method, target,
                 status, bytes);
    }
    json_decref(lines);
}

static void test_access_log(void **state)
{
    struct h_env *h = *state;
    h_deadline(60);
    char *dir = h_tempdir("it_http");
    assert_non_null(dir);
    char *log = fmt("%s/inventoryd.log", dir);
    char *conf = fmt("{\"log_file\": \"%s\", \"log_format\": \"json\"}", log);
    struct h_svc_opts o;
    memset(&o, 0, sizeof o);
    o.config_json = conf;
    h_svc *s = h_svc_start(h->redis, &o);
    assert_non_null(s);
    int port = h_svc_port(s);
    char id[80];

    answer_id(port, "GET", "/livez", "X-Request-Id: log-1\r\n", NULL, id, sizeof id,
              NULL);
    expect_line(log, "log-1", "GET", "/livez", 200, 15);
    struct raw raw;
    fetch_str(port,
              "HEAD /livez HTTP/1.1\r\nHost: x\r\nX-Request-Id: log-2\r\n"
              "Connection: close\r\n\r\n",
              &raw);
    raw_free(&raw);
    expect_line(log, "log-2", "HEAD", "/livez", 200, 0);
    struct h_resp r;
    h_http(port, "POST", "/orders",
           "X-Request-Id: log-3\r\nContent-Type: application/json\r\n", "{", 1, &r);
    expect_line(log, "log-3", "POST", "/orders", 400, (long long)r.body_len);
    h_resp_free(&r);
    /* The request-target as sent, its query apart with secret values masked, the
     * client's address and user agent. */
    size_t blen = 0;
    answer_id(port, "GET", "/admin/skus/a%0Ab?token=secret&x=1&api_key=k",
              "X-Request-Id: log-4\r\nUser-Agent: it-http/1.0 (test)\r\n", NULL, id,
              sizeof id, &blen);
    expect_line(log, "log-4", "GET", "/admin/skus/a%0Ab", 400, (long long)blen);
    json_t *lines4 = NULL, *l = wait_line(log, "log-4", &lines4);
    assert_non_null(l);
    const char *query = json_string_value(json_object_get(l, "query"));
    const char *agent = json_string_value(json_object_get(l, "user_agent"));
    assert_non_null(query);
    assert_non_null(agent);
    assert_string_equal(query, "token=***&x=1&api_key=***");
    assert_string_equal(agent, "it-http/1.0 (test)");
    const char *client = json_string_value(json_object_get(l, "client"));
    assert_non_null(client);
    assert_memory_equal(client, "127.0.0.1:", 10);
    assert_true(atoi(client + 10) > 0);
    json_decref(lines4);
    /* A generated id is logged as answered. */
    answer_id(port, "GET", "/orders/nope", NULL, NULL, id, sizeof id, &blen);
    assert_true(generated_request_id(id));
    expect_line(log, id, "GET", "/orders/nope", 404, (long long)blen);
    /* A refusal of libmicrohttpd's own after the request line: its status, no method. */
    fetch_str(port,
              "POST /orders HTTP/1.1\r\nHost: x\r\nX-Request-Id: log-5\r\n"
              "Content-Length: abc\r\nConnection: close\r\n\r\n{}",
              &raw);
    raw_free(&raw);
    expect_line(log, "log-5", "-", "/orders", 400, 0);
    assert_int_equal(h_svc_stop_clean(s), 0);
    h_svc_free(s);

    /* access_log false: the other lines, but no access line. */
    char *log2 = fmt("%s/quiet.log", dir);
    char *conf2 = fmt(
        "{\"log_file\": \"%s\", \"log_format\": \"json\", \"access_log\": false}", log2);
    o.config_json = conf2;
    s = h_svc_start(h->redis, &o);
    assert_non_null(s);
    port = h_svc_port(s);
    answer_id(port, "GET", "/livez", "X-Request-Id: quiet-1\r\n", NULL, id, sizeof id,
              NULL);
    answer_id(port, "GET", "/nope", "X-Request-Id: quiet-2\r\n", NULL, id, sizeof id,
              NULL);
    assert_int_equal(h_svc_stop_clean(s), 0);
    h_svc_free(s);
    json_t *lines = access_lines(log2);
    assert_non_null(lines);
    assert_int_equal(json_array_size(lines), 0);
    json_decref(lines);
    FILE *f = fopen(log2, "r");
    assert_non_null(f); /* the startup lines went there */
    fclose(f);

    h_rmtree(dir);
    free(dir);
    free(log);
    free(conf);
    free(log2);
    free(conf2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_our_refusals_are_single_json_answers),
        cmocka_unit_test(test_host_by_version),
        cmocka_unit_test(test_pipelined_requests_one_answer_each),
        cmocka_unit_test(test_library_refusals),
        cmocka_unit_test(test_head_matches_get),
        cmocka_unit_test(test_created_order_has_location),
        cmocka_unit_test(test_request_ids),
        cmocka_unit_test(test_access_log),
    };
    return h_exit_status(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
