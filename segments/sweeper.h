/* sweeper.h -- on a Redis Cluster, the background work of the order path: it undoes
 * what dead multi-segment orders left, and it runs the automatic rebalance.
 *
 * Dead intents. A multi-segment order on a cluster deducts its parts in several
 * slots, so it records its intent first (calls.h): its id in the intents set, its
 * plan in the id's claim. An order whose process died between its parts and its
 * record leaves both. A retry with a client's order id undoes it; an order with a
 * generated id has no retry, so this thread does: once a second it reads the intents
 * older than SWEEP_AGE_MS (store.h intents_due) and settles each with the store's
 * ops the order path uses (claim, undo, confirm, intent): each whose claim ran out is
 * taken over, its plan undone, the claim given up and the id taken out of the set.
 * They run on a loop and a store of the thread's own, turned until each answers (as
 * a worker's cancel, order.c), so the undo protocol is written once. Every instance
 * runs one; the claim keeps two from undoing the same order.
 *
 * The automatic rebalance. On one Redis an event loop runs it itself (every segment
 * locked, then one ADJUST script). On a cluster it is several steps over the
 * segments' slots (adjust.h), made by blocking calls, so a loop that finds it due
 * hands the SKU here (sweeper_spread) and goes on with its order; this thread runs
 * sku_spread for it and drops the loops' cached settings (a new generation).
 *
 * The thread owns its Redis connection (the rebalances), its loop and store (the
 * intents), and touches nothing else of the process but the stats, the SKU table
 * (skutab.h, thread-safe) and its request queue (its mutex).
 */
#ifndef SEG_SWEEPER_H
#define SEG_SWEEPER_H

#include <stddef.h>

#include "segments/internal.h"

typedef struct sweeper sweeper;

/* The process's store on a loop (internal.h inv_store_create): the thread makes its
 * own with it, on its first look at the intents (on a cluster), and frees it. */
typedef store *(*sweeper_store_fn)(inv *v, struct event_base *base);

/* Start the thread on a connection of its own to `to` (copied), its store made by
 * `make`. NULL with `err` filled when the thread cannot be started. */
sweeper *sweeper_create(inv *v, const struct rd_target *to, sweeper_store_fn make,
                        char *err, size_t errlen);
/* Stop the thread (at once, or after the work under way) and free. NULL is fine. */
void sweeper_free(sweeper *s);

/* Ask for the automatic rebalance of `sku` (a valid name); from any thread, never
 * blocks on Redis. A SKU already asked for and not yet done is not queued twice; when
 * SWEEP_QUEUE SKUs wait, the request is dropped (the next loop to find it due asks
 * again in a later generation). */
#define SWEEP_QUEUE 64
void sweeper_spread(sweeper *s, const char *sku);

#endif
