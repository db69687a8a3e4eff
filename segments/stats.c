/* stats.c -- process-wide counters (see stats.h). */
#include "segments/stats.h"
#include "segments/internal.h"
#include "segments/skutab.h"

static const char *const names[STAT__COUNT] = {
    [STAT_ORDERS_CONFIRMED] = "orders_confirmed",
    [STAT_ORDERS_REPLAYED] = "orders_replayed",
    [STAT_ORDERS_SOLD_OUT] = "orders_sold_out",
    [STAT_ORDERS_INSUFFICIENT] = "orders_insufficient_stock",
    [STAT_ORDERS_UNKNOWN_SKU] = "orders_unknown_sku",
    [STAT_ORDERS_CONFLICT] = "orders_conflict",
    [STAT_ORDERS_BUSY] = "orders_busy",
    [STAT_ORDERS_UNAVAILABLE] = "orders_backend_unavailable",
    [STAT_ORDERS_CANCELLED] = "orders_cancelled",
    [STAT_LOCK_ATTEMPTS] = "lock_attempts",
    [STAT_LOCK_ACQUIRED] = "lock_acquired",
    [STAT_BUSY_SKIPS] = "busy_skips",
    [STAT_FALL_THROUGHS] = "fall_throughs",
    [STAT_LOCK_WAITS] = "lock_waits",
    [STAT_LEASE_RENEWALS] = "lease_renewals",
    [STAT_LEASE_LOST] = "lease_lost",
    [STAT_FENCED_REJECTIONS] = "fenced_rejections",
    [STAT_REDIS_ERRORS] = "redis_errors",
    [STAT_SOLD_OUT_FAST] = "sold_out_fast",
    [STAT_MULTI_SEGMENT] = "multi_segment_orders",
    [STAT_INTENTS_UNDONE] = "intents_undone",
    [STAT_REBALANCES] = "rebalances",
    [STAT_RESTOCKS] = "restocks",
    [STAT_REDIS_COMMANDS] = "redis_commands",
    [STAT_REDIS_WRITES] = "redis_writes",
    [STAT_BATCHES] = "batches",
    [STAT_BATCHED] = "batched_orders",
    [STAT_HOLDS_PLACED] = "reservations_placed",
    [STAT_HOLDS_CONFIRMED] = "reservations_confirmed",
    [STAT_HOLDS_RELEASED] = "reservations_released",
    [STAT_HOLDS_EXPIRED] = "reservations_expired",
    [STAT_LOCK_HANDED_ON] = "lock_handed_on",
    [STAT_HOLDS_WAITED] = "holds_waited",
    [STAT_ORDERS_WAITED_PAST] = "orders_waited_past_batch",
    [STAT_HOLDS_WAITED_MAX] = "holds_waited_max",
    [STAT_LOOP_YIELDS] = "loop_yields",
};

