/* engine_internal.h -- the engine's own layout and steps, shared by its files only.
 *
 * Nothing outside the engine's files (engine.c, ord.c, lease.c, handover.c, claims.c,
 * multi.c, spread.c, verdict.c) includes this. An order (`struct ord`) lives on one
 * engine, on its loop's thread; it is a state machine: `state` says what it waits for,
 * ord_set() (ord.c) is the only writer of it and checks every transition against one
 * table. The files are layered, each calling only those below it:
 *
 *   engine.c   the order path: settings, rounds of the ring, one segment's ACQUIRE,
 *              hold and DEDUCT; the engine's API and its table of steps
 *   spread.c   the automatic rebalance; an admin restock or rebalance (ADJUST) and
 *              an order's cancel (CANCEL), under the store's locks
 *   multi.c    several segments at once
 *   claims.c   a cluster: the order id's claim  verdict.c sold out, from fresh counts
 *   handover.c a lock kept from one order to the next (the store's, or a lock
 *              service's hold)                         lease.c  lease renewal
 *   batch.c    group commit: the orders queued for a segment ride on one hold
 *   ord.c      the order itself: its state and transitions, its answer and its end
 *
 * A step of a lower file that goes on to a state entered by a higher one (VIEW,
 * ROUND, MULTI, VERDICT) calls ord_enter(), which runs that state's step from the
 * engine's table `enter` (filled by engine.c). Every callback's privdata is the order (or
 * a `struct part` of it); a NULL reply (rc < 0: no answer) ends the order unavailable,
 * unless the outcome is certain without it. An order is freed by ord_finish() once
 * answered and owed no reply (`pending`).
 */
#ifndef SEG_ENGINE_INTERNAL_H
#define SEG_ENGINE_INTERNAL_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "segments/engine.h"
#include "segments/internal.h"
#include "segments/locksvc.h"
#include "segments/ltab.h"
#include "segments/skumode.h"
#include "segments/store.h"

struct ord;
typedef void (*ord_step_fn)(struct ord *o);

struct engine {
    inv *v;
    struct event_base *base;
    store *st; /* the stock store (store.h), this loop's own */
    ltab *tab;
    int home, homes; /* this loop's number, and how many (ring.h) */
    uint64_t rng, token_id, token_seq;
    int in_flight;
    const ord_step_fn *enter; /* per state, the step that enters it (engine.c) */
    /* this loop's handle of each lock service configured (sku_lock; NULL: none) */
    const struct lks_ops *lks_ops[SKU_LOCK__COUNT];
    void *lks[SKU_LOCK__COUNT];
    /* hold 0 with a batch: the orders of this loop for one segment, sent together
     * once this turn's callbacks ran, or, while BATCH_FLIGHT groups of this loop are
     * out already, when one of them answers or at most BATCH_WAIT_MS later
     * (batch.c); batch_out: those out */
    struct bgroup *groups;
    struct event *flush;
    int batch_out;
    bool borrowed;     /* st is the caller's (engine_create_admin): not freed here */
    bool tab_borrowed; /* tab is the caller's (engine_of_conn: its conn's): not freed */
};

/* The states of an order. Each is set by ord_set() alone, which checks it against
 * the transitions of ord.c's table `ord_next`; every state may end in RECORD or DONE
 * (no Redis answer at any step: DONE, unavailable). */
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
    ORD_ADJUST,  /* an admin restock or rebalance (engine_adjust): every segment's
                    store lock taken in index order, renewed, then its ADJUST */
    ORD_CANCEL,  /* an order's cancel (engine_cancel): its record's segments' store
                    locks taken in index order, renewed, then the store's CANCEL */
    ORD_VERDICT, /* fresh counts: every segment's stock, then the meta */
    ORD_PLACED,  /* sold: the record's CONFIRM (a cluster), the replicas' WAIT */
    ORD_RECORD,  /* sold out or insufficient with a client id: its record read first */
    ORD_DONE,    /* answered: freed now, or once the replies it is owed (pending) came */
    ORD__COUNT
};

/* An order. Its state is `state`; the flags left beside it are orthogonal to it:
 * what it owns or owes across states (claim_ok, holding, waiting, pending, mclaiming),
 * how the current step was sent (pipelined, confirm), or what a reply said (has_id,
 * stock_left, lease_lost, hold_over, mlost, mplaced). */
struct ord {
    engine *e;
    enum ord_state state; /* written by ord_set() only */
    char sku[SEG_NAME_MAX + 1];
    long long qty;
    bool has_id; /* the client gave the id (a retry may replay it); cleared once its
                    record was read */
    struct order_result res;
    engine_done_fn fn;
    void *arg;
    struct engine_adjust *adj; /* an admin adjust's (engine_adjust), else NULL */
    struct engine_cancel *cx;  /* an order's cancel (engine_cancel), else NULL */

