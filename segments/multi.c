/* multi.c -- several segments at once: a set of locks in ascending order, and an order
 * placed in parts. */
#include <stdlib.h>

#include "segments/engine_internal.h"
#include "segments/record.h"
#include "segments/ring.h"
#include "base/xalloc.h"

bool multi_svc(const struct ord *o)
{
    /* An admin write takes the store's locks whatever the SKU's (spread.c). */
    return o->view.cfg.mode == SKU_MODE_LOCK && o->view.cfg.lock != SKU_LOCK_STORE &&
           !ord_admin_locks(o);
}

/* The service's holds of mseg[0..mk) given back, each segment's claim on this loop
 * once the service answered (lease.c). */
static void multi_svc_release(struct ord *o)
{
    lease_stop(o);
    for (int k = 0; k < o->mk; k++) {
        lease_svc_give(o, o->mlh[k], o->mseg[k]);
        o->mlh[k] = NULL;
    }
    o->mk = 0;
}

static void multi_release(struct ord *o)
{
    if (multi_svc(o)) {
        multi_svc_release(o);
        return;
    }
    for (int k = 0; k < o->mk; k++) {
        STORE_CALL(o->e->st, release, o->placed, o->mseg[k], o->mtok[k], NULL, NULL);
        ltab_unclaim(o->s, o->mseg[k]);
    }
    o->mk = 0;
}

/* The locks of a multi-segment order or a spread could not all be had: give back
 * those taken. A spread gives way to the order (it goes on with its round); an
 * order ends with `st`. */
void multi_give_up(struct ord *o, inv_status st)
{
    bool spreading = o->state == ORD_SPREAD;
    multi_release(o);
    if (spreading)
        ltab_rebalance_end(o->s);
    if (spreading && st != INV_UNAVAILABLE)
        ord_enter(o, ORD_ROUND);
    else
        ord_finish(o, st);
}

void multi_unclaim(struct ord *o)
{
    if (multi_svc(o)) {
        multi_svc_release(o);
        return;
    }
    for (int k = 0; o->view.cfg.mode == SKU_MODE_LOCK && k < o->mn; k++)
        ltab_unclaim(o->s, o->mseg[k]);
    o->mk = 0;
}

/* A multi-segment order was refused with `code` and nothing of it stands: look again
 * (with what the refusal said), within the deadline. */
static void multi_failed(struct ord *o, int code)
{
    switch (code) {
    case STORE_STALE:
        ord_stale(o);
        return;
    case STORE_FENCED:
        stat_add(o->e->v, STAT_FENCED_REJECTIONS, 1);
        break;
    case STORE_SHORT:
        /* The plan came from hints, and the script's stocks did not update them:
         * they belong to a newer generation (a cancel or restock since this loop
         * read the settings). Read the settings again before another plan. */
        ltab_invalidate(o->s);
        break;
    default:
        break;
    }
    if (inv_now_ms() >= o->deadline_ms) { /* the deadline holds here too */
        verdict_begin(o);
        return;
    }
    ord_enter(o, ORD_VIEW); /* look again, with what the script saw */
}

