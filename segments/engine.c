/* engine.c -- the order path on an event loop (states and transitions in engine.h). */
#include "segments/engine.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "segments/internal.h"
#include "segments/ltab.h"
#include "segments/record.h"
#include "segments/redis/async.h"
#include "segments/ring.h"
#include "segments/skutab.h"
#include "segments/sweeper.h"
#include "base/clock.h"
#include "base/text.h"
#include "base/xalloc.h"

struct engine {
    inv *v;
    struct event_base *base;
    rda_conn *rd;
    ltab *tab;
    int home, homes; /* this loop's number, and how many (ring.h) */
    uint64_t rng, token_id, token_seq;
    int in_flight;
    long long changes; /* inv.changes when this loop's table was last in step */
};

/* The states of an order. Each is set by ord_set() alone, which checks it against
 * the transitions of `ord_next` (below); every state may end in RECORD or DONE (no Redis
 * answer at any step: DONE, unavailable). */
enum ord_state {
    ORD_START,   /* placed: its first step runs on the next turn of the loop */
    ORD_VIEW,    /* the SKU's settings: cached and fresh, or META sent */
    ORD_CLAIM,   /* a cluster: the order id's claim (CLAIM; FIND, the undo of a dead
                    claim's plan or its record's CONFIRM when taking it over; WAIT) */
    ORD_ROUND,   /* choosing the ring's next segment (no call out) */
    ORD_BACKOFF, /* no segment free, one busy elsewhere: a backoff timer, then ROUND */
    ORD_WAIT,    /* in line for a claim held by an order of this loop (timer) */
    ORD_ACQUIRE, /* ACQUIRE sent for segment `seg` */
    ORD_HOLD,    /* the lock of `seg` held (lease renewed), the hold timer armed; or
                    the hold over, the lock's previous DEDUCT not answered (hold_over) */
    ORD_DEDUCT,  /* DEDUCT sent (hold_ms 0: behind its SET NX PX in one write) */
    ORD_MULTI,   /* several segments: the plan's intent, its locks in ascending order,
                    DEDUCT_MULTI or one DEDUCT per part, an undo */
    ORD_SPREAD,  /* the automatic rebalance: every segment locked, ADJUST "spread" */
    ORD_VERDICT, /* fresh counts: every segment's stock, then the meta */
    ORD_PLACED,  /* sold: the record's CONFIRM (a cluster), the replicas' WAIT */
    ORD_RECORD,  /* sold out or insufficient with a client id: its record read first */
    ORD_DONE,    /* answered: freed now, or once the replies it is owed (pending) came */
    ORD__COUNT
};

struct ord {
    engine *e;
    enum ord_state state; /* written by ord_set() only */
    char sku[SEG_NAME_MAX + 1];
    long long qty;
    bool has_id;
    struct order_result res;
    engine_done_fn fn;
    void *arg;

    lsku *s;
    struct sku_view view;
    char placed[RD_SKU_PLACED_MAX]; /* the SKU as its segments' calls take it */
    int64_t started_ms, deadline_ms;
    int stale_tries;

    /* a cluster: the order id's claim (rda_claim) */
    char attempt[33]; /* this order's, for the claim and the record */
    bool claim_ok;    /* the id is ours until `until` (the claim's node's clock) */
    long long until;
    int64_t claim_ends_ms; /* the same end, as this process's clock has it at most */
    char *dead;            /* the attempt of a dead claim being taken over */
    char *recovered;       /* its order, found in a segment: the record to confirm */
    char *dplan; /* its plan (a multi-segment order's): to undo once taken over */

    /* the current round */
    /* claimed: segments passed by that an order of this loop holds and will hand
     * on (at home here); away: those another loop holds, or that will go back free;
     * busy: those Redis found locked elsewhere */
    int n, start, k, handed, claimed, away, busy, remote_rounds;
    bool stock_left;
    long long *seen;  /* stock last seen per segment, -1 unknown; n entries */
    long long vtotal; /* VERDICT: the total of the stocks just read */

    /* the segment being worked on */
    int seg;
    char token[33];
    char *record;
    bool holding;    /* a lock of ours (lease renewed) */
    bool pipelined;  /* hold_ms 0: the lock went out with the DEDUCT, in one write */
    bool confirm;    /* a cluster: the DEDUCT wrote no record, CONFIRM writes it */
    bool lease_lost; /* a renewal found it gone */
    int pending;     /* renewals and piped locks owed a reply: the order outlives its
                        answer for them */
    /* a lock kept from one order of this loop to the next (pass_lock) */
    int64_t lock_ms;  /* when the lock held was taken (its ACQUIRE sent) */
    int keeps;        /* the orders it served before this one */
    struct ord *succ; /* ours went on to it, until our DEDUCT (keep) answers */
    struct ord *pred; /* the order whose DEDUCT keeps it for us, until that answers */
    bool hold_over;   /* our hold ended before pred's answer came */

    /* several segments (an order's parts, or every segment for a spread) */
    int mn, mk, mround;
    int *mseg;
    int mhanded; /* the claim a multi-segment wait was handed, or -1 */
    long long *mpart;
    char (*mtok)[33];
    /* ... on a cluster, one deduction per part, under the id's claim and its plan: */
    char *mplan;
    bool mclaiming; /* the claim that records the plan is out */
    int mleft;      /* parts owed a reply */
    int mcode;      /* RD_OK, or why a part was refused */
    bool mlost;     /* a part had no answer: its outcome is unknown */
    bool mplaced;   /* every part deducted and the record written */
    struct part *mctx;
    int mwaits, mreplicas; /* durability "replicated": WAITs owed, the fewest replicas */

    struct event *timer, *renew;
    struct lwait wait;
    bool waiting;
};

static void round_begin(struct ord *o);
static void proceed(struct ord *o);
static void visit_next(struct ord *o);
static void finish(struct ord *o, inv_status st);
static void view(struct ord *o);
static void verdict(struct ord *o);
static void multi_go(struct ord *o);
static void on_handed(struct lwait *w, int seg);
static void on_round_timer(evutil_socket_t fd, short what, void *arg);
static void on_hold_done(evutil_socket_t fd, short what, void *arg);

/* One part of a multi-segment order on a cluster, for its reply. */
struct part {
    struct ord *o;
    int k;
};

/* ---- the transitions ------------------------------------------------------------ */

