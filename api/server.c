/* server.c -- libmicrohttpd glue: one daemon per event loop on a shared listening
 * socket, bodies, orders on the loop's engine, other Redis calls on worker pools. */
#include "api/access.h"
#include "api/server.h"

#include <fcntl.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api/events.h"
#include "api/gauges.h"
#include "api/listen.h"
#include "api/loop.h"
#include "api/metrics.h"
#include "api/pool.h"
#include "api/problem.h"
#include "api/routes.h"
#include "api/simulate.h"
#include "base/log.h"
#include "base/names.h"

/* Workers for the quick Redis calls (health, admin reads, order lookups). */
#define CONTROL_THREADS 4
/* Workers for the admin calls that may wait for segment locks (cancel, restock,
 * rebalance). */
#define SLOW_THREADS 8
/* Per-connection memory of libmicrohttpd (headers, read and write buffers). It is
 * cleared for every request, so the 32 KiB default costs a large memset each time;
 * requests here are small, and a body is copied out as it arrives. */
#define CONNECTION_MEMORY (16 * 1024)
/* Our limits on the request head. libmicrohttpd's own come from CONNECTION_MEMORY
 * (about 16 KB of head, or about 230 header lines) and are answered in its HTML (see
 * below); these are lower, so that a head between the two is refused in JSON: 414
 * uri_too_long past HEAD_PATH_MAX bytes of decoded path, 431 headers_too_large past
 * HEAD_BYTES_MAX bytes of request line and headers or HEAD_FIELDS_MAX header lines. */
#define HEAD_PATH_MAX 8192
#define HEAD_BYTES_MAX 8192
#define HEAD_FIELDS_MAX 100
#define ACCESS_PATH_MAX 256 /* bytes of the request-target kept for the access log */

/*
 * What libmicrohttpd 0.9.75 answers by itself, and why those answers are not JSON.
 *
 * The library refuses some requests itself, with a reply built inside it
 * (transmit_error_response_len() in connection.c): a fixed HTML body from
 * MHD_create_response_from_buffer(), no Content-Type, no X-Request-Id, Connection:
 * close. 0.9.75 has no option or callback that replaces or amends that reply: the
 * only code of ours that runs between the library finding the fault and queueing its
 * reply is the error logger (on_mhd_log), which gets the message text but not the
 * connection. Most come before the access handler (on_request) is ever called; the
 * chunk errors come while the body is read, before we reply. So these stay HTML:
 *   - 505 for HTTP/0.x and HTTP/2 and above, 400 for a malformed version (HTTX/1.1):
 *     refused while the request line is parsed, before even the URI-log callback;
 *   - 414 when the request line alone fills the connection's memory, 431 when the
 *     headers do (about 16 KB, or about 230 header lines; below that our own limits
 *     answer 414/431 in JSON, see HEAD_*_MAX);
 *   - 400 for a header line without a colon, 400 for a Content-Length that is not a
 *     number, 413 for one beyond 2^64, 400/413 for broken or oversized chunk sizes.
 * A request line without a space in it is not answered at all: the connection is
 * closed. The Host check is the library's only when MHD_OPTION_STRICT_FOR_CLIENT is
 * 1; we leave it at 0 and make the check ourselves (check_head), so that answer is
 * JSON.
 *
 * A second defect of 0.9.75 sits on the same path: when parse_connection_headers()
 * refuses a request (a Content-Length that is not a number or does not fit in 64 bits;
 * a Cookie header it cannot copy), MHD_connection_handle_idle() does not notice. It
 * moves the connection on from HEADERS_RECEIVED to HEADERS_PROCESSED over the
 * HEADERS_SENDING that transmit_error_response_len() had set, and from there to
 * START_REPLY, where build_header_response() appends the status line and headers to
 * the write buffer a second time. The client gets the status line and headers twice,
 * then the body once. Our access handler is never called for such a request (the
 * library skips it once a reply is queued), so nothing here can answer it instead.
 *
 * What we do get for every request whose request line parsed is the URI-log callback
 * and, with it, the completed callback: the access log has a line for those refusals
 * too (status from MHD_CONNECTION_INFO_HTTP_STATUS, bytes 0, method unknown when the
 * head was refused). docs/FAULTS.md has the same list with the tests that pin it.
 */

