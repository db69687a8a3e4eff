/* store.h -- the seam between the engine and a stock store: one table of asynchronous
 * operations with C types (libevent's `struct eventop`), and capability bits in place
 * of "if the store is X" branches.
 *
 * A store keeps, per SKU, its settings (the meta), and per segment a stock, a lock
 * and the orders it deducted; per order id, a record. The engine knows no key name,
 * SQL statement or reply shape: it calls this table and asks `caps`.
 *
 * Backends. Each backend is a file of static functions in its own folder that fills
 * one `struct store_ops` (Redis, standalone and Cluster: segments/redis/backend.c,
 * rd_store_create; an in-memory store for tests: tests/memstore.c). A backend's handle
 * begins with a `struct store` (its ops), so the engine holds a `store *` alone. The
 * backend is chosen at one place (segments/inventory.c inv_store_create).
 *
 * Threads. A handle lives on one libevent event_base and is used from that loop's
 * thread only. Every callback runs exactly once, on the loop, never from inside the
 * call that asked for it. `rc` is 0 with the answer, or -1 when the store gave none
 * (refused, closed, timed out, an error): the outcome is unknown and the caller's ids
 * (token, attempt, order id) make a retry safe. Freeing the handle answers every
 * pending callback -1 first. `arg` is the caller's: the store never frees it. `fn`
 * may be NULL where nobody waits for the answer (a release on the way out).
 *
 * Locks and fencing. Today the lock of a segment lives in the store beside its stock
 * (Redis; PostgreSQL next): a lock is a token with a lease (ttl_ms), and every write
 * under it names the token, which the store checks (STORE_FENCED when it no longer
 * owns the lock). A lock taken from a separate lock service (segments/locksvc.h)
 * comes with a fencing number instead: the write then names it in `fence` (> 0), and
 * a store with STORE_CAP_FENCE refuses (FENCED) a fence lower than the highest it
 * accepted for that segment (Redis and PostgreSQL both do). STORE_NO_FENCE (0): the
 * store's own lock fences alone;
 * a store without STORE_CAP_FENCE is only ever given 0. The fence is registered when
 * the lock is won (`hold`, which issues one for a service that has none), before the
 * holder reads the stock it will write under it, so a holder whose lock was granted
 * again meanwhile is refused even when the new holder has written nothing yet.
 * STORE_UNFENCED (-1), the lab's demonstration (`"fencing": false`): the write
 * trusts its lock alone, neither fence nor stock checked again, as a client that
 * believes its lock does; a lock held twice then sells what is not there.
 *
 * Admin operations. The cancel of an order is here (`cancel`), sent by the engine
 * under the store's locks of the order's segments, and a blocking caller waits on it
 * (segments/order.c on its connection's own loop, engine.h engine_cancel,
 * docs/DESIGN.md "Threads"), and so does the sweeper on the undo of a dead order's plan
 * (intents_due, then the order path's claim, undo, confirm, intent: segments/sweeper.c),
 * and so does a restock or rebalance on a standalone Redis (`adjust` with its request id
 * and signature, under the engine's locks: engine.h engine_adjust) or on PostgreSQL
 * (`adjust` without tokens: its transaction locks the rows) or on a Redis Cluster
 * (`adjust` without tokens: steps over the segments' slots), and the sweeper on a
 * cluster's automatic rebalance ("spread"); and a create, reset or delete (`reset`,
 * sku.c on the connection's own loop, no lock taken).
 *
 * Ids. Every write is idempotent against itself: sent again after a lost reply it
 * recognises its own earlier work (lock token, attempt, order id) and answers what
 * really happened.
 */
#ifndef SEG_STORE_H
#define SEG_STORE_H

#include <event2/event.h>
#include <stdbool.h>

#include "base/names.h"

/* Reply codes (the same numbers as the Redis scripts' RD_* codes):
 *   OK        done                      BUSY     the lock is held by another token
 *   SHORT     less than asked; value/stocks: what the segment(s) hold
 *   EXISTS    the order id is recorded already; record: that record
 *   MISSING   the segment (the order) is absent; CLAIM: a claim ran out, no record
 *   FENCED    a token (or fence) no longer owns its lock: nothing written
 *   STALE     the SKU is not what the caller believed (its epoch, segment count), or
 *             a claim passed its end: nothing written; re-read and try again */
