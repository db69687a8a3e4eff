/* gauges.h -- the per-SKU stock gauges of GET /metrics, read from Redis by a thread
 * of their own and kept in memory, so that a scrape reads no Redis at all.
 *
 * Which SKUs: at most `limit` (the metrics_sku_limit setting), those with the most
 * orders this process answered (any outcome but unknown_sku), ties by name; so with
 * fewer SKUs than that, all of them. A catalogue of 100k SKUs makes no bigger scrape
 * than one of `limit`.
 *
 * The refresher thread (one per process, its own inv_conn) works only while /metrics
 * is scraped: from the first api_gauges_get() until API_GAUGES_IDLE_MS after the
 * last, and an instance nobody scrapes sends Redis nothing for it. Meanwhile, every
 * API_GAUGES_REFRESH_MS, it reads the SKU names (one SMEMBERS, at most every
 * API_GAUGES_LIST_MS or at once after api_gauges_changed()) and the status of the
 * SKUs chosen (sku_get each), builds a new snapshot and publishes it. A refresh costs
 * about `limit` reads whatever the number of SKUs and of scrapes; a scrape costs none
 * and sees values at most about API_GAUGES_REFRESH_MS old (the first scrape after an
 * idle spell sees the older snapshot, or none, and wakes the thread).
 *
 * A SKU Redis no longer has is dropped at the next refresh; one deleted through this
 * process at once (api_gauges_forget). A SKU whose read fails keeps its previous
 * values, and the snapshot's `read_ms` stays that of the last refresh that read every
 * SKU it chose.
 *
 * Threads: a snapshot is immutable once published, but for its entries' `gone` flags;
 * readers hold a reference (api_gauges_get/_put) and render without any lock. The
 * registry's mutex guards the current snapshot, its reference counts, the scrape time
 * and the forget list. Out of memory aborts.
 */
#ifndef API_GAUGES_H
#define API_GAUGES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/names.h"
#include "segments/inventory.h"

#define API_GAUGES_REFRESH_MS 1000
#define API_GAUGES_LIST_MS 10000
#define API_GAUGES_IDLE_MS (10 * 60 * 1000)
#define API_GAUGES_LIMIT_MAX 10000 /* the largest metrics_sku_limit */

/* One SKU's gauges as Redis held them. */
struct api_gauge_sku {
    char sku[SEG_NAME_MAX + 1];
    long long remaining, sold, initial, reserved;
    int locks_held;
    int segments;
    long long *segment_stock; /* `segments` values; NULL when the SKU has more
                                 segments than segments_max */
    atomic_bool gone;         /* deleted through this process since the read */
};

struct api_gauges_snap {
    struct api_gauge_sku *sku; /* n of them, sorted by name */
    int n;
    long long read_ms; /* CLOCK_MONOTONIC ms of the last refresh that read all it
                          chose; 0: none yet */
    int refs;          /* the registry's (while current) plus every reader's */
};

struct api_gauges;

/* The registry and its thread, reading through `v` (borrowed; it must outlive the
 * registry). `limit` 0..API_GAUGES_LIMIT_MAX SKUs, per-segment stock for SKUs of at
 * most `segments_max` segments. NULL with `err` filled when the thread cannot start.
 */
struct api_gauges *api_gauges_create(inv *v, int limit, int segments_max, char *err,
                                     size_t errlen);

/* Stop and join the thread and free everything; every snapshot must have been put
 * back. NULL: no-op. */
void api_gauges_free(struct api_gauges *g);

/* The current snapshot (never NULL; empty before the first refresh), a reference the
 * caller gives back with api_gauges_put. Counts as a scrape: keeps the thread
 * refreshing. Any thread; never waits for Redis. */
const struct api_gauges_snap *api_gauges_get(struct api_gauges *g);
void api_gauges_put(struct api_gauges *g, const struct api_gauges_snap *snap);

/* `sku` was deleted through this process: its gauges go from the current snapshot
 * and from the refresh under way. */
void api_gauges_forget(struct api_gauges *g, const char *sku);

/* A SKU was created through this process: the next refresh re-reads the names. */
void api_gauges_changed(struct api_gauges *g);

/* The entry of `sku` in `snap`, or NULL when there is none or it is gone. */
const struct api_gauge_sku *api_gauges_find(const struct api_gauges_snap *snap,
                                            const char *sku);

#endif