/* One event loop's share of the front: its daemon's callbacks get this. */
struct front {
    struct api_server *srv;
    struct api_loop *loop;
};

struct api_server {
    struct api_options opt; /* copied at start; its strings are borrowed */
    inv *inv;
    struct pool *slow;    /* API_ROUTE_SLOW routes */
    struct pool *control; /* every other Redis-backed route without `start` */
    int listen_fd;        /* shared by every loop's daemon */
    int nloops;
    struct front *fronts;    /* nloops of them */
    struct api_loop **loops; /* the same loops, for the simulations */
    atomic_bool stopping;    /* api_server_stop began: orders get 503 shutting_down */
    struct timespec started;
    struct api_http_stats http; /* per-route counters for GET /metrics */
    struct api_sim *sim;        /* simulated-order runs (api/simulate.h) */
    struct api_events *events;  /* event streams and their publisher (api/events.h) */
    struct api_gauges *gauges;  /* GET /metrics's per-SKU gauges (api/gauges.h) */
};

/* One request's state, in *con_cls from the request line (on_request_line) to the
 * completed callback (on_completed), which frees it. */
/* The headers the handlers read, taken in scan_head()'s one pass over the request's
 * headers rather than a walk of them each. */
enum head_field {
    HF_REQUEST_ID,
    HF_CONTENT_TYPE,
    HF_AUTHORIZATION,
    HF_IDEMPOTENCY_KEY,
    HF_IF_MATCH,
    HF_IF_NONE_MATCH,
    HF__COUNT
};

/* What scan_head() finds in one pass over the headers: what check_head() judges, and
 * the first value of each head_field (as a lookup by name would give it). */
struct head_scan {
    int fields;
    int hosts;
    const char *length; /* the first Content-Length value */
    size_t length_len;
    bool lengths_differ;
    const char *value[HF__COUNT]; /* NULL: absent */
    bool nul[HF__COUNT];          /* the value holds a NUL byte */
};

struct request {
    struct api_server *srv;
    struct api_loop *loop; /* the loop whose daemon owns the connection */
    struct MHD_Connection *conn;
    struct timespec started; /* CLOCK_MONOTONIC: the request line, then the headers */
    char target[ACCESS_PATH_MAX]; /* request-target as sent, no query: the access log */
    char query[API_ACCESS_QUERY_MAX]; /* its query, secrets masked (api/access.h) */
    bool headers_in; /* the access handler ran: the request is ours to answer */
    bool head;       /* a HEAD request: the reply goes out without its body */
    char *body;      /* accumulated upload; NULL when none */
    size_t len, cap;
    bool too_large;
    bool replied;     /* a response was queued already */
    atomic_bool done; /* the worker or the loop stored the reply (release/acquire) */
    const struct api_route *route;
    struct head_scan hs; /* the headers, scanned once they are in */
    struct api_request req;
    struct api_reply rep;
};

static void oom(void)
{
    fputs("inventoryd: out of memory\n", stderr);
    abort();
}

static int header(struct MHD_Connection *conn, const char *name, const char **value);

static enum MHD_Result send_reply(struct request *r)
{
    struct api_reply *rep = &r->rep;
    if (rep->body == NULL)
        api_reply_error(rep, 500, "internal", "no reply was produced");
    api_http_observe(&r->srv->http, r->route, rep, &r->started,
                     atomic_load_explicit(&r->done, memory_order_acquire));
    const char *accept = NULL;
    if (rep->error && header(r->conn, MHD_HTTP_HEADER_ACCEPT, &accept) == 0 &&
        api_problem_preferred(accept))
        api_problem_apply(rep);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(rep->body_len, rep->body, MHD_RESPMEM_MUST_COPY);
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            rep->content_type ? rep->content_type : "application/json");
    MHD_add_response_header(resp, "X-Request-Id", r->req.x_request_id);
    for (int i = 0; i < rep->nheaders; i++)
        MHD_add_response_header(resp, rep->headers[i].name, rep->headers[i].value);
    /* For HEAD, libmicrohttpd sends the status and headers (Content-Length included)
     * and leaves the body out. */
    enum MHD_Result rc = MHD_queue_response(r->conn, (unsigned)rep->status, resp);
    MHD_destroy_response(resp);
    r->replied = true;
    return rc;
}

