/* admin.h -- Redis's table of blocking admin operations (segments/admin.h): today's
 * rd_* calls of calls.h, one for one, on a worker's rd_conn.
 *
 * Capabilities: ADMIN_CAP_LOCKS on a standalone Redis (an adjust runs under the
 * segment locks its caller took, as a cancel does: store.h cancel), ADMIN_CAP_CLUSTER on
 * a cluster; asked per call, as the connection follows the process's mode. Locks: "redis"
 * only.
 */
#ifndef SEG_REDIS_ADMIN_H
#define SEG_REDIS_ADMIN_H

#include <stdatomic.h>

#include "segments/admin.h"
#include "segments/redis/calls.h"

/* A handle over a new rd_conn to `to` (`errors` as for rd_conn_create). */
admin *rd_admin_create(const struct rd_target *to, _Atomic long long *errors);
/* Its connection, for the Redis-only calls beside the table (the sweeper's intents). */
rd_conn *rd_admin_conn(admin *a);
/* The table's lock schemes (admin_ops.locks), without a handle. */
const char *const *rd_admin_locks(void);

#endif
