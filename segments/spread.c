/* spread.c -- the automatic rebalance: every segment of a SKU locked, then ADJUST
 * "spread". */
#include <stdlib.h>

#include "segments/engine_internal.h"
#include "segments/skutab.h"
#include "segments/sweeper.h"
#include "base/xalloc.h"

/* The ADJUST script evened the stock out (and released the locks) or refused. */
static void on_spread(void *arg, int rc, struct store_reply *r)
{
    struct ord *o = arg;
    if (rc < 0) {
        multi_give_up(o, INV_UNAVAILABLE);
        return;
    }
    for (int k = 0; k < o->mn; k++)
        ltab_unclaim(o->s, o->mseg[k]); /* the script released the locks */
    o->mk = 0;
    ltab_rebalance_end(o->s);
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

static void spread_apply(struct ord *o)
{
    const char **tok = seg_malloc(sizeof *tok * (size_t)o->mn);
    for (int k = 0; k < o->mn; k++)
        tok[k] = o->mtok[k];
    STORE_CALL(o->e->st, adjust, o->placed, o->view.epoch, o->mn, tok, "spread", 0,
               SKU_STOCK_MAX, NULL, "", on_spread, o);
    free(tok);
}

/* The automatic rebalance, once per generation per loop, by the order that finds it
 * due (mode lock, most segments seen empty, stock left): every segment locked in
 * index order, then ADJUST "spread", so the end of a sale keeps every segment
 * working. The order goes on once it is done. On a cluster the spread is steps over
 * the segments' slots: the sweeper thread runs it (sweeper.h), and the order goes on
 * at once. */
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
    multi_alloc(o);
    for (int i = 0; i < n; i++)
        o->mseg[i] = i;
    o->mn = n;
    ord_set(o, ORD_SPREAD);
    o->mlocked = spread_apply;
    multi_lock_next(o);
    return true;
}
