/* order.h -- the order path: pick a random segment, walk the ring, deduct under its lock.
 *
 * Mode `lock`, per segment: one script checks the order id, reads the stock and, when
 * there is enough, takes the segment lock (SET NX PX with a fresh token); another
 * script, after the hold_ms work, checks the token still owns the lock, deducts, writes
 * the order record and the sold count and releases the lock -- all or nothing. A holder
 * whose lease lapsed (a stall, a lost connection) writes nothing and moves on. Mode
 * `atomic` does the check-and-deduct in one script per segment with no lock.
 *
 * When no single segment holds qty but the segments together do, the order locks the
 * segments it needs in ascending index order and deducts from all of them in one
 * script fenced by every token, all or nothing (lockset.h). Only then is it
 * INV_INSUFFICIENT.
 *
 * Invariants kept in Redis, per SKU: every segment's stock >= 0, remaining + sold =
 * initial, sold = sum of the qty fields of the orders and parts hashes; one record per
 * order_id. The record is JSON: {"order_id","sku","qty","segment","segments":
 * [{"segment","qty"},...],"status":"confirmed"|"cancelled"}.
 */
#ifndef SEG_ORDER_H
#define SEG_ORDER_H

#include <stdbool.h>

#include "segments/inventory.h"
#include "segments/stats.h"
#include "segments/names.h"

#define ORDER_QTY_MAX 1000000

struct order_request {
    const char *sku;      /* valid name (names.h); borrowed */
    long long qty;        /* 1..ORDER_QTY_MAX */
    const char *order_id; /* valid name, or NULL/"" to have one generated; borrowed */
};

struct order_result {
    inv_status status; /* INV_OK (201), INV_REPLAYED (200) or the reason it failed */
    char order_id[SEG_NAME_MAX + 1];
    int segment;  /* segment the stock came from, -1 when none */
    char *record; /* INV_OK/INV_REPLAYED: the order as JSON text, caller frees */
};

/* Place an order. Always fills `res` (record NULL unless OK/REPLAYED) and returns
 * res->status. Blocks for the SKU's hold_ms and at most about lock_wait_ms waiting. */
inv_status order_place(inv_conn *c, const struct order_request *req,
                       struct order_result *res);

/* The sold-out fast path, for the HTTP thread: true when this process knows, without
 * asking Redis, that `sku` is sold out now (every segment seen empty in the current
 * generation, settings younger than meta_cache_ms); the rejection is counted as an
 * order outcome. False means "ask order_place", never "not sold out". An order with
 * a client order_id must still go through order_place: a replay gets its record. */
bool order_sold_out_fast(inv *v, const char *sku);

/* Look an order up: INV_OK with *record (JSON text, caller frees), INV_NOT_FOUND or
 * INV_UNAVAILABLE. `id` must be a valid name. */
inv_status order_get(inv_conn *c, const char *id, char **record);

/* Cancel an order: its units go back to the segments they came from, under their
 * locks; the record says "cancelled" and the sold counts go down. Idempotent: a
 * cancelled order is INV_OK again. INV_OK with *record (caller frees), INV_NOT_FOUND,
 * INV_BUSY, INV_UNAVAILABLE or INV_INVALID. */
inv_status order_cancel(inv_conn *c, const char *id, char **record);

/* The counter an order's final status is counted under (stats.h). */
enum stat_id order_outcome_stat(inv_status s);

/* Free the record a result carries (safe on an empty result). */
void order_result_clear(struct order_result *res);

#endif