/* What a handler gets: `conn` on a pool worker, `loop`'s engine on a loop. */
static struct api_ctx context(struct request *r, inv_conn *conn)
{
    struct api_server *s = r->srv;
    return (struct api_ctx){
        s->inv,     conn,     conn == NULL ? api_loop_engine(r->loop) : NULL,
        s->started, &s->http, s->events,
        s->sim,     s->gauges};
}

/* Runs on a pool worker: `state` is the worker's inv_conn. */
static void run_job(void *state, void *arg)
{
    struct request *r = arg;
    struct api_ctx ctx = context(r, state);
    r->route->handle(&ctx, &r->req, &r->rep);
    struct api_loop *l = r->loop; /* r may be gone once resumed */
    atomic_store_explicit(&r->done, true, memory_order_release);
    MHD_resume_connection(r->conn);
    api_loop_wake(l);
}

static void *worker_init(void *arg)
{
    return inv_conn_create(arg);
}

static void worker_fini(void *state, void *arg)
{
    (void)arg;
    inv_conn_free(state);
}

/* Append an upload chunk; past max_body_bytes the body is dropped and flagged. */
static void append_body(struct request *r, const char *data, size_t n)
{
    size_t max = (size_t)r->srv->opt.max_body_bytes;
    if (r->too_large)
        return;
    if (n > max - r->len) {
        r->too_large = true;
        free(r->body);
        r->body = NULL;
        r->len = r->cap = 0;
        return;
    }
    if (r->len + n > r->cap) {
        size_t cap = r->cap ? r->cap : 1024;
        while (cap < r->len + n)
            cap *= 2;
        if (cap > max)
            cap = max;
        char *b = realloc(r->body, cap);
        if (b == NULL)
            oom();
        r->body = b;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
}

static enum MHD_Result reply_too_large(struct request *r)
{
    api_reply_error(&r->rep, 413, "payload_too_large", "the body exceeds %d bytes",
                    r->srv->opt.max_body_bytes);
    return send_reply(r);
}

/* Header `name` into *value (NULL when absent): -1 when its value holds a NUL byte,
 * which would make it read as something shorter than what was sent. */
static int header(struct MHD_Connection *conn, const char *name, const char **value)
{
    size_t len = 0;
    if (MHD_lookup_connection_value_n(conn, MHD_HEADER_KIND, name, strlen(name), value,
                                      &len) != MHD_YES) {
        *value = NULL;
        return 0;
    }
    return strlen(*value) == len ? 0 : -1;
}

/* Query parameter `name` into *value (NULL when absent, "" when it has no value): -1
 * when its decoded value holds a NUL byte. The first one counts when it repeats. */
static int query_arg(struct MHD_Connection *conn, const char *name, const char **value)
{
    size_t len = 0;
    if (MHD_lookup_connection_value_n(conn, MHD_GET_ARGUMENT_KIND, name, strlen(name),
                                      value, &len) != MHD_YES) {
        *value = NULL;
        return 0;
    }
    if (*value == NULL) {
        *value = "";
        return 0;
    }
    return strlen(*value) == len ? 0 : -1;
}

/* Decode %-escapes in the URL as MHD does, but turn a decoded NUL into DEL, which no
 * route or name accepts: "/admin/skus/a%00b" must not become "/admin/skus/a". */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *uri)
{
    (void)cls;
    (void)conn;
    size_t len = MHD_http_unescape(uri);
    for (size_t i = 0; i < len; i++)
        if (uri[i] == '\0')
            uri[i] = 0x7f;
    return len;
}

/* 16 random hex characters and a NUL into `out`, from a per-thread splitmix64
 * sequence seeded from getrandom(2): unique enough to find one request in the logs,
 * and no system call per request. */
static void new_request_id(char out[17])
{
    static _Thread_local uint64_t state;
    static _Thread_local bool seeded;
    if (!seeded) {
        if (getrandom(&state, sizeof state, 0) != (ssize_t)sizeof state) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            state = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
                    (uint64_t)(uintptr_t)&state;
        }
        seeded = true;
    }
    uint64_t z = (state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    static const char hex[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, z >>= 4)
        out[i] = hex[z & 0xf];
    out[16] = '\0';
}

