/* it_dashboard.c -- the dashboard over HTTP: the embedded page, the event stream
 * (format, rate, heartbeat-free idling, validation, tickets, a slow reader dropped,
 * clean ends at shutdown), the simulated orders (validation, a run audited, a stop),
 * and last the browser test (tests/browser/dashboard.test.js in headless Chromium, the
 * service started with RedLock and memcached for its second comparison),
 * skipped with a line saying why when chromium, node or tests/browser/node_modules is
 * missing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <libgen.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/harness_net.h"
#include "tests/harness_lock.h"

#define TOKEN "dash-secret"
#define BROWSER_DIR "tests/browser"
#define BROWSER_TEST BROWSER_DIR "/dashboard.test.js"

struct env {
    struct h_env *h; /* the open instance (no admin token) */
    h_svc *tok;      /* a second instance on the same Redis, with TOKEN */
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
    const char *args[] = {"--admin-token", TOKEN, NULL};
    e->tok = h_svc_start_args(e->h->redis, args);
    return e->tok != NULL ? 0 : -1;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    if (e == NULL)
        return 0;
    int rc = h_svc_stop_clean(e->tok) | h_env_stop(e->h);
    h_svc_free(e->tok);
    free(e);
    return rc;
}

/* ---- a small Server-Sent Events client ---------------------------------------- */

struct sse {
    int fd;
    int status;
    char head[4096]; /* the response head */
    char *raw;       /* bytes received and not yet de-chunked */
    size_t rlen, rcap;
    long long chunk; /* bytes left in the current chunk; -1: expect a size line */
    bool ended;      /* the terminating chunk came */
    char *text;      /* de-chunked stream bytes not yet parsed into events */
    size_t tlen, tcap;
};

struct sse_event {
    char name[32]; /* "message" unless an event: line said otherwise */
    char *data;    /* the data lines joined; NULL for a comment-only block */
    char comment[64];
};

static void grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    *buf = realloc(*buf, c);
    assert_non_null(*buf);
    *cap = c;
}

/* Read what is there (waiting up to `ms`) into s->raw. 1 read something, 0 timed
 * out, -1 EOF or error. */
static int sse_fill(struct sse *s, int ms)
{
    struct pollfd p = {.fd = s->fd, .events = POLLIN};
    int n = poll(&p, 1, ms);
    if (n <= 0)
        return 0;
    grow(&s->raw, &s->rcap, s->rlen + 65536);
    ssize_t k = recv(s->fd, s->raw + s->rlen, 65536, 0);
    if (k <= 0)
        return -1;
    s->rlen += (size_t)k;
    return 1;
}

/* Open GET /admin/events`query` with extra header lines `headers` (or NULL). The
 * status is in s->status; the body is read by sse_next. */
static int sse_open(struct sse *s, int port, const char *query, const char *headers)
{
    memset(s, 0, sizeof *s);
    s->chunk = -1;
    s->fd = h_connect(port);
    if (s->fd < 0)
        return -1;
    char req[2048];
    int n = snprintf(req, sizeof req,
                     "GET /admin/events%s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Accept: text/event-stream\r\n%s\r\n",
                     query, headers != NULL ? headers : "");
    if (send(s->fd, req, (size_t)n, MSG_NOSIGNAL) != n)
        return -1;
    long long until = h_now_ms() + 5000;
    char *end = NULL;
    while ((end = s->rlen ? memmem(s->raw, s->rlen, "\r\n\r\n", 4) : NULL) == NULL) {
        if (h_now_ms() > until || sse_fill(s, 200) < 0)
            return -1;
    }
    size_t hl = (size_t)(end - s->raw) + 4;
    snprintf(s->head, sizeof s->head, "%.*s", (int)hl, s->raw);
    memmove(s->raw, s->raw + hl, s->rlen - hl);
    s->rlen -= hl;
    if (sscanf(s->head, "HTTP/1.%*d %d", &s->status) != 1)
        return -1;
    return 0;
}

static void sse_close(struct sse *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    free(s->raw);
    free(s->text);
    s->raw = s->text = NULL;
}

/* Move whole chunks' bytes from raw to text. */
static void dechunk(struct sse *s)
{
    size_t pos = 0;
    while (!s->ended && pos < s->rlen) {
        if (s->chunk < 0) {
            char *eol = memmem(s->raw + pos, s->rlen - pos, "\r\n", 2);
            if (eol == NULL)
                break;
            s->chunk = strtoll(s->raw + pos, NULL, 16);
            pos = (size_t)(eol - s->raw) + 2;
            if (s->chunk == 0)
                s->ended = true;
            continue;
        }
        if (s->chunk == 0) { /* the CRLF after a chunk's data */
            if (s->rlen - pos < 2)
                break;
            pos += 2;
            s->chunk = -1;
            continue;
        }
        size_t k = s->rlen - pos < (size_t)s->chunk ? s->rlen - pos : (size_t)s->chunk;
        grow(&s->text, &s->tcap, s->tlen + k + 1);
        memcpy(s->text + s->tlen, s->raw + pos, k);
        s->tlen += k;
        s->text[s->tlen] = '\0';
        s->chunk -= (long long)k;
        pos += k;
    }
    memmove(s->raw, s->raw + pos, s->rlen - pos);
    s->rlen -= pos;
}