static void on_multi(void *arg, int rc, struct store_reply *r, const long long *stocks)
{
    struct ord *o = arg;
    multi_unclaim(o);
    if (rc < 0) {
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    if (r->code == STORE_OK || r->code == STORE_SHORT)
        for (int k = 0; k < o->mn; k++)
            ord_note_stock(o, o->mseg[k], stocks[k]);
    switch (r->code) {
    case STORE_OK:
        stat_add(o->e->v, STAT_MULTI_SEGMENT, 1);
        o->res.record = o->record;
        o->record = NULL;
        o->res.segment = o->mseg[0];
        ord_finish(o, INV_OK);
        return;
    case STORE_EXISTS:
        ord_replayed(o, r->record);
        r->record = NULL;
        return;
    default:
        multi_failed(o, r->code);
    }
}

/* ---- several segments on a cluster ---------------------------------------------
 * No script spans the parts' slots. The order's intent comes first: its id in the
 * intents set, then its plan in the id's claim (claimed now if it had none); then
 * one deduction per part, all sent at once, each fenced by its lock and the claim's
 * end; then the record, which drops the claim and the plan. A part refused undoes
 * the plan (the parts that landed give their units back) before the order looks
 * again. A part without an answer leaves claim and plan for a retry with the id or
 * the sweeper to undo once the claim has run out (calls.h). */

static void on_multi_confirmed(void *arg, int rc, struct store_reply *r)
{
    struct ord *o = arg;
    if (rc < 0 || r->code != STORE_OK) { /* the record's outcome is unknown */
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    STORE_CALL(o->e->st, intent, o->res.order_id, false, NULL, NULL);
    stat_add(o->e->v, STAT_MULTI_SEGMENT, 1);
    o->res.segment = o->mseg[0];
    o->mplaced = true;
    ord_placed(o);
}

static void on_multi_undone(void *arg, int rc, int units)
{
    struct ord *o = arg;
    (void)units;
    if (rc < 0) {
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    /* Nothing of it stands: the claim (and the plan) given up, and the intent. */
    STORE_CALL(o->e->st, confirm, o->res.order_id, o->attempt, NULL, o->sku,
               o->view.epoch, NULL, NULL);
    o->claim_ok = false;
    STORE_CALL(o->e->st, intent, o->res.order_id, false, NULL, NULL);
    multi_failed(o, o->mcode);
}

static void multi_confirm(struct ord *o)
{
    STORE_CALL(o->e->st, confirm, o->res.order_id, o->attempt, o->record, o->sku,
               o->view.epoch, on_multi_confirmed, o);
}

/* Durability "replicated": the record only once a replica has every part, as for one
 * segment (engine.c): a record outliving a part that a failover of its segment's
 * master lost would answer the retry 200 for units never sold. A part no replica
 * has: 503 not_replicated with claim, plan and intent kept and no record, so the
 * retry (or the sweeper) finds the claim run out and undoes the plan. */
static void on_part_waited(void *arg, int rc, int replicas)
{
    struct ord *o = arg;
    if (rc < 0)
        o->mreplicas = -1;
    else if (replicas < o->mreplicas && o->mreplicas >= 0)
        o->mreplicas = replicas;
    if (--o->mwaits > 0)
        return;
    if (o->mreplicas < 1) {
        o->claim_ok = false; /* kept: not given up, the parts may stand */
        ord_finish(o, o->mreplicas < 0 ? INV_UNAVAILABLE : INV_NOT_REPLICATED);
        return;
    }
    o->seg_waited = true;
    multi_confirm(o);
}

static void multi_wait_parts(struct ord *o)
{
    o->mwaits = o->mn;
    o->mreplicas = 1 << 30;
    for (int k = 0, n = o->mn; k < n; k++)
        STORE_CALL(o->e->st, wait, o->placed, o->mseg[k], NULL,
                   o->e->v->opt.redis_timeout_ms / 2, on_part_waited, o);
}

static void on_part(void *arg, int rc, struct store_reply *r)
{
    struct part *p = arg;
    struct ord *o = p->o;
    if (rc < 0)
        o->mlost = true;
    else if (r->code == STORE_OK || r->code == STORE_SHORT)
        ord_note_stock(o, o->mseg[p->k], r->value);
    if (rc == 0 && r->code != STORE_OK &&
        (o->mcode == STORE_OK || r->code == STORE_STALE))
        o->mcode = r->code; /* STALE wins: the view is re-read */
    if (--o->mleft > 0)
        return;
    multi_unclaim(o);
    if (o->mlost)
        ord_finish(o, INV_UNAVAILABLE);
    else if (o->mcode == STORE_OK && o->view.cfg.replicated)
        multi_wait_parts(o);
    else if (o->mcode == STORE_OK)
        multi_confirm(o);
    else if (inv_now_ms() >= o->claim_ends_ms - CLAIM_MARGIN_MS)
        /* The claim may be another's by now, and what the id holds in a segment its
         * parts: the undo is for whoever holds the claim next. */
        ord_finish(o, INV_UNAVAILABLE);
    else if (STORE_CALL(o->e->st, undo, o->res.order_id, o->mplan, on_multi_undone, o) !=
             0)
        ord_finish(o, INV_UNAVAILABLE);
}

/* Every part at once, each in its own slot. */
static void multi_parts(struct ord *o)
{
    free(o->mctx);
    o->mctx = seg_malloc(sizeof *o->mctx * (size_t)o->mn);
    o->mleft = o->mn;
    o->mcode = STORE_OK;
    o->mlost = false;
    bool locked = o->view.cfg.mode == SKU_MODE_LOCK, svc = multi_svc(o);
    for (int k = 0; k < o->mn; k++) {
        o->mctx[k] = (struct part){o, k};
        STORE_CALL(o->e->st, deduct_part, o->placed, o->view.epoch, o->mseg[k],
                   locked ? o->mtok[k] : "", svc ? o->mfence[k] : STORE_NO_FENCE,
                   o->res.order_id, o->mpart[k], o->until - CLAIM_MARGIN_MS, k == 0,
                   on_part, &o->mctx[k]);
    }
}

static void on_intent(void *arg, int rc, int value)
{
    struct ord *o = arg;
    (void)value;
    if (rc < 0) {
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    o->mclaiming = true;
    claims_claim(o);
}

static void multi_deduct(struct ord *o)
{
    if (multi_svc(o) && o->lease_lost) {
        /* A hold lost meanwhile: the fenced write would be refused (it would only
         * pass where nobody was granted the lock since). Give the set back, look
         * again. */
        multi_release(o);
        multi_failed(o, STORE_FENCED);
        return;
    }
    free(o->record);
    o->record = record_build(o->res.order_id, o->sku, o->qty, o->mn, o->mseg, o->mpart,
                             "confirmed");
    if (!(store_caps(o->e->st) & STORE_CAP_MULTI_ONE)) {
        multi_parts(o);
        return;
    }
    char attempt[33];
    ord_token(o->e, attempt);
    const char **tok = seg_malloc(sizeof *tok * (size_t)o->mn);
    for (int k = 0; k < o->mn; k++)
        tok[k] = o->view.cfg.mode == SKU_MODE_LOCK ? o->mtok[k] : "";
    const struct store_parts parts = {o->mn, o->mseg, o->mpart, tok,
                                      multi_svc(o) ? o->mfence : NULL};
    STORE_CALL(o->e->st, deduct_multi, o->placed, o->view.epoch, o->res.order_id,
               o->record, attempt, &parts, on_multi, o);
    free(tok);
}

/* A lock service's SKU: every hold of the set won, the SKU's hold_ms of work under
 * them, as one segment's order does (engine.c), then the fenced deduction. */
static void on_multi_hold_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    multi_deduct(arg);
}

static void multi_hold(struct ord *o)
{
    ord_arm(o, o->view.cfg.hold_ms, on_multi_hold_done);
}

/* ---- the set of locks ------------------------------------------------------------ */

static void on_multi_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    multi_lock_next(arg);
}

static void on_multi_locked(void *arg, int rc, int taken)
{
    struct ord *o = arg;
    int k = o->mk;
    if (rc < 0) {
        ltab_unclaim(o->s, o->mseg[k]);
        multi_give_up(o, INV_UNAVAILABLE);
        return;
    }
    if (taken) {
        stat_add(o->e->v, STAT_LOCK_ACQUIRED, 1);
        o->mk++;
        o->mround = 0;
        multi_lock_next(o);
        return;
    }
    ltab_unclaim(o->s, o->mseg[k]);
    stat_add(o->e->v, STAT_BUSY_SKIPS, 1);
    int left = (int)(o->deadline_ms - inv_now_ms());
    if (left <= 0) {
        multi_give_up(o, INV_BUSY);
        return;
    }
    ord_arm(o, ring_backoff_ms(o->mround++, ord_rnd(o->e, UINT32_MAX), left),
            on_multi_retry);
}

/* HOLD answered for the service's hold of mseg[mk]: its fence registered, on as the
 * store's lock taken; refused, the hold goes back and the set with it as the reply
 * says (a higher fence registered: busy, try again). */
static void on_multi_held(void *arg, int rc, struct store_reply *r)
{
    struct ord *o = arg;
    int k = o->mk;
    if (rc == 0 && r->code == STORE_OK) {
        o->mfence[k] = o->view.cfg.unfenced ? STORE_UNFENCED : r->fence;
        on_multi_locked(o, 0, 1);
        return;
    }
    lease_svc_give(o, o->mlh[k], -1);
    o->mlh[k] = NULL;
    if (rc < 0 || r->code == STORE_FENCED) {
        on_multi_locked(o, rc, 0);
        return;
    }
    ltab_unclaim(o->s, o->mseg[k]);
    if (r->code == STORE_SHORT)
        ord_note_stock(o, o->mseg[k], r->value);
    if (o->state == ORD_SPREAD && r->code != STORE_STALE) {
        multi_give_up(o, INV_BUSY); /* the spread gives way to the order's round */
        return;
    }
    if (o->state == ORD_SPREAD) {
        multi_release(o);
        ltab_rebalance_end(o->s);
        ord_stale(o);
        return;
    }
    multi_release(o);
    switch (r->code) {
    case STORE_EXISTS:
        ord_replayed(o, r->record);
        r->record = NULL;
        return;
    case STORE_STALE:
        ord_stale(o);
        return;
    default: /* SHORT, MISSING: the plan is behind the stock; look again */
        multi_failed(o, r->code);
    }
}

/* The service answered for mseg[mk]: won, the store registers the hold's fence
 * (HOLD of the part's units); busy or no answer, as the store's lock. */
static void on_multi_svc(void *arg, int rc, lks_hold *h)
{
    struct ord *o = arg;
    engine *e = o->e;
    int k = o->mk;
    if (rc != LKS_OK) {
        on_multi_locked(o, rc == LKS_BUSY ? 0 : -1, 0);
        return;
    }
    o->mlh[k] = h;
    lease_svc_watch(o, h);
    long long fence =
        (e->lks_ops[o->lk]->caps & LKS_CAP_FENCES) ? (long long)h->fence : 0;
    STORE_CALL(e->st, hold, o->placed, o->view.epoch, o->mseg[k], o->res.order_id,
               o->mpart[k], fence, on_multi_held, o);
}

/* Lock segment mseg[mk], whose claim this order holds. */
static void multi_lock_send(struct ord *o)
{
    int i = o->mseg[o->mk];
    if (multi_svc(o)) {
        o->mtok[o->mk][0] = '\0'; /* the writes name the fence, not a token */
        stat_add(o->e->v, STAT_LOCK_ATTEMPTS, 1);
        lease_svc_acquire(o, i, on_multi_svc);
        return;
    }
    ord_token(o->e, o->mtok[o->mk]);
    stat_add(o->e->v, STAT_LOCK_ATTEMPTS, 1);
    STORE_CALL(o->e->st, lock, o->placed, i, o->mtok[o->mk], o->e->v->opt.lock_ttl_ms,
               on_multi_locked, o);
}

static void on_multi_claimed(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ord *o = arg;
    if (o->mhanded >= 0 && o->mhanded == o->mseg[o->mk])
        multi_lock_send(o);
    else
        multi_lock_next(o); /* told to look again */
}

/* The claim of the segment this order waits for, handed over (or -1: look again);
 * called from inside another order's step, so the lock goes out on the next turn. */
static void on_multi_handed(struct lwait *w, int seg)
{
    struct ord *o = ord_of_wait(w);
    o->waiting = false;
    o->mhanded = seg;
    ord_arm(o, 0, on_multi_claimed);
}

/* The wait for a claim ran out: look once more (the deadline decides). */
static void on_multi_wait_over(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ord *o = arg;
    if (o->waiting)
        ltab_unwait(o->s, &o->wait);
    o->waiting = false;
    multi_lock_next(o);
}

/* Lock the next segment of the set (ascending order: no deadlock), then deduct (or
 * spread). A segment claimed by another order of this loop is waited for: its claim
 * comes to this order first when given back (ltab_unclaim). */
void multi_lock_next(struct ord *o)
{
    if (o->mk == o->mn) {
        o->mlocked(o);
        return;
    }
    int i = o->mseg[o->mk];
    if (ltab_claim(o->s, i)) {
        multi_lock_send(o);
        return;
    }
    int left = (int)(o->deadline_ms - inv_now_ms());
    if (left <= 0) {
        multi_give_up(o, INV_BUSY);
        return;
    }
    o->mhanded = -1;
    o->waiting = true;
    o->wait.seg = i;
    o->wait.handed = on_multi_handed;
    ltab_wait(o->s, &o->wait);
    ord_arm(o, left, on_multi_wait_over);
}

void multi_alloc(struct ord *o)
{
    const int n = o->n;
    free(o->mseg);
    free(o->mpart);
    free(o->mtok);
    free(o->mlh);
    free(o->mfence);
    o->mseg = seg_malloc(sizeof *o->mseg * (size_t)n);
    o->mpart = seg_malloc(sizeof *o->mpart * (size_t)n);
    o->mtok = seg_calloc((size_t)n, sizeof *o->mtok);
    o->mlh = seg_calloc((size_t)n, sizeof *o->mlh);
    o->mfence = seg_calloc((size_t)n, sizeof *o->mfence);
    o->mk = 0;
    o->mround = 0;
}

/* ---- an order in parts ----------------------------------------------------------- */

/* The plan is known (and on a cluster recorded): lock the parts, or deduct. */
void multi_go(struct ord *o)
{
    ord_set(o, ORD_MULTI);
    o->mlocked = multi_deduct;
    if (multi_svc(o)) {
        if (!lease_svc_ready(o)) {
            ord_finish(o, INV_UNAVAILABLE);
            return;
        }
        lease_start(o); /* renews the set's holds every ttl/3; lease_lost from now */
        if (o->view.cfg.hold_ms > 0)
            o->mlocked = multi_hold;
    }
    if (o->view.cfg.mode == SKU_MODE_LOCK)
        multi_lock_next(o);
    else
        multi_deduct(o);
}

/* No segment holds qty but together they may: the largest first, in index order. */
void multi_begin(struct ord *o)
{
    const int n = o->n;
    multi_alloc(o);
    int k = ring_plan_parts(o->seen, n, o->qty, o->mseg, o->mpart);
    if (k == 0) {
        verdict_begin(o);
        return;
    }
    o->mn = k;
    ord_set(o, ORD_MULTI);
    if (!(store_caps(o->e->st) & STORE_CAP_MULTI_ONE)) { /* the intent first */
        const struct store_parts parts = {k, o->mseg, o->mpart, NULL, NULL};
        free(o->mplan);
        o->mplan = STORE_CALL(o->e->st, plan_build, o->placed, o->view.epoch, &parts);
        STORE_CALL(o->e->st, intent, o->res.order_id, true, on_intent, o);
        return;
    }
    multi_go(o);
}
