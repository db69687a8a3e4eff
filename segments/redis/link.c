/* link.c -- one pipelined asynchronous connection to one Redis node (see link.h). */
#include "segments/redis/link.h"

#include <errno.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "segments/redis/sentinel.h"
#include "segments/redis/target.h"
#include "segments/redis/scripts.h"

struct link {
    struct event_base *base;
    struct rd_target to;
    struct rd_target_text text; /* to's strings */
    struct link_owner *own;
    redisAsyncContext *ac;     /* NULL while down */
    void (*del_write)(void *); /* the adapter's, wrapped to count writes */
    char sha[SCRIPT__COUNT][41];
    struct lreq head;    /* sentinel of the list of requests owed a reply */
    struct lreq resend;  /* sentinel: to send again on the next connection */
    struct event *tick;  /* checks the reply deadline */
    struct event *retry; /* the next connection attempt */
    int backoff_ms;
    bool reconnecting;    /* an attempt to connect is due now: requests wait for it
                             (in `resend`) instead of failing at once */
    long long attempt_ms; /* when the last attempt to connect began */
    bool failed;          /* the last connection failed: log the next one that works */
    long long sgen;       /* Sentinel: the master generation host:port is of */
};

/* A request of the link's own: what it was (for the log) and, for SCRIPT LOAD, which
 * script. */
struct setup {
    struct lreq q;
    char what[16];
    int script; /* SCRIPT LOAD: the script; else -1 */
};

/* A request for a dead connection brings the next attempt to connect forward, to this
 * long after the last one (no storm of connects while Redis is away). */
#define RETRY_NOW_MS 50

static void bump(_Atomic long long *counter)
{
    if (counter != NULL)
        atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

void link_owner_error(struct link_owner *o, const char *what, const char *detail)
{
    snprintf(o->errstr, sizeof o->errstr, "%s: %.100s", what, detail);
    bump(o->counts.errors);
    rd_log(true, what, detail);
}

static void set_error(struct link *l, const char *what, const char *detail)
{
    l->failed = true;
    link_owner_error(l->own, what, detail);
}

static void unlink_req(struct lreq *q)
{
    q->prev->next = q->next;
    q->next->prev = q->prev;
    q->prev = q->next = q;
}

static void link_tail(struct lreq *head, struct lreq *q)
{
    q->prev = head->prev;
    q->next = head;
    head->prev->next = q;
    head->prev = q;
}

/* Answer NULL on the next turn of the loop (never from inside the caller's call). */
static void fail_later_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct lreq *q = arg;
    q->done(q, NULL);
}

static void fail_later(struct link *l, struct lreq *q)
{
    q->unsent = !q->resent; /* never written, unless on a connection closed since */
    static const struct timeval zero = {0, 0};
    if (event_base_once(l->base, -1, EV_TIMEOUT, fail_later_cb, q, &zero) != 0)
        q->done(q, NULL); /* cannot happen short of out of memory */
}

/* ---- sending -------------------------------------------------------------------- */

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);
static void drop(struct link *l, const char *why);

/* Sentinel: drop a connection to a master the sentinels no longer name; requests
 * owed a reply on it are answered NULL ("unavailable": their ids make a retry
 * safe), and the next connection goes to the new master. */
static void leave_old_master(struct link *l)
{
    if (l->ac != NULL && l->to.sentinel != NULL &&
        rd_sentinel_gen(l->to.sentinel) != l->sgen)
        drop(l, "the sentinels named another master");
}

