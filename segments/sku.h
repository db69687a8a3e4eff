/* sku.h -- SKU administration: create/reset, inspect, restock, rebalance, list, delete.
 *
 * A reset spreads `stock` evenly over `segments` (the first stock % segments get one
 * more), zeroes the sold counts, drops every lock and the SKU's order records, and
 * draws a new epoch (never reused), so every instance re-reads its settings and no
 * script of the old epoch can write into the new one. A holder of a dropped lock
 * fails its fenced write, so a reset during a sale cannot oversell. A reset starts
 * a new sale: it forgets the SKU's orders, so an order_id may be placed again
 * afterwards (and get a second 201).
 */
#ifndef SEG_SKU_H
#define SEG_SKU_H

#include <stdbool.h>

#include "segments/inventory.h"
#include "base/names.h"
#include "segments/skumode.h"

#define SKU_STOCK_MAX 9007199254740991LL /* 2^53 - 1: exact in a JSON number */
#define SKU_HOLD_MAX_MS 10000
#define SKU_RESTOCK_MAX 1000000000000LL
#define SKU_BATCH_MAX 1024 /* orders one lock hold may sell ("batch") */

struct sku_config {
    long long stock; /* 0..SKU_STOCK_MAX */
    int segments;    /* 1..SEG_MAX_SEGMENTS */
    sku_mode mode;
    int hold_ms;     /* 0..SKU_HOLD_MAX_MS: simulated work while the lock is held,
                        paid once per batch */
    bool rebalance;  /* mode lock: rebalance automatically once half the segments are
                        empty while stock remains (spread.c) */
    bool replicated; /* durability "replicated": an order is 201 only once a replica
                        has it (WAIT 1); else "async" (the master applied it) */
    sku_lock lock;   /* mode lock: where the segment locks live (skumode.h) */
    bool unfenced;   /* "fencing": false (the lab only): a lock service's holder
                        writes unchecked (store.h STORE_UNFENCED) */
    int batch;       /* 1..SKU_BATCH_MAX (0 reads as 1): the orders one hold of a
                        segment's lock may sell, in one fenced write (engine batch.c) */
};

#define SKU_LOCK_MAX 16 /* a lock scheme's name ("lock"), its NUL included */

/* Which version of a SKU a put may replace. A version is the SKU's epoch (a new one
 * at every create and reset) and its gen (bumped by every restock, rebalance, the
 * automatic one included, and cancel; never by a sale): what an admin decided the SKU
 * holds, not how far its sale has gone. */
enum sku_replace {
    SKU_REPLACE_ANY,      /* create, or reset whatever is there */
    SKU_REPLACE_NONE,     /* create only: INV_SKU_EXISTS when the SKU is there */
    SKU_REPLACE_EXISTING, /* reset only: INV_PRECONDITION when there is no SKU */
    SKU_REPLACE_VERSION,  /* reset exactly {epoch, gen}: INV_PRECONDITION otherwise */
};

struct sku_version {
    long long epoch, gen;
};

#define SKU_NODES_MAX 64

struct sku_status {
    char sku[SEG_NAME_MAX + 1];
    struct sku_config cfg;      /* cfg.stock is the initial stock */
    struct sku_version version; /* what sku_put's SKU_REPLACE_VERSION names */
    long long remaining;        /* sum of segment stock */
    long long sold;             /* sum of segment sold counts */
    long long reserved;         /* units held by reservations (reserve.h): remaining +
                                   reserved + sold = initial */
    long long orders;           /* number of order records (one per sale) */
    long long segment_stock[SEG_MAX_SEGMENTS];
    long long segment_sold[SEG_MAX_SEGMENTS];
    long long segment_reserved[SEG_MAX_SEGMENTS];
    long long segment_orders[SEG_MAX_SEGMENTS]; /* orders recorded first in segment i */
    bool segment_locked[SEG_MAX_SEGMENTS];      /* segment i's lock is held right now */
    int segment_slot[SEG_MAX_SEGMENTS];         /* the cluster slot of segment i's keys */
    short segment_node[SEG_MAX_SEGMENTS];       /* a cluster: its master, an index into
                                                   nodes; -1 on a standalone Redis */
    char nodes[SKU_NODES_MAX][48];              /* "host:port" of those masters */
    int nnodes;
    char placed[SEG_NAME_MAX + 16]; /* the name its segments are keyed under: the SKU,
                                       or "sku/salt" when placed with a salt */
    int locks_held;                 /* segment locks held right now (any instance) */
    char lock[SKU_LOCK_MAX];        /* the lock scheme, as the store names it */
};

