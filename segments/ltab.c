/* ltab.c -- one event loop's table of SKUs (see ltab.h). */
#include "segments/ltab.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/clock.h"
#include "segments/ring.h"
#include "segments/skuset.h"

struct lsku {
    /* Its name and place in the table (skuset.h); idle while no order holds it.
     * First: the set's entry. */
    struct skuset_link link;
    bool valid, rebalancing;
    int64_t fetched_ms;
    struct sku_view view;
    long long rebalanced_gen;
    int empty_count;
    sku_local *shared; /* the process-wide entry (outcome counters), held, once known */
    int home, homes;   /* the table's */
    struct lwait *first, *last; /* waiters for a handed claim, oldest first */
    int one_seg_waiters;        /* of them, those for one segment (seg >= 0) */
    int refs;                   /* orders holding it (ltab_hold) */
    int nseg;                   /* the size of claimed and hint */
    unsigned char *claimed;
    long long *hint; /* least stock seen this generation, -1 */
};

struct ltab {
    int home, homes; /* ring.h */
    skutab *shared;
    /* Entries no order holds are idle, least recently used first; kept for their
     * settings and hints, up to SKUSET_IDLE_MAX. */
    struct skuset set;
    long long changes; /* inv.changes when the table was last in step (ltab_sync) */
};

ltab *ltab_create(int home, int homes, skutab *shared)
{
    ltab *t = seg_calloc(1, sizeof(ltab));
    t->home = home;
    t->homes = homes;
    t->shared = shared;
    return t;
}

static void entry_free(ltab *t, lsku *s)
{
    skutab_release(t->shared, s->shared);
    free(s->claimed);
    free(s->hint);
    free(s);
}

static void free_one(struct skuset_link *l, void *t)
{
    entry_free(t, (lsku *)l);
}

void ltab_free(ltab *t)
{
    if (t == NULL)
        return;
    skuset_foreach(&t->set, free_one, t);
    free(t);
}

/* Take idle entry s out of the table and free it. */
static void drop(ltab *t, lsku *s)
{
    skuset_remove(&t->set, &s->link);
    entry_free(t, s);
}

/* Nothing in it is worth keeping once no order holds it: no settings and none to
 * come back to (never read, a SKU Redis does not have, or one deleted). */
static bool worthless(const lsku *s)
{
    return !s->valid && (s->shared == NULL || skutab_dropped(s->shared));
}

static lsku *find(ltab *t, const char *sku)
{
    return (lsku *)skuset_find(&t->set, sku);
}

lsku *ltab_find(ltab *t, const char *sku)
{
    lsku *s = find(t, sku);
    if (s != NULL && s->refs == 0)
        skuset_idle(&t->set, &s->link); /* the most recently used now */
    return s;
}

lsku *ltab_hold(ltab *t, const char *sku)
{
    lsku *s = find(t, sku);
    if (s == NULL) {
        s = seg_calloc(1, sizeof *s);
        s->home = t->home;
        s->homes = t->homes;
        skuset_add(&t->set, &s->link, sku);
    } else if (s->refs == 0) {
        skuset_busy(&t->set, &s->link);
    }
    s->refs++;
    return s;
}

void ltab_release(ltab *t, lsku *s)
{
    if (s == NULL || --s->refs > 0)
        return;
    skuset_idle(&t->set, &s->link);
    if (worthless(s))
        drop(t, s);
    for (struct skuset_link *l; (l = skuset_over(&t->set)) != NULL;)
        drop(t, (lsku *)l);
}

void ltab_read(ltab *t, lsku *s, inv *v, const struct sku_view *view, int64_t now_ms)
{
    ltab_set_view(s, view, now_ms);
    if (s->shared == NULL || skutab_dropped(s->shared))
        ltab_set_shared(t, s, skutab_entry(v, s->link.name));
    skutab_loop_read(v, s->shared, view->gen);
}

void ltab_gone(lsku *s, inv *v)
{
    ltab_invalidate(s);
    if (s->shared != NULL && !skutab_dropped(s->shared))
        skutab_drop(v, s->link.name); /* deleted elsewhere: let go of it here too */
}

void ltab_sync(ltab *t, long long changes)
{
    if (changes != t->changes) {
        t->changes = changes;
        ltab_invalidate_all(t);
    }
}

