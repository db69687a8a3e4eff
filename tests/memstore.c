/* memstore.c -- an in-memory stock store behind segments/store.h, for tests. */
#include "tests/memstore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"

struct mseg {
    long long stock, sold;
    char lock[33];        /* the token holding it, "" none */
    long long lock_until; /* its lease end on the store's clock */
    long long fence;      /* the highest fence accepted (STORE_CAP_FENCE) */
};

struct msku {
    char name[SEG_NAME_MAX + 1];
    struct store_meta meta;
    struct mseg *seg; /* meta.segments of them */
    struct msku *next;
};

struct mrec {
    char *id, *record, *attempt;
    char sku[SEG_NAME_MAX + 1];
    long long epoch;
    struct mrec *next;
};

enum kind { K_REPLY, K_MULTI, K_INT, K_META, K_RECORD, K_STOCKS };

/* One answer owed, decided at the call. */
struct answer {
    enum kind kind;
    void (*fn)(void);
    void *arg;
    int rc;
    struct store_reply r;
    int value, found;
    struct store_meta meta;
    long long *stocks;
    struct answer *next;
};

struct memstore {
    struct store base; /* first: a store * is a struct memstore * */
    unsigned caps;
    struct event *ev; /* active while answers are owed */
    struct answer *head, *tail;
    struct msku *skus;
    struct mrec *recs;
    long long offset; /* mem_advance */
    int fail;         /* mem_fail */
    long long counts[MEM__COUNT];
    struct store_stats stats;
};

#define FN(f) ((void (*)(void))(f))

static struct memstore *ms(store *s)
{
    return (struct memstore *)s;
}

static const struct memstore *cms(const store *s)
{
    return (const struct memstore *)s;
}

static long long now(const struct memstore *m)
{
    return base_now_ms() + m->offset;
}

static struct msku *find_sku(const struct memstore *m, const char *name)
{
    for (struct msku *k = m->skus; k != NULL; k = k->next)
        if (strcmp(k->name, name) == 0)
            return k;
    return NULL;
}

static struct mrec *find_rec(const struct memstore *m, const char *id)
{
    for (struct mrec *r = m->recs; r != NULL; r = r->next)
        if (strcmp(r->id, id) == 0)
            return r;
    return NULL;
}

/* The lock of `g` as held now: its token, or "" when none or run out. */
static const char *holder(const struct memstore *m, struct mseg *g)
{
    if (g->lock[0] != '\0' && g->lock_until <= now(m))
        g->lock[0] = '\0';
    return g->lock;
}

static void unlock_if(const struct memstore *m, struct mseg *g, const char *token)
{
    if (token[0] != '\0' && strcmp(holder(m, g), token) == 0)
        g->lock[0] = '\0';
}

/* A record of `sku` left behind by a reset (another epoch) is no order. */
static bool rec_live(const struct mrec *r, const char *sku, long long epoch)
{
    return r != NULL && (strcmp(r->sku, sku) != 0 || r->epoch == epoch);
}

static void write_rec(struct memstore *m, const char *id, const char *record,
                      const char *attempt, const char *sku, long long epoch)
{
    struct mrec *r = find_rec(m, id);
    if (r == NULL) {
        r = seg_calloc(1, sizeof *r);
        r->id = seg_strdup(id);
        r->next = m->recs;
        m->recs = r;
    }
    free(r->record);
    free(r->attempt);
    r->record = seg_strdup(record);
    r->attempt = seg_strdup(attempt);
    snprintf(r->sku, sizeof r->sku, "%s", sku);
    r->epoch = epoch;
}

/* ---- answering on the loop -------------------------------------------------------- */

static void deliver(struct answer *a)
{
    if (a->fn != NULL) {
        switch (a->kind) {
        case K_REPLY:
            ((store_reply_fn)a->fn)(a->arg, a->rc, &a->r);
            break;
        case K_MULTI:
            ((store_multi_fn)a->fn)(a->arg, a->rc, &a->r, a->stocks);
            break;
        case K_INT:
            ((store_int_fn)a->fn)(a->arg, a->rc, a->value);
            break;
        case K_META:
            ((store_meta_fn)a->fn)(a->arg, a->rc, a->found, a->found ? &a->meta : NULL);
            break;
        case K_RECORD:
            ((store_record_fn)a->fn)(a->arg, a->rc, a->r.record);
            a->r.record = NULL;
            break;
        case K_STOCKS:
            ((store_stocks_fn)a->fn)(a->arg, a->rc, a->stocks);
            break;
        }
    }
    free(a->r.record);
    free(a->r.plan);
    free(a->stocks);
    free(a);
}

