/* spread.c -- the automatic rebalance, and an admin restock or rebalance: every
 * segment of a SKU locked (the store's locks, or a lock service's holds), then ADJUST;
 * and an order's cancel: its segments' store locks, then CANCEL. */
#include <stdio.h>
#include <stdlib.h>

#include "segments/engine_internal.h"
#include "segments/skutab.h"
#include "segments/sweeper.h"
#include "base/xalloc.h"

/* The ADJUST script evened the stock out (and released the store's locks) or
 * refused; a lock service's holds go back now. */
static void on_spread(void *arg, int rc, struct store_reply *r)
{
    struct ord *o = arg;
    if (rc < 0) {
        multi_give_up(o, INV_UNAVAILABLE);
        return;
    }
    multi_unclaim(o);
    ltab_rebalance_end(o->s);
    if (r->code == STORE_FENCED && multi_svc(o))
        stat_add(o->e->v, STAT_FENCED_REJECTIONS, 1);
    if (r->code == STORE_OK) {
        stat_add(o->e->v, STAT_REBALANCES, 1);
        skutab_invalidate(o->e->v, o->sku); /* a new generation: every loop re-reads */
        ltab_invalidate(o->s);
        ord_enter(o, ORD_VIEW);
    } else if (r->code == STORE_STALE) {
        ord_stale(o);
    } else {
        ord_enter(o, ORD_ROUND);
    }
}

/* Every lock held: ADJUST "spread", fenced by the store's tokens or, under a lock
 * service's holds, by every segment's fence (a hold lost meanwhile: the set goes
 * back, the order goes on, as a multi-segment order's). */
static void spread_apply(struct ord *o)
{
    bool svc = multi_svc(o);
    if (svc && o->lease_lost) {
        stat_add(o->e->v, STAT_FENCED_REJECTIONS, 1);
        multi_give_up(o, INV_BUSY);
        return;
    }
    const char **tok = seg_malloc(sizeof *tok * (size_t)o->mn);
    for (int k = 0; k < o->mn; k++)
        tok[k] = o->mtok[k]; /* "" under a service's holds */
    STORE_CALL(o->e->st, adjust, o->placed, o->view.epoch, o->mn, tok,
               svc ? o->mfence : NULL, "spread", 0, SKU_STOCK_MAX, NULL, "", 0, on_spread,
               o);
    free(tok);
}

/* The automatic rebalance, once per generation per loop, by the order that finds it
 * due (mode lock, most segments seen empty, stock left): every segment locked in
 * index order, then ADJUST "spread", so the end of a sale keeps every segment
 * working. The order goes on once it is done. Under a lock service every segment's
 * hold is taken from the service (renewed while held) and its fence registered
 * (HOLD of 0 units), as for a multi-segment order, and the ADJUST is fenced by them
 * all. On a cluster the spread is steps over the segments' slots, without locks: the
 * sweeper thread runs it (sweeper.h), and the order goes on at once. */
bool spread_begin(struct ord *o)
{
    const int n = o->n;
    if (o->view.cfg.mode != SKU_MODE_LOCK || !o->view.cfg.rebalance || n < 2)
        return false;
    int empty = ord_empties(o->s, o->view.gen);
    if (empty * 2 < n || empty == n || !ltab_rebalance_begin(o->s, o->view.gen))
        return false;
    if (!(store_caps(o->e->st) & STORE_CAP_MULTI_ONE)) {
        sweeper_spread(o->e->v->sw, o->sku);
        ltab_rebalance_end(o->s);
        return false;
    }
    if (multi_svc(o) && !lease_svc_ready(o)) { /* the order's own path answers it */
        ltab_rebalance_end(o->s);
        return false;
    }
    multi_alloc(o);
    for (int i = 0; i < n; i++) {
        o->mseg[i] = i;
        o->mpart[i] = 0; /* a service's HOLD registers the fence, takes nothing */
    }
    o->mn = n;
    ord_set(o, ORD_SPREAD);
    o->mlocked = spread_apply;
    if (multi_svc(o))
        lease_start(o); /* renews the holds as they are won; lease_lost from now */
    multi_lock_next(o);
    return true;
}

/* ---- an admin restock or rebalance (engine_adjust) -------------------------------- */

/* The ADJUST answered: the store released the locks whatever it said (no answer: they
 * are given back here). STALE: the settings again. */
static void on_adjusted(void *arg, int rc, struct store_reply *r)
{
    struct ord *o = arg;
    struct engine_adjust *a = o->adj;
    lease_stop(o);
    if (rc < 0) {
        a->code = -1;
        multi_give_up(o, INV_UNAVAILABLE);
        return;
    }
    for (int k = 0; k < o->mk; k++)
        ltab_unclaim(o->s, o->mseg[k]);
    o->mk = 0;
    if (r->code == STORE_STALE) {
        ord_stale(o);
        return;
    }
    a->code = r->code;
    a->gen = r->code == STORE_OK ? r->value : 0;
    *a->view = o->view;
    ord_finish(o, INV_OK);
}

