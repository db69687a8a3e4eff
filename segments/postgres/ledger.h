/* ledger.h -- the order ledger in PostgreSQL (pgl_*): its schema, the copy of a batch
 * of events, and the reads the service answers from it. Blocking libpq, one
 * connection per handle, used by one thread at a time (the caller serialises).
 *
 * Schema `ledger` (made by pgl_connect when missing, under an advisory lock so that
 * several sinks may start at once):
 *   order_events  every event copied: (stream, entry) unique -- the Redis stream key
 *                 and its entry id -- sku, epoch, seg, kind, order_id, d_stock,
 *                 d_sold, record, copied_at
 *   movements     per SKU and epoch: stock and sold as the events add up, events
 *   orders        per (order_id, sku, epoch): qty (sold less given back), status
 *                 ("sold" | "cancelled"), the last record known, updated_at
 * Idempotent: an event whose (stream, entry) is there already changes nothing (ON
 * CONFLICT DO NOTHING), and movements and orders move only with a new row, in the
 * same statement; so two sinks copying one event, or one copying it twice after a
 * crash, count it once.
 *
 * Errors: -1 with pgl_error set; the connection is dropped and made again at the
 * next call.
 */
#ifndef SEG_POSTGRES_LEDGER_H
#define SEG_POSTGRES_LEDGER_H

#include <stddef.h>

typedef struct pgl pgl;

struct pgl_event {
    const char *entry; /* the stream entry id */
    const char *kind;  /* "sale", "cancel", "undo", "restock", ... */
    long long epoch;
    const char *order;  /* "" when none */
    long long d_stock;  /* change to the segment's stock */
    long long d_sold;   /* change to its sold count */
    const char *record; /* the order record (JSON), or NULL */
};

/* A handle on `conninfo` (copied); connects at the first call. */
pgl *pgl_create(const char *conninfo);
void pgl_free(pgl *p);
const char *pgl_error(const pgl *p);

/* Copy ev[0..n-1] of segment `seg` of `sku`, read from `stream`, in one transaction:
 * 0 (committed: each is in the ledger once) or -1 (rolled back). */
int pgl_copy(pgl *p, const char *stream, const char *sku, int seg,
             const struct pgl_event *ev, int n);

/* pgl_copy in two halves, so that the caller works while PostgreSQL does: send the
 * batch (0, or -1: nothing sent), then, before any other call on `p`, wait for its
 * outcome (as pgl_copy's). ev may be freed once pgl_copy_send returns. */
int pgl_copy_send(pgl *p, const char *stream, const char *sku, int seg,
                  const struct pgl_event *ev, int n);
int pgl_copy_wait(pgl *p);

/* The newest record of order `id`: 1 with *record (malloc'd), its SKU (into
 * sku[0..skulen)), epoch and whether it is cancelled; 0 none, -1. */
int pgl_order(pgl *p, const char *id, char **record, char *sku, size_t skulen,
              long long *epoch, int *cancelled);

/* The ledger's stock and sold of `sku` in `epoch`: 1, 0 (no event), -1. */
int pgl_counts(pgl *p, const char *sku, long long epoch, long long *stock,
               long long *sold, long long *events);

#endif
