/* async.c -- one asynchronous Redis connection on a libevent loop (see async.h). */
#include "segments/redis/async.h"

#include <errno.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "segments/redis/proto.h"
#include "segments/redis/store.h"
#include "base/xalloc.h"

enum kind {
    K_SETUP,
    K_SCRIPT_LOAD,
    K_REPLY,
    K_MULTI,
    K_INT_DONE,
    K_INT_TAKEN,
    K_META,
    K_RECORD,
    K_STOCKS,
    K_PING
};

/* A command on its way: sent and owed a reply (in the connection's list, oldest
 * first), or failed and waiting for the next turn of the loop to say so. */
struct req {
    rda_conn *c;
    struct rd_cmd cmd;
    enum kind kind;
    int n;                      /* K_MULTI, K_STOCKS: how many segments */
    char token[33];             /* K_INT_TAKEN: ours */
    char sku[SEG_NAME_MAX + 1]; /* K_RECORD: the SKU the caller expects, and */
    long long epoch;            /* its epoch */
    void (*fn)(void);
    void *arg;
    long long sent_ms;
    bool resent; /* sent again once after its connection was closed under it */
    struct req *prev, *next;
};

struct rda_conn {
    struct event_base *base;
    struct rd_target to;
    char host[256], unix_path[1024], user[256], password[256];
    struct rda_counters counts;
    redisAsyncContext *ac;     /* NULL while down */
    void (*del_write)(void *); /* the adapter's, wrapped to count writes */
    char sha[SCRIPT__COUNT][41];
    struct req head;     /* sentinel of the list of commands owed a reply */
    struct req resend;   /* sentinel: to send again on the next connection */
    struct event *tick;  /* checks the reply deadline */
    struct event *retry; /* the next connection attempt */
    int backoff_ms;
    bool reconnecting;    /* an attempt to connect is due now: calls wait for it (in
                             `resend`) instead of failing at once */
    long long attempt_ms; /* when the last attempt to connect began */
    bool failed;          /* the last connection failed: log the next one that works */
    struct rda_stats stats;
    char errstr[160];
};

/* A call while down brings the next attempt to connect forward, to this long after
 * the last one (no storm of connects while Redis is away). */
#define RETRY_NOW_MS 50

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void bump(_Atomic long long *counter)
{
    if (counter != NULL)
        atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

static void set_error(rda_conn *c, const char *what, const char *detail)
{
    snprintf(c->errstr, sizeof c->errstr, "%s: %.100s", what, detail);
    bump(c->counts.errors);
    c->failed = true;
    store_log(true, what, detail);
}

/* ---- answering ------------------------------------------------------------------ */

/* Decode `r` (NULL: no answer) for `q`'s caller, call it and free `q`. */
static void answer(struct req *q, redisReply *r)
{
    struct rd_reply out = {0};
    struct rd_meta meta;
    char *record = NULL;
    int value = 0, found = 0;
    long long *stocks = NULL;
    if (q->kind == K_MULTI || q->kind == K_STOCKS)
        stocks = seg_calloc((size_t)q->n, sizeof *stocks);
    int rc = -1;
    if (r != NULL) {
        switch (q->kind) {
        case K_REPLY:
            rc = proto_scripted(r, &out);
            break;
        case K_MULTI:
            rc = proto_multi(r, q->n, &out, stocks);
            break;
        case K_INT_DONE:
            rc = proto_done(r, &value);
            break;
        case K_INT_TAKEN:
            rc = proto_taken(r, q->token, &value);
            break;
        case K_META:
            rc = proto_meta(r, &meta, &found);
            break;
        case K_RECORD: {
            char owner[SEG_NAME_MAX + 1];
            long long epoch;
            rc = proto_record(r, &record, owner, &epoch);
            if (rc == 0 && record != NULL &&
                proto_record_dead(owner, epoch, q->sku, q->epoch)) {
                free(record);
                record = NULL;
            }
            break;
        }
        case K_STOCKS:
            rc = proto_stocks(r, q->n, stocks);
            break;
        case K_PING:
            rc = 0;
            break;
        default:
            rc = 0;
        }
    }
    switch (q->fn != NULL ? q->kind : K_SETUP) { /* no callback: nobody asked */
    case K_REPLY:
        ((rda_reply_fn)q->fn)(q->arg, rc, &out);
        break;
    case K_MULTI:
        ((rda_multi_fn)q->fn)(q->arg, rc, &out, stocks);
        break;
    case K_INT_DONE:
    case K_INT_TAKEN:
    case K_PING:
        ((rda_int_fn)q->fn)(q->arg, rc, value);
        break;
    case K_META:
        ((rda_meta_fn)q->fn)(q->arg, rc, rc == 0 && found,
                             rc == 0 && found ? &meta : NULL);
        break;
    case K_RECORD:
        ((rda_record_fn)q->fn)(q->arg, rc, record);
        break;
    case K_STOCKS:
        ((rda_stocks_fn)q->fn)(q->arg, rc, stocks);
        break;
    default:
        break;
    }
    rd_reply_clear(&out);
    free(stocks);
    cmd_free(&q->cmd);
    free(q);
}

static void unlink_req(struct req *q)
{
    q->prev->next = q->next;
    q->next->prev = q->prev;
    q->prev = q->next = q;
}

static void link_tail(struct req *head, struct req *q)
{
    q->prev = head->prev;
    q->next = head;
    head->prev->next = q;
    head->prev = q;
}

/* Answer -1 on the next turn of the loop (never from inside the caller's call). */
static void fail_later_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    answer(arg, NULL);
}

