/* backend.h -- Redis, standalone and Cluster, as a store behind the seam of
 * segments/store.h: the ops table filled from the asynchronous calls of async.h.
 *
 * Capabilities: STORE_CAP_KEEP and STORE_CAP_MULTI_ONE on a standalone Redis (one
 * script sees every key); STORE_CAP_RECORD_APART on a cluster (a record and a
 * segment live in different slots). Asked per call: a standalone handle follows the
 * process's mode to a cluster (mode_follow). No STORE_CAP_FENCE yet: the lock lives
 * beside the stock, and the token fences every write.
 */
#ifndef SEG_REDIS_BACKEND_H
#define SEG_REDIS_BACKEND_H

#include <event2/event.h>

#include "segments/redis/async.h"
#include "segments/store.h"

/* A store on `base` over a new rda_conn to `to` (counts copied, may be NULL). Free
 * with its ops' free on the loop's thread. */
store *rd_store_create(struct event_base *base, const struct rd_target *to,
                       const struct rda_counters *counts);

#endif
