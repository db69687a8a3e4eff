/* events.h -- the ledger's events on the PostgreSQL store (pgev_*): migration 7, the
 * table every store write appends its event to, and the sink's blocking reads of it.
 *
 * Schema (pgev_schema). `skus.ledger` (the SKU's ledger flag: a create or reset by a
 * service with a ledger sets it, one without clears it, admin.h store_reset.ledger)
 * and `segments.ledger` (the same, copied onto each segment row the reset makes, so
 * that a SKU without a ledger costs its writes nothing: the triggers' WHEN reads it),
 * and `events`: id bigserial (the event id: the ledger's entry, unique), sku, seg,
 * epoch, kind, order_id, d_stock, d_sold, record, at. Two AFTER ROW triggers append
 * the events, in the statement that makes the change, so in its transaction: no
 * change without its event, none without its change, whichever statement of the store
 * (deductions of every scheme, batches, multi-segment orders, the lock services'
 * functions, holds, cancels, admin writes, the spread) made it:
 *   segments  INSERT (a reset): "reset", d_stock = the new row's stock, in the new
 *             epoch; UPDATE of stock: d_stock = new - old, kind the transaction's
 *             `inv.event` setting (admin.c sets "restock" / "rebalance" / "spread";
 *             spread.c "spread") or "stock" (a sale's, a hold's, a cancel's units)
 *   orders    INSERT: "sale", the order id, d_sold = qty, its record; UPDATE of the
 *             record to cancelled: "cancel", d_sold = -qty, the new record
 * Deletes (a reset, a delete) write none: the epoch moves, and the ledger's counts
 * are per epoch. Events are written only while the SKU's flag is set; an order row's
 * trigger runs only in a session of a service with a ledger (`-c inv.ledger=on` at
 * connect, conn.h pgc_opts.ledger, admin.h pga_create), so every instance on one
 * store should agree on `ledger`, as on Redis.
 *
 * The sink (segments/ledger.c) takes a batch in a transaction (FOR UPDATE SKIP
 * LOCKED: several sinks take disjoint batches), copies it into the ledger
 * (postgres/ledger.h, unique by entry), then deletes it and commits. A sink that dies
 * between the two leaves the batch in the table (its transaction rolls back) and the
 * next copy of it changes nothing in the ledger.
 *
 * Errors: -1 with pgev_error set; the connection is dropped (its transaction rolled
 * back) and made again at the next call.
 */
#ifndef SEG_POSTGRES_EVENTS_H
#define SEG_POSTGRES_EVENTS_H

#include <stddef.h>

#include "base/names.h"

/* Migration 7's statements, NULL-terminated (schema.c). */
extern const char *const pgev_schema[];

typedef struct pgev pgev;

struct pgev_row {
    char entry[24]; /* the event id, as text */
    char sku[SEG_NAME_MAX + 1];
    int seg;
    long long epoch;
    char kind[16];
    char order[SEG_NAME_MAX + 1]; /* "" when none */
    long long d_stock, d_sold;
    char *record;    /* malloc'd, or NULL */
    long long at_ms; /* when it was written (wall ms) */
};

/* A handle on the store's `conninfo` (copied); connects at the first call. */
pgev *pgev_create(const char *conninfo);
void pgev_free(pgev *p);
const char *pgev_error(const pgev *p);

/* Open a transaction and take up to `max` events, oldest first, that no other
 * transaction holds (locked until pgev_done or pgev_abandon): 0 with *out (n rows,
 * malloc'd, NULL when none; grouped by sku and seg, each group in id order) or -1.
 * With n == 0 the transaction is over. */
int pgev_take(pgev *p, int max, struct pgev_row **out, int *n);
/* The events in the table, counted up to `cap` (a bound on the read), in the taken
 * batch's transaction: the count, or -1 (the transaction lost: rows stay). */
long long pgev_count(pgev *p, long long cap);
/* Delete the rows taken and commit: 0 or -1 (then they stay, for the next take). */
int pgev_done(pgev *p, const struct pgev_row *rows, int n);
/* Roll the taken rows back (they stay, unlocked). */
void pgev_abandon(pgev *p);
/* Free what pgev_take gave. */
void pgev_rows_free(struct pgev_row *rows, int n);

#endif
