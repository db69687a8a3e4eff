/* redlock.c -- RedLock over N independent redis-servers on a libevent loop (lks_ops). */
#include "segments/redlock/redlock.h"

#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/clock.h"
#include "base/xalloc.h"

#define RL_MAX_NODES 5
#define RL_NAME_MAX 200
#define RL_JITTER_MIN_MS 5
#define RL_JITTER_SPAN_MS 25

static const char RL_RELEASE_LUA[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end";
static const char RL_RENEW_LUA[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

typedef struct rl rl;
typedef struct rl_op rl_op;
typedef struct rl_hold rl_hold;

struct rl_node {
    rl *rl;
    char host[64];
    int port;
    redisAsyncContext *ac; /* NULL while not connected */
};

/* One node's part of one round of a call: the privdata of its hiredis callback. The
 * callback frees it; `op` is NULL once the call was decided without it. */
typedef struct rl_call {
    rl_op *op;
    int node;
} rl_call;

enum rl_state {
    RL_ACQ_SENT,     /* SET NX PX sent to every node: answers or the call timer */
    RL_ACQ_BACKOFF,  /* this round lost (token deleted on all): the jitter timer runs */
    RL_RENEW_SENT,   /* compare-and-pexpire sent to every node */
    RL_RELEASE_SENT, /* compare-and-delete sent to every node */
    RL_ANSWER,       /* known at the call (rc): answered on the next turn of the loop */
};

struct rl_op {
    rl *rl;
    rl_op *prev, *next; /* rl->ops */
    enum rl_state state;
    struct event *timer; /* the call's deadline, the backoff, and "answer now" */
    rl_hold *hold;       /* acquire: the hold being won; renew, release: the hold */
    int ttl_ms;
    long long deadline_ms;       /* acquire: stop trying at */
    long long started_ms;        /* this round's start */
    int answered, granted;       /* this round: nodes that replied, and said yes */
    bool early;                  /* this round was decided by a majority granting */
    rl_call *call[RL_MAX_NODES]; /* this round's outstanding calls (NULL: answered) */
    int rc;                      /* RL_ANSWER */
    bool is_acquire;             /* answered through acq_fn with the hold; else done_fn */
    lks_acquire_fn acq_fn;
    lks_done_fn done_fn;
    void *arg;
};

struct rl_hold {
    lks_hold pub; /* first: the lks_hold the caller sees */
    rl *rl;
    rl_hold *prev, *next; /* rl->holds, once won */
    char name[RL_NAME_MAX + 1];
    char key[RL_NAME_MAX + 16];
    char token[33];
    struct event *expiry; /* at valid_until_ms: lost */
    int ttl_ms;           /* the last lease asked for (sets the release's deadline) */
    int refs;             /* calls under way on it */
    bool lost, released;
};

struct rl {
    struct event_base *base;
    int n, quorum;
    struct rl_node node[RL_MAX_NODES];
    rl_op *ops;
    rl_hold *holds;
    uint64_t rnd; /* xorshift64* for the backoff jitter */
};

static void op_step(evutil_socket_t fd, short what, void *arg);

static uint32_t rl_rand(rl *r, uint32_t n)
{
    r->rnd ^= r->rnd >> 12;
    r->rnd ^= r->rnd << 25;
    r->rnd ^= r->rnd >> 27;
    return (uint32_t)((r->rnd * 2685821657736338717ULL) >> 33) % n;
}

static void random_bytes(void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t k = getrandom((char *)buf + got, len - got, 0);
        if (k < 0) {
            perror("redlock: getrandom");
            abort();
        }
        got += (size_t)k;
    }
}

static void new_token(char out[33])
{
    unsigned char raw[16];
    random_bytes(raw, sizeof raw);
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

static int drift_ms(int ttl_ms)
{
    return ttl_ms / 100 + 2;
}

static int call_timeout_ms(int ttl_ms)
{
    int t = ttl_ms / 4;
    return t < 50 ? 50 : t > 1000 ? 1000 : t;
}

static void arm_ms(struct event *ev, long long ms)
{
    if (ms < 0)
        ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}

/* ---- connections ---------------------------------------------------------------- */

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct rl_node *nd = ac->data;
    if (status != REDIS_OK && nd != NULL && nd->ac == ac)
        nd->ac = NULL; /* hiredis frees it */
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    struct rl_node *nd = ac->data;
    if (nd != NULL && nd->ac == ac)
        nd->ac = NULL;
}

/* The node's connection, made now when there is none; NULL when it cannot be. */
static redisAsyncContext *node_conn(struct rl_node *nd)
{
    if (nd->ac != NULL)
        return nd->ac;
    redisAsyncContext *ac = redisAsyncConnect(nd->host, nd->port);
    if (ac == NULL)
        return NULL;
    if (ac->err || redisLibeventAttach(ac, nd->rl->base) != REDIS_OK) {
        redisAsyncFree(ac);
        return NULL;
    }
    ac->data = nd;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    nd->ac = ac;
    return ac;
}

/* Drop a hung node's connection: every callback still owed on it runs now with a
 * NULL reply. Called from timers only, never from inside a hiredis callback. */
static void node_drop(struct rl_node *nd)
{
    redisAsyncContext *ac = nd->ac;
    nd->ac = NULL;
    if (ac != NULL)
        redisAsyncFree(ac);
}

/* ---- one round of a call -------------------------------------------------------- */

static bool reply_granted(enum rl_state st, const redisReply *r)
{
    if (st == RL_ACQ_SENT)
        return r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    return r->type == REDIS_REPLY_INTEGER && r->integer == 1;
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    rl_call *c = privdata;
    rl_op *op = c->op;
    int i = c->node;
    free(c);
    if (op == NULL)
        return; /* decided without it */
    op->call[i] = NULL;
    const redisReply *r = reply;
    /* An error reply (LOADING after a restart, OOM) is no answer: nothing was set. */
    if (r != NULL && r->type != REDIS_REPLY_ERROR) {
        op->answered++;
        if (reply_granted(op->state, r))
            op->granted++;
    }
    int owed = 0;
    for (int k = 0; k < op->rl->n; k++)
        owed += op->call[k] != NULL;
    op->early = op->state == RL_ACQ_SENT && op->granted >= op->rl->quorum;
    if (owed == 0 || op->early) {
        evtimer_del(op->timer);
        event_active(op->timer, EV_TIMEOUT, 1);
    }
}

static int send_one(rl_op *op, int i)
{
    rl *r = op->rl;
    redisAsyncContext *ac = node_conn(&r->node[i]);
    if (ac == NULL)
        return -1;
    rl_call *c = seg_malloc(sizeof *c);
    c->op = op;
    c->node = i;
    rl_hold *h = op->hold;
    int rc;
    if (op->state == RL_ACQ_SENT)
        rc = redisAsyncCommand(ac, on_reply, c, "SET %s %s NX PX %d", h->key, h->token,
                               op->ttl_ms);
    else if (op->state == RL_RENEW_SENT)
        rc = redisAsyncCommand(ac, on_reply, c, "EVAL %s 1 %s %s %d", RL_RENEW_LUA,
                               h->key, h->token, op->ttl_ms);
    else
        rc = redisAsyncCommand(ac, on_reply, c, "EVAL %s 1 %s %s", RL_RELEASE_LUA, h->key,
                               h->token);
    if (rc != REDIS_OK) {
        free(c);
        return -1;
    }
    op->call[i] = c;
    return 0;
}

/* Send the op's command to every node and arm its deadline. */
static void send_round(rl_op *op)
{
    op->started_ms = base_now_ms();
    op->answered = op->granted = 0;
    op->early = false;
    int sent = 0;
    for (int i = 0; i < op->rl->n; i++)
        sent += send_one(op, i) == 0;
    arm_ms(op->timer, sent == 0 ? 0 : call_timeout_ms(op->ttl_ms));
}

/* The round is decided: replies still owed free themselves; a node past the call's
 * deadline is taken as hung and its connection dropped. */
static void end_round(rl_op *op, bool timed_out)
{
    for (int i = 0; i < op->rl->n; i++) {
        if (op->call[i] == NULL)
            continue;
        op->call[i]->op = NULL;
        op->call[i] = NULL;
        if (timed_out)
            node_drop(&op->rl->node[i]);
    }
}

/* Delete our token on every node, not waiting for the answers. */
static void undo_all(rl *r, const rl_hold *h)
{
    for (int i = 0; i < r->n; i++) {
        redisAsyncContext *ac = node_conn(&r->node[i]);
        if (ac != NULL)
            redisAsyncCommand(ac, NULL, NULL, "EVAL %s 1 %s %s", RL_RELEASE_LUA, h->key,
                              h->token);
    }
}

/* ---- holds and calls ------------------------------------------------------------ */

static void hold_free(rl_hold *h)
{
    if (h->expiry != NULL)
        event_free(h->expiry);
    free(h);
}

static void hold_unlink(rl_hold *h)
{
    rl *r = h->rl;
    if (h->prev != NULL)
        h->prev->next = h->next;
    else if (r->holds == h)
        r->holds = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    h->prev = h->next = NULL;
}

static void hold_set_lost(rl_hold *h)
{
    if (h->lost)
        return;
    h->lost = true;
    evtimer_del(h->expiry);
    if (h->pub.lost != NULL)
        h->pub.lost(h->pub.lost_arg, &h->pub);
}

static void on_expiry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    hold_set_lost(arg);
}

