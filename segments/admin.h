/* admin.h -- the blocking admin seam: one table of blocking operations per worker
 * connection (`struct admin_ops`), for the calls that do not run on an event loop:
 * GET sku with its segment arrays, the list of SKUs, order lookup. (A cancel, a
 * restock or rebalance run on the engine's code on the connection's own loop: engine.h
 * engine_cancel, engine_adjust; a create, reset or delete is the store's `reset` on
 * that loop: store.h.)
 *
 * A step, not the end (docs/DESIGN.md "Admin operations"): issue 22 wants these on
 * the asynchronous table of store.h; until then each store fills this table too
 * (Redis: segments/redis/admin.c over today's rd_* calls, unchanged; PostgreSQL:
 * segments/postgres/admin.c, blocking libpq). The table is chosen at one place
 * (segments/inventory.c inv_conn_create) and the callers (sku.c, skuadjust.c,
 * order.c, skutab.c) know no store.
 *
 * Results. Every call returns -1 when the store gave no usable answer (`error` says
 * why), otherwise what it documents; writes fill a `struct store_reply` whose code is
 * a STORE_* code or one of the ADMIN_* codes below (Redis's RD_* numbers). A reply's
 * record is malloc'd: admin_reply_clear. Thread: a handle belongs to one thread at a
 * time, as the inv_conn that holds it.
 */
#ifndef SEG_ADMIN_H
#define SEG_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "segments/store.h"

/* Codes beyond store.h's (the same numbers as calls.h's RD_*). */
#define ADMIN_CONFLICT 7        /* the request id was used for another write */
#define ADMIN_LIMIT 8           /* a restock would pass the stock limit */
#define ADMIN_REPLAYED 9        /* the request id was applied already */
#define ADMIN_NOT_REPLICATED 10 /* a step reached no replica in time */
#define ADMIN_MISMATCH 11       /* a reset: the SKU is not the version named */

/* Capabilities (admin_ops.caps). */
/* A restock or rebalance wants the caller to hold every segment's store lock and
 * pass the tokens (a standalone Redis); without it the store serializes it itself
 * (PostgreSQL: its loop's adjust without tokens; a Redis Cluster: its loop's adjust in
 * steps, without locks). Either way it runs on the engine, on the connection's own
 * loop (engine.h engine_adjust). (A cancel always takes the store's locks of its
 * segments: engine.h engine_cancel.) */
#define ADMIN_CAP_LOCKS 0x1u
/* The store is a Redis Cluster (steps, WAITs per node; calls.h). */
#define ADMIN_CAP_CLUSTER 0x2u
/* The store keeps a SKU's "batch" and its order path sells in batches
 * (store.h STORE_CAP_BATCH); without it a put with batch > 1 is refused (400). */
#define ADMIN_CAP_BATCH 0x4u

typedef struct admin admin;

struct admin_ops {
    const char *name;
    unsigned (*caps)(admin *a);
    void (*free)(admin *a);
    const char *(*error)(const admin *a);
    /* The lock schemes a SKU may name ("lock"), NULL-terminated; the first is the
     * default. */
    const char *const *locks;
    int (*ping)(admin *a);
    /* 1 found (m), 0 no such SKU, -1. m->lock: the SKU's lock scheme. */
    int (*meta_read)(admin *a, const char *sku, struct store_meta *m, char lock[16]);
    /* 1 with *record (malloc'd), 0 none, -1. */
    int (*record_read)(admin *a, const char *id, char **record);
    /* The SKU view's numbers of segments 0..n-1 of `placed` of `epoch`: stock[i],
     * sold[i], orders[i], locked[i] and reserved[i] (units held by reservations of
     * that epoch; 0 on a store without them), all from one consistent read, so that
     * stock + reserved + sold never mixes two moments (a hold settled between two
     * reads): one script on a standalone Redis (one per segment on a cluster, whose
     * segments live in other slots), one statement on PostgreSQL. When `meta` is not
     * NULL, a store that can also reads the settings of `sku` in that same read: 1
     * (*meta: the settings of that instant; the caller checks its epoch, salt and
     * segments are those `placed`, `n` and `epoch` came from), 2 (no such SKU then);
     * a store that cannot (a cluster, whose meta lives in another slot) answers 0
     * and leaves *meta alone. -1: no usable answer. */
    int (*segments_read)(admin *a, const char *sku, const char *placed, int n,
                         long long epoch, long long *stock, long long *sold,
                         long long *orders, bool *locked, long long *reserved,
                         struct store_meta *meta);
    /* Where segment i lives (calls.h rd_segment_place): 0 or -1. */
    int (*segment_place)(admin *a, const char *placed, int i, int *slot, char *node,
                         size_t len);
    int (*skus_list)(admin *a, char ***names, size_t *n);
    /* calls.h rd_wait: the same contract. (A restock or rebalance runs on the engine,
     * engine.h engine_adjust; a create, reset or delete on the store, store.h reset.) */
    int (*wait)(admin *a, const char *placed, int n, const int *seg, const char *id,
                const char *sku, int timeout_ms);

    /* ---- reservations (NULL: the store has none yet) ----
     * hold_by_id: reservation `id` found by its index and one step run on its hold:
     * confirm (the order record built by the store as record.h's, written under
     * `attempt`), release, or read; an expired hold is settled first. h filled from the
     * index. out->code OK (h->state after; confirm: h->record), EXISTS (confirm:
     * confirmed earlier, h->record), ADMIN_CONFLICT (h->state says why: confirm of a
     * released or expired hold, "order" when another order has the id; release of a
     * confirmed one), MISSING, STALE (the SKU was reset or deleted: the hold is void),
     * BUSY (a release whose wait for its segment ran out: nothing done). The place is on
     * the event loops only (store.h's hold_place_any). */
    int (*hold_by_id)(admin *a, const char *id, enum store_hold_action act,
                      const char *attempt, struct store_reply *out, struct store_hold *h);
    /* Settle the expired holds of up to `limit` segments whose first hold is due:
     * *settled holds given back. 0 or -1. */
    int (*holds_sweep)(admin *a, int limit, int *settled);
};

/* A store's handle begins with this. */
struct admin {
    const struct admin_ops *ops;
};

#define ADMIN_CALL(a, op, ...) ((a)->ops->op((a), __VA_ARGS__))
#define ADMIN_CALL0(a, op) ((a)->ops->op((a)))

static inline void admin_reply_clear(struct store_reply *r)
{
    free(r->record);
    free(r->plan);
    r->record = r->plan = NULL;
}

#endif