#define TO(s) (1u << (s))
/* The states each state may go to, besides itself, RECORD and DONE. */
static const unsigned ord_next[ORD__COUNT] = {
    [ORD_START] = TO(ORD_VIEW),
    [ORD_VIEW] = TO(ORD_CLAIM) | TO(ORD_ROUND),
    [ORD_CLAIM] = TO(ORD_ROUND) | TO(ORD_MULTI),
    [ORD_ROUND] = TO(ORD_BACKOFF) | TO(ORD_WAIT) | TO(ORD_ACQUIRE) | TO(ORD_DEDUCT) |
                  TO(ORD_MULTI) | TO(ORD_SPREAD) | TO(ORD_VERDICT),
    [ORD_BACKOFF] = TO(ORD_ROUND),
    [ORD_WAIT] = TO(ORD_ROUND) | TO(ORD_HOLD),
    [ORD_ACQUIRE] = TO(ORD_HOLD) | TO(ORD_DEDUCT) | TO(ORD_ROUND) | TO(ORD_VIEW),
    [ORD_HOLD] = TO(ORD_DEDUCT) | TO(ORD_ROUND),
    [ORD_DEDUCT] = TO(ORD_PLACED) | TO(ORD_ROUND) | TO(ORD_VIEW),
    [ORD_MULTI] = TO(ORD_CLAIM) | TO(ORD_VIEW) | TO(ORD_VERDICT) | TO(ORD_PLACED),
    [ORD_SPREAD] = TO(ORD_ROUND) | TO(ORD_VIEW),
    [ORD_VERDICT] = TO(ORD_ROUND) | TO(ORD_VIEW),
    [ORD_PLACED] = 0,
    [ORD_RECORD] = 0,
    [ORD_DONE] = 0,
};
#undef TO

/* The name of a state, for logs and failures. */
static const char *ord_state_name(enum ord_state st)
{
    static const char *const names[ORD__COUNT] = {
        [ORD_START] = "start",     [ORD_VIEW] = "view",       [ORD_CLAIM] = "claim",
        [ORD_ROUND] = "round",     [ORD_BACKOFF] = "backoff", [ORD_WAIT] = "wait",
        [ORD_ACQUIRE] = "acquire", [ORD_HOLD] = "hold",       [ORD_DEDUCT] = "deduct",
        [ORD_MULTI] = "multi",     [ORD_SPREAD] = "spread",   [ORD_VERDICT] = "verdict",
        [ORD_PLACED] = "placed",   [ORD_RECORD] = "record",   [ORD_DONE] = "done",
    };
    return (unsigned)st < ORD__COUNT ? names[st] : "?";
}

/* The one writer of o->state. A transition not in ord_next is a defect of the
 * engine: it aborts, naming both states. */
static void ord_set(struct ord *o, enum ord_state to)
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

/* ---- small things --------------------------------------------------------------- */

static uint32_t rnd(engine *e, uint32_t n)
{
    uint64_t x = e->rng; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    e->rng = x;
    return (uint32_t)(((x * 2685821657736338717ULL) >> 32) % n);
}

static void new_token(engine *e, char out[33])
{
    struct text t = text_at(out, 33);
    text_hex64(&t, (uint64_t)e->token_id);
    text_hex64(&t, (uint64_t)++e->token_seq);
}

static void arm(struct ord *o, int ms, void (*cb)(evutil_socket_t, short, void *))
{
    event_del(o->timer);
    event_assign(o->timer, o->e->base, -1, 0, cb, o);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(o->timer, &tv);
}

/* The order a queued waiter is part of. */
static struct ord *waiting_order(struct lwait *w)
{
    return (struct ord *)((char *)w - offsetof(struct ord, wait));
}

/* A new round of the ring from segment `start`, `k` of its segments behind it. */
static void round_reset(struct ord *o, int start, int k)
{
    o->start = start;
    o->k = k;
    o->claimed = o->away = o->busy = 0;
    o->stock_left = false;
}

static void unclaim(struct ord *o, int i)
{
    if (o->view.cfg.mode == SKU_MODE_LOCK)
        ltab_unclaim(o->s, i);
}

/* ---- leases --------------------------------------------------------------------- */

static void on_renewed(void *arg, int rc, int value)
{
    struct ord *o = arg;
    o->pending--;
    if (rc == 0 && value == 1)
        stat_add(o->e->v, STAT_LEASE_RENEWALS, 1);
    else if (rc == 0) {
        stat_add(o->e->v, STAT_LEASE_LOST, 1);
        o->lease_lost = true;
    }
    if (o->state == ORD_DONE && o->pending == 0)
        finish(o, o->res.status); /* frees it */
}

static void on_renew_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ord *o = arg;
    if (!o->holding || o->lease_lost)
        return;
    o->pending++;
    rda_renew(o->e->rd, o->placed, o->seg, o->token, o->e->v->opt.lock_ttl_ms, on_renewed,
              o);
}

static void lease_start(struct ord *o)
{
    o->holding = true;
    o->lease_lost = false;
    int every = o->e->v->opt.lock_ttl_ms / 3;
    struct timeval tv = {every / 1000, (every % 1000) * 1000};
    evtimer_add(o->renew, &tv);
}

static void lease_stop(struct ord *o)
{
    o->holding = false;
    event_del(o->renew);
}

/* ---- answers -------------------------------------------------------------------- */

/* The order id was met again: the same order (REPLAYED, record kept) or a clash. */
static void replayed(struct ord *o, char *record)
{
    if (record_same_order(record, o->sku, o->qty)) {
        o->res.record = record;
        finish(o, INV_REPLAYED);
    } else {
        free(record);
        finish(o, INV_CONFLICT);
    }
}

static void on_record(void *arg, int rc, char *record)
{
    struct ord *o = arg;
    inv_status st = o->res.status;
    if (rc < 0)
        st = INV_UNAVAILABLE;
    else if (record != NULL) {
        replayed(o, record);
        return;
    }
    o->has_id = false; /* checked */
    finish(o, st);
}

static void answer_and_free(struct ord *o)
{
    engine *e = o->e;
    if (o->state != ORD_DONE) {
        ord_set(o, ORD_DONE);
        inv_status st = o->res.status;
        if (st != INV_OK && st != INV_REPLAYED) {
            free(o->res.record);
            o->res.record = NULL;
        }
        stat_add(e->v, order_outcome_stat(st), 1);
        if (st != INV_UNKNOWN_SKU && o->s != NULL && ltab_shared(o->s) != NULL)
            skutab_count(ltab_shared(o->s), order_outcome_stat(st));
        stat_observe(e->v, HIST_ORDER, (inv_now_ms() - o->started_ms) * 1000);
        e->in_flight--;
        o->fn(o->arg, &o->res);
        o->res.record = NULL; /* the callee's now */
    }
    if (o->pending > 0)
        return; /* freed when the last renewal is answered */
    ltab_release(e->tab, o->s);
    event_free(o->timer);
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
    free(o);
}