    lsku *s;
    struct sku_view view;
    char placed[STORE_SKU_PLACED_MAX]; /* the SKU as its segments' calls take it */
    int64_t started_ms, deadline_ms;
    int stale_tries;

    /* a record apart (STORE_CAP_RECORD_APART): the order id's claim */
    char attempt[33]; /* this order's, for the claim and the record */
    bool claim_ok;    /* the id is ours until `until` (the claim's node's clock) */
    long long until;
    int64_t claim_ends_ms; /* the same end, as this process's clock has it at most */
    char *dead;            /* the attempt of a dead claim being taken over */
    long long dead_epoch;  /* a record's epoch CLAIM met, another than the settings
                              read again since: a reset left it (0: none) */
    char *recovered;       /* its order, found in a segment: the record to confirm */
    char *dplan;   /* its plan (a multi-segment order's): to undo once taken over */
    int found_seg; /* the segment `recovered` came from (-1: none); a replay WAITs there
                    */

    /* the current round */
    /* claimed: segments passed by that an order of this loop holds and will hand
     * on (at home here); away: those another loop holds, or that will go back free;
     * busy: those Redis found locked elsewhere */
    int n, start, k, handed, claimed, away, busy, remote_rounds;
    int turns; /* segments passed by this round as another loop's turn (takes_turns) */
    long long holds0; /* the SKU's holds ended (skutab_holds) at its first round, -1 */
    bool stock_left;  /* a segment passed by holds some stock, too little */
    long long *seen;  /* stock last seen per segment, -1 unknown; n entries */
    long long vtotal; /* VERDICT: the total of the stocks just read */

    /* the segment being worked on */
    int seg;
    char token[33];
    char *record;
    bool holding;      /* a lock of ours (lease renewed) */
    bool pipelined;    /* hold_ms 0: the lock went out with the DEDUCT, in one write */
    bool confirm;      /* a cluster: the DEDUCT wrote no record, CONFIRM writes it */
    bool seg_waited;   /* replicated: a replica had the DEDUCT before the CONFIRM went */
    bool lease_lost;   /* a renewal found it gone (or the lock service said so) */
    bool renew_failed; /* a lock service's renewal of `lh` went unanswered */
    int renewing;      /* renewals of `lh` out (their answers come to this order) */
    int64_t renew_due_ms; /* when the lease's next renewal is sent (lease.c) */
    /* a lock service's hold of `seg` (SKU "lock" not the store's): from its grant
     * until its release is sent; the fence registered with the store for it (or
     * STORE_UNFENCED: the lab's "fencing": false) */
    lks_hold *lh;
    int lk; /* the service (sku_lock) `lh` is of */
    long long fence;
    int pending; /* renewals and piped locks owed a reply: the order outlives its
                    answer for them */
    /* a lock kept from one order of this loop to the next (handover.c) */
    int64_t lock_ms;  /* when the lock held was taken (its ACQUIRE sent) */
    int keeps;        /* the orders it served before this one */
    struct ord *succ; /* ours went on to it, until our DEDUCT (keep) answers */
    struct ord *pred; /* the order whose DEDUCT keeps it for us, until that answers
                         (a lock service's hold: whose DEDUCT went before ours) */
    bool hold_over;   /* our hold ended before pred's answer came (the store's) */

    /* several segments (an order's parts, or every segment for a spread) */
    int mn, mk, mround;
    int *mseg;
    int mhanded;                    /* the claim a multi-segment wait was handed, or -1 */
    void (*mlocked)(struct ord *o); /* runs once every lock of the set is held */
    long long *mpart;
    char (*mtok)[33];  /* the store's lock tokens ("" under a lock service's holds) */
    lks_hold **mlh;    /* a lock service's SKU: the holds of mseg[0..mk) */
    long long *mfence; /* ... and the fences the store registered for them */
    /* ... on a cluster, one deduction per part, under the id's claim and its plan: */
    char *mplan;
    bool mclaiming; /* the claim that records the plan is out */
    int mleft;      /* parts owed a reply */
    int mcode;      /* STORE_OK, or why a part was refused */
    bool mlost;     /* a part had no answer: its outcome is unknown */
    bool mplaced;   /* every part deducted and the record written */
    struct part *mctx;
    int mwaits, mreplicas; /* durability "replicated": WAITs owed, the fewest replicas */