/* The client's X-Request-Id when it is a valid name, else NULL. */
static const char *client_request_id(struct MHD_Connection *conn)
{
    const char *id = NULL;
    if (header(conn, "X-Request-Id", &id) != 0 || id == NULL || !seg_valid_name(id))
        return NULL;
    return id;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_len, const char *value, size_t value_len)
{
    static const struct {
        const char *name;
        size_t len;
    } wanted[HF__COUNT] = {
        [HF_REQUEST_ID] = {"X-Request-Id", 12},
        [HF_CONTENT_TYPE] = {MHD_HTTP_HEADER_CONTENT_TYPE, 12},
        [HF_AUTHORIZATION] = {MHD_HTTP_HEADER_AUTHORIZATION, 13},
        [HF_IDEMPOTENCY_KEY] = {"Idempotency-Key", 15},
        [HF_IF_MATCH] = {MHD_HTTP_HEADER_IF_MATCH, 8},
        [HF_IF_NONE_MATCH] = {MHD_HTTP_HEADER_IF_NONE_MATCH, 13},
    };
    struct head_scan *sc = cls;
    (void)kind;
    sc->fields++;
    if (key_len == 4 && strncasecmp(key, "Host", 4) == 0) {
        sc->hosts++;
    } else if (key_len == 14 && strncasecmp(key, "Content-Length", 14) == 0) {
        if (sc->length == NULL) {
            sc->length = value;
            sc->length_len = value_len;
        } else if (value_len != sc->length_len || memcmp(value, sc->length, value_len)) {
            sc->lengths_differ = true;
        }
    } else {
        for (int f = 0; f < HF__COUNT; f++)
            if (key_len == wanted[f].len && sc->value[f] == NULL &&
                strncasecmp(key, wanted[f].name, key_len) == 0) {
                sc->value[f] = value != NULL ? value : "";
                sc->nul[f] = value != NULL && strlen(value) != value_len;
                break;
            }
    }
    return MHD_YES;
}

/* Check the request head that libmicrohttpd let through: its size against our limits,
 * and the framing headers RFC 9112 makes a server refuse -- no Host in HTTP/1.1, more
 * than one Host, Content-Length headers that disagree (MHD would take the first).
 * Returns 0, or -1 with the error reply in r->rep. */
static int check_head(struct request *r, const char *version)
{
    struct MHD_Connection *conn = r->conn;
    if (strlen(r->req.path) > HEAD_PATH_MAX) {
        api_reply_error(&r->rep, 414, "uri_too_long", "the path exceeds %d bytes",
                        HEAD_PATH_MAX);
        return -1;
    }
    const struct head_scan sc = r->hs;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if ((ci != NULL && ci->header_size > HEAD_BYTES_MAX) || sc.fields > HEAD_FIELDS_MAX) {
        api_reply_error(&r->rep, 431, "headers_too_large",
                        "the request head exceeds %d bytes or %d header lines",
                        HEAD_BYTES_MAX, HEAD_FIELDS_MAX);
        return -1;
    }
    if (sc.hosts == 0 && strcmp(version, MHD_HTTP_VERSION_1_0) != 0) {
        api_reply_error(&r->rep, 400, "bad_header",
                        "an %.16s request needs a Host header", version);
        return -1;
    }
    if (sc.hosts > 1) {
        api_reply_error(&r->rep, 400, "bad_header", "more than one Host header");
        return -1;
    }
    if (sc.lengths_differ) {
        api_reply_error(&r->rep, 400, "bad_header", "Content-Length headers disagree");
        return -1;
    }
    return 0;
}

