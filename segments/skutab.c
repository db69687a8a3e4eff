/* skutab.c -- the in-process table of SKUs (see skutab.h). */
#include "segments/skutab.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/names.h"
#include "base/xalloc.h"
#include "segments/clock.h"
#include "segments/skumode.h"

#define BUCKETS 256

struct sku_local {
    char name[SEG_NAME_MAX + 1];
    pthread_mutex_t mu;
    pthread_cond_t cv_wanted; /* broadcast when a wanted segment is reserved */
    bool valid;               /* settings known */
    bool refreshing;          /* a worker is re-reading them */
    struct sku_view view;
    int64_t fetched_ms;
    unsigned short wanted[SEG_MAX_SEGMENTS];  /* skutab_claim_wait callers per segment */
    unsigned char reserved[SEG_MAX_SEGMENTS]; /* released to one of them */
    _Atomic long long outcomes[SKU_OUTCOMES];
    _Atomic long long loop_gen; /* the generation an event loop read last */
    /* Segments the event loops found empty in generation empty_gen (under mu), and
     * their count published for lock-free readers: pub_gen, then pub_count. */
    long long empty_gen;
    int empty_n;
    unsigned char empty_seen[SEG_MAX_SEGMENTS];
    _Atomic long long pub_gen;
    _Atomic int pub_count;
    unsigned char claimed[SEG_MAX_SEGMENTS];
    _Atomic unsigned char loop_claims[SEG_MAX_SEGMENTS];
    /* The last verdict a loop confirmed (skutab_loop_confirm): its generation + 1 (0:
     * none), then its total; written under mu, read lock-free as pub_gen. */
    _Atomic long long verdict_gen1, verdict_total;
    sku_local *next;
};

struct skutab {
    pthread_rwlock_t lock; /* guards the buckets, not the entries */
    sku_local *bucket[BUCKETS];
};

skutab *skutab_create(void)
{
    skutab *t = seg_calloc(1, sizeof *t);
    pthread_rwlock_init(&t->lock, NULL);
    return t;
}

void skutab_free(skutab *t)
{
    if (t == NULL)
        return;
    for (int b = 0; b < BUCKETS; b++) {
        for (sku_local *e = t->bucket[b], *next; e != NULL; e = next) {
            next = e->next;
            pthread_mutex_destroy(&e->mu);
            pthread_cond_destroy(&e->cv_wanted);
            free(e);
        }
    }
    pthread_rwlock_destroy(&t->lock);
    free(t);
}

static sku_local *find(skutab *t, const char *sku)
{
    for (sku_local *e = t->bucket[seg_name_hash(sku) % BUCKETS]; e != NULL; e = e->next)
        if (strcmp(e->name, sku) == 0)
            return e;
    return NULL;
}

static sku_local *find_or_add(skutab *t, const char *sku)
{
    pthread_rwlock_rdlock(&t->lock);
    sku_local *e = find(t, sku);
    pthread_rwlock_unlock(&t->lock);
    if (e != NULL)
        return e;

    pthread_rwlock_wrlock(&t->lock);
    if ((e = find(t, sku)) == NULL) {
        e = seg_calloc(1, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", sku);
        pthread_mutex_init(&e->mu, NULL);
        inv_cond_init(&e->cv_wanted);
        unsigned b = seg_name_hash(sku) % BUCKETS;
        e->next = t->bucket[b];
        t->bucket[b] = e;
    }
    pthread_rwlock_unlock(&t->lock);
    return e;
}

sku_local *skutab_entry(inv *v, const char *sku)
{
    return find_or_add(v->tab, sku);
}

inv_status skutab_read(inv_conn *c, const char *sku, struct sku_view *out)
{
    struct rd_meta m;
    int found = rd_meta_read(c->rd, sku, &m);
    if (found < 0)
        return INV_UNAVAILABLE;
    if (found == 0 || sku_mode_parse(m.mode, &out->cfg.mode) != 0 || m.segments < 1 ||
        m.segments > SEG_MAX_SEGMENTS)
        return INV_UNKNOWN_SKU;
    out->cfg.segments = m.segments;
    out->cfg.hold_ms = m.hold_ms;
    out->cfg.stock = m.initial;
    out->cfg.rebalance = m.rebalance;
    out->cfg.replicated = m.replicated;
    out->epoch = m.epoch;
    out->gen = m.gen;
    out->salt = m.salt;
    return INV_OK;
}

inv_status skutab_get(inv_conn *c, const char *sku, sku_local **out,
                      struct sku_view *view)
{
    skutab *t = c->v->tab;
    *out = NULL;
    pthread_rwlock_rdlock(&t->lock);
    sku_local *e = find(t, sku);
    pthread_rwlock_unlock(&t->lock);

    int64_t now = inv_now_ms();
    if (e != NULL) {
        pthread_mutex_lock(&e->mu);
        bool fresh = e->valid && now - e->fetched_ms < c->v->opt.meta_cache_ms;
        if (fresh || (e->valid && e->refreshing)) {
            *view = e->view;
            pthread_mutex_unlock(&e->mu);
            *out = e;
            return INV_OK;
        }
        e->refreshing = true;
        pthread_mutex_unlock(&e->mu);
    }

    struct sku_view fetched;
    inv_status st = skutab_read(c, sku, &fetched);
    if (st == INV_OK && e == NULL)
        e = find_or_add(t, sku);
    if (e == NULL)
        return st;

    pthread_mutex_lock(&e->mu);
    e->refreshing = false;
    if (st == INV_OK) {
        e->view = fetched;
        e->valid = true;
        e->fetched_ms = now;
        *view = fetched;
    } else if (st == INV_UNKNOWN_SKU) {
        e->valid = false;
    }
    pthread_mutex_unlock(&e->mu);
    *out = e;
    return st;
}

void skutab_invalidate(inv *v, const char *sku)
{
    atomic_fetch_add_explicit(&v->changes, 1, memory_order_release);
    pthread_rwlock_rdlock(&v->tab->lock);
    sku_local *e = find(v->tab, sku);
    pthread_rwlock_unlock(&v->tab->lock);
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->mu);
    e->valid = false;
    pthread_mutex_unlock(&e->mu);
}

