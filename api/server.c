/* server.c -- libmicrohttpd glue: bodies, suspend/resume around the worker pool. */
#include "api/server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api/metrics.h"
#include "api/routes.h"
#include "service/log.h"
#include "service/pool.h"

#define LISTEN_BACKLOG 4096
/* Workers for the quick Redis calls (health, admin, order lookups). */
#define CONTROL_THREADS 4
/* HTTP I/O threads, each with its own epoll set: one per core of the machines this
 * runs on, since at tens of thousands of requests/s a single one is the bottleneck. */
#define HTTP_THREADS 2
/* Per-connection memory of libmicrohttpd (headers, read and write buffers). It is
 * cleared for every request, so the 32 KiB default costs a large memset each time;
 * requests here are small, and a body is copied out as it arrives. */
#define CONNECTION_MEMORY (16 * 1024)

struct api_server {
    const struct cfg *cfg;
    inv *inv;
    struct pool *orders;  /* POST /orders: cfg->threads workers */
    struct pool *control; /* every other Redis-backed route */
    struct MHD_Daemon *daemon;
    struct timespec started;
    struct api_http_stats http; /* per-route counters for GET /metrics */
};

/* One request's state, in *con_cls from the first call to the completed callback. */
struct request {
    struct api_server *srv;
    struct MHD_Connection *conn;
    struct timespec started; /* CLOCK_MONOTONIC when the headers were in */
    char *body;              /* accumulated upload; NULL when none */
    size_t len, cap;
    bool too_large;
    bool replied;     /* a response was queued already */
    atomic_bool done; /* the worker stored the reply (release/acquire) */
    const struct api_route *route;
    struct api_request req;
    struct api_reply rep;
};

static void oom(void)
{
    fputs("inventoryd: out of memory\n", stderr);
    abort();
}

static enum MHD_Result send_reply(struct request *r)
{
    struct api_reply *rep = &r->rep;
    if (rep->body == NULL)
        api_reply_error(rep, 500, "internal", "no reply was produced");
    api_http_observe(&r->srv->http, r->route, rep, &r->started,
                     atomic_load_explicit(&r->done, memory_order_acquire));
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(rep->body_len, rep->body, MHD_RESPMEM_MUST_COPY);
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            rep->content_type ? rep->content_type : "application/json");
    for (int i = 0; i < rep->nheaders; i++)
        MHD_add_response_header(resp, rep->headers[i].name, rep->headers[i].value);
    enum MHD_Result rc = MHD_queue_response(r->conn, (unsigned)rep->status, resp);
    MHD_destroy_response(resp);
    r->replied = true;
    return rc;
}

