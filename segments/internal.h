/* internal.h -- the layout of `inv` and `inv_conn`, private to segments/.
 *
 * Nothing outside segments/ includes this file; api/ and service/ see only the
 * opaque handles of inventory.h. It includes the leaf helpers most of segments/ uses:
 * the clock (clock.h) and randomness (rand.h).
 */
#ifndef SEG_INTERNAL_H
#define SEG_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "segments/admin.h"
#include "segments/clock.h"
#include "segments/inventory.h"
#include "segments/rand.h"
#include "segments/locksvc.h"
#include "segments/store.h"
#include "segments/stats.h"

/* The Redis handles `inv` holds (segments/redis/calls.h, included by the files that
 * use them: this header stays free of Redis so that the engine's files are). */
struct rd_smap;
struct rd_sentinel;
struct rd_conn;
struct rd_target;

typedef struct skutab skutab;
typedef struct sweeper sweeper;

struct inv {
    struct inv_options opt; /* opt.redis_host points at `host` */
    char *host;
    bool cluster;        /* at start: a cluster (forced, or said so by INFO cluster); the
                            mode now is the map's (inv_redis_cluster) */
    bool probe_failed;   /* no seed answered INFO cluster at start */
    bool postgres;       /* the store is PostgreSQL (opt.store): no Redis is used */
    struct rd_smap *map; /* the slot map every connection routes by on a cluster, and the
                     mode (calls.h); NULL for a unix socket */
    struct rd_sentinel *sentinel; /* Sentinel: the current master, for every connection */
    _Atomic long long stats[STAT__COUNT];
    _Atomic long long hist[HIST__COUNT][HIST_BUCKETS + 1];
    _Atomic long long hist_sum_us[HIST__COUNT];
    skutab *tab;               /* in-process state per SKU (skutab.h) */
    sweeper *sw;               /* with a map: undoes dead multi-segment intents */
    struct holdsweep *holds;   /* gives expired reservations back (holdsweep.h) */
    _Atomic long long changes; /* SKU changes made by this process (skutab_invalidate) */
    struct ledger *ledger;     /* the ledger's sink (ledger.h), set before any request,
                                  or NULL */
};

struct inv_conn {
    inv *v;
    struct admin *adm;  /* the store's blocking admin seam (segments/admin.h) */
    struct rd_conn *rd; /* Redis: the admin table's connection, for callers of calls.h
                           beside it (the sweeper, tests); NULL on PostgreSQL */
    uint64_t rng;       /* xorshift state: ring start and backoff jitter */
    uint64_t token_id;  /* random per connection: prefix of every lock token */
    uint64_t token_seq; /* counter: suffix of every lock token */
    /* The store on a loop of this connection's own (store.h), made on first use: a
     * blocking call runs the store's asynchronous operation there and waits for it
     * (inv_conn_store). NULL until then. */
    struct event_base *base;
    store *st;
    /* An engine on that loop over st, for admin adjusts (sku.c, engine.h
     * engine_adjust), made on first use by its user, who sets eng_free (so that this
     * file calls no engine file: the engine calls it); NULL until then. */
    struct engine *eng;
    void (*eng_free)(struct engine *e);
    /* Its SKU table (ltab.h ltab_of_conn), its engine's too; NULL until first used. */
    struct ltab *tab;
};

/* c's own loop and its store (made on first use, connecting then). */
store *inv_conn_store(inv_conn *c);
/* Turn c's loop until *done (set by the callback of an operation of its store:
 * every one answers, within its deadline). */
void inv_conn_wait(inv_conn *c, const bool *done);

/* Where v's Redis is (the options as the seam takes them; calls.h). */
struct rd_target inv_redis_target(const inv *v);

/* The stock store of an event loop on `base` (store.h): the backend is chosen here,
 * at one place (Redis, segments/redis/backend.h, or PostgreSQL, postgres/backend.h;
 * and so is a worker's admin table, admin.h, in inv_conn_create). Freed by its ops'
 * free. */
store *inv_store_create(inv *v, struct event_base *base);

/* A handle of lock service `lock` (skumode.h sku_lock) on `base`, chosen here too:
 * *ops its table (locksvc.h), NULL with *ops NULL when that service is not
 * configured or cannot be made (the reason logged). Freed by (*ops)->free. */
void *inv_lock_create(inv *v, struct event_base *base, int lock,
                      const struct lks_ops **ops);

#endif