void link_send(struct link *l, struct lreq *q)
{
    q->l = l;
    q->prev = q->next = q;
    q->unsent = false;
    leave_old_master(l);
    if (l->ac == NULL) {
        if (!l->reconnecting) {
            /* Down: bring the next attempt forward (RETRY_NOW_MS after the last one)
             * rather than wait for the backoff, so that the first command after Redis
             * is back need not fail; commands meanwhile wait for that attempt. */
            l->reconnecting = true;
            long long wait = l->attempt_ms + RETRY_NOW_MS - base_now_ms();
            struct timeval tv = {0, (suseconds_t)(wait > 0 ? wait * 1000 : 0)};
            event_del(l->retry);
            evtimer_add(l->retry, &tv);
        }
        link_tail(&l->resend, q); /* sent when the connection is back */
        return;
    }
    const char *out;
    const char *sha = q->cmd.script >= 0 ? l->sha[q->cmd.script] : NULL;
    size_t len = cmd_format(&q->cmd, sha, &out);
    if (redisAsyncFormattedCommand(l->ac, on_reply, q, out, len) != REDIS_OK) {
        fail_later(l, q);
        return;
    }
    q->sent_ms = base_now_ms();
    link_tail(&l->head, q);
    l->own->stats.commands++;
    bump(l->own->counts.commands);
}

/* Sentinel: true when `r`, the answer to ROLE, says master. */
static bool says_master(const redisReply *r)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
           r->element[0]->type == REDIS_REPLY_STRING &&
           strcmp(r->element[0]->str, "master") == 0;
}

static void setup_done(struct lreq *q, redisReply *r)
{
    struct setup *s = (struct setup *)q;
    struct link *l = q->l;
    if (r != NULL && strcmp(s->what, "ROLE") == 0 && !says_master(r)) {
        /* A stale answer of the sentinels, or a failover under way: nothing may be
         * written here (a replica refuses writes anyway: READONLY). */
        set_error(l, "ROLE", r->type == REDIS_REPLY_ERROR ? r->str : "not a master");
        rd_sentinel_refresh(l->to.sentinel);
        drop(l, NULL);
    } else if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        set_error(l, s->what, r->str);
        if (s->script < 0 && strcmp(s->what, "ASKING") != 0)
            drop(l, NULL); /* AUTH or SELECT refused: this connection is no use */
    } else if (r != NULL && s->script >= 0 && r->type == REDIS_REPLY_STRING &&
               r->len == 40) {
        memcpy(l->sha[s->script], r->str, 41);
    }
    cmd_free(&q->cmd);
    free(s);
}

static struct setup *new_setup(const char *what, int script)
{
    struct setup *s = seg_calloc(1, sizeof *s);
    snprintf(s->what, sizeof s->what, "%s", what);
    s->script = script;
    s->q.setup = true;
    s->q.done = setup_done;
    return s;
}

void link_asking(struct link *l)
{
    struct setup *s = new_setup("ASKING", -1);
    cmd_plain(&s->q.cmd, "ASKING");
    link_send(l, &s->q);
}

/* True when the server closed the connection under us (a restart, CLIENT KILL, a
 * reset), as opposed to our own drop at the deadline or after a refused AUTH. */
static bool closed_by_peer(const redisAsyncContext *ac)
{
    return ac->err == REDIS_ERR_EOF ||
           (ac->err == REDIS_ERR_IO && (strcmp(ac->errstr, strerror(ECONNRESET)) == 0 ||
                                        strcmp(ac->errstr, strerror(EPIPE)) == 0));
}

/* Answer NULL to every request waiting to be sent again. */
static void fail_resends(struct link *l)
{
    while (l->resend.next != &l->resend) {
        struct lreq *q = l->resend.next;
        unlink_req(q);
        fail_later(l, q);
    }
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct lreq *q = privdata;
    struct link *l = q->l;
    redisReply *r = reply;
    unlink_req(q);
    if (r == NULL && !q->resent && !q->setup && !q->once && closed_by_peer(ac)) {
        /* Once more on the next connection: every script recognises its own earlier
         * run, so a reply lost on the wire does not become a false answer. A timeout
         * is never sent again: that would only double the wait. */
        q->resent = true;
        link_tail(&l->resend, q);
        return;
    }
    if (r == NULL && !(ac->c.flags & REDIS_CONNECTED) && !q->resent)
        q->unsent = true; /* its connection never came up: it never went out */
    if (r != NULL && r->type == REDIS_REPLY_ERROR && q->cmd.script >= 0 &&
        strncmp(r->str, "NOSCRIPT", 8) == 0) {
        l->sha[q->cmd.script][0] = '\0'; /* EVAL sends the source and caches it */
        link_send(l, q);
        return;
    }
    q->done(q, r);
}

