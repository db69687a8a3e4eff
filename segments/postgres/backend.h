/* backend.h -- PostgreSQL as a store behind the seam of segments/store.h (pgb_*): the
 * ops table over the schemes of store.h, on one loop.
 *
 * A SKU's lock scheme (its "lock": row, lease, optimistic; mode atomic: none) is
 * learned from its settings (meta_read) and chosen per call:
 *   row        acquire opens a transaction on a pool connection and locks the segment
 *              FOR UPDATE NOWAIT (BUSY when held); the deduction COMMITs it, a release
 *              rolls it back; renew answers whether the handle still holds it (the
 *              session's idle_in_transaction_session_timeout = lock_ttl_ms is the
 *              lease: a frozen holder's session ends and its late COMMIT fails). With
 *              no hold (lock, then deduct at once) the deduction takes the row lock
 *              NOWAIT in its own statement.
 *   lease      lock / acquire / renew / release on the segment row's token and expiry;
 *              the deduction is conditional on both (fenced); keep leaves it held.
 *   optimistic acquire reads stock and version; the deduction is conditional on the
 *              version (a lost race answers FENCED: the next segment, another round);
 *              keep carries the new version to the next holder.
 *   atomic     one conditional UPDATE.
 *   redlock, memcached, zookeeper   a lock service's (STORE_CAP_FENCE): hold registers
 *              the hold's fence per segment, the deductions refuse a lower one
 *              (fence.h); acquire, lock, renew and release are not called.
 * Every deduction writes its order row in the same statement (the primary key makes
 * an id sell once: EXISTS with the record). deduct_multi is one statement, all or
 * nothing (STORE_CAP_MULTI_ONE). wait answers 1 at once: a COMMIT answered is durable.
 * Calls outside a `row` hold go on one connection in order, pipelined (conn.h); the
 * holds on a pool of `pool` connections (pool.h).
 * adjust (spread.c): "spread" (the automatic rebalance) and "rebalance" in one
 * transaction, fenced by the epoch and, on lease, the callers' leases.
 * Not here: epoch checks on single-segment deductions (a reset drops the segment rows
 * and their leases, so a holder's write is fenced or finds the new rows).
 */
#ifndef SEG_POSTGRES_BACKEND_H
#define SEG_POSTGRES_BACKEND_H

#include <event2/event.h>
#include <stdbool.h>

#include "segments/store.h"

struct pgb_opts {
    const char *conninfo; /* any libpq connection string */
    int lock_ttl_ms;
    int timeout_ms;  /* each call's deadline */
    int pool;        /* connections for row holds, 1..64 (pgp_create); 0: 4 */
    bool no_prepare; /* nothing prepared (pgc_opts.no_prepare) */
    bool shared;     /* one connection for every call and transaction (a worker's
                        store: one operation at a time, no row holds): the pool's one */
};

store *pgb_store_create(struct event_base *base, const struct pgb_opts *o);

#endif
