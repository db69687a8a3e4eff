/* store.h -- the PostgreSQL stock store's operations (pgs_*): the schema, SKUs, and the
 * four ways to deduct, each an asynchronous call on a pgc connection (conn.h) answered
 * with C values.
 *
 * Schema (created and upgraded by pgs_migrate, schema.c; a database of its own):
 *   schema_version(version)                      the last migration applied
 *   skus(sku PK, segments, initial, mode, lock, hold_ms, epoch)   a SKU's settings
 *   segments(sku, seg, stock >= 0, version, lease_token, lease_until, fence, svc_fence)
 *                                                 PK (sku, seg): one row per segment
 *   orders(order_id PK, sku, seg, qty > 0, record, created_at)    one row per sale
 * The CHECK (stock >= 0) is the last word on overselling, whatever a caller does; the
 * primary key of orders makes an order id sell at most once (a replay: PGS_EXISTS).
 * Every deduction writes its order row in the same transaction.
 *
 * Schemes. `row`: the transaction is the lock (pgs_row_take opens it, pgs_row_deduct
 * commits it, pgs_row_release rolls it back); a holder frozen past the session's
 * idle_in_transaction_session_timeout loses its session, its row lock and its late
 * COMMIT. `lease`: a token and an expiry on the segment row (pgs_lease_*), the
 * deduction conditional on both, PostgreSQL's now() the only clock. `optimistic`:
 * read stock and version (pgs_opt_read), deduct if the version is unchanged
 * (pgs_opt_deduct). `atomic`: one conditional UPDATE (pgs_atomic_deduct).
 *
 * Answers. Every callback runs once, on the connection's loop, never inside the
 * call. rc 0 with `r->code` (PGS_*); rc -1 when there was no answer or an error the
 * store does not expect: the outcome is unknown (an order id makes a retry safe).
 * `r` and what it points to are valid during the callback only.
 */
#ifndef SEG_POSTGRES_STORE_H
#define SEG_POSTGRES_STORE_H

#include "segments/postgres/conn.h"

enum pgs_code {
    PGS_OK = 0,       /* done */
    PGS_SHORT = 1,    /* not enough stock (stock: what there is) */
    PGS_BUSY = 2,     /* row: locked by another; lease: leased by another */
    PGS_CONFLICT = 3, /* optimistic: the version moved (a lost race) */
    PGS_FENCED = 4,   /* lease: not ours or expired; nothing written */
    PGS_EXISTS = 5,   /* the order id has a row already; nothing written */
    PGS_NOSKU = 6,    /* no such SKU or segment */
};

struct pgs_res {
    int code;
    int seg;                /* the segment (row take with seg -1: the one found) */
    long long stock;        /* left after OK, else as read */
    long long version;      /* optimistic: the segment's version */
    long long fence;        /* lease: the fencing number of this lease */
    unsigned long long txn; /* row take OK: the open transaction */
};

typedef void (*pgs_fn)(void *arg, int rc, const struct pgs_res *r);
/* stocks[0..n-1]; n 0 when the SKU does not exist */
typedef void (*pgs_stocks_fn)(void *arg, int rc, int n, const long long *stocks);

struct pgs_order {
    const char *id, *sku, *record;
    int seg;
    long long qty;
};
/* o NULL: no such order */
typedef void (*pgs_order_fn)(void *arg, int rc, const struct pgs_order *o);

/* The code name for logs ("OK", "SHORT", ...). */
const char *pgs_code_name(int code);
/* The code of a failed statement's SQLSTATE, or -1 when the store does not expect it. */
int pgs_code_of_error(const PGresult *res);

/* ---- schema (schema.c) ---------------------------------------------------------- */

/* The latest schema version this build knows. */
int pgs_schema_latest(void);
/* Create or upgrade the schema in one transaction, serialized between instances by an
 * advisory lock: r->version = the version now. rc -1 also when the database's schema
 * is newer than this build's (nothing is changed then). */
void pgs_migrate(pgc_conn *c, pgs_fn fn, void *arg);

/* ---- SKUs and reads ------------------------------------------------------------- */

/* Create or reset SKU `sku`: its settings row, `segments` segment rows sharing
 * `initial` (the first initial % segments get one more), its old segments and order
 * rows gone; epoch + 1. One transaction. */
void pgs_sku_put(pgc_conn *c, const char *sku, long long initial, int segments,
                 const char *mode, const char *lock, int hold_ms, pgs_fn fn, void *arg);
void pgs_stocks_read(pgc_conn *c, const char *sku, pgs_stocks_fn fn, void *arg);
void pgs_order_read(pgc_conn *c, const char *id, pgs_order_fn fn, void *arg);

