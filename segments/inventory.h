/* inventory.h -- the domain handle: one per process, shared by every worker.
 *
 * An `inv` owns what the whole process shares: the options, the counters
 * (stats.h), the in-process table of SKUs (skutab.h) and the background threads
 * (the sweepers). An `inv_conn` is one worker's Redis connection; it belongs to
 * exactly one thread at a time and is never shared. Every domain call (order.h,
 * sku.h) takes an `inv_conn`.
 *
 * Errors: every domain call returns an `inv_status`. INV_UNAVAILABLE means Redis
 * did not answer (refused, reset, timed out); the connection is dropped and the
 * next call on the same `inv_conn` reconnects, so Redis coming back needs no
 * restart. Nothing is reported as done unless Redis acknowledged it.
 */
#ifndef INVENTORY_H
#define INVENTORY_H

#include <stdbool.h>
#include <stddef.h>

typedef struct inv inv;
typedef struct inv_conn inv_conn;

typedef enum inv_status {
    INV_OK = 0,           /* done */
    INV_REPLAYED,         /* order_id already confirmed: same record, nothing deducted */
    INV_SOLD_OUT,         /* every segment is empty */
    INV_INSUFFICIENT,     /* stock remains, but no segment holds qty */
    INV_UNKNOWN_SKU,      /* no such SKU */
    INV_NOT_FOUND,        /* no such order */
    INV_CONFLICT,         /* order_id already used for a different sku or qty */
    INV_BUSY,             /* no segment lock could be had within lock_wait_ms */
    INV_UNAVAILABLE,      /* Redis unreachable, hung or failing */
    INV_INVALID,          /* argument out of the documented range */
    INV_REQUEST_CONFLICT, /* request id already used for a different admin write */
    INV_NOT_REPLICATED,   /* durability "replicated": no replica confirmed it in time
                             (WAIT): applied, or on a cluster stopped at that step; a
                             retry (order id, request id) settles it */
    INV_SKU_EXISTS,       /* a create-only write found the SKU there: nothing changed */
    INV_PRECONDITION,     /* the SKU is not the version the write names: nothing
                             changed */
} inv_status;

/* Options the domain needs; service/ fills them from the configuration. */
struct inv_options {
    const char *redis_host; /* borrowed; copied by inv_create */
    int redis_port;
    /* Optional, NULL/"" for none; borrowed, must outlive the handle: */
    const char *redis_unix;     /* a unix socket path instead of host:port */
    const char *redis_user;     /* ACL user for AUTH */
    const char *redis_password; /* AUTH on every (re)connect */
    int redis_db;               /* SELECT on every (re)connect when not 0 */
    const char *redis_seeds;    /* more Redis Cluster seeds, "host:port,host:port" */
    bool redis_cluster;         /* a Redis Cluster without asking (else INFO cluster) */
    /* Redis Sentinel: the master is whichever these sentinels ("host:port,...") name
     * for redis_sentinel_master (redis_host and redis_port are then unused);
     * redis_sentinel_password is the sentinels' AUTH, redis_password the master's. */
    const char *redis_sentinels;
    const char *redis_sentinel_master;
    const char *redis_sentinel_password;
    int redis_timeout_ms; /* connect and per-command timeout (a hung Redis -> 503) */
    int lock_ttl_ms;      /* lease of a segment lock; renewed every ttl/3 while held */
    int lock_wait_ms;     /* how long an order waits for a free segment before BUSY */
    int meta_cache_ms;    /* how long a SKU's settings are trusted without re-reading */
    /* The stock store: NULL/"" Redis (the redis_* options above), or a PostgreSQL
     * connection string ("postgres://...", "postgresql://...", or key=value pairs
     * starting "host=" / "dbname="): every redis_* option then unused, the schema
     * migrated by inv_create. Borrowed, must outlive the handle. */
    const char *store;
    int pg_pool;        /* PostgreSQL: each loop's connections for `row` holds; 0: 4 */
    bool pg_no_prepare; /* PostgreSQL: no prepared statements (PgBouncer in
                           transaction pooling): every statement sent unprepared */
    /* Lock services (segments/locksvc.h) for SKUs with a "lock" of theirs; NULL/""
     * for none; borrowed, must outlive the handle: */
    const char *redlock;   /* RedLock masters "h:p,h:p,h:p" */
    const char *memcached; /* one memcached "h:p" */
    const char *zookeeper; /* a ZooKeeper ensemble "h:p,h:p,..." */
    bool ledger; /* a ledger is configured: every create or reset turns the SKU's
                    events on (store.h store_reset.ledger); every instance on one Redis
                    should agree */
};

/* The lock services `opt` configures: bit 1 << sku_lock (skumode.h) for each. */
unsigned inv_lock_services(const struct inv_options *opt);

/* True when `store` (inv_options.store) names PostgreSQL. */
bool inv_store_is_postgres(const char *where);

/* Create or upgrade the PostgreSQL schema of `store` and return: 0 with *version, or
 * -1 with err filled (`inventoryd --migrate`; inv_create does it too). */
int inv_migrate(const char *where, int timeout_ms, int *version, char *err,
                size_t errlen);

/* Create the process-wide handle and start its background threads (the sweepers).
 * Returns NULL and fills `err` when a thread cannot be started. Redis need not
 * be up: connections are made lazily and retried. Free with inv_free(). */
inv *inv_create(const struct inv_options *opt, char *err, size_t errlen);
void inv_free(inv *v);

/* A worker's connection; connects on first use. Free with inv_conn_free()
 * from the thread that used it. Never returns NULL (aborts on OOM). */
inv_conn *inv_conn_create(inv *v);
void inv_conn_free(inv_conn *c);

/* Where every Redis failure (with `what` failed and why) and every reconnect
 * (`failure` false) is reported; thread-safe, rate-limited by the callee. Set once,
 * before inv_create. */
typedef void (*inv_log_fn)(bool failure, const char *what, const char *detail);
void inv_set_redis_logger(inv_log_fn fn);

/* True when Redis is a cluster: configured so, found so at start (INFO cluster on
 * the first seed that answered), or since (a Redis taken as standalone that answers
 * as a cluster node: the mode moves once, never back; thread-safe, one atomic). */
bool inv_redis_cluster(const inv *v);

/* The store in use, as /healthz and /metrics name it: "redis" or "postgres". */
const char *inv_store_name(const inv *v);

/* The lock schemes a SKU may name ("lock") on the store in use, NULL-terminated, the
 * default first: the store's own, then the lock services it can fence (which of them
 * this process may use: inv_lock_services). Static, never freed. */
const char *const *inv_store_locks(const inv *v);

/* PING Redis: INV_OK or INV_UNAVAILABLE. */
inv_status inv_ping(inv_conn *c);

/* Why the last call on `c` failed ("connect: Connection refused", "AUTH: WRONGPASS
 * ..."), for error details and logs; "" when none did. */
const char *inv_conn_error(const inv_conn *c);

/* Short stable name of a status, e.g. "sold_out"; used in logs and JSON. */
const char *inv_status_name(inv_status s);

#endif