/* ---- the connection ------------------------------------------------------------- */

static void schedule_retry(struct link *l)
{
    l->backoff_ms = l->backoff_ms == 0 ? 50 : l->backoff_ms * 2;
    if (l->backoff_ms > 1000)
        l->backoff_ms = 1000;
    struct timeval tv = {l->backoff_ms / 1000, (l->backoff_ms % 1000) * 1000};
    evtimer_add(l->retry, &tv);
}

/* Give up the connection: every request owed a reply is answered NULL (hiredis calls
 * on_reply with NULL for each), and a new connection follows the backoff. */
static void drop(struct link *l, const char *why)
{
    if (why != NULL)
        set_error(l, "redis", why);
    redisAsyncContext *ac = l->ac;
    if (ac == NULL)
        return;
    l->ac = NULL; /* on_disconnect must not schedule a second retry */
    redisAsyncFree(ac);
    schedule_retry(l);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct link *l = ac->data;
    if (status == REDIS_OK) {
        if (l->failed)
            rd_log(false, "connect",
                   l->text.unix_path[0] != '\0' ? l->text.unix_path : l->text.host);
        l->failed = false;
        l->backoff_ms = 0;
        return;
    }
    set_error(l, "connect", ac->errstr);
    if (l->to.sentinel != NULL)
        rd_sentinel_refresh(l->to.sentinel); /* refused: maybe a failover */
    l->reconnecting = false;
    fail_resends(l);
    if (l->ac == ac) { /* hiredis frees the context after this callback */
        l->ac = NULL;
        schedule_retry(l);
    }
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct link *l = ac->data;
    if (status != REDIS_OK)
        set_error(l, "redis", ac->errstr);
    if (l->ac != ac)
        return;
    l->ac = NULL;
    if (status != REDIS_OK && closed_by_peer(ac) && !l->reconnecting) {
        /* A working connection closed by the server (CLIENT KILL, an idle timeout, a
         * restart): connect again at once, and let requests wait for it. */
        l->reconnecting = true;
        static const struct timeval now = {0, 0};
        evtimer_add(l->retry, &now);
        return;
    }
    schedule_retry(l);
}

/* The adapter's delWrite, counted: hiredis calls it when a write emptied its output
 * buffer, so once per batch of commands written. */
static void counting_del_write(void *privdata)
{
    redisLibeventEvents *e = privdata;
    struct link *l = e->context->data;
    l->own->stats.writes++;
    bump(l->own->counts.writes);
    l->del_write(privdata);
}

static void connect_failed(struct link *l, const char *why)
{
    set_error(l, "connect", why);
    l->reconnecting = false;
    fail_resends(l);
    schedule_retry(l);
}

