/* handover.c -- a segment lock kept from one order of this loop to the next: the
 * store's own, with the DEDUCT that keeps it, or a lock service's hold. */
#include <string.h>

#include "segments/engine_internal.h"
#include "segments/ring.h"

/* Orders a lock may serve in a row, kept from one to the next. */
#define KEEP_MAX 16
/* The same away from the loop's home: then the segment goes back free, for the loop
 * it is at home on (kept longer, the other loops' orders waited: p99 up to 2x). */
#define KEEP_AWAY_MAX 3

/* The lock held by `o` goes on to `w`, the next order of this loop waiting for the
 * segment, with the DEDUCT that leaves it held (keep): `w` starts its hold at once,
 * without a round trip for an ACQUIRE. Its own DEDUCT waits for ours to answer
 * (handover_settle): only an OK leaves the lock held. Both are fenced by the same
 * token; the lease goes on being renewed by the holder. */
bool handover_may_keep(const struct ord *o, const struct ord *w)
{
    const engine *e = o->e;
    int most = ring_home(o->seg, o->n, e->home, e->homes) ? KEEP_MAX : KEEP_AWAY_MAX;
    return (store_caps(e->st) & STORE_CAP_KEEP) && o->keeps < most &&
           inv_now_ms() - o->lock_ms < e->v->opt.lock_ttl_ms / 3 &&
           w->view.cfg.hold_ms > 0 && o->seg < w->n && w->pred == NULL;
}

/* A lock service's hold goes on to `w` only while it is surely ours for w's whole
 * hold: not lost, its last renewal answered OK (none out: its answer would go to o),
 * valid past w's hold by a quarter of the lease (w's DEDUCT's round trip, a renewal
 * late by a whole period), and taken for the same SKU settings (service, fencing,
 * epoch) w read. */
bool handover_svc_may_keep(const struct ord *o, const struct ord *w)
{
    const lks_hold *h = o->lh;
    const struct sku_config *c = &w->view.cfg;
    if (h == NULL || o->lease_lost || o->renew_failed || o->renewing > 0 ||
        o->keeps >= KEEP_MAX || w->pred != NULL || o->seg >= w->n || c->hold_ms <= 0 ||
        c->mode != SKU_MODE_LOCK || c->lock != o->view.cfg.lock ||
        c->unfenced != o->view.cfg.unfenced || w->view.epoch != o->view.epoch)
        return false;
    long long left = h->valid_until_ms - inv_now_ms();
    return left > (long long)c->hold_ms + o->e->v->opt.lock_ttl_ms / 4;
}

/* w takes o's segment over, in HOLD: out of the queue, its round as if it had
 * started at the segment and taken it. */
static void take_over(struct ord *o, struct ord *w)
{
    engine *e = o->e;
    ord_set(w, ORD_HOLD);
    w->waiting = false; /* ltab_next_holder took it out of the queue */
    event_del(w->timer);
    w->seg = o->seg;
    w->lock_ms = o->lock_ms;
    w->keeps = o->keeps + 1;
    w->pred = o;
    o->succ = w;
    w->hold_over = false;
    w->handed = -1;
    ord_round_reset(w, ring_start(w->seg, w->n, e->home, e->homes), 1);
    stat_add(e->v, STAT_LOCK_HANDED_ON, 1);
    stat_observe(e->v, HIST_LOCK_WAIT, (inv_now_ms() - w->started_ms) * 1000);
}

void handover_pass(struct ord *o, struct ord *w,
                   void (*on_hold_done)(evutil_socket_t, short, void *))
{
    take_over(o, w);
    memcpy(w->token, o->token, sizeof w->token);
    lease_start(w);
    ord_arm(w, w->view.cfg.hold_ms, on_hold_done);
}

void handover_svc_pass(struct ord *o, struct ord *w,
                       void (*on_hold_done)(evutil_socket_t, short, void *))
{
    take_over(o, w);
    lease_svc_pass(o, w);
    ord_arm(w, w->view.cfg.hold_ms, on_hold_done);
}

/* A lock service's hold went on from o: its DEDUCT's answer changes nothing for the
 * hold, but FENCED says another holder's fence is registered above ours (the service
 * granted the lock again): whoever holds it now gives it up at its hold's end. */
static void settle_svc(struct ord *w, int rc, const struct store_reply *r)
{
    if (rc == 0 && r->code == STORE_FENCED)
        for (struct ord *p = w; p != NULL; p = p->succ)
            p->lease_lost = true;
}

/* Our DEDUCT (keep) answered: the order the lock went on to may go on with it, or,
 * when the script let it go (or the answer was lost: then let go of it here),
 * takes the segment again the usual way, with an ACQUIRE. */
void handover_settle(struct ord *o, int rc, const struct store_reply *r,
                     void (*on_hold_done)(evutil_socket_t, short, void *),
                     void (*on_round_timer)(evutil_socket_t, short, void *))
{
    struct ord *w = o->succ;
    if (w == NULL)
        return;
    o->succ = NULL;
    w->pred = NULL;
    if (o->view.cfg.lock != SKU_LOCK_STORE) {
        settle_svc(w, rc, r);
        return;
    }
    if (rc == 0 && r->code == STORE_OK) {
        if (w->hold_over)
            ord_arm(w, 0, on_hold_done);
        return;
    }
    if (rc < 0)
        STORE_CALL(o->e->st, release, o->placed, o->seg, o->token, NULL, NULL);
    lease_stop(w);
    w->handed = w->seg; /* still claimed here */
    ord_set(w, ORD_ROUND);
    ord_arm(w, 0, on_round_timer);
}
