/* memstore.h -- an in-memory stock store behind segments/store.h, for tests only: the
 * engine's state machine run without a server (as SQLite tests its VFS layer with test
 * VFSes). The real backends keep their integration tests against real servers.
 *
 * What it keeps: per SKU its settings (epoch, gen) and per segment a stock, a sold
 * count, a lock (token and lease end on the store's clock) and the highest fence
 * accepted; per order id a record (its SKU, epoch and attempt). Its writes follow the
 * Redis scripts' contracts (lua/acquire.lua, deduct.lua, deduct_multi.lua, adjust.lua
 * "spread"/"rebalance"): the same codes for the same cases.
 *
 * Capabilities: always STORE_CAP_MULTI_ONE (one call sees every segment); KEEP and
 * FENCE as asked at create; never RECORD_APART (its claim ops are NULL).
 *
 * Answers. Every call is decided when it is made (as a server decides commands in
 * order) and answered on the loop, in call order, never inside the call. The store's
 * clock is the monotonic clock plus an offset a test moves on (mem_advance), so a
 * lease runs out without waiting. mem_fail makes calls go unanswered (rc -1, nothing
 * done), as a store that is down. Freeing the store answers what is pending -1.
 */
#ifndef TESTS_MEMSTORE_H
#define TESTS_MEMSTORE_H

#include <event2/event.h>
#include <stdbool.h>

#include "segments/store.h"

/* A store on `base`; caps: STORE_CAP_KEEP and/or STORE_CAP_FENCE (others ignored).
 * Freed by its ops' free (engine_free does it for an engine's store). */
store *mem_create(struct event_base *base, unsigned caps);

/* Create or reset `sku` (a new epoch, gen bumped, locks and sales gone): `stock` units
 * over `segments`, even, the lower segments taking the remainder. mode "lock" or
 * "atomic". */
void mem_put(store *s, const char *sku, long long stock, int segments, const char *mode,
             int hold_ms, bool rebalance);

/* Segment i's stock; the units sold over every segment; the locks held now. */
long long mem_stock(const store *s, const char *sku, int i);
long long mem_sold(const store *s, const char *sku);
int mem_locks_held(const store *s, const char *sku);

/* An intruder takes segment i's lock with `token` for ttl_ms, whoever holds it. */
void mem_take_lock(store *s, const char *sku, int i, const char *token, int ttl_ms);
/* The store's clock moves on by ms. */
void mem_advance(store *s, long long ms);
/* The next n calls get no answer (rc -1) and change nothing; 0 ends that. */
void mem_fail(store *s, int n);

enum mem_counter {
    MEM_ACQUIRES, /* acquire calls */
    MEM_DEDUCTS,  /* deduct and deduct_multi calls */
    MEM_FENCED,   /* writes refused FENCED */
    MEM_BUSY,     /* acquires refused BUSY */
    MEM__COUNT
};
long long mem_count(const store *s, enum mem_counter c);

#endif
