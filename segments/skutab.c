/* skutab.c -- the in-process table of SKUs (see skutab.h). */
#include "segments/skutab.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/skumode.h"
#include "segments/internal.h"
#include "segments/skuset.h"

/* Segments per block of per-segment state, made when one of them is first used. */
#define CHUNK 64
#define CHUNKS ((SEG_MAX_SEGMENTS + CHUNK - 1) / CHUNK)

/* What the process knows of CHUNK segments of a SKU. */
struct segs {
    _Atomic unsigned char loop_claims[CHUNK]; /* lock-free (skutab_loop_claims) */
    /* turns of the loops (skutab_loop_took, _want, _yields): the loop that claimed
     * it last (+1, 0 none); the last want of another loop, (ms << 8) | loop */
    _Atomic unsigned char took[CHUNK];
    _Atomic long long wanted[CHUNK];
    unsigned char empty_seen[CHUNK]; /* under the entry's mu: a loop found it empty in
                                        empty_gen */
};

struct sku_local {
    /* Its name and place in the table (skuset.h: buckets and idle list, under the
     * table's write lock; found under its read lock). First: the set's entry. */
    struct skuset_link link;
    pthread_mutex_t mu;
    _Atomic long long outcomes[SKU_OUTCOMES];
    _Atomic long long loop_gen; /* the generation an event loop read last */
    _Atomic long long holds;    /* lock holds of its segments ended (skutab_holds) */
    /* Segments the event loops found empty in generation empty_gen (under mu), and
     * their count published for lock-free readers: pub_gen, then pub_count. */
    long long empty_gen;
    int empty_n;
    _Atomic long long pub_gen;
    _Atomic int pub_count;
    /* Blocks of segments, each made once (published with a CAS) and freed with the
     * entry, so a lock-free reader never meets a block freed or moved. */
    struct segs *_Atomic segs[CHUNKS];
    /* The last verdict a loop confirmed (skutab_loop_confirm): its generation + 1 (0:
     * none), then its total; written under mu, read lock-free as pub_gen. */
    _Atomic long long verdict_gen1, verdict_total;
    /* The table's: holders (taken under its read lock, given back under its write
     * lock), and whether the entry left the table (the SKU is gone; the last holder
     * frees it). */
    _Atomic int refs;
    _Atomic bool dropped;
};

/* Entries released by their last holder are idle, least recently first. One taken
 * again (under the read lock) stays listed until it is met here or released again:
 * idle entries nobody holds are kept for their counters, up to SKUSET_IDLE_MAX. */
struct skutab {
    pthread_rwlock_t lock; /* guards the set, not the entries */
    struct skuset set;
};

skutab *skutab_create(void)
{
    skutab *t = seg_calloc(1, sizeof *t);
    pthread_rwlock_init(&t->lock, NULL);
    return t;
}