static const double bounds[HIST_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

const char *stat_name(enum stat_id id)
{
    return id < STAT__COUNT ? names[id] : "unknown";
}

void stat_add(inv *v, enum stat_id id, long long n)
{
    atomic_fetch_add_explicit(&v->stats[id], n, memory_order_relaxed);
}

void stat_max(inv *v, enum stat_id id, long long n)
{
    long long cur = atomic_load_explicit(&v->stats[id], memory_order_relaxed);
    while (cur < n && !atomic_compare_exchange_weak_explicit(&v->stats[id], &cur, n,
                                                             memory_order_relaxed,
                                                             memory_order_relaxed))
        ;
}

void stat_snapshot(inv *v, long long out[STAT__COUNT])
{
    for (int i = 0; i < STAT__COUNT; i++)
        out[i] = atomic_load_explicit(&v->stats[i], memory_order_relaxed);
}

const char *hist_name(enum hist_id h)
{
    return h == HIST_ORDER ? "order_seconds" : "lock_wait_seconds";
}

const double *hist_bounds(void)
{
    return bounds;
}

void stat_observe(inv *v, enum hist_id h, long long usec)
{
    int b = 0;
    while (b < HIST_BUCKETS && usec > (long long)(bounds[b] * 1e6))
        b++;
    atomic_fetch_add_explicit(&v->hist[h][b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&v->hist_sum_us[h], usec, memory_order_relaxed);
}

void stat_hist_snapshot(inv *v, enum hist_id h, struct hist_snapshot *out)
{
    out->count = 0;
    for (int b = 0; b <= HIST_BUCKETS; b++) {
        out->bucket[b] = atomic_load_explicit(&v->hist[h][b], memory_order_relaxed);
        out->count += out->bucket[b];
    }
    out->sum =
        (double)atomic_load_explicit(&v->hist_sum_us[h], memory_order_relaxed) / 1e6;
}

void stat_foreach_sku(inv *v,
                      void (*fn)(const char *sku, const long long *outcomes, void *arg),
                      void *arg)
{
    skutab_foreach(v->tab, fn, arg);
}

static const char *const helps[STAT__COUNT] = {
    [STAT_ORDERS_CONFIRMED] = "Orders placed (201).",
    [STAT_ORDERS_REPLAYED] = "Orders answered with the record of an earlier order of "
                             "the same order_id (200).",
    [STAT_ORDERS_SOLD_OUT] = "Orders refused because every segment was empty.",
    [STAT_ORDERS_INSUFFICIENT] = "Orders refused because stock remained but not qty.",
    [STAT_ORDERS_UNKNOWN_SKU] = "Orders for a SKU that does not exist.",
    [STAT_ORDERS_CONFLICT] = "Orders whose order_id was used for another sku or qty.",
    [STAT_ORDERS_BUSY] = "Orders that found no free segment lock within lock_wait_ms.",
    [STAT_ORDERS_UNAVAILABLE] = "Orders that failed because the store did not answer.",
    [STAT_ORDERS_CANCELLED] = "Orders cancelled (their stock given back).",
    [STAT_LOCK_ATTEMPTS] = "Segment lock attempts sent to the store or lock service.",
    [STAT_LOCK_ACQUIRED] = "Segment locks acquired.",
    [STAT_BUSY_SKIPS] = "Segments skipped because their lock was held.",
    [STAT_FALL_THROUGHS] = "Segments skipped because they held too little stock.",
    [STAT_LOCK_WAITS] = "Full passes over the segments that found every candidate busy.",
    [STAT_LEASE_RENEWALS] = "Lease renewals of held segment locks.",
    [STAT_LEASE_LOST] = "Lease renewals that found the lock no longer held by us.",
    [STAT_FENCED_REJECTIONS] =
        "Deductions refused because their token had lost the lock.",
    [STAT_REDIS_ERRORS] =
        "Store calls that failed: I/O errors, timeouts, error replies (Redis; "
        "PostgreSQL's are not counted here yet).",
    [STAT_SOLD_OUT_FAST] = "Sold-out answers given from the in-process flag, with no "
                           "script run.",
    [STAT_MULTI_SEGMENT] = "Orders filled from several segments.",
    [STAT_INTENTS_UNDONE] = "Multi-segment orders left by a dead process, undone by the "
                            "sweeper (a Redis Cluster; on one Redis or PostgreSQL an "
                            "order is one call).",
    [STAT_REBALANCES] = "Rebalances done, by hand or automatically.",
    [STAT_RESTOCKS] = "Restocks applied.",
    [STAT_REDIS_COMMANDS] =
        "Calls the event loops sent to the store (Redis commands, PostgreSQL "
        "calls).",
    [STAT_REDIS_WRITES] = "Writes to the store the event loops took to send them; calls "
                          "per write is the mean pipeline batch.",
    [STAT_BATCHES] = "Group commits: one fenced deduction for the orders one lock hold "
                     "sold (a SKU's batch).",
    [STAT_BATCHED] = "Orders sent in group commits, their lock holders included.",
    [STAT_HOLDS_PLACED] = "Reservations placed (units held until confirmed, released "
                          "or expired).",
    [STAT_HOLDS_CONFIRMED] = "Reservations confirmed into orders.",
    [STAT_HOLDS_RELEASED] = "Reservations released by their client.",
    [STAT_HOLDS_EXPIRED] = "Expired reservations settled (their units back in stock).",
    [STAT_HOLDS_WAITED] = "Lock holds of an order's SKU (any segment, any event loop) "
                          "that ended while it waited, before the hold it sold in.",
    [STAT_ORDERS_WAITED_PAST] = "Orders sold under a hold that waited through more "
                                "holds of their SKU than it has segments.",
    [STAT_HOLDS_WAITED_MAX] = "The most holds one order waited through (holds_waited).",
    [STAT_LOOP_YIELDS] = "Free segments an order passed by for another event loop's "
                         "turn (group commit on fewer segments than loops).",
};

const char *stat_help(enum stat_id id)
{
    return id < STAT__COUNT && helps[id] != NULL ? helps[id] : "Undocumented counter.";
}

const char *hist_help(enum hist_id h)
{
    return h == HIST_ORDER
               ? "Time to place an order, whatever the outcome."
               : "Time from an order's start to its segment lock being taken.";
}