static void finish(struct ord *o, inv_status st)
{
    if (o->state == ORD_DONE) {
        answer_and_free(o);
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
        rda_confirm(o->e->rd, o->res.order_id, o->attempt, NULL, o->sku, o->view.epoch,
                    NULL, NULL);
        o->claim_ok = false;
    }
    if (o->waiting && o->s != NULL)
        ltab_unwait(o->s, &o->wait);
    o->waiting = false;
    if ((st == INV_SOLD_OUT || st == INV_INSUFFICIENT) && o->has_id) {
        /* Segments known empty were skipped without Redis, so the scripts that spot a
         * replay may not have run: a retry of a confirmed order must still get it. */
        ord_set(o, ORD_RECORD);
        rda_record_read(o->e->rd, o->res.order_id, o->sku, o->view.epoch, on_record, o);
        return;
    }
    answer_and_free(o);
}

/* Segments known empty in `gen`, here or by another loop (which tells the others
 * through the shared entry). */
static int empties(lsku *s, long long gen)
{
    int here = ltab_empty_count(s, gen);
    int all = ltab_shared(s) != NULL ? skutab_loop_empties(ltab_shared(s), gen) : 0;
    return here > all ? here : all;
}

/* The most the SKU holds in `gen` by a verdict from fresh counts (VERDICT), or -1. */
static long long confirmed(lsku *s, long long gen)
{
    if (!ltab_valid(s) || ltab_view(s)->gen != gen || ltab_shared(s) == NULL)
        return -1;
    return skutab_loop_verdict(ltab_shared(s), gen);
}

static bool sold_out(lsku *s, long long gen)
{
    return confirmed(s, gen) == 0;
}

/* What a reply said segment i holds now. */
static void note_stock(struct ord *o, int i, long long stock)
{
    if (ltab_note_stock(o->s, o->view.gen, i, stock) && ltab_shared(o->s) != NULL)
        skutab_loop_empty(ltab_shared(o->s), o->view.gen, i);
}

/* ---- settings ------------------------------------------------------------------- */

static void on_meta(void *arg, int rc, int found, const struct rd_meta *m)
{
    struct ord *o = arg;
    if (rc < 0) {
        finish(o, INV_UNAVAILABLE);
        return;
    }
    struct sku_view v = {0};
    if (!found || sku_mode_parse(m->mode, &v.cfg.mode) != 0 || m->segments < 1 ||
        m->segments > SEG_MAX_SEGMENTS) {
        ltab_invalidate(o->s);
        if (ltab_shared(o->s) != NULL && !skutab_dropped(ltab_shared(o->s)))
            skutab_drop(o->e->v, o->sku); /* deleted elsewhere: let go of it here too */
        finish(o, INV_UNKNOWN_SKU);
        return;
    }
    v.cfg.segments = m->segments;
    v.cfg.hold_ms = m->hold_ms;
    v.cfg.stock = m->initial;
    v.cfg.rebalance = m->rebalance;
    v.cfg.replicated = m->replicated;
    v.salt = m->salt;
    v.epoch = m->epoch;
    v.gen = m->gen;
    ltab_set_view(o->s, &v, inv_now_ms());
    if (ltab_shared(o->s) == NULL || skutab_dropped(ltab_shared(o->s)))
        ltab_set_shared(o->e->tab, o->s, skutab_entry(o->e->v, o->sku));
    skutab_loop_read(o->e->v, ltab_shared(o->s), v.gen);
    o->view = v;
    proceed(o);
}

/* Another thread of this process changed a SKU (an admin write, a cancel): drop
 * every cached view, as the thread that did it dropped its own. */
static void sync_changes(engine *e)
{
    long long now = atomic_load_explicit(&e->v->changes, memory_order_acquire);
    if (now != e->changes) {
        e->changes = now;
        ltab_invalidate_all(e->tab);
    }
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
    rda_meta_read(e->rd, o->sku, on_meta, o);
}

/* The SKU is not what this order's view says (a reset or delete): read it again. */
static void stale(struct ord *o)
{
    if (++o->stale_tries >= 4) {
        finish(o, INV_BUSY);
        return;
    }
    ltab_invalidate(o->s);
    o->claim_ok = false; /* on a cluster, a STALE may be the claim's end: claim again */
    view(o);
}

/* ---- the order id's claim (a cluster) ------------------------------------------- */

/* How much longer than the order may live its id's claim lasts; a segment refuses a
 * deduction within CLAIM_MARGIN_MS of the claim's end (the clocks of two masters). */
#define CLAIM_SLACK_MS 3000
#define CLAIM_MARGIN_MS 1000

static void on_claim(void *arg, int rc, struct rd_reply *r);

static void claim(struct ord *o)
{
    engine *e = o->e;
    int lease = e->v->opt.lock_wait_ms + o->view.cfg.hold_ms +
                2 * e->v->opt.redis_timeout_ms + CLAIM_SLACK_MS;
    const char *plan = o->dplan != NULL ? RD_PLAN_KEEP : o->mclaiming ? o->mplan : NULL;
    o->claim_ends_ms = inv_now_ms() + lease;
    ord_set(o, ORD_CLAIM);
    rda_claim(e->rd, o->res.order_id, o->attempt, o->sku, o->view.epoch, lease, o->dead,
              plan, on_claim, o);
}

static void on_claim_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    claim(arg);
}

static void on_recovered(void *arg, int rc, struct rd_reply *r)
{
    struct ord *o = arg;
    if (rc < 0 || r->code != RD_OK) {
        finish(o, rc < 0 ? INV_UNAVAILABLE : INV_BUSY);
        return;
    }
    o->claim_ok = false; /* the id has its record now */
    char *record = o->recovered;
    o->recovered = NULL;
    replayed(o, record);
}

/* Where the order of a dead claim went: its record is written from the segment
 * that holds it (the same record its own CONFIRM would have written), or, when no
 * segment does, the id is claimed afresh. Either way the dead claim is taken over
 * first: its attempt can no longer deduct (deduct_slot.lua refuses past its end). */
static void on_found(void *arg, int rc, int seg, long long qty)
{
    struct ord *o = arg;
    if (rc < 0) {
        finish(o, INV_UNAVAILABLE);
        return;
    }
    if (seg >= 0)
        o->recovered =
            record_build(o->res.order_id, o->sku, qty, 1, &seg, &qty, "confirmed");
    claim(o);
}

/* The plan of a dead multi-segment claim, undone under the claim taken over: the id
 * is claimed again without it, and the order placed afresh. */