static void fail_later(struct req *q)
{
    static const struct timeval zero = {0, 0};
    if (event_base_once(q->c->base, -1, EV_TIMEOUT, fail_later_cb, q, &zero) != 0)
        answer(q, NULL); /* cannot happen short of out of memory */
}

/* ---- sending -------------------------------------------------------------------- */

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* Send `q` on the connection (by EVALSHA when the script is loaded). */
static void send_req(struct req *q)
{
    rda_conn *c = q->c;
    if (c->ac == NULL) {
        if (!c->reconnecting) {
            /* Down: bring the next attempt forward (RETRY_NOW_MS after the last one)
             * rather than wait for the backoff, so that the first call after Redis is
             * back need not fail; calls meanwhile wait for that attempt. */
            c->reconnecting = true;
            long long wait = c->attempt_ms + RETRY_NOW_MS - now_ms();
            struct timeval tv = {0, (suseconds_t)(wait > 0 ? wait * 1000 : 0)};
            event_del(c->retry);
            evtimer_add(c->retry, &tv);
        }
        link_tail(&c->resend, q); /* sent when the connection is back */
        return;
    }
    const char **argv;
    const size_t *len;
    const char *sha = q->cmd.script >= 0 ? c->sha[q->cmd.script] : NULL;
    int argc = cmd_argv(&q->cmd, sha, &argv, &len);
    if (redisAsyncCommandArgv(c->ac, on_reply, q, argc, argv, len) != REDIS_OK) {
        fail_later(q);
        return;
    }
    q->sent_ms = now_ms();
    link_tail(&c->head, q);
    c->stats.commands++;
    bump(c->counts.commands);
}

static struct req *new_req(rda_conn *c, enum kind kind, void (*fn)(void), void *arg)
{
    struct req *q = seg_calloc(1, sizeof *q);
    q->c = c;
    q->kind = kind;
    q->fn = fn;
    q->arg = arg;
    q->prev = q->next = q;
    return q;
}

static void drop(rda_conn *c, const char *why);

/* True when the server closed the connection under us (a restart, CLIENT KILL, a
 * reset), as opposed to our own drop at the deadline or after a refused AUTH. */
static bool closed_by_peer(const redisAsyncContext *ac)
{
    return ac->err == REDIS_ERR_EOF ||
           (ac->err == REDIS_ERR_IO && (strcmp(ac->errstr, strerror(ECONNRESET)) == 0 ||
                                        strcmp(ac->errstr, strerror(EPIPE)) == 0));
}