    struct event *timer; /* the state's timer (hold, backoff, wait, next turn) */
    struct event *renew; /* the lease's renewal, every lock_ttl_ms / 3 (lease.c; made
                            by the first lease_start) */
    struct lwait wait;
    bool waiting; /* `wait` is in a queue of the SKU's table (ltab_wait) */
};

/* One part of a multi-segment order on a cluster, for its reply. */
struct part {
    struct ord *o;
    int k;
};

/* ---- ord.c: the order itself ----------------------------------------------------- */

/* How much longer than the order may live its id's claim lasts; a segment refuses a
 * deduction within CLAIM_MARGIN_MS of the claim's end (the clocks of two masters). */
#define CLAIM_SLACK_MS 3000
#define CLAIM_MARGIN_MS 1000

/* A new order of e (in_flight counted, its timers made) answering to fn, its first
 * step `start` armed for the next turn of the loop. */
struct ord *ord_new(engine *e, engine_done_fn fn, void *arg,
                    void (*start)(evutil_socket_t, short, void *));
/* The name of a state, for logs and failures ("?" when out of range). */
const char *ord_state_name(enum ord_state st);
/* The one writer of o->state: a transition not in the table aborts, naming both. */
void ord_set(struct ord *o, enum ord_state to);
/* Enter VIEW, ROUND, MULTI or VERDICT by the engine's step for it (ord_set inside). */
void ord_enter(struct ord *o, enum ord_state to);

/* A random number below n (xorshift64*, the engine's state). */
uint32_t ord_rnd(engine *e, uint32_t n);
/* A lock token or attempt, unique to this engine: 32 hex digits and a NUL. */
void ord_token(engine *e, char out[33]);
/* The order's one timer: `cb` after `ms` (0: on the next turn of the loop). */
void ord_arm(struct ord *o, int ms, void (*cb)(evutil_socket_t, short, void *));

/* The order ends with `st`: links and waits undone, a claim with no sale given up, a
 * 409 with a client id reads its record first (RECORD); then answered (DONE) and
 * freed, or freed once its owed replies came. Called again in DONE: frees it then. */
void ord_finish(struct ord *o, inv_status st);
/* The answer now (fn called once), then freed unless replies are owed. */
void ord_answer_and_free(struct ord *o);
/* Whether the loop's handle routes as the process's mode says (ord.c): false while
 * it must still follow the mode to a cluster and orders of the loop are under way
 * (a new order then answers 503); the last order's end lets it follow. */
bool ord_mode_followed(engine *e);
/* The order id met again: REPLAYED with `record` (taken) when it is this order,
 * CONFLICT otherwise. A replicated SKU on a cluster: REPLAYED only once a replica
 * has the record (and the sale of a record just recovered), else 503 not_replicated. */
void ord_replayed(struct ord *o, char *record);
/* Sold: res.record set; durability replicated, WAIT for a replica first (PLACED). */
void ord_placed(struct ord *o);
/* A STALE reply: the settings read again (VIEW), 503 busy after 4. */
void ord_stale(struct ord *o);

/* Segments known empty in `gen` (the most of this loop's and all loops' count). */
int ord_empties(lsku *s, long long gen);
/* The most the SKU holds in `gen` by a verdict from fresh counts, or -1. */
long long ord_confirmed(lsku *s, long long gen);
bool ord_sold_out(lsku *s, long long gen);
/* What a reply said segment i holds now (hints; an empty one told every loop). */
void ord_note_stock(struct ord *o, int i, long long stock);

/* The order a queued waiter is part of. */
static inline struct ord *ord_of_wait(struct lwait *w)
{
    return (struct ord *)((char *)w - offsetof(struct ord, wait));
}

/* A new round of the ring from segment `start`, `k` of its segments behind it. */
static inline void ord_round_reset(struct ord *o, int start, int k)
{
    o->start = start;
    o->k = k;
    o->claimed = o->away = o->busy = o->turns = 0;
    o->stock_left = false;
}

/* Segment i's claim on this loop given back (lock mode only takes claims). */
static inline void ord_unclaim(struct ord *o, int i)
{
    if (o->view.cfg.mode == SKU_MODE_LOCK)
        ltab_unclaim(o->s, i);
}

/* ---- lease.c: lease renewal ------------------------------------------------------ */

/* The lock of `seg` is ours (in MULTI under a lock service: the holds mlh[0..mk) as
 * they are won): renewed every lock_ttl_ms / 3 until lease_stop. */
void lease_start(struct ord *o);
/* A lock service granted `h` for o->seg: renewed by lease_start's timer, its loss
 * (lost callback, renew LOST) sets lease_lost. */
