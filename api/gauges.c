/* gauges.c -- the per-SKU gauges' refresher thread and its snapshots (see gauges.h). */
#include "api/gauges.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/periodic.h"
#include "segments/sku.h"
#include "segments/stats.h"
#include "base/xalloc.h"

#define FORGET_MAX                                                                       \
    64 /* deletes remembered during one refresh; more may show again                     \
          for one refresh */

struct api_gauges {
    inv *inv;
    int limit, segments_max;
    periodic *thread;      /* runs refresh_round */
    struct refresher *ref; /* the thread's own state */

    pthread_mutex_t mu; /* everything below */
    struct api_gauges_snap *cur;
    long long scraped_ms; /* CLOCK_MONOTONIC ms of the last api_gauges_get; 0: never */
    bool list_stale;      /* api_gauges_changed: read the names at the next refresh */
    char forgotten[FORGET_MAX][SEG_NAME_MAX + 1]; /* deleted during this refresh */
    int nforgotten;
};

/* The refresher's own state. */
struct refresher {
    struct api_gauges *g;
    periodic *p;    /* the thread, for periodic_stopping */
    inv_conn *conn; /* made by the first round, so that start never waits on Redis */
    char **names;   /* every SKU, as last read; sorted */
    size_t nnames;
    long long list_ms; /* when they were read; 0: never */
    struct sku_status *st;
    long long refreshed_ms; /* CLOCK_MONOTONIC ms of the last refresh; 0: never */
};

static void snap_free(struct api_gauges_snap *s)
{
    for (int i = 0; s != NULL && i < s->n; i++)
        free(s->sku[i].segment_stock);
    if (s != NULL)
        free(s->sku);
    free(s);
}

/* Drop one reference (g->mu held). */
static void snap_unref(struct api_gauges_snap *s)
{
    if (--s->refs == 0)
        snap_free(s);
}

static int compare_entries(const void *a, const void *b)
{
    return strcmp(((const struct api_gauge_sku *)a)->sku,
                  ((const struct api_gauge_sku *)b)->sku);
}

const struct api_gauge_sku *api_gauges_find(const struct api_gauges_snap *snap,
                                            const char *sku)
{
    struct api_gauge_sku key;
    snprintf(key.sku, sizeof key.sku, "%s", sku);
    const struct api_gauge_sku *e = snap->n > 0
                                        ? bsearch(&key, snap->sku, (size_t)snap->n,
                                                  sizeof *snap->sku, compare_entries)
                                        : NULL;
    return e != NULL && !atomic_load_explicit(&e->gone, memory_order_relaxed) ? e : NULL;
}

/* ---- choosing the SKUs ------------------------------------------------------------ */

struct tally {
    char *sku;
    long long orders;
};

struct tallies {
    struct tally *t;
    size_t n, cap;
};

static void count_orders(const char *sku, const long long *outcomes, void *arg)
{
    struct tallies *ts = arg;
    long long n = 0;
    for (int i = 0; i < SKU_OUTCOMES; i++)
        if (i != STAT_ORDERS_UNKNOWN_SKU)
            n += outcomes[i];
    if (n == 0)
        return;
    if (ts->n == ts->cap) {
        ts->cap = ts->cap ? ts->cap * 2 : 64;
        ts->t = seg_must(realloc(ts->t, ts->cap * sizeof *ts->t));
    }
    ts->t[ts->n++] = (struct tally){seg_must(strdup(sku)), n};
}

static int compare_tallies(const void *a, const void *b)
{
    return strcmp(((const struct tally *)a)->sku, ((const struct tally *)b)->sku);
}

/* Most orders first, then by name. */
static int compare_rank(const void *a, const void *b)
{
    const struct tally *x = a, *y = b;
    if (x->orders != y->orders)
        return x->orders > y->orders ? -1 : 1;
    return strcmp(x->sku, y->sku);
}

/* The names of the (at most) `limit` SKUs to read, borrowed from r->names: *n of
 * them in a malloc'd array. */