/* ---- row: the transaction is the lock ------------------------------------------- */

/* Open a transaction and lock segment `seg` of `sku` (FOR UPDATE NOWAIT: BUSY when
 * another holds it), or with seg -1 the first segment with stock >= qty that nobody
 * holds (FOR UPDATE SKIP LOCKED; SHORT when none). OK: r->txn, r->seg, r->stock; the
 * connection is the holder's until pgs_row_deduct or pgs_row_release. Any other code
 * ends the transaction. */
void pgs_row_take(pgc_conn *c, const char *sku, int seg, long long qty, pgs_fn fn,
                  void *arg);
/* Deduct `qty` from the held segment, write the order row, COMMIT. OK (r->stock left),
 * SHORT, EXISTS; rc -1 when the transaction was lost (its session ended: nothing was
 * written). The transaction is over in every case. */
void pgs_row_deduct(pgc_conn *c, unsigned long long txn, const char *sku, int seg,
                    const char *id, long long qty, const char *record, pgs_fn fn,
                    void *arg);
/* pgs_row_deduct, then the lock kept for the holder's next order: COMMIT, BEGIN and
 * the row locked again (NOWAIT) in the same call, so another holder can only take the
 * row in the microseconds between. OK with r->txn = txn when it was locked again (the
 * transaction goes on: the next pgs_row_deduct(_keep) or pgs_row_release), 0 when
 * not (the sale stands; the transaction is over). Other answers as pgs_row_deduct. */
void pgs_row_deduct_keep(pgc_conn *c, unsigned long long txn, const char *sku, int seg,
                         const char *id, long long qty, const char *record, pgs_fn fn,
                         void *arg);
/* Roll back: the lock is given up. fn may be NULL. */
void pgs_row_release(pgc_conn *c, unsigned long long txn, pgs_fn fn, void *arg);

/* The row scheme with no hold: the segment's row lock taken NOWAIT (BUSY when another
 * holds it), the deduction and the order row, in one statement (one implicit
 * transaction: the lock is held for the statement alone). OK, SHORT, BUSY, EXISTS. */
void pgs_row_deduct_now(pgc_conn *c, const char *sku, int seg, const char *id,
                        long long qty, const char *record, pgs_fn fn, void *arg);

/* ---- lease: a token and an expiry on the row ------------------------------------ */

/* Take segment `seg` for `token` for ttl_ms (from the server's now()), when its lease
 * is free, expired or already this token's: OK (r->stock, r->fence: one more than the
 * previous lease's) or BUSY. */
void pgs_lease_take(pgc_conn *c, const char *sku, int seg, const char *token, int ttl_ms,
                    pgs_fn fn, void *arg);
/* Extend our unexpired lease to ttl_ms from now: OK or FENCED. */
void pgs_lease_renew(pgc_conn *c, const char *sku, int seg, const char *token, int ttl_ms,
                     pgs_fn fn, void *arg);
/* Deduct under the lease, with the order row, in one statement: OK, SHORT, FENCED
 * (not our lease, or expired: nothing written), EXISTS. `keep`: an OK leaves the
 * lease held, else it is released with the deduction; any other code leaves the
 * lease as it was (the holder releases it). */
void pgs_lease_deduct(pgc_conn *c, const char *sku, int seg, const char *token,
                      const char *id, long long qty, const char *record, int keep,
                      pgs_fn fn, void *arg);
/* Give our lease up: OK, or FENCED when it is not ours (only the owner releases). */
void pgs_lease_release(pgc_conn *c, const char *sku, int seg, const char *token,
                       pgs_fn fn, void *arg);

/* ---- optimistic: a version column ----------------------------------------------- */

/* Read segment `seg`: OK with r->stock, r->version, or NOSKU. */
void pgs_opt_read(pgc_conn *c, const char *sku, int seg, pgs_fn fn, void *arg);
/* Deduct if the segment's version is still `version`, with the order row: OK
 * (r->stock, r->version: the new one), CONFLICT (the version moved: nothing written),
 * SHORT (unchanged and short), EXISTS. */
void pgs_opt_deduct(pgc_conn *c, const char *sku, int seg, long long version,
                    const char *id, long long qty, const char *record, pgs_fn fn,
                    void *arg);

/* ---- atomic: one conditional UPDATE --------------------------------------------- */

/* Deduct if stock >= qty, with the order row: OK (r->stock left), SHORT, EXISTS. */
void pgs_atomic_deduct(pgc_conn *c, const char *sku, int seg, const char *id,
                       long long qty, const char *record, pgs_fn fn, void *arg);

#endif