enum store_code {
    STORE_OK = 0,
    STORE_BUSY = 1,
    STORE_SHORT = 2,
    STORE_EXISTS = 3,
    STORE_MISSING = 4,
    STORE_FENCED = 5,
    STORE_STALE = 6,
    STORE_NOT_REPLICATED = 10, /* a step reached no replica in time (admin.h's) */
};

/* Capabilities (store_ops.caps; a backend's may change while it runs, as a
 * standalone Redis that becomes a cluster: ask per order). */
/* The record of an order lives apart from its deduction (a Redis Cluster: another
 * slot). An order with a client id claims the id first (claim), its deduction names
 * the claim's end, and its record is written after it (confirm); a replicated SKU
 * waits for the record's node too. Without it, the deduction writes the record. */
#define STORE_CAP_RECORD_APART 0x1u
/* Several segments in one call: deduct_multi all or nothing, an adjust over every
 * segment (the automatic rebalance on the loop). Without it: the order's intent and
 * plan (intent, claim), one deduct_part per part, undo on failure; the rebalance is
 * handed to the sweeper; one wait per part. */
#define STORE_CAP_MULTI_ONE 0x2u
/* A deduction may keep the lock held for the holder's next order (keep). */
#define STORE_CAP_KEEP 0x4u
/* The store checks a lock service's fencing number on every write (`fence`). */
#define STORE_CAP_FENCE 0x8u
/* Group commit: several orders deducted from one segment in one fenced call
 * (deduct_batch), each with its own answer. */
#define STORE_CAP_BATCH 0x10u

#define STORE_NO_FENCE 0LL
#define STORE_UNFENCED -1LL

/* The answer of a write. `r` and what it points to are valid during the callback
 * only, but the callback may take r->record or r->plan (set it to NULL). */
struct store_reply {
    int code;        /* STORE_* */
    long long value; /* OK/BUSY/SHORT: a segment's stock; ADJUST OK: the new gen; CLAIM
                        OK: the claim's end */
    char *record;    /* EXISTS: the order record (JSON); CLAIM MISSING: the dead claim's
                        attempt */
    char *plan;      /* CLAIM MISSING: the dead claim's plan, "" for none */
    long long fence; /* HOLD OK: the fence registered */
};

/* A SKU's settings as stored. */
struct store_meta {
    int segments;
    char mode[16]; /* "lock" or "atomic" (skumode.h) */
    int hold_ms;
    int batch; /* orders one lock hold may sell (sku.h); 1: one */
    long long initial;
    long long epoch; /* bumped by every reset: a write names the epoch it believes */
    long long gen;   /* bumped by every change of stock from outside the order path */
    bool rebalance;
    bool replicated; /* durability "replicated" */
    char lock[16];   /* a lock service's name (skumode.h), "": the store's own */
    bool unfenced;   /* "fencing": false */
    int salt;        /* placement of the segments (store_sku_placed); 0: none */
    long long adjust_until;
};

/* What a reset writes (store_ops.reset): the new settings
 * and epoch (segments 0: delete the SKU), its placement salt (-1: a new SKU, placed by
 * the store), the version it replaces (`expect`: NULL or "" any, "-" none, "*" any
 * existing one, "<epoch>.<gen>" exactly that one). Its strings are the caller's. */
struct store_reset {
    int segments; /* 0: delete the SKU */
    const char *mode;
    const char *lock; /* the SKU's lock scheme ("" : the store's default) */
    bool unfenced;    /* "fencing": false (a lock service's SKU, the lab's) */
    int hold_ms;
    int batch; /* 1..SKU_BATCH_MAX */
    long long stock;
    bool rebalance;
    bool replicated;
    long long epoch;
    int salt;
    int wait_ms;
    const char *expect;
    bool ledger; /* events on for the SKU (a store that writes them: Redis) */
    bool retake; /* an earlier attempt of this same request still marked as under way
                    (it died: a failover) is taken over at once, its lease or not (a
                    store whose resets take steps: a Redis Cluster) */
};

/* The parts of an order over several segments: seg[0..n-1] ascending, part[j] units
 * from seg[j] under lock token tok[j] ("" in mode atomic; tok NULL for a plan). */
struct store_parts {
    int n;
    const int *seg;
    const long long *part;
    const char *const *tok;
    const long long *fence; /* per part (STORE_CAP_FENCE), or NULL: none */
};

