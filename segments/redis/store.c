/* store.c -- the blocking Redis connection over the asynchronous router on a control
 * loop of its own (see store.h). */
#include "segments/redis/store.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/xalloc.h"
#include "segments/redis/async.h"
#include "segments/redis/proto.h"
#include "segments/redis/smap.h"
#include "segments/redis/target.h"

/* One call handed to the loop: a command to send, or a slot whose master to name. */
struct job {
    rd_conn *c;
    struct rd_cmd cmd; /* JOB_SEND: until the loop hands it to the router */
    enum {
        JOB_SEND, /* send `cmd`, its reply copied into `reply` */
        JOB_SLOT  /* the master of `slot` by the handle's map, into node and name */
    } what;
    int slot, node;
    char name[RD_HOST_MAX + 8];
    /* Under the connection's mutex from here on: */
    redisReply *reply; /* a copy of the reply (the caller's), NULL: none */
    char err[160];     /* why there is none */
    bool done;         /* answered: the caller takes it */
    bool abandoned;    /* the caller stopped waiting: the loop frees it */
    struct job *next;  /* in the queue */
};

struct rd_conn {
    struct rd_target to;        /* the node, or a cluster's seed */
    struct rd_target_text text; /* to's strings */
    _Atomic long long *errors;  /* counts every failure; may be NULL */
    rd_smap *map;               /* the process's map (to.map), or own_map */
    rd_smap *own_map;           /* made for a cluster target without one */
    char errstr[160];           /* the last failure (the caller's thread) */
    /* The control loop, started on the first call: */
    bool started;
    pthread_t thread;
    struct event_base *base;
    struct event *wake; /* reads the pipe: jobs are queued, or stop */
    int pipe[2];
    rda_conn *rda;      /* the router: the loop's thread only */
    pthread_mutex_t mu; /* guards what follows and the jobs' answers */
    pthread_cond_t cv;  /* a job answered */
    struct job *queue;  /* for the loop, newest first */
    bool stop;          /* the loop frees the router and ends */
};

static void set_error(rd_conn *c, const char *what, const char *detail)
{
    snprintf(c->errstr, sizeof c->errstr, "%s: %.100s", what, detail);
    rd_log(true, what, detail);
    if (c->errors != NULL)
        atomic_fetch_add_explicit(c->errors, 1, memory_order_relaxed);
}

rd_conn *rd_conn_create(const struct rd_target *to, _Atomic long long *errors)
{
    rd_conn *c = seg_calloc(1, sizeof *c);
    rd_target_copy(&c->to, &c->text, to);
    c->errors = errors;
    c->map = to->map; /* standalone: for the mode, which may become a cluster */
    if (to->cluster && c->map == NULL)
        c->map = c->own_map = rd_smap_create(&c->to);
    c->to.map = c->map;
    c->pipe[0] = c->pipe[1] = -1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    return c;
}

const char *rd_conn_error(const rd_conn *c)
{
    return c->errstr;
}

bool store_cluster(rd_conn *c)
{
    return c->to.cluster || rd_smap_cluster(c->map);
}

bool rd_conn_cluster(rd_conn *c)
{
    return store_cluster(c);
}

/* ---- the loop's side ------------------------------------------------------------- */

/* A copy of `r` that freeReplyObject frees (hiredis 0.14.1 frees with free()). */
static redisReply *reply_copy(const redisReply *r)
{
    redisReply *o = seg_calloc(1, sizeof *o);
    o->type = r->type;
    o->integer = r->integer;
    switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        o->len = r->len;
        o->str = seg_malloc(r->len + 1);
        memcpy(o->str, r->str, r->len);
        o->str[r->len] = '\0';
        break;
    case REDIS_REPLY_ARRAY:
        o->elements = r->elements;
        o->element = seg_calloc(r->elements + 1, sizeof *o->element);
        for (size_t i = 0; i < r->elements; i++)
            o->element[i] = reply_copy(r->element[i]);
        break;
    default:
        break;
    }
    return o;
}

