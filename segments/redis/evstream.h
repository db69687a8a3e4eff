/* evstream.h -- the ledger's side of Redis (rd_ev_*): reading a segment's ledger
 * stream (keys.h inv:{sku:i}:events) through the consumer group "ledger", then
 * acknowledging and deleting what was copied, and the order records' TTL.
 *
 * Contract. The events are what the scripts append (scripts.c LEDGER): each names
 * its kind ("sale", "cancel", "undo", "restock", "rebalance", "spread", "take",
 * "give", "reset", "delete"), the SKU's epoch, the order id (sales, cancels, undos),
 * the change to the segment's stock and to its sold count, and for the first segment
 * of a sale or a cancel the record. Several readers share the group: an entry read
 * is pending with its reader until acknowledged; one pending longer than `idle_ms`
 * with another (a reader that died mid-batch) is taken over (XAUTOCLAIM). Whoever
 * copies an entry twice copies the same (stream, entry id): the ledger's unique key.
 * Every call is blocking on the caller's connection; -1 when Redis gave no usable
 * answer (rd_conn_error says why).
 */
#ifndef SEG_REDIS_EVSTREAM_H
#define SEG_REDIS_EVSTREAM_H

#include "segments/redis/calls.h"

struct rd_event {
    char id[48];   /* the stream entry id, "ms-seq" */
    char kind[16]; /* "" for an entry deleted meanwhile (skip it, ack it) */
    long long epoch;
    char order[SEG_NAME_MAX + 1]; /* "" when none */
    long long d_stock, d_sold;
    char *record; /* malloc'd, or NULL */
};

/* The name of segment i's stream (the ledger's key for its events): buf, which has
 * RD_EV_NAME_MAX bytes. */
#define RD_EV_NAME_MAX 160
const char *rd_ev_stream(char *buf, const char *placed, int i);

/* A segment the ledger's registry names (keys.h inv:ledger:{NNNNNN}): its stream has
 * events to copy, or may get some (its ledger flag is set). */
struct rd_ev_segment {
    char sku[SEG_NAME_MAX + 1];     /* the SKU's name */
    char placed[RD_SKU_PLACED_MAX]; /* as its keys are placed (rd_sku_placed) */
    int i;                          /* the segment */
    bool replicated;                /* durability "replicated" */
};

/* Every segment the registry names (a cluster: of every slot in its slot index), at
 * most `max`: 0 with *out (malloc'd, NULL when none) and *n, or -1. A segment is named
 * from the reset that sets its ledger flag until rd_ev_read finds its stream drained
 * and the flag gone, whatever happened to its SKU in between. */
int rd_ev_segments(rd_conn *c, int max, struct rd_ev_segment **out, int *n);

/* EV_ADOPT: segments 0..segments-1 of `placed`, each named in the registry of its
 * slot when its ledger flag is set and it is not named yet (a segment flagged before
 * the registry, or its entry lost); on a cluster their slots added to the slot index
 * first. How many were named now, or -1. */
int rd_ev_adopt(rd_conn *c, const char *placed, int segments, bool replicated);

/* Free what rd_ev_read gave. */
void rd_ev_free(struct rd_event *ev, int n);

/* Segment i of `placed` (rd_sku_placed): up to `max` entries for `consumer`: its own
 * pending ones first, else those of another reader idle for `idle_ms` (EV_READ), else
 * new ones (a plain XREADGROUP, when the stream has entries: a second call).
 * First drops the fields of the orders rd_ev_done queued that are due.
 * 0 with *out (n entries, malloc'd; NULL when none) or -1. A segment with no stream
 * is 0 entries; an empty stream whose ledger flag is gone (its segment went) is
 * deleted, with its retire list, the segment leaves the registry, and is 0 entries.
 * *backlog: the stream's length (entries not yet deleted). */
int rd_ev_read(rd_conn *c, const char *placed, int i, const char *consumer, int max,
               int idle_ms, struct rd_event **out, int *n, long long *backlog);

/* Acknowledge ev[0..n-1] of segment i's stream and trim it up to the oldest entry any
 * reader still has pending; and, with `retire_s` > 0, queue the orders of its sales
 * and cancels for the segment to forget in `retire_s` (keys.h retire list; on a
 * Redis Cluster min(retire_s, 60) s later, so a record RETAIN gives the same TTL has
 * gone first): rd_ev_read drops their fields from the segment's orders and parts
 * hashes and cancelled set once due, and a cancel then takes the units from the
 * record (lua/cancel.lua; on a cluster only from a record restored from the ledger,
 * lua/cancel_segment.lua). A segment whose ledger flag is gone queues none. 0 or -1. */
int rd_ev_done(rd_conn *c, const char *placed, int i, const struct rd_event *ev, int n,
               int retire_s);

/* RETAIN: the record of each order of ev[0..n-1] (events of `placed` with an order and
 * a record), when it is still that sale's, expires in `ttl_s` (on a standalone Redis a
 * cancelled one only by its cancel's event: lua/retain.lua); one call per slot the
 * records are in (standalone: one). How many got it, or -1. */
int rd_ev_retain(rd_conn *c, const char *placed, const struct rd_event *ev, int n,
                 int ttl_s);

/* RESTORE: the record of order `id` written back as the ledger has it (SKU `placed`,
 * `epoch`), unless the id has a record: 1 written, 0 one was there, -1. On a Redis
 * Cluster it expires again in `ttl_s` (its cancel's events carry no record to give it
 * a TTL by): gone before the segments forget the cancel's marks (cancel_segment.lua),
 * a retry of a cancel that died reads the ledger, which has it cancelled by then. */
int rd_ev_restore(rd_conn *c, const char *id, const char *placed, long long epoch,
                  const char *record, int ttl_s);

#endif
