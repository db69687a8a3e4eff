/* ord.c -- an order of the engine: its state and transitions, its answer and its end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/engine_internal.h"
#include "segments/record.h"
#include "segments/skutab.h"
#include "base/text.h"
#include "base/xalloc.h"

/* ---- the transitions ------------------------------------------------------------- */

/* The state machine, state by state (its steps: engine.c, and the files it names):
 *
 *   START     the first step, on the next turn of the loop     -> VIEW
 *             (-> DONE, 503, while the loop's handle waits to follow the process's
 *             Redis to cluster mode: ord_mode_followed)
 *   VIEW      settings cached and fresh? else META sent      -> ROUND (a Redis
 *             Cluster, an order with a client id: CLAIM first)
 *   CLAIM     (a cluster) the id claimed in its slot: OK     -> ROUND (durability
 *             replicated: once a replica has the claim, WAIT; none -> DONE,
 *             not_replicated, the claim given up); EXISTS -> DONE
 *             (replay); STALE (a record of another epoch: a newer sale than the
 *             settings, or one a reset left) -> VIEW (read again; the next CLAIM
 *             replays it or names its epoch dead); BUSY (the id in flight
 *             elsewhere)                                     -> CLAIM again (timer);
 *             a claim that ran out with no record            -> FIND (its order in the
 *             segments' orders: found -> its record CONFIRMed, DONE (replay); not
 *             found -> CLAIM, taking the dead claim over); one with a plan (a
 *             multi-segment order's) -> CLAIM taking it over, UNDO the plan, CLAIM
 *             again without it -> ROUND
 *   ROUND     the loop holds a newer generation than the order's view -> VIEW
 *             sold out in this generation (a VERDICT here or on another loop) -> DONE
 *             most segments seen empty, stock left, lock mode, rebalance on, not
 *             yet done this generation on this loop          -> SPREAD
 *             the next segment of the ring (the loop's home segments first, ring.h)
 *             that may hold qty, claimed on no loop: claim it -> ACQUIRE (atomic: DEDUCT;
 *             hold_ms 0: SET NX PX and DEDUCT leave together -> DEDUCT; with a
 *             batch, in the loop's group of the SKU, batch.c: its segment may be
 *             another at home that fits, its round then starting there)
 *             ring done: none busy, none left                -> VERDICT
 *                        none busy, stock spread thin        -> MULTI (no plan fills
 *                        it -> VERDICT)
 *                        deadline passed                     -> VERDICT
 *                        busy in Redis                       -> BACKOFF (timer)
 *                        held on this loop, at home here     -> WAIT (FIFO, timer):
 *             handed the claim -> ROUND from it; handed the lock itself (a
 *             standalone Redis, the holder's DEDUCT keeps it; a lock service's hold,
 *             its fence standing) -> HOLD at once;
 *             taken into the holder's batch (group commit, batch.c) -> DEDUCT
 *                        held by another loop only           -> BACKOFF (timer)
 *   SPREAD    every segment locked in index order, ADJUST "spread" -> VIEW (new
 *             generation); locks not had in time             -> ROUND. (On a cluster
 *             the sweeper thread runs it, sweeper.h, and the order stays in ROUND.)
 *   ADJUST    (engine_adjust: an admin restock or rebalance, from VIEW) every
 *             segment's store lock taken in index order (multi.c), renewed (lease.c),
 *             then ADJUST -> DONE; STALE -> VIEW; locks not had in time -> DONE busy
 *   CANCEL    (engine_cancel: an order's cancel, from VIEW) the store's lock of each
 *             of its record's segments taken in index order (multi.c), renewed
 *             (lease.c), then CANCEL -> DONE (the store's code, STALE included: the
 *             caller reads the record again); locks not had in time -> DONE busy
 *   ACQUIRE   reply OK                                       -> HOLD (timer hold_ms;
 *             lease renewed by a timer every ttl/3)          -> DEDUCT (with keep when
 *             an order of this loop waits for the segment: the lock goes on to it;
 *             a hold over before the lock's previous DEDUCT answered waits for it:
 *             OK -> DEDUCT, anything else -> ROUND from the segment, ACQUIRE)
 *   HOLD      the hold's timer, the lock held (lease.c); then DEDUCT (with a batch:
 *             one DEDUCT_BATCH for it and the orders queued here for the
 *             segment, each answered as its own DEDUCT), or ROUND when a
 *             renewal found the lease lost; the lock handed on (handover.c)
 *             BUSY/SHORT/MISSING                             -> ROUND (next segment)
 *             EXISTS                                         -> DONE (replay/conflict)
 *             STALE                                          -> VIEW (re-read)
 *   DEDUCT    OK -> PLACED (a fresh id was made for the segment's slot, and the
 *             DEDUCT wrote its record; a client's id on a cluster: its record is
 *             CONFIRMed in the id's slot, no answer -> unavailable, the claim kept;
 *             durability replicated: the DEDUCT WAITed for first, no replica ->
 *             DONE, not_replicated, the claim kept and no record);
 *             FENCED (a lock held elsewhere, or a lease lost) -> ROUND;
 *             SHORT/MISSING -> ROUND; EXISTS -> DONE; STALE -> VIEW
 *   MULTI     (a cluster: the id into the intents set, then CLAIM with the plan)
 *             the segments needed claimed and locked in ascending order (a claim
 *             held on this loop: wait, first in line for it; a lock held elsewhere:
 *             backoff timer; SET NX PX GET) then DEDUCT_MULTI -> DONE / ROUND / VIEW
 *             (a cluster: one DEDUCT per part, all at once; all OK -> CONFIRM ->
 *             PLACED; one refused -> UNDO the plan, give the claim up -> ROUND / VIEW;
 *             one unanswered -> DONE, unavailable, claim and plan kept)
 *   VERDICT   (a verdict of this generation says less than qty -> DONE at once)
 *             the stock of every segment, then the meta: its generation still the
 *             view's and no adjust under way -> DONE sold out / insufficient (and
 *             that total stands for the generation); the stock is there -> ROUND
 *             (hints from these counts); a new generation -> VIEW; an adjust under
 *             way (units in transit) -> VIEW after a backoff timer; deadline passed
 *             and not a 409 -> DONE busy
 *   PLACED    a cluster: CONFIRM the record in the id's slot; durability replicated:
 *             WAIT 1 on the node of each segment (and of the record) -> DONE
 *             (201, or 503 not_replicated)
 *   RECORD    sold out or insufficient with a client id: the record is read, so a
 *             retry of a confirmed order gets its 200 -> DONE
 *   DONE      the callback; freed once no renewal or piped lock is owed a reply.
 * No Redis answer at any step -> DONE (unavailable: the 503 names the order id). A
 * claim is given up when the order ends without a sale for certain.
 */
