/* watchdog.h -- renews the leases of held segment locks from one background thread.
 *
 * A worker registers a lease when it takes a segment lock and removes it before it
 * returns; in between, the watchdog renews the lease (compare-and-pexpire on its own
 * Redis connection) every ttl/3, so work longer than the TTL keeps the lock, while a
 * holder that stalls -- the whole process stopped, Redis unreachable -- lets it lapse.
 * A renewal that finds the token gone marks the lease lost; the fenced write would
 * refuse it anyway, the flag only saves the round trip. Redis errors are retried at
 * the next tick on a fresh connection.
 */
#ifndef SEG_WATCHDOG_H
#define SEG_WATCHDOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "segments/internal.h"
#include "base/names.h"

struct lease {
    char sku[SEG_NAME_MAX + 1]; /* the lock: segment `seg` of `sku` */
    int seg;
    char token[33];
    /* owned by the watchdog while registered: */
    uint64_t id;
    int64_t renewed_ms;
    bool lost;
    struct lease *prev, *next;
};

/* Start the thread, renewing on a connection of its own to `to` (copied) whose
 * failures count in v's Redis error counter. NULL with `err` filled when the thread
 * cannot be started. */
watchdog *watchdog_create(inv *v, const struct rd_target *to, char *err, size_t errlen);
/* Stop the thread and free; leases still registered are forgotten, not released. */
void watchdog_free(watchdog *w);

/* Register `l` (sku, seg and token filled, lock just taken); it must stay valid until
 * watchdog_remove. */
void watchdog_add(watchdog *w, struct lease *l);
/* Unregister `l`; returns true when a renewal found the lock no longer ours. */
bool watchdog_remove(watchdog *w, struct lease *l);

#endif
