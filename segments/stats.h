/* stats.h -- process-wide counters and latency histograms, updated lock-free.
 *
 * Counters only grow. Each is a relaxed atomic: a snapshot is a consistent view of
 * each counter, not of all of them at one instant, which is all a dashboard needs.
 */
#ifndef SEG_STATS_H
#define SEG_STATS_H

#include "segments/inventory.h"

enum stat_id {
    STAT_ORDERS_CONFIRMED,
    STAT_ORDERS_REPLAYED,
    STAT_ORDERS_SOLD_OUT,
    STAT_ORDERS_INSUFFICIENT,
    STAT_ORDERS_UNKNOWN_SKU,
    STAT_ORDERS_CONFLICT,
    STAT_ORDERS_BUSY,
    STAT_ORDERS_UNAVAILABLE,
    STAT_ORDERS_CANCELLED,
    STAT_LOCK_ATTEMPTS, /* acquire scripts sent */
    STAT_LOCK_ACQUIRED,
    STAT_BUSY_SKIPS,    /* a segment skipped because its lock was held */
    STAT_FALL_THROUGHS, /* a segment skipped because it held too little */
    STAT_LOCK_WAITS,    /* full passes that found every candidate busy */
    STAT_LEASE_RENEWALS,
    STAT_LEASE_LOST,        /* renewals that found the lock no longer ours */
    STAT_FENCED_REJECTIONS, /* deductions refused because the token lost the lock */
    STAT_REDIS_ERRORS,
    STAT_SOLD_OUT_FAST,  /* sold-out answers from the in-process flag, with no
                            script run (mostly on the HTTP thread) */
    STAT_MULTI_SEGMENT,  /* orders filled from several segments */
    STAT_INTENTS_UNDONE, /* multi-segment orders of dead processes undone (a cluster) */
    STAT_REBALANCES,     /* rebalances done (by hand or automatically) */
    STAT_RESTOCKS,
    STAT_REDIS_COMMANDS,     /* commands the event loops sent to Redis */
    STAT_REDIS_WRITES,       /* writes they took: commands / writes is the mean batch */
    STAT_BATCHES,            /* group commits: DEDUCT_BATCH sent (batch.c) */
    STAT_BATCHED,            /* orders sent in them, their holders included */
    STAT_HOLDS_PLACED,       /* reservations placed (reserve.h) */
    STAT_HOLDS_CONFIRMED,    /* reservations confirmed into orders */
    STAT_HOLDS_RELEASED,     /* reservations released by their client */
    STAT_HOLDS_EXPIRED,      /* expired reservations settled by this process */
    STAT_LOCK_HANDED_ON,     /* segment locks (the store's or a lock service's) that went
                                on to the loop's next order without an acquire */
    STAT_HOLDS_WAITED,       /* holds of its SKU's segments (any loop's) an order sold
                                under a hold waited through before the one it sold in */
    STAT_ORDERS_WAITED_PAST, /* such orders that waited through more holds than the SKU
                                has segments: more than a batch ahead of them */
    STAT_HOLDS_WAITED_MAX,   /* the most holds_waited of one order (a maximum) */
    STAT_LOOP_YIELDS,        /* a free segment passed by for another loop's turn (group
                                commit on fewer segments than loops) */
    STAT__COUNT
};

/* Outcomes of orders, also counted per SKU: the first SKU_OUTCOMES stat ids. */
#define SKU_OUTCOMES (STAT_ORDERS_CANCELLED + 1)

enum hist_id {
    HIST_ORDER,     /* a whole order, start to answer, seconds */
    HIST_LOCK_WAIT, /* order start to the segment lock taken (mode lock) */
    HIST__COUNT
};
#define HIST_BUCKETS 14

struct hist_snapshot {
    long long bucket[HIST_BUCKETS + 1]; /* not cumulative; last is +Inf */
    long long count;
    double sum; /* seconds */
};

/* Name used in JSON and metrics, e.g. "orders_confirmed". */
const char *stat_name(enum stat_id id);

/* Add `n` to counter `id` of the process's handle. */
void stat_add(inv *v, enum stat_id id, long long n);

/* Raise counter `id` to `n` when below (a maximum: it only grows too). */
void stat_max(inv *v, enum stat_id id, long long n);

/* Copy every counter into out[STAT__COUNT]. */
void stat_snapshot(inv *v, long long out[STAT__COUNT]);

/* Histograms: name (e.g. "order_seconds"), upper bounds of the buckets in seconds,
 * one observation in microseconds, and a snapshot. */
const char *hist_name(enum hist_id h);
const double *hist_bounds(void);
void stat_observe(inv *v, enum hist_id h, long long usec);
void stat_hist_snapshot(inv *v, enum hist_id h, struct hist_snapshot *out);

/* Call fn once per SKU this process has served, with its outcome counters indexed
 * by stat id (0 .. SKU_OUTCOMES-1). */
void stat_foreach_sku(inv *v,
                      void (*fn)(const char *sku, const long long *outcomes, void *arg),
                      void *arg);

/* One sentence saying what counter `id` counts, for the HELP line of GET /metrics
 * (static string; never NULL). */
const char *stat_help(enum stat_id id);

/* The same for histogram `h`. */
const char *hist_help(enum hist_id h);

#endif
