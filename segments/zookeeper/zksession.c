/* zksession.c -- a ZooKeeper session on a libevent loop (zookeeper_interest/process). */
#include "segments/zookeeper/zksession.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"

#define ZKS_HOSTS_MAX 1024

struct zks {
    struct event_base *base;
    char *hosts;
    struct zks_handlers h;
    zhandle_t *zh;       /* NULL before zks_start and while a new session is made */
    int asked_ms;        /* the timeout asked for */
    struct event *io;    /* the client's socket (re-added at every pump) */
    struct event *timer; /* zookeeper_interest's timeout */
    struct event *reset; /* closes an expired handle, opens a new session */
    struct event *down;  /* disconnected for a whole session timeout */
    int timeout_ms;      /* the negotiated timeout, at the last connect */
    bool started;        /* zks_start was called: a handle is open or being made */
    bool connected;
    bool ended; /* the current handle's session ended: reset is pending */
    long long down_since;
    uint64_t gen, sessions;
};

static void on_io(evutil_socket_t fd, short what, void *arg);
static void on_timer(evutil_socket_t fd, short what, void *arg);

/* The client's own log lines: kept at debug level (a server that is down makes it
 * log every connect attempt); the session's transitions are logged here instead. */
static void client_log(const char *message)
{
    size_t n = strlen(message);
    while (n > 0 && (message[n - 1] == '\n' || message[n - 1] == '\r'))
        n--;
    log_debug("zookeeper client: %.*s", (int)n, message);
}

/* "HOST:PORT[,HOST:PORT...]": names, IPv4 or [IPv6] hosts and ports 1..65535. */
static bool valid_hosts(const char *hosts)
{
    size_t len = strlen(hosts);
    if (len == 0 || len > ZKS_HOSTS_MAX)
        return false;
    const char *p = hosts;
    for (;;) {
        const char *end = strchr(p, ',');
        if (end == NULL)
            end = p + strlen(p);
        const char *colon = NULL;
        for (const char *q = p; q < end; q++) {
            if (*q == ':')
                colon = q;
        }
        if (colon == NULL || colon == p || colon + 1 == end || end - colon > 6)
            return false;
        for (const char *q = p; q < colon; q++) {
            if (!isalnum((unsigned char)*q) && strchr(".-[]:_", *q) == NULL)
                return false;
        }
        long port = 0;
        for (const char *q = colon + 1; q < end; q++) {
            if (!isdigit((unsigned char)*q))
                return false;
            port = port * 10 + (*q - '0');
        }
        if (port < 1 || port > 65535)
            return false;
        if (*end == '\0')
            return true;
        p = end + 1;
    }
}

/* The session is over for us: close the handle on the next turn, make a new one. */
static void end_session(zks *s)
{
    s->ended = true;
    s->connected = false;
    if (s->down_since == 0)
        s->down_since = base_now_ms();
    evtimer_del(s->down);
    event_active(s->reset, EV_TIMEOUT, 0);
    s->h.session(s->h.arg, ZKS_EXPIRED);
}

static void session_event(zks *s, int state)
{
    if (state == ZOO_CONNECTED_STATE) {
        if (s->connected)
            return;
        s->connected = true;
        s->down_since = 0;
        s->timeout_ms = zoo_recv_timeout(s->zh);
        evtimer_del(s->down);
        const clientid_t *id = zoo_client_id(s->zh);
        log_info("zookeeper: session 0x%llx connected to %s (timeout %d ms)",
                 (unsigned long long)id->client_id, s->hosts, zoo_recv_timeout(s->zh));
        s->h.session(s->h.arg, ZKS_CONNECTED);
    } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        if (s->ended)
            return;
        log_warn("zookeeper: session %s on %s; its locks are lost, making a new one",
                 state == ZOO_EXPIRED_SESSION_STATE ? "expired" : "refused (auth)",
                 s->hosts);
        end_session(s);
    } else if (s->connected) { /* connecting / associating again */
        s->connected = false;
        s->down_since = base_now_ms();
        struct timeval tv = {s->timeout_ms / 1000, (s->timeout_ms % 1000) * 1000};
        evtimer_add(s->down, &tv);
        log_warn("zookeeper: connection to %s lost; the session lives on until its "
                 "timeout (%d ms)",
                 s->hosts, s->timeout_ms);
        s->h.session(s->h.arg, ZKS_DISCONNECTED);
    }
}

/* Disconnected for a whole session timeout: the server has expired the session by
 * now (unless it was down itself and restored it: then its nodes go a timeout
 * later). Its locks count as lost from here, not from whenever a reconnect tells. */
static void on_down(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    zks *s = arg;
    if (s->connected || s->ended || s->zh == NULL)
        return;
    log_warn("zookeeper: no connection to %s for the session timeout (%d ms); its locks "
             "are lost, making a new session",
             s->hosts, s->timeout_ms);
    end_session(s);
}

/* The one watcher of the session: session events (as the default watcher and, from
 * the client, on every watch it holds) and node watches. */
static void watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    zks *s = ctx;
    if (zh != s->zh)
        return;
    if (type == ZOO_SESSION_EVENT)
        session_event(s, state);
    else if (path != NULL)
        s->h.node(s->h.arg, type, path);
}

