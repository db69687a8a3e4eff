/* lock_env.h -- the fixture of the lock-service tests (it_lock_services: what SKUs
 * locked by a service sell and refuse; it_lock_faults: holders frozen, services
 * restarted or killed under orders): a Redis store, three RedLock masters, memcached
 * and ZooKeeper, all started by the harness, and two instances on them (--lab, 2
 * threads, a lease of TTL_MS); and the helpers both files share. The lse_* calls that
 * assert fail the running cmocka test: call them from the test's main thread
 * (lse_sell runs on h_parallel's threads and asserts nothing).
 */
#ifndef TESTS_LOCK_ENV_H
#define TESTS_LOCK_ENV_H

#include <stdatomic.h>
#include <stdbool.h>

#include "tests/harness_lock.h"
#include "tests/harness_zk.h"
#include "segments/store.h"

#define TTL_MS                                                                           \
    2000 /* the lease: renewed every ttl/3, so a hold of 600 ms renews none              \
          */
#define HOLD_MS 600

struct lse_env {
    h_redis *store;
    h_redis *nodes[3];
    h_memcached *mc;
    h_zk *zk;
    h_svc *a, *b; /* two instances on the same store and lock services */
    char redlock[256];
};

/* The cmocka group setup (*state: a struct lse_env) and teardown. */
int lse_group_setup(void **state);
int lse_group_teardown(void **state);

/* TSAN_OPTIONS for the services this process starts: tests/tsan_zookeeper.supp added
 * (no-op without TSan). Call first in main. */
void lse_tsan_options(void);

/* PUT /admin/skus/SKU?reset=true with `body`: its status. */
int lse_put_sku(int port, const char *sku, const char *body);

/* Clients selling `sku` over two instances until it is sold out (409), for
 * h_parallel (lse_sell). */
struct lse_sellout {
    const char *sku;
    int ports[2];
    bool ids;      /* every other order with a client's order id */
    long long qty; /* each order's (0: 1) */
    atomic_int sold, busy, other;
};
void lse_sell(int idx, void *arg);

/* 120 units on 4 segments locked by `lock` sold by 8 clients over instances a and b:
 * exactly, every sale under a lock of the service's. */
void lse_sell_out_on(h_svc *a, h_svc *b, const char *lock, const char *sku, bool ids);

/* The frozen holders (it_lock_faults; it_pg_locks on the PostgreSQL store), on any two
 * instances a, b of one store and lock services (started with --lab):
 * lse_frozen_holder: SKU `sku` of 1 unit on 1 segment locked by `lock` (HOLD_MS,
 * "fencing": `fencing`); A takes the lock and is frozen (SIGSTOP) while it holds, B
 * sells the unit once the service lets A's lock go (`restart`: the service restarted
 * meanwhile, RedLock's two masters or memcached), A resumed sends its write. Returns
 * A's answer; *sold and *remaining as GET /admin/skus has them after.
 * lse_frozen_fenced: that with fencing: A answered 409, sold 1, remaining 0, A's
 * fenced_rejections grew (the store refused its fence).
 * lse_frozen_multi: SKU `sku` of 2 units on 2 segments, A frozen holding both for an
 * order of 2, B sells them, A's write fenced: A 409, sold 2, fenced_rejections grew. */
int lse_frozen_holder(h_svc *a, h_svc *b, const char *lock, const char *sku, bool fencing,
                      long long *sold, long long *remaining, struct lse_env *restart);
void lse_frozen_fenced(h_svc *a, h_svc *b, const char *lock, const char *sku);
void lse_frozen_multi(h_svc *a, h_svc *b, const char *lock, const char *sku);

/* The automatic rebalance of a SKU locked by `lock` on instance a: 400 units on 4
 * segments, "rebalance": true accepted, two segments emptied, then orders of 1 until
 * one spreads first (every segment's hold from the service, one fenced ADJUST): every
 * segment holds stock after it, one rebalance counted, the audit clean. */
void lse_spread_on(h_svc *a, const char *lock, const char *sku);

/* The store's ADJUST "spread" under a lock service's holds, called on the seam `st`
 * (on `base`) for a SKU made on instance a (8 units on 4 segments, two emptied):
 * every segment's fence registered (HOLD), another holder's higher fence registered
 * on segment 2, then the spread with the first fences is refused FENCED with every
 * stock as it was (audit clean); with segment 2's new fence it evens the stock out. */
void lse_spread_fenced(h_svc *a, store *st, struct event_base *base, const char *lock,
                       const char *sku);

/* How many keys of `r` match `pattern` (SCAN); -1 on error. */
long long lse_count_keys(h_redis *r, const char *pattern);

#endif
