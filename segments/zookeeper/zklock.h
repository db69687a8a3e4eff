/* zklock.h -- the ZooKeeper lock service behind segments/locksvc.h: Curator's lock
 * recipe (InterProcessMutex) on one session per handle of the single-threaded C client
 * (zksession.h says why st and not mt).
 *
 * Znodes. A persistent parent per lock name, /inventoryd/locks/<name> (made with its
 * ancestors the first time a create finds it missing), and one EPHEMERAL|SEQUENTIAL
 * child per contender, "_c_<32 hex>-lock-<sequence>": the random part is fresh per
 * acquire, so a create whose reply was lost (connection loss) is found again among the
 * children (Curator's "protected" mode) instead of being left behind or made twice.
 * Names are 1..128 characters of [A-Za-z0-9_.:-] and not "." or ".."; another name is
 * answered LKS_UNAVAIL. Parents are never deleted (their sequence counter must not
 * restart).
 *
 * The recipe. The child with the lowest sequence holds the lock. A contender that is
 * not the lowest sets an exists-watch on its predecessor only (the next lower
 * sequence), never on the parent, so a release wakes one waiter, not the herd; when
 * the watch fires (or the predecessor is already gone) it lists the children again.
 * The fencing number is the holder's own node's czxid (LKS_CAP_FENCES): zxids only
 * grow and a later contender's node is created later, so grants of one name get
 * strictly increasing fences.
 *
 * Acquire deadlines. wait_ms bounds the time in line: when it has passed at a listing
 * that finds us not the lowest (wait_ms 0: the first one), or while we watch, our node
 * is deleted and the answer is LKS_BUSY once the delete is confirmed (so a BUSY leaves
 * no node behind). The answer comes at the latest ZKL_REPLY_MS past wait_ms: past it
 * (a service that does not answer, or a connection that is not up) the answer is
 * LKS_UNAVAIL and the contender cleans up after itself in the background (its node,
 * found by its random part if need be, is deleted when the session is connected).
 * With the connection down for ZKL_REPLY_MS already, an acquire is answered UNAVAIL
 * at once.
 *
 * Sessions. The session starts at the first acquire, asking for that acquire's ttl_ms
 * as its timeout (the server may clamp it to its min/max session timeout); every
 * lock of the handle shares it. A connection loss keeps every hold until the session
 * timeout: the server keeps the session and its nodes until the timeout passes
 * without a reconnect (the client reconnects meanwhile, to any server of the list);
 * contenders in line list again after a reconnect. Session expiry
 * (ZOO_EXPIRED_SESSION_STATE at a reconnect, a failed auth, or the connection down
 * for a whole session timeout: the server has expired it by then) loses every hold of
 * the handle: each goes to LOST and its `lost` callback runs once; contenders still
 * waiting re-enter the line in the new session, made at once with the same timeout,
 * unless the connection has been down for ZKL_REPLY_MS (then LKS_UNAVAIL).
 *
 * Leases. A hold is valid until the send time of the last request the server
 * answered for it plus min(ttl_ms, the negotiated session timeout): the server cannot
 * have expired the session before then. Renew asks the server (an exists on our node):
 * LKS_OK while the session lives and the node is ours, moving valid_until_ms the same
 * way; LKS_LOST after expiry or when the node is gone; LKS_UNAVAIL while disconnected
 * or without a reply within ZKL_REPLY_MS. Release deletes our node: LKS_OK, LKS_LOST
 * when it was gone already, LKS_UNAVAIL when the connection is down or no reply came
 * within ZKL_REPLY_MS (then the node is deleted once the server answers, or goes with
 * the session).
 *
 * Callbacks run from the loop (a zero-delay event), never inside the client library
 * nor inside the call that asked. Do not free the service from one of its callbacks.
 * Free closes the session: the server deletes every node of it at once.
 */
#ifndef SEG_ZK_LOCK_H
#define SEG_ZK_LOCK_H

#include <stdint.h>

#include "segments/locksvc.h"

#define ZKL_REPLY_MS 1000 /* how long past wait_ms an acquire may wait for answers */

extern const struct lks_ops zkl_ops;

/* Counters of one handle, for tests and metrics. */
struct zkl_stats {
    uint64_t creates;  /* contender nodes created */
    uint64_t lists;    /* getChildren sent */
    uint64_t watches;  /* exists-watches set on a predecessor that was there */
    uint64_t wakeups;  /* a watched predecessor went away */
    uint64_t grants;   /* acquires answered LKS_OK */
    uint64_t sessions; /* sessions made (1 after the first acquire) */
    uint64_t lost;     /* holds lost to a session expiry */
};
void zkl_get_stats(void *svc, struct zkl_stats *out);

/* The session's id and password while connected (0), else -1: what a second client
 * needs to take the session over (the classic way tests expire one). */
int zkl_session(void *svc, int64_t *id, char passwd[16]);

#endif
