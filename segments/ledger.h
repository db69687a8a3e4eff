/* ledger.h -- the order ledger's sink (ledger_*): a thread of the service that copies
 * the SKUs' ledger events from Redis into PostgreSQL, exactly once, and lets Redis
 * forget order records once the ledger has them.
 *
 * Events. Every script that sells, cancels, restocks, rebalances, resets or deletes
 * appends its event to the ledger stream of the segment it changed, in that segment's
 * slot, in the same script (segments/redis/evstream.h), while the segment's ledger
 * flag is set: a create or reset by a service with a ledger sets it (inv_options
 * .ledger), one without deletes it, so a service with no ledger never grows a stream.
 *
 * The thread (one per process with `ledger` set) owns a Redis connection and a
 * PostgreSQL one. About every 200 ms (at once while there is more) it reads the
 * ledger's registry of segments (every second; evstream.h rd_ev_segments: the reset
 * that sets a segment's ledger flag names it there, and it stays named until its
 * stream is drained, so a SKU whose whole life falls between two readings is drained
 * too), and for each segment named: reads a batch through
 * the consumer group "ledger" (its own unfinished batch first, then one another
 * reader left idle for 5 s, then new entries); for a SKU with durability
 * "replicated" (a cluster, or a master with replicas under Sentinel), WAITs for a replica
 * on the segment's node (the read is a write of this connection, so the WAIT covers every
 * entry read) and copies nothing until one has it; copies the batch in one transaction
 * (postgres/ledger.h: unique by stream and entry id, so several sinks, or a batch copied
 * twice after a crash, count each event once); then acknowledges the entries and trims
 * the stream below the oldest still pending, and gives each order record copied its TTL
 * (record_retention_s). A batch that fails
 * stays pending with this reader and is read again next time.
 *
 * On the PostgreSQL store (inv with `store`) the events are rows of the store's
 * `events` table, appended by triggers in the statement that makes each change
 * (postgres/events.h): the thread takes a batch (FOR UPDATE SKIP LOCKED), copies it
 * with the same pgl_copy, then deletes it and commits; no Redis is used.
 *
 * Reads. ledger_order answers an order record Redis no longer has (never on
 * PostgreSQL, which keeps every order row); ledger_reconcile compares a SKU's counts
 * in the store (through admin.h, either store) with the ledger's. Both are blocking (a
 * worker's), thread-safe (one PostgreSQL connection under a mutex, apart from the
 * thread's).
 */
#ifndef SEG_LEDGER_H
#define SEG_LEDGER_H

#include <stdbool.h>
#include <stddef.h>

#include "segments/inventory.h"

typedef struct ledger ledger;

struct ledger_options {
    const char *conninfo; /* the ledger's libpq connection string; copied */
    int retention_s;      /* an order record's TTL once copied */
    bool reads_only;      /* no sink thread: the reads alone (inventoryd --reconcile) */
};

/* Start the sink for `v` (which then answers from it: order_get, ledger_reconcile).
 * NULL with err set when the thread cannot start. PostgreSQL need not be up. */
ledger *ledger_create(inv *v, const struct ledger_options *o, char *err, size_t errlen);
/* Stop the thread (its batch in flight finishes or stays pending) and free. NULL ok. */
void ledger_free(ledger *l);

struct ledger_stats {
    long long copied;   /* events copied (committed) by this process */
    long long batches;  /* batches committed */
    long long failures; /* batches not copied (Redis, PostgreSQL or WAIT failed) */
    long long retained; /* order records given their TTL */
    long long backlog;  /* events in the streams at the last pass (not yet deleted) */
    long long lag_ms;   /* the oldest event not yet copied, at the last pass; 0 none */
};
/* The sink's counters: 1, or 0 when `v` has no ledger (out zeroed). */
int ledger_stats_of(inv *v, struct ledger_stats *out);

/* The record of order `id` from the ledger, when it is a sale of its SKU's current
 * epoch (a reset or delete forgets the SKU's orders): INV_OK with *record
 * (malloc'd), INV_NOT_FOUND, INV_UNAVAILABLE. */
inv_status ledger_order(inv_conn *c, const char *id, char **record);

/* A cancel of an order Redis no longer has a record of (past record_retention_s):
 * INV_OK with *record (malloc'd) when the ledger has it cancelled already in the
 * SKU's current epoch (an older epoch's order is INV_NOT_FOUND); -1 when
 * the ledger has it sold in the SKU's current epoch and its record is back in Redis
 * (restored as the ledger has it, unless the id has a record again: cancel as usual
 * now); INV_NOT_FOUND, INV_UNAVAILABLE. */
int ledger_restore(inv_conn *c, const char *id, char **record);

struct ledger_recon {
    long long epoch;
    long long store_stock, store_sold;   /* the segments in Redis, summed */
    long long ledger_stock, ledger_sold; /* the ledger's events of this epoch, summed */
    long long ledger_events;
    long long drift; /* |stock difference| + |sold difference|: 0 once caught up */
};
/* A SKU's counts in Redis and in the ledger: INV_OK, INV_UNKNOWN_SKU,
 * INV_UNAVAILABLE (Redis or the ledger did not answer), INV_INVALID (no ledger). */
inv_status ledger_reconcile(inv_conn *c, const char *sku, struct ledger_recon *out);

#endif
