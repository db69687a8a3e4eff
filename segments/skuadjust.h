/* skuadjust.h -- what an admin ADJUST (restock, rebalance: engine.h engine_adjust,
 * from sku.c) shares with sku.c's other writes, and the cluster's spread (sku_spread:
 * the store's adjust on the sweeper's loop, without the engine).
 *
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

#endif