/* A SKU as the calls on its segments take it: `sku`, or "sku/salt" when its segments
 * were placed with a salt (a Redis Cluster spreads them over its masters so). `buf`:
 * STORE_SKU_PLACED_MAX bytes. */
#define STORE_SKU_PLACED_MAX (SEG_NAME_MAX + 16)
static inline const char *store_sku_placed(char *buf, const char *sku, int salt)
{
    size_t n = 0;
    while (sku[n] != '\0' && n < SEG_NAME_MAX) {
        buf[n] = sku[n];
        n++;
    }
    if (salt > 0) {
        char digits[12];
        int k = 0;
        for (unsigned v = (unsigned)salt; v > 0; v /= 10)
            digits[k++] = (char)('0' + v % 10);
        buf[n++] = '/';
        while (k > 0)
            buf[n++] = digits[--k];
    }
    buf[n] = '\0';
    return buf;
}

/* Given as a claim's plan: keep the plan the claim has (a takeover that undoes it). */
#define STORE_PLAN_KEEP "-"

struct store_stats {
    long long commands; /* sent */
    long long writes;   /* times output was written: commands/writes is the mean
                           pipeline batch */
};

/* One order of a batch (deduct_batch): its id, the attempt its record names, qty
 * and record (JSON). */
struct store_batch_order {
    const char *id;
    const char *attempt;
    const char *record;
    long long qty;
};

/* A reservation as its store holds it (the hold ops below and admin.h's; docs/DESIGN.md
 * "Reservations"). Times are the store's clock, ms since the Unix epoch. */
struct store_hold {
    char sku[SEG_NAME_MAX + 1];
    char placed[STORE_SKU_PLACED_MAX];
    int segment;
    long long epoch;
    long long qty;
    long long expires_ms;
    char state[12];  /* "held", "confirmed", "released", "expired" */
    char *record;    /* confirm: the order record (malloc'd; the caller frees) */
    char *parts;     /* a hold over several segments: "seg:qty,seg:qty,..." (malloc'd;
                        the caller frees); NULL for one segment's (`segment`, `qty`) */
    int settled;     /* expired holds the call settled on its way (its own included) */
    bool replicated; /* by SKU / by id calls: the SKU's durability is "replicated" */
};

/* A reservation's steps after its place. */
enum store_hold_action {
    STORE_HOLD_CONFIRM,
    STORE_HOLD_RELEASE,
    STORE_HOLD_READ,
};

typedef void (*store_reply_fn)(void *arg, int rc, struct store_reply *r);
/* A batch's answer: r[k] is order k's (as deduct's reply; r[k].record may be taken),
 * NULL when rc < 0 (no answer: every order's outcome unknown). */
typedef void (*store_batch_fn)(void *arg, int rc, int n, struct store_reply *r);
/* A reservation's call answered: r->code, and h filled as the call says (the callback
 * may take h->record, setting it NULL). */
typedef void (*store_hold_fn)(void *arg, int rc, const struct store_reply *r,
                              struct store_hold *h);
typedef void (*store_multi_fn)(void *arg, int rc, struct store_reply *r,
                               const long long *stocks);
typedef void (*store_int_fn)(void *arg, int rc, int value);
typedef void (*store_meta_fn)(void *arg, int rc, int found, const struct store_meta *m);
typedef void (*store_record_fn)(void *arg, int rc, char *record); /* callee frees */
typedef void (*store_stocks_fn)(void *arg, int rc, const long long *stock);
typedef void (*store_found_fn)(void *arg, int rc, int seg, long long qty);

/* An order under way as intents_due finds it: its id, and the SKU (its name, not the
 * placed one) and epoch its claim names; sku "" when the id has no claim with a plan
 * (placed, given up, or none recorded): only the id is left to take out of the set. */
struct store_intent {
    char id[SEG_NAME_MAX + 1];
    char sku[SEG_NAME_MAX + 1];
    long long epoch;
};
/* in[0..n-1] is valid during the callback only; n is 0 when rc < 0. */
typedef void (*store_intents_fn)(void *arg, int rc, int n, const struct store_intent *in);

typedef struct store store;

/* The operations. `sku` is the SKU's name for the meta and a record, and its placed
 * name (store_sku_placed) for every call on its segments. */
