/* loop.c -- one event loop thread of the HTTP front (see loop.h). */
#include "api/loop.h"

#include "base/clock.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* A call posted from another thread (api_loop_post). */
struct post {
    void (*fn)(void *arg);
    void *arg;
    struct post *next;
};

struct api_loop {
    int index;
    struct event_base *base;
    struct MHD_Daemon *daemon;
    engine *engine;
    struct event *io;    /* the daemon's epoll fd is readable */
    struct event *timer; /* the daemon's own timeout (idle connections) */
    struct event *kick;  /* run the daemon again: a connection was resumed here */
    struct event *wake;  /* another thread asked: stop */
    int wake_fd;
    _Atomic int stop_wait_ms; /* > 0: stop once no order is in flight, within this */
    long long stop_deadline;
    pthread_t thread;
    pthread_mutex_t mu; /* guards the posted calls */
    struct post *first, *last;
    struct event *posted; /* the post eventfd is readable */
    int post_fd;
};

/* Let the daemon work, then wait for it again (its epoll fd, or its timeout). */
static void run_daemon(struct api_loop *l)
{
    MHD_run(l->daemon);
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(l->daemon, &ms) == MHD_YES) {
        struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
        evtimer_add(l->timer, &tv);
    } else {
        evtimer_del(l->timer);
    }
}

static void on_daemon(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    run_daemon(arg);
}

/* Stopping: end the loop once no order is in flight (or the wait is over). */
static void check_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct api_loop *l = arg;
    if (engine_in_flight(l->engine) == 0 || base_now_ms() >= l->stop_deadline) {
        event_base_loopexit(l->base, NULL);
        return;
    }
    struct timeval tv = {0, 10000};
    event_add(l->wake, &tv); /* look again in 10 ms */
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct api_loop *l = arg;
    if (what & EV_READ) {
        uint64_t n;
        if (read(fd, &n, sizeof n) < 0 && errno != EAGAIN)
            perror("inventoryd: loop wake");
        l->stop_deadline = base_now_ms() + atomic_load(&l->stop_wait_ms);
    }
    check_stop(fd, what, arg);
}

/* Run the calls other threads posted, oldest first. */
static void on_posted(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct api_loop *l = arg;
    uint64_t n;
    if (read(fd, &n, sizeof n) < 0 && errno != EAGAIN)
        perror("inventoryd: loop post");
    pthread_mutex_lock(&l->mu);
    struct post *p = l->first;
    l->first = l->last = NULL;
    pthread_mutex_unlock(&l->mu);
    while (p != NULL) {
        struct post *next = p->next;
        p->fn(p->arg);
        free(p);
        p = next;
    }
    run_daemon(l); /* a connection may have been resumed (api_loop_wake) */
}

void api_loop_wake(struct api_loop *l)
{
    uint64_t one = 1;
    if (write(l->post_fd, &one, sizeof one) < 0)
        perror("inventoryd: loop wake");
}

