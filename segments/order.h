/* order.h -- what an order is, and its lookups and cancels on a blocking connection.
 * Orders are placed by the engine on an event loop (engine.h), by this protocol:
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
 * script fenced by every token, all or nothing. Only then is it
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
#include "base/names.h"

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

/* Look an order up: INV_OK with *record (JSON text, caller frees), INV_NOT_FOUND or
 * INV_UNAVAILABLE. `id` must be a valid name. With a ledger (ledger.h), a record Redis
 * no longer has (expired after record_retention_s) is answered from the ledger. */
inv_status order_get(inv_conn *c, const char *id, char **record);

/* Cancel an order: its units go back to the segments they came from, under their
 * locks (taken, renewed and the store's cancel sent by the engine on c's own loop:
 * engine.h engine_cancel; the caller blocks until it answers); the record says
 * "cancelled" and the sold counts go down. Idempotent: a cancelled order is INV_OK again.
 * INV_OK with *record (caller frees), INV_NOT_FOUND, INV_BUSY, INV_UNAVAILABLE,
 * INV_INVALID, or for a "replicated" SKU INV_NOT_REPLICATED (no replica confirmed it; on
 * a cluster the record is marked only after the units given back are on a replica, and a
 * retry on a cancelled record checks, and redoes, the segments' part before its INV_OK:
 * store.h cancel). */
inv_status order_cancel(inv_conn *c, const char *id, char **record);
/* (With a ledger, an order whose record left Redis after record_retention_s is
 * cancelled all the same: its record is written back from the ledger first, or, when
 * the ledger has it cancelled, that record is answered; ledger.h ledger_restore.) */

/* The counter an order's final status is counted under (stats.h; defined in ord.c). */
enum stat_id order_outcome_stat(inv_status s);

/* Free the record a result carries (safe on an empty result). */
void order_result_clear(struct order_result *res);

#endif