/* Runs on a pool worker: `state` is the worker's inv_conn. */
static void run_job(void *state, void *arg)
{
    struct request *r = arg;
    struct api_ctx ctx = {r->srv->inv, state, r->srv->started, &r->srv->http};
    r->route->handle(&ctx, &r->req, &r->rep);
    atomic_store_explicit(&r->done, true, memory_order_release);
    MHD_resume_connection(r->conn);
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
    size_t max = (size_t)r->srv->cfg->max_body_bytes;
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
                    r->srv->cfg->max_body_bytes);
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

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    struct api_server *s = cls;
    struct request *r = *con_cls;
    (void)version;

    if (r == NULL) { /* headers are in; the body (if any) comes next */
        r = calloc(1, sizeof(*r));
        if (r == NULL)
            oom();
        r->srv = s;
        r->conn = conn;
        clock_gettime(CLOCK_MONOTONIC, &r->started);
        api_reply_init(&r->rep);
        *con_cls = r;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl != NULL &&
            strtoull(cl, NULL, 10) > (unsigned long long)s->cfg->max_body_bytes) {
            /* Refuse before reading (and before any 100 Continue); MHD then closes. */
            r->too_large = true;
            return reply_too_large(r);
        }
        return MHD_YES;
    }
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
    req->method = method;
    req->path = url;
    if (header(conn, MHD_HTTP_HEADER_CONTENT_TYPE, &req->content_type) != 0 ||
        header(conn, MHD_HTTP_HEADER_AUTHORIZATION, &req->authorization) != 0 ||
        header(conn, "Idempotency-Key", &req->idempotency_key) != 0) {
        api_reply_error(&r->rep, 400, "bad_header", "a header value holds a NUL byte");
        return send_reply(r);
    }
    req->body = r->body;
    req->body_len = r->len;
    r->route = api_route_prepare(req, s->cfg->admin_token, &r->rep);
    if (r->route == NULL)
        return send_reply(r);
    struct api_ctx inline_ctx = {s->inv, NULL, s->started, &s->http};
    if (!(r->route->flags & API_ROUTE_BACKEND)) {
        r->route->handle(&inline_ctx, req, &r->rep);
        return send_reply(r);
    }
    if (r->route->fast != NULL && r->route->fast(&inline_ctx, req, &r->rep))
        return send_reply(r);

    /* Suspend before handing off: the worker may resume before we return. */
    struct pool *p = (r->route->flags & API_ROUTE_SLOW) ? s->orders : s->control;
    MHD_suspend_connection(conn);
    if (pool_submit(p, run_job, r) != 0) {
        api_reply_error(&r->rep, 503, "shutting_down", "the server is shutting down");
        api_reply_header(&r->rep, "Retry-After", "1");
        api_reply_header(&r->rep, "Connection", "close");
        atomic_store_explicit(&r->done, true, memory_order_release);
        MHD_resume_connection(conn);
    }
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    struct request *r = *con_cls;
    if (r == NULL)
        return;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK &&
        toe != MHD_REQUEST_TERMINATED_CLIENT_ABORT && r->req.path != NULL)
        log_debug("request %s %s ended early (code %d)", r->req.method, r->req.path,
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

struct api_server *api_server_start(const struct cfg *cfg, inv *v, char *err,
                                    size_t errlen)
{
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof(addr));
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&addr;
    if (inet_pton(AF_INET, cfg->bind, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)cfg->port);
    } else if (inet_pton(AF_INET6, cfg->bind, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)cfg->port);
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errlen, "bind: not a numeric address: %s", cfg->bind);
        return NULL;
    }

    struct api_server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        oom();
    s->cfg = cfg;
    s->inv = v;
    clock_gettime(CLOCK_MONOTONIC, &s->started);
    s->orders = pool_create(cfg->threads, worker_init, worker_fini, v, err, errlen);
    if (s->orders == NULL) {
        free(s);
        return NULL;
    }
    s->control = pool_create(CONTROL_THREADS, worker_init, worker_fini, v, err, errlen);
    if (s->control == NULL) {
        pool_free(s->orders);
        free(s);
        return NULL;
    }
    /* The logger goes first so that MHD reports option errors through it. */
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER,
        on_mhd_log, s, MHD_OPTION_SOCK_ADDR, &addr, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)cfg->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)cfg->connection_timeout_s, MHD_OPTION_LISTEN_BACKLOG_SIZE,
        (unsigned)LISTEN_BACKLOG, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)HTTP_THREADS, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)CONNECTION_MEMORY, MHD_OPTION_END);
    if (s->daemon == NULL) {
        snprintf(err, errlen,
                 "cannot listen on %s port %d (in use, or not a local address?)",
                 cfg->bind, cfg->port);
        pool_free(s->control);
        pool_free(s->orders);
        free(s);
        return NULL;
    }
    return s;
}

void api_server_stop(struct api_server *s)
{
    if (s == NULL)
        return;
    MHD_socket lsock = MHD_quiesce_daemon(s->daemon);
    pool_drain(s->orders);
    pool_drain(s->control);
    MHD_stop_daemon(s->daemon);
    if (lsock != MHD_INVALID_SOCKET)
        close(lsock);
    pool_free(s->orders);
    pool_free(s->control);
    free(s);
}