void skutab_unclaim(sku_local *e, int i)
{
    pthread_mutex_lock(&e->mu);
    if (e->wanted[i] > 0) {
        e->reserved[i] = 1; /* stays claimed: goes to whoever waits for i itself */
        pthread_cond_broadcast(&e->cv_wanted);
    } else {
        e->claimed[i] = 0;
    }
    pthread_mutex_unlock(&e->mu);
}

bool skutab_claim_wait(sku_local *e, int i, int ms)
{
    struct timespec ts = inv_deadline(ms);
    pthread_mutex_lock(&e->mu);
    bool got = !e->claimed[i];
    if (got) {
        e->claimed[i] = 1;
    } else {
        e->wanted[i]++;
        while (!e->reserved[i] && pthread_cond_timedwait(&e->cv_wanted, &e->mu, &ts) == 0)
            ;
        e->wanted[i]--;
        got = e->reserved[i];
        e->reserved[i] = 0;
    }
    pthread_mutex_unlock(&e->mu);
    return got;
}

void skutab_count(sku_local *e, enum stat_id outcome)
{
    if ((int)outcome < SKU_OUTCOMES)
        atomic_fetch_add_explicit(&e->outcomes[outcome], 1, memory_order_relaxed);
}

void skutab_foreach(skutab *t,
                    void (*fn)(const char *sku, const long long *outcomes, void *arg),
                    void *arg)
{
    pthread_rwlock_rdlock(&t->lock);
    for (int b = 0; b < BUCKETS; b++) {
        for (sku_local *e = t->bucket[b]; e != NULL; e = e->next) {
            long long out[SKU_OUTCOMES];
            for (int i = 0; i < SKU_OUTCOMES; i++)
                out[i] = atomic_load_explicit(&e->outcomes[i], memory_order_relaxed);
            fn(e->name, out, arg);
        }
    }
    pthread_rwlock_unlock(&t->lock);
}

void skutab_loop_read(inv *v, sku_local *e, long long gen)
{
    if (atomic_exchange_explicit(&e->loop_gen, gen, memory_order_acq_rel) != gen)
        atomic_fetch_add_explicit(&v->changes, 1, memory_order_release);
}

void skutab_loop_empty(sku_local *e, long long gen, int i)
{
    pthread_mutex_lock(&e->mu);
    if (e->empty_gen != gen) {
        atomic_store_explicit(&e->pub_gen, 0, memory_order_release);
        memset(e->empty_seen, 0, sizeof e->empty_seen);
        e->empty_n = 0;
        e->empty_gen = gen;
    }
    if (!e->empty_seen[i]) {
        e->empty_seen[i] = 1;
        e->empty_n++;
    }
    atomic_store_explicit(&e->pub_count, e->empty_n, memory_order_relaxed);
    atomic_store_explicit(&e->pub_gen, gen, memory_order_release);
    pthread_mutex_unlock(&e->mu);
}

int skutab_loop_claims(sku_local *e, int i, int delta)
{
    if (delta == 0)
        return atomic_load_explicit(&e->loop_claims[i], memory_order_relaxed);
    return atomic_fetch_add_explicit(&e->loop_claims[i], (unsigned char)delta,
                                     memory_order_relaxed) +
           delta;
}

int skutab_loop_empties(sku_local *e, long long gen)
{
    if (atomic_load_explicit(&e->pub_gen, memory_order_acquire) != gen)
        return 0;
    int n = atomic_load_explicit(&e->pub_count, memory_order_relaxed);
    return atomic_load_explicit(&e->pub_gen, memory_order_acquire) == gen ? n : 0;
}

void skutab_loop_confirm(sku_local *e, long long gen, long long total)
{
    pthread_mutex_lock(&e->mu);
    atomic_store_explicit(&e->verdict_gen1, 0, memory_order_release);
    atomic_store_explicit(&e->verdict_total, total, memory_order_relaxed);
    atomic_store_explicit(&e->verdict_gen1, gen + 1, memory_order_release);
    pthread_mutex_unlock(&e->mu);
}

long long skutab_loop_verdict(sku_local *e, long long gen)
{
    if (atomic_load_explicit(&e->verdict_gen1, memory_order_acquire) != gen + 1)
        return -1;
    long long total = atomic_load_explicit(&e->verdict_total, memory_order_relaxed);
    return atomic_load_explicit(&e->verdict_gen1, memory_order_acquire) == gen + 1 ? total
                                                                                   : -1;
}