void lease_svc_hold(struct ord *o, lks_hold *h);
/* Give the service's hold up (no more renewals of it). `unclaim`: segment seg's
 * claim on this loop is given back once the service answered, so the next order of
 * the loop does not meet our lock there (the order outlives its answer for it). */
void lease_svc_release(struct ord *o, bool unclaim);
/* The SKU's lock service (o->lk set from the view): false when this process has none
 * or its store cannot fence (the order then answers 503). */
bool lease_svc_ready(struct ord *o);
/* Ask o's lock service for segment i's lock (wait 0, lease lock_ttl_ms); fn gets o. */
void lease_svc_acquire(struct ord *o, int i, lks_acquire_fn fn);
/* Hold h (of segment i) marks o's lease_lost when the service loses it. */
void lease_svc_watch(struct ord *o, lks_hold *h);
/* o's hold (lh, its fence, its lost callback) goes on to w, which renews it from
 * now on when o would have (one renewal schedule per hold, not per order); o
 * renews nothing more. */
void lease_svc_pass(struct ord *o, struct ord *w);
/* Give hold h up; i >= 0: segment i's claim on this loop goes back once the service
 * answered (as lease_svc_release), i < 0: nobody waits for the answer. */
void lease_svc_give(struct ord *o, lks_hold *h, int i);
/* No more renewals (replies owed still come). */
static inline void lease_stop(struct ord *o)
{
    o->holding = false;
    if (o->renew != NULL)
        event_del(o->renew);
}

/* ---- handover.c: a lock kept from one order of this loop to the next ------------- */

/* May o's lock go on to `w` with the DEDUCT that keeps it (STORE_CAP_KEEP)? */
bool handover_may_keep(const struct ord *o, const struct ord *w);
/* o's lock goes on to `w` (taken out of the queue): w holds it now (HOLD), its hold
 * timer armed with `on_hold_done`. */
void handover_pass(struct ord *o, struct ord *w,
                   void (*on_hold_done)(evutil_socket_t, short, void *));
/* May o's lock service's hold go on to `w` (not lost, its renewals answered OK,
 * valid past w's hold with a margin, at most KEEP_MAX orders in a row)? */
bool handover_svc_may_keep(const struct ord *o, const struct ord *w);
/* o's hold goes on to `w` (taken out of the queue), o's DEDUCT sent already: w holds
 * it (HOLD, lease_svc_pass), its hold timer armed with `on_hold_done`; its DEDUCT
 * is fenced by the same fence and does not wait for o's. */
void handover_svc_pass(struct ord *o, struct ord *w,
                       void (*on_hold_done)(evutil_socket_t, short, void *));
/* o's DEDUCT (keep) answered (rc, r): its successor goes on holding (`on_hold_done`
 * now if its hold is over) when it was OK, or takes the segment again from a new
 * round (`on_round_timer`, next turn) when not. A lock service's hold: its holder
 * goes on whatever o's answer, but FENCED marks it lost (a higher fence is
 * registered: the service granted the lock again). */
void handover_settle(struct ord *o, int rc, const struct store_reply *r,
                     void (*on_hold_done)(evutil_socket_t, short, void *),
                     void (*on_round_timer)(evutil_socket_t, short, void *));

/* ---- batch.c: group commit, one lock hold sells the orders queued for it --------- */

/* o holds its segment's lock, its hold over (no lock service's, o->claim_ok false):
 * take out of the queue the orders of this loop waiting for the segment (whose
 * `handed` is `handed`) that may ride on o's hold, up to the SKU's batch with o and
 * up to the least stock seen there. Returns how many (*out: malloc'd, for
 * batch_send), and in *rest the waiter taken out that may not (the caller hands it
 * the claim), or NULL. */
int batch_gather(struct ord *o, void (*handed)(struct lwait *, int), struct ord ***out,
                 struct lwait **rest);
/* One DEDUCT_BATCH for o and m[0..n-1] (m freed), fenced by o's token; each order's
 * answer goes to `each` as its own DEDUCT's would (DEDUCT state). */
void batch_send(struct ord *o, struct ord **m, int n, store_reply_fn each);
/* A hold of this loop at o's SKU's home segments may take o into its batch (the SKU's
 * batch > 1 under the store's own lock, a store that batches, no claim of o's): o
 * then waits for one (engine.c visit_next) rather than lock a segment away from home. */
bool batch_gathers(const struct ord *o);

/* Hold 0 (mode atomic, or lock with no work under it) and a batch: o, about to
 * deduct from segment o->seg, joins the loop's unsent group for that segment, or, at
 * the first segment of its round, one for another segment of the SKU at home here
 * whose stock seen fits it (o's round then starts there: a loop's orders of one SKU
 * meet in one group, not one per segment), or starts one (DEDUCT state); sent by
 * batch_flush. false: it may not (batch 1, a claim on a cluster): it goes alone. */