static void on_dead_undone(void *arg, int rc, int units)
{
    struct ord *o = arg;
    (void)units;
    if (rc < 0) { /* the claim keeps the plan: whoever holds it next undoes it */
        finish(o, INV_UNAVAILABLE);
        return;
    }
    free(o->dplan);
    o->dplan = NULL;
    claim(o);
}

/* The id is ours: go on with what the claim was for. */
static void claimed(struct ord *o)
{
    engine *e = o->e;
    if (o->dplan != NULL) {
        if (rda_undo(e->rd, o->res.order_id, o->dplan, on_dead_undone, o) != 0)
            finish(o, INV_UNAVAILABLE); /* not a plan: left for an operator */
    } else if (o->mclaiming) {
        o->mclaiming = false;
        ord_set(o, ORD_MULTI);
        multi_go(o);
    } else if (o->recovered != NULL)
        rda_confirm(e->rd, o->res.order_id, o->attempt, o->recovered, o->sku,
                    o->view.epoch, on_recovered, o);
    else
        round_begin(o);
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
        finish(o, INV_UNAVAILABLE);
    else if (replicas < 1) { /* nothing sold: the claim (and the plan) given up */
        if (o->mclaiming)
            rda_intent(o->e->rd, o->res.order_id, false, NULL, NULL);
        o->mclaiming = false;
        finish(o, INV_NOT_REPLICATED);
    } else
        claimed(o);
}

static void on_claim(void *arg, int rc, struct rd_reply *r)
{
    struct ord *o = arg;
    engine *e = o->e;
    if (rc < 0) {
        finish(o, INV_UNAVAILABLE);
        return;
    }
    switch (r->code) {
    case RD_OK:
        o->claim_ok = true;
        o->until = r->value;
        free(o->dead);
        o->dead = NULL;
        /* Replicated, a claim for a sale (the others hold what they undo): WAIT. */
        if (o->view.cfg.replicated && o->dplan == NULL && o->recovered == NULL)
            rda_wait(e->rd, o->placed, -1, o->res.order_id,
                     e->v->opt.redis_timeout_ms / 2, on_claim_waited, o);
        else
            claimed(o);
        return;
    case RD_EXISTS:
        replayed(o, r->record);
        r->record = NULL;
        return;
    case RD_BUSY: /* the same id in flight elsewhere: its answer will be ours */
        if (inv_now_ms() + 20 < o->deadline_ms)
            arm(o, 20, on_claim_retry);
        else
            finish(o, INV_BUSY);
        return;
    case RD_MISSING: /* a claim that ran out with no record */
        free(o->dead);
        o->dead = r->record;
        r->record = NULL;
        if (r->plan != NULL && r->plan[0] != '\0') { /* a multi-segment order's */
            free(o->dplan);
            o->dplan = r->plan;
            r->plan = NULL;
            claim(o);
            return;
        }
        rda_find_order(e->rd, o->placed, o->view.cfg.segments, o->res.order_id, on_found,
                       o);
        return;
    default:
        finish(o, INV_UNAVAILABLE);
    }
}

/* Settings known: on a cluster an order with a client id claims the id first. */
static void proceed(struct ord *o)
{
    rd_sku_placed(o->placed, o->sku, o->view.salt);
    if (rda_cluster(o->e->rd) && o->has_id && !o->claim_ok) {
        claim(o);
        return;
    }
    round_begin(o);
}

/* ---- one segment ---------------------------------------------------------------- */

static void short_of_stock(struct ord *o, int i, long long stock, bool known)
{
    stat_add(o->e->v, STAT_FALL_THROUGHS, 1);
    o->seen[i] = known ? stock : 0;
    if (known)
        note_stock(o, i, stock);
    if (stock > 0)
        o->stock_left = true;
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
    finish(o, o->mreplicas < 0   ? INV_UNAVAILABLE
              : o->mreplicas < 1 ? INV_NOT_REPLICATED
                                 : INV_OK);
}

/* The order is placed (and, on a cluster, its record written). Durability
 * "replicated": 201 only once a replica has it too (WAIT 1, half the Redis timeout,
 * on the node of each of its segments, and of its record); otherwise 503
 * not_replicated, and a retry with the id settles it. */
static void placed(struct ord *o)
{
    engine *e = o->e;
    o->claim_ok = false;
    o->res.record = o->record;
    o->record = NULL;
    if (!o->view.cfg.replicated) {
        finish(o, INV_OK);
        return;
    }
    ord_set(o, ORD_PLACED);
    bool parts = o->mplaced && rda_cluster(e->rd); /* one connection: one WAIT */
    o->mwaits = parts ? o->mn : 1;
    o->mreplicas = 1 << 30;
    for (int k = 0, n = o->mwaits; k < n; k++)
        rda_wait(e->rd, o->placed, parts ? o->mseg[k] : o->res.segment, o->res.order_id,
                 e->v->opt.redis_timeout_ms / 2, on_waited, o);
}

/* A cluster: the record of a deduction that was OK. No answer: the outcome is
 * unknown to the client, and the claim stays for a retry to settle. */
static void on_confirmed(void *arg, int rc, struct rd_reply *r)
{
    struct ord *o = arg;
    if (rc < 0 || r->code != RD_OK) {
        finish(o, INV_UNAVAILABLE);
        return;
    }
    placed(o);
}

/* Our DEDUCT (keep) answered: the order the lock went on to may go on with it, or,
 * when the script let it go (or the answer was lost: then let go of it here),
 * takes the segment again the usual way, with an ACQUIRE. */
static void settle_successor(struct ord *o, int rc, const struct rd_reply *r)
{
    struct ord *w = o->succ;
    if (w == NULL)
        return;
    o->succ = NULL;
    w->pred = NULL;
    if (rc == 0 && r->code == RD_OK) {
        if (w->hold_over)
            arm(w, 0, on_hold_done);
        return;
    }
    if (rc < 0)
        rda_release(o->e->rd, o->placed, o->seg, o->token, NULL, NULL);
    lease_stop(w);
    w->handed = w->seg; /* still claimed here */
    ord_set(w, ORD_ROUND);
    arm(w, 0, on_round_timer);
}