/* The request line is in (libmicrohttpd's URI-log callback): start the request's
 * state, so that the completed callback sees every request from here on, including
 * those the library refuses itself. The result becomes *con_cls. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct request *r = calloc(1, sizeof(*r));
    if (r == NULL)
        oom();
    struct front *f = cls;
    r->srv = f->srv;
    r->loop = f->loop;
    r->conn = conn;
    clock_gettime(CLOCK_MONOTONIC, &r->started);
    api_reply_init(&r->rep);
    size_t n = uri != NULL ? strcspn(uri, "?") : 0;
    if (n >= sizeof(r->target)) {
        memcpy(r->target, uri, sizeof(r->target) - 4);
        memcpy(r->target + sizeof(r->target) - 4, "...", 4);
    } else {
        memcpy(r->target, uri != NULL ? uri : "", n);
        r->target[n] = '\0';
    }
    if (uri != NULL && uri[n] == '?')
        api_access_query(r->query, uri + n + 1);
    return r;
}

/* The headers are in, the body (if any) not yet: take the request id, check the head
 * and refuse a body over the limit before reading it (and before any 100 Continue;
 * libmicrohttpd then closes the connection). */
static enum MHD_Result on_headers(struct request *r, const char *url, const char *method,
                                  const char *version)
{
    r->headers_in = true;
    clock_gettime(CLOCK_MONOTONIC, &r->started);
    r->req.method = method;
    r->req.path = url;
    r->head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    MHD_get_connection_values_n(r->conn, MHD_HEADER_KIND, scan_header, &r->hs);
    const char *id = r->hs.value[HF_REQUEST_ID];
    if (id != NULL && !r->hs.nul[HF_REQUEST_ID] && seg_valid_name(id))
        snprintf(r->req.x_request_id, sizeof(r->req.x_request_id), "%s", id);
    else
        new_request_id(r->req.x_request_id);
    if (check_head(r, version) != 0)
        return send_reply(r);
    const char *cl = r->hs.length;
    if (cl != NULL &&
        strtoull(cl, NULL, 10) > (unsigned long long)r->srv->opt.max_body_bytes) {
        r->too_large = true;
        return reply_too_large(r);
    }
    return MHD_YES;
}

static enum MHD_Result reply_shutting_down(struct request *r)
{
    api_reply_error(&r->rep, 503, "shutting_down", "the server is shutting down");
    api_reply_header(&r->rep, "Retry-After", "1");
    api_reply_header(&r->rep, "Connection", "close");
    return send_reply(r);
}

/* A route's `start` is done (on the loop): send its reply from the daemon. */
static void on_loop_done(void *tag)
{
    struct request *r = tag;
    atomic_store_explicit(&r->done, true, memory_order_release);
    MHD_resume_connection(r->conn);
    api_loop_kick(r->loop);
}

static void wake_loop(void *loop)
{
    api_loop_wake(loop);
}