#define TO(s) (1u << (s))
/* The states each state may go to, besides itself, RECORD and DONE. */
static const unsigned ord_next[ORD__COUNT] = {
    [ORD_START] = TO(ORD_VIEW),
    [ORD_VIEW] = TO(ORD_CLAIM) | TO(ORD_ROUND) | TO(ORD_ADJUST) | TO(ORD_CANCEL),
    [ORD_CLAIM] = TO(ORD_ROUND) | TO(ORD_MULTI) | TO(ORD_VIEW),
    [ORD_ROUND] = TO(ORD_VIEW) | TO(ORD_BACKOFF) | TO(ORD_WAIT) | TO(ORD_ACQUIRE) |
                  TO(ORD_DEDUCT) | TO(ORD_MULTI) | TO(ORD_SPREAD) | TO(ORD_VERDICT),
    [ORD_BACKOFF] = TO(ORD_ROUND),
    [ORD_WAIT] = TO(ORD_ROUND) | TO(ORD_HOLD) | TO(ORD_DEDUCT),
    [ORD_ACQUIRE] = TO(ORD_HOLD) | TO(ORD_DEDUCT) | TO(ORD_ROUND) | TO(ORD_VIEW),
    [ORD_HOLD] = TO(ORD_DEDUCT) | TO(ORD_ROUND),
    [ORD_DEDUCT] = TO(ORD_PLACED) | TO(ORD_ROUND) | TO(ORD_VIEW),
    [ORD_MULTI] = TO(ORD_CLAIM) | TO(ORD_VIEW) | TO(ORD_VERDICT) | TO(ORD_PLACED),
    [ORD_SPREAD] = TO(ORD_ROUND) | TO(ORD_VIEW),
    [ORD_ADJUST] = TO(ORD_VIEW),
    [ORD_CANCEL] = 0,
    [ORD_VERDICT] = TO(ORD_ROUND) | TO(ORD_VIEW),
    [ORD_PLACED] = 0,
    [ORD_RECORD] = 0,
    [ORD_DONE] = 0,
};
#undef TO

