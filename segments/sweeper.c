/* sweeper.c -- the thread that settles dead multi-segment intents and runs the
 * automatic rebalance on a cluster (see sweeper.h). */
#include "segments/sweeper.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/periodic.h"
#include "base/xalloc.h"
#include "segments/clock.h"
#include "segments/rand.h"
#include "segments/sku.h"
#include "segments/redis/admin.h"

/* How often it looks, and how old an intent must be to be looked at (younger ones
 * are in flight: their claims would answer BUSY anyway). */
#define SWEEP_EVERY_MS 1000
#define SWEEP_AGE_MS 2000

struct sweeper {
    inv *v;
    inv_conn c;   /* used by the sweeper thread only */
    int64_t next; /* the thread's: the next look at the intents */
    periodic *thread;
    pthread_mutex_t mu; /* guards what follows */
    int nspread;        /* SKUs waiting for their rebalance, oldest first */
    char spread[SWEEP_QUEUE][SEG_NAME_MAX + 1];
};

/* The rebalances asked for, run one by one with the mutex let go. */
static void spread_all(sweeper *s, periodic *p)
{
    pthread_mutex_lock(&s->mu);
    while (s->nspread > 0 && !periodic_stopping(p)) {
        char sku[SEG_NAME_MAX + 1];
        memcpy(sku, s->spread[0], sizeof sku);
        pthread_mutex_unlock(&s->mu);
        /* A spread that moved stock counts itself and drops every loop's cached
         * settings (a new generation); one with nothing to do neither. */
        (void)sku_spread(&s->c, sku);
        pthread_mutex_lock(&s->mu);
        /* Dequeued only now: a loop asking meanwhile finds it still queued. */
        s->nspread--;
        memmove(s->spread[0], s->spread[1], sizeof s->spread[0] * (size_t)s->nspread);
    }
    pthread_mutex_unlock(&s->mu);
}

/* One round (periodic.h): the rebalances asked for, then the intents when their tick
 * is due. Returns the time to that tick; a request wakes it before. */
static int sweep(periodic *p, void *arg)
{
    sweeper *s = arg;
    spread_all(s, p);
    if (periodic_stopping(p) || inv_now_ms() < s->next)
        return (int)(s->next - inv_now_ms());
    s->next = inv_now_ms() + SWEEP_EVERY_MS;
    char attempt[33];
    inv_random_hex(attempt);
    int settled = 0;
    if (rd_conn_cluster(s->c.rd)) /* standalone: no intents (it may become one) */
        rd_intents_settle(s->c.rd, attempt, base_wall_ms() - SWEEP_AGE_MS, &settled);
    if (settled > 0)
        stat_add(s->v, STAT_INTENTS_UNDONE, settled);
    return (int)(s->next - inv_now_ms());
}

sweeper *sweeper_create(inv *v, const struct rd_target *to, char *err, size_t errlen)
{
    sweeper *s = seg_calloc(1, sizeof *s);
    s->v = v;
    s->c.v = v;
    s->c.adm = rd_admin_create(to, &v->stats[STAT_REDIS_ERRORS]);
    s->c.rd = rd_admin_conn(s->c.adm);
    inv_rand_seed(&s->c);
    s->next = inv_now_ms() + SWEEP_EVERY_MS;
    pthread_mutex_init(&s->mu, NULL);
    char why[128];
    s->thread = periodic_start(sweep, s, SWEEP_EVERY_MS, why, sizeof why);
    if (s->thread == NULL) {
        snprintf(err, errlen, "sweeper thread: %s", why);
        s->c.adm->ops->free(s->c.adm);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    return s;
}

void sweeper_free(sweeper *s)
{
    if (s == NULL)
        return;
    periodic_stop(s->thread);
    s->c.adm->ops->free(s->c.adm);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void sweeper_spread(sweeper *s, const char *sku)
{
    pthread_mutex_lock(&s->mu);
    bool queued = false;
    for (int i = 0; i < s->nspread && !queued; i++)
        queued = strcmp(s->spread[i], sku) == 0;
    if (!queued && s->nspread < SWEEP_QUEUE) {
        snprintf(s->spread[s->nspread++], sizeof s->spread[0], "%s", sku);
        periodic_wake(s->thread);
    }
    pthread_mutex_unlock(&s->mu);
}
