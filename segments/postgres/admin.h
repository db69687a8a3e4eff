/* admin.h -- PostgreSQL's table of blocking admin operations (segments/admin.h), in
 * SQL on a blocking libpq connection of a worker's own (pga_*), and the schema's
 * migration run once at start and by `inventoryd --migrate`.
 *
 * Every write is one transaction. A reset writes the SKU's row (its settings, lock
 * scheme, epoch, gen = epoch as on Redis), its segment rows, and drops its order rows; an
 * adjust (restock, rebalance) locks the SKU's row and segment rows (FOR UPDATE: a `row`
 * holder's transaction is waited for), bumps every touched segment's version (an
 * optimistic deduction that read it loses) and the SKU's gen, as a cancel does on the
 * loop (cancel.c, store.h cancel). Request ids
 * live in the table `requests` (sig: what the write was). No caller's segment locks are
 * needed (no ADMIN_CAP_LOCKS); `wait` answers 1 at once: a COMMIT is durable on the
 * server (synchronous_commit; a standby is the server's own business). Lock schemes:
 * "row" (the default), "lease", "optimistic". Reservations (hold_by_id,
 * holds_sweep): one statement each, holds.h's; a release is that statement in a
 * transaction of its own whose lock wait is wait_ms (it waits for its segment's row
 * as an order waits for a segment: a `row` holder keeps the row past timeout_ms), a
 * wait run out answering STORE_BUSY with nothing done.
 */
#ifndef SEG_POSTGRES_ADMIN_H
#define SEG_POSTGRES_ADMIN_H

#include <stddef.h>

#include "segments/admin.h"

/* A handle on `conninfo` (copied), connecting on first use and again after a failure;
 * each statement bounded by timeout_ms, a release's wait for a row by wait_ms (the
 * service's lock_wait_ms). */
admin *pga_create(const char *conninfo, int timeout_ms, int wait_ms);
/* The table's lock schemes (admin_ops.locks), without a handle. */
const char *const *pga_locks(void);
/* Create or upgrade the schema (schema.c) and wait for it: 0 (with the version in
 * *version), or -1 with err filled. */
int pga_migrate(const char *conninfo, int timeout_ms, int *version, char *err,
                size_t errlen);

#endif
