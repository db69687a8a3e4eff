/* mclock.c -- memcached `add` locks on a libevent loop, the blocking calls on a pool. */
#include "segments/memcached/mclock.h"

#include <errno.h>
#include <fcntl.h>
#include <libmemcached/memcached.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/xalloc.h"

#define MC_THREADS 2
#define MC_QUEUE_MAX 1024
#define MC_NAME_MAX 200
#define MC_TIMEOUT_MS 500
#define MC_JITTER_MIN_MS 5
#define MC_JITTER_SPAN_MS 25

typedef struct mc mc;
typedef struct mc_op mc_op;
typedef struct mc_hold mc_hold;

enum mc_kind { MC_ADD, MC_RENEW, MC_RELEASE };

enum mc_state {
    MC_ACQ_QUEUED,     /* `add` handed to the pool */
    MC_ACQ_BACKOFF,    /* held elsewhere: the jitter timer runs before the next add */
    MC_RENEW_QUEUED,   /* gets + cas with the new expiry handed to the pool */
    MC_RELEASE_QUEUED, /* gets + cas to an expired empty value handed to the pool */
    MC_ANSWER,         /* known at the call (rc): answered on the next turn */
};

struct mc_op {
    mc *mc;
    mc_op *prev, *next; /* mc->ops: every call not yet answered */
    mc_op *qnext;       /* the pool's queue or done list */
    enum mc_state state;
    struct event *timer; /* backoff and "answer now" */
    mc_hold *hold;
    int ttl_ms;
    long long deadline_ms; /* acquire: stop trying at */
    long long sent_ms;     /* when the last job was handed to the pool */
    /* The job, read and written by the worker while the pool has it. */
    enum mc_kind kind;
    char key[MC_NAME_MAX + 8];
    char token[33];
    time_t expiry_s;
    int rc;
    bool is_acquire; /* answered through acq_fn with the hold; else done_fn */
    lks_acquire_fn acq_fn;
    lks_done_fn done_fn;
    void *arg;
};

struct mc_hold {
    lks_hold pub; /* first: the lks_hold the caller sees */
    mc *mc;
    mc_hold *prev, *next; /* mc->holds, once won */
    char name[MC_NAME_MAX + 1];
    char token[33];
    struct event *expiry; /* at valid_until_ms: lost */
    int refs;             /* calls under way on it */
    bool lost, released;
};

struct mc {
    struct event_base *base;
    char host[64];
    int port;
    mc_op *ops;
    mc_hold *holds;
    uint64_t rnd;
    /* The pool: everything below the mutex is shared with the workers. */
    pthread_t thread[MC_THREADS];
    int nthreads;
    int pipe_r, pipe_w;
    struct event *wake; /* EV_READ on pipe_r */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mc_op *q_head, *q_tail;
    int q_len;
    mc_op *done;
    bool stop;
};

static void op_step(evutil_socket_t fd, short what, void *arg);

static void random_bytes(void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t k = getrandom((char *)buf + got, len - got, 0);
        if (k < 0) {
            perror("memcached lock: getrandom");
            abort();
        }
        got += (size_t)k;
    }
}

static uint32_t mc_rand(mc *m, uint32_t n)
{
    m->rnd ^= m->rnd >> 12;
    m->rnd ^= m->rnd << 25;
    m->rnd ^= m->rnd >> 27;
    return (uint32_t)((m->rnd * 2685821657736338717ULL) >> 33) % n;
}

static int drift_ms(int ttl_ms)
{
    return ttl_ms / 100 + 2;
}

/* memcached's expiry for a lease of ttl_ms: see the header ("Whole seconds"). */
static time_t expiry_s(int ttl_ms)
{
    return (time_t)((ttl_ms + 999) / 1000 + 1);
}

static void arm_ms(struct event *ev, long long ms)
{
    if (ms < 0)
        ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}

/* ---- the workers (no loop state touched here) ----------------------------------- */