/* The next event block within `ms`: 1 with `ev` filled (free ev->data), 0 timed out,
 * -1 the stream ended (cleanly when s->ended). */
static int sse_next(struct sse *s, struct sse_event *ev, int ms)
{
    long long until = h_now_ms() + ms;
    memset(ev, 0, sizeof *ev);
    for (;;) {
        dechunk(s);
        char *end = s->tlen ? strstr(s->text, "\n\n") : NULL;
        if (end != NULL) {
            size_t blen = (size_t)(end - s->text);
            snprintf(ev->name, sizeof ev->name, "message");
            for (char *line = s->text; line < s->text + blen;) {
                char *nl = memchr(line, '\n', (size_t)(s->text + blen - line));
                size_t ll = nl ? (size_t)(nl - line) : (size_t)(s->text + blen - line);
                if (ll >= 6 && strncmp(line, "data: ", 6) == 0) {
                    ev->data = strndup(line + 6, ll - 6);
                } else if (ll >= 7 && strncmp(line, "event: ", 7) == 0) {
                    snprintf(ev->name, sizeof ev->name, "%.*s", (int)ll - 7, line + 7);
                } else if (ll >= 1 && line[0] == ':') {
                    snprintf(ev->comment, sizeof ev->comment, "%.*s", (int)ll, line);
                }
                line += ll + 1;
            }
            memmove(s->text, end + 2, s->tlen - blen - 2 + 1);
            s->tlen -= blen + 2;
            return 1;
        }
        if (s->ended)
            return -1;
        long long left = until - h_now_ms();
        if (left <= 0)
            return 0;
        if (sse_fill(s, (int)left) < 0)
            return -1;
    }
}

/* The next data event as JSON within `ms` (comments skipped); NULL when none. */
static json_t *sse_next_json(struct sse *s, int ms)
{
    long long until = h_now_ms() + ms;
    for (;;) {
        long long left = until - h_now_ms();
        struct sse_event ev;
        if (left <= 0 || sse_next(s, &ev, (int)left) != 1)
            return NULL;
        if (ev.data != NULL && strcmp(ev.name, "message") == 0) {
            json_t *j = json_loads(ev.data, 0, NULL);
            free(ev.data);
            assert_non_null(j);
            return j;
        }
        free(ev.data);
    }
}

static json_t *sku_of(json_t *update, const char *name)
{
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(update, "skus"), i, s)
    {
        if (strcmp(json_string_value(json_object_get(s, "sku")), name) == 0)
            return s;
    }
    return NULL;
}

/* Start a simulation; returns the HTTP status. */
static int simulate(int port, const char *token, const char *sku, const char *body,
                    struct h_resp *out)
{
    char path[160];
    snprintf(path, sizeof path, "/admin/skus/%s/simulate", sku);
    return h_req(port, "POST", path, token, body, out);
}

/* GET the SKU's simulation until it is no longer running (at most `ms`); returns its
 * status JSON (new reference) or NULL. */
static json_t *sim_wait(int port, const char *token, const char *sku, int ms)
{
    char path[160];
    snprintf(path, sizeof path, "/admin/skus/%s/simulate", sku);
    long long until = h_now_ms() + ms;
    while (h_now_ms() < until) {
        struct h_resp r;
        h_req(port, "GET", path, token, NULL, &r);
        json_t *j = r.status == 200 ? h_resp_json(&r) : NULL;
        h_resp_free(&r);
        const char *st = json_string_value(json_object_get(j, "state"));
        if (st != NULL && strcmp(st, "running") != 0 && strcmp(st, "stopping") != 0)
            return j;
        json_decref(j);
        h_sleep_ms(50);
    }
    return NULL;
}

/* ---- the page ------------------------------------------------------------------ */

static bool has_header(const struct h_resp *r, const char *line)
{
    return r->headers != NULL && strcasestr(r->headers, line) != NULL;
}