static void job_free(struct job *j)
{
    if (j->reply != NULL)
        freeReplyObject(j->reply);
    cmd_free(&j->cmd);
    free(j);
}

/* Answer `j` (under the mutex): the caller wakes, or, gone, the job is freed. */
static void answer(struct job *j)
{
    rd_conn *c = j->c;
    pthread_mutex_lock(&c->mu);
    if (j->abandoned) {
        pthread_mutex_unlock(&c->mu);
        job_free(j);
        return;
    }
    j->done = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void on_reply(void *arg, const redisReply *r)
{
    struct job *j = arg;
    redisReply *copy = r != NULL ? reply_copy(r) : NULL;
    pthread_mutex_lock(&j->c->mu);
    j->reply = copy;
    if (copy == NULL)
        snprintf(j->err, sizeof j->err, "%s",
                 rda_error(j->c->rda)[0] != '\0' ? rda_error(j->c->rda) : "no reply");
    pthread_mutex_unlock(&j->c->mu);
    answer(j);
}

static void run_job(rd_conn *c, struct job *j)
{
    /* Follow the process's mode between calls: a blocking call is one command. */
    if (rda_mode_behind(c->rda))
        rda_mode_follow(c->rda);
    if (j->what == JOB_SLOT) {
        j->node = rda_slot_master(c->rda, j->slot, j->name, sizeof j->name);
        answer(j);
        return;
    }
    struct rd_cmd cmd = j->cmd;
    memset(&j->cmd, 0, sizeof j->cmd); /* the router's now */
    rda_raw_blocking(c->rda, &cmd, on_reply, j);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    rd_conn *c = arg;
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0)
        ;
    pthread_mutex_lock(&c->mu);
    struct job *q = c->queue, *fifo = NULL;
    c->queue = NULL;
    bool stop = c->stop;
    pthread_mutex_unlock(&c->mu);
    while (q != NULL) { /* newest first: reversed */
        struct job *j = q;
        q = j->next;
        j->next = fifo;
        fifo = j;
    }
    while (fifo != NULL) {
        struct job *j = fifo;
        fifo = j->next;
        run_job(c, j);
    }
    if (stop) { /* every call still owed an answer is answered NULL first */
        rda_free(c->rda);
        c->rda = NULL;
        /* Now, not after the events still pending: a link's answer deferred to the
         * next turn (link.c fail_later) would reach the freed handle. */
        event_base_loopbreak(c->base);
    }
}

static void *loop_main(void *arg)
{
    rd_conn *c = arg;
    event_base_dispatch(c->base);
    return NULL;
}

/* Start the control loop: its base, the router on it, the wake pipe, the thread. */
static void start(rd_conn *c)
{
    if (pipe(c->pipe) != 0) {
        fprintf(stderr, "inventoryd: pipe: %s\n", strerror(errno));
        abort();
    }
    for (int k = 0; k < 2; k++) {
        fcntl(c->pipe[k], F_SETFL, fcntl(c->pipe[k], F_GETFL) | O_NONBLOCK);
        fcntl(c->pipe[k], F_SETFD, FD_CLOEXEC);
    }
    c->base = event_base_new();
    c->wake = c->base != NULL
                  ? event_new(c->base, c->pipe[0], EV_READ | EV_PERSIST, on_wake, c)
                  : NULL;
    if (c->wake == NULL || event_add(c->wake, NULL) != 0) {
        fputs("inventoryd: cannot create the Redis control loop\n", stderr);
        abort();
    }
    struct rda_counters counts = {.errors = c->errors};
    c->rda = rda_create(c->base, &c->to, &counts);
    int rc = pthread_create(&c->thread, NULL, loop_main, c);
    if (rc != 0) {
        fprintf(stderr, "inventoryd: Redis control loop: %s\n", strerror(rc));
        abort();
    }
    c->started = true;
}