static rl_op *op_new(rl *r, enum rl_state st, rl_hold *h, int ttl_ms)
{
    rl_op *op = seg_calloc(1, sizeof *op);
    op->rl = r;
    op->state = st;
    op->hold = h;
    op->ttl_ms = ttl_ms;
    op->timer = evtimer_new(r->base, op_step, op);
    op->next = r->ops;
    if (r->ops != NULL)
        r->ops->prev = op;
    r->ops = op;
    h->refs++;
    return op;
}

/* Answer the call and free it. Nothing of `r` is touched after the callback. */
static void op_deliver(rl_op *op, int rc)
{
    rl *r = op->rl;
    end_round(op, false);
    if (op->prev != NULL)
        op->prev->next = op->next;
    else
        r->ops = op->next;
    if (op->next != NULL)
        op->next->prev = op->prev;
    event_free(op->timer);
    rl_hold *h = op->hold;
    h->refs--;
    bool is_acquire = op->is_acquire;
    lks_acquire_fn afn = op->acq_fn;
    lks_done_fn dfn = op->done_fn;
    void *arg = op->arg;
    free(op);
    if (is_acquire) {
        if (rc == LKS_OK) {
            h->next = r->holds;
            if (r->holds != NULL)
                r->holds->prev = h;
            r->holds = h;
        }
        if (afn != NULL)
            afn(arg, rc, rc == LKS_OK ? &h->pub : NULL);
        if (rc != LKS_OK)
            hold_free(h);
        return;
    }
    /* A released hold goes once no call is left on it. */
    bool gone = h->released && h->refs == 0;
    if (gone)
        hold_unlink(h);
    if (dfn != NULL)
        dfn(arg, rc);
    if (gone)
        hold_free(h);
}