bool batch_join(struct ord *o);
/* Send the groups (e->flush's callback calls it): every one while fewer than
 * BATCH_FLIGHT of this loop's are out, else the full ones and those BATCH_WAIT_MS
 * old only (the others grow until one out answers, which runs the flush again, or
 * the flush's timer). One alone goes by `alone`;
 * more as one DEDUCT_BATCH (mode lock: behind one SET NX PX of a fresh token, its
 * answer to `piped` with the group's first order, which owes it: pending), each
 * answer to `each`. */
void batch_flush(engine *e, void (*alone)(struct ord *o), store_reply_fn each,
                 store_int_fn piped);
/* The engine goes: the orders of unsent groups end unavailable. */
void batch_drop(engine *e);

/* ---- turns.c: loops taking turns on a segment; holds an order waited through ----- */

/* Group commit on segment i, at home on this loop and on another (fewer segments
 * than loops): the loops take turns on it (a loop's orders ride its own holds). */
bool turns_apply(const struct ord *o, int i);
/* Before o claims segment i, free or not, this round: true when o passes it by for
 * another loop's turn (counted away by the caller); an order that finds it claimed
 * by another loop notes its loop's want (false: the caller's check skips it). */
bool turns_yield(struct ord *o, int i);
/* o's hold of its segment ended, its batch sent, `w` (or NULL) next in line: when
 * another loop waits for its turn there, the claim goes free, w back first in line,
 * and the first in line looks again now (it yields, backs off and takes the loop's
 * next turn, whose batch takes the rest still in line): true. Otherwise false: the
 * caller hands the claim on. (A loop with more orders in line than a batch takes
 * kept the segment from hold to hold while the other loop's orders waited.) */
bool turns_give_way(struct ord *o, struct lwait *w);
/* o claimed segment i: its loop's turn. */
void turns_took(struct ord *o, int i);
/* The round to give ring_backoff_ms: under half a hold when o met another loop's
 * turn this round, so it looks again while its own loop's next hold is under way. */
int turns_backoff_round(const struct ord *o);
/* A hold of o's SKU ended: the count of them after it (-1: unknown). */
long long turns_hold_ended(const struct ord *o);
/* x sells in the hold that ended as the SKU's `ended`-th: the holds it waited
 * through before it, counted (stats holds_waited, orders_waited_past_batch). */
void turns_waited(const struct ord *x, long long ended);

/* ---- claims.c: a cluster, the order id's claim ----------------------------------- */

/* Claim the id (CLAIM): then ROUND, or MULTI (the claim records a plan: mclaiming),
 * or an answer (a replay, busy, the record of a dead claim's order). */
void claims_claim(struct ord *o);

/* ---- verdict.c: sold out, insufficient or busy, from fresh counts ---------------- */

void verdict_begin(struct ord *o);

/* ---- multi.c: several segments at once ------------------------------------------- */

/* The arrays of a set of o->n segments, none locked. */
void multi_alloc(struct ord *o);
/* A lock service's SKU (its locks are holds of the service, not the store's)? */
bool multi_svc(const struct ord *o);
/* The set's locks were given back by the store's script (a lock service's holds:
 * given back now, each segment's claim once the service answered). */
void multi_unclaim(struct ord *o);
/* Lock mseg[mk..mn) in ascending order, then o->mlocked. */
void multi_lock_next(struct ord *o);
/* The set's locks not all had: those taken given back; a spread gives way (ROUND),
 * an order ends with `st`. */
void multi_give_up(struct ord *o, inv_status st);
/* No segment holds qty: plan the parts (VERDICT when none fills it) and place them. */
void multi_begin(struct ord *o);
/* The plan known (and on a cluster recorded): its locks, then its deduction (MULTI). */
void multi_go(struct ord *o);

/* ---- spread.c: the automatic rebalance ------------------------------------------- */

/* A spread due and begun by this order (SPREAD)? false: the order goes on. */
bool spread_begin(struct ord *o);
/* An admin adjust's settings read: its locks, then its ADJUST (ADJUST). */
void adjust_begin(struct ord *o);
/* A cancel's settings read: its record's segments' locks, then its CANCEL (CANCEL). */
void cancel_begin(struct ord *o);

/* An admin write (ADJUST, CANCEL): every lock it takes is the store's, whatever the
 * SKU's scheme, renewed by lease.c; not counted as an order. */
static inline bool ord_admin_locks(const struct ord *o)
{
    return o->state == ORD_ADJUST || o->state == ORD_CANCEL;
}

#endif