/* Every lock held: ADJUST, fenced by their tokens (unlocked: none). */
static void adjust_apply(struct ord *o)
{
    struct engine_adjust *a = o->adj;
    const char **tok = seg_malloc(sizeof *tok * (size_t)o->n);
    for (int k = 0; k < o->mn; k++)
        tok[k] = o->mtok[k];
    /* Durability "replicated" on a store whose steps span nodes: each on a replica
     * before the next (store.h adjust). */
    int wait_ms = o->view.cfg.replicated ? o->e->v->opt.redis_timeout_ms / 2 : 0;
    STORE_CALL(o->e->st, adjust, o->placed, o->view.epoch, o->n, a->unlocked ? NULL : tok,
               NULL, a->op, a->add, a->limit, a->rid, a->sig, wait_ms, on_adjusted, o);
    free(tok);
}

void adjust_begin(struct ord *o)
{
    const int n = o->view.cfg.segments;
    o->n = n;
    /* A store that adjusts in steps over its nodes takes no lock (a Redis Cluster). */
    if (!(store_caps(o->e->st) & STORE_CAP_MULTI_ONE))
        o->adj->unlocked = true;
    multi_alloc(o);
    for (int i = 0; i < n; i++)
        o->mseg[i] = i;
    o->mn = o->adj->unlocked ? 0 : n;
    ord_set(o, ORD_ADJUST);
    o->mlocked = adjust_apply;
    lease_start(o); /* renews the locks of the set as they are taken */
    multi_lock_next(o);
}

static void on_adjust_start(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ord *o = arg;
    if (!ord_mode_followed(o->e))
        ord_finish(o, INV_UNAVAILABLE);
    else
        ord_enter(o, ORD_VIEW);
}

void engine_adjust(engine *e, const char *sku, struct engine_adjust *a, engine_done_fn fn,
                   void *arg)
{
    struct ord *o = ord_new(e, fn, arg, on_adjust_start);
    snprintf(o->sku, sizeof o->sku, "%s", sku);
    a->code = -2;
    o->adj = a;
}

/* ---- an order's cancel (engine_cancel) -------------------------------------------- */

/* The CANCEL answered: the store released the locks whatever it said (no answer: they
 * are given back here). */
static void on_cancelled(void *arg, int rc, struct store_reply *r)
{
    struct ord *o = arg;
    struct engine_cancel *x = o->cx;
    lease_stop(o);
    if (rc < 0) {
        x->code = -1;
        multi_give_up(o, INV_UNAVAILABLE);
        return;
    }
    for (int k = 0; k < o->mk; k++)
        ltab_unclaim(o->s, o->mseg[k]);
    o->mk = 0;
    x->code = r->code;
    x->applied = r->code == STORE_OK || r->value == 1;
    if (r->code == STORE_EXISTS) {
        x->record = r->record;
        r->record = NULL;
    }
    ord_finish(o, INV_OK);
}

/* Every lock held: CANCEL, fenced by their tokens. */
static void cancel_apply(struct ord *o)
{
    struct engine_cancel *x = o->cx;
    const char **tok = seg_malloc(sizeof *tok * (size_t)x->n);
    for (int k = 0; k < x->n; k++)
        tok[k] = k < o->mn ? o->mtok[k] : "";
    const struct store_parts parts = {x->n, x->seg, x->part, tok, NULL};
    /* Durability "replicated": 200 once a replica has the cancel too; else 503
     * not_replicated, and the retry answers 200 once it holds (store.h cancel). */
    int wait_ms = o->view.cfg.replicated ? o->e->v->opt.redis_timeout_ms / 2 : 0;
    STORE_CALL(o->e->st, cancel, o->placed, o->view.epoch, x->id, x->cancelled,
               x->expected, &parts, wait_ms, on_cancelled, o);
    free(tok);
}

void cancel_begin(struct ord *o)
{
    struct engine_cancel *x = o->cx;
    o->n = x->n;
    multi_alloc(o);
    o->mn = x->n;
    for (int k = 0; k < x->n; k++) {
        o->mseg[k] = x->seg[k];
        /* A segment the SKU no longer has: the record is of an epoch a reset ended,
         * which the store answers before it looks at a lock: nothing to lock. */
        if (x->seg[k] >= o->view.cfg.segments)
            o->mn = 0;
    }
    ord_set(o, ORD_CANCEL);
    o->mlocked = cancel_apply;
    lease_start(o); /* renews the locks of the set as they are taken */
    multi_lock_next(o);
}

void engine_cancel(engine *e, const char *sku, struct engine_cancel *x, engine_done_fn fn,
                   void *arg)
{
    struct ord *o = ord_new(e, fn, arg, on_adjust_start);
    snprintf(o->sku, sizeof o->sku, "%s", sku);
    x->code = -2;
    x->applied = false;
    x->record = NULL;
    o->cx = x;
}