static void on_deduct(void *arg, int rc, struct rd_reply *r)
{
    struct ord *o = arg;
    int i = o->seg;
    bool pipelined = o->pipelined;
    o->pipelined = false;
    settle_successor(o, rc, r);
    lease_stop(o); /* the segment's claim went on with the DEDUCT (on_hold_done) */
    if (rc < 0) {
        finish(o, INV_UNAVAILABLE);
        return;
    }
    switch (r->code) {
    case RD_OK:
        note_stock(o, i, r->value);
        o->res.segment = i;
        if (o->confirm) { /* the record, in the id's slot */
            ord_set(o, ORD_PLACED);
            rda_confirm(o->e->rd, o->res.order_id, o->attempt, o->record, o->sku,
                        o->view.epoch, on_confirmed, o);
            return;
        }
        placed(o);
        return;
    case RD_FENCED: /* pipelined: the lock was held elsewhere, nothing was tried */
        stat_add(o->e->v, pipelined ? STAT_BUSY_SKIPS : STAT_FENCED_REJECTIONS, 1);
        o->busy++;
        break;
    case RD_STALE:
        stale(o);
        return;
    case RD_EXISTS:
        replayed(o, r->record);
        r->record = NULL;
        return;
    default:
        short_of_stock(o, i, r->value, r->code == RD_SHORT);
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
        finish(o, o->res.status); /* frees it */
}

static void send_deduct(struct ord *o, const char *token, bool keep)
{
    ord_set(o, ORD_DEDUCT);
    if (!o->has_id && !o->claim_ok) /* a fresh id: made for the segment's slot */
        rda_id_for_segment(o->e->rd, o->placed, o->seg, o->res.order_id);
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
        new_token(o->e, attempt);
    long long until = o->claim_ok ? o->until - CLAIM_MARGIN_MS : 0;
    o->confirm =
        !rda_deduct(o->e->rd, o->placed, o->view.epoch, o->seg, token, attempt,
                    o->res.order_id, o->qty, o->record, until, keep, on_deduct, o);
}

/* Orders a lock may serve in a row, kept from one to the next (pass_lock). */
#define KEEP_MAX 16

/* The lock held by `o` goes on to `w`, the next order of this loop waiting for the
 * segment, with the DEDUCT that leaves it held (keep): `w` starts its hold at once,
 * without a round trip for an ACQUIRE. Its own DEDUCT waits for ours to answer
 * (settle_successor): only an OK leaves the lock held. Both are fenced by the same
 * token; the lease goes on being renewed by the holder. */
static bool may_keep(const struct ord *o, const struct ord *w)
{
    const engine *e = o->e;
    return !rda_cluster(e->rd) && o->keeps < KEEP_MAX &&
           inv_now_ms() - o->lock_ms < e->v->opt.lock_ttl_ms / 3 &&
           w->view.cfg.hold_ms > 0 && o->seg < w->n && w->pred == NULL;
}

static void pass_lock(struct ord *o, struct ord *w)
{
    engine *e = o->e;
    ord_set(w, ORD_HOLD);
    w->waiting = false; /* ltab_next_holder took it out of the queue */
    event_del(w->timer);
    w->seg = o->seg;
    memcpy(w->token, o->token, sizeof w->token);
    w->lock_ms = o->lock_ms;
    w->keeps = o->keeps + 1;
    w->pred = o;
    o->succ = w;
    w->hold_over = false;
    /* its round as if it had started at the segment and taken it */
    w->handed = -1;
    round_reset(w, ring_start(w->seg, w->n, e->home, e->homes), 1);
    stat_observe(e->v, HIST_LOCK_WAIT, (inv_now_ms() - w->started_ms) * 1000);
    lease_start(w);
    arm(w, w->view.cfg.hold_ms, on_hold_done);
}

static void on_hold_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ord *o = arg;
    if (o->pred != NULL) { /* the lock's last DEDUCT has not answered: wait for it */
        o->hold_over = true;
        return;
    }
    if (o->lease_lost) { /* the fenced write would refuse us anyway */
        lease_stop(o);
        stat_add(o->e->v, STAT_FENCED_REJECTIONS, 1);
        o->busy++;
        unclaim(o, o->seg);
        visit_next(o);
        return;
    }
    /* The next order of this loop waiting for the segment takes the lock over as
     * the DEDUCT keeps it (pass_lock); or, when it cannot, the DEDUCT releases the
     * lock in Redis whatever it answers, so that order may send its ACQUIRE now,
     * behind it on the same connection, instead of a round trip later. (Should it get
     * there first after all, a redirect on a cluster, it is BUSY and looks
     * elsewhere.) */
    struct lwait *w = ltab_next_holder(o->s, o->seg);
    struct ord *next = w != NULL && w->handed == on_handed ? waiting_order(w) : NULL;
    if (next != NULL && !may_keep(o, next))
        next = NULL;
    send_deduct(o, o->token, next != NULL);
    if (next != NULL)
        pass_lock(o, next);
    else if (w != NULL)
        w->handed(w, o->seg);
    else
        ltab_free_claim(o->s, o->seg); /* nobody waits: no need to look again */
}

static void on_acquire(void *arg, int rc, struct rd_reply *r)
{
    struct ord *o = arg;
    engine *e = o->e;
    int i = o->seg;
    if (rc < 0) {
        unclaim(o, i);
        finish(o, INV_UNAVAILABLE);
        return;
    }
    switch (r->code) {
    case RD_OK:
        stat_add(e->v, STAT_LOCK_ACQUIRED, 1);
        stat_observe(e->v, HIST_LOCK_WAIT, (inv_now_ms() - o->started_ms) * 1000);
        lease_start(o);
        if (o->view.cfg.hold_ms > 0) {
            ord_set(o, ORD_HOLD);
            arm(o, o->view.cfg.hold_ms, on_hold_done);
        } else
            send_deduct(o, o->token, false);
        return;
    case RD_BUSY:
        note_stock(o, i, r->value);
        stat_add(e->v, STAT_BUSY_SKIPS, 1);
        o->busy++;
        break;
    case RD_EXISTS:
        unclaim(o, i);
        replayed(o, r->record);
        r->record = NULL;
        return;
    case RD_STALE:
        unclaim(o, i);
        stale(o);
        return;
    default:
        short_of_stock(o, i, r->value, r->code == RD_SHORT);
    }
    unclaim(o, i);
    visit_next(o);
}

/* ---- several segments ----------------------------------------------------------- */

static void multi_release(struct ord *o)
{
    for (int k = 0; k < o->mk; k++) {
        rda_release(o->e->rd, o->placed, o->mseg[k], o->mtok[k], NULL, NULL);
        ltab_unclaim(o->s, o->mseg[k]);
    }
    o->mk = 0;
}

static void spread_end(struct ord *o)
{
    ltab_rebalance_end(o->s);
}

/* The locks of a multi-segment order or a spread could not all be had: give back
 * those taken. A spread gives way to the order (it goes on with its round); an
 * order ends with `st`. */
static void multi_give_up(struct ord *o, inv_status st)
{
    bool spreading = o->state == ORD_SPREAD;
    multi_release(o);
    if (spreading)
        spread_end(o);
    if (spreading && st != INV_UNAVAILABLE)
        round_begin(o);
    else
        finish(o, st);
}

