/* internal.h -- the layout of `inv` and `inv_conn`, private to segments/.
 *
 * Nothing outside segments/ includes this file; api/ and service/ see only the
 * opaque handles of inventory.h.
 */
#ifndef SEG_INTERNAL_H
#define SEG_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "segments/inventory.h"
#include "segments/redis/calls.h"
#include "segments/stats.h"

typedef struct skutab skutab;
typedef struct watchdog watchdog;

struct inv {
    struct inv_options opt; /* opt.redis_host points at `host` */
    char *host;
    _Atomic long long stats[STAT__COUNT];
    _Atomic long long hist[HIST__COUNT][HIST_BUCKETS + 1];
    _Atomic long long hist_sum_us[HIST__COUNT];
    skutab *tab;               /* in-process state per SKU (skutab.h) */
    watchdog *wd;              /* renews the leases of held locks (watchdog.h) */
    _Atomic long long changes; /* SKU changes made by this process (skutab_invalidate) */
};

struct inv_conn {
    inv *v;
    rd_conn *rd;        /* the Redis seam's connection (segments/redis/calls.h) */
    uint64_t rng;       /* xorshift state: ring start and backoff jitter */
    uint64_t token_id;  /* random per connection: prefix of every lock token */
    uint64_t token_seq; /* counter: suffix of every lock token */
};

/* The handle's lease watchdog (for tests that drive leases by hand). */
watchdog *inv_watchdog(inv *v);

/* Milliseconds on the monotonic clock. */
int64_t inv_now_ms(void);

/* The monotonic-clock instant `ms` milliseconds from now, for pthread_cond_timedwait
 * on a condition variable made by inv_cond_init. */
struct timespec inv_deadline(int ms);

/* Initialise `cv` to time out against the monotonic clock (immune to clock steps). */
void inv_cond_init(pthread_cond_t *cv);

/* Sleep `ms` milliseconds, whatever signals arrive meanwhile. */
void inv_sleep_ms(int ms);

/* A uniformly random integer in [0, n) from the connection's generator; n > 0. */
uint32_t inv_rand(inv_conn *c, uint32_t n);

/* Where v's Redis is (the options as the seam takes them). */
struct rd_target inv_redis_target(const inv *v);

/* A fresh lock token (or attempt id), unique across every connection and instance:
 * the connection's random id and a counter, 32 hex digits. */
void inv_new_token(inv_conn *c, char token[33]);

/* Fill `out` (33 bytes) with 32 hex digits of fresh randomness from the kernel. */
void inv_random_hex(char out[33]);

/* A fresh SKU epoch: uniformly random in [1, 2^52), so epochs are never reused (a
 * SKU deleted and created again, a Redis that lost its data) and every generation
 * counted up from one stays exact in a Lua number. */
long long inv_new_epoch(void);

#endif