static void entry_free(sku_local *e)
{
    for (int k = 0; k < CHUNKS; k++)
        free(atomic_load_explicit(&e->segs[k], memory_order_acquire));
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static void free_one(struct skuset_link *l, void *arg)
{
    (void)arg;
    entry_free((sku_local *)l);
}

void skutab_free(skutab *t)
{
    if (t == NULL)
        return;
    skuset_foreach(&t->set, free_one, NULL);
    pthread_rwlock_destroy(&t->lock);
    free(t);
}

/* The block holding segment i, made when `make` and there is none (else NULL). */
static struct segs *segs_of(sku_local *e, int i, bool make)
{
    struct segs *_Atomic *slot = &e->segs[i / CHUNK];
    struct segs *s = atomic_load_explicit(slot, memory_order_acquire);
    if (s == NULL && make) {
        struct segs *fresh = seg_calloc(1, sizeof *fresh);
        if (atomic_compare_exchange_strong_explicit(slot, &s, fresh, memory_order_acq_rel,
                                                    memory_order_acquire))
            s = fresh;
        else
            free(fresh); /* another thread's came first: s is that one */
    }
    return s;
}

static sku_local *find(skutab *t, const char *sku)
{
    return (sku_local *)skuset_find(&t->set, sku);
}

/* Past SKUSET_IDLE_MAX idle entries, free the least recently released (write lock);
 * one held again meanwhile just leaves the list. */
static void evict(skutab *t)
{
    for (struct skuset_link *l; (l = skuset_over(&t->set)) != NULL;) {
        skuset_busy(&t->set, l);
        if (atomic_load_explicit(&((sku_local *)l)->refs, memory_order_relaxed) == 0) {
            skuset_remove(&t->set, l);
            entry_free((sku_local *)l);
        }
    }
}

sku_local *skutab_entry(inv *v, const char *sku)
{
    skutab *t = v->tab;
    pthread_rwlock_rdlock(&t->lock);
    sku_local *e = find(t, sku);
    if (e != NULL)
        atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
    pthread_rwlock_unlock(&t->lock);
    if (e != NULL)
        return e;

    pthread_rwlock_wrlock(&t->lock);
    if ((e = find(t, sku)) == NULL) {
        e = seg_calloc(1, sizeof *e);
        pthread_mutex_init(&e->mu, NULL);
        skuset_add(&t->set, &e->link, sku);
    }
    atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
    pthread_rwlock_unlock(&t->lock);
    return e;
}

void skutab_release(skutab *t, sku_local *e)
{
    if (e == NULL)
        return;
    pthread_rwlock_wrlock(&t->lock);
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_relaxed) == 1) {
        if (atomic_load_explicit(&e->dropped, memory_order_relaxed)) {
            entry_free(e); /* out of the table already: nobody can find it */
        } else {
            skuset_idle(&t->set, &e->link);
            evict(t);
        }
    }
    pthread_rwlock_unlock(&t->lock);
}

void skutab_drop(inv *v, const char *sku)
{
    skutab *t = v->tab;
    pthread_rwlock_wrlock(&t->lock);
    sku_local *e = find(t, sku);
    if (e != NULL) {
        skuset_remove(&t->set, &e->link);
        atomic_store_explicit(&e->dropped, true, memory_order_relaxed);
        if (atomic_load_explicit(&e->refs, memory_order_relaxed) == 0)
            entry_free(e);
    }
    pthread_rwlock_unlock(&t->lock);
    /* After the flag: a loop that sees the change sees the entry dropped. */
    atomic_fetch_add_explicit(&v->changes, 1, memory_order_release);
}

bool skutab_dropped(const sku_local *e)
{
    return atomic_load_explicit(&e->dropped, memory_order_acquire);
}

int skutab_view_of(const struct store_meta *m, struct sku_view *out)
{
    struct sku_view v = {0};
    if (sku_mode_parse(m->mode, &v.cfg.mode) != 0 ||
        sku_lock_parse(m->lock, &v.cfg.lock) != 0 || m->segments < 1 ||
        m->segments > SEG_MAX_SEGMENTS)
        return -1;
    v.cfg.segments = m->segments;
    v.cfg.hold_ms = m->hold_ms;
    v.cfg.batch = m->batch > 1 ? m->batch : 1;
    v.cfg.stock = m->initial;
    v.cfg.rebalance = m->rebalance;
    v.cfg.replicated = m->replicated;
    v.cfg.unfenced = m->unfenced;
    v.epoch = m->epoch;
    v.gen = m->gen;
    v.salt = m->salt;
    *out = v;
    return 0;
}

inv_status skutab_read(inv_conn *c, const char *sku, struct sku_view *out)
{
    struct store_meta m = {0};
    char lock[16];
    int found = ADMIN_CALL(c->adm, meta_read, sku, &m, lock);
    if (found < 0)
        return INV_UNAVAILABLE;
    if (found == 0 || skutab_view_of(&m, out) != 0)
        return INV_UNKNOWN_SKU;
    memcpy(out->lock, lock, sizeof out->lock);
    return INV_OK;
}

