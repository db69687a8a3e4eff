/* adjust.h -- restock and rebalance on a Redis Cluster: an intent recorded first, then
 * one script per slot, on the event loop (a state machine, as cancel.c). Private to
 * segments/redis/: backend.c's adjust comes here when its handle routes over a
 * cluster; a standalone Redis runs the single ADJUST (async.h rda_adjust).
 *
 * On a cluster the meta (inv:sku:{sku}) and each segment's keys ({sku/salt:i}) are
 * different slots, so no script may touch them all. An adjust runs as:
 *   1. the plan: one signed delta per segment. Restock of `add` units: segment i gets
 *      add/n, plus 1 for i < add%n. Rebalance: each segment's stock read (one GET per
 *      slot), the total split evenly (lower segments take the remainder), delta_i =
 *      target_i - stock_i. Spread: the same, only when that leaves stock in more
 *      segments (else OK, gen 0, nothing recorded).
 *   2. ADJUST_BEGIN (the meta's slot): request id checks (REPLAYED, CONFLICT), epoch
 *      and segment count (STALE), a cluster reset under way (BUSY while its lease
 *      runs, STALE once it died: only another reset finishes it), one adjust at a time
 *      (BUSY while another intent's lease runs), the restock limit (LIMIT); then the
 *      intent -- a random id, op, add, plan, request id and signature -- is written
 *      into the meta with its runner (a random token) and a lease of ADJUST_LEASE_MS
 *      on the node's clock.
 *   3. ADJUST_TAKE (each segment's slot) for each negative delta: takes what the
 *      segment holds of it (orders may have sold meanwhile; stock never goes below 0);
 *      the amount is recorded under the intent id in the segment's marks hash.
 *   4. ADJUST_GIVE for each positive delta: restock gives the plan; rebalance hands
 *      the units actually taken to the receivers in index order, each up to its delta.
 *      Recorded likewise.
 *   5. ADJUST_COMMIT (the meta's slot): while the intent is still this one and this
 *      runner's, drops it, raises `initial` by `add`, bumps gen, records the request
 *      id. OK with the gen; REPLAYED when it was committed already; STALE when a
 *      reset removed it. Then the runner deletes the intent's marks (best effort).
 *
 * Every step is idempotent: a take or give run again answers its recorded amount, so
 * the gives of a rebalance (a function of the takes' amounts) come out the same for any
 * runner. An intent whose lease ran out (its process died or stalled) is taken over by
 * the next adjust of the SKU, or a retry under the same request id: BEGIN answers the
 * dead intent and makes the caller its runner with a new lease; the caller runs its
 * steps again and commits it (roll forward), then begins its own. Takes and gives are
 * fenced by their runner's lease (refused 1 s before its end, for the clocks of two
 * masters) and the commit by the runner's token, so a runner that stalled past its
 * lease writes nothing once another may have taken over, and the marks a commit
 * deletes are never needed again. No segment lock is taken: DEDUCT checks the stock
 * under its own fence, and each take and give is one atomic script on its segment.
 *
 * Durability replicated (wait_ms > 0): every step -- BEGIN's intent or takeover, each
 * take, each give, the commit -- is WAITed for on its node (WAIT 1 wait_ms) before the
 * next is sent, and the marks are deleted only after the commit is on a replica. A
 * WAIT that finds no replica stops the call (NOT_REPLICATED) and the runner ends its
 * lease at once (ADJUST_YIELD: every step it sent was answered, so none can land
 * later). A failover then keeps a prefix of the steps: no intent (nothing else was
 * sent; the retry begins afresh), the intent with some steps (taken over at once and
 * rolled forward exactly once by the retry or the next adjust), or the commit (the
 * retry is REPLAYED). A step that answers an earlier run writes the same value again,
 * so the WAIT on this connection covers that run. A call that timed out does not end
 * its lease: its last step may still land, and only the lease fences it.
 *
 * Mid-adjust, remaining + sold = initial does not hold: a rebalance has units in
 * transit (taken, not yet given); a restock has segments raised before the commit
 * raises `initial`. It holds again at the commit, or at the roll-forward of a dead one.
 * So stock read mid-adjust is no ground for a 409: the order path reads the meta
 * after the stocks (rd_meta.adjust_until: the intent's lease) and waits for the commit.
 */
#ifndef SEG_REDIS_ADJUST_H
#define SEG_REDIS_ADJUST_H

#include "segments/redis/async.h"

/* How long an adjust may run before another takes it over (its process is taken for
 * dead). */
#define ADJUST_LEASE_MS 15000

/* rda_adjust on a cluster (store.h adjust), without segment locks, of the SKU whose
 * segments are at `placed` (store_sku_placed) in `epoch` with `segments`. `op`
 * "restock", "rebalance" or "spread"; `wait_ms` > 0: durability replicated (above).
 * Codes: OK (value = the new gen; 0 when a spread changed nothing), REPLAYED, CONFLICT,
 * STALE, BUSY (another adjust or a reset of the SKU is under way, or this call's lease
 * ran out and another runner may be finishing its intent: retry), LIMIT,
 * NOT_REPLICATED (a step reached no replica: stopped after it, lease ended; a retry
 * under the same request id finishes it). rc -1 when Redis gave no usable answer (a
 * step's outcome unknown: a retry under the same request id finishes it, once the
 * lease ran out). `fn` is called once, on the loop, never from inside this call. */
void rda_adjust_cluster(rda_conn *c, const char *placed, long long epoch, int segments,
                        const char *op, long long add, long long limit, const char *rid,
                        const char *sig, int wait_ms, rda_reply_fn fn, void *arg);

#endif