/* Every answer owed when the turn began, in call order; those the callbacks add go
 * on the next turn. */
static void on_turn(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct memstore *m = arg;
    struct answer *a = m->head;
    m->head = m->tail = NULL;
    while (a != NULL) {
        struct answer *next = a->next;
        deliver(a);
        a = next;
    }
}

/* A new answer owed (rc 0), or NULL when mem_fail takes the call: then answered -1
 * and nothing may be done. */
static struct answer *owe(struct memstore *m, enum kind kind, void (*fn)(void), void *arg)
{
    struct answer *a = seg_calloc(1, sizeof *a);
    a->kind = kind;
    a->fn = fn;
    a->arg = arg;
    if (m->tail != NULL)
        m->tail->next = a;
    else
        m->head = a;
    m->tail = a;
    m->stats.commands++;
    if (m->head == a) {
        m->stats.writes++;
        event_active(m->ev, EV_TIMEOUT, 0);
    }
    if (m->fail > 0) {
        m->fail--;
        a->rc = -1;
        return NULL;
    }
    return a;
}

/* ---- the ops --------------------------------------------------------------------- */

static unsigned caps(const store *s)
{
    return cms(s)->caps;
}

static void mem_free(store *s)
{
    struct memstore *m = ms(s);
    if (m == NULL)
        return;
    while (m->head != NULL) { /* answered -1 first: the outcome is unknown */
        struct answer *a = m->head;
        m->head = a->next;
        a->rc = -1;
        a->found = 0;
        deliver(a);
    }
    event_free(m->ev);
    while (m->skus != NULL) {
        struct msku *k = m->skus;
        m->skus = k->next;
        free(k->seg);
        free(k);
    }
    while (m->recs != NULL) {
        struct mrec *r = m->recs;
        m->recs = r->next;
        free(r->id);
        free(r->record);
        free(r->attempt);
        free(r);
    }
    free(m);
}

static const char *error(const store *s)
{
    return cms(s)->fail > 0 ? "memstore: failing (mem_fail)" : "";
}

static void stats(const store *s, struct store_stats *out)
{
    *out = cms(s)->stats;
}

static void meta_read(store *s, const char *sku, store_meta_fn fn, void *arg)
{
    struct memstore *m = ms(s);
    struct answer *a = owe(m, K_META, FN(fn), arg);
    const struct msku *k = find_sku(m, sku);
    if (a != NULL && k != NULL) {
        a->found = 1;
        a->meta = k->meta;
    }
}

static void record_read(store *s, const char *id, const char *sku, long long epoch,
                        store_record_fn fn, void *arg)
{
    struct memstore *m = ms(s);
    struct answer *a = owe(m, K_RECORD, FN(fn), arg);
    const struct mrec *r = find_rec(m, id);
    if (a != NULL && rec_live(r, sku, epoch))
        a->r.record = seg_strdup(r->record);
}

static void stocks_read(store *s, const char *sku, int n, store_stocks_fn fn, void *arg)
{
    struct memstore *m = ms(s);
    struct answer *a = owe(m, K_STOCKS, FN(fn), arg);
    if (a == NULL)
        return;
    a->stocks = seg_calloc((size_t)n, sizeof *a->stocks);
    const struct msku *k = find_sku(m, sku);
    for (int i = 0; k != NULL && i < n && i < k->meta.segments; i++)
        a->stocks[i] = k->seg[i].stock;
}

/* Segment i of `sku` in `epoch`, or NULL (STALE: reset, deleted, or no such segment). */
static struct mseg *segment(struct memstore *m, const char *sku, long long epoch, int i)
{
    struct msku *k = find_sku(m, sku);
    if (k == NULL || k->meta.epoch != epoch || i < 0 || i >= k->meta.segments)
        return NULL;
    return &k->seg[i];
}