/* The parts' locks were given back by their scripts. */
static void multi_unclaim(struct ord *o)
{
    for (int k = 0; o->view.cfg.mode == SKU_MODE_LOCK && k < o->mn; k++)
        ltab_unclaim(o->s, o->mseg[k]);
    o->mk = 0;
}

/* A multi-segment order was refused with `code` and nothing of it stands: look again
 * (with what the refusal said), within the deadline. */
static void multi_failed(struct ord *o, int code)
{
    switch (code) {
    case RD_STALE:
        stale(o);
        return;
    case RD_FENCED:
        stat_add(o->e->v, STAT_FENCED_REJECTIONS, 1);
        break;
    case RD_SHORT:
        /* The plan came from hints, and the script's stocks did not update them:
         * they belong to a newer generation (a cancel or restock since this loop
         * read the settings). Read the settings again before another plan. */
        ltab_invalidate(o->s);
        break;
    default:
        break;
    }
    if (inv_now_ms() >= o->deadline_ms) { /* the deadline holds here too */
        verdict(o);
        return;
    }
    view(o); /* look again, with what the script saw */
}

static void on_multi(void *arg, int rc, struct rd_reply *r, const long long *stocks)
{
    struct ord *o = arg;
    multi_unclaim(o);
    if (rc < 0) {
        finish(o, INV_UNAVAILABLE);
        return;
    }
    if (r->code == RD_OK || r->code == RD_SHORT)
        for (int k = 0; k < o->mn; k++)
            note_stock(o, o->mseg[k], stocks[k]);
    switch (r->code) {
    case RD_OK:
        stat_add(o->e->v, STAT_MULTI_SEGMENT, 1);
        o->res.record = o->record;
        o->record = NULL;
        o->res.segment = o->mseg[0];
        finish(o, INV_OK);
        return;
    case RD_EXISTS:
        replayed(o, r->record);
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

static void on_multi_confirmed(void *arg, int rc, struct rd_reply *r)
{
    struct ord *o = arg;
    if (rc < 0 || r->code != RD_OK) { /* the record's outcome is unknown */
        finish(o, INV_UNAVAILABLE);
        return;
    }
    rda_intent(o->e->rd, o->res.order_id, false, NULL, NULL);
    stat_add(o->e->v, STAT_MULTI_SEGMENT, 1);
    o->res.segment = o->mseg[0];
    o->mplaced = true;
    placed(o);
}

static void on_multi_undone(void *arg, int rc, int units)
{
    struct ord *o = arg;
    (void)units;
    if (rc < 0) {
        finish(o, INV_UNAVAILABLE);
        return;
    }
    /* Nothing of it stands: the claim (and the plan) given up, and the intent. */
    rda_confirm(o->e->rd, o->res.order_id, o->attempt, NULL, o->sku, o->view.epoch, NULL,
                NULL);
    o->claim_ok = false;
    rda_intent(o->e->rd, o->res.order_id, false, NULL, NULL);
    multi_failed(o, o->mcode);
}

static void on_part(void *arg, int rc, struct rd_reply *r)
{
    struct part *p = arg;
    struct ord *o = p->o;
    if (rc < 0)
        o->mlost = true;
    else if (r->code == RD_OK || r->code == RD_SHORT)
        note_stock(o, o->mseg[p->k], r->value);
    if (rc == 0 && r->code != RD_OK && (o->mcode == RD_OK || r->code == RD_STALE))
        o->mcode = r->code; /* STALE wins: the view is re-read */
    if (--o->mleft > 0)
        return;
    multi_unclaim(o);
    if (o->mlost)
        finish(o, INV_UNAVAILABLE);
    else if (o->mcode == RD_OK)
        rda_confirm(o->e->rd, o->res.order_id, o->attempt, o->record, o->sku,
                    o->view.epoch, on_multi_confirmed, o);
    else if (inv_now_ms() >= o->claim_ends_ms - CLAIM_MARGIN_MS)
        /* The claim may be another's by now, and what the id holds in a segment its
         * parts: the undo is for whoever holds the claim next. */
        finish(o, INV_UNAVAILABLE);
    else if (rda_undo(o->e->rd, o->res.order_id, o->mplan, on_multi_undone, o) != 0)
        finish(o, INV_UNAVAILABLE);
}

/* Every part at once, each in its own slot. */
static void multi_parts(struct ord *o)
{
    free(o->mctx);
    o->mctx = seg_malloc(sizeof *o->mctx * (size_t)o->mn);
    o->mleft = o->mn;
    o->mcode = RD_OK;
    o->mlost = false;
    bool locked = o->view.cfg.mode == SKU_MODE_LOCK;
    for (int k = 0; k < o->mn; k++) {
        o->mctx[k] = (struct part){o, k};
        rda_deduct_part(o->e->rd, o->placed, o->view.epoch, o->mseg[k],
                        locked ? o->mtok[k] : "", o->res.order_id, o->mpart[k],
                        o->until - CLAIM_MARGIN_MS, k == 0, on_part, &o->mctx[k]);
    }
}

static void on_intent(void *arg, int rc, int value)
{
    struct ord *o = arg;
    (void)value;
    if (rc < 0) {
        finish(o, INV_UNAVAILABLE);
        return;
    }
    o->mclaiming = true;
    claim(o);
}

static void multi_deduct(struct ord *o)
{
    free(o->record);
    o->record = record_build(o->res.order_id, o->sku, o->qty, o->mn, o->mseg, o->mpart,
                             "confirmed");
    if (rda_cluster(o->e->rd)) {
        multi_parts(o);
        return;
    }
    char attempt[33];
    new_token(o->e, attempt);
    const char **tok = seg_malloc(sizeof *tok * (size_t)o->mn);
    for (int k = 0; k < o->mn; k++)
        tok[k] = o->view.cfg.mode == SKU_MODE_LOCK ? o->mtok[k] : "";
    const struct rd_parts parts = {o->mn, o->mseg, o->mpart, tok};
    rda_deduct_multi(o->e->rd, o->placed, o->view.epoch, o->res.order_id, o->record,
                     attempt, &parts, on_multi, o);
    free(tok);
}

static void multi_lock_next(struct ord *o);

/* The ADJUST script evened the stock out (and released the locks) or refused. */
static void on_spread(void *arg, int rc, struct rd_reply *r)
{
    struct ord *o = arg;
    if (rc < 0) {
        multi_give_up(o, INV_UNAVAILABLE);
        return;
    }
    for (int k = 0; k < o->mn; k++)
        ltab_unclaim(o->s, o->mseg[k]); /* the script released the locks */
    o->mk = 0;
    spread_end(o);
    if (r->code == RD_OK) {
        stat_add(o->e->v, STAT_REBALANCES, 1);
        skutab_invalidate(o->e->v, o->sku); /* a new generation: every loop re-reads */
        ltab_invalidate(o->s);
        view(o);
    } else if (r->code == RD_STALE) {
        stale(o);
    } else {
        round_begin(o);
    }
}

static void spread_apply(struct ord *o)
{
    const char **tok = seg_malloc(sizeof *tok * (size_t)o->mn);
    for (int k = 0; k < o->mn; k++)
        tok[k] = o->mtok[k];
    rda_adjust(o->e->rd, o->placed, o->view.epoch, o->mn, tok, "spread", 0, SKU_STOCK_MAX,
               NULL, "", on_spread, o);
    free(tok);
}

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
    arm(o, ring_backoff_ms(o->mround++, rnd(o->e, UINT32_MAX), left), on_multi_retry);
}

/* Lock segment mseg[mk], whose claim this order holds. */
static void multi_lock_send(struct ord *o)
{
    int i = o->mseg[o->mk];
    new_token(o->e, o->mtok[o->mk]);
    stat_add(o->e->v, STAT_LOCK_ATTEMPTS, 1);
    rda_lock(o->e->rd, o->placed, i, o->mtok[o->mk], o->e->v->opt.lock_ttl_ms,
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
    struct ord *o = waiting_order(w);
    o->waiting = false;
    o->mhanded = seg;
    arm(o, 0, on_multi_claimed);
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
static void multi_lock_next(struct ord *o)
{
    if (o->mk == o->mn) {
        if (o->state == ORD_SPREAD)
            spread_apply(o);
        else
            multi_deduct(o);
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
    arm(o, left, on_multi_wait_over);
}

static void multi_alloc(struct ord *o)
{
    const int n = o->n;
    free(o->mseg);
    free(o->mpart);
    free(o->mtok);
    o->mseg = seg_malloc(sizeof *o->mseg * (size_t)n);
    o->mpart = seg_malloc(sizeof *o->mpart * (size_t)n);
    o->mtok = seg_calloc((size_t)n, sizeof *o->mtok);
    o->mk = 0;
    o->mround = 0;
}

/* The automatic rebalance, once per generation per loop, by the order that finds it
 * due (mode lock, most segments seen empty, stock left): every segment locked in
 * index order, then ADJUST "spread", so the end of a sale keeps every segment
 * working. The order goes on once it is done. On a cluster the spread is steps over
 * the segments' slots: the sweeper thread runs it (sweeper.h), and the order goes on
 * at once. */
static bool spread_begin(struct ord *o)
{
    const int n = o->n;
    if (o->view.cfg.mode != SKU_MODE_LOCK || !o->view.cfg.rebalance || n < 2)
        return false;
    int empty = empties(o->s, o->view.gen);
    if (empty * 2 < n || empty == n || !ltab_rebalance_begin(o->s, o->view.gen))
        return false;
    if (rda_cluster(o->e->rd)) {
        sweeper_spread(o->e->v->sw, o->sku);
        ltab_rebalance_end(o->s);
        return false;
    }
    multi_alloc(o);
    for (int i = 0; i < n; i++)
        o->mseg[i] = i;
    o->mn = n;
    ord_set(o, ORD_SPREAD);
    multi_lock_next(o);
    return true;
}

/* The plan is known (and on a cluster recorded): lock the parts, or deduct. */
static void multi_go(struct ord *o)
{
    if (o->view.cfg.mode == SKU_MODE_LOCK)
        multi_lock_next(o);
    else
        multi_deduct(o);
}

/* No segment holds qty but together they may: the largest first, in index order. */
static void multi_begin(struct ord *o)
{
    const int n = o->n;
    multi_alloc(o);
    int k = ring_plan_parts(o->seen, n, o->qty, o->mseg, o->mpart);
    if (k == 0) {
        verdict(o);
        return;
    }
    o->mn = k;
    ord_set(o, ORD_MULTI);
    if (rda_cluster(o->e->rd)) { /* the intent first */
        const struct rd_parts parts = {k, o->mseg, o->mpart, NULL};
        free(o->mplan);
        o->mplan = rd_plan_build(o->placed, o->view.epoch, &parts);
        rda_intent(o->e->rd, o->res.order_id, true, on_intent, o);
        return;
    }
    multi_go(o);
}

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
    view(o); /* the settings were dropped: read again */
}

static void on_verdict_meta(void *arg, int rc, int found, const struct rd_meta *m)
{
    struct ord *o = arg;
    if (rc < 0) {
        finish(o, INV_UNAVAILABLE);
        return;
    }
    if (!found) {
        ltab_invalidate(o->s);
        finish(o, INV_UNKNOWN_SKU);
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
        finish(o, o->vtotal == 0 ? INV_SOLD_OUT : INV_INSUFFICIENT);
        return;
    }
    if (left <= 0) {
        finish(o, INV_BUSY);
        return;
    }
    if (same && !moving) { /* the stock is there: the hints were behind */
        ltab_set_hints(o->s, o->view.gen, o->seen, o->n);
        round_begin(o);
        return;
    }
    ltab_invalidate(o->s);
    if (!same) {
        view(o);
        return;
    }
    arm(o, ring_backoff_ms(o->remote_rounds++, rnd(o->e, UINT32_MAX), left),
        on_verdict_wait);
}

static void on_verdict_stocks(void *arg, int rc, const long long *stock)
{
    struct ord *o = arg;
    if (rc < 0) {
        finish(o, INV_UNAVAILABLE);
        return;
    }
    o->vtotal = 0;
    for (int i = 0; i < o->n; i++) {
        o->seen[i] = stock[i];
        o->vtotal += stock[i];
    }
    rda_meta_read(o->e->rd, o->sku, on_verdict_meta, o);
}

/* Nothing found to fill the order (or the deadline came first): sold out,
 * insufficient or busy, from the counts. */
static void verdict(struct ord *o)
{
    ord_set(o, ORD_VERDICT);
    long long most = confirmed(o->s, o->view.gen);
    if (most >= 0 && most < o->qty) {
        finish(o, most == 0 ? INV_SOLD_OUT : INV_INSUFFICIENT);
        return;
    }
    rda_stocks_read(o->e->rd, o->placed, o->n, on_verdict_stocks, o);
}

/* ---- rounds --------------------------------------------------------------------- */

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
    struct ord *o = waiting_order(w);
    o->waiting = false;
    o->handed = seg;
    arm(o, 0, on_round_timer);
}

static void round_end(struct ord *o)
{
    engine *e = o->e;
    int passed = o->claimed + o->away + o->busy;
    if (passed == 0 && !o->stock_left) {
        verdict(o);
        return;
    }
    int remaining = (int)(o->deadline_ms - inv_now_ms());
    if (passed == 0 && (o->n == 1 || remaining > 0)) {
        if (o->n == 1)
            verdict(o);
        else
            multi_begin(o);
        return;
    }
    if (remaining <= 0) {
        /* Busy with what? When every segment together cannot fill the order, the
         * honest answer is sold out or insufficient, not "busy, retry". */
        verdict(o);
        return;
    }
    stat_add(e->v, STAT_LOCK_WAITS, 1);
    if (o->busy > 0 || o->claimed == 0) {
        /* a lock held elsewhere sends no signal (nor does another loop's claim, nor
         * one away from home here): back off */
        ord_set(o, ORD_BACKOFF);
        arm(o, ring_backoff_ms(o->remote_rounds++, rnd(e, UINT32_MAX), remaining),
            on_round_timer);
        return;
    }
    /* Only orders of this loop were in the way: wait for one to hand its claim over,
     * unless one may fill the order and is free already, or none can any more. */
    bool hopeless = true;
    for (int i = 0; i < o->n; i++) {
        long long h = ltab_hint(o->s, i);
        bool may_fill = h < 0 || h >= o->qty;
        hopeless &= !may_fill;
        if (may_fill && !ltab_claimed(o->s, i) && !ltab_claimed_elsewhere(o->s, i)) {
            arm(o, 0, on_round_timer);
            return;
        }
    }
    if (hopeless) {
        arm(o, 0, on_round_timer);
        return;
    }
    ord_set(o, ORD_WAIT);
    o->waiting = true;
    o->wait.seg = -1;
    o->wait.handed = on_handed;
    ltab_wait(o->s, &o->wait);
    arm(o, remaining, on_round_timer);
}

static void visit_next(struct ord *o)
{
    engine *e = o->e;
    ord_set(o, ORD_ROUND);
    bool locked = o->view.cfg.mode == SKU_MODE_LOCK;
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
            send_deduct(o, "", false);
            return;
        }
        if (o->view.cfg.hold_ms == 0) {
            /* No work under the lock: SET NX PX and the fenced DEDUCT leave in one
             * write and run back to back, so the lock is held for microseconds, not
             * a round trip, and orders of this loop need no claim to keep out of
             * each other's way (a connection's commands run in order). A lock held
             * elsewhere makes the DEDUCT answer FENCED having touched nothing; a
             * short segment, SHORT with the lock released by the script. */
            if (mine)
                ltab_unclaim(o->s, i);
            new_token(e, o->token);
            stat_add(e->v, STAT_LOCK_ATTEMPTS, 1);
            o->pipelined = true;
            o->pending++;
            rda_lock(e->rd, o->placed, i, o->token, e->v->opt.lock_ttl_ms, on_piped_lock,
                     o);
            send_deduct(o, o->token, false);
            return;
        }
        if (!mine && (ltab_claimed_elsewhere(o->s, i) || !ltab_claim(o->s, i))) {
            stat_add(e->v, STAT_BUSY_SKIPS, 1);
            if (ltab_claimed(o->s, i) && ring_home(i, o->n, e->home, e->homes))
                o->claimed++;
            else
                o->away++;
            continue;
        }
        new_token(e, o->token);
        o->lock_ms = inv_now_ms();
        o->keeps = 0;
        stat_add(e->v, STAT_LOCK_ATTEMPTS, 1);
        ord_set(o, ORD_ACQUIRE);
        rda_acquire(e->rd, o->placed, o->view.epoch, i, o->res.order_id, o->qty, o->token,
                    e->v->opt.lock_ttl_ms, on_acquire, o);
        return;
    }
    o->handed = -1;
    round_end(o);
}