/* Answer -1 to every command waiting to be sent again. */
static void fail_resends(rda_conn *c)
{
    while (c->resend.next != &c->resend) {
        struct req *q = c->resend.next;
        unlink_req(q);
        fail_later(q);
    }
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct req *q = privdata;
    rda_conn *c = q->c;
    redisReply *r = reply;
    unlink_req(q);
    if (r == NULL && !q->resent && q->kind != K_SETUP && q->kind != K_SCRIPT_LOAD &&
        closed_by_peer(ac)) {
        /* Once more on the next connection: every script recognises its own earlier
         * run (scripts.c), so a reply lost on the wire does not become a false answer.
         * A timeout is never sent again: that would only double the wait. */
        q->resent = true;
        link_tail(&c->resend, q);
        return;
    }
    if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        if (q->cmd.script >= 0 && strncmp(r->str, "NOSCRIPT", 8) == 0) {
            c->sha[q->cmd.script][0] = '\0'; /* EVAL sends the source and caches it */
            send_req(q);
            return;
        }
        set_error(c, q->kind == K_SETUP ? q->token : "redis error", r->str);
        if (q->kind == K_SETUP) /* AUTH or SELECT refused: this connection is no use */
            drop(c, NULL);
        r = NULL;
    }
    if (q->kind == K_SCRIPT_LOAD) {
        if (r != NULL && r->type == REDIS_REPLY_STRING && r->len == 40)
            memcpy(c->sha[q->n], r->str, 41);
        cmd_free(&q->cmd);
        free(q);
        return;
    }
    if (q->kind == K_SETUP) {
        cmd_free(&q->cmd);
        free(q);
        return;
    }
    answer(q, r);
}

/* ---- the connection ------------------------------------------------------------- */

static void schedule_retry(rda_conn *c)
{
    c->backoff_ms = c->backoff_ms == 0 ? 50 : c->backoff_ms * 2;
    if (c->backoff_ms > 1000)
        c->backoff_ms = 1000;
    struct timeval tv = {c->backoff_ms / 1000, (c->backoff_ms % 1000) * 1000};
    evtimer_add(c->retry, &tv);
}

/* Give up the connection: every command owed a reply is answered -1 (hiredis calls
 * on_reply with NULL for each), and a new connection follows the backoff. */
static void drop(rda_conn *c, const char *why)
{
    if (why != NULL)
        set_error(c, "redis", why);
    redisAsyncContext *ac = c->ac;
    if (ac == NULL)
        return;
    c->ac = NULL; /* on_disconnect must not schedule a second retry */
    redisAsyncFree(ac);
    schedule_retry(c);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    rda_conn *c = ac->data;
    if (status == REDIS_OK) {
        if (c->failed)
            store_log(false, "connect",
                      c->unix_path[0] != '\0' ? c->unix_path : c->to.host);
        c->failed = false;
        c->backoff_ms = 0;
        return;
    }
    set_error(c, "connect", ac->errstr);
    c->reconnecting = false;
    fail_resends(c);
    if (c->ac == ac) { /* hiredis frees the context after this callback */
        c->ac = NULL;
        schedule_retry(c);
    }
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    rda_conn *c = ac->data;
    if (status != REDIS_OK)
        set_error(c, "redis", ac->errstr);
    if (c->ac != ac)
        return;
    c->ac = NULL;
    if (status != REDIS_OK && closed_by_peer(ac) && !c->reconnecting) {
        /* A working connection closed by the server (CLIENT KILL, an idle timeout, a
         * restart): connect again at once, and let calls wait for it. */
        c->reconnecting = true;
        static const struct timeval now = {0, 0};
        evtimer_add(c->retry, &now);
        return;
    }
    schedule_retry(c);
}

/* The adapter's delWrite, counted: hiredis calls it when a write emptied its output
 * buffer, so once per batch of commands written. */
static void counting_del_write(void *privdata)
{
    redisLibeventEvents *e = privdata;
    rda_conn *c = e->context->data;
    c->stats.writes++;
    bump(c->counts.writes);
    c->del_write(privdata);
}

static void queue_setup(rda_conn *c, const char *what, struct rd_cmd *cmd)
{
    struct req *q = new_req(c, K_SETUP, NULL, NULL);
    q->cmd = *cmd;
    snprintf(q->token, sizeof q->token, "%s", what);
    send_req(q);
}

