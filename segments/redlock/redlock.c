/* redlock.c -- RedLock over N independent redis-servers on a libevent loop (lks_ops). */
#include "segments/redlock/redlock.h"

#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "segments/lockcall/lockcall.h"

#define RL_MAX_NODES 5
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

/* A call (lockcall.h: its hold, callbacks and timer: the deadline, the backoff and
 * "answer now") and the round it is in. */
struct rl_op {
    lkc_call c; /* first */
    enum rl_state state;
    long long started_ms;        /* this round's start */
    int answered, granted;       /* this round: nodes that replied, and said yes */
    bool early;                  /* this round was decided by a majority granting */
    rl_call *call[RL_MAX_NODES]; /* this round's outstanding calls (NULL: answered) */
};

struct rl_hold {
    lkc_hold h; /* first: name, token, lease timer, refs */
    char key[LKC_NAME_MAX + 16];
    int ttl_ms; /* the last lease asked for (sets the release's deadline) */
};

struct rl {
    lkc_set set; /* first: the loop, the calls, the holds */
    int n, quorum;
    struct rl_node node[RL_MAX_NODES];
};

#define OP_RL(op) ((rl *)(op)->c.set)
#define OP_HOLD(op) ((rl_hold *)(op)->c.hold)

static void op_step(evutil_socket_t fd, short what, void *arg);