static const char **choose(struct refresher *r, int limit, size_t *n)
{
    struct tallies ts = {0};
    stat_foreach_sku(r->g->inv, count_orders, &ts);
    if (ts.n > 0) /* ts.t is NULL then */
        qsort(ts.t, ts.n, sizeof *ts.t, compare_tallies);
    struct tally *rank = seg_must(calloc(r->nnames + 1, sizeof *rank));
    for (size_t i = 0; i < r->nnames; i++) {
        struct tally key = {r->names[i], 0};
        struct tally *hit =
            ts.n > 0 ? bsearch(&key, ts.t, ts.n, sizeof *ts.t, compare_tallies) : NULL;
        rank[i] = (struct tally){r->names[i], hit != NULL ? hit->orders : 0};
    }
    for (size_t i = 0; i < ts.n; i++)
        free(ts.t[i].sku);
    free(ts.t);
    if (r->nnames > (size_t)limit)
        qsort(rank, r->nnames, sizeof *rank, compare_rank);
    *n = r->nnames < (size_t)limit ? r->nnames : (size_t)limit;
    const char **out = seg_must(calloc(*n + 1, sizeof *out));
    for (size_t i = 0; i < *n; i++)
        out[i] = rank[i].sku;
    free(rank);
    return out;
}

/* ---- one refresh ------------------------------------------------------------------ */

static void entry_copy(struct api_gauge_sku *to, const struct api_gauge_sku *from)
{
    *to = (struct api_gauge_sku){.remaining = from->remaining,
                                 .sold = from->sold,
                                 .reserved = from->reserved,
                                 .initial = from->initial,
                                 .locks_held = from->locks_held,
                                 .segments = from->segments};
    memcpy(to->sku, from->sku, sizeof to->sku);
    if (from->segment_stock != NULL) {
        size_t bytes = (size_t)from->segments * sizeof *from->segment_stock;
        to->segment_stock = seg_must(malloc(bytes));
        memcpy(to->segment_stock, from->segment_stock, bytes);
    }
}

static void entry_fill(struct api_gauge_sku *e, const struct sku_status *st,
                       int segments_max)
{
    *e = (struct api_gauge_sku){.remaining = st->remaining,
                                .sold = st->sold,
                                .reserved = st->reserved,
                                .initial = st->cfg.stock,
                                .locks_held = st->locks_held,
                                .segments = st->cfg.segments};
    snprintf(e->sku, sizeof e->sku, "%s", st->sku);
    if (st->cfg.segments <= segments_max) {
        size_t bytes = (size_t)st->cfg.segments * sizeof *e->segment_stock;
        e->segment_stock = seg_must(malloc(bytes > 0 ? bytes : 1));
        memcpy(e->segment_stock, st->segment_stock, bytes);
    }
}

/* Read the names when due and the chosen SKUs' status into a new snapshot (no lock
 * held; g->cur is only replaced by this thread, so it can be read meanwhile). */
static struct api_gauges_snap *refresh(struct refresher *r, bool list_due, long long now)
{
    struct api_gauges *g = r->g;
    if (list_due || r->list_ms == 0) {
        char **names;
        size_t n;
        if (sku_list(r->conn, &names, &n) == INV_OK) {
            sku_list_free(r->names, r->nnames);
            r->names = names;
            r->nnames = n;
            r->list_ms = now;
        }
    }
    size_t n;
    const char **chosen = choose(r, g->limit, &n);
    struct api_gauges_snap *s = seg_must(calloc(1, sizeof *s));
    s->sku = seg_must(calloc(n + 1, sizeof *s->sku));
    bool all_read = true;
    for (size_t i = 0; i < n; i++) {
        /* Once Redis failed (or at shutdown), the rest keep their values: a hung
         * Redis costs one timeout a refresh, not one per SKU. */
        inv_status rc = INV_UNAVAILABLE;
        if (all_read && !periodic_stopping(r->p))
            rc = sku_get(r->conn, chosen[i], r->st);
        const struct api_gauge_sku *old = api_gauges_find(g->cur, chosen[i]);
        if (rc == INV_OK)
            entry_fill(&s->sku[s->n++], r->st, g->segments_max);
        else if (rc != INV_UNKNOWN_SKU && old != NULL)
            entry_copy(&s->sku[s->n++], old);
        all_read = all_read && (rc == INV_OK || rc == INV_UNKNOWN_SKU);
    }
    free(chosen);
    qsort(s->sku, (size_t)s->n, sizeof *s->sku, compare_entries);
    s->read_ms = all_read ? now : g->cur->read_ms;
    return s;
}

/* Make `s` current (g->mu held), without what was deleted during its reads. */
static void publish(struct api_gauges *g, struct api_gauges_snap *s)
{
    for (int k = 0; k < g->nforgotten; k++)
        for (int i = 0; i < s->n; i++)
            if (strcmp(s->sku[i].sku, g->forgotten[k]) == 0)
                atomic_store_explicit(&s->sku[i].gone, true, memory_order_relaxed);
    g->nforgotten = 0;
    s->refs = 1;
    snap_unref(g->cur);
    g->cur = s;
}

