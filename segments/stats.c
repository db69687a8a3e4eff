/* stats.c -- process-wide counters (see stats.h). */
#include "segments/stats.h"
#include "segments/internal.h"

static const char *const names[STAT__COUNT] = {
    [STAT_ORDERS_CONFIRMED] = "orders_confirmed",
    [STAT_ORDERS_REPLAYED] = "orders_replayed",
    [STAT_ORDERS_SOLD_OUT] = "orders_sold_out",
    [STAT_ORDERS_INSUFFICIENT] = "orders_insufficient_stock",
    [STAT_ORDERS_UNKNOWN_SKU] = "orders_unknown_sku",
    [STAT_ORDERS_CONFLICT] = "orders_conflict",
    [STAT_ORDERS_BUSY] = "orders_busy",
    [STAT_ORDERS_UNAVAILABLE] = "orders_backend_unavailable",
    [STAT_LOCK_ATTEMPTS] = "lock_attempts",
    [STAT_LOCK_ACQUIRED] = "lock_acquired",
    [STAT_BUSY_SKIPS] = "busy_skips",
    [STAT_FALL_THROUGHS] = "fall_throughs",
    [STAT_LOCK_WAITS] = "lock_waits",
    [STAT_LEASE_RENEWALS] = "lease_renewals",
    [STAT_LEASE_LOST] = "lease_lost",
    [STAT_FENCED_REJECTIONS] = "fenced_rejections",
    [STAT_REDIS_ERRORS] = "redis_errors",
};

const char *stat_name(enum stat_id id)
{
    return id < STAT__COUNT ? names[id] : "unknown";
}

void stat_add(inv *v, enum stat_id id, long long n)
{
    atomic_fetch_add_explicit(&v->stats[id], n, memory_order_relaxed);
}

void stat_snapshot(inv *v, long long out[STAT__COUNT])
{
    for (int i = 0; i < STAT__COUNT; i++)
        out[i] = atomic_load_explicit(&v->stats[i], memory_order_relaxed);
}
