/* engine.h -- the order path on an event loop: each order an explicit state machine,
 * every wait a timer, every store call asynchronous (segments/store.h).
 *
 * One engine per event loop, used from that loop's thread only: its own store handle
 * (a Redis connection), its own table of SKUs (ltab.h: settings, local claims, hints),
 * its own timers. An order lives and dies on one engine. The protocol is order.h's: the
 * scripts, the fencing, epochs and self-recognition.
 *
 * An order's states are `enum ord_state` (engine_internal.h, a comment each), its
 * transitions are one table with the whole state machine written out above it (ord.c),
 * and the files of the engine are split by concern (engine_internal.h lists them).
 */
#ifndef SEG_ENGINE_H
#define SEG_ENGINE_H

#include <event2/event.h>
#include <stdbool.h>

#include "segments/inventory.h"
#include "segments/order.h"
#include "segments/store.h"

typedef struct engine engine;

/* An engine on `base`, with its own Redis connection to v's Redis: the engine of
 * event loop `home` of `homes` in this process (ring.h: the segments its orders
 * visit first; 0 of 1 for a lone engine). */
engine *engine_create(inv *v, struct event_base *base, int home, int homes);
/* The same over store `st` (store.h; taken: engine_free frees it), made on `base`:
 * engine_create's is the store inv_store_create picks (Redis), a test's may be
 * another (tests/memstore.h). */
engine *engine_create_on(inv *v, struct event_base *base, int home, int homes, store *st);
/* An engine for admin adjusts (engine_adjust) on `base` over store `st`, borrowed
 * (the caller frees it after engine_free): a worker's private loop (inv_conn_store).
 * It opens no lock service's connection. */
engine *engine_create_admin(inv *v, struct event_base *base, store *st);
/* Free; no order may be in flight (engine_in_flight). NULL is fine. */
void engine_free(engine *e);

/* Called once per order with its result (res->record is the callee's to free, with
 * order_result_clear). */
typedef void (*engine_done_fn)(void *arg, struct order_result *res);

/* Place an order (`req`'s strings are copied). `fn` runs on the loop, later, never
 * from inside this call. */
void engine_order(engine *e, const struct order_request *req, engine_done_fn fn,
                  void *arg);

/* An admin restock or rebalance of `sku` (a valid name) on the order path's own code
 * (spread.c): the settings read (VIEW), every segment's store lock taken in index order
 * by multi.c's routine (claimed on this loop, waited for until lock_wait_ms, renewed
 * by lease.c while held), then the store's ADJUST `op` with `add`, `limit`, `rid` and
 * `sig` (store.h), which releases them; a STALE answer reads the settings again (503
 * busy after 4). A lock service's SKU takes the store's locks too, as the blocking
 * path always did (the ADJUST is fenced by their tokens). `unlocked` (a store whose
 * admin table serializes an adjust itself, admin.h without ADMIN_CAP_LOCKS:
 * PostgreSQL; a store without STORE_CAP_MULTI_ONE, whose ADJUST is steps over its
 * nodes: a Redis Cluster, set here): no lock is taken, the ADJUST goes without tokens
 * (a cluster's: durability "replicated" waiting half the Redis timeout per step). `fn`
 * gets res->status INV_OK once the store answered (a->code, a->gen, a->view filled), else
 * why not (INV_BUSY: the locks not had in time; INV_UNKNOWN_SKU; INV_UNAVAILABLE: no
 * answer, a->code -1 when the ADJUST itself went unanswered). `a` is the caller's, read
 * and written until fn; not counted as an order. */
struct sku_view;
struct engine_adjust {
    const char *op; /* "restock", "rebalance" */
    long long add, limit;
    const char *rid, *sig;
    bool unlocked;
    int code;      /* out: the store's code (STORE_*, admin.h ADMIN_*); -2 unsent */
    long long gen; /* out: OK, the new generation */
    struct sku_view *view; /* out: the settings the ADJUST ran under (skutab.h) */
};
void engine_adjust(engine *e, const char *sku, struct engine_adjust *a, engine_done_fn fn,
                   void *arg);

/* The cancel of order `id` (a valid name) on the order path's own code (spread.c):
 * the settings of `sku` read (VIEW), the store's lock of each of the record's
 * segments seg[0..n-1] (ascending, distinct) taken in that order by multi.c's routine
 * whatever the SKU's mode and lock scheme, as the blocking path always took them
 * (claimed on this loop, waited for until lock_wait_ms, renewed by lease.c while
 * held), then the store's CANCEL of `expected` into `cancelled` with those tokens
 * (store.h cancel; durability "replicated": waiting half the Redis timeout), which
 * releases them. `fn` gets res->status INV_OK once the store answered (x->code,
 * x->applied, x->record filled; a STALE is the caller's to read again), else why not
 * (INV_BUSY: the locks not had in time; INV_UNKNOWN_SKU; INV_UNAVAILABLE: no answer,
 * x->code -1 when the CANCEL itself went unanswered). `x` is the caller's, read and
 * written until fn; not counted as an order. */
struct engine_cancel {
    const char *id, *expected, *cancelled;
    int n; /* the record's parts: segments seg[], units part[] */
    const int *seg;
    const long long *part;
    int code;     /* out: the store's code (STORE_*); -1 no answer, -2 unsent */
    bool applied; /* out: OK, or NOT_REPLICATED after this call cancelled it */
    char *record; /* out: EXISTS, the record cancelled already (malloc'd: the caller's) */
};
void engine_cancel(engine *e, const char *sku, struct engine_cancel *x, engine_done_fn fn,
                   void *arg);

/* The engine of worker connection `c` for its admin writes (engine_adjust,
 * engine_cancel): an engine_create_admin on c's own loop over its store and c's SKU
 * table (ltab.h ltab_of_conn: the settings its blocking callers read), made on first
 * use, freed with c (internal.h inv_conn.eng). */
engine *engine_of_conn(inv_conn *c);

/* The last failure of the engine's Redis connection, for error details. */
const char *engine_error(const engine *e);

/* Orders started and not yet answered. */
int engine_in_flight(const engine *e);

/* The sold-out fast path: true when this loop knows `sku` is sold out now (counted
 * as an order outcome), without Redis. */
bool engine_sold_out_fast(engine *e, const char *sku);

/* Drop the cached settings of `sku` on this loop (after an admin write). */
void engine_invalidate(engine *e, const char *sku);

/* The engine's Redis connection's pipeline figures. */
void engine_pipeline(const engine *e, long long *commands, long long *writes);

#endif
