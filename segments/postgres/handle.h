/* handle.h -- the PostgreSQL store's handle, shared by its files (backend.c, the ops;
 * multi.c, the deduction over several segments; batch.c, group commit; spread.c, the
 * adjust on the loop, adjust.c, an admin's; cancel.c, the cancel of an order; handle.c,
 * its small tables): private to segments/postgres/.
 *
 * A handle lives on one loop (store.h). It remembers each SKU's lock scheme as its
 * last meta_read said (`known`), and the locks it holds by token (`held`): a `row`
 * transaction open across a hold, or the version an `optimistic` acquire read.
 */
#ifndef SEG_POSTGRES_HANDLE_H
#define SEG_POSTGRES_HANDLE_H

#include <stdbool.h>

#include "segments/postgres/pool.h"
#include "segments/postgres/store.h"
#include "segments/store.h"

enum scheme { SCHEME_ROW, SCHEME_LEASE, SCHEME_OPT };

struct known { /* a SKU's lock scheme, as its last meta_read said */
    struct known *next;
    enum scheme scheme;
    char sku[];
};

struct held { /* a lock this handle holds by token: row (its transaction), optimistic
                 (the version it read) */
    struct held *next;
    enum scheme scheme;
    pgc_conn *c;
    unsigned long long txn;
    long long version;
    long long at_ms; /* when it was taken: one left behind is dropped (held_add) */
    char token[48];
};

struct pg_store {
    struct store base; /* first */
    struct event_base *ev;
    pgc_conn *plain; /* every call outside a `row` hold: one connection, in order
                        (pgb_opts.shared: the pool's one, not owned) */
    bool shared;
    pgp_pool *pool; /* the transactions of `row` holds */
    struct known *known;
    struct held *held;
    struct call *ending; /* row deductions that end their transaction, unanswered */
    int ttl_ms;
};

struct call { /* what a statement's answer is for */
    struct pg_store *s;
    union {
        store_meta_fn meta;
        store_record_fn record;
        store_stocks_fn stocks;
        store_found_fn found;
        store_reply_fn reply;
        store_int_fn num;
        store_multi_fn multi;
    } fn;
    void *arg;
    char sku[STORE_SKU_PLACED_MAX];
    char id[SEG_NAME_MAX + 1];
    char token[48];
    char *record;
    pgc_conn *c;           /* row: the connection of the transaction being opened */
    struct call *end_next; /* in pg_store.ending */
    struct call *then;     /* a row hold of the same row, opened once this is answered */
    int seg, n;
    long long qty, epoch;
    bool keep;
    enum scheme scheme;
    long long *part;
    char **tok;
};

/* The scheme of `sku` (row when not known); set from a SKU's "lock"; forgotten. */
enum scheme pgb_scheme_of(struct pg_store *s, const char *sku);
void pgb_scheme_set(struct pg_store *s, const char *sku, const char *lock);
void pgb_scheme_forget(struct pg_store *s, const char *sku);
/* The lock held by `token`, taken out of the list when `unlink` (the caller frees). */
struct held *pgb_held_find(struct pg_store *s, const char *token, bool unlink);
/* A new entry (those left behind past 2 x ttl dropped first). */
struct held *pgb_held_add(struct pg_store *s, const char *token, enum scheme sc);
/* Both lists freed (the connections are gone already: their transactions with them). */
void pgb_tables_free(struct pg_store *s);

struct call *pgb_call_new(struct pg_store *s, void *arg, const char *sku);
void pgb_call_free(struct call *k);
/* A cell as a number (NULL: -1); every result of a call OK. */
long long pgb_cell(const PGresult *r, int row, int col);
/* The bigint[] literal {1,2,3} of v[0..n-1], or of iv[0..n-1] when v is NULL.
 * Malloc'd; the caller frees it. */
char *pgb_array_ll(const long long *v, const int *iv, int n);
bool pgb_results_ok(int rc, PGresult *const *res, int n);

/* "spread" and "rebalance" on the loop under the caller's locks (spread.c); store_ops
 * .adjust without tokens is an admin's restock or rebalance (adjust.c): backend.c
 * chooses. */
void pgb_adjust(store *st, const char *sku, long long epoch, int segments,
                const char *const *tok, const long long *fence, const char *op,
                long long add, long long limit, const char *rid, const char *sig,
                store_reply_fn fn, void *arg);
/* An admin's "restock" (`add` units, refused ADMIN_LIMIT when the SKU's initial is
 * past `limit`) or "rebalance" of `sku` as `epoch` and `segments` say (else STALE),
 * under request id `rid` with signature `sig` (NULL or "": none; the same id again:
 * ADMIN_REPLAYED, another write's: ADMIN_CONFLICT), in one transaction on a pool
 * connection that locks the SKU's row and its segments' rows, as the admin table's
 * adjust did; no lease or fence is checked or taken. OK's value: the new gen (0: a
 * rebalance that moved nothing). */
void pgb_admin_adjust(store *st, const char *sku, long long epoch, int segments,
                      const char *op, long long add, long long limit, const char *rid,
                      const char *sig, store_reply_fn fn, void *arg);
/* store_ops.reset (reset.c): create, replace or delete `sku` as the admin table's
 * reset did, in one transaction on a pool connection: the request id recorded
 * (REPLAYED, CONFLICT), the SKU's row locked FOR UPDATE, to->expect and `old_epoch`
 * checked (EXISTS, ADMIN_MISMATCH, STALE, MISSING), then the row, its segments and
 * its orders rewritten. OK's value: 1 when it created the SKU. */
void pgb_reset(store *st, const char *sku, long long old_epoch, int old_segments,
               const struct store_reset *to, const char *rid, const char *sig,
               store_reply_fn fn, void *arg);
/* store_ops.cancel (cancel.c). */
void pgb_cancel(store *st, const char *placed, long long epoch, const char *id,
                const char *cancelled, const char *expected, const struct store_parts *p,
                int wait_ms, store_reply_fn fn, void *arg);
/* store_ops.deduct_multi (multi.c). */
void pgb_deduct_multi(store *st, const char *sku, long long epoch, const char *id,
                      const char *record, const char *attempt,
                      const struct store_parts *p, store_multi_fn fn, void *arg);

/* store_ops.deduct_batch (batch.c). */
bool pgb_deduct_batch(store *st, const char *sku, long long epoch, int i,
                      const char *token, long long fence, int n,
                      const struct store_batch_order *b, store_batch_fn fn, void *arg);

#endif