/* lua/acquire.lua */
static void acquire(store *s, const char *sku, long long epoch, int i, const char *id,
                    long long qty, const char *token, int ttl_ms, store_reply_fn fn,
                    void *arg)
{
    struct memstore *m = ms(s);
    struct answer *a = owe(m, K_REPLY, FN(fn), arg);
    if (a == NULL)
        return;
    m->counts[MEM_ACQUIRES]++;
    struct mseg *g = segment(m, sku, epoch, i);
    const struct mrec *r = find_rec(m, id);
    if (g == NULL) {
        a->r.code = STORE_STALE;
    } else if (rec_live(r, sku, epoch)) {
        a->r.code = STORE_EXISTS;
        a->r.record = seg_strdup(r->record);
    } else if (g->stock < qty) {
        a->r.code = STORE_SHORT;
        a->r.value = g->stock;
    } else if (holder(m, g)[0] != '\0' && strcmp(g->lock, token) != 0) {
        a->r.code = STORE_BUSY;
        a->r.value = g->stock;
        m->counts[MEM_BUSY]++;
    } else {
        if (g->lock[0] == '\0') { /* SET NX PX: a lock of ours keeps its lease */
            snprintf(g->lock, sizeof g->lock, "%s", token);
            g->lock_until = now(m) + ttl_ms;
        }
        a->r.code = STORE_OK;
        a->r.value = g->stock;
    }
}

static void lock(store *s, const char *sku, int i, const char *token, int ttl_ms,
                 store_int_fn fn, void *arg)
{
    struct memstore *m = ms(s);
    struct answer *a = owe(m, K_INT, FN(fn), arg);
    struct msku *k = find_sku(m, sku);
    if (a == NULL || k == NULL || i >= k->meta.segments)
        return;
    struct mseg *g = &k->seg[i];
    if (holder(m, g)[0] == '\0') {
        snprintf(g->lock, sizeof g->lock, "%s", token);
        g->lock_until = now(m) + ttl_ms;
    }
    a->value = strcmp(g->lock, token) == 0;
}

static void renew(store *s, const char *sku, int i, const char *token, int ttl_ms,
                  store_int_fn fn, void *arg)
{
    struct memstore *m = ms(s);
    struct answer *a = owe(m, K_INT, FN(fn), arg);
    struct msku *k = find_sku(m, sku);
    if (a == NULL || k == NULL || i >= k->meta.segments)
        return;
    struct mseg *g = &k->seg[i];
    a->value = strcmp(holder(m, g), token) == 0;
    if (a->value)
        g->lock_until = now(m) + ttl_ms;
}

static void release(store *s, const char *sku, int i, const char *token, store_int_fn fn,
                    void *arg)
{
    struct memstore *m = ms(s);
    struct answer *a = owe(m, K_INT, FN(fn), arg);
    struct msku *k = find_sku(m, sku);
    if (a == NULL || k == NULL || i >= k->meta.segments)
        return;
    a->value = strcmp(holder(m, &k->seg[i]), token) == 0;
    unlock_if(m, &k->seg[i], token);
}

/* A fence lower than the highest the segment accepted is a late holder's. */
static bool fenced_out(const struct memstore *m, const struct mseg *g, long long fence)
{
    return (m->caps & STORE_CAP_FENCE) && fence != STORE_NO_FENCE && fence < g->fence;
}

/* lua/deduct.lua, and the fence of a lock service (STORE_CAP_FENCE). */
static bool deduct(store *s, const char *sku, long long epoch, int i, const char *token,
                   long long fence, const char *attempt, const char *id, long long qty,
                   const char *record, long long until, bool keep, store_reply_fn fn,
                   void *arg)
{
    (void)until; /* no RECORD_APART: never a claimed id's */
    struct memstore *m = ms(s);
    struct answer *a = owe(m, K_REPLY, FN(fn), arg);
    if (a == NULL)
        return true;
    m->counts[MEM_DEDUCTS]++;
    struct msku *k = find_sku(m, sku);
    struct mseg *g = k != NULL && i < k->meta.segments ? &k->seg[i] : NULL;
    const struct mrec *r = find_rec(m, id);
    bool locked = token[0] != '\0';
    bool mine = locked && g != NULL && strcmp(holder(m, g), token) == 0;
    keep = keep && (m->caps & STORE_CAP_KEEP);
    if (r != NULL && strcmp(r->attempt, attempt) == 0) { /* our own, sent again */
        a->r.code = STORE_OK;
        a->r.value = g != NULL ? g->stock : 0;
    } else if ((locked && !mine) || (g != NULL && fenced_out(m, g, fence))) {
        a->r.code = STORE_FENCED;
        m->counts[MEM_FENCED]++;
        return true; /* nothing written, no lock released */
    } else if (g == NULL || k->meta.epoch != epoch) {
        a->r.code = STORE_STALE;
    } else if (rec_live(r, sku, epoch)) {
        a->r.code = STORE_EXISTS;
        a->r.record = seg_strdup(r->record);
    } else if (g->stock < qty) {
        a->r.code = STORE_SHORT;
        a->r.value = g->stock;
    } else {
        g->stock -= qty;
        g->sold += qty;
        if (fence > g->fence)
            g->fence = fence;
        write_rec(m, id, record, attempt, sku, epoch);
        a->r.code = STORE_OK;
        a->r.value = g->stock;
    }
    if (mine && !(keep && a->r.code == STORE_OK))
        g->lock[0] = '\0';
    return true;
}