static void round_begin(struct ord *o)
{
    engine *e = o->e;
    ord_set(o, ORD_ROUND);
    if (o->handed < 0 && sold_out(o->s, o->view.gen)) {
        stat_add(e->v, STAT_SOLD_OUT_FAST, 1);
        finish(o, INV_SOLD_OUT);
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
    if (o->handed < 0 && spread_begin(o))
        return;
    round_reset(o,
                o->handed >= 0 ? ring_start(o->handed, o->n, e->home, e->homes)
                               : (int)rnd(e, (uint32_t)o->n),
                0);
    visit_next(o);
}

/* ---- the engine ----------------------------------------------------------------- */

static void on_start(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ord *o = arg;
    if (o->res.status == INV_INVALID)
        answer_and_free(o);
    else
        view(o);
}

void engine_order(engine *e, const struct order_request *req, engine_done_fn fn,
                  void *arg)
{
    struct ord *o = seg_calloc(1, sizeof *o);
    o->e = e;
    o->fn = fn;
    o->arg = arg;
    o->handed = -1;
    o->res.segment = -1;
    o->started_ms = inv_now_ms();
    o->deadline_ms = o->started_ms + e->v->opt.lock_wait_ms;
    new_token(e, o->attempt);
    o->timer = evtimer_new(e->base, on_start, o);
    o->renew = event_new(e->base, -1, EV_PERSIST, on_renew_tick, o);
    if (o->timer == NULL || o->renew == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    e->in_flight++;
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
    struct timeval now = {0, 0};
    evtimer_add(o->timer, &now);
}

engine *engine_create(inv *v, struct event_base *base, int home, int homes)
{
    engine *e = seg_calloc(1, sizeof *e);
    e->v = v;
    e->base = base;
    e->home = home;
    e->homes = homes;
    e->tab = ltab_create(home, homes, v->tab);
    if (getrandom(&e->rng, sizeof e->rng, 0) != sizeof e->rng ||
        getrandom(&e->token_id, sizeof e->token_id, 0) != sizeof e->token_id) {
        perror("getrandom");
        abort();
    }
    e->rng |= 1;
    const struct rd_target to = inv_redis_target(v);
    const struct rda_counters counts = {&v->stats[STAT_REDIS_ERRORS],
                                        &v->stats[STAT_REDIS_COMMANDS],
                                        &v->stats[STAT_REDIS_WRITES]};
    e->rd = rda_create(base, &to, &counts);
    e->changes = atomic_load_explicit(&v->changes, memory_order_acquire);
    return e;
}

void engine_free(engine *e)
{
    if (e == NULL)
        return;
    rda_free(e->rd);
    ltab_free(e->tab);
    free(e);
}

const char *engine_error(const engine *e)
{
    return rda_error(e->rd);
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
        !sold_out(s, ltab_view(s)->gen))
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
    struct rda_stats st;
    rda_stats(e->rd, &st);
    *commands = st.commands;
    *writes = st.writes;
}