struct store_ops {
    const char *name; /* "redis", "memory", ... */
    /* STORE_CAP_* as of now. */
    unsigned (*caps)(const store *s);
    /* Free the handle: every pending callback answered -1 first. */
    void (*free)(store *s);
    /* The last failure, for logs and error details ("" when none). */
    const char *(*error)(const store *s);
    void (*stats)(const store *s, struct store_stats *out);
    /* The store's mode changed under this handle (a standalone Redis became a
     * cluster): mode_behind true until mode_follow, which the engine calls once no
     * order of the loop is under way. NULL: a store whose mode never changes. */
    bool (*mode_behind)(const store *s);
    void (*mode_follow)(store *s);

    /* ---- reads ---- */
    /* The settings of `sku`: found 1 with m, or 0 (no such SKU). */
    void (*meta_read)(store *s, const char *sku, store_meta_fn fn, void *arg);
    /* The record of order `id`, or NULL; one of `sku` from another epoch than
     * `epoch` was left behind by a reset and reads as none. */
    void (*record_read)(store *s, const char *id, const char *sku, long long epoch,
                        store_record_fn fn, void *arg);
    /* The stock of segments 0..n-1 (absent: 0). */
    void (*stocks_read)(store *s, const char *sku, int n, store_stocks_fn fn, void *arg);
    /* The first of segments 0..n-1 that deducted order `id`: seg and qty, or -1. */
    void (*find_order)(store *s, const char *sku, int n, const char *id,
                       store_found_fn fn, void *arg);

    /* ---- one segment's lock ---- */
    /* ACQUIRE: order `id` not recorded yet, segment i of `epoch` holds `qty`, then its
     * lock taken by `token` for ttl_ms. OK (value = stock), BUSY (value = stock),
     * SHORT, EXISTS, MISSING, STALE. The same token again: OK. */
    void (*acquire)(store *s, const char *sku, long long epoch, int i, const char *id,
                    long long qty, const char *token, int ttl_ms, store_reply_fn fn,
                    void *arg);
    /* STORE_CAP_FENCE, HOLD: a lock service granted segment i's lock (no lock of the
     * store's is taken): ACQUIRE's checks, then `fence` registered as the segment's
     * highest, or with fence 0 the next one issued. OK (value = stock, fence = the
     * fence), FENCED (a higher one is registered), SHORT, EXISTS, MISSING, STALE. */
    void (*hold)(store *s, const char *sku, long long epoch, int i, const char *id,
                 long long qty, long long fence, store_reply_fn fn, void *arg);
    /* The lock alone: value 1 taken (ours), 0 held by another token. */
    void (*lock)(store *s, const char *sku, int i, const char *token, int ttl_ms,
                 store_int_fn fn, void *arg);
    /* Extend (renew) or give up (release) the lock if `token` owns it: 1, 0 not ours. */
    void (*renew)(store *s, const char *sku, int i, const char *token, int ttl_ms,
                  store_int_fn fn, void *arg);
    void (*release)(store *s, const char *sku, int i, const char *token, store_int_fn fn,
                    void *arg);

