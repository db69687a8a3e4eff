/* turns.c -- group commit on a segment at home on several event loops: the loops take
 * turns on it; and the count of the holds an order waited through. */
#include "segments/engine_internal.h"
#include "segments/ring.h"
#include "segments/skutab.h"

/* A loop's orders ride its own holds only (batch.c). Without turns the loop that held
 * the segment last kept it -- its answered clients' next orders claimed it at once --
 * while the other loop's orders slept in backoff (up to RING_BACKOFF_MAX_MS, more
 * than a hold) and came back to find it taken again. */
bool turns_apply(const struct ord *o, int i)
{
    const engine *e = o->e;
    return e->homes > 1 && o->n < e->homes && o->view.cfg.hold_ms > 0 &&
           ltab_shared(o->s) != NULL && batch_gathers(o) &&
           ring_home(i, o->n, e->home, e->homes);
}

bool turns_yield(struct ord *o, int i)
{
    if (!turns_apply(o, i))
        return false;
    sku_local *sh = ltab_shared(o->s);
    int64_t now = inv_now_ms();
    if (ltab_claimed_elsewhere(o->s, i)) {
        skutab_loop_want(sh, i, o->e->home, now);
        o->turns++;
        return false;
    }
    /* Free, and our loop took it last while another loop's orders wait for it: theirs
     * is the next turn. (No want of ours noted: it would stand for theirs, and our
     * next order would take the segment back.) A want older than a hold is stale:
     * that loop's orders look again more often than that while they wait. */
    if (ltab_claimed(o->s, i) ||
        !skutab_loop_yields(sh, i, o->e->home, now, o->view.cfg.hold_ms))
        return false;
    stat_add(o->e->v, STAT_LOOP_YIELDS, 1);
    o->turns++;
    return true;
}

bool turns_give_way(struct ord *o, struct lwait *w)
{
    int i = o->seg;
    if (!turns_apply(o, i) || !skutab_loop_yields(ltab_shared(o->s), i, o->e->home,
                                                  inv_now_ms(), o->view.cfg.hold_ms))
        return false;
    if (w != NULL)
        ltab_wait_front(o->s, w);
    ltab_free_claim(o->s, i);
    stat_add(o->e->v, STAT_LOOP_YIELDS, 1);
    if ((w = ltab_next_holder(o->s, i)) != NULL)
        w->handed(w, -1);
    return true;
}

void turns_took(struct ord *o, int i)
{
    if (turns_apply(o, i))
        skutab_loop_took(ltab_shared(o->s), i, o->e->home);
}

int turns_backoff_round(const struct ord *o)
{
    int r = o->remote_rounds;
    if (o->turns > 0)
        while (r > 0 && (RING_BACKOFF_MIN_MS << r) > o->view.cfg.hold_ms / 2)
            r--;
    return r;
}

long long turns_hold_ended(const struct ord *o)
{
    sku_local *sh = ltab_shared(o->s);
    return sh != NULL ? skutab_holds(sh, 1) : -1;
}

void turns_waited(const struct ord *x, long long ended)
{
    if (ended < 0 || x->holds0 < 0 || ended <= x->holds0)
        return;
    long long waited = ended - 1 - x->holds0;
    stat_add(x->e->v, STAT_HOLDS_WAITED, waited);
    stat_max(x->e->v, STAT_HOLDS_WAITED_MAX, waited);
    if (waited > x->n)
        stat_add(x->e->v, STAT_ORDERS_WAITED_PAST, 1);
}
