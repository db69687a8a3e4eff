/* smap.h -- one slot map per process: a Redis Cluster's slot map as immutable
 * snapshots, shared by every handle made with it (async_conn.c; store.c's
 * connections through theirs) and refreshed by one thread. Private to segments/redis/
 * (calls.h declares create and free).
 *
 * Snapshots. A snapshot never changes once published. Each carries a generation
 * that grows by one whenever a fetch finds a map that differs from the newest one
 * (masters, replicas or slots; the same map fetched again makes no new generation).
 * rd_smap_gen reads the newest generation without a lock, so a connection checks at
 * each command, in one atomic load, whether it routes by the newest map; when not,
 * rd_smap_get hands it the newest snapshot (a reference taken under the map's mutex,
 * which is never held during a fetch) and rd_smap_put gives it back. A reader never
 * waits for a fetch.
 *
 * Refreshes. The map's own thread fetches: at once when the map is created, when any
 * connection asks (rd_smap_refresh: MOVED, a node that failed, CLUSTERDOWN), and
 * every RD_SMAP_TICK_MS; never twice within RD_SMAP_MIN_MS. Asks made while a fetch
 * runs are answered by the next fetch, so however many connections ask at once, one
 * fetch answers them all (single flight). The thread keeps its connection to the
 * node that answered (CLUSTER SHARDS, else SLOTS: rd_slot_map_ask; AUTH and the
 * timeout as the seed's), so a tick is one command; when that node fails, it asks
 * the seed, then every node of the newest snapshot. The tick is short because
 * nothing else tells a connection that a master it still routes to was replaced
 * (a dead one refuses connections and is asked about at once; a frozen or
 * unreachable one would cost every connection its command's timeout): one tick
 * after a replica's promotion, every connection routes to it.
 *
 * The mode. A process whose Redis answered as standalone at start (or not at all)
 * has a map too, without snapshots, whose thread asks the seed `INFO cluster` when a
 * connection asks (rd_smap_refresh after an answer only a cluster gives: MOVED, ASK,
 * CROSSSLOT, ...; slots.h rd_cluster_error; at most every RD_SMAP_PROBE_MIN_MS),
 * and, when no seed answered at start (rd_smap_unsure), every RD_SMAP_PROBE_MS until
 * one answers. A standalone Redis that said so is sent nothing unasked. When it says
 * cluster_enabled:1, the thread fetches the first map, publishes it, and then the mode
 * (rd_smap_cluster, one atomic: false -> true, once; never back). Every connection reads
 * the mode at each command and, once it is a cluster, routes by the map from then on.
 *
 * Errors. A failed fetch keeps the newest snapshot and records why (rd_smap_error).
 * Every function is thread-safe. rd_smap_free comes after the last connection that
 * uses the map is freed.
 */
#ifndef SEG_REDIS_SMAP_H
#define SEG_REDIS_SMAP_H

#include <stdatomic.h>
#include <stddef.h>

#include "segments/redis/calls.h"
#include "segments/redis/slots.h"

#define RD_SMAP_TICK_MS 250      /* the map is fetched at least this often */
#define RD_SMAP_MIN_MS 100       /* and at most this often */
#define RD_SMAP_PROBE_MS 5000    /* standalone: INFO cluster at least this often */
#define RD_SMAP_PROBE_MIN_MS 250 /* and at most this often */

struct rd_smap_snap {
    long long gen;          /* 1, 2, ...: the newest has the highest */
    struct rd_slot_map map; /* read-only */
    _Atomic int refs;       /* private: the map's own reference and each rd_smap_get's */
};

/* The newest snapshot's generation; 0 while no fetch has succeeded. Lock-free. */
long long rd_smap_gen(rd_smap *m);

/* The newest snapshot, referenced (give it back with rd_smap_put), or NULL while no
 * fetch has succeeded. */
const struct rd_smap_snap *rd_smap_get(rd_smap *m);
void rd_smap_put(const struct rd_smap_snap *s);

/* Ask for a fetch, and wait up to wait_ms (0: not at all) for one that began after
 * this call to end. Returns the newest generation then: a caller that compares it
 * with the one it routed by learns whether the map changed. */
long long rd_smap_refresh(rd_smap *m, int wait_ms);

/* Why the last fetch failed, into buf[0..len) ("" when it did not). */
const char *rd_smap_error(rd_smap *m, char *buf, size_t len);

#endif