static void test_page_is_served(void **state)
{
    struct env *e = *state;
    int port = e->h->port;
    struct h_resp r;
    assert_int_equal(h_http(port, "GET", "/", NULL, NULL, 0, &r), 200);
    assert_string_equal(r.content_type, "text/html; charset=utf-8");
    assert_non_null(strstr(r.body, "<!doctype html>"));
    assert_non_null(strstr(r.body, "/ui/app.js"));
    assert_true(has_header(&r, "Content-Security-Policy: default-src 'self'"));
    assert_true(has_header(&r, "Cache-Control: no-cache"));
    h_resp_free(&r);

    assert_int_equal(h_http(port, "GET", "/ui/app.js", NULL, NULL, 0, &r), 200);
    assert_string_equal(r.content_type, "text/javascript; charset=utf-8");
    assert_non_null(strstr(r.body, "EventSource"));
    h_resp_free(&r);
    assert_int_equal(h_http(port, "GET", "/ui/app.css", NULL, NULL, 0, &r), 200);
    assert_string_equal(r.content_type, "text/css; charset=utf-8");
    assert_non_null(strstr(r.body, "prefers-color-scheme: dark"));
    h_resp_free(&r);
    /* HEAD: the head alone (the harness client would wait for the body). */
    static const char head[] = "HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    int fd = h_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(send(fd, head, sizeof head - 1, MSG_NOSIGNAL),
                     (ssize_t)sizeof head - 1);
    char got[4096];
    size_t n = 0;
    ssize_t k;
    while (n < sizeof got - 1 && (k = recv(fd, got + n, sizeof got - 1 - n, 0)) > 0)
        n += (size_t)k;
    got[n] = '\0';
    close(fd);
    assert_int_equal(strncmp(got, "HTTP/1.1 200", 12), 0);
    char *end = strstr(got, "\r\n\r\n");
    assert_non_null(end);
    assert_string_equal(end + 4, "");

    assert_int_equal(h_http(port, "GET", "/ui/nope.js", NULL, NULL, 0, &r), 404);
    assert_int_equal(h_expect_error(&r, 404, "not_found"), 0);
    h_resp_free(&r);
    assert_int_equal(h_http(port, "GET", "/ui/..%2fetc", NULL, NULL, 0, &r), 404);
    h_resp_free(&r);
    assert_int_equal(h_http(port, "GET", "/ui/a%20b", NULL, NULL, 0, &r), 400);
    h_resp_free(&r);
    assert_int_equal(h_http(port, "POST", "/", NULL, NULL, 0, &r), 405);
    h_resp_free(&r);

    /* Whether the page must ask for a token, on both instances; and what the
     * comparison may pit: the store's locks, a lock service not started greyed out
     * with why, and atomic. */
    assert_int_equal(h_http(port, "GET", "/ui/config.json", NULL, NULL, 0, &r), 200);
    json_t *cfg = h_resp_json(&r);
    h_resp_free(&r);
    assert_string_equal(json_string_value(json_object_get(cfg, "auth")), "none");
    assert_string_equal(json_string_value(json_object_get(cfg, "store")), "redis");
    assert_true(json_is_false(json_object_get(cfg, "lab")));
    json_t *st = json_object_get(cfg, "strategies");
    static const char *const want[] = {"redis", "redlock", "memcached", "zookeeper",
                                       NULL};
    assert_int_equal(json_array_size(st), 5);
    for (size_t i = 0; i < 5; i++) {
        json_t *s = json_array_get(st, i);
        const char *why = json_string_value(json_object_get(s, "why"));
        bool service = i > 0 && i < 4;
        assert_string_equal(json_string_value(json_object_get(s, "mode")),
                            i < 4 ? "lock" : "atomic");
        assert_true(json_is_true(json_object_get(s, "available")) == !service);
        if (want[i] == NULL) {
            assert_null(json_object_get(s, "lock"));
            continue;
        }
        assert_string_equal(json_string_value(json_object_get(s, "lock")), want[i]);
        assert_true(json_is_true(json_object_get(s, "service")) == service);
        char expect[64];
        snprintf(expect, sizeof expect, "not started with --%s", want[i]);
        if (service)
            assert_string_equal(why, expect);
        else
            assert_null(why);
    }
    json_decref(cfg);
    assert_int_equal(
        h_http(h_svc_port(e->tok), "GET", "/ui/config.json", NULL, NULL, 0, &r), 200);
    cfg = h_resp_json(&r);
    h_resp_free(&r);
    assert_string_equal(json_string_value(json_object_get(cfg, "auth")), "bearer");
    json_decref(cfg);
    /* The page itself needs no token; the admin API it calls does. */
    assert_int_equal(h_http(h_svc_port(e->tok), "GET", "/", NULL, NULL, 0, &r), 200);
    h_resp_free(&r);
}

/* ---- the event stream ---------------------------------------------------------- */

static void test_stream_format_and_updates(void **state)
{
    struct env *e = *state;
    int port = e->h->port;
    struct sse s;
    assert_int_equal(sse_open(&s, port, "?sku=ev-b&sku=ev-a&sku=ev-b", NULL), 0);
    assert_int_equal(s.status, 200);
    assert_non_null(strcasestr(s.head, "Content-Type: text/event-stream"));
    assert_non_null(strcasestr(s.head, "Transfer-Encoding: chunked"));

    /* The first update comes at once; a SKU that does not exist says so. */
    json_t *u = sse_next_json(&s, 2000);
    assert_non_null(u);
    assert_true(h_jint(u, "tick") >= 1);
    assert_int_equal(h_jint(u, "interval_ms"), 250);
    assert_non_null(json_object_get(json_object_get(u, "stats"), "orders_confirmed"));
    assert_non_null(json_object_get(json_object_get(u, "stats"), "fenced_rejections"));
    assert_true(json_is_number(json_object_get(u, "orders_per_s")));
    json_t *skus = json_object_get(u, "skus");
    assert_int_equal(json_array_size(skus), 2); /* deduplicated, sorted */
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(skus, 0), "sku")), "ev-a");
    assert_string_equal(json_string_value(json_object_get(sku_of(u, "ev-a"), "error")),
                        "unknown_sku");
    json_decref(u);

    /* Created: the next update has it, as GET /admin/skus/{sku} answers it. */
    assert_int_equal(h_put_sku(port, NULL, "ev-a", 100, 4, "lock", 0), 0);
    json_t *a = NULL;
    for (int i = 0; i < 10 && a == NULL; i++) {
        u = sse_next_json(&s, 2000);
        assert_non_null(u);
        json_t *x = sku_of(u, "ev-a");
        if (json_object_get(x, "error") == NULL)
            a = json_incref(x);
        json_decref(u);
    }
    assert_non_null(a);
    json_t *g = h_get_sku(port, NULL, "ev-a");
    assert_non_null(g);
    const char *key;
    json_t *v;
    json_object_foreach(g, key, v)
    {
        if (!json_equal(v, json_object_get(a, key)))
            fail_msg("stream's %s differs from GET's", key);
    }
    assert_true(json_is_array(json_object_get(a, "segment_locked")));
    assert_true(json_is_null(json_object_get(a, "simulation")));
    json_decref(g);
    json_decref(a);

    /* Nothing changes: no update (and no heartbeat before 15 s). */
    struct sse_event ev;
    int got = sse_next(&s, &ev, 1000);
    if (got == 1)
        fail_msg("an event while nothing changed: %s %s", ev.name, ev.data);
    sse_close(&s);
}