void api_loop_post(struct api_loop *l, void (*fn)(void *arg), void *arg)
{
    struct post *p = malloc(sizeof *p);
    if (p == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    *p = (struct post){fn, arg, NULL};
    pthread_mutex_lock(&l->mu);
    if (l->last != NULL)
        l->last->next = p;
    else
        l->first = p;
    l->last = p;
    pthread_mutex_unlock(&l->mu);
    api_loop_wake(l);
}

static void *run(void *arg)
{
    struct api_loop *l = arg;
    run_daemon(l);
    event_base_dispatch(l->base);
    return NULL;
}

static void free_events(struct api_loop *l)
{
    struct event *evs[] = {l->io, l->timer, l->kick, l->wake, l->posted};
    for (size_t i = 0; i < sizeof evs / sizeof *evs; i++)
        if (evs[i] != NULL)
            event_free(evs[i]);
    if (l->wake_fd >= 0)
        close(l->wake_fd);
    if (l->post_fd >= 0)
        close(l->post_fd);
    for (struct post *p = l->first, *next; p != NULL; p = next) {
        next = p->next;
        free(p);
    }
    pthread_mutex_destroy(&l->mu);
}

struct api_loop *api_loop_start(inv *v, int index, int count, api_loop_daemon_fn mk,
                                void *arg, char *err, size_t errlen)
{
    struct api_loop *l = calloc(1, sizeof *l);
    if (l == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->index = index;
    pthread_mutex_init(&l->mu, NULL);
    l->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    l->post_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    l->base = event_base_new();
    if (l->base == NULL || l->wake_fd < 0 || l->post_fd < 0) {
        snprintf(err, errlen, "loop %d: cannot make an event loop", index);
        goto fail;
    }
    l->engine = engine_create(v, l->base, index, count);
    l->daemon = mk(l, arg);
    if (l->daemon == NULL) {
        snprintf(err, errlen, "loop %d: cannot start the HTTP daemon", index);
        goto fail;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(l->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    l->io = event_new(l->base, info->epoll_fd, EV_READ | EV_PERSIST, on_daemon, l);
    l->timer = evtimer_new(l->base, on_daemon, l);
    l->kick = event_new(l->base, -1, 0, on_daemon, l);
    l->wake = event_new(l->base, l->wake_fd, EV_READ, on_wake, l);
    l->posted = event_new(l->base, l->post_fd, EV_READ | EV_PERSIST, on_posted, l);
    if (l->io == NULL || l->timer == NULL || l->kick == NULL || l->wake == NULL ||
        l->posted == NULL || event_add(l->io, NULL) != 0 ||
        event_add(l->wake, NULL) != 0 || event_add(l->posted, NULL) != 0) {
        snprintf(err, errlen, "loop %d: cannot watch the daemon", index);
        goto fail;
    }
    int rc = pthread_create(&l->thread, NULL, run, l);
    if (rc != 0) {
        snprintf(err, errlen, "loop %d: %s", index, strerror(rc));
        goto fail;
    }
    return l;
fail:
    free_events(l);
    if (l->daemon != NULL)
        MHD_stop_daemon(l->daemon);
    engine_free(l->engine);
    if (l->base != NULL)
        event_base_free(l->base);
    free(l);
    return NULL;
}

int api_loop_index(const struct api_loop *l)
{
    return l->index;
}

engine *api_loop_engine(struct api_loop *l)
{
    return l->engine;
}

void api_loop_kick(struct api_loop *l)
{
    event_active(l->kick, 0, 0);
}

/* A quiesce posted to the loop, and the caller waiting for it. */
struct quiesce {
    struct api_loop *l;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
};

static void quiesce_here(void *arg)
{
    struct quiesce *q = arg;
    MHD_quiesce_daemon(q->l->daemon); /* the shared socket is the caller's to close */
    pthread_mutex_lock(&q->mu);
    q->done = true;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

void api_loop_quiesce(struct api_loop *l)
{
    /* On the loop's thread: the daemon is not thread-safe against its own MHD_run. */
    struct quiesce q = {.l = l};
    pthread_mutex_init(&q.mu, NULL);
    pthread_cond_init(&q.cv, NULL);
    api_loop_post(l, quiesce_here, &q);
    pthread_mutex_lock(&q.mu);
    while (!q.done)
        pthread_cond_wait(&q.cv, &q.mu);
    pthread_mutex_unlock(&q.mu);
    pthread_cond_destroy(&q.cv);
    pthread_mutex_destroy(&q.mu);
}

void api_loop_stop(struct api_loop *l, int wait_ms)
{
    if (l == NULL)
        return;
    atomic_store(&l->stop_wait_ms, wait_ms > 0 ? wait_ms : 1);
    uint64_t one = 1;
    if (write(l->wake_fd, &one, sizeof one) < 0)
        perror("inventoryd: loop stop");
    pthread_join(l->thread, NULL);
    /* An order still in flight (Redis hung past every deadline) keeps the engine:
     * its timers and callbacks point into it, and the process is ending. */
    if (engine_in_flight(l->engine) == 0)
        engine_free(l->engine);
    else
        fprintf(stderr, "inventoryd: loop %d stopped with %d orders unanswered\n",
                l->index, engine_in_flight(l->engine));
    MHD_stop_daemon(l->daemon);
    free_events(l);
    event_base_free(l->base);
    free(l);
}
