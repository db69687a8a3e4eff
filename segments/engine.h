/* engine.h -- the order path on an event loop: each order an explicit state machine,
 * every wait a timer, every Redis call asynchronous (segments/redis/async.h).
 *
 * One engine per event loop, used from that loop's thread only: its own Redis
 * connection, its own table of SKUs (ltab.h: settings, local claims, hints), its own
 * timers. An order lives and dies on one engine. The protocol and every guarantee are
 * those of the blocking path (order.h): the same scripts, the same fencing, epochs
 * and self-recognition; only the execution model differs.
 *
 * The states of an order (engine.c has the transitions):
 *
 *   VIEW      settings cached and fresh? else META sent      -> ROUND (a Redis
 *             Cluster, an order with a client id: CLAIM first)
 *   CLAIM     (a cluster) the id claimed in its slot: OK     -> ROUND (durability
 *             replicated: once a replica has the claim, WAIT; none -> DONE,
 *             not_replicated, the claim given up); EXISTS -> DONE
 *             (replay); BUSY (the id in flight elsewhere)    -> CLAIM again (timer);
 *             a claim that ran out with no record            -> FIND (its order in the
 *             segments' orders: found -> its record CONFIRMed, DONE (replay); not
 *             found -> CLAIM, taking the dead claim over); one with a plan (a
 *             multi-segment order's) -> CLAIM taking it over, UNDO the plan, CLAIM
 *             again without it -> ROUND
 *   ROUND     sold out in this generation (a VERDICT here or on another loop) -> DONE
 *             most segments seen empty, stock left, lock mode, rebalance on, not
 *             yet done this generation on this loop          -> SPREAD
 *             the next segment of the ring (the loop's home segments first, ring.h)
 *             that may hold qty, claimed on no loop: claim it -> ACQUIRE (atomic: DEDUCT;
 *             hold_ms 0: SET NX PX and DEDUCT leave together -> DEDUCT)
 *             ring done: none busy, none left                -> VERDICT
 *                        none busy, stock spread thin        -> MULTI (no plan fills
 *                        it -> VERDICT)
 *                        deadline passed                     -> VERDICT
 *                        busy in Redis                       -> BACKOFF (timer)
 *                        held on this loop, at home here     -> WAIT (FIFO, timer):
 *             handed the claim -> ROUND from it; handed the lock itself (a
 *             standalone Redis, the holder's DEDUCT keeps it) -> HOLD at once
 *                        held by another loop only           -> BACKOFF (timer)
 *   SPREAD    every segment locked in index order, ADJUST "spread" -> VIEW (new
 *             generation); locks not had in time             -> ROUND
 *   ACQUIRE   reply OK                                       -> HOLD (timer hold_ms;
 *             lease renewed by a timer every ttl/3)          -> DEDUCT (with keep when
 *             an order of this loop waits for the segment: the lock goes on to it;
 *             a hold over before the lock's previous DEDUCT answered waits for it:
 *             OK -> DEDUCT, anything else -> ROUND from the segment, ACQUIRE)
 *             BUSY/SHORT/MISSING                             -> ROUND (next segment)
 *             EXISTS                                         -> DONE (replay/conflict)
 *             STALE                                          -> VIEW (re-read)
 *   DEDUCT    OK -> DONE (201; a cluster and a client's id: CONFIRM the record in
 *             the id's slot first, no answer -> unavailable, the claim kept; a fresh
 *             id was made for the segment's slot and the DEDUCT wrote its record);
 *             FENCED (a lock held elsewhere, or a lease lost) -> ROUND;
 *             SHORT/MISSING -> ROUND; EXISTS -> DONE; STALE -> VIEW
 *   MULTI     (a cluster: the id into the intents set, then CLAIM with the plan)
 *             the segments needed claimed and locked in ascending order (a claim
 *             held on this loop: wait, first in line for it; a lock held elsewhere:
 *             backoff timer; SET NX PX GET) then DEDUCT_MULTI -> DONE / ROUND / VIEW
 *             (a cluster: one DEDUCT per part, all at once; all OK -> CONFIRM ->
 *             DONE; one refused -> UNDO the plan, give the claim up -> ROUND / VIEW;
 *             one unanswered -> DONE, unavailable, claim and plan kept)
 *   VERDICT   (a verdict of this generation says less than qty -> DONE at once)
 *             the stock of every segment, then the meta: its generation still the
 *             view's and no adjust under way -> DONE sold out / insufficient (and
 *             that total stands for the generation); the stock is there -> ROUND
 *             (hints from these counts); a new generation -> VIEW; an adjust under
 *             way (units in transit) -> VIEW after a backoff timer; deadline passed
 *             and not a 409 -> DONE busy
 *   DONE      sold out or insufficient with a client id: the record is read, so a
 *             retry of a confirmed order gets its 200; then the callback.
 * No Redis answer at any step -> DONE (unavailable: the 503 names the order id).
 * On a cluster SPREAD is handed to the sweeper thread (sweeper.h: ADJUST spans the
 * slots, so it runs as blocking steps) and the order goes on. A claim is given up
 * when the order ends without a sale for certain.
 */
#ifndef SEG_ENGINE_H
#define SEG_ENGINE_H

#include <event2/event.h>
#include <stdbool.h>

#include "segments/inventory.h"
#include "segments/order.h"

typedef struct engine engine;

/* An engine on `base`, with its own Redis connection to v's Redis: the engine of
 * event loop `home` of `homes` in this process (ring.h: the segments its orders
 * visit first; 0 of 1 for a lone engine). */
engine *engine_create(inv *v, struct event_base *base, int home, int homes);
/* Free; no order may be in flight (engine_in_flight). NULL is fine. */
void engine_free(engine *e);

/* Called once per order with its result (res->record is the callee's to free, with
 * order_result_clear). */
typedef void (*engine_done_fn)(void *arg, struct order_result *res);

/* Place an order (`req`'s strings are copied). `fn` runs on the loop, later, never
 * from inside this call. */
void engine_order(engine *e, const struct order_request *req, engine_done_fn fn,
                  void *arg);

/* The last failure of the engine's Redis connection, for error details. */
const char *engine_error(const engine *e);

/* Orders started and not yet answered. */
int engine_in_flight(const engine *e);

/* The sold-out fast path: true when this loop knows `sku` is sold out now (counted
 * as an order outcome), without Redis. */
bool engine_sold_out_fast(engine *e, const char *sku);

/* Drop the cached settings of `sku` on this loop (after an admin write). */
void engine_invalidate(engine *e, const char *sku);

/* The engine's Redis connection's pipeline figures. */
void engine_pipeline(const engine *e, long long *commands, long long *writes);

#endif
