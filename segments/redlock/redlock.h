/* redlock.h -- RedLock: a lock service (segments/locksvc.h) over N independent
 * redis-servers, each on one hiredis 0.14.1 async connection on the caller's loop.
 *
 * Target: "HOST:PORT,HOST:PORT,..." with N = 3 or 5 masters that share nothing (no
 * replication, no cluster); a majority is N/2 + 1.
 *
 * Key schema (on every node): `redlock:NAME` = the holder's token (32 hex digits,
 * fresh from the kernel per acquire), with a PX expiry of the lease.
 *
 * Protocol (one explicit state machine per call, `enum rl_state` in redlock.c):
 * - acquire: `SET key token NX PX ttl` on every node at once. Won when a majority
 *   answered OK and the validity ttl - elapsed - drift (drift = ttl/100 + 2 ms) is
 *   still positive; the hold is then valid until start + ttl - drift. Otherwise the
 *   token is deleted on every node (compare-and-delete, not waited for) and the call
 *   tries again after a random 5-30 ms, until wait_ms from the call: then LKS_BUSY
 *   when a majority answered in the last round (the lock is held elsewhere), or
 *   LKS_UNAVAIL when fewer did (e.g. two of three masters down).
 * - renew: compare-and-pexpire (Lua) on every node: LKS_OK with a majority extended
 *   within the validity; LKS_LOST when a majority answered but fewer were still ours
 *   (the lost callback runs first); LKS_UNAVAIL when fewer than a majority answered.
 * - release: compare-and-delete (Lua) on every node: LKS_OK when a majority deleted
 *   our token, LKS_LOST when a majority answered but fewer did, else LKS_UNAVAIL.
 * - a hold not renewed by its valid_until is lost: its lost callback runs then.
 *
 * Time-outs. hiredis 0.14.1 has none for async commands, so every call has its own
 * timer: ttl/4, clamped to 50..1000 ms. A node that still owes an answer then is
 * taken as hung: its connection is dropped (whatever else waited on it is answered
 * as no answer) and made again at its next command. A call decided before every node
 * answered (a majority granted) leaves the late replies to free themselves.
 *
 * Fencing: none (lks caps 0, fence 0): RedLock cannot order its grants. A master
 * restarted without persistence forgets the keys it granted and can give a second
 * client a majority while the first still believes it holds (tests/it_redlock.c
 * shows it): the stock store's fence is what makes that harmless.
 *
 * free: pending calls are answered LKS_UNAVAIL; holds are not released (nothing can
 * be sent without running the loop): they expire with their lease.
 */
#ifndef SEG_REDLOCK_H
#define SEG_REDLOCK_H

#include "segments/locksvc.h"

extern const struct lks_ops lks_redlock_ops;

#endif