static int call_timeout_ms(int ttl_ms)
{
    int t = ttl_ms / 4;
    return t < 50 ? 50 : t > 1000 ? 1000 : t;
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
    if (ac->err || redisLibeventAttach(ac, nd->rl->set.base) != REDIS_OK) {
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
    for (int k = 0; k < OP_RL(op)->n; k++)
        owed += op->call[k] != NULL;
    op->early = op->state == RL_ACQ_SENT && op->granted >= OP_RL(op)->quorum;
    if (owed == 0 || op->early) {
        evtimer_del(op->c.timer);
        event_active(op->c.timer, EV_TIMEOUT, 1);
    }
}

static int send_one(rl_op *op, int i)
{
    rl *r = OP_RL(op);
    redisAsyncContext *ac = node_conn(&r->node[i]);
    if (ac == NULL)
        return -1;
    rl_call *c = seg_malloc(sizeof *c);
    c->op = op;
    c->node = i;
    rl_hold *h = OP_HOLD(op);
    int rc;
    if (op->state == RL_ACQ_SENT)
        rc = redisAsyncCommand(ac, on_reply, c, "SET %s %s NX PX %d", h->key, h->h.token,
                               op->c.ttl_ms);
    else if (op->state == RL_RENEW_SENT)
        rc = redisAsyncCommand(ac, on_reply, c, "EVAL %s 1 %s %s %d", RL_RENEW_LUA,
                               h->key, h->h.token, op->c.ttl_ms);
    else
        rc = redisAsyncCommand(ac, on_reply, c, "EVAL %s 1 %s %s", RL_RELEASE_LUA, h->key,
                               h->h.token);
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
    for (int i = 0; i < OP_RL(op)->n; i++)
        sent += send_one(op, i) == 0;
    lkc_arm_ms(op->c.timer, sent == 0 ? 0 : call_timeout_ms(op->c.ttl_ms));
}

/* The round is decided: replies still owed free themselves; a node past the call's
 * deadline is taken as hung and its connection dropped. */
static void end_round(rl_op *op, bool timed_out)
{
    for (int i = 0; i < OP_RL(op)->n; i++) {
        if (op->call[i] == NULL)
            continue;
        op->call[i]->op = NULL;
        op->call[i] = NULL;
        if (timed_out)
            node_drop(&OP_RL(op)->node[i]);
    }
}

/* Delete our token on every node, not waiting for the answers. */
static void undo_all(rl *r, const rl_hold *h)
{
    for (int i = 0; i < r->n; i++) {
        redisAsyncContext *ac = node_conn(&r->node[i]);
        if (ac != NULL)
            redisAsyncCommand(ac, NULL, NULL, "EVAL %s 1 %s %s", RL_RELEASE_LUA, h->key,
                              h->h.token);
    }
}

/* ---- calls -------------------------------------------------------------------- */

static rl_op *op_new(rl *r, enum rl_state st, rl_hold *h, int ttl_ms)
{
    rl_op *op = (rl_op *)lkc_call_new(&r->set, sizeof *op, &h->h, ttl_ms, op_step);
    op->state = st;
    return op;
}

/* Answer the call and free it (lkc_deliver), its replies still owed left to free
 * themselves. */
static void op_deliver(lkc_call *c, int rc)
{
    end_round((rl_op *)c, false);
    lkc_deliver(c, rc);
}

/* Answer on the next turn of the loop: never from inside the asking call. */
static void op_answer_soon(rl_op *op, int rc)
{
    op->state = RL_ANSWER;
    lkc_answer_soon(&op->c, rc);
}

/* The state machine of a call: one round decided, a backoff over, or an answer due. */
static void op_step(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    rl_op *op = arg;
    rl *r = OP_RL(op);
    rl_hold *h = OP_HOLD(op);
    (void)what;
    bool timed_out = !op->early; /* a node still owing an answer now is hung */
    long long now = base_now_ms();
    long long valid_until = op->started_ms + op->c.ttl_ms - lkc_drift_ms(op->c.ttl_ms);
    evtimer_del(op->c.timer);
    switch (op->state) {
    case RL_ACQ_SENT: {
        end_round(op, timed_out);
        if (op->granted >= r->quorum && valid_until > now) {
            lkc_hold_valid(&h->h, valid_until, now);
            op_deliver(&op->c, LKS_OK);
            return;
        }
        undo_all(r, h);
        long long jitter = RL_JITTER_MIN_MS + lkc_rand(&r->set, RL_JITTER_SPAN_MS);
        if (now + jitter < op->c.deadline_ms) {
            op->state = RL_ACQ_BACKOFF;
            lkc_arm_ms(op->c.timer, jitter);
            return;
        }
        op_deliver(&op->c, op->answered >= r->quorum ? LKS_BUSY : LKS_UNAVAIL);
        return;
    }
    case RL_ACQ_BACKOFF:
        op->state = RL_ACQ_SENT;
        send_round(op);
        return;
    case RL_RENEW_SENT:
        end_round(op, timed_out);
        if (h->h.lost || h->h.released) {
            op_deliver(&op->c, LKS_LOST);
        } else if (op->granted >= r->quorum && valid_until > now) {
            lkc_hold_valid(&h->h, valid_until, now);
            op_deliver(&op->c, LKS_OK);
        } else if (op->answered >= r->quorum) {
            lkc_hold_lost(&h->h);
            op_deliver(&op->c, LKS_LOST);
        } else {
            op_deliver(&op->c, LKS_UNAVAIL);
        }
        return;
    case RL_RELEASE_SENT:
        end_round(op, timed_out);
        op_deliver(&op->c, op->granted >= r->quorum    ? LKS_OK
                           : op->answered >= r->quorum ? LKS_LOST
                                                       : LKS_UNAVAIL);
        return;
    case RL_ANSWER:
        op_deliver(&op->c, op->c.rc);
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
    lkc_set_init(&r->set, base);
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
    lkc_set_drain(&r->set, op_deliver);
    free(r);
}

static void rl_acquire(void *svc, const char *name, int ttl_ms, int wait_ms,
                       lks_acquire_fn fn, void *arg)
{
    rl *r = svc;
    bool ok = name != NULL && strlen(name) <= LKC_NAME_MAX && ttl_ms > 0;
    rl_hold *h = (rl_hold *)lkc_hold_new(&r->set, sizeof *h, ok ? name : "");
    if (ok)
        snprintf(h->key, sizeof h->key, "redlock:%s", name);
    rl_op *op = op_new(r, RL_ACQ_SENT, h, ttl_ms);
    op->c.is_acquire = true;
    op->c.acq_fn = fn;
    op->c.arg = arg;
    op->c.deadline_ms = base_now_ms() + (wait_ms > 0 ? wait_ms : 0);
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
    op->c.done_fn = fn;
    op->c.arg = arg;
    if (h->h.lost || h->h.released || ttl_ms <= 0)
        op_answer_soon(op, LKS_LOST);
    else
        send_round(op);
}

static void rl_release(void *svc, lks_hold *hold, lks_done_fn fn, void *arg)
{
    rl_hold *h = (rl_hold *)hold;
    lkc_hold_released(&h->h);
    rl_op *op = op_new(svc, RL_RELEASE_SENT, h, h->ttl_ms);
    op->c.done_fn = fn;
    op->c.arg = arg;
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
