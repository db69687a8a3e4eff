/* stats.h -- process-wide counters of the order path, updated lock-free.
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
    STAT_LOCK_ATTEMPTS,      /* acquire scripts sent */
    STAT_LOCK_ACQUIRED,
    STAT_BUSY_SKIPS,         /* a segment skipped because its lock was held */
    STAT_FALL_THROUGHS,      /* a segment skipped because it held too little */
    STAT_LOCK_WAITS,         /* full passes that found every candidate busy */
    STAT_LEASE_RENEWALS,
    STAT_LEASE_LOST,         /* renewals that found the lock no longer ours */
    STAT_FENCED_REJECTIONS,  /* deductions refused because the token lost the lock */
    STAT_REDIS_ERRORS,
    STAT__COUNT
};

/* Name used in JSON and metrics, e.g. "orders_confirmed". */
const char *stat_name(enum stat_id id);

/* Add `n` to counter `id` of the process's handle. */
void stat_add(inv *v, enum stat_id id, long long n);

/* Copy every counter into out[STAT__COUNT]. */
void stat_snapshot(inv *v, long long out[STAT__COUNT]);

#endif