static void test_stream_rate_while_selling(void **state)
{
    struct env *e = *state;
    int port = e->h->port;
    assert_int_equal(h_put_sku(port, NULL, "ev-rate", 100000, 20, "lock", 20), 0);
    struct sse s;
    assert_int_equal(sse_open(&s, port, "?sku=ev-rate", NULL), 0);
    assert_int_equal(s.status, 200);
    json_t *u = sse_next_json(&s, 2000);
    assert_non_null(u);
    json_decref(u);
    struct h_resp r;
    assert_int_equal(
        simulate(port, NULL, "ev-rate", "{\"orders\": 100000, \"concurrency\": 8}", &r),
        202);
    h_resp_free(&r);

    /* Over 3 s of sales: at least 4 updates a second, ticks rising, sales rising. */
    long long t0 = h_now_ms(), last_tick = 0, last_sold = -1, updates = 0;
    double rate = 0;
    while (h_now_ms() - t0 < 3000) {
        u = sse_next_json(&s, 1000);
        assert_non_null(u);
        json_t *x = sku_of(u, "ev-rate");
        assert_true(h_jint(u, "tick") > last_tick);
        assert_true(h_jint(x, "sold") >= last_sold);
        last_tick = h_jint(u, "tick");
        last_sold = h_jint(x, "sold");
        rate = json_number_value(json_object_get(x, "orders_per_s"));
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(x, "simulation"), "state")),
            "running");
        updates++;
        json_decref(u);
    }
    printf("it_dashboard: %lld updates in 3 s while selling, %.1f orders/s at the end\n",
           updates, rate);
    assert_true(updates >= 11);
    assert_true(rate > 50);
    sse_close(&s);
    assert_int_equal(
        h_req(port, "DELETE", "/admin/skus/ev-rate/simulate", NULL, NULL, &r), 200);
    h_resp_free(&r);
    json_t *done = sim_wait(port, NULL, "ev-rate", 10000);
    assert_non_null(done);
    assert_string_equal(json_string_value(json_object_get(done, "state")), "stopped");
    json_decref(done);
    assert_int_equal(h_audit(port, NULL, "ev-rate", 100000, true), 0);
}

static void test_stream_refusals(void **state)
{
    struct env *e = *state;
    int port = e->h->port;
    struct sse s;
    static const char *const bad[] = {
        "?sku=a%20b",
        "?sku=",
        "?sku",
        "?color=red",
        "?sku=ok&x=1",
        "?sku=" /* 65 characters */
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(sse_open(&s, port, bad[i], NULL), 0);
        if (s.status != 400)
            fail_msg("%s: %d", bad[i], s.status);
        sse_close(&s);
    }
    char q[1024] = "?";
    for (int i = 0; i < 17; i++)
        snprintf(q + strlen(q), sizeof q - strlen(q), "%ssku=s%d", i ? "&" : "", i);
    assert_int_equal(sse_open(&s, port, q, NULL), 0);
    assert_int_equal(s.status, 400);
    sse_close(&s);
    q[strlen(q) - strlen("&sku=s16")] = '\0'; /* 16 are fine */
    assert_int_equal(sse_open(&s, port, q, NULL), 0);
    assert_int_equal(s.status, 200);
    sse_close(&s);
    /* No SKU at all: the counters alone. */
    assert_int_equal(sse_open(&s, port, "", NULL), 0);
    assert_int_equal(s.status, 200);
    json_t *u = sse_next_json(&s, 2000);
    assert_non_null(u);
    assert_int_equal(json_array_size(json_object_get(u, "skus")), 0);
    json_decref(u);
    sse_close(&s);
}

