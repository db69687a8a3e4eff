/* claims.c -- a Redis Cluster: an order id's claim in its slot, and taking a dead one
 * over. */
#include <stdlib.h>

#include "segments/engine_internal.h"
#include "segments/record.h"

static void on_claim(void *arg, int rc, struct store_reply *r);

void claims_claim(struct ord *o)
{
    engine *e = o->e;
    int lease = e->v->opt.lock_wait_ms + o->view.cfg.hold_ms +
                2 * e->v->opt.redis_timeout_ms + CLAIM_SLACK_MS;
    const char *plan = o->dplan != NULL ? STORE_PLAN_KEEP
                       : o->mclaiming   ? o->mplan
                                        : NULL;
    o->claim_ends_ms = inv_now_ms() + lease;
    ord_set(o, ORD_CLAIM);
    STORE_CALL(e->st, claim, o->res.order_id, o->attempt, o->sku, o->view.epoch, lease,
               o->dead, plan, o->dead_epoch, on_claim, o);
}

static void on_claim_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    claims_claim(arg);
}

static void on_recovered(void *arg, int rc, struct store_reply *r)
{
    struct ord *o = arg;
    if (rc < 0 || r->code != STORE_OK) {
        ord_finish(o, rc < 0 ? INV_UNAVAILABLE : INV_BUSY);
        return;
    }
    o->claim_ok = false; /* the id has its record now */
    char *record = o->recovered;
    o->recovered = NULL;
    ord_replayed(o, record);
}

/* Where the order of a dead claim went: its record is written from the segment
 * that holds it (the same record its own CONFIRM would have written), or, when no
 * segment does, the id is claimed afresh. Either way the dead claim is taken over
 * first: its attempt can no longer deduct (deduct_slot.lua refuses past its end). */
static void on_found(void *arg, int rc, int seg, long long qty)
{
    struct ord *o = arg;
    if (rc < 0) {
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    if (seg >= 0) {
        o->found_seg = seg;
        o->recovered =
            record_build(o->res.order_id, o->sku, qty, 1, &seg, &qty, "confirmed");
    }
    claims_claim(o);
}

/* The plan of a dead multi-segment claim, undone under the claim taken over: the id
 * is claimed again without it, and the order placed afresh. */
static void on_dead_undone(void *arg, int rc, int units)
{
    struct ord *o = arg;
    (void)units;
    if (rc < 0) { /* the claim keeps the plan: whoever holds it next undoes it */
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    free(o->dplan);
    o->dplan = NULL;
    claims_claim(o);
}

/* The id is ours: go on with what the claim was for. */
static void claimed(struct ord *o)
{
    engine *e = o->e;
    if (o->dplan != NULL) {
        if (STORE_CALL(e->st, undo, o->res.order_id, o->dplan, on_dead_undone, o) != 0)
            ord_finish(o, INV_UNAVAILABLE); /* not a plan: left for an operator */
    } else if (o->mclaiming) {
        o->mclaiming = false;
        ord_enter(o, ORD_MULTI);
    } else if (o->recovered != NULL)
        STORE_CALL(e->st, confirm, o->res.order_id, o->attempt, o->recovered, o->sku,
                   o->view.epoch, on_recovered, o);
    else
        ord_enter(o, ORD_ROUND);
}

/* Durability "replicated": the claim is on a replica before anything is sold under
 * it. A failover that lost it would lose with it the trace of a deduction whose
 * record was lost too, and a retry would sell again; a claim that survives makes
 * the retry look in the segments (CLAIM answers MISSING once it has run out). The
 * claim of a multi-segment order holds its plan, which is how a retry or the
 * sweeper undoes parts without a record: it is WAITed for too. (A claim that takes
 * a dead one over, to undo its plan or to write its record, is not given up when
 * this fails: it holds what it must finish; it does not WAIT.) */
static void on_claim_waited(void *arg, int rc, int replicas)
{
    struct ord *o = arg;
    if (rc < 0)
        ord_finish(o, INV_UNAVAILABLE);
    else if (replicas < 1) { /* nothing sold: the claim (and the plan) given up */
        if (o->mclaiming)
            STORE_CALL(o->e->st, intent, o->res.order_id, false, NULL, NULL);
        o->mclaiming = false;
        ord_finish(o, INV_NOT_REPLICATED);
    } else
        claimed(o);
}

static void on_claim(void *arg, int rc, struct store_reply *r)
{
    struct ord *o = arg;
    engine *e = o->e;
    if (rc < 0) {
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    switch (r->code) {
    case STORE_OK:
        o->claim_ok = true;
        o->until = r->value;
        free(o->dead);
        o->dead = NULL;
        /* Replicated, a claim for a sale (the others hold what they undo): WAIT. */
        if (o->view.cfg.replicated && o->dplan == NULL && o->recovered == NULL)
            STORE_CALL(e->st, wait, o->placed, -1, o->res.order_id,
                       e->v->opt.redis_timeout_ms / 2, on_claim_waited, o);
        else
            claimed(o);
        return;
    case STORE_EXISTS:
        ord_replayed(o, r->record);
        r->record = NULL;
        return;
    case STORE_STALE:
        /* A record of another epoch: one a reset left behind, or one of a newer sale
         * than these settings (a reset since they were read). Read them again; the
         * next CLAIM then replays the record of their epoch, or names this one dead.
         * Before, a record of another epoch counted as dead at once: an order whose
         * settings were older than the record deleted it and sold a second time. */
        o->dead_epoch = r->value;
        ord_stale(o);
        return;
    case STORE_BUSY: /* the same id in flight elsewhere: its answer will be ours */
        if (inv_now_ms() + 20 < o->deadline_ms)
            ord_arm(o, 20, on_claim_retry);
        else
            ord_finish(o, INV_BUSY);
        return;
    case STORE_MISSING: /* a claim that ran out with no record */
        free(o->dead);
        o->dead = r->record;
        r->record = NULL;
        if (r->plan != NULL && r->plan[0] != '\0') { /* a multi-segment order's */
            free(o->dplan);
            o->dplan = r->plan;
            r->plan = NULL;
            claims_claim(o);
            return;
        }
        STORE_CALL(e->st, find_order, o->placed, o->view.cfg.segments, o->res.order_id,
                   on_found, o);
        return;
    default:
        ord_finish(o, INV_UNAVAILABLE);
    }
}