/* GET /admin/events: queue the stream's response (api/events.h), or its error. */
static enum MHD_Result open_stream(struct request *r)
{
    struct MHD_Response *resp =
        api_events_open(r->srv->events, r->conn, wake_loop, r->loop, &r->req, &r->rep);
    if (resp == NULL)
        return send_reply(r);
    r->rep.status = 200; /* for the metrics and the access log; the body is the stream */
    api_http_observe(&r->srv->http, r->route, &r->rep, &r->started, false);
    MHD_add_response_header(resp, "X-Request-Id", r->req.x_request_id);
    enum MHD_Result rc = MHD_queue_response(r->conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    r->replied = true;
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    struct api_server *s = ((struct front *)cls)->srv;
    struct request *r = *con_cls;

    if (r == NULL) /* not seen by on_request_line: not expected, but harmless */
        r = *con_cls = on_request_line(s, url, conn);
    if (!r->headers_in)
        return on_headers(r, url, method, version);
    if (r->replied) { /* an early reply: ignore whatever else arrives */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        append_body(r, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (atomic_load_explicit(&r->done, memory_order_acquire))
        return send_reply(r); /* resumed after the worker ran */
    if (r->too_large)
        return reply_too_large(r);

    struct api_request *req = &r->req;
    for (int f = HF_REQUEST_ID + 1; f < HF__COUNT; f++)
        if (r->hs.nul[f]) {
            api_reply_error(&r->rep, 400, "bad_header",
                            "a header value holds a NUL byte");
            return send_reply(r);
        }
    req->content_type = r->hs.value[HF_CONTENT_TYPE];
    req->authorization = r->hs.value[HF_AUTHORIZATION];
    req->idempotency_key = r->hs.value[HF_IDEMPOTENCY_KEY];
    req->if_match = r->hs.value[HF_IF_MATCH];
    req->if_none_match = r->hs.value[HF_IF_NONE_MATCH];
    if (query_arg(conn, "limit", &req->limit) != 0 ||
        query_arg(conn, "cursor", &req->cursor) != 0 ||
        query_arg(conn, "reset", &req->reset) != 0) {
        api_reply_error(&r->rep, 400, "invalid_field",
                        "a query parameter holds a NUL byte");
        return send_reply(r);
    }
    req->body = r->body;
    req->body_len = r->len;
    req->default_replicated = s->opt.default_replicated;
    req->lock_services = s->opt.lock_services;
    req->lab = s->opt.lab;
    struct api_tokens tokens = {s->opt.admin_token, s->opt.metrics_token};
    r->route = api_route_prepare(req, &tokens, &r->rep);
    if (r->route == NULL)
        return send_reply(r);
    if (r->route->flags & API_ROUTE_STREAM)
        return open_stream(r);
    struct api_ctx inline_ctx = context(r, NULL);
    if (!(r->route->flags & API_ROUTE_BACKEND)) {
        r->route->handle(&inline_ctx, req, &r->rep);
        return send_reply(r);
    }
    if (r->route->fast != NULL && r->route->fast(&inline_ctx, req, &r->rep))
        return send_reply(r);
    if (r->route->start != NULL) {
        if (atomic_load_explicit(&s->stopping, memory_order_relaxed))
            return reply_shutting_down(r);
        /* Suspend first: the loop answers later, never from inside start. */
        MHD_suspend_connection(conn);
        r->route->start(&inline_ctx, req, &r->rep, on_loop_done, r);
        return MHD_YES;
    }

    /* Suspend before handing off: the worker may resume before we return. */
    struct pool *p = (r->route->flags & API_ROUTE_SLOW) ? s->slow : s->control;
    MHD_suspend_connection(conn);
    if (pool_submit(p, run_job, r) != 0) {
        MHD_resume_connection(conn);
        return reply_shutting_down(r);
    }
    return MHD_YES;
}

/* The access log line of a finished request: our reply's status and body bytes (0 for
 * HEAD); else the status libmicrohttpd answered with itself (a request it refused
 * after the request line, or a broken chunked body), with 0 bytes -- its HTML is not
 * ours to count -- and, when it refused the head, no method; else 0 (nothing was
 * sent: the client left or timed out first). */
static void log_request(const struct request *r, struct MHD_Connection *conn)
{
    if (!log_access_enabled())
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double ms = (double)(now.tv_sec - r->started.tv_sec) * 1e3 +
                (double)(now.tv_nsec - r->started.tv_nsec) / 1e6;
    char client[API_ACCESS_CLIENT_MAX];
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    api_access_client(client, ai != NULL ? ai->client_addr : NULL);
    struct log_access_line a = {
        .method = r->req.method,
        .path = r->target,
        .query = r->query,
        .ms = ms,
        .request_id = r->req.x_request_id,
        .client = client,
        .user_agent = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "User-Agent"),
    };
    if (r->replied) {
        a.status = r->rep.status;
        a.bytes = r->head ? 0 : r->rep.body_len;
    } else {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
        a.status = ci != NULL ? (int)ci->http_status : 0;
        if (!r->headers_in) {
            a.method = NULL;
            a.request_id = client_request_id(conn);
        }
    }
    log_access(&a);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    struct request *r = *con_cls;
    if (r == NULL)
        return;
    log_request(r, conn);
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK &&
        toe != MHD_REQUEST_TERMINATED_CLIENT_ABORT && r->headers_in)
        log_debug("request %s %s ended early (code %d)", r->req.method, r->target,
                  (int)toe);
    free(r->body);
    api_reply_clear(&r->rep);
    free(r);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    log_warn("http: %s", line);
}

/* A loop's daemon: no thread of its own, driven through its epoll fd (api/loop.h);
 * MHD_USE_ITC so that a pool worker's resume wakes that fd. */
static struct MHD_Daemon *make_daemon(struct api_loop *l, void *arg)
{
    struct front *f = arg;
    f->loop = l;
    struct api_server *s = f->srv;
    const struct api_options *opt = &s->opt;
    unsigned flags = MHD_USE_EPOLL | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_TURBO | MHD_USE_ERROR_LOG;
    struct sockaddr_storage addr;
    socklen_t len = sizeof addr;
    if (getsockname(s->listen_fd, (struct sockaddr *)&addr, &len) == 0 &&
        addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    unsigned limit = (unsigned)((opt->max_connections + s->nloops - 1) / s->nloops);
    /* The logger goes first so that MHD reports option errors through it. */
    return MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, f, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->listen_fd, MHD_OPTION_CONNECTION_LIMIT,
        limit, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)opt->connection_timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, f, MHD_OPTION_URI_LOG_CALLBACK,
        on_request_line, f, MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY, MHD_OPTION_END);
}