/* Admin writes take a request id `rid` (a valid name, or NULL/"" for none): a write
 * is applied once per id -- sent again under the same id it changes nothing and
 * answers as the first did (INV_OK); the same id for a different write is
 * INV_REQUEST_CONFLICT. Without one, a fresh id is drawn for the call, so a script
 * sent again after a lost reply is still recognised. Ids are kept for a day. Every
 * write checks, in its script, that the SKU is still as the caller found it, and
 * reads it again when not: a stale cache never decides where stock goes. */

/* Create or reset `sku` as `how` (and `v`, for SKU_REPLACE_VERSION) allow: the
 * version is compared in the script that resets (on a cluster, in the step that
 * marks the reset pending), so no write slips between the compare and the reset.
 * INV_OK with *created (may be NULL) true when the SKU was made, false when reset (a
 * replay under the same request id: as its first run), INV_SKU_EXISTS,
 * INV_PRECONDITION, INV_INVALID (cfg out of range, or a batch > 1 on a store without
 * ADMIN_CAP_BATCH), INV_REQUEST_CONFLICT, INV_BUSY
 * (raced by other resets throughout), INV_UNAVAILABLE, or on a Redis Cluster, when
 * the SKU is or becomes "replicated", INV_NOT_REPLICATED: a step reached no replica,
 * the reset stopped there and its retry finishes it (store.h reset; sku_delete
 * likewise). */
inv_status sku_put(inv_conn *c, const char *sku, const struct sku_config *cfg,
                   enum sku_replace how, const struct sku_version *v, const char *rid,
                   bool *created);
/* sku_put with the SKU's lock scheme `lock` (the "lock" of the PUT): one of the
 * store's (admin.h admin_ops.locks), else INV_INVALID; NULL or "": the store's
 * default. */
inv_status sku_put_lock(inv_conn *c, const char *sku, const struct sku_config *cfg,
                        const char *lock, enum sku_replace how,
                        const struct sku_version *v, const char *rid, bool *created);

/* Fill `st` (caller-owned). INV_OK, INV_UNKNOWN_SKU or INV_UNAVAILABLE. */
inv_status sku_get(inv_conn *c, const char *sku, struct sku_status *st);

/* Add `qty` (1..SKU_RESTOCK_MAX) units, spread evenly over the segments (lower ones
 * take the remainder) under every segment's lock, raising the initial stock by as
 * much; safe while orders run. With the store's segment locks (a standalone Redis)
 * on the order engine's code, on the connection's own loop (engine.h engine_adjust), as
 * everywhere. On a Redis Cluster without segment locks, as an intent and per-slot
 * steps (the store's adjust: segments/redis/adjust.h): one adjust
 * of a SKU at a time, and one whose process died is finished by the next. INV_OK,
 * INV_UNKNOWN_SKU, INV_INVALID (also when the initial stock would pass SKU_STOCK_MAX:
 * checked in the script, exactly), INV_REQUEST_CONFLICT, INV_BUSY (the locks, or on a
 * cluster the SKU's turn, were not had within lock_wait_ms), INV_UNAVAILABLE,
 * INV_NOT_REPLICATED (durability replicated: no replica confirmed it, or on a cluster one
 * of its steps; the retry under the same request id finishes it exactly once). */
inv_status sku_restock(inv_conn *c, const char *sku, long long qty, const char *rid);

/* Even the remaining stock out over the segments, under every segment's lock taken
 * in index order. Same statuses as sku_restock. */
inv_status sku_rebalance(inv_conn *c, const char *sku, const char *rid);

/* The automatic rebalance: as sku_rebalance, but only when evening out would leave
 * stock in more segments than now; otherwise nothing changes (still INV_OK). The
 * sweeper's on a Redis Cluster: the store's adjust on c's own loop and store (c->base,
 * c->st: the caller's, made before), waited for (skuadjust.c). */
inv_status sku_spread(inv_conn *c, const char *sku);

/* Delete `sku` and all its keys and order records. INV_OK, INV_UNKNOWN_SKU,
 * INV_REQUEST_CONFLICT, INV_BUSY, INV_UNAVAILABLE, INV_NOT_REPLICATED. */
inv_status sku_delete(inv_conn *c, const char *sku, const char *rid);

/* All SKU names, sorted. On INV_OK *names is a malloc'd array of *n malloc'd
 * strings; free with sku_list_free. */
inv_status sku_list(inv_conn *c, char ***names, size_t *n);
void sku_list_free(char **names, size_t n);

/* One page of that list: at most `limit` (>= 1) names, sorted, of those greater than
 * `after` ("" from the start); *more says whether any come after the page. Free as
 * sku_list's. Each page reads the whole set (SMEMBERS) and sorts it: see
 * docs/DESIGN.md, "Listing SKUs". */
inv_status sku_list_page(inv_conn *c, const char *after, size_t limit, char ***names,
                         size_t *n, bool *more);

#endif
