/* engine.c -- the order path on an event loop: settings, rounds, one segment
 * (engine_internal.h). */
#include "segments/engine.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "segments/engine_internal.h"
#include "segments/record.h"
#include "segments/ring.h"
#include "segments/skutab.h"
#include "base/text.h"
#include "base/xalloc.h"

static void proceed(struct ord *o);
static void round_begin(struct ord *o);
static void on_handed(struct lwait *w, int seg);
static void visit_next(struct ord *o);
static void on_round_timer(evutil_socket_t fd, short what, void *arg);
static void on_hold_done(evutil_socket_t fd, short what, void *arg);

/* ---- settings -------------------------------------------------------------------- */

static void on_meta(void *arg, int rc, int found, const struct store_meta *m)
{
    struct ord *o = arg;
    if (rc < 0) {
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    struct sku_view v;
    if (!found || skutab_view_of(m, &v) != 0) {
        ltab_gone(o->s, o->e->v);
        ord_finish(o, INV_UNKNOWN_SKU);
        return;
    }
    ltab_read(o->e->tab, o->s, o->e->v, &v, inv_now_ms());
    o->view = v;
    proceed(o);
}

/* Another thread of this process changed a SKU (an admin write, a cancel): drop
 * every cached view, as the thread that did it dropped its own. */
static void sync_changes(engine *e)
{
    ltab_sync(e->tab, atomic_load_explicit(&e->v->changes, memory_order_acquire));
}

static void view(struct ord *o)
{
    engine *e = o->e;
    ord_set(o, ORD_VIEW);
    sync_changes(e);
    int64_t now = inv_now_ms();
    if (o->s == NULL)
        o->s = ltab_hold(e->tab, o->sku); /* until the order is freed */
    if (ltab_fresh(o->s, now, e->v->opt.meta_cache_ms)) {
        o->view = *ltab_view(o->s);
        proceed(o);
        return;
    }
    /* Every order that finds the settings old reads them: one that went on with old
     * ones while Redis hangs would send its ACQUIRE into the hang, and the lock it
     * takes when Redis wakes would stay until its TTL. */
    STORE_CALL(e->st, meta_read, o->sku, on_meta, o);
}

/* Settings known: on a cluster an order with a client id claims the id first. */
static void proceed(struct ord *o)
{
    store_sku_placed(o->placed, o->sku, o->view.salt);
    if (o->adj != NULL) { /* an admin adjust (spread.c) */
        adjust_begin(o);
        return;
    }
    if (o->cx != NULL) { /* an order's cancel (spread.c) */
        cancel_begin(o);
        return;
    }
    if ((store_caps(o->e->st) & STORE_CAP_RECORD_APART) && o->has_id && !o->claim_ok) {
        claims_claim(o);
        return;
    }
    round_begin(o);
}

/* ---- one segment ----------------------------------------------------------------- */

static void short_of_stock(struct ord *o, int i, long long stock, bool known)
{
    stat_add(o->e->v, STAT_FALL_THROUGHS, 1);
    o->seen[i] = known ? stock : 0;
    if (known)
        ord_note_stock(o, i, stock);
    if (stock > 0)
        o->stock_left = true;
}

/* A cluster: the record of a deduction that was OK. No answer: the outcome is
 * unknown to the client, and the claim stays for a retry to settle. */
static void on_confirmed(void *arg, int rc, struct store_reply *r)
{
    struct ord *o = arg;
    if (rc < 0 || r->code != STORE_OK) {
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    ord_placed(o);
}

static void confirm(struct ord *o)
{
    STORE_CALL(o->e->st, confirm, o->res.order_id, o->attempt, o->record, o->sku,
               o->view.epoch, on_confirmed, o);
}

/* Durability "replicated", a client's id on a cluster: the record goes only once a
 * replica has the sale. A record on the id's node outliving a sale that a failover
 * of the segment's node lost would answer the retry 200 for units never sold. No
 * replica: 503 not_replicated, the claim kept and no record written, so the retry
 * waits for the claim to run out and looks in the segments (claims.c): the sale
 * found -> its record (WAITed for there); lost -> sold afresh. */
static void on_deduct_waited(void *arg, int rc, int replicas)
{
    struct ord *o = arg;
    if (rc < 0) {
        ord_finish(o, INV_UNAVAILABLE); /* the claim kept */
        return;
    }
    if (replicas < 1) {
        o->claim_ok = false; /* kept: not given up, the sale may stand */
        ord_finish(o, INV_NOT_REPLICATED);
        return;
    }
    o->seg_waited = true;
    confirm(o);
}

static void on_deduct(void *arg, int rc, struct store_reply *r)
{
    struct ord *o = arg;
    int i = o->seg;
    bool pipelined = o->pipelined;
    o->pipelined = false;
    handover_settle(o, rc, r, on_hold_done, on_round_timer);
    lease_stop(o);     /* the segment's claim went on with the DEDUCT (on_hold_done) */
    if (o->lh != NULL) /* the claim goes back once the service let the lock go */
        lease_svc_release(o, true);
    if (rc < 0) {
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    switch (r->code) {
    case STORE_OK:
        ord_note_stock(o, i, r->value);
        o->res.segment = i;
        if (o->confirm) { /* the record, in the id's slot */
            ord_set(o, ORD_PLACED);
            if (o->view.cfg.replicated) { /* the sale on a replica first */
                STORE_CALL(o->e->st, wait, o->placed, i, NULL,
                           o->e->v->opt.redis_timeout_ms / 2, on_deduct_waited, o);
                return;
            }
            confirm(o);
            return;
        }
        ord_placed(o);
        return;
    case STORE_FENCED: /* pipelined: the lock was held elsewhere, nothing was tried */
        stat_add(o->e->v, pipelined ? STAT_BUSY_SKIPS : STAT_FENCED_REJECTIONS, 1);
        o->busy++;
        break;
    case STORE_STALE:
        ord_stale(o);
        return;
    case STORE_EXISTS:
        ord_replayed(o, r->record);
        r->record = NULL;
        return;
    default:
        short_of_stock(o, i, r->value, r->code == STORE_SHORT);
    }
    visit_next(o);
}

/* The lock that went out with the DEDUCT. Its reply comes first on one connection;
 * on a cluster a redirect or a retry can put it after the DEDUCT's, so the order
 * counts it as owed (`pending`) and outlives its answer for it. */
static void on_piped_lock(void *arg, int rc, int taken)
{
    struct ord *o = arg;
    o->pending--;
    if (rc == 0 && taken) {
        stat_add(o->e->v, STAT_LOCK_ACQUIRED, 1);
        stat_observe(o->e->v, HIST_LOCK_WAIT, (inv_now_ms() - o->started_ms) * 1000);
    }
    if (o->state == ORD_DONE && o->pending == 0)
        ord_finish(o, o->res.status); /* frees it */
}

static void send_deduct(struct ord *o, const char *token, bool keep)
{
    ord_set(o, ORD_DEDUCT);
    if (!o->has_id && !o->claim_ok) /* a fresh id: made for the segment's slot */
        STORE_CALL(o->e->st, id_for_segment, o->placed, o->seg, o->res.order_id);
    free(o->record);
    o->record =
        record_build(o->res.order_id, o->sku, o->qty, 1, &o->seg, &o->qty, "confirmed");
    /* The attempt is the token of the lock it took, or its own once the lock was
     * passed on to it: the token is then the first holder's, and DEDUCT takes a
     * record of its own attempt for its own (a duplicate of that order would answer
     * 201 too). */
    char attempt[33];
    if (token[0] != '\0' && o->keeps == 0)
        text_copy(attempt, sizeof attempt, token);
    else
        ord_token(o->e, attempt);
    long long until = o->claim_ok ? o->until - CLAIM_MARGIN_MS : 0;
    /* The store's own lock: a renewal sent from now on runs after the DEDUCT on the
     * same connection, so it cannot help it, and finds the lock the DEDUCT let go
     * (counted as a lost lease). A lock service's lease is renewed until the answer:
     * it keeps another holder from a higher fence meanwhile. */
    if (o->lh == NULL)
        lease_stop(o);
    o->confirm =
        !STORE_CALL(o->e->st, deduct, o->placed, o->view.epoch, o->seg, token,
                    o->lh != NULL ? o->fence : STORE_NO_FENCE, attempt, o->res.order_id,
                    o->qty, o->record, until, keep, on_deduct, o);
}

/* Hold 0, mode lock: SET NX PX and the fenced DEDUCT in one write (visit_next). */
static void send_piped(struct ord *o)
{
    engine *e = o->e;
    ord_token(e, o->token);
    stat_add(e->v, STAT_LOCK_ATTEMPTS, 1);
    o->pipelined = true;
    o->pending++;
    STORE_CALL(e->st, lock, o->placed, o->seg, o->token, e->v->opt.lock_ttl_ms,
               on_piped_lock, o);
    send_deduct(o, o->token, false);
}

/* A group of one (batch.c): as if it had not waited for the turn. */
static void send_alone(struct ord *o)
{
    if (o->view.cfg.mode == SKU_MODE_LOCK)
        send_piped(o);
    else
        send_deduct(o, "", false);
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    batch_flush(arg, send_alone, on_deduct, on_piped_lock);
}

static void on_hold_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ord *o = arg;
    if (o->pred != NULL && o->lh == NULL) {
        /* the store's lock: its last DEDUCT has not answered, wait for it */
        o->hold_over = true;
        return;
    }
    if (o->lease_lost) { /* the fenced write would refuse us anyway */
        lease_stop(o);
        if (o->lh != NULL)
            lease_svc_release(o, false);
        stat_add(o->e->v, STAT_FENCED_REJECTIONS, 1);
        o->busy++;
        ord_unclaim(o, o->seg);
        visit_next(o);
        return;
    }
    /* The next order of this loop waiting for the segment takes the lock over as
     * the DEDUCT keeps it (handover_pass); or, when it cannot, the DEDUCT releases the
     * lock in Redis whatever it answers, so that order may send its ACQUIRE now,
     * behind it on the same connection, instead of a round trip later. (Should it get
     * there first after all, a redirect on a cluster, it is BUSY and looks
     * elsewhere.) */
    if (o->lh != NULL) {
        /* A lock service's hold goes on to the next order of this loop waiting for
         * the segment while it is surely still ours (handover_svc_may_keep): that
         * order skips the service's ACQUIRE and the store's HOLD, the fence
         * registered at the grant standing for both; its DEDUCT names that fence.
         * Otherwise the claim goes back once the service let the lock go. */
        struct lwait *w = ltab_next_holder(o->s, o->seg);
        struct ord *next = w != NULL && w->handed == on_handed ? ord_of_wait(w) : NULL;
        send_deduct(o, "", false);
        if (next != NULL && handover_svc_may_keep(o, next))
            handover_svc_pass(o, next, on_hold_done);
        else if (w != NULL) /* back in line first: the claim finds it on release */
            ltab_wait_front(o->s, w);
        return;
    }
    long long ended = turns_hold_ended(o);
    turns_waited(o, ended);
    struct lwait *w = NULL;
    if (o->view.cfg.batch > 1 && !o->claim_ok &&
        (store_caps(o->e->st) & STORE_CAP_BATCH)) {
        /* Group commit: the orders queued here for the segment ride on this hold. */
        struct ord **m;
        int n = batch_gather(o, on_handed, &m, &w);
        for (int k = 0; k < n; k++)
            turns_waited(m[k], ended);
        if (n > 0) {
            batch_send(o, m, n, on_deduct);
            if (turns_give_way(o, w))
                return;
            if (w != NULL)
                w->handed(w, o->seg);
            else /* the next in line (the batch may have stopped at the stock) */
                ltab_unclaim(o->s, o->seg);
            return;
        }
        free(m);
    }
    /* Away from home, a waiter for any segment takes the lock over only as it goes
     * on held (ltab_next_keeper): released, the segment goes back free. */
    bool home = ring_home(o->seg, o->n, o->e->home, o->e->homes);
    if (w == NULL)
        w = home ? ltab_next_holder(o->s, o->seg) : ltab_next_keeper(o->s, o->seg);
    struct ord *next = w != NULL && w->handed == on_handed ? ord_of_wait(w) : NULL;
    if (next != NULL && !handover_may_keep(o, next))
        next = NULL;
    send_deduct(o, o->token, next != NULL);
    if (next != NULL) {
        handover_pass(o, next, on_hold_done);
        return;
    }
    if (w != NULL && !home && w->seg != o->seg) {
        ltab_wait_front(o->s, w); /* not handed on: back in line, the claim freed */
        w = NULL;
    }
    if (w != NULL)
        w->handed(w, o->seg);
    else
        ltab_free_claim(o->s, o->seg); /* nobody waits: no need to look again */
}

static void on_acquire(void *arg, int rc, struct store_reply *r);

/* HOLD answered: the fence registered for the service's hold, or the hold let go
 * (the segment is short, the SKU stale, ...), then on as ACQUIRE's answer. */
static void on_held(void *arg, int rc, struct store_reply *r)
{
    struct ord *o = arg;
    if (rc == 0 && r->code == STORE_OK)
        o->fence = o->view.cfg.unfenced ? STORE_UNFENCED : r->fence;
    else
        lease_svc_release(o, false);
    on_acquire(arg, rc, r);
}

/* The lock service answered: a hold is registered with the store (its fence, or
 * one the store issues); BUSY looks elsewhere as the store's BUSY does. */
static void on_svc_acquired(void *arg, int rc, lks_hold *h)
{
    struct ord *o = arg;
    engine *e = o->e;
    if (rc == LKS_OK) {
        lease_svc_hold(o, h);
        long long fence =
            (e->lks_ops[o->lk]->caps & LKS_CAP_FENCES) ? (long long)h->fence : 0;
        STORE_CALL(e->st, hold, o->placed, o->view.epoch, o->seg, o->res.order_id, o->qty,
                   fence, on_held, o);
        return;
    }
    ord_unclaim(o, o->seg);
    if (rc == LKS_BUSY) {
        stat_add(e->v, STAT_BUSY_SKIPS, 1);
        o->busy++;
        visit_next(o);
        return;
    }
    ord_finish(o, INV_UNAVAILABLE);
}

/* ACQUIRE of a SKU whose lock is a lock service's: one try (wait 0), so a busy
 * segment falls through as the store's BUSY does. A process without that service
 * (or a store that cannot fence) answers 503. */
static void svc_acquire(struct ord *o)
{
    if (!lease_svc_ready(o)) {
        ord_unclaim(o, o->seg);
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    lease_svc_acquire(o, o->seg, on_svc_acquired);
}

static void on_acquire(void *arg, int rc, struct store_reply *r)
{
    struct ord *o = arg;
    engine *e = o->e;
    int i = o->seg;
    if (rc < 0) {
        ord_unclaim(o, i);
        ord_finish(o, INV_UNAVAILABLE);
        return;
    }
    switch (r->code) {
    case STORE_OK:
        stat_add(e->v, STAT_LOCK_ACQUIRED, 1);
        stat_observe(e->v, HIST_LOCK_WAIT, (inv_now_ms() - o->started_ms) * 1000);
        o->seen[i] = r->value; /* what a batch may sell (batch.c) */
        ord_note_stock(o, i, r->value);
        lease_start(o);
        if (o->view.cfg.hold_ms > 0) {
            ord_set(o, ORD_HOLD);
            ord_arm(o, o->view.cfg.hold_ms, on_hold_done);
        } else
            send_deduct(o, o->lh != NULL ? "" : o->token, false);
        return;
    case STORE_FENCED: /* a lock service's grant older than one the store has seen */
        stat_add(e->v, STAT_FENCED_REJECTIONS, 1);
        o->busy++;
        break;
    case STORE_BUSY:
        ord_note_stock(o, i, r->value);
        stat_add(e->v, STAT_BUSY_SKIPS, 1);
        o->busy++;
        if (turns_apply(o, i)) /* the other loop's hold, let go a moment later */
            o->turns++;
        break;
    case STORE_EXISTS:
        ord_unclaim(o, i);
        ord_replayed(o, r->record);
        r->record = NULL;
        return;
    case STORE_STALE:
        ord_unclaim(o, i);
        ord_stale(o);
        return;
    default:
        short_of_stock(o, i, r->value, r->code == STORE_SHORT);
    }
    ord_unclaim(o, i);
    visit_next(o);
}

/* ---- rounds ---------------------------------------------------------------------- */

static void on_round_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ord *o = arg;
    if (o->waiting) { /* the wait ran out: look again (the deadline decides) */
        ltab_unwait(o->s, &o->wait);
        o->waiting = false;
    }
    round_begin(o);
}

/* A claim handed over by an order of this loop (or -1: look again). Called from
 * inside that order's step: the next round starts on the next turn of the loop. */
static void on_handed(struct lwait *w, int seg)
{
    struct ord *o = ord_of_wait(w);
    o->waiting = false;
    o->handed = seg;
    ord_arm(o, 0, on_round_timer);
}

/* Group commit: segment i is away from home and a hold of this loop at home (passed
 * by already this round) will take o into its batch when it ends. A lock taken away
 * from home would cost a whole hold of its own, gather nobody (batches gather at
 * home: ltab_next_holder) and keep the other loop's orders from their home segment:
 * o passes it by and waits. */
static bool waits_for_batch(const struct ord *o, int i)
{
    const engine *e = o->e;
    return o->claimed > 0 && !ring_home(i, o->n, e->home, e->homes) && batch_gathers(o);
}

static void round_end(struct ord *o)
{
    engine *e = o->e;
    int passed = o->claimed + o->away + o->busy;
    if (passed == 0 && !o->stock_left) {
        verdict_begin(o);
        return;
    }
    int remaining = (int)(o->deadline_ms - inv_now_ms());
    if (passed == 0 && (o->n == 1 || remaining > 0)) {
        if (o->n == 1)
            verdict_begin(o);
        else
            multi_begin(o);
        return;
    }
    if (remaining <= 0) {
        /* Busy with what? When every segment together cannot fill the order, the
         * honest answer is sold out or insufficient, not "busy, retry". */
        verdict_begin(o);
        return;
    }
    stat_add(e->v, STAT_LOCK_WAITS, 1);
    if (o->busy > 0 || o->claimed == 0) {
        /* a lock held elsewhere sends no signal (nor does another loop's claim, nor
         * one away from home here): back off */
        ord_set(o, ORD_BACKOFF);
        ord_arm(
            o, ring_backoff_ms(turns_backoff_round(o), ord_rnd(e, UINT32_MAX), remaining),
            on_round_timer);
        o->remote_rounds++;
        return;
    }
    /* Only orders of this loop were in the way: wait for one to hand its claim over,
     * unless one may fill the order and is free already, or none can any more. */
    bool hopeless = true;
    for (int i = 0; i < o->n; i++) {
        long long h = ltab_hint(o->s, i);
        bool may_fill = h < 0 || h >= o->qty;
        hopeless &= !may_fill;
        if (may_fill && !ltab_claimed(o->s, i) && !ltab_claimed_elsewhere(o->s, i) &&
            !waits_for_batch(o, i)) {
            ord_arm(o, 0, on_round_timer);
            return;
        }
    }
    if (hopeless) {
        ord_arm(o, 0, on_round_timer);
        return;
    }
    ord_set(o, ORD_WAIT);
    o->waiting = true;
    o->wait.seg = -1;
    o->wait.handed = on_handed;
    ltab_wait(o->s, &o->wait);
    ord_arm(o, remaining, on_round_timer);
}

static void visit_next(struct ord *o)
{
    engine *e = o->e;
    ord_set(o, ORD_ROUND);
    bool locked = o->view.cfg.mode == SKU_MODE_LOCK;
    bool svc = locked && o->view.cfg.lock != SKU_LOCK_STORE;
    while (o->k < o->n) {
        int i = ring_segment(o->start, o->k, o->n, e->home, e->homes);
        bool mine = o->k == 0 && i == o->handed;
        o->k++;
        long long hint = ltab_hint(o->s, i);
        o->seen[i] = hint;
        if (hint >= 0 && hint < o->qty) { /* cannot fill it: no need to ask */
            o->stock_left |= hint > 0;
            if (mine)
                ltab_unclaim(o->s, i);
            continue;
        }
        o->seg = i;
        if (!locked) {
            if (!batch_join(o)) /* alone, or with its turn's group (batch.c) */
                send_deduct(o, "", false);
            return;
        }
        if (o->view.cfg.hold_ms == 0 && !svc) {
            /* No work under the lock: SET NX PX and the fenced DEDUCT leave in one
             * write and run back to back, so the lock is held for microseconds, not
             * a round trip, and orders of this loop need no claim to keep out of
             * each other's way (a connection's commands run in order). A lock held
             * elsewhere makes the DEDUCT answer FENCED having touched nothing; a
             * short segment, SHORT with the lock released by the script. */
            if (mine)
                ltab_unclaim(o->s, i);
            if (!batch_join(o)) /* alone, or with its turn's group (batch.c) */
                send_piped(o);
            return;
        }
        if (!mine && waits_for_batch(o, i)) {
            o->away++;
            continue;
        }
        if (!mine && turns_yield(o, i)) { /* another loop's turn */
            o->away++;
            continue;
        }
        if (!mine && (ltab_claimed_elsewhere(o->s, i) || !ltab_claim(o->s, i))) {
            stat_add(e->v, STAT_BUSY_SKIPS, 1);
            if (ltab_claimed(o->s, i) && ring_home(i, o->n, e->home, e->homes))
                o->claimed++;
            else
                o->away++;
            continue;
        }
        turns_took(o, i);
        ord_token(e, o->token);
        o->lock_ms = inv_now_ms();
        o->keeps = 0;
        stat_add(e->v, STAT_LOCK_ATTEMPTS, 1);
        ord_set(o, ORD_ACQUIRE);
        if (svc) {
            svc_acquire(o);
            return;
        }
        STORE_CALL(e->st, acquire, o->placed, o->view.epoch, i, o->res.order_id, o->qty,
                   o->token, e->v->opt.lock_ttl_ms, on_acquire, o);
        return;
    }
    o->handed = -1;
    round_end(o);
}

static void round_begin(struct ord *o)
{
    engine *e = o->e;
    ord_set(o, ORD_ROUND);
    if (ltab_valid(o->s) && ltab_view(o->s)->gen != o->view.gen) {
        /* The loop took a newer generation (a rebalance, a restock) since this order
         * read its view: the stocks it would note now are dropped (ltab_note_stock),
         * and orders that learn nothing from their rounds go round until their
         * deadline. Take the loop's view first, the claim handed to it passed on (the
         * view is read afresh, or fails: a claim kept across it could be left). */
        if (o->handed >= 0)
            ltab_unclaim(o->s, o->handed);
        o->handed = -1;
        view(o);
        return;
    }
    if (o->handed < 0 && ord_sold_out(o->s, o->view.gen)) {
        stat_add(e->v, STAT_SOLD_OUT_FAST, 1);
        ord_finish(o, INV_SOLD_OUT);
        return;
    }
    if (o->n != o->view.cfg.segments) {
        o->n = o->view.cfg.segments;
        free(o->seen);
        o->seen = seg_malloc(sizeof *o->seen * (size_t)o->n);
    }
    if (o->handed >= o->n ||
        (o->handed >= 0 && !ring_home(o->handed, o->n, e->home, e->homes))) {
        /* the SKU shrank: not ours to visit (a claim away from home is only
         * handed to a waiter for that very segment) */
        ltab_unclaim(o->s, o->handed);
        o->handed = -1;
    }
    if (o->holds0 < 0 && ltab_shared(o->s) != NULL)
        o->holds0 = skutab_holds(ltab_shared(o->s), 0);
    if (o->handed < 0 && spread_begin(o))
        return;
    ord_round_reset(o,
                    o->handed >= 0 ? ring_start(o->handed, o->n, e->home, e->homes)
                                   : (int)ord_rnd(e, (uint32_t)o->n),
                    0);
    visit_next(o);
}

/* ---- the engine ------------------------------------------------------------------ */

static void on_start(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ord *o = arg;
    if (o->res.status == INV_INVALID)
        ord_answer_and_free(o);
    else if (!ord_mode_followed(o->e))
        ord_finish(o, INV_UNAVAILABLE);
    else
        view(o);
}

void engine_order(engine *e, const struct order_request *req, engine_done_fn fn,
                  void *arg)
{
    struct ord *o = ord_new(e, fn, arg, on_start);
    o->has_id = req->order_id != NULL && req->order_id[0] != '\0';
    if (!seg_valid_name(req->sku) || req->qty < 1 || req->qty > ORDER_QTY_MAX ||
        (o->has_id && !seg_valid_name(req->order_id))) {
        o->res.status = INV_INVALID;
    } else {
        text_copy(o->sku, sizeof o->sku, req->sku);
        o->qty = req->qty;
        if (o->has_id)
            text_copy(o->res.order_id, sizeof o->res.order_id, req->order_id);
        else
            inv_random_hex(o->res.order_id);
    }
}

/* The steps that enter a state, for the files below this one (ord_enter). */
static const ord_step_fn engine_steps[ORD__COUNT] = {
    [ORD_VIEW] = view,
    [ORD_ROUND] = round_begin,
    [ORD_MULTI] = multi_go,
    [ORD_VERDICT] = verdict_begin,
};

engine *engine_create(inv *v, struct event_base *base, int home, int homes)
{
    return engine_create_on(v, base, home, homes, inv_store_create(v, base));
}

/* engine_create_on's, and with `for_admin` engine_create_admin's; over table `tab`,
 * the caller's (freed by it), or a table of its own when NULL. */
static engine *create(inv *v, struct event_base *base, int home, int homes, store *st,
                      bool for_admin, ltab *tab)
{
    engine *e = seg_calloc(1, sizeof *e);
    e->v = v;
    e->base = base;
    e->home = home;
    e->homes = homes;
    e->enter = engine_steps;
    e->tab = tab != NULL ? tab : ltab_create(home, homes, v->tab);
    e->tab_borrowed = tab != NULL;
    if (getrandom(&e->rng, sizeof e->rng, 0) != sizeof e->rng ||
        getrandom(&e->token_id, sizeof e->token_id, 0) != sizeof e->token_id) {
        perror("getrandom");
        abort();
    }
    e->rng |= 1;
    e->st = st;
    e->flush = evtimer_new(base, on_flush, e);
    if (e->flush == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    e->borrowed = for_admin;
    for (int l = SKU_LOCK_STORE + 1; l < SKU_LOCK__COUNT && !for_admin; l++)
        e->lks[l] = inv_lock_create(v, base, l, &e->lks_ops[l]);
    return e;
}

engine *engine_create_on(inv *v, struct event_base *base, int home, int homes, store *st)
{
    return create(v, base, home, homes, st, false, NULL);
}

engine *engine_create_admin(inv *v, struct event_base *base, store *st)
{
    return create(v, base, 0, 1, st, true, NULL);
}

engine *engine_of_conn(inv_conn *c)
{
    store *st = inv_conn_store(c); /* first: it makes c's loop */
    if (c->eng == NULL) {
        c->eng = create(c->v, c->base, 0, 1, st, true, ltab_of_conn(c));
        c->eng_free = engine_free;
    }
    return c->eng;
}

void engine_free(engine *e)
{
    if (e == NULL)
        return;
    batch_drop(e);
    event_free(e->flush);
    for (int l = 0; l < SKU_LOCK__COUNT; l++)
        if (e->lks[l] != NULL)
            e->lks_ops[l]->free(e->lks[l]);
    if (!e->borrowed)
        e->st->ops->free(e->st);
    if (!e->tab_borrowed)
        ltab_free(e->tab);
    free(e);
}

const char *engine_error(const engine *e)
{
    return e->st->ops->error(e->st);
}

int engine_in_flight(const engine *e)
{
    return e->in_flight;
}

bool engine_sold_out_fast(engine *e, const char *sku)
{
    sync_changes(e);
    lsku *s = seg_valid_name(sku) ? ltab_find(e->tab, sku) : NULL;
    if (s == NULL || !ltab_fresh(s, inv_now_ms(), e->v->opt.meta_cache_ms) ||
        !ord_sold_out(s, ltab_view(s)->gen))
        return false;
    stat_add(e->v, STAT_ORDERS_SOLD_OUT, 1);
    stat_add(e->v, STAT_SOLD_OUT_FAST, 1);
    if (ltab_shared(s) != NULL)
        skutab_count(ltab_shared(s), STAT_ORDERS_SOLD_OUT);
    stat_observe(e->v, HIST_ORDER, 0);
    return true;
}

void engine_invalidate(engine *e, const char *sku)
{
    lsku *s = ltab_find(e->tab, sku);
    if (s != NULL)
        ltab_invalidate(s);
}

void engine_pipeline(const engine *e, long long *commands, long long *writes)
{
    struct store_stats st;
    e->st->ops->stats(e->st, &st);
    *commands = st.commands;
    *writes = st.writes;
}
