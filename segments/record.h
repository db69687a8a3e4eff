/* record.h -- the order record: the JSON text an order's 201 returns and Redis keeps
 * ({"order_id","sku","qty","segment","segments":[{"segment","qty"},...],"status"}).
 * Shared by the blocking order path (order.c) and the event-loop one (engine.c).
 */
#ifndef SEG_RECORD_H
#define SEG_RECORD_H

#include <stdbool.h>

/* The record of order `id` of `sku` for `qty` units taking part[k] from seg[k],
 * k < n (n >= 1), with `status` "confirmed" or "cancelled". malloc'd. */
char *record_build(const char *id, const char *sku, long long qty, int n, const int *seg,
                   const long long *part, const char *status);

/* True when `record` is an order of `sku` for `qty` units (a replay of the same order,
 * not a clash of ids). */
bool record_same_order(const char *record, const char *sku, long long qty);

#endif