    /* ---- deductions ---- */
    /* DEDUCT: fenced by `token` ("": no lock, mode atomic) and `fence`, take `qty`
     * from segment i of `epoch`, release the lock (unless `keep`: STORE_CAP_KEEP, an
     * OK leaves it held) and, returning true, write `record` for `id` as `attempt`.
     * Returns false when the record is left to confirm (STORE_CAP_RECORD_APART and
     * `until` > 0, a claimed id: refused STALE past `until`). OK (value = stock
     * left), FENCED, STALE, EXISTS, SHORT, MISSING. */
    bool (*deduct)(store *s, const char *sku, long long epoch, int i, const char *token,
                   long long fence, const char *attempt, const char *id, long long qty,
                   const char *record, long long until, bool keep, store_reply_fn fn,
                   void *arg);
    /* STORE_CAP_BATCH, DEDUCT_BATCH: the n orders `b` one hold of segment i's lock
     * sells, fenced by `token` and `fence` as deduct, in one call: each answered as
     * deduct answers it (keep aside: the lock is released), in the order given; the
     * same id twice is one sale (the second EXISTS), an order more than the stock
     * left SHORT while those after it that fit still sell; FENCED or STALE for every
     * order not sold by this very batch before (a resend). The records go with the
     * deduction: returns false, calling nothing, when one cannot (a cluster, an id
     * outside the segment's slot). */
    bool (*deduct_batch)(store *s, const char *sku, long long epoch, int i,
                         const char *token, long long fence, int n,
                         const struct store_batch_order *b, store_batch_fn fn, void *arg);
    /* STORE_CAP_MULTI_ONE: all or nothing over p's parts, each fenced by its token
     * and, under a lock service's holds, by p->fence[j] (NULL: none) as deduct is by
     * `fence`. OK (stocks[j] = stock left), SHORT (stocks[j] = stock held), FENCED,
     * STALE, EXISTS. */
    void (*deduct_multi)(store *s, const char *sku, long long epoch, const char *id,
                         const char *record, const char *attempt,
                         const struct store_parts *p, store_multi_fn fn, void *arg);
    /* ADJUST `op` over every segment (tok: their lock tokens): "spread" evens the
     * stock out. `fence` NULL: the tokens fence it (the store's locks, released
     * whatever it answers). Under a lock service's holds (STORE_CAP_FENCE, "spread"
     * alone): tok all "", fence[i] segment i's registered fence, and any below its
     * segment's highest (-1: unchecked) refuses it FENCED, nothing moved; the caller
     * gives the holds back. OK (value = the new gen), STALE, FENCED. A store without
     * STORE_CAP_MULTI_ONE (a Redis Cluster) adjusts in steps over the segments' nodes
     * without locks (tok, fence unused): also REPLAYED, CONFLICT, LIMIT, BUSY (another
     * adjust or reset under way: retry), NOT_REPLICATED (`wait_ms` > 0, durability
     * "replicated": each step on a replica before the next; one that is not stops
     * it, and a retry under `rid` finishes it). */
    void (*adjust)(store *s, const char *sku, long long epoch, int segments,
                   const char *const *tok, const long long *fence, const char *op,
                   long long add, long long limit, const char *rid, const char *sig,
                   int wait_ms, store_reply_fn fn, void *arg);

    /* CANCEL order `id` whose record the caller read as `expected`: the units the
     * store recorded for it given back to each of p's segments (p->part: the record's
     * parts) under the caller's locks p->tok ("" in mode atomic), which the store
     * releases whatever it answers (a -1: the caller releases them), while the record
     * is still `expected` and the SKU in `epoch`, the record marked `cancelled`, the
     * SKU's gen bumped. OK, EXISTS (cancelled already: record), MISSING (no such order,
     * or one a reset left behind), STALE (the record or the SKU changed: read again),
     * FENCED (a lock lost), STORE_NOT_REPLICATED. `wait_ms` > 0 (durability
     * "replicated"): OK and EXISTS only once a replica has every write of the cancel
     * (else NOT_REPLICATED, value 1 when this call did cancel it); a store whose steps
     * span nodes (a Redis Cluster) marks the record only after a replica has every
     * give-back, and on a record cancelled already runs the give-backs again (what a
     * failover lost) before EXISTS. */
    /* RESET `sku`, found as `old_epoch` with `old_segments` (0, 0: none), to `to`
     * under request id `rid` and signature `sig` (NULL: none): create, replace or
     * (to->segments 0) delete it, every key or row of the old segments dropped, their
     * orders' records with them. OK, REPLAYED (value 1 for both when the reset
     * created the SKU), CONFLICT, EXISTS, ADMIN_MISMATCH (to->expect), STALE,
     * MISSING (delete of no SKU), NOT_REPLICATED (to->wait_ms > 0, a store whose
     * steps span nodes: one not on a replica stopped it; a retry under `rid` takes
     * it over and finishes it). (The test memstore: NULL.) */
    void (*reset)(store *s, const char *sku, long long old_epoch, int old_segments,
                  const struct store_reset *to, const char *rid, const char *sig,
                  store_reply_fn fn, void *arg);
    void (*cancel)(store *s, const char *placed, long long epoch, const char *id,
                   const char *cancelled, const char *expected,
                   const struct store_parts *p, int wait_ms, store_reply_fn fn,
                   void *arg);