/* lua/deduct_multi.lua */
static void deduct_multi(store *s, const char *sku, long long epoch, const char *id,
                         const char *record, const char *attempt,
                         const struct store_parts *p, store_multi_fn fn, void *arg)
{
    struct memstore *m = ms(s);
    struct answer *a = owe(m, K_MULTI, FN(fn), arg);
    if (a == NULL)
        return;
    m->counts[MEM_DEDUCTS]++;
    struct msku *k = find_sku(m, sku);
    const struct mrec *r = find_rec(m, id);
    bool stale = k == NULL || k->meta.epoch != epoch, fenced = false, shorted = false;
    for (int j = 0; !stale && j < p->n; j++)
        stale = p->seg[j] >= k->meta.segments;
    for (int j = 0; !stale && j < p->n; j++) {
        struct mseg *g = &k->seg[p->seg[j]];
        fenced |= (p->tok[j][0] != '\0' && strcmp(holder(m, g), p->tok[j]) != 0) ||
                  (p->fence != NULL && fenced_out(m, g, p->fence[j]));
        shorted |= g->stock < p->part[j];
    }
    bool again = r != NULL && strcmp(r->attempt, attempt) == 0;
    if (!again && fenced) {
        a->r.code = STORE_FENCED;
        m->counts[MEM_FENCED]++;
    } else if (!again && stale) {
        a->r.code = STORE_STALE;
    } else if (!again && rec_live(r, sku, epoch)) {
        a->r.code = STORE_EXISTS;
        a->r.record = seg_strdup(r->record);
    } else {
        a->r.code = !again && shorted ? STORE_SHORT : STORE_OK;
        a->stocks = seg_calloc((size_t)p->n, sizeof *a->stocks);
        for (int j = 0; j < p->n; j++) {
            struct mseg *g = &k->seg[p->seg[j]];
            if (!again && !shorted) {
                g->stock -= p->part[j];
                g->sold += p->part[j];
            }
            a->stocks[j] = g->stock;
        }
        if (!again && !shorted)
            write_rec(m, id, record, attempt, sku, epoch);
    }
    for (int j = 0; k != NULL && j < p->n; j++)
        if (p->seg[j] < k->meta.segments)
            unlock_if(m, &k->seg[p->seg[j]], p->tok[j]);
}

/* lua/adjust.lua, "spread" and "rebalance" (the engine's automatic rebalance). */
static void adjust(store *s, const char *sku, long long epoch, int segments,
                   const char *const *tok, const long long *fence, const char *op,
                   long long add, long long limit, const char *rid, const char *sig,
                   int wait_ms, store_reply_fn fn, void *arg)
{
    (void)fence; /* no STORE_CAP_FENCE: never given one */
    (void)add;
    (void)limit;
    (void)rid;
    (void)sig;
    (void)wait_ms;
    struct memstore *m = ms(s);
    struct answer *a = owe(m, K_REPLY, FN(fn), arg);
    if (a == NULL)
        return;
    struct msku *k = find_sku(m, sku);
    if (strcmp(op, "spread") != 0 && strcmp(op, "rebalance") != 0) {
        fprintf(stderr, "memstore: adjust %s is not kept here\n", op);
        abort();
    }
    if (k == NULL || k->meta.epoch != epoch || k->meta.segments != segments) {
        a->r.code = STORE_STALE;
    } else {
        long long total = 0;
        int nonempty = 0, n = segments;
        bool fenced = false;
        for (int i = 0; i < n; i++) {
            fenced |= strcmp(holder(m, &k->seg[i]), tok[i]) != 0;
            total += k->seg[i].stock;
            nonempty += k->seg[i].stock > 0;
        }
        if (fenced) {
            a->r.code = STORE_FENCED;
            m->counts[MEM_FENCED]++;
        } else if (strcmp(op, "spread") == 0 && (total < n ? total : n) <= nonempty) {
            a->r.code = STORE_OK; /* value 0: nothing changed */
        } else {
            for (int i = 0; i < n; i++)
                k->seg[i].stock = total / n + (i < total % n);
            a->r.code = STORE_OK;
            a->r.value = ++k->meta.gen;
        }
    }
    for (int i = 0; k != NULL && i < segments && i < k->meta.segments; i++)
        unlock_if(m, &k->seg[i], tok[i]);
}