static void open_handle(zks *s)
{
    s->connected = false;
    s->ended = false;
    s->zh = zookeeper_init2(s->hosts, watcher, s->asked_ms, NULL, s, ZOO_NO_LOG_CLIENTENV,
                            client_log);
    if (s->zh == NULL) {
        /* Only a host that does not resolve gets here; try again after a while. */
        log_warn("zookeeper: cannot start a session on %s", s->hosts);
        struct timeval tv = {1, 0};
        evtimer_add(s->reset, &tv);
        return;
    }
    s->gen++;
    s->sessions++;
    if (s->down_since == 0)
        s->down_since = base_now_ms();
    zks_pump(s);
}

static void close_handle(zks *s)
{
    if (s->zh == NULL)
        return;
    event_del(s->io);
    event_del(s->timer);
    zhandle_t *zh = s->zh;
    s->zh = NULL; /* completions run by the close below see no handle */
    s->connected = false;
    zookeeper_close(zh);
}

static void on_reset(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    zks *s = arg;
    close_handle(s);
    open_handle(s);
}

void zks_pump(zks *s)
{
    if (s->zh == NULL || s->ended)
        return;
    int fd = -1, interest = 0;
    struct timeval tv = {0, 0};
    int rc = zookeeper_interest(s->zh, &fd, &interest, &tv);
    if (s->zh == NULL || s->ended) /* the call ran watchers that ended the session */
        return;
    if (rc == ZINVALIDSTATE) {
        session_event(s, ZOO_EXPIRED_SESSION_STATE);
        return;
    }
    event_del(s->io);
    if (fd != -1 && interest != 0) {
        short what = (interest & ZOOKEEPER_READ ? EV_READ : 0) |
                     (interest & ZOOKEEPER_WRITE ? EV_WRITE : 0);
        event_assign(s->io, s->base, fd, what, on_io, s);
        event_add(s->io, NULL);
    }
    /* A failed connect leaves tv at 0: the next interest waits for its delay itself. */
    if (tv.tv_sec == 0 && tv.tv_usec == 0 && fd == -1)
        tv.tv_usec = 1000;
    evtimer_add(s->timer, &tv);
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    zks *s = arg;
    if (s->zh == NULL || s->ended)
        return;
    int events =
        (what & EV_READ ? ZOOKEEPER_READ : 0) | (what & EV_WRITE ? ZOOKEEPER_WRITE : 0);
    zookeeper_process(s->zh, events);
    zks_pump(s);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    zks *s = arg;
    if (s->zh == NULL || s->ended)
        return;
    /* Pings, the receive deadline and reconnects all happen in zookeeper_interest
     * (a failure there runs the pending completions itself). */
    zks_pump(s);
}

zks *zks_create(struct event_base *base, const char *hosts, const struct zks_handlers *h,
                char *err, size_t len)
{
    if (hosts == NULL || !valid_hosts(hosts)) {
        snprintf(err, len, "zookeeper: bad address list '%.80s' (HOST:PORT,...)",
                 hosts ? hosts : "");
        return NULL;
    }
    zks *s = seg_calloc(1, sizeof *s);
    s->base = base;
    s->hosts = seg_strdup(hosts);
    s->h = *h;
    s->io = event_new(base, -1, 0, on_io, s);
    s->timer = evtimer_new(base, on_timer, s);
    s->reset = evtimer_new(base, on_reset, s);
    s->down = evtimer_new(base, on_down, s);
    if (s->io == NULL || s->timer == NULL || s->reset == NULL || s->down == NULL) {
        fprintf(stderr, "zookeeper: out of memory for events\n");
        abort();
    }
    return s;
}

void zks_free(zks *s)
{
    if (s == NULL)
        return;
    close_handle(s);
    event_free(s->io);
    event_free(s->timer);
    event_free(s->reset);
    event_free(s->down);
    free(s->hosts);
    free(s);
}

void zks_start(zks *s, int timeout_ms)
{
    if (s->started)
        return;
    s->started = true;
    s->asked_ms = timeout_ms;
    s->timeout_ms = timeout_ms;
    open_handle(s);
}

zhandle_t *zks_handle(const zks *s)
{
    return s->ended ? NULL : s->zh;
}

bool zks_connected(const zks *s)
{
    return s->zh != NULL && s->connected && !s->ended;
}

long long zks_down_since(const zks *s)
{
    return s->connected ? 0 : s->down_since;
}

uint64_t zks_generation(const zks *s)
{
    return s->gen;
}

int zks_timeout_ms(const zks *s)
{
    return s->zh != NULL && s->connected ? zoo_recv_timeout(s->zh) : s->asked_ms;
}

int zks_client_id(const zks *s, int64_t *id, char passwd[16])
{
    if (!zks_connected(s))
        return -1;
    const clientid_t *c = zoo_client_id(s->zh);
    *id = c->client_id;
    memcpy(passwd, c->passwd, 16);
    return 0;
}

uint64_t zks_sessions(const zks *s)
{
    return s->sessions;
}

watcher_fn zks_watcher(void)
{
    return watcher;
}

void *zks_watch_ctx(zks *s)
{
    return s;
}