    /* ---- records apart from deductions (STORE_CAP_RECORD_APART; NULL otherwise) --
     * An order's id is claimed (one attempt at a time) with its plan, its parts are
     * deducted one by one under the claim, then its record confirmed. */
    /* CLAIM `id` for `attempt` for lease_ms (`dead`: the attempt of a dead claim
     * taken over, or NULL) with `plan` (plan_build; STORE_PLAN_KEEP; NULL);
     * `dead_epoch`: the epoch of a record found dead (0: none). OK (value = the
     * claim's end), EXISTS (record), STALE (value = the epoch of a record of another
     * epoch: re-read the settings, and if the SKU's epoch is still another, claim
     * with it as dead_epoch), BUSY, MISSING (record = the dead attempt, plan = its
     * plan or ""). */
    void (*claim)(store *s, const char *id, const char *attempt, const char *sku,
                  long long epoch, int lease_ms, const char *dead, const char *plan,
                  long long dead_epoch, store_reply_fn fn, void *arg);
    /* Write `record` for `id` under the claim of `attempt` (record NULL: give the
     * claim up). OK, STALE (another attempt holds the claim). */
    void (*confirm)(store *s, const char *id, const char *attempt, const char *record,
                    const char *sku, long long epoch, store_reply_fn fn, void *arg);
    /* The id added to (taken out of) the set of orders under way, for the sweeper. */
    void (*intent)(store *s, const char *id, bool add, store_int_fn fn, void *arg);
    /* The set's ids added before `before_ms` (the wall clock, ms since the Unix epoch),
     * oldest first, at most `limit`, each with its claim (struct store_intent): the
     * orders whose process may have died between their parts and their record. The
     * sweeper settles each as an order does its own: the claim taken over once it
     * ran out (claim, keeping the plan), the plan undone (undo), the claim given up
     * (confirm, no record) and the id taken out (intent). */
    void (*intents_due)(store *s, long long before_ms, int limit, store_intents_fn fn,
                        void *arg);
    /* One part deducted as deduct does, `first` for the order's first segment. */
    void (*deduct_part)(store *s, const char *sku, long long epoch, int i,
                        const char *token, long long fence, const char *id, long long qty,
                        long long until, bool first, store_reply_fn fn, void *arg);
    /* A plan undone, every part at once (value = the units given back); -1, calling
     * nothing, when `plan` is not one. */
    int (*undo)(store *s, const char *id, const char *plan, store_int_fn fn, void *arg);
    /* The plan of an order over p's segments (malloc'd), for claim. */
    char *(*plan_build)(store *s, const char *sku, long long epoch,
                        const struct store_parts *p);
    /* A fresh order id (32 hex digits) rewritten so that its record lives with
     * segment i's deduction; nothing to do where it always does. */
    void (*id_for_segment)(store *s, const char *sku, int i, char *id);

    /* ---- reservations (a standalone Redis, PostgreSQL; NULL elsewhere) ----
     * hold_place_any: reservation `id` of `qty` units for ttl_ms of the store's
     * clock, in one call: the store reads the SKU's settings and walks its segments
     * from `start` (mod their count), the first free one that holds qty taking the
     * hold; expired holds met on the way are settled. r->code OK (value = stock left,
     * h->expires_ms), EXISTS (the id is a reservation: h says where, h->state ""),
     * ADMIN_CONFLICT (an order has the id), STALE, BUSY or SHORT (value = the stock of
     * the segments walked, some busy), MISSING (no such SKU), ADMIN_MISMATCH (a lock
     * service's SKU). hold_by_id: admin.h's, on the loop. */
    void (*hold_place_any)(store *s, const char *sku, const char *id, long long qty,
                           int ttl_ms, int start, const char *attempt, store_hold_fn fn,
                           void *arg);
    void (*hold_by_id)(store *s, const char *id, enum store_hold_action act,
                       const char *attempt, store_hold_fn fn, void *arg);

    /* ---- durability ---- */
    /* value = how many replicas have every write made to segment i of `sku` (i -1:
     * none) and to the record of `id` (NULL: none) before this call, the least. */
    void (*wait)(store *s, const char *sku, int i, const char *id, int timeout_ms,
                 store_int_fn fn, void *arg);
};

/* A backend's handle begins with this. */
struct store {
    const struct store_ops *ops;
};

/* Operation `op` of store `s` (evaluated twice): STORE_CALL(s, acquire, sku, ...). */
#define STORE_CALL(s, op, ...) ((s)->ops->op((s), __VA_ARGS__))

static inline unsigned store_caps(const store *s)
{
    return s->ops->caps(s);
}

/* The store's mode changed under this handle (mode_follow due). */
static inline bool store_mode_behind(const store *s)
{
    return s->ops->mode_behind != NULL && s->ops->mode_behind(s);
}

#endif