ltab *ltab_of_conn(inv_conn *c)
{
    if (c->tab == NULL)
        c->tab = ltab_create(0, 1, c->v->tab);
    return c->tab;
}

inv_status ltab_get(inv_conn *c, const char *sku, lsku **out, struct sku_view *view)
{
    ltab *t = ltab_of_conn(c);
    ltab_sync(t, atomic_load_explicit(&c->v->changes, memory_order_acquire));
    lsku *s = ltab_hold(t, sku);
    int64_t now = inv_now_ms();
    inv_status st = INV_OK;
    *out = NULL;
    if (!ltab_fresh(s, now, c->v->opt.meta_cache_ms)) {
        struct sku_view fetched;
        st = skutab_read(c, sku, &fetched);
        if (st == INV_OK)
            ltab_read(t, s, c->v, &fetched, now);
        else if (st == INV_UNKNOWN_SKU)
            ltab_gone(s, c->v);
    }
    if (st != INV_OK) {
        ltab_release(t, s); /* nothing kept of a SKU the store does not have */
        return st;
    }
    *view = s->view;
    *out = s;
    return INV_OK;
}

bool ltab_fresh(const lsku *s, int64_t now_ms, int max_age_ms)
{
    return s->valid && now_ms - s->fetched_ms < max_age_ms;
}

bool ltab_valid(const lsku *s)
{
    return s->valid;
}

const struct sku_view *ltab_view(const lsku *s)
{
    return &s->view;
}

/* Send every waiter back to look again. */
static void wake_all(lsku *s)
{
    struct lwait *w = s->first;
    s->first = s->last = NULL;
    s->one_seg_waiters = 0;
    while (w != NULL) {
        struct lwait *next = w->next;
        w->next = NULL;
        w->handed(w, -1);
        w = next;
    }
}

void ltab_set_view(lsku *s, const struct sku_view *view, int64_t now_ms)
{
    int n = view->cfg.segments;
    if (n > s->nseg) {
        /* Grown, never shrunk: an order of an older view may still claim a segment
         * past the new count. */
        s->claimed = seg_realloc(s->claimed, (size_t)n);
        memset(s->claimed + s->nseg, 0, (size_t)(n - s->nseg));
        s->hint = seg_realloc(s->hint, sizeof *s->hint * (size_t)n);
        for (int i = s->nseg; i < n; i++)
            s->hint[i] = -1;
        s->nseg = n;
    }
    if (!s->valid || s->view.gen != view->gen) {
        for (int i = 0; i < s->nseg; i++)
            s->hint[i] = -1;
        s->empty_count = 0;
    }
    s->view = *view;
    s->valid = true;
    s->fetched_ms = now_ms;
}

void ltab_invalidate(lsku *s)
{
    s->valid = false;
    wake_all(s);
}

static void invalidate_one(struct skuset_link *l, void *t)
{
    lsku *s = (lsku *)l;
    ltab_invalidate(s); /* a waiter's `handed` releases no entry: the set stays put */
    if (s->refs == 0 && worthless(s))
        drop(t, s); /* deleted: the change that said so brought us here */
}

void ltab_invalidate_all(ltab *t)
{
    skuset_foreach(&t->set, invalidate_one, t);
}

/* claimed[i]: 0 free, 1 claimed, 2 claimed and counted in the shared entry. */
bool ltab_claim(lsku *s, int i)
{
    if (s->claimed[i])
        return false;
    s->claimed[i] = 1;
    if (s->shared != NULL) {
        skutab_loop_claims(s->shared, i, 1);
        s->claimed[i] = 2;
    }
    return true;
}

bool ltab_claimed(const lsku *s, int i)
{
    return s->claimed[i];
}

bool ltab_claimed_elsewhere(const lsku *s, int i)
{
    return s->shared != NULL &&
           skutab_loop_claims(s->shared, i, 0) > (s->claimed[i] == 2 ? 1 : 0);
}

struct lwait *ltab_next_holder(lsku *s, int i)
{
    struct lwait *any = NULL;
    for (struct lwait *w = s->first; w != NULL; w = w->next) {
        if (w->seg == i) {
            any = w;
            break;
        }
        if (any == NULL && w->seg < 0) {
            any = w;
            if (s->one_seg_waiters == 0)
                break; /* none for this very segment behind it */
        }
    }
    if (any != NULL &&
        (any->seg == i || (s->hint[i] != 0 && s->valid && i < s->view.cfg.segments &&
                           ring_home(i, s->view.cfg.segments, s->home, s->homes)))) {
        ltab_unwait(s, any);
        return any;
    }
    return NULL;
}

