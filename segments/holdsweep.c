/* holdsweep.c -- the expired-reservation sweeper thread (see holdsweep.h). */
#include "segments/holdsweep.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/internal.h"

/* Segments settled per look: more wait for the next look (a tick later). */
#define SWEEP_SEGMENTS 64

struct holdsweep {
    inv *v;
    admin *adm; /* the thread's own */
    pthread_t thread;
    pthread_mutex_t mu; /* guards stop */
    pthread_cond_t cv;
    bool stop;
};

static void *run(void *arg)
{
    holdsweep *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        struct timespec ts = inv_deadline(HOLDSWEEP_EVERY_MS);
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        if (s->stop)
            break;
        pthread_mutex_unlock(&s->mu);
        int settled = 0;
        if (s->adm->ops->holds_sweep != NULL &&
            ADMIN_CALL(s->adm, holds_sweep, SWEEP_SEGMENTS, &settled) == 0 && settled > 0)
            stat_add(s->v, STAT_HOLDS_EXPIRED, settled);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

holdsweep *holdsweep_create(inv *v, admin *adm, char *err, size_t errlen)
{
    holdsweep *s = seg_calloc(1, sizeof *s);
    s->v = v;
    s->adm = adm;
    pthread_mutex_init(&s->mu, NULL);
    inv_cond_init(&s->cv);
    int rc = pthread_create(&s->thread, NULL, run, s);
    if (rc != 0) {
        snprintf(err, errlen, "hold sweeper thread: %s", strerror(rc));
        adm->ops->free(adm);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return NULL;
    }
    return s;
}

void holdsweep_free(holdsweep *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->adm->ops->free(s->adm);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