/* `gets key`: 1 with its value (cut to len) and cas, 0 when there is none, -1 on
 * failure. */
static int mc_gets(memcached_st *m, const char *key, char *val, size_t len, uint64_t *cas)
{
    const char *keys[1] = {key};
    size_t lens[1] = {strlen(key)};
    memcached_return_t rc = memcached_mget(m, keys, lens, 1);
    if (rc != MEMCACHED_SUCCESS)
        return -1;
    int found = 0;
    memcached_result_st *res;
    while ((res = memcached_fetch_result(m, NULL, &rc)) != NULL) {
        size_t n = memcached_result_length(res);
        if (n >= len)
            n = len - 1;
        memcpy(val, memcached_result_value(res), n);
        val[n] = '\0';
        *cas = memcached_result_cas(res);
        found = 1;
        memcached_result_free(res);
    }
    if (rc != MEMCACHED_END && rc != MEMCACHED_SUCCESS && rc != MEMCACHED_NOTFOUND)
        return -1;
    return found;
}

/* Replace our item (cas) with `value` and `exp` (negative: expire now). */
static int cas_ours(memcached_st *m, const mc_op *op, const char *value, time_t exp)
{
    char cur[64];
    uint64_t cas = 0;
    int got = mc_gets(m, op->key, cur, sizeof cur, &cas);
    if (got < 0)
        return LKS_UNAVAIL;
    if (got == 0 || strcmp(cur, op->token) != 0)
        return LKS_LOST;
    memcached_return_t rc =
        memcached_cas(m, op->key, strlen(op->key), value, strlen(value), exp, 0, cas);
    if (rc == MEMCACHED_SUCCESS)
        return LKS_OK;
    if (rc == MEMCACHED_DATA_EXISTS || rc == MEMCACHED_NOTFOUND)
        return LKS_LOST;
    return LKS_UNAVAIL;
}

static int run_job(memcached_st *m, const mc_op *op)
{
    switch (op->kind) {
    case MC_ADD: {
        memcached_return_t rc = memcached_add(m, op->key, strlen(op->key), op->token,
                                              strlen(op->token), op->expiry_s, 0);
        if (rc == MEMCACHED_SUCCESS)
            return LKS_OK;
        if (rc == MEMCACHED_NOTSTORED || rc == MEMCACHED_DATA_EXISTS)
            return LKS_BUSY;
        return LKS_UNAVAIL;
    }
    case MC_RENEW:
        return cas_ours(m, op, op->token, op->expiry_s);
    case MC_RELEASE:
        return cas_ours(m, op, "", (time_t)-1);
    }
    return LKS_UNAVAIL;
}

static memcached_st *client_new(const mc *p)
{
    memcached_st *m = memcached_create(NULL);
    if (m == NULL) {
        fprintf(stderr, "memcached lock: out of memory\n");
        abort();
    }
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_SUPPORT_CAS, 1);
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, MC_TIMEOUT_MS);
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, MC_TIMEOUT_MS);
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_RCV_TIMEOUT, MC_TIMEOUT_MS * 1000);
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_SND_TIMEOUT, MC_TIMEOUT_MS * 1000);
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, 1);
    memcached_behavior_set(m, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
    memcached_server_add(m, p->host, (in_port_t)p->port);
    return m;
}

static void *worker(void *arg)
{
    mc *p = arg;
    memcached_st *m = client_new(p);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->q_head == NULL)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop)
            break;
        mc_op *op = p->q_head;
        p->q_head = op->qnext;
        if (p->q_head == NULL)
            p->q_tail = NULL;
        p->q_len--;
        pthread_mutex_unlock(&p->mu);
        op->rc = run_job(m, op);
        pthread_mutex_lock(&p->mu);
        op->qnext = p->done;
        p->done = op;
        /* A full pipe already holds a wake-up. */
        ssize_t w = write(p->pipe_w, "x", 1);
        (void)w;
    }
    pthread_mutex_unlock(&p->mu);
    memcached_free(m);
    return NULL;
}