static void test_stream_auth_and_tickets(void **state)
{
    struct env *e = *state;
    int port = h_svc_port(e->tok);
    struct sse s;
    struct h_resp r;
    assert_int_equal(sse_open(&s, port, "?sku=x", NULL), 0);
    assert_int_equal(s.status, 401);
    assert_non_null(strcasestr(s.head, "WWW-Authenticate: Bearer"));
    sse_close(&s);
    assert_int_equal(sse_open(&s, port, "?sku=x", "Authorization: Bearer wrong\r\n"), 0);
    assert_int_equal(s.status, 401);
    sse_close(&s);
    assert_int_equal(sse_open(&s, port, "?sku=x", "Authorization: Bearer " TOKEN "\r\n"),
                     0);
    assert_int_equal(s.status, 200);
    sse_close(&s);

    /* A ticket needs the token, opens one stream, and only one. */
    assert_int_equal(h_req(port, "POST", "/admin/events/ticket", NULL, NULL, &r), 401);
    h_resp_free(&r);
    assert_int_equal(h_req(port, "POST", "/admin/events/ticket", TOKEN, NULL, &r), 200);
    json_t *t = h_resp_json(&r);
    h_resp_free(&r);
    const char *ticket = json_string_value(json_object_get(t, "ticket"));
    assert_non_null(ticket);
    assert_int_equal(strlen(ticket), 32);
    assert_int_equal(h_jint(t, "expires_in_s"), 60);
    char q[128];
    snprintf(q, sizeof q, "?sku=x&ticket=%s", ticket);
    assert_int_equal(sse_open(&s, port, q, NULL), 0);
    assert_int_equal(s.status, 200);
    json_t *u = sse_next_json(&s, 2000);
    assert_non_null(u);
    json_decref(u);
    sse_close(&s);
    assert_int_equal(sse_open(&s, port, q, NULL), 0);
    assert_int_equal(s.status, 401); /* used */
    sse_close(&s);
    json_decref(t);
    assert_int_equal(sse_open(&s, port, "?ticket=0123456789abcdef0123456789abcdef", NULL),
                     0);
    assert_int_equal(s.status, 401); /* never issued */
    sse_close(&s);
    /* A ticket is for the stream only: not a token for the rest of the admin API. */
    assert_int_equal(h_req(port, "POST", "/admin/events/ticket", TOKEN, NULL, &r), 200);
    t = h_resp_json(&r);
    h_resp_free(&r);
    char path[128];
    snprintf(path, sizeof path, "/admin/skus?ticket=%s",
             json_string_value(json_object_get(t, "ticket")));
    assert_int_equal(h_req(port, "GET", path, NULL, NULL, &r), 401);
    h_resp_free(&r);
    json_decref(t);
    /* The simulate routes are admin routes too. */
    assert_int_equal(simulate(port, NULL, "x", "{\"orders\": 1}", &r), 401);
    h_resp_free(&r);
    assert_int_equal(h_req(port, "GET", "/admin/skus/x/simulate", NULL, NULL, &r), 401);
    h_resp_free(&r);
}

/* A reader that never reads is dropped (its buffer freed) and closed by the connection
 * timeout, while orders go on. Its own instance, with a short connection timeout. */
/* 64 streams (EVENTS_STREAMS_MAX) idle on an unchanging SKU held every slot for good:
 * a 65th was refused 503 too_many_streams. The stream idle the longest gives way: it
 * gets `event: evicted` and its end, and the newcomer its stream. */
static void test_idle_streams_give_way(void **state)
{
    struct env *e = *state;
    h_deadline(120);
    h_svc *svc = h_svc_start_args(e->h->redis, NULL);
    assert_non_null(svc);
    int port = h_svc_port(svc);
    assert_int_equal(h_put_sku(port, NULL, "idle-sku", 10, 1, "lock", 0), 0);
    enum { MAX = 64 };
    struct sse *s = calloc(MAX + 1, sizeof *s);
    assert_non_null(s);
    for (int i = 0; i < MAX; i++) {
        assert_int_equal(sse_open(&s[i], port, "?sku=idle-sku", NULL), 0);
        assert_int_equal(s[i].status, 200);
        json_t *u = sse_next_json(&s[i], 5000);
        assert_non_null(u);
        json_decref(u);
    }
    h_sleep_ms(2500); /* past EVENTS_IDLE_MS: nothing changed, every stream is idle */
    assert_int_equal(sse_open(&s[MAX], port, "?sku=idle-sku", NULL), 0);
    assert_int_equal(s[MAX].status, 200);
    json_t *u = sse_next_json(&s[MAX], 5000);
    assert_non_null(u);
    json_decref(u);

    /* The first opened went: told why, then a clean end. */
    bool evicted = false;
    struct sse_event ev;
    int rc;
    while ((rc = sse_next(&s[0], &ev, 3000)) == 1) {
        evicted = evicted || strcmp(ev.name, "evicted") == 0;
        free(ev.data);
    }
    assert_true(evicted);
    assert_int_equal(rc, -1);
    assert_true(s[0].ended);
    /* The others stay. */
    while ((rc = sse_next(&s[1], &ev, 500)) == 1)
        free(ev.data);
    assert_int_equal(rc, 0);
    for (int i = 0; i <= MAX; i++)
        sse_close(&s[i]);
    free(s);
    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
}