/* One round on the refresher thread: sleep while nobody scrapes or the snapshot is
 * fresh, else refresh it. */
static int refresh_round(periodic *p, void *arg)
{
    struct refresher *r = arg;
    struct api_gauges *g = r->g;
    if (r->conn == NULL) {
        pthread_setname_np(pthread_self(), "inv-gauges");
        r->p = p;
        r->conn = inv_conn_create(g->inv);
    }
    pthread_mutex_lock(&g->mu);
    long long now = base_now_ms();
    if (g->scraped_ms == 0 || now - g->scraped_ms > API_GAUGES_IDLE_MS) {
        pthread_mutex_unlock(&g->mu);
        return INT_MAX; /* nobody scrapes: no Redis reads until api_gauges_get wakes */
    }
    if (r->refreshed_ms != 0 && now < r->refreshed_ms + API_GAUGES_REFRESH_MS) {
        pthread_mutex_unlock(&g->mu);
        return (int)(r->refreshed_ms + API_GAUGES_REFRESH_MS - now);
    }
    bool list_due = g->list_stale || now - r->list_ms >= API_GAUGES_LIST_MS;
    g->list_stale = false;
    g->nforgotten = 0;
    pthread_mutex_unlock(&g->mu);
    struct api_gauges_snap *s = refresh(r, list_due, now);
    pthread_mutex_lock(&g->mu);
    publish(g, s);
    r->refreshed_ms = now;
    pthread_mutex_unlock(&g->mu);
    return 0; /* the next round sleeps out the rest of the period */
}

/* ---- the registry ----------------------------------------------------------------- */

struct api_gauges *api_gauges_create(inv *v, int limit, int segments_max, char *err,
                                     size_t errlen)
{
    struct api_gauges *g = seg_must(calloc(1, sizeof *g));
    g->inv = v;
    g->limit = limit;
    g->segments_max = segments_max;
    g->cur = seg_must(calloc(1, sizeof *g->cur));
    g->cur->sku = seg_must(calloc(1, sizeof *g->cur->sku));
    g->cur->refs = 1;
    pthread_mutex_init(&g->mu, NULL);
    g->ref = seg_must(calloc(1, sizeof *g->ref));
    g->ref->g = g;
    g->ref->st = seg_must(malloc(sizeof *g->ref->st));
    char why[128];
    g->thread = periodic_start(refresh_round, g->ref, 0, why, sizeof why);
    if (g->thread == NULL) {
        snprintf(err, errlen, "cannot start the metrics gauges thread: %s", why);
        free(g->ref->st);
        free(g->ref);
        pthread_mutex_destroy(&g->mu);
        snap_free(g->cur);
        free(g);
        return NULL;
    }
    return g;
}

void api_gauges_free(struct api_gauges *g)
{
    if (g == NULL)
        return;
    periodic_stop(g->thread);
    struct refresher *r = g->ref;
    sku_list_free(r->names, r->nnames);
    free(r->st);
    if (r->conn != NULL)
        inv_conn_free(r->conn);
    free(r);
    snap_free(g->cur);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

const struct api_gauges_snap *api_gauges_get(struct api_gauges *g)
{
    long long now = base_now_ms();
    pthread_mutex_lock(&g->mu);
    bool idle = g->scraped_ms == 0 || now - g->scraped_ms > API_GAUGES_IDLE_MS;
    g->scraped_ms = now;
    if (idle)
        periodic_wake(g->thread);
    struct api_gauges_snap *s = g->cur;
    s->refs++;
    pthread_mutex_unlock(&g->mu);
    return s;
}

void api_gauges_put(struct api_gauges *g, const struct api_gauges_snap *snap)
{
    pthread_mutex_lock(&g->mu);
    snap_unref((struct api_gauges_snap *)snap);
    pthread_mutex_unlock(&g->mu);
}

void api_gauges_forget(struct api_gauges *g, const char *sku)
{
    pthread_mutex_lock(&g->mu);
    const struct api_gauge_sku *e = api_gauges_find(g->cur, sku);
    if (e != NULL)
        atomic_store_explicit(&((struct api_gauge_sku *)e)->gone, true,
                              memory_order_relaxed);
    if (g->nforgotten < FORGET_MAX)
        snprintf(g->forgotten[g->nforgotten++], sizeof g->forgotten[0], "%s", sku);
    pthread_mutex_unlock(&g->mu);
}

void api_gauges_changed(struct api_gauges *g)
{
    pthread_mutex_lock(&g->mu);
    g->list_stale = true;
    pthread_mutex_unlock(&g->mu);
}