/* Free what api_server_start made, in reverse; the loops must be stopped. */
static void free_server(struct api_server *s)
{
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    api_events_free(s->events);
    api_gauges_free(s->gauges);
    api_sim_free(s->sim);
    pool_free(s->slow);
    pool_free(s->control);
    free(s->fronts);
    free(s->loops);
    free(s);
}

struct api_server *api_server_start(const struct api_options *opt, inv *v, char *err,
                                    size_t errlen)
{
    struct api_server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        oom();
    s->opt = *opt;
    s->inv = v;
    s->nloops = opt->threads;
    clock_gettime(CLOCK_MONOTONIC, &s->started);
    bool v6;
    if ((s->listen_fd = api_listen(opt->bind, opt->port, &v6, err, errlen)) < 0 ||
        (s->slow = pool_create(SLOW_THREADS, worker_init, worker_fini, v, err, errlen)) ==
            NULL ||
        (s->control = pool_create(CONTROL_THREADS, worker_init, worker_fini, v, err,
                                  errlen)) == NULL) {
        free_server(s);
        return NULL;
    }
    s->sim = api_sim_create(v);
    s->events = api_events_create(v, s->sim, opt->admin_token, s->started, err, errlen);
    if (s->events == NULL ||
        (s->gauges = api_gauges_create(v, opt->metrics_sku_limit,
                                       opt->metrics_segments_max, err, errlen)) == NULL) {
        free_server(s);
        return NULL;
    }
    s->fronts = calloc((size_t)s->nloops, sizeof *s->fronts);
    if (s->fronts == NULL)
        oom();
    for (int i = 0; i < s->nloops; i++) {
        s->fronts[i].srv = s;
        if (api_loop_start(v, i, s->nloops, make_daemon, &s->fronts[i], err, errlen) ==
            NULL) {
            for (int k = 0; k < i; k++)
                api_loop_stop(s->fronts[k].loop, 0);
            free_server(s);
            return NULL;
        }
    }
    s->loops = calloc((size_t)s->nloops, sizeof *s->loops);
    if (s->loops == NULL)
        oom();
    for (int i = 0; i < s->nloops; i++)
        s->loops[i] = s->fronts[i].loop;
    api_sim_attach(s->sim, s->loops, s->nloops);
    return s;
}

void api_server_stop(struct api_server *s)
{
    if (s == NULL)
        return;
    atomic_store(&s->stopping, true);
    for (int i = 0; i < s->nloops; i++)
        api_loop_quiesce(s->fronts[i].loop);
    close(s->listen_fd);
    s->listen_fd = -1;
    /* Simulations stop after their current order; event streams get their end (the
     * daemon must not stop with a stream's connection suspended). */
    api_sim_stop_all(s->sim);
    api_events_close(s->events, 1000);
    pool_drain(s->slow);
    pool_drain(s->control);
    /* Orders in flight finish, holds and all, and release their locks: at most the
     * longest hold, the lock wait and two Redis timeouts. */
    int wait_ms =
        SKU_HOLD_MAX_MS + s->opt.lock_wait_ms + 2 * s->opt.redis_timeout_ms + 1000;
    for (int i = 0; i < s->nloops; i++)
        api_loop_stop(s->fronts[i].loop, wait_ms);
    free_server(s);
}