static void test_slow_reader_dropped(void **state)
{
    struct env *e = *state;
    struct h_svc_opts o = {.config_json = "{\"connection_timeout_s\": 3}"};
    h_svc *svc = h_svc_start(e->h->redis, &o);
    assert_non_null(svc);
    int port = h_svc_port(svc);
    /* Big updates, changing every tick: 8 SKUs of 1024 segments, one of them selling. */
    char q[512] = "?";
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof name, "slow-%d", i);
        assert_int_equal(h_put_sku(port, NULL, name, 1000000, 1024, "atomic", 0), 0);
        snprintf(q + strlen(q), sizeof q - strlen(q), "%ssku=%s", i ? "&" : "", name);
    }
    struct h_resp r;
    assert_int_equal(
        simulate(port, NULL, "slow-0", "{\"orders\": 1000000, \"concurrency\": 2}", &r),
        202);
    h_resp_free(&r);

    /* The slow reader: a small receive buffer, and it never reads. */
    int slow = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(slow >= 0);
    int small = 4096;
    setsockopt(slow, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(slow, (struct sockaddr *)&a, sizeof a), 0);
    char req[700];
    int n =
        snprintf(req, sizeof req, "GET /admin/events%s HTTP/1.1\r\nHost: x\r\n\r\n", q);
    assert_int_equal(send(slow, req, (size_t)n, MSG_NOSIGNAL), n);

    /* A reader that keeps up watches the counters. */
    struct sse s;
    assert_int_equal(sse_open(&s, port, "?sku=slow-0", NULL), 0);
    assert_int_equal(s.status, 200);
    long long dropped = 0, t0 = h_now_ms();
    while (dropped == 0 && h_now_ms() - t0 < 40000) {
        json_t *u = sse_next_json(&s, 2000);
        assert_non_null(u);
        dropped = h_jint(json_object_get(u, "streams"), "dropped");
        json_decref(u);
    }
    printf("it_dashboard: the slow reader was dropped after %lld ms\n", h_now_ms() - t0);
    assert_int_equal(dropped, 1);
    /* Orders are answered as before. */
    assert_int_equal(h_order(port, "slow-1", 1, NULL, NULL), 201);

    /* The dropped stream's connection ends: after what was in flight, EOF or reset
     * (the connection timeout, 3 s). */
    long long t1 = h_now_ms();
    bool closed = false;
    char buf[65536];
    while (!closed && h_now_ms() - t1 < 15000) {
        struct pollfd p = {.fd = slow, .events = POLLIN};
        if (poll(&p, 1, 500) > 0) {
            ssize_t k = recv(slow, buf, sizeof buf, 0);
            closed = k <= 0;
        }
    }
    assert_true(closed);
    close(slow);
    sse_close(&s);
    assert_int_equal(h_req(port, "DELETE", "/admin/skus/slow-0/simulate", NULL, NULL, &r),
                     200);
    h_resp_free(&r);
    assert_int_equal(h_svc_stop_clean(svc), 0);
    h_svc_free(svc);
}

/* Streams open and orders selling at SIGTERM: every stream gets its shutdown event
 * and a clean end, and the service exits 0 quickly. */
static void test_shutdown_ends_streams(void **state)
{
    struct env *e = *state;
    h_svc *svc = h_svc_start_args(e->h->redis, NULL);
    assert_non_null(svc);
    int port = h_svc_port(svc);
    assert_int_equal(h_put_sku(port, NULL, "bye", 1000000, 20, "lock", 20), 0);
    struct h_resp r;
    assert_int_equal(
        simulate(port, NULL, "bye", "{\"orders\": 1000000, \"concurrency\": 16}", &r),
        202);
    h_resp_free(&r);
    struct sse s[5];
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sse_open(&s[i], port, "?sku=bye", NULL), 0);
        assert_int_equal(s[i].status, 200);
        json_t *u = sse_next_json(&s[i], 2000);
        assert_non_null(u);
        json_decref(u);
    }
    h_sleep_ms(300);
    long long t0 = h_now_ms();
    assert_int_equal(h_svc_stop_clean(svc), 0);
    long long took = h_now_ms() - t0;
    printf(
        "it_dashboard: SIGTERM with 5 streams and a simulation running: exit 0 in %lld "
        "ms\n",
        took);
    assert_true(took < 5000);
    for (int i = 0; i < 5; i++) {
        bool bye = false;
        struct sse_event ev;
        int rc;
        while ((rc = sse_next(&s[i], &ev, 3000)) == 1) {
            bye = bye || strcmp(ev.name, "shutdown") == 0;
            free(ev.data);
        }
        assert_true(bye);
        assert_int_equal(rc, -1);
        assert_true(s[i].ended); /* the chunked terminator, not a cut */
        sse_close(&s[i]);
    }
    h_svc_free(svc);
    /* Every order the run placed is audited like any other. */
    assert_int_equal(h_audit(e->h->port, NULL, "bye", 1000000, true), 0);
}

/* ---- simulated orders ---------------------------------------------------------- */

static void test_simulate_validation(void **state)
{
    struct env *e = *state;
    int port = e->h->port;
    assert_int_equal(h_put_sku(port, NULL, "sim-v", 10, 2, "lock", 0), 0);
    static const char *const bad[] = {
        "{}",
        "{\"orders\": 0}",
        "{\"orders\": 1000001}",
        "{\"orders\": 10, \"concurrency\": 0}",
        "{\"orders\": 10, \"concurrency\": 65}",
        "{\"orders\": 10, \"qty\": 0}",
        "{\"orders\": 10, \"qty\": 1000001}",
        "{\"orders\": \"10\"}",
        "{\"orders\": 1.5}",
        "{\"orders\": 10, \"speed\": 1}",
        "{\"orders\": 10, \"orders\": 11}",
        "[10]",
        "{\"orders\": ",
    };
    struct h_resp r;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        simulate(port, NULL, "sim-v", bad[i], &r);
        if (h_expect_error(&r, 400, NULL) != 0)
            fail_msg("%s: %d %s", bad[i], r.status, r.body);
        h_resp_free(&r);
    }
    assert_int_equal(h_http(port, "POST", "/admin/skus/sim-v/simulate", NULL,
                            "{\"orders\": 1}", 13, &r),
                     415);
    h_resp_free(&r);
    simulate(port, NULL, "no-such-sku", "{\"orders\": 1}", &r);
    assert_int_equal(h_expect_error(&r, 404, "unknown_sku"), 0);
    h_resp_free(&r);
    simulate(port, NULL, "bad%20name", "{\"orders\": 1}", &r);
    assert_int_equal(h_expect_error(&r, 400, "invalid_field"), 0);
    h_resp_free(&r);
    h_req(port, "GET", "/admin/skus/sim-v/simulate", NULL, NULL, &r);
    assert_int_equal(h_expect_error(&r, 404, "not_found"), 0);
    h_resp_free(&r);
    h_req(port, "DELETE", "/admin/skus/sim-v/simulate", NULL, NULL, &r);
    assert_int_equal(h_expect_error(&r, 404, "not_found"), 0);
    h_resp_free(&r);
    h_req(port, "PUT", "/admin/skus/sim-v/simulate", NULL, "{}", &r);
    assert_int_equal(r.status, 405);
    h_resp_free(&r);
}

