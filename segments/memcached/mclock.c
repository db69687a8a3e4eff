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
#include <unistd.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "segments/lockcall/lockcall.h"

#define MC_THREADS 2
#define MC_QUEUE_MAX 1024
#define MC_TIMEOUT_MS 500
#define MC_JITTER_MIN_MS 5
#define MC_JITTER_SPAN_MS 25

typedef struct mc mc;
typedef struct mc_op mc_op;

enum mc_kind { MC_ADD, MC_RENEW, MC_RELEASE };

enum mc_state {
    MC_ACQ_QUEUED,     /* `add` handed to the pool */
    MC_ACQ_BACKOFF,    /* held elsewhere: the jitter timer runs before the next add */
    MC_RENEW_QUEUED,   /* gets + cas with the new expiry handed to the pool */
    MC_RELEASE_QUEUED, /* gets + cas to an expired empty value handed to the pool */
    MC_ANSWER,         /* known at the call (rc): answered on the next turn */
};

/* A call (lockcall.h: its hold, callbacks and timer: backoff and "answer now") and
 * the job it hands to the pool. */
struct mc_op {
    lkc_call c;   /* first; c.rc is the job's answer */
    mc_op *qnext; /* the pool's queue or done list */
    enum mc_state state;
    long long sent_ms; /* when the last job was handed to the pool */
    /* The job, read and written by the worker while the pool has it. */
    enum mc_kind kind;
    char key[LKC_NAME_MAX + 8];
    char token[33];
    time_t expiry_s;
};

struct mc {
    lkc_set set; /* first: the loop, the calls, the holds */
    char host[64];
    int port;
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

/* memcached's expiry for a lease of ttl_ms: see the header ("Whole seconds"). */
static time_t expiry_s(int ttl_ms)
{
    return (time_t)((ttl_ms + 999) / 1000 + 1);
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
        op->c.rc = run_job(m, op);
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
    mc *m = (mc *)op->c.set;
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
        lkc_answer_soon(&op->c, LKS_UNAVAIL);
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
        event_active(op->c.timer, EV_TIMEOUT, 1);
    }
}

static mc_op *op_new(mc *m, enum mc_state st, lkc_hold *h, int ttl_ms)
{
    mc_op *op = (mc_op *)lkc_call_new(&m->set, sizeof *op, h, ttl_ms, op_step);
    op->state = st;
    snprintf(op->key, sizeof op->key, "lks:%s", h->name);
    memcpy(op->token, h->token, sizeof op->token);
    return op;
}

/* An acquire that got no answer may have been stored after all: delete our token
 * (compare-and-delete) with no one waiting; the hold goes with this call. */
static void forget_acquire(mc_op *op)
{
    op->c.is_acquire = false;
    op->c.acq_fn = NULL;
    op->c.done_fn = NULL;
    op->c.hold->released = true;
    op->state = MC_RELEASE_QUEUED;
    submit(op, MC_RELEASE, 0);
}

/* The state machine of a call: the pool's answer in, a backoff over, an answer due. */
static void op_step(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    mc_op *op = arg;
    mc *m = (mc *)op->c.set;
    lkc_hold *h = op->c.hold;
    int rc = op->c.rc;
    long long now = base_now_ms();
    long long valid_until = op->sent_ms + op->c.ttl_ms - lkc_drift_ms(op->c.ttl_ms);
    switch (op->state) {
    case MC_ACQ_QUEUED:
        if (rc == LKS_OK && valid_until > now) {
            lkc_hold_valid(h, valid_until, now);
            lkc_deliver(&op->c, LKS_OK);
        } else if (rc == LKS_BUSY &&
                   now + MC_JITTER_MIN_MS + MC_JITTER_SPAN_MS / 2 < op->c.deadline_ms) {
            op->state = MC_ACQ_BACKOFF;
            lkc_arm_ms(op->c.timer,
                       MC_JITTER_MIN_MS + lkc_rand(&m->set, MC_JITTER_SPAN_MS));
        } else if (rc == LKS_BUSY) {
            lkc_deliver(&op->c, LKS_BUSY);
        } else {
            /* No answer, or won too late to use: give it back. */
            lks_acquire_fn fn = op->c.acq_fn;
            void *fn_arg = op->c.arg;
            forget_acquire(op);
            if (fn != NULL)
                fn(fn_arg, LKS_UNAVAIL, NULL);
        }
        return;
    case MC_ACQ_BACKOFF:
        op->state = MC_ACQ_QUEUED;
        submit(op, MC_ADD, expiry_s(op->c.ttl_ms));
        return;
    case MC_RENEW_QUEUED:
        if (h->lost || h->released) {
            lkc_deliver(&op->c, LKS_LOST);
        } else if (rc == LKS_OK && valid_until > now) {
            lkc_hold_valid(h, valid_until, now);
            lkc_deliver(&op->c, LKS_OK);
        } else if (rc == LKS_OK || rc == LKS_LOST) {
            lkc_hold_lost(h);
            lkc_deliver(&op->c, LKS_LOST);
        } else {
            lkc_deliver(&op->c, LKS_UNAVAIL);
        }
        return;
    case MC_RELEASE_QUEUED:
    case MC_ANSWER:
        lkc_deliver(&op->c, rc);
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
    lkc_set_init(&m->set, base);
    memcpy(m->host, target, (size_t)(colon - target));
    m->port = (int)port;
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
    /* Every op (queued, done, backing off) is on the set's calls. */
    lkc_set_drain(&m->set, lkc_deliver);
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
    if (name == NULL || name[0] == '\0' || strlen(name) > LKC_NAME_MAX)
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
    bool ok = name_ok(name) && ttl_ms > 0;
    lkc_hold *h = lkc_hold_new(&m->set, sizeof *h, ok ? name : "");
    mc_op *op = op_new(m, MC_ACQ_QUEUED, h, ttl_ms);
    op->c.is_acquire = true;
    op->c.acq_fn = fn;
    op->c.arg = arg;
    op->c.deadline_ms = base_now_ms() + (wait_ms > 0 ? wait_ms : 0);
    if (!ok) {
        op->state = MC_ANSWER;
        lkc_answer_soon(&op->c, LKS_UNAVAIL);
        return;
    }
    submit(op, MC_ADD, expiry_s(ttl_ms));
}

static void mc_renew(void *svc, lks_hold *hold, int ttl_ms, lks_done_fn fn, void *arg)
{
    lkc_hold *h = (lkc_hold *)hold;
    mc_op *op = op_new(svc, MC_RENEW_QUEUED, h, ttl_ms);
    op->c.done_fn = fn;
    op->c.arg = arg;
    if (h->lost || h->released || ttl_ms <= 0) {
        op->state = MC_ANSWER;
        lkc_answer_soon(&op->c, LKS_LOST);
        return;
    }
    submit(op, MC_RENEW, expiry_s(ttl_ms));
}

static void mc_release(void *svc, lks_hold *hold, lks_done_fn fn, void *arg)
{
    lkc_hold *h = (lkc_hold *)hold;
    lkc_hold_released(h);
    mc_op *op = op_new(svc, MC_RELEASE_QUEUED, h, 1000);
    op->c.done_fn = fn;
    op->c.arg = arg;
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
