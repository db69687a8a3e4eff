/* watchdog.c -- lease renewal thread (see watchdog.h). */
#include "segments/watchdog.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/periodic.h"
#include "segments/clock.h"
#include "base/xalloc.h"
#include "segments/redis/calls.h"

#define BATCH 64

struct watchdog {
    inv *v;
    rd_conn *rd;        /* its own Redis connection, used by the watchdog thread only */
    periodic *thread;   /* runs renew_round */
    pthread_mutex_t mu; /* guards the list and next_id */
    uint64_t next_id;
    struct lease head; /* sentinel of the circular list */
};

struct due {
    uint64_t id;
    char sku[SEG_NAME_MAX + 1];
    int seg;
    char token[33];
};

static int tick_ms(const inv *v)
{
    int t = v->opt.lock_ttl_ms / 10;
    return t < 5 ? 5 : t > 250 ? 250 : t;
}

static struct lease *find(watchdog *w, uint64_t id)
{
    for (struct lease *l = w->head.next; l != &w->head; l = l->next)
        if (l->id == id)
            return l;
    return NULL;
}

/* Renew one lease: 1 renewed, 0 no longer ours, -1 Redis did not answer. */
static int renew(watchdog *w, const struct due *d)
{
    return rd_renew(w->rd, d->sku, d->seg, d->token, w->v->opt.lock_ttl_ms);
}

/* One round on the watchdog thread: renew the leases that are due. */
static int renew_round(periodic *p, void *arg)
{
    (void)p;
    watchdog *w = arg;
    const int every = w->v->opt.lock_ttl_ms / 3;
    struct due due[BATCH];

    pthread_mutex_lock(&w->mu);
    int64_t now = inv_now_ms();
    int n = 0;
    for (struct lease *l = w->head.next; l != &w->head && n < BATCH; l = l->next) {
        if (l->lost || now - l->renewed_ms < every)
            continue;
        due[n].id = l->id;
        memcpy(due[n].sku, l->sku, sizeof due[n].sku);
        due[n].seg = l->seg;
        memcpy(due[n].token, l->token, sizeof due[n].token);
        n++;
    }
    /* Renew without the mutex, so workers never wait on Redis through it. */
    pthread_mutex_unlock(&w->mu);
    int result[BATCH];
    for (int i = 0; i < n; i++)
        result[i] = renew(w, &due[i]);
    pthread_mutex_lock(&w->mu);

    for (int i = 0; i < n; i++) {
        struct lease *l = find(w, due[i].id);
        if (result[i] == 1) {
            stat_add(w->v, STAT_LEASE_RENEWALS, 1);
            if (l != NULL)
                l->renewed_ms = now;
        } else if (result[i] == 0) {
            stat_add(w->v, STAT_LEASE_LOST, 1);
            if (l != NULL)
                l->lost = true;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return tick_ms(w->v);
}

watchdog *watchdog_create(inv *v, const struct rd_target *to, char *err, size_t errlen)
{
    watchdog *w = seg_calloc(1, sizeof *w);
    w->v = v;
    w->rd = rd_conn_create(to, &v->stats[STAT_REDIS_ERRORS]);
    w->head.next = w->head.prev = &w->head;
    pthread_mutex_init(&w->mu, NULL);
    char why[128];
    w->thread = periodic_start(renew_round, w, tick_ms(v), why, sizeof why);
    if (w->thread == NULL) {
        snprintf(err, errlen, "watchdog thread: %s", why);
        rd_conn_free(w->rd);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return NULL;
    }
    return w;
}

void watchdog_free(watchdog *w)
{
    if (w == NULL)
        return;
    periodic_stop(w->thread);
    rd_conn_free(w->rd);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

void watchdog_add(watchdog *w, struct lease *l)
{
    pthread_mutex_lock(&w->mu);
    l->id = ++w->next_id;
    l->renewed_ms = inv_now_ms();
    l->lost = false;
    l->next = &w->head;
    l->prev = w->head.prev;
    w->head.prev->next = l;
    w->head.prev = l;
    pthread_mutex_unlock(&w->mu);
}

bool watchdog_remove(watchdog *w, struct lease *l)
{
    pthread_mutex_lock(&w->mu);
    l->prev->next = l->next;
    l->next->prev = l->prev;
    l->next = l->prev = NULL;
    bool lost = l->lost;
    pthread_mutex_unlock(&w->mu);
    return lost;
}