struct ord *ord_new(engine *e, engine_done_fn fn, void *arg,
                    void (*start)(evutil_socket_t, short, void *))
{
    struct ord *o = seg_calloc(1, sizeof *o);
    o->e = e;
    o->fn = fn;
    o->arg = arg;
    o->handed = -1;
    o->res.segment = -1;
    o->found_seg = -1;
    o->holds0 = -1;
    o->started_ms = inv_now_ms();
    o->deadline_ms = o->started_ms + e->v->opt.lock_wait_ms;
    ord_token(e, o->attempt);
    o->timer = evtimer_new(e->base, start, o);
    if (o->timer == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    e->in_flight++;
    struct timeval now = {0, 0};
    evtimer_add(o->timer, &now);
    return o;
}

/* The name of a state, for logs and failures. */
const char *ord_state_name(enum ord_state st)
{
    static const char *const names[ORD__COUNT] = {
        [ORD_START] = "start",     [ORD_VIEW] = "view",       [ORD_CLAIM] = "claim",
        [ORD_ROUND] = "round",     [ORD_BACKOFF] = "backoff", [ORD_WAIT] = "wait",
        [ORD_ACQUIRE] = "acquire", [ORD_HOLD] = "hold",       [ORD_DEDUCT] = "deduct",
        [ORD_MULTI] = "multi",     [ORD_SPREAD] = "spread",   [ORD_VERDICT] = "verdict",
        [ORD_ADJUST] = "adjust",   [ORD_CANCEL] = "cancel",   [ORD_PLACED] = "placed",
        [ORD_RECORD] = "record",   [ORD_DONE] = "done",
    };
    return (unsigned)st < ORD__COUNT ? names[st] : "?";
}

/* The one writer of o->state. A transition not in ord_next is a defect of the
 * engine: it aborts, naming both states. */
void ord_set(struct ord *o, enum ord_state to)
{
    enum ord_state from = o->state;
    if (to != from && to != ORD_DONE && (to != ORD_RECORD || from == ORD_DONE) &&
        !(ord_next[from] & (1u << to))) {
        fprintf(stderr, "inventoryd: engine: an order went from %s to %s\n",
                ord_state_name(from), ord_state_name(to));
        abort();
    }
    o->state = to;
}

/* Enter a state by its step from the engine's table (VIEW, ROUND, MULTI, VERDICT). */
void ord_enter(struct ord *o, enum ord_state to)
{
    o->e->enter[to](o);
}

/* ---- small things ---------------------------------------------------------------- */

uint32_t ord_rnd(engine *e, uint32_t n)
{
    uint64_t x = e->rng; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    e->rng = x;
    return (uint32_t)(((x * 2685821657736338717ULL) >> 32) % n);
}

void ord_token(engine *e, char out[33])
{
    struct text t = text_at(out, 33);
    text_hex64(&t, (uint64_t)e->token_id);
    text_hex64(&t, (uint64_t)++e->token_seq);
}

void ord_arm(struct ord *o, int ms, void (*cb)(evutil_socket_t, short, void *))
{
    event_del(o->timer);
    event_assign(o->timer, o->e->base, -1, 0, cb, o);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(o->timer, &tv);
}

/* (order.h) Here, beside its one caller: order.c calls the engine. */
enum stat_id order_outcome_stat(inv_status s)
{
    switch (s) {
    case INV_OK:
        return STAT_ORDERS_CONFIRMED;
    case INV_REPLAYED:
        return STAT_ORDERS_REPLAYED;
    case INV_SOLD_OUT:
        return STAT_ORDERS_SOLD_OUT;
    case INV_INSUFFICIENT:
        return STAT_ORDERS_INSUFFICIENT;
    case INV_UNKNOWN_SKU:
        return STAT_ORDERS_UNKNOWN_SKU;
    case INV_CONFLICT:
        return STAT_ORDERS_CONFLICT;
    case INV_BUSY:
        return STAT_ORDERS_BUSY;
    default:
        return STAT_ORDERS_UNAVAILABLE;
    }
}

/* ---- answers --------------------------------------------------------------------- */

/* The order id was met again: the same order (REPLAYED, record kept) or a clash. */
static void on_replay_waited(void *arg, int rc, int replicas)
{
    struct ord *o = arg;
    ord_finish(o, rc < 0         ? INV_UNAVAILABLE
                  : replicas < 1 ? INV_NOT_REPLICATED
                                 : INV_REPLAYED);
}

void ord_replayed(struct ord *o, char *record)
{
    if (record_same_order(record, o->sku, o->qty)) {
        o->res.record = record;
        if (o->view.cfg.replicated && (store_caps(o->e->st) & STORE_CAP_RECORD_APART) &&
            o->state != ORD_DONE) {
            /* A 200 only for a record a replica has (and, for one just recovered
             * from a sale, the sale too): one a failover then lost would be a sale
             * answered that never stood. No replica: 503, the retry is safe. */
            o->claim_ok = false; /* the id has its record: nothing to give up */
            STORE_CALL(o->e->st, wait, o->placed, o->found_seg, o->res.order_id,
                       o->e->v->opt.redis_timeout_ms / 2, on_replay_waited, o);
            return;
        }
        ord_finish(o, INV_REPLAYED);
    } else {
        free(record);
        ord_finish(o, INV_CONFLICT);
    }
}

static void on_record(void *arg, int rc, char *record)
{
    struct ord *o = arg;
    inv_status st = o->res.status;
    if (rc < 0)
        st = INV_UNAVAILABLE;
    else if (record != NULL) {
        ord_replayed(o, record);
        return;
    }
    o->has_id = false; /* checked */
    ord_finish(o, st);
}

/* Whether the loop's handle routes as the process's mode says. The mode moves from
 * standalone to cluster once (a Redis that became a cluster after the start: the
 * store's mode_behind); the handle follows when no order of this loop is under way, so
 * that every order runs in one mode from its start to its end. Until then a new
 * order answers 503 (the standalone scripts fail on a cluster anyway); the orders
 * under way end within their deadlines, and the last one lets the handle follow. */
bool ord_mode_followed(engine *e)
{
    if (!store_mode_behind(e->st))
        return true;
    if (e->in_flight > 1) /* the order asking counts itself */
        return false;
    e->st->ops->mode_follow(e->st);
    return true;
}

void ord_answer_and_free(struct ord *o)
{
    engine *e = o->e;
    if (o->state != ORD_DONE) {
        ord_set(o, ORD_DONE);
        inv_status st = o->res.status;
        if (st != INV_OK && st != INV_REPLAYED) {
            free(o->res.record);
            o->res.record = NULL;
        }
        if (o->adj == NULL && o->cx == NULL) { /* an order, not an admin write */
            stat_add(e->v, order_outcome_stat(st), 1);
            if (st != INV_UNKNOWN_SKU && o->s != NULL && ltab_shared(o->s) != NULL)
                skutab_count(ltab_shared(o->s), order_outcome_stat(st));
            stat_observe(e->v, HIST_ORDER, (inv_now_ms() - o->started_ms) * 1000);
        }
        if (--e->in_flight == 0)
            ord_mode_followed(e);
        o->fn(o->arg, &o->res);
        o->res.record = NULL; /* the callee's now */
    }
    if (o->pending > 0)
        return; /* freed when the last renewal is answered */
    ltab_release(e->tab, o->s);
    event_free(o->timer);
    if (o->renew != NULL)
        event_free(o->renew);
    free(o->seen);
    free(o->record);
    free(o->dead);
    free(o->recovered);
    free(o->dplan);
    free(o->mplan);
    free(o->mctx);
    free(o->mseg);
    free(o->mpart);
    free(o->mtok);
    free(o->mlh);
    free(o->mfence);
    free(o);
}

void ord_finish(struct ord *o, inv_status st)
{
    if (o->state == ORD_DONE) {
        ord_answer_and_free(o);
        return;
    }
    o->res.status = st;
    lease_stop(o);
    event_del(o->timer);
    if (o->succ != NULL) /* (not expected: our DEDUCT's answer settles it first) */
        o->succ->pred = NULL;
    if (o->pred != NULL)
        o->pred->succ = NULL;
    o->succ = o->pred = NULL;
    if (o->claim_ok && st != INV_OK && st != INV_REPLAYED && st != INV_UNAVAILABLE) {
        /* No sale for certain: the id is free again. (After no answer it stays
         * claimed: a deduction may have landed, and only the claim's end and a look
         * into the segments may say.) */
        STORE_CALL(o->e->st, confirm, o->res.order_id, o->attempt, NULL, o->sku,
                   o->view.epoch, NULL, NULL);
        o->claim_ok = false;
    }
    if (o->waiting && o->s != NULL)
        ltab_unwait(o->s, &o->wait);
    o->waiting = false;
    if ((st == INV_SOLD_OUT || st == INV_INSUFFICIENT) && o->has_id) {
        /* Segments known empty were skipped without Redis, so the scripts that spot a
         * replay may not have run: a retry of a confirmed order must still get it. */
        ord_set(o, ORD_RECORD);
        STORE_CALL(o->e->st, record_read, o->res.order_id, o->sku, o->view.epoch,
                   on_record, o);
        return;
    }
    ord_answer_and_free(o);
}

static void on_waited(void *arg, int rc, int replicas)
{
    struct ord *o = arg;
    if (rc < 0)
        o->mreplicas = -1;
    else if (replicas < o->mreplicas)
        o->mreplicas = replicas;
    if (--o->mwaits > 0)
        return;
    ord_finish(o, o->mreplicas < 0   ? INV_UNAVAILABLE
                  : o->mreplicas < 1 ? INV_NOT_REPLICATED
                                     : INV_OK);
}

/* The order is placed (and, on a cluster, its record written). Durability
 * "replicated": 201 only once a replica has it too (WAIT 1, half the Redis timeout,
 * on the node of each of its segments, and of its record); otherwise 503
 * not_replicated, and a retry with the id settles it. */
void ord_placed(struct ord *o)
{
    engine *e = o->e;
    o->claim_ok = false;
    o->res.record = o->record;
    o->record = NULL;
    if (!o->view.cfg.replicated) {
        ord_finish(o, INV_OK);
        return;
    }
    ord_set(o, ORD_PLACED);
    /* Parts apart (no MULTI_ONE): each part's node, unless the parts were WAITed for
     * before the CONFIRM (multi.c); one connection: one WAIT. */
    bool parts =
        o->mplaced && !(store_caps(e->st) & STORE_CAP_MULTI_ONE) && !o->seg_waited;
    o->mwaits = parts ? o->mn : 1;
    o->mreplicas = 1 << 30;
    /* A sale WAITed for before its CONFIRM (engine.c): only the record's node now. */
    int seg = o->seg_waited ? -1 : o->res.segment;
    for (int k = 0, n = o->mwaits; k < n; k++)
        STORE_CALL(e->st, wait, o->placed, parts ? o->mseg[k] : seg, o->res.order_id,
                   e->v->opt.redis_timeout_ms / 2, on_waited, o);
}

/* The SKU is not what this order's view says (a reset or delete): read it again. */
void ord_stale(struct ord *o)
{
    if (++o->stale_tries >= 4) {
        ord_finish(o, INV_BUSY);
        return;
    }
    ltab_invalidate(o->s);
    o->claim_ok = false; /* on a cluster, a STALE may be the claim's end: claim again */
    ord_enter(o, ORD_VIEW);
}

/* ---- what the segments hold ------------------------------------------------------ */

/* Segments known empty in `gen`, here or by another loop (which tells the others
 * through the shared entry). */
int ord_empties(lsku *s, long long gen)
{
    int here = ltab_empty_count(s, gen);
    int all = ltab_shared(s) != NULL ? skutab_loop_empties(ltab_shared(s), gen) : 0;
    return here > all ? here : all;
}

/* The most the SKU holds in `gen` by a verdict from fresh counts (VERDICT), or -1. */
long long ord_confirmed(lsku *s, long long gen)
{
    if (!ltab_valid(s) || ltab_view(s)->gen != gen || ltab_shared(s) == NULL)
        return -1;
    return skutab_loop_verdict(ltab_shared(s), gen);
}

bool ord_sold_out(lsku *s, long long gen)
{
    return ord_confirmed(s, gen) == 0;
}

/* What a reply said segment i holds now. */
void ord_note_stock(struct ord *o, int i, long long stock)
{
    if (ltab_note_stock(o->s, o->view.gen, i, stock) && ltab_shared(o->s) != NULL)
        skutab_loop_empty(ltab_shared(o->s), o->view.gen, i);
}
