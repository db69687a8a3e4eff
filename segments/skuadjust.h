/* skuadjust.h -- an admin ADJUST (restock, rebalance, the cluster's spread) on the
 * blocking admin table (admin.h), and what sku.c's other writes share with it.
 *
 * A store that adjusts every segment in one call (a standalone Redis, under its
 * segment locks; PostgreSQL, whose transaction locks the rows) runs restock and
 * rebalance on the engine's code instead (engine.h engine_adjust, from sku.c); a
 * Redis Cluster (the seam's per-slot steps, no locks: redis/adjust.c) runs them here.
 * This file calls no engine file: the sweeper calls it (sku_spread), and the engine calls
 * the sweeper.
 */
#ifndef SEG_SKUADJUST_H
#define SEG_SKUADJUST_H

#include <stddef.h>

#include "segments/internal.h"
#include "segments/skutab.h"

/* What an admin write is, for its request id (`cfg` NULL: op and n alone). */
void skuadj_signature(char *buf, size_t len, const char *op, long long n,
                      const struct sku_config *cfg);
/* What RESET or ADJUST answered (store.h, admin.h codes; -1 none) as a status; -1 for
 * STALE (look again). */
int skuadj_status(int code);
/* An ADJUST that answered `code` (gen: OK's new generation) of `add` units: counted,
 * and every loop's view of the SKU dropped when it changed or may have. */
void skuadj_adjusted(inv_conn *c, const char *sku, int code, long long gen,
                     long long add);
/* An answered ADJUST's status as skuadj_status, a replica waited for first where a
 * request (rid) of a durability "replicated" SKU (view) asks it on a standalone store. */
int skuadj_settle(inv_conn *c, const char *sku, int code, const struct sku_view *view,
                  const char *rid);
/* ADJUST `op` ("restock" with `add` units, "rebalance", "spread") of `sku` on the
 * blocking admin table, the settings read again when stale, a cluster's BUSY tried
 * again within lock_wait_ms: sku_restock's statuses. */
inv_status skuadj_blocking(inv_conn *c, const char *sku, const char *op, long long add,
                           const char *rid);

#endif