static void id_for_segment(store *s, const char *sku, int i, char *id)
{
    (void)s; /* the record always lives with the deduction here */
    (void)sku;
    (void)i;
    (void)id;
}

/* No replicas: none has anything. */
static void wait_durable(store *s, const char *sku, int i, const char *id, int timeout_ms,
                         store_int_fn fn, void *arg)
{
    (void)sku;
    (void)i;
    (void)id;
    (void)timeout_ms;
    owe(ms(s), K_INT, FN(fn), arg);
}

static const struct store_ops mem_ops = {
    .name = "memory",
    .caps = caps,
    .free = mem_free,
    .error = error,
    .stats = stats,
    .meta_read = meta_read,
    .record_read = record_read,
    .stocks_read = stocks_read,
    .acquire = acquire,
    .lock = lock,
    .renew = renew,
    .release = release,
    .deduct = deduct,
    .deduct_multi = deduct_multi,
    .adjust = adjust,
    .id_for_segment = id_for_segment,
    .wait = wait_durable,
};

/* ---- the test's side ------------------------------------------------------------- */

store *mem_create(struct event_base *base, unsigned want)
{
    struct memstore *m = seg_calloc(1, sizeof *m);
    m->base.ops = &mem_ops;
    m->caps = STORE_CAP_MULTI_ONE | (want & (STORE_CAP_KEEP | STORE_CAP_FENCE));
    m->ev = event_new(base, -1, 0, on_turn, m);
    return &m->base;
}

void mem_put(store *s, const char *sku, long long stock, int segments, const char *mode,
             int hold_ms, bool rebalance)
{
    struct memstore *m = ms(s);
    struct msku *k = find_sku(m, sku);
    if (k == NULL) {
        k = seg_calloc(1, sizeof *k);
        snprintf(k->name, sizeof k->name, "%s", sku);
        k->next = m->skus;
        m->skus = k;
    }
    free(k->seg);
    k->seg = seg_calloc((size_t)segments, sizeof *k->seg);
    for (int i = 0; i < segments; i++)
        k->seg[i].stock = stock / segments + (i < stock % segments);
    struct store_meta *t = &k->meta;
    t->segments = segments;
    snprintf(t->mode, sizeof t->mode, "%s", mode);
    t->hold_ms = hold_ms;
    t->initial = stock;
    t->epoch++;
    t->gen++;
    t->rebalance = rebalance;
}

long long mem_stock(const store *s, const char *sku, int i)
{
    const struct msku *k = find_sku(cms(s), sku);
    return k != NULL && i < k->meta.segments ? k->seg[i].stock : -1;
}

long long mem_sold(const store *s, const char *sku)
{
    const struct msku *k = find_sku(cms(s), sku);
    long long sold = 0;
    for (int i = 0; k != NULL && i < k->meta.segments; i++)
        sold += k->seg[i].sold;
    return sold;
}

int mem_locks_held(const store *s, const char *sku)
{
    const struct memstore *m = cms(s);
    const struct msku *k = find_sku(m, sku);
    int held = 0;
    for (int i = 0; k != NULL && i < k->meta.segments; i++)
        held += holder(m, &k->seg[i])[0] != '\0';
    return held;
}

void mem_take_lock(store *s, const char *sku, int i, const char *token, int ttl_ms)
{
    struct memstore *m = ms(s);
    struct msku *k = find_sku(m, sku);
    snprintf(k->seg[i].lock, sizeof k->seg[i].lock, "%s", token);
    k->seg[i].lock_until = now(m) + ttl_ms;
}

void mem_advance(store *s, long long ms_)
{
    ms(s)->offset += ms_;
}

void mem_fail(store *s, int n)
{
    ms(s)->fail = n;
}

long long mem_count(const store *s, enum mem_counter c)
{
    return cms(s)->counts[c];
}