void skutab_invalidate(inv *v, const char *sku)
{
    (void)sku; /* every table drops all its settings: changes are rare next to orders */
    atomic_fetch_add_explicit(&v->changes, 1, memory_order_release);
}

void skutab_count(sku_local *e, enum stat_id outcome)
{
    if ((int)outcome < SKU_OUTCOMES)
        atomic_fetch_add_explicit(&e->outcomes[outcome], 1, memory_order_relaxed);
}

struct foreach_arg {
    void (*fn)(const char *sku, const long long *outcomes, void *arg);
    void *arg;
};

static void report_one(struct skuset_link *l, void *arg)
{
    struct foreach_arg *f = arg;
    sku_local *e = (sku_local *)l;
    long long out[SKU_OUTCOMES];
    for (int i = 0; i < SKU_OUTCOMES; i++)
        out[i] = atomic_load_explicit(&e->outcomes[i], memory_order_relaxed);
    f->fn(l->name, out, f->arg);
}

void skutab_foreach(skutab *t,
                    void (*fn)(const char *sku, const long long *outcomes, void *arg),
                    void *arg)
{
    struct foreach_arg f = {fn, arg};
    pthread_rwlock_rdlock(&t->lock);
    skuset_foreach(&t->set, report_one, &f);
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
        for (int k = 0; k < CHUNKS; k++) {
            struct segs *s = atomic_load_explicit(&e->segs[k], memory_order_acquire);
            if (s != NULL)
                memset(s->empty_seen, 0, sizeof s->empty_seen);
        }
        e->empty_n = 0;
        e->empty_gen = gen;
    }
    struct segs *s = segs_of(e, i, true);
    if (!s->empty_seen[i % CHUNK]) {
        s->empty_seen[i % CHUNK] = 1;
        e->empty_n++;
    }
    atomic_store_explicit(&e->pub_count, e->empty_n, memory_order_relaxed);
    atomic_store_explicit(&e->pub_gen, gen, memory_order_release);
    pthread_mutex_unlock(&e->mu);
}

int skutab_loop_claims(sku_local *e, int i, int delta)
{
    struct segs *s = segs_of(e, i, delta != 0);
    if (s == NULL)
        return 0; /* nobody ever claimed one of its block */
    if (delta == 0)
        return atomic_load_explicit(&s->loop_claims[i % CHUNK], memory_order_relaxed);
    return atomic_fetch_add_explicit(&s->loop_claims[i % CHUNK], (unsigned char)delta,
                                     memory_order_relaxed) +
           delta;
}

void skutab_loop_took(sku_local *e, int i, int loop)
{
    struct segs *s = segs_of(e, i, true);
    atomic_store_explicit(&s->took[i % CHUNK], (unsigned char)(loop + 1),
                          memory_order_relaxed);
}

void skutab_loop_want(sku_local *e, int i, int loop, int64_t now_ms)
{
    struct segs *s = segs_of(e, i, true);
    atomic_store_explicit(&s->wanted[i % CHUNK], (long long)(now_ms << 8) | (loop & 0xff),
                          memory_order_relaxed);
}

bool skutab_loop_yields(sku_local *e, int i, int loop, int64_t now_ms, int fresh_ms)
{
    struct segs *s = segs_of(e, i, false);
    if (s == NULL ||
        atomic_load_explicit(&s->took[i % CHUNK], memory_order_relaxed) != loop + 1)
        return false;
    long long w = atomic_load_explicit(&s->wanted[i % CHUNK], memory_order_relaxed);
    return w != 0 && (w & 0xff) != (loop & 0xff) && now_ms - (w >> 8) <= fresh_ms;
}

long long skutab_holds(sku_local *e, int delta)
{
    return atomic_fetch_add_explicit(&e->holds, delta, memory_order_relaxed) + delta;
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
