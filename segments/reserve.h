/* reserve.h -- reservations: units held for a while, then confirmed into an order,
 * released, or given back by themselves when they expire (docs/DESIGN.md
 * "Reservations").
 *
 * A hold takes its units from one segment, under that segment's lock as an order
 * does (the store's step refuses while another holds it: BUSY, and the next segment
 * is tried, then again until lock_wait_ms), falling through segments that hold too
 * little. The hold is a record in the "held" state on that segment, so confirm,
 * release and expiry are each one atomic step of the store on that segment. Expiry is
 * the store's clock (Redis TIME, PostgreSQL now()), never this process's: a confirm at or
 * after expires_ms is refused in the step that would sell, and settles the hold. Nothing
 * lives in process memory: a hold whose instance died still expires (the step that
 * meets it, or any instance's sweeper, holdsweep.h, gives its units back).
 *
 * Invariant per segment and per SKU: remaining + reserved + sold = initial.
 * Ids: a reservation id is a valid name; it becomes the order id on confirm. The same
 * id again for the same SKU and qty is the same hold (RESV_REPLAYED), else
 * RESV_CONFLICT. Blocking: runs on a pool worker's inv_conn.
 */
#ifndef SEG_RESERVE_H
#define SEG_RESERVE_H

#include "segments/admin.h"
#include "segments/engine.h"
#include "segments/inventory.h"

#define RESV_TTL_MAX_S 86400 /* a hold lasts at most a day */

typedef enum resv_status {
    RESV_OK,           /* done (a hold placed, an order made, a hold released) */
    RESV_REPLAYED,     /* the same request again: as it stands */
    RESV_SOLD_OUT,     /* every segment empty */
    RESV_INSUFFICIENT, /* no one segment holds qty (a hold takes one segment) */
    RESV_UNKNOWN_SKU,
    RESV_NOT_FOUND,   /* no such reservation */
    RESV_CONFLICT,    /* the id is another reservation's or an order's */
    RESV_BUSY,        /* no segment lock within lock_wait_ms */
    RESV_UNAVAILABLE, /* the store did not answer: outcome unknown, retry with the id */
    RESV_INVALID,
    RESV_EXPIRED,     /* confirm: the hold expired (its units are back), nothing sold */
    RESV_RELEASED,    /* confirm: the hold was released */
    RESV_CONFIRMED,   /* release: the hold is an order (cancel the order instead) */
    RESV_GONE,        /* the SKU was reset or deleted since: the hold is void */
    RESV_UNSUPPORTED, /* the store, or the SKU's lock service, has no reservations */
    RESV_NOT_REPLICATED, /* durability replicated: no replica confirmed it in time */
} resv_status;

struct resv_request {
    const char *sku; /* valid name */
    long long qty;   /* 1..ORDER_QTY_MAX */
    long long ttl_s; /* 1..RESV_TTL_MAX_S */
    const char *id;  /* valid name, or NULL/"": one is made */
};

/* On a blocking connection: each fills *h from the store (h->record, when set,
 * malloc'd: resv_clear). The place and the confirm run on the event loops (below). */
resv_status resv_release(inv_conn *c, const char *id, struct store_hold *h);
resv_status resv_get(inv_conn *c, const char *id, struct store_hold *h);
void resv_clear(struct store_hold *h);

/* The status of a reservation's step that answered `code` (a STORE_* or ADMIN_* code;
 * h->state says which refusal). */
resv_status resv_step_status(const struct store_hold *h, int code);

/* ---- on an event loop (reserve_loop.c) ----
 * The place and the confirm without blocking, on engine e's loop and its store (one
 * call each, pipelined with the loop's orders; a busy walk tried again from a timer).
 * `done` runs once, on the loop, never inside the start call: the status, the id, and
 * the hold (done may take h->record, setting it NULL). Each counts in the engine's
 * in-flight work, so a stopping loop waits for it. A confirm that finds the id's
 * claim held (a Redis Cluster: another confirm, an order with the id) is tried again
 * from a timer until lock_wait_ms. Only where resv_loop_supported (Redis, standalone
 * or a cluster; PostgreSQL). */
typedef void (*resv_done_fn)(void *arg, resv_status s, const char *id,
                             struct store_hold *h);
bool resv_loop_supported(engine *e);
/* rq already validated (api/parse.c). */
void resv_place_start(engine *e, const struct resv_request *rq, resv_done_fn done,
                      void *arg);
void resv_confirm_start(engine *e, const char *id, resv_done_fn done, void *arg);

/* Short stable name of a status ("reservation_expired", ...). */
const char *resv_status_name(resv_status s);

#endif