/* Answer on the next turn of the loop: never from inside the asking call. */
static void op_answer_soon(rl_op *op, int rc)
{
    op->state = RL_ANSWER;
    op->rc = rc;
    arm_ms(op->timer, 0);
}

/* The state machine of a call: one round decided, a backoff over, or an answer due. */
static void op_step(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    rl_op *op = arg;
    rl *r = op->rl;
    rl_hold *h = op->hold;
    (void)what;
    bool timed_out = !op->early; /* a node still owing an answer now is hung */
    long long now = base_now_ms();
    long long valid_until = op->started_ms + op->ttl_ms - drift_ms(op->ttl_ms);
    evtimer_del(op->timer);
    switch (op->state) {
    case RL_ACQ_SENT: {
        end_round(op, timed_out);
        if (op->granted >= r->quorum && valid_until > now) {
            h->pub.valid_until_ms = valid_until;
            arm_ms(h->expiry, valid_until - now);
            op_deliver(op, LKS_OK);
            return;
        }
        undo_all(r, h);
        long long jitter = RL_JITTER_MIN_MS + rl_rand(r, RL_JITTER_SPAN_MS);
        if (now + jitter < op->deadline_ms) {
            op->state = RL_ACQ_BACKOFF;
            arm_ms(op->timer, jitter);
            return;
        }
        op_deliver(op, op->answered >= r->quorum ? LKS_BUSY : LKS_UNAVAIL);
        return;
    }
    case RL_ACQ_BACKOFF:
        op->state = RL_ACQ_SENT;
        send_round(op);
        return;
    case RL_RENEW_SENT:
        end_round(op, timed_out);
        if (h->lost || h->released) {
            op_deliver(op, LKS_LOST);
        } else if (op->granted >= r->quorum && valid_until > now) {
            h->pub.valid_until_ms = valid_until;
            evtimer_del(h->expiry);
            arm_ms(h->expiry, valid_until - now);
            op_deliver(op, LKS_OK);
        } else if (op->answered >= r->quorum) {
            hold_set_lost(h);
            op_deliver(op, LKS_LOST);
        } else {
            op_deliver(op, LKS_UNAVAIL);
        }
        return;
    case RL_RELEASE_SENT:
        end_round(op, timed_out);
        op_deliver(op, op->granted >= r->quorum    ? LKS_OK
                       : op->answered >= r->quorum ? LKS_LOST
                                                   : LKS_UNAVAIL);
        return;
    case RL_ANSWER:
        op_deliver(op, op->rc);
        return;
    }
}

/* ---- lks_ops -------------------------------------------------------------------- */