static void connect_now(rda_conn *c)
{
    c->attempt_ms = now_ms();
    redisAsyncContext *ac = c->unix_path[0] != '\0'
                                ? redisAsyncConnectUnix(c->unix_path)
                                : redisAsyncConnect(c->to.host, c->to.port);
    if (ac == NULL || ac->err) {
        set_error(c, "connect", ac != NULL ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        c->reconnecting = false;
        fail_resends(c);
        schedule_retry(c);
        return;
    }
    ac->data = c;
    if (redisLibeventAttach(ac, c->base) != REDIS_OK) {
        set_error(c, "connect", "cannot attach to the event loop");
        redisAsyncFree(ac);
        c->reconnecting = false;
        fail_resends(c);
        schedule_retry(c);
        return;
    }
    c->del_write = ac->ev.delWrite;
    ac->ev.delWrite = counting_del_write;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    c->ac = ac;
    c->reconnecting = false;
    c->stats.connects++;
    struct rd_cmd cmd;
    if (c->password[0] != '\0') {
        cmd_plain(&cmd, "AUTH");
        if (c->user[0] != '\0')
            cmd_arg(&cmd, c->user);
        cmd_arg(&cmd, c->password);
        queue_setup(c, "AUTH", &cmd);
    }
    if (c->to.db != 0) {
        cmd_plain(&cmd, "SELECT");
        cmd_argll(&cmd, c->to.db);
        queue_setup(c, "SELECT", &cmd);
    }
    for (int i = 0; i < SCRIPT__COUNT; i++) {
        if (c->sha[i][0] != '\0')
            continue;
        struct req *q = new_req(c, K_SCRIPT_LOAD, NULL, NULL);
        q->n = i;
        cmd_plain(&q->cmd, "SCRIPT");
        cmd_arg(&q->cmd, "LOAD");
        cmd_arg(&q->cmd, script_source((enum script_id)i));
        send_req(q);
    }
    while (c->resend.next != &c->resend) { /* what the last connection owed */
        struct req *q = c->resend.next;
        unlink_req(q);
        send_req(q);
    }
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    connect_now(arg);
}

/* The deadline: the oldest reply owed is older than timeout_ms -> drop and redo. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rda_conn *c = arg;
    struct req *oldest = c->head.next;
    if (oldest != &c->head && now_ms() - oldest->sent_ms > c->to.timeout_ms) {
        char why[64];
        snprintf(why, sizeof why, "no reply within %d ms", c->to.timeout_ms);
        c->stats.timeouts++;
        drop(c, why);
    }
}

rda_conn *rda_create(struct event_base *base, const struct rd_target *to,
                     const struct rda_counters *counts)
{
    rda_conn *c = seg_calloc(1, sizeof *c);
    c->base = base;
    c->to = *to;
    snprintf(c->host, sizeof c->host, "%s", to->host ? to->host : "127.0.0.1");
    snprintf(c->unix_path, sizeof c->unix_path, "%s", to->unix_path ? to->unix_path : "");
    snprintf(c->user, sizeof c->user, "%s", to->user ? to->user : "");
    snprintf(c->password, sizeof c->password, "%s", to->password ? to->password : "");
    c->to.host = c->host;
    if (counts != NULL)
        c->counts = *counts;
    c->head.prev = c->head.next = &c->head;
    c->resend.prev = c->resend.next = &c->resend;
    c->retry = evtimer_new(base, on_retry, c);
    c->tick = event_new(base, -1, EV_PERSIST, on_tick, c);
    int every = to->timeout_ms / 4;
    struct timeval tv = {0, (every < 5 ? 5 : every > 100 ? 100 : every) * 1000};
    if (c->retry == NULL || c->tick == NULL || evtimer_add(c->tick, &tv) != 0) {
        fputs("inventoryd: cannot create the Redis connection's timers\n", stderr);
        abort();
    }
    connect_now(c);
    return c;
}

void rda_free(rda_conn *c)
{
    if (c == NULL)
        return;
    redisAsyncContext *ac = c->ac;
    c->ac = NULL;
    if (ac != NULL)
        redisAsyncFree(ac); /* answers every command owed a reply */
    while (c->resend.next != &c->resend) {
        struct req *q = c->resend.next;
        unlink_req(q);
        answer(q, NULL);
    }
    event_free(c->tick);
    event_free(c->retry);
    free(c);
}

const char *rda_error(const rda_conn *c)
{
    return c->errstr;
}

void rda_stats(const rda_conn *c, struct rda_stats *out)
{
    *out = c->stats;
}

/* ---- the calls ------------------------------------------------------------------ */