static void test_simulate_sells_out_audited(void **state)
{
    struct env *e = *state;
    int port = e->h->port;
    assert_int_equal(h_put_sku(port, NULL, "sim-a", 300, 4, "lock", 2), 0);
    long long before = h_stat(port, NULL, "orders_confirmed");
    struct h_resp r;
    assert_int_equal(simulate(port, NULL, "sim-a",
                              "{\"orders\": 400, \"concurrency\": 8, \"qty\": 1}", &r),
                     202);
    json_t *j = h_resp_json(&r);
    h_resp_free(&r);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
    assert_int_equal(h_jint(j, "orders"), 400);
    assert_int_equal(h_jint(j, "concurrency"), 8);
    char run[32];
    snprintf(run, sizeof run, "%s", json_string_value(json_object_get(j, "run")));
    json_decref(j);

    /* A second run of the same SKU waits for the first. */
    simulate(port, NULL, "sim-a", "{\"orders\": 1}", &r);
    assert_int_equal(h_expect_error(&r, 409, "simulation_running"), 0);
    h_resp_free(&r);

    json_t *done = sim_wait(port, NULL, "sim-a", 30000);
    assert_non_null(done);
    assert_string_equal(json_string_value(json_object_get(done, "state")), "finished");
    json_t *out = json_object_get(done, "outcomes");
    assert_int_equal(h_jint(done, "answered"), 400);
    assert_int_equal(h_jint(out, "confirmed"), 300);
    assert_int_equal(h_jint(out, "sold_out"), 100);
    json_decref(done);
    assert_int_equal(h_audit(port, NULL, "sim-a", 300, true), 0);
    json_t *g = h_get_sku(port, NULL, "sim-a");
    assert_int_equal(h_jint(g, "sold"), 300);
    assert_int_equal(h_jint(g, "remaining"), 0);
    json_decref(g);
    /* Counted as any other orders, and stored under sim- ids. */
    assert_int_equal(h_stat(port, NULL, "orders_confirmed") - before, 300);
    int found = 0;
    for (int i = 1; i <= 400; i++) {
        char id[64];
        snprintf(id, sizeof id, "sim-%s-%d", run, i);
        found += h_order_status(port, id) == 200;
    }
    assert_int_equal(found, 300);

    /* When it has ended, the SKU may run again. */
    assert_int_equal(
        simulate(port, NULL, "sim-a", "{\"orders\": 5, \"concurrency\": 1}", &r), 202);
    h_resp_free(&r);
    done = sim_wait(port, NULL, "sim-a", 10000);
    assert_non_null(done);
    assert_int_equal(h_jint(json_object_get(done, "outcomes"), "sold_out"), 5);
    json_decref(done);
}

static void test_simulate_stop(void **state)
{
    struct env *e = *state;
    int port = e->h->port;
    assert_int_equal(h_put_sku(port, NULL, "sim-s", 100000, 1, "lock", 20), 0);
    struct h_resp r;
    assert_int_equal(
        simulate(port, NULL, "sim-s", "{\"orders\": 100000, \"concurrency\": 4}", &r),
        202);
    h_resp_free(&r);
    h_sleep_ms(300);
    long long t0 = h_now_ms();
    assert_int_equal(h_req(port, "DELETE", "/admin/skus/sim-s/simulate", NULL, NULL, &r),
                     200);
    json_t *j = h_resp_json(&r);
    h_resp_free(&r);
    const char *st = json_string_value(json_object_get(j, "state"));
    assert_true(strcmp(st, "stopping") == 0 || strcmp(st, "stopped") == 0);
    json_decref(j);
    json_t *done = sim_wait(port, NULL, "sim-s", 10000);
    assert_non_null(done);
    printf("it_dashboard: a run stopped within %lld ms\n", h_now_ms() - t0);
    assert_string_equal(json_string_value(json_object_get(done, "state")), "stopped");
    long long answered = h_jint(done, "answered");
    assert_true(answered > 0 && answered < 100000);
    assert_int_equal(h_jint(done, "sent"), answered);
    json_decref(done);
    json_t *g = h_get_sku(port, NULL, "sim-s");
    assert_int_equal(h_jint(g, "sold"), answered);
    json_decref(g);
    assert_int_equal(h_audit(port, NULL, "sim-s", 100000, true), 0);
}

