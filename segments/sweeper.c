/* sweeper.c -- the thread that settles dead multi-segment intents (see sweeper.h). */
#include "segments/sweeper.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "segments/clock.h"
#include "segments/rand.h"

/* How often it looks, and how old an intent must be to be looked at (younger ones
 * are in flight: their claims would answer BUSY anyway). */
#define SWEEP_EVERY_MS 1000
#define SWEEP_AGE_MS 2000

struct sweeper {
    inv *v;
    rd_conn *rd; /* used by the sweeper thread only */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
};

static void *run(void *arg)
{
    sweeper *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        struct timespec ts = inv_deadline(SWEEP_EVERY_MS);
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        if (s->stop)
            break;
        pthread_mutex_unlock(&s->mu);
        char attempt[33];
        inv_random_hex(attempt);
        int settled = 0;
        rd_intents_settle(s->rd, attempt, base_wall_ms() - SWEEP_AGE_MS, &settled);
        if (settled > 0)
            stat_add(s->v, STAT_INTENTS_UNDONE, settled);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

sweeper *sweeper_create(inv *v, const struct rd_target *to, char *err, size_t errlen)
{
    sweeper *s = seg_calloc(1, sizeof *s);
    s->v = v;
    s->rd = rd_conn_create(to, &v->stats[STAT_REDIS_ERRORS]);
    pthread_mutex_init(&s->mu, NULL);
    inv_cond_init(&s->cv);
    int rc = pthread_create(&s->thread, NULL, run, s);
    if (rc != 0) {
        snprintf(err, errlen, "sweeper thread: %s", strerror(rc));
        rd_conn_free(s->rd);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return NULL;
    }
    return s;
}

void sweeper_free(sweeper *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    rd_conn_free(s->rd);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
