/* fence.h -- a lock service's holds on the PostgreSQL store (pgf_*): the fencing
 * number each hold registers per segment, and the writes it fences (issue 27;
 * store.h "Locks and fencing", STORE_CAP_FENCE). Private to segments/postgres/.
 *
 * Schema (migration 6, pgf_schema): `segments.svc_fence` (the highest fence a hold of
 * the segment registered; 0: none yet), `skus.unfenced` (the lab's "fencing": false),
 * and three PL/pgSQL functions, one statement each, whose o_code is store.h's codes:
 *   inv_svc_hold           HOLD: the segment's row locked (FOR UPDATE), the SKU's
 *                          epoch (STALE), the order id (EXISTS, with its record), the
 *                          row (MISSING), its stock (SHORT), then the fence: 0 takes
 *                          the next one (highest + 1), one below the highest is
 *                          FENCED, else it becomes the highest. OK: stock, fence.
 *   inv_svc_deduct         the deduction of a hold: the row locked, its fence checked
 *                          first (below the highest: FENCED, nothing written; -1, the
 *                          lab's unfenced write: not checked), then the epoch, the
 *                          id, the row and the stock as deduct's are, the order row
 *                          and the stock less qty in the same transaction.
 *   inv_svc_deduct_multi   the same over several segments, all or nothing: every
 *                          row locked in segment order, any part's fence below its
 *                          segment's highest FENCED, SHORT with each part's stock.
 * And inv_hold_place (a reservation's place) refuses a lock service's SKU (11,
 * ADMIN_MISMATCH), as Redis does: migration 5's function runs on as
 * inv_hold_place_walk for every other SKU.
 * The check and the write run under the same row lock, so a hold registered between
 * them cannot be missed: a fence is checked against the highest as of the write.
 * A reset makes the segment rows again (svc_fence 0) under a new epoch, which every
 * one of these functions checks, so an old holder's fence is no use in the new sale.
 *
 * Calls go on the handle's pipelined connection (`plain`), answered once on the loop.
 */
#ifndef SEG_POSTGRES_FENCE_H
#define SEG_POSTGRES_FENCE_H

#include "segments/postgres/handle.h"

/* Migration 6's statements (schema.c), NULL-terminated. */
extern const char *const pgf_schema[];

/* `lock` as the engine's meta names it: a lock service's name ("redlock",
 * "memcached", "zookeeper") as is, "" for this store's own schemes. */
const char *pgf_lock_service(const char *lock);

/* store_ops.hold. */
void pgf_hold(store *st, const char *sku, long long epoch, int i, const char *id,
              long long qty, long long fence, store_reply_fn fn, void *arg);
/* store_ops.deduct under a lock service's hold (token "", fence > 0 or
 * STORE_UNFENCED): OK (value = stock left), FENCED, STALE, EXISTS (record), MISSING,
 * SHORT (value = stock). */
void pgf_deduct(struct pg_store *s, const char *sku, long long epoch, int i,
                long long fence, const char *id, long long qty, const char *record,
                store_reply_fn fn, void *arg);
/* store_ops.deduct_multi under a lock service's holds (p->fence given). */
void pgf_deduct_multi(struct pg_store *s, const char *sku, long long epoch,
                      const char *id, const char *record, const struct store_parts *p,
                      store_multi_fn fn, void *arg);

#endif