static void connect_now(struct link *l)
{
    l->attempt_ms = base_now_ms();
    if (l->to.sentinel != NULL) {
        long long gen = rd_sentinel_master(l->to.sentinel, l->text.host,
                                           sizeof l->text.host, &l->to.port);
        if (gen == 0) {
            char why[200];
            connect_failed(l, rd_sentinel_error(l->to.sentinel, why, sizeof why));
            return;
        }
        l->sgen = gen;
    }
    redisAsyncContext *ac = l->text.unix_path[0] != '\0'
                                ? redisAsyncConnectUnix(l->text.unix_path)
                                : redisAsyncConnect(l->text.host, l->to.port);
    if (ac == NULL || ac->err) {
        connect_failed(l, ac != NULL ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        if (l->to.sentinel != NULL)
            rd_sentinel_refresh(l->to.sentinel);
        return;
    }
    ac->data = l;
    if (redisLibeventAttach(ac, l->base) != REDIS_OK) {
        redisAsyncFree(ac);
        connect_failed(l, "cannot attach to the event loop");
        return;
    }
    l->del_write = ac->ev.delWrite;
    ac->ev.delWrite = counting_del_write;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    l->ac = ac;
    l->reconnecting = false;
    l->own->stats.connects++;
    if (l->text.password[0] != '\0') {
        struct setup *s = new_setup("AUTH", -1);
        cmd_plain(&s->q.cmd, "AUTH");
        if (l->text.user[0] != '\0')
            cmd_arg(&s->q.cmd, l->text.user);
        cmd_arg(&s->q.cmd, l->text.password);
        link_send(l, &s->q);
    }
    if (l->to.sentinel != NULL) {
        struct setup *s = new_setup("ROLE", -1);
        cmd_plain(&s->q.cmd, "ROLE");
        link_send(l, &s->q);
    }
    if (l->to.db != 0) {
        struct setup *s = new_setup("SELECT", -1);
        cmd_plain(&s->q.cmd, "SELECT");
        cmd_argll(&s->q.cmd, l->to.db);
        link_send(l, &s->q);
    }
    for (int i = 0; i < SCRIPT__COUNT; i++) {
        if (l->sha[i][0] != '\0')
            continue;
        struct setup *s = new_setup("SCRIPT LOAD", i);
        cmd_plain(&s->q.cmd, "SCRIPT");
        cmd_arg(&s->q.cmd, "LOAD");
        cmd_arg(&s->q.cmd, script_source((enum script_id)i));
        link_send(l, &s->q);
    }
    while (l->resend.next != &l->resend) { /* what the last connection owed */
        struct lreq *q = l->resend.next;
        unlink_req(q);
        link_send(l, q);
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
    struct link *l = arg;
    leave_old_master(l);
    struct lreq *oldest = l->head.next;
    if (oldest != &l->head && base_now_ms() - oldest->sent_ms > l->to.timeout_ms) {
        char why[64];
        snprintf(why, sizeof why, "no reply within %d ms", l->to.timeout_ms);
        l->own->stats.timeouts++;
        drop(l, why);
    }
}

struct link *link_create(struct event_base *base, const struct rd_target *to,
                         struct link_owner *owner)
{
    struct link *l = seg_calloc(1, sizeof *l);
    l->base = base;
    rd_target_copy(&l->to, &l->text, to);
    l->own = owner;
    l->head.prev = l->head.next = &l->head;
    l->resend.prev = l->resend.next = &l->resend;
    l->retry = evtimer_new(base, on_retry, l);
    l->tick = event_new(base, -1, EV_PERSIST, on_tick, l);
    int every = to->timeout_ms / 4;
    struct timeval tv = {0, (every < 5 ? 5 : every > 100 ? 100 : every) * 1000};
    if (l->retry == NULL || l->tick == NULL || evtimer_add(l->tick, &tv) != 0) {
        fputs("inventoryd: cannot create the Redis connection's timers\n", stderr);
        abort();
    }
    connect_now(l);
    return l;
}

void link_free(struct link *l)
{
    if (l == NULL)
        return;
    redisAsyncContext *ac = l->ac;
    l->ac = NULL;
    if (ac != NULL)
        redisAsyncFree(ac); /* answers every request owed a reply */
    while (l->resend.next != &l->resend) {
        struct lreq *q = l->resend.next;
        unlink_req(q);
        q->done(q, NULL);
    }
    event_free(l->tick);
    event_free(l->retry);
    free(l);
}

const char *link_host(const struct link *l)
{
    return l->text.host;
}

int link_port(const struct link *l)
{
    return l->to.port;
}

bool link_up(const struct link *l)
{
    return l->ac != NULL;
}
