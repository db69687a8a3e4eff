/* locksvc.h -- a lock service beside the stock store: one named lock taken, kept and
 * given up on an event loop, with the fencing number the stock store checks on every
 * write made under it.
 *
 * Backends: ZooKeeper (segments/zookeeper/), RedLock over independent redis-servers
 * (segments/redlock/), memcached `add` (segments/memcached/). Each is one `struct
 * lks_ops` of static functions in its own folder, chosen at one place by name
 * (libevent's `struct eventop`). The engine knows no znode path nor key name: it asks
 * for the lock of a name (e.g. "sku:3") and gets a hold.
 *
 * Threads. A service handle lives on one libevent event_base and is used from that
 * loop's thread only; every callback runs on that loop, exactly once, never from
 * inside the call that asked for it. A backend whose client library blocks (memcached)
 * hands the call to threads of its own and answers on the loop.
 *
 * Holds and leases. A hold is valid until `lks_hold.valid_until_ms` (the loop's
 * monotonic clock, base/clock.h); the holder renews it before then or stops writing.
 * A hold can be lost without a call: a ZooKeeper session that expired, a lease that
 * ran out unrenewed. The backend then calls the hold's `lost` callback once (if set),
 * and renew answers LKS_LOST. Losing is never silent, but it can be late: the store's
 * fencing check is what makes a late holder harmless.
 *
 * Fencing. `fence` is a number that grows with every grant of the same lock name:
 * ZooKeeper's lock node czxid (LKS_CAP_FENCES); for services that have none (RedLock,
 * memcached) it is 0 and the stock store issues one when the lock is won. The store
 * refuses a write whose fence is lower than the highest it accepted for that segment.
 *
 * Errors: rc -1 means the service gave no answer (down, timed out): the outcome of an
 * acquire is unknown, and the backend releases a lock it learns it won too late.
 */
#ifndef SEG_LOCKSVC_H
#define SEG_LOCKSVC_H

#include <event2/event.h>
#include <stdint.h>

enum {
    LKS_OK = 0,       /* acquired / renewed / released */
    LKS_BUSY = 1,     /* held by another within the wait (acquire) */
    LKS_LOST = 2,     /* renew or release: the hold is no longer ours */
    LKS_UNAVAIL = -1, /* no answer from the service */
};

/* Capabilities. */
#define LKS_CAP_FENCES 0x1u /* the service issues the fencing number itself */

typedef struct lks_hold lks_hold;
typedef void (*lks_lost_fn)(void *arg, lks_hold *h);

/* What a backend's acquire hands back; the backend owns it until release (or free of
 * the service) and may keep private state after it. */
struct lks_hold {
    const char *name;         /* the lock's name, as asked */
    uint64_t fence;           /* 0 when the store issues it (no LKS_CAP_FENCES) */
    long long valid_until_ms; /* base/clock.h monotonic ms; renew moves it */
    lks_lost_fn lost;         /* set by the holder; called once when lost */
    void *lost_arg;
};

typedef void (*lks_acquire_fn)(void *arg, int rc, lks_hold *h); /* h set for LKS_OK */
typedef void (*lks_done_fn)(void *arg, int rc);

struct lks_ops {
    const char *name; /* "zookeeper", "redlock", "memcached" */
    unsigned caps;
    /* A handle on `base` for `target` (the backend's address list, e.g.
     * "127.0.0.1:2181,127.0.0.1:2182"); NULL with a reason in err. */
    void *(*create)(struct event_base *base, const char *target, char *err, size_t len);
    /* Every pending callback is answered LKS_UNAVAIL first; holds are released as far
     * as the service can be told without waiting. */
    void (*free)(void *svc);
    /* Take lock `name` for ttl_ms, waiting in line up to wait_ms (0: one try). */
    void (*acquire)(void *svc, const char *name, int ttl_ms, int wait_ms,
                    lks_acquire_fn fn, void *arg);
    /* Extend the hold to ttl_ms from now: LKS_OK or LKS_LOST (or UNAVAIL). */
    void (*renew)(void *svc, lks_hold *h, int ttl_ms, lks_done_fn fn, void *arg);
    /* Give the hold up (only ours is removed); h is freed by the backend after the
     * callback (fn may be NULL). */
    void (*release)(void *svc, lks_hold *h, lks_done_fn fn, void *arg);
};

#endif
