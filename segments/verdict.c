/* verdict.c -- sold out, insufficient or busy: said from fresh counts only. */
#include "segments/engine_internal.h"
#include "segments/ring.h"
#include "segments/skutab.h"
#include "base/clock.h"

/* ---- the verdict ----------------------------------------------------------------
 * A 409 is said from fresh counts only: every segment's stock read, then the meta,
 * and only while the meta still has the order's generation and no adjust under way.
 * What hints and replies said may be older than that: on a cluster an adjust (a
 * restock, a rebalance, the automatic spread) takes units out of segments and gives
 * them to others a step later, all in one generation, so units seen gone may be in
 * transit (adjust.h). Any adjust that moved units before the stocks were read has
 * either committed by the time the meta is read (a new generation) or is still
 * under way (its intent in the meta). Then the order waits for the commit and looks
 * again with the new generation's view, within lock_wait_ms; past it, 503 busy. A
 * verdict stands for the rest of its generation (skutab_loop_confirm), so a sold-out
 * SKU is answered without Redis after the first. */

#define CLOCK_MARGIN_MS 1000 /* the meta node's clock against ours */

static void on_verdict_wait(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ord *o = arg;
    ord_enter(o, ORD_VIEW); /* the settings were dropped: read again */
}

static void on_verdict_meta(void *arg, int rc, int found, const struct store_meta *m)
{
    struct ord *o = arg;
    if (rc < 0) {
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    if (!found) {
        ltab_invalidate(o->s);
        ord_finish(o, INV_UNKNOWN_SKU);
        return;
    }
    bool same = m->epoch == o->view.epoch && m->gen == o->view.gen && m->segments == o->n;
    /* a lease long over is a runner that died: its units wait for the next adjust */
    bool moving =
        m->adjust_until > 0 && m->adjust_until + CLOCK_MARGIN_MS > base_wall_ms();
    int left = (int)(o->deadline_ms - inv_now_ms());
    if (same && !moving && o->vtotal < o->qty) {
        if (ltab_shared(o->s) != NULL)
            skutab_loop_confirm(ltab_shared(o->s), o->view.gen, o->vtotal);
        ord_finish(o, o->vtotal == 0 ? INV_SOLD_OUT : INV_INSUFFICIENT);
        return;
    }
    if (left <= 0) {
        ord_finish(o, INV_BUSY);
        return;
    }
    if (same && !moving) { /* the stock is there: the hints were behind */
        ltab_set_hints(o->s, o->view.gen, o->seen, o->n);
        ord_enter(o, ORD_ROUND);
        return;
    }
    ltab_invalidate(o->s);
    if (!same) {
        ord_enter(o, ORD_VIEW);
        return;
    }
    ord_arm(o, ring_backoff_ms(o->remote_rounds++, ord_rnd(o->e, UINT32_MAX), left),
            on_verdict_wait);
}

static void on_verdict_stocks(void *arg, int rc, const long long *stock)
{
    struct ord *o = arg;
    if (rc < 0) {
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    o->vtotal = 0;
    for (int i = 0; i < o->n; i++) {
        o->seen[i] = stock[i];
        o->vtotal += stock[i];
    }
    STORE_CALL(o->e->st, meta_read, o->sku, on_verdict_meta, o);
}

/* Nothing found to fill the order (or the deadline came first): sold out,
 * insufficient or busy, from the counts. */
void verdict_begin(struct ord *o)
{
    ord_set(o, ORD_VERDICT);
    long long most = ord_confirmed(o->s, o->view.gen);
    if (most >= 0 && most < o->qty) {
        ord_finish(o, most == 0 ? INV_SOLD_OUT : INV_INSUFFICIENT);
        return;
    }
    STORE_CALL(o->e->st, stocks_read, o->placed, o->n, on_verdict_stocks, o);
}