struct lwait *ltab_next_keeper(lsku *s, int i)
{
    struct lwait *w = ltab_next_holder(s, i);
    if (w != NULL || s->hint[i] == 0 || !s->valid || i >= s->view.cfg.segments)
        return w;
    for (w = s->first; w != NULL && w->seg >= 0; w = w->next)
        ;
    if (w != NULL)
        ltab_unwait(s, w);
    return w;
}

void ltab_free_claim(lsku *s, int i)
{
    if (s->claimed[i] == 2)
        skutab_loop_claims(s->shared, i, -1);
    s->claimed[i] = 0;
    /* A dropped view hands no claim to a waiter for any segment (ltab_next_holder
     * cannot tell whether segment i still exists or holds stock), and the claims it
     * waits for may all go free this way: send the waiters back to look again rather
     * than leave them to their deadline. */
    if (!s->valid && s->first != NULL)
        wake_all(s);
}

void ltab_unclaim(lsku *s, int i)
{
    struct lwait *w = ltab_next_holder(s, i);
    if (w != NULL)
        w->handed(w, i); /* stays claimed: it changes hands */
    else
        ltab_free_claim(s, i);
}

bool ltab_note_stock(lsku *s, long long gen, int i, long long stock)
{
    if (!s->valid || s->view.gen != gen || (s->hint[i] >= 0 && stock >= s->hint[i]))
        return false;
    bool emptied = stock == 0 && s->hint[i] != 0;
    s->hint[i] = stock;
    if (emptied) {
        /* Waiters may now be owed an answer (sold out, insufficient) rather than a
         * claim that will never come. */
        s->empty_count++;
        wake_all(s);
    }
    return emptied;
}

long long ltab_hint(const lsku *s, int i)
{
    return s->hint[i];
}

void ltab_set_hints(lsku *s, long long gen, const long long *stock, int n)
{
    if (!s->valid || s->view.gen != gen || n > s->nseg)
        return;
    s->empty_count = 0;
    for (int i = 0; i < n; i++) {
        s->hint[i] = stock[i];
        s->empty_count += stock[i] == 0;
    }
}

int ltab_empty_count(const lsku *s, long long gen)
{
    return s->valid && s->view.gen == gen ? s->empty_count : 0;
}

void ltab_wait(lsku *s, struct lwait *w)
{
    w->next = NULL;
    s->one_seg_waiters += w->seg >= 0;
    if (s->last != NULL)
        s->last->next = w;
    else
        s->first = w;
    s->last = w;
}

void ltab_wait_front(lsku *s, struct lwait *w)
{
    w->next = s->first;
    s->one_seg_waiters += w->seg >= 0;
    s->first = w;
    if (s->last == NULL)
        s->last = w;
}

bool ltab_unwait(lsku *s, struct lwait *w)
{
    struct lwait **p = &s->first, *prev = NULL;
    while (*p != NULL && *p != w) {
        prev = *p;
        p = &(*p)->next;
    }
    if (*p == NULL)
        return false;
    *p = w->next;
    if (s->last == w)
        s->last = prev;
    s->one_seg_waiters -= w->seg >= 0;
    w->next = NULL;
    return true;
}

sku_local *ltab_shared(const lsku *s)
{
    return s->shared;
}

void ltab_set_shared(ltab *t, lsku *s, sku_local *e)
{
    for (int i = 0; s->shared != NULL && i < s->nseg; i++)
        if (s->claimed[i] == 2) { /* counted in the old entry: count it in the new */
            skutab_loop_claims(s->shared, i, -1);
            skutab_loop_claims(e, i, 1);
        }
    skutab_release(t->shared, s->shared);
    s->shared = e;
}

bool ltab_rebalance_begin(lsku *s, long long gen)
{
    if (s->rebalancing || s->rebalanced_gen == gen)
        return false;
    s->rebalancing = true;
    s->rebalanced_gen = gen;
    return true;
}

void ltab_rebalance_end(lsku *s)
{
    s->rebalancing = false;
}