/* ---- the loop ------------------------------------------------------------------- */

/* Hand the op's job to the pool; a full queue answers LKS_UNAVAIL. */
static void submit(mc_op *op, enum mc_kind kind, time_t exp)
{
    mc *m = op->mc;
    op->kind = kind;
    op->expiry_s = exp;
    op->sent_ms = base_now_ms();
    op->qnext = NULL;
    pthread_mutex_lock(&m->mu);
    bool full = m->q_len >= MC_QUEUE_MAX;
    if (!full) {
        if (m->q_tail != NULL)
            m->q_tail->qnext = op;
        else
            m->q_head = op;
        m->q_tail = op;
        m->q_len++;
        pthread_cond_signal(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    if (full) {
        op->state = MC_ANSWER;
        op->rc = LKS_UNAVAIL;
        arm_ms(op->timer, 0);
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    mc *m = arg;
    char buf[256];
    while (read(fd, buf, sizeof buf) > 0)
        ;
    pthread_mutex_lock(&m->mu);
    mc_op *list = m->done;
    m->done = NULL;
    pthread_mutex_unlock(&m->mu);
    /* Answered oldest first; each is activated so that a callback freeing the
     * handle does not leave the rest of the list dangling. */
    while (list != NULL) {
        mc_op *op = list;
        list = op->qnext;
        op->qnext = NULL;
        event_active(op->timer, EV_TIMEOUT, 1);
    }
}

static void hold_free(mc_hold *h)
{
    if (h->expiry != NULL)
        event_free(h->expiry);
    free(h);
}

static void hold_unlink(mc_hold *h)
{
    mc *m = h->mc;
    if (h->prev != NULL)
        h->prev->next = h->next;
    else if (m->holds == h)
        m->holds = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    h->prev = h->next = NULL;
}

static void hold_set_lost(mc_hold *h)
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

static mc_op *op_new(mc *m, enum mc_state st, mc_hold *h, int ttl_ms)
{
    mc_op *op = seg_calloc(1, sizeof *op);
    op->mc = m;
    op->state = st;
    op->hold = h;
    op->ttl_ms = ttl_ms;
    op->timer = evtimer_new(m->base, op_step, op);
    snprintf(op->key, sizeof op->key, "lks:%s", h->name);
    memcpy(op->token, h->token, sizeof op->token);
    op->next = m->ops;
    if (m->ops != NULL)
        m->ops->prev = op;
    m->ops = op;
    h->refs++;
    return op;
}

static void op_unlink_free(mc_op *op)
{
    mc *m = op->mc;
    if (op->prev != NULL)
        op->prev->next = op->next;
    else
        m->ops = op->next;
    if (op->next != NULL)
        op->next->prev = op->prev;
    event_free(op->timer);
    op->hold->refs--;
    free(op);
}

/* Answer the call and free it. Nothing of the handle is touched after the callback. */
static void op_deliver(mc_op *op, int rc)
{
    mc *m = op->mc;
    mc_hold *h = op->hold;
    bool is_acquire = op->is_acquire;
    lks_acquire_fn afn = op->acq_fn;
    lks_done_fn dfn = op->done_fn;
    void *arg = op->arg;
    op_unlink_free(op);
    if (is_acquire) {
        if (rc == LKS_OK) {
            h->next = m->holds;
            if (m->holds != NULL)
                m->holds->prev = h;
            m->holds = h;
        }
        if (afn != NULL)
            afn(arg, rc, rc == LKS_OK ? &h->pub : NULL);
        if (rc != LKS_OK && h->refs == 0)
            hold_free(h);
        return;
    }
    bool gone = h->released && h->refs == 0;
    if (gone)
        hold_unlink(h);
    if (dfn != NULL)
        dfn(arg, rc);
    if (gone)
        hold_free(h);
}

/* An acquire that got no answer may have been stored after all: delete our token
 * (compare-and-delete) with no one waiting; the hold goes with this call. */
static void forget_acquire(mc_op *op)
{
    op->is_acquire = false;
    op->acq_fn = NULL;
    op->done_fn = NULL;
    op->hold->released = true;
    op->state = MC_RELEASE_QUEUED;
    submit(op, MC_RELEASE, 0);
}

/* The state machine of a call: the pool's answer in, a backoff over, an answer due. */
static void op_step(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    mc_op *op = arg;
    mc *m = op->mc;
    mc_hold *h = op->hold;
    long long now = base_now_ms();
    long long valid_until = op->sent_ms + op->ttl_ms - drift_ms(op->ttl_ms);
    switch (op->state) {
    case MC_ACQ_QUEUED:
        if (op->rc == LKS_OK && valid_until > now) {
            h->pub.valid_until_ms = valid_until;
            arm_ms(h->expiry, valid_until - now);
            op_deliver(op, LKS_OK);
        } else if (op->rc == LKS_BUSY &&
                   now + MC_JITTER_MIN_MS + MC_JITTER_SPAN_MS / 2 < op->deadline_ms) {
            op->state = MC_ACQ_BACKOFF;
            arm_ms(op->timer, MC_JITTER_MIN_MS + mc_rand(m, MC_JITTER_SPAN_MS));
        } else if (op->rc == LKS_BUSY) {
            op_deliver(op, LKS_BUSY);
        } else {
            /* No answer, or won too late to use: give it back. */
            lks_acquire_fn fn = op->acq_fn;
            void *fn_arg = op->arg;
            forget_acquire(op);
            if (fn != NULL)
                fn(fn_arg, LKS_UNAVAIL, NULL);
        }
        return;
    case MC_ACQ_BACKOFF:
        op->state = MC_ACQ_QUEUED;
        submit(op, MC_ADD, expiry_s(op->ttl_ms));
        return;
    case MC_RENEW_QUEUED:
        if (h->lost || h->released) {
            op_deliver(op, LKS_LOST);
        } else if (op->rc == LKS_OK && valid_until > now) {
            h->pub.valid_until_ms = valid_until;
            evtimer_del(h->expiry);
            arm_ms(h->expiry, valid_until - now);
            op_deliver(op, LKS_OK);
        } else if (op->rc == LKS_OK || op->rc == LKS_LOST) {
            hold_set_lost(h);
            op_deliver(op, LKS_LOST);
        } else {
            op_deliver(op, LKS_UNAVAIL);
        }
        return;
    case MC_RELEASE_QUEUED:
    case MC_ANSWER:
        op_deliver(op, op->rc);
        return;
    }
}

/* ---- lks_ops -------------------------------------------------------------------- */

static void *mc_create(struct event_base *base, const char *target, char *err, size_t len)
{
    const char *colon = target != NULL ? strrchr(target, ':') : NULL;
    char *end = NULL;
    long port = colon != NULL ? strtol(colon + 1, &end, 10) : 0;
    if (colon == NULL || colon == target || (size_t)(colon - target) >= 64 ||
        *end != '\0' || port <= 0 || port > 65535 || strchr(target, ',') != NULL) {
        snprintf(err, len, "memcached: bad address \"%s\" (want HOST:PORT)",
                 target != NULL ? target : "");
        return NULL;
    }
    mc *m = seg_calloc(1, sizeof *m);
    m->base = base;
    memcpy(m->host, target, (size_t)(colon - target));
    m->port = (int)port;
    random_bytes(&m->rnd, sizeof m->rnd);
    m->rnd |= 1;
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
        snprintf(err, len, "memcached: pipe: %s", strerror(errno));
        free(m);
        return NULL;
    }
    m->pipe_r = fds[0];
    m->pipe_w = fds[1];
    m->wake = event_new(base, m->pipe_r, EV_READ | EV_PERSIST, on_wake, m);
    event_add(m->wake, NULL);
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    for (int i = 0; i < MC_THREADS; i++) {
        int rc = pthread_create(&m->thread[i], NULL, worker, m);
        if (rc != 0) {
            fprintf(stderr, "memcached lock: pthread_create: %s\n", strerror(rc));
            abort();
        }
        m->nthreads++;
    }
    return m;
}

static void mc_free(void *svc)
{
    mc *m = svc;
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    for (int i = 0; i < m->nthreads; i++)
        pthread_join(m->thread[i], NULL);
    /* Every op (queued, done, backing off) is on m->ops. */
    while (m->ops != NULL) {
        mc_op *op = m->ops;
        op_deliver(op, LKS_UNAVAIL);
    }
    while (m->holds != NULL) {
        mc_hold *h = m->holds;
        hold_unlink(h);
        hold_free(h);
    }
    event_free(m->wake);
    close(m->pipe_r);
    close(m->pipe_w);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
}

/* Lock names become memcached keys: no blank, no control character. */
static bool name_ok(const char *name)
{
    if (name == NULL || name[0] == '\0' || strlen(name) > MC_NAME_MAX)
        return false;
    for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++) {
        if (*p <= ' ' || *p == 0x7f)
            return false;
    }
    return true;
}

static void mc_acquire(void *svc, const char *name, int ttl_ms, int wait_ms,
                       lks_acquire_fn fn, void *arg)
{
    mc *m = svc;
    mc_hold *h = seg_calloc(1, sizeof *h);
    h->mc = m;
    h->expiry = evtimer_new(m->base, on_expiry, h);
    bool ok = name_ok(name) && ttl_ms > 0;
    if (ok)
        snprintf(h->name, sizeof h->name, "%s", name);
    unsigned char raw[16];
    random_bytes(raw, sizeof raw);
    for (int i = 0; i < 16; i++)
        snprintf(h->token + 2 * i, 3, "%02x", raw[i]);
    h->pub.name = h->name;
    mc_op *op = op_new(m, MC_ACQ_QUEUED, h, ttl_ms);
    op->is_acquire = true;
    op->acq_fn = fn;
    op->arg = arg;
    op->deadline_ms = base_now_ms() + (wait_ms > 0 ? wait_ms : 0);
    if (!ok) {
        op->state = MC_ANSWER;
        op->rc = LKS_UNAVAIL;
        arm_ms(op->timer, 0);
        return;
    }
    submit(op, MC_ADD, expiry_s(ttl_ms));
}

static void mc_renew(void *svc, lks_hold *hold, int ttl_ms, lks_done_fn fn, void *arg)
{
    mc_hold *h = (mc_hold *)hold;
    mc_op *op = op_new(svc, MC_RENEW_QUEUED, h, ttl_ms);
    op->done_fn = fn;
    op->arg = arg;
    if (h->lost || h->released || ttl_ms <= 0) {
        op->state = MC_ANSWER;
        op->rc = LKS_LOST;
        arm_ms(op->timer, 0);
        return;
    }
    submit(op, MC_RENEW, expiry_s(ttl_ms));
}

static void mc_release(void *svc, lks_hold *hold, lks_done_fn fn, void *arg)
{
    mc_hold *h = (mc_hold *)hold;
    h->released = true;
    evtimer_del(h->expiry);
    mc_op *op = op_new(svc, MC_RELEASE_QUEUED, h, 1000);
    op->done_fn = fn;
    op->arg = arg;
    submit(op, MC_RELEASE, 0);
}

const struct lks_ops lks_memcached_ops = {
    .name = "memcached",
    .caps = 0,
    .create = mc_create,
    .free = mc_free,
    .acquire = mc_acquire,
    .renew = mc_renew,
    .release = mc_release,
};