static void test_simulate_thread_limit(void **state)
{
    struct env *e = *state;
    int port = e->h->port;
    struct h_resp r;
    /* Two runs of 64 threads fill the 128; a third is refused until one ends. */
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "sim-l%d", i);
        assert_int_equal(h_put_sku(port, NULL, name, 1000000, 20, "lock", 50), 0);
        simulate(port, NULL, name, "{\"orders\": 1000000, \"concurrency\": 64}", &r);
        if (i < 2)
            assert_int_equal(r.status, 202);
        else
            assert_int_equal(h_expect_error(&r, 429, "too_many_simulations"), 0);
        h_resp_free(&r);
    }
    for (int i = 0; i < 2; i++) {
        char path[64];
        snprintf(path, sizeof path, "/admin/skus/sim-l%d/simulate", i);
        assert_int_equal(h_req(port, "DELETE", path, NULL, NULL, &r), 200);
        h_resp_free(&r);
    }
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "sim-l%d", i);
        json_t *done = sim_wait(port, NULL, name, 10000);
        assert_non_null(done);
        json_decref(done);
        assert_int_equal(h_audit(port, NULL, name, 1000000, true), 0);
    }
    assert_int_equal(
        simulate(port, NULL, "sim-l2", "{\"orders\": 10, \"concurrency\": 64}", &r), 202);
    h_resp_free(&r);
    json_t *done = sim_wait(port, NULL, "sim-l2", 10000);
    assert_non_null(done);
    json_decref(done);
}

/* ---- the browser test ---------------------------------------------------------- */

/* Why the browser test cannot run here, or NULL when it can. */
static const char *browser_missing(const char **chromium)
{
    *chromium = getenv("CHROMIUM") != NULL ? getenv("CHROMIUM") : "/usr/bin/chromium";
    if (access(*chromium, X_OK) != 0)
        return "no chromium (Debian: apt-get install chromium)";
    const char *argv[] = {"node", "--version", NULL};
    if (h_run_cmd(argv, NULL, 10000, NULL, NULL) != 0)
        return "no node on PATH (Debian: apt-get install nodejs)";
    if (access(BROWSER_DIR "/node_modules/puppeteer-core/package.json", R_OK) != 0)
        return "no " BROWSER_DIR "/node_modules (run: npm ci --prefix " BROWSER_DIR ")";
    return NULL;
}

static void test_browser(void **state)
{
    (void)state;
    const char *chromium;
    const char *why = browser_missing(&chromium);
    if (why != NULL) {
        printf("it_dashboard: browser test skipped: %s\n", why);
        skip();
    }
    /* Screenshots beside the service binary: build/dashboard, build/address/dashboard. */
    const char *bin =
        getenv("INVENTORYD") != NULL ? getenv("INVENTORYD") : "build/inventoryd";
    char dir[1024], out[1100], url[64];
    snprintf(dir, sizeof dir, "%s", bin);
    snprintf(out, sizeof out, "%s/dashboard", dirname(dir));
    /* A Redis and a service of its own: the page lists only what the test made. Two
     * lock services for the second comparison (RedLock over three redis-servers and
     * memcached); ZooKeeper not, so that the page greys it out. */
    h_redis *nodes[3];
    char redlock[256];
    assert_int_equal(h_redlock_nodes_start(nodes, 3, false, redlock, sizeof redlock), 0);
    h_memcached *mc = h_memcached_start();
    assert_non_null(mc);
    const char *args[] = {
        "--admin-token",      TOKEN, "--redlock", redlock, "--memcached",
        h_memcached_addr(mc), NULL};
    struct h_env *env = h_env_start(args);
    assert_non_null(env);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", env->port);
    const char *docs = getenv("DASHBOARD_DOCS"); /* e.g. docs/dashboard.png */
    const char *argv[] = {"node",
                          BROWSER_TEST,
                          "--url",
                          url,
                          "--token",
                          TOKEN,
                          "--out",
                          out,
                          "--chromium",
                          chromium,
                          docs ? "--docs" : NULL,
                          docs,
                          NULL};
    char *sout = NULL, *serr = NULL;
    int rc = h_run_cmd(argv, NULL, 240000, &sout, &serr);
    printf("%s%s", sout != NULL ? sout : "", serr != NULL ? serr : "");
    free(sout);
    free(serr);
    int stopped = h_env_stop(env);
    for (int i = 0; i < 3; i++)
        h_redis_free(nodes[i]);
    h_memcached_free(mc);
    if (rc != 0)
        fail_msg("the browser test exited %d", rc);
    assert_int_equal(stopped, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_page_is_served),
        cmocka_unit_test(test_stream_format_and_updates),
        cmocka_unit_test(test_stream_rate_while_selling),
        cmocka_unit_test(test_stream_refusals),
        cmocka_unit_test(test_stream_auth_and_tickets),
        cmocka_unit_test(test_idle_streams_give_way),
        cmocka_unit_test(test_simulate_validation),
        cmocka_unit_test(test_simulate_sells_out_audited),
        cmocka_unit_test(test_simulate_stop),
        cmocka_unit_test(test_simulate_thread_limit),
        cmocka_unit_test(test_slow_reader_dropped),
        cmocka_unit_test(test_shutdown_ends_streams),
        cmocka_unit_test(test_browser),
    };
    int failed =
        cmocka_run_group_tests_name("dashboard", tests, group_setup, group_teardown);
    return h_exit_status(failed);
}
