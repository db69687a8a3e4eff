/* lockset.h -- several segment locks held together, taken in ascending index order.
 *
 * A blocking worker's cancel uses it (segments/order.c); the engine's sets (multi-
 * segment orders, the spread, an admin restock or rebalance) are multi.c's. Locks are
 * always taken in ascending segment index, and single-segment orders hold at most one
 * lock at a time, so no cycle of waiters can form: no deadlock. Each lock is claimed
 * locally first (skutab), then set in Redis with a fresh token (SET NX PX), and its lease
 * is renewed by the watchdog while held.
 */
#ifndef SEG_LOCKSET_H
#define SEG_LOCKSET_H

#include <stdbool.h>
#include <stdint.h>

#include "segments/internal.h"
#include "segments/skutab.h"

struct lockset;

/* Take the locks of segments seg[0..n-1] (ascending, distinct, n >= 1) of `sku`,
 * waiting for each until `deadline_ms` (inv_now_ms clock). Returns the set, or NULL
 * with *why = INV_BUSY or INV_UNAVAILABLE and nothing held. */
struct lockset *lockset_take(inv_conn *c, sku_local *e, const char *sku, const int *seg,
                             int n, int64_t deadline_ms, inv_status *why);

/* The token of the k-th lock of the set. */
const char *lockset_token(const struct lockset *s, int k);

/* Free the set: unregister its leases, give the local claims back and, when
 * `release`, delete the locks still ours in Redis (not needed after a script that
 * answered: every script releases the locks its tokens own). Returns true when a
 * lease was lost while held. */
bool lockset_drop(inv_conn *c, struct lockset *s, bool release);

#endif
