/* holds.h -- reservations on the PostgreSQL store (pgh_*; docs/DESIGN.md
 * "Reservations"): each step one statement, a call of a PL/pgSQL function of the
 * schema's migration 3 (holds_sql.c), so one transaction on the server: the place
 * (inv_hold_place), confirm/release/read by id (inv_hold_step), the sweep
 * (inv_holds_sweep). The same statements and decoders serve the event loops' store
 * (store.h's hold_place_any, hold_by_id: pgh_place_any, pgh_by_id) and the blocking
 * admin table (postgres/admin.c), so each protocol is written once.
 *
 * Schema: holds(hold_id PK, sku, seg, epoch, qty, expires_at, state, attempt,
 * confirmed_by, created_at); state 'held' | 'confirmed' | 'released' | 'expired' |
 * 'void' (a reset's, or one that met its SKU deleted); migration 5 adds part_segs,
 * part_qtys: a hold over several segments (taken, sold, returned all at once) lists
 * its parts there by segment (seg = the first, qty = their sum); NULL for one. Units
 * of 'held' rows are their segments' reserved: per segment, stock + reserved + sold =
 * initial. A confirmed
 * hold's order row is written in the same transaction (order_id = the hold's id, the
 * record as hold.lua writes it).
 *
 * Clock: PostgreSQL's now() of the step's transaction alone; expires_at is now() at
 * the place, truncated to the millisecond, + ttl; expired from then on.
 *
 * Locks: the place respects the SKU's scheme -- a `row` segment whose row a holder's
 * transaction locks, or a `lease` segment under an unexpired lease, is BUSY (passed
 * by); `optimistic` and mode atomic wait for the row, and every change of stock bumps
 * the segment's version, so an optimistic holder that read it loses its deduction.
 * Releases and expiries bump the SKU's gen (stock rose from outside the order path).
 */
#ifndef SEG_POSTGRES_HOLDS_H
#define SEG_POSTGRES_HOLDS_H

#include <libpq-fe.h>

#include "segments/postgres/conn.h"
#include "segments/store.h"

/* Migration 3's statements, NULL-terminated (schema.c). */
extern const char *const pgh_schema[];
/* Migration 4's (holds_parts_sql.c): holds over several segments. */
extern const char *const pgh_schema_parts[];

/* A step's statement and the text of its parameters (filled by the *_stmt calls;
 * valid while the struct is). */
struct pgh_stmt {
    struct pgc_stmt st;
    const char *p[6];
    char num[4][24];
};

void pgh_place_stmt(struct pgh_stmt *q, const char *sku, const char *id, long long qty,
                    int ttl_ms, int start, const char *attempt);
void pgh_step_stmt(struct pgh_stmt *q, const char *id, enum store_hold_action act,
                   const char *attempt);
void pgh_sweep_stmt(struct pgh_stmt *q, int limit);

/* A place's or step's result: out->code (STORE_* or ADMIN_CONFLICT), out->value (the
 * segment's stock; a place refused BUSY or SHORT: the stock of the segments walked),
 * h filled (h->record malloc'd when the step returned one, h->parts for a hold of
 * several segments). 0, or -1 when r is not
 * such a result. */
int pgh_decode(const PGresult *r, struct store_reply *out, struct store_hold *h);
/* The holds a sweep settled, or -1. */
int pgh_decode_sweep(const PGresult *r);

/* store.h's hold_place_any and hold_by_id on a PostgreSQL store's handle (backend.c). */
void pgh_place_any(store *st, const char *sku, const char *id, long long qty, int ttl_ms,
                   int start, const char *attempt, store_hold_fn fn, void *arg);
void pgh_by_id(store *st, const char *id, enum store_hold_action act, const char *attempt,
               store_hold_fn fn, void *arg);

#endif