void rd_conn_free(rd_conn *c)
{
    if (c == NULL)
        return;
    if (c->started) {
        pthread_mutex_lock(&c->mu);
        c->stop = true;
        pthread_mutex_unlock(&c->mu);
        while (write(c->pipe[1], "s", 1) < 0 && errno == EINTR)
            ;
        pthread_join(c->thread, NULL);
        event_free(c->wake);
        event_base_free(c->base);
        close(c->pipe[0]);
        close(c->pipe[1]);
    }
    rd_smap_free(c->own_map);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* ---- the caller's side ----------------------------------------------------------- */

/* Hand `j` to the loop and wait for its answer: 0, or -1 (the error set) when none
 * came within the backstop (store.h), the job then the loop's to free. */
static int run(rd_conn *c, struct job *j)
{
    if (!c->started)
        start(c);
    j->c = c;
    pthread_mutex_lock(&c->mu);
    j->next = c->queue;
    c->queue = j;
    pthread_mutex_unlock(&c->mu);
    /* A full pipe already holds a wake-up for the loop. */
    while (write(c->pipe[1], "j", 1) < 0 && errno == EINTR)
        ;
    long long wait_ms = 2LL * c->to.timeout_ms + 250;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)(wait_ms / 1000);
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    while (!j->done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&c->cv, &c->mu, &until);
    if (!j->done) {
        j->abandoned = true;
        pthread_mutex_unlock(&c->mu);
        char why[64];
        snprintf(why, sizeof why, "no answer within %lld ms", wait_ms);
        set_error(c, "redis", why);
        return -1;
    }
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int store_slot_node(rd_conn *c, int slot, char *name, size_t len)
{
    name[0] = '\0';
    if (!store_cluster(c) || slot < 0 || slot >= RD_SLOTS)
        return -1;
    int node = -1;
    for (int attempt = 0; attempt < 2 && node < 0; attempt++) {
        if (attempt > 0) /* no map has named it yet: wait for one */
            rd_smap_refresh(c->map, c->to.timeout_ms);
        struct job *j = seg_calloc(1, sizeof *j);
        j->what = JOB_SLOT;
        j->slot = slot;
        if (run(c, j) != 0)
            return -1;
        node = j->node;
        snprintf(name, len, "%s", j->name);
        job_free(j);
    }
    if (node < 0) {
        char err[160];
        set_error(c, "cluster map", rd_smap_error(c->map, err, sizeof err));
    }
    return node;
}

redisReply *store_call(rd_conn *c, struct rd_cmd *cmd)
{
    struct job *j = seg_calloc(1, sizeof *j);
    j->what = JOB_SEND;
    j->cmd = *cmd;
    memset(cmd, 0, sizeof *cmd); /* taken over */
    if (run(c, j) != 0)
        return NULL;
    redisReply *r = j->reply;
    j->reply = NULL;
    if (r == NULL)
        snprintf(c->errstr, sizeof c->errstr, "%s", j->err); /* counted by the router */
    job_free(j);
    return r;
}

int store_script(rd_conn *c, struct rd_cmd *cmd, struct rd_reply *out)
{
    memset(out, 0, sizeof *out);
    redisReply *r = store_call(c, cmd);
    int rc = r != NULL ? proto_scripted(r, out) : -1;
    if (r != NULL)
        freeReplyObject(r);
    return rc;
}

int store_step(rd_conn *c, struct rd_cmd *cmd, unsigned keep, redisReply **kept)
{
    redisReply *r = store_call(c, cmd);
    struct rd_reply out;
    int rc = r != NULL ? proto_scripted(r, &out) : -1;
    int code = rc < 0 ? -1 : out.code;
    if (rc == 0)
        rd_reply_clear(&out);
    if (kept != NULL && code >= 0 && (keep & (1u << code)) != 0)
        *kept = r;
    else if (r != NULL)
        freeReplyObject(r);
    return code;
}