#define FN(f) ((void (*)(void))(f))

void rda_ping(rda_conn *c, rda_int_fn fn, void *arg)
{
    struct req *q = new_req(c, K_PING, FN(fn), arg);
    proto_ping(&q->cmd);
    send_req(q);
}

void rda_meta_read(rda_conn *c, const char *sku, rda_meta_fn fn, void *arg)
{
    struct req *q = new_req(c, K_META, FN(fn), arg);
    proto_meta_read(&q->cmd, sku);
    send_req(q);
}

void rda_record_read(rda_conn *c, const char *id, const char *sku, long long epoch,
                     rda_record_fn fn, void *arg)
{
    struct req *q = new_req(c, K_RECORD, FN(fn), arg);
    snprintf(q->sku, sizeof q->sku, "%s", sku);
    q->epoch = epoch;
    proto_record_read(&q->cmd, id);
    send_req(q);
}

void rda_stocks_read(rda_conn *c, const char *sku, int n, rda_stocks_fn fn, void *arg)
{
    struct req *q = new_req(c, K_STOCKS, FN(fn), arg);
    q->n = n;
    proto_stocks_read(&q->cmd, sku, n);
    send_req(q);
}

void rda_acquire(rda_conn *c, const char *sku, long long epoch, int i, const char *id,
                 long long qty, const char *token, int ttl_ms, rda_reply_fn fn, void *arg)
{
    struct req *q = new_req(c, K_REPLY, FN(fn), arg);
    proto_acquire(&q->cmd, sku, epoch, i, id, qty, token, ttl_ms);
    send_req(q);
}

void rda_deduct(rda_conn *c, const char *sku, long long epoch, int i, const char *token,
                const char *attempt, const char *id, long long qty, const char *record,
                rda_reply_fn fn, void *arg)
{
    struct req *q = new_req(c, K_REPLY, FN(fn), arg);
    proto_deduct(&q->cmd, sku, epoch, i, token, attempt, id, qty, record);
    send_req(q);
}

void rda_lock(rda_conn *c, const char *sku, int i, const char *token, int ttl_ms,
              rda_int_fn fn, void *arg)
{
    struct req *q = new_req(c, K_INT_TAKEN, FN(fn), arg);
    snprintf(q->token, sizeof q->token, "%s", token);
    proto_lock(&q->cmd, sku, i, token, ttl_ms);
    send_req(q);
}

void rda_release(rda_conn *c, const char *sku, int i, const char *token, rda_int_fn fn,
                 void *arg)
{
    struct req *q = new_req(c, K_INT_DONE, FN(fn), arg);
    proto_release(&q->cmd, sku, i, token);
    send_req(q);
}

void rda_renew(rda_conn *c, const char *sku, int i, const char *token, int ttl_ms,
               rda_int_fn fn, void *arg)
{
    struct req *q = new_req(c, K_INT_DONE, FN(fn), arg);
    proto_renew(&q->cmd, sku, i, token, ttl_ms);
    send_req(q);
}

void rda_deduct_multi(rda_conn *c, const char *sku, long long epoch, const char *id,
                      const char *record, const char *attempt, const struct rd_parts *p,
                      rda_multi_fn fn, void *arg)
{
    struct req *q = new_req(c, K_MULTI, FN(fn), arg);
    q->n = p->n;
    proto_deduct_multi(&q->cmd, sku, epoch, id, record, attempt, p);
    send_req(q);
}

void rda_cancel(rda_conn *c, const char *sku, long long epoch, const char *id,
                const char *cancelled, const char *expected, const struct rd_parts *p,
                rda_reply_fn fn, void *arg)
{
    struct req *q = new_req(c, K_REPLY, FN(fn), arg);
    proto_cancel(&q->cmd, sku, epoch, id, cancelled, expected, p);
    send_req(q);
}

void rda_adjust(rda_conn *c, const char *sku, long long epoch, int segments,
                const char *const *tok, const char *op, long long add, long long limit,
                const char *rid, const char *sig, rda_reply_fn fn, void *arg)
{
    struct req *q = new_req(c, K_REPLY, FN(fn), arg);
    proto_adjust(&q->cmd, sku, epoch, segments, tok, op, add, limit, rid, sig);
    send_req(q);
}