static int parse_node(struct rl_node *nd, const char *s, size_t len)
{
    const char *colon = memrchr(s, ':', len);
    if (colon == NULL || colon == s || (size_t)(colon - s) >= sizeof nd->host)
        return -1;
    char port[8];
    size_t plen = len - (size_t)(colon - s) - 1;
    if (plen == 0 || plen >= sizeof port)
        return -1;
    memcpy(port, colon + 1, plen);
    port[plen] = '\0';
    char *end;
    long p = strtol(port, &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535)
        return -1;
    memcpy(nd->host, s, (size_t)(colon - s));
    nd->host[colon - s] = '\0';
    nd->port = (int)p;
    return 0;
}

static void *rl_create(struct event_base *base, const char *target, char *err, size_t len)
{
    rl *r = seg_calloc(1, sizeof *r);
    r->base = base;
    const char *s = target != NULL ? target : "";
    for (;;) {
        const char *comma = strchr(s, ',');
        size_t n = comma != NULL ? (size_t)(comma - s) : strlen(s);
        if (r->n == RL_MAX_NODES || parse_node(&r->node[r->n], s, n) != 0) {
            snprintf(err, len, "redlock: bad node list \"%s\" (want 3 or 5 HOST:PORT)",
                     target != NULL ? target : "");
            free(r);
            return NULL;
        }
        r->node[r->n].rl = r;
        r->n++;
        if (comma == NULL)
            break;
        s = comma + 1;
    }
    if (r->n != 3 && r->n != 5) {
        snprintf(err, len, "redlock: %d nodes given, want 3 or 5 independent masters",
                 r->n);
        free(r);
        return NULL;
    }
    r->quorum = r->n / 2 + 1;
    random_bytes(&r->rnd, sizeof r->rnd);
    r->rnd |= 1;
    for (int i = 0; i < r->n; i++)
        node_conn(&r->node[i]);
    return r;
}

static void rl_free(void *svc)
{
    rl *r = svc;
    if (r == NULL)
        return;
    for (int i = 0; i < r->n; i++) {
        if (r->node[i].ac != NULL)
            r->node[i].ac->data = NULL;
        node_drop(&r->node[i]);
    }
    while (r->ops != NULL)
        op_deliver(r->ops, LKS_UNAVAIL);
    while (r->holds != NULL) {
        rl_hold *h = r->holds;
        hold_unlink(h);
        hold_free(h);
    }
    free(r);
}

static void rl_acquire(void *svc, const char *name, int ttl_ms, int wait_ms,
                       lks_acquire_fn fn, void *arg)
{
    rl *r = svc;
    rl_hold *h = seg_calloc(1, sizeof *h);
    h->rl = r;
    h->expiry = evtimer_new(r->base, on_expiry, h);
    bool ok = name != NULL && strlen(name) <= RL_NAME_MAX && ttl_ms > 0;
    if (ok) {
        snprintf(h->name, sizeof h->name, "%s", name);
        snprintf(h->key, sizeof h->key, "redlock:%s", name);
    }
    new_token(h->token);
    h->pub.name = h->name;
    h->pub.fence = 0;
    rl_op *op = op_new(r, RL_ACQ_SENT, h, ttl_ms);
    op->is_acquire = true;
    op->acq_fn = fn;
    op->arg = arg;
    op->deadline_ms = base_now_ms() + (wait_ms > 0 ? wait_ms : 0);
    h->ttl_ms = ttl_ms;
    if (!ok)
        op_answer_soon(op, LKS_UNAVAIL);
    else
        send_round(op);
}

static void rl_renew(void *svc, lks_hold *hold, int ttl_ms, lks_done_fn fn, void *arg)
{
    rl_hold *h = (rl_hold *)hold;
    rl_op *op = op_new(svc, RL_RENEW_SENT, h, ttl_ms);
    if (ttl_ms > 0)
        h->ttl_ms = ttl_ms;
    op->done_fn = fn;
    op->arg = arg;
    if (h->lost || h->released || ttl_ms <= 0)
        op_answer_soon(op, LKS_LOST);
    else
        send_round(op);
}

static void rl_release(void *svc, lks_hold *hold, lks_done_fn fn, void *arg)
{
    rl_hold *h = (rl_hold *)hold;
    h->released = true;
    evtimer_del(h->expiry);
    rl_op *op = op_new(svc, RL_RELEASE_SENT, h, h->ttl_ms);
    op->done_fn = fn;
    op->arg = arg;
    send_round(op);
}

const struct lks_ops lks_redlock_ops = {
    .name = "redlock",
    .caps = 0,
    .create = rl_create,
    .free = rl_free,
    .acquire = rl_acquire,
    .renew = rl_renew,
    .release = rl_release,
};
