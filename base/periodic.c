/* periodic.c -- a thread running one function round after round (see periodic.h). */
#include "base/periodic.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/xalloc.h"

struct periodic {
    periodic_fn fn;
    void *arg;
    int first_ms;
    pthread_t thread;
    pthread_mutex_t mu; /* guards what follows */
    pthread_cond_t cv;  /* on CLOCK_MONOTONIC */
    bool stop;
    bool woken; /* a wake not yet seen by the thread */
};

static void *run(void *arg)
{
    periodic *p = arg;
    int sleep_ms = p->first_ms;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (sleep_ms > 0 && !p->woken && !p->stop) {
            struct timespec until = base_deadline(sleep_ms);
            /* Spurious wakeups go back to sleep: only a wake, a stop or the time
             * ends it. */
            while (!p->woken && !p->stop &&
                   pthread_cond_timedwait(&p->cv, &p->mu, &until) != ETIMEDOUT)
                ;
        }
        if (p->stop)
            break;
        p->woken = false;
        pthread_mutex_unlock(&p->mu);
        sleep_ms = p->fn(p, p->arg);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

periodic *periodic_start(periodic_fn fn, void *arg, int first_ms, char *err,
                         size_t errlen)
{
    periodic *p = seg_calloc(1, sizeof *p);
    p->fn = fn;
    p->arg = arg;
    p->first_ms = first_ms;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&p->thread, NULL, run, p);
    if (rc != 0) {
        snprintf(err, errlen, "%s", strerror(rc));
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv);
        free(p);
        return NULL;
    }
    return p;
}

void periodic_wake(periodic *p)
{
    pthread_mutex_lock(&p->mu);
    p->woken = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

bool periodic_stopping(periodic *p)
{
    pthread_mutex_lock(&p->mu);
    bool stop = p->stop;
    pthread_mutex_unlock(&p->mu);
    return stop;
}

void periodic_stop(periodic *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}
