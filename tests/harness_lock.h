/* harness_lock.h -- test harness for the lock services (segments/locksvc.h): N
 * independent redis-servers for RedLock, a memcached child, and blocking wrappers that
 * drive one lock-service handle on a private event_base.
 *
 * Processes. memcached runs as `memcached -l 127.0.0.1 -p PORT -U 0 -t 1 -m 16` (with
 * `-u nobody` when the tests run as root, which memcached refuses otherwise) on a port
 * found free by h_free_port, and is ready once it accepts a TCP connection. It gets
 * PR_SET_PDEATHSIG=SIGKILL, so start it from the test's main thread (see harness.h);
 * it is stopped by its pid (SIGCONT, SIGTERM, SIGKILL after 5 s). The redis-servers
 * are h_redis children (tests/harness.h), optionally without persistence.
 *
 * Lock wrappers. An h_lock is one backend handle on its own event_base, used by one
 * thread. Each call runs that base until the callback has answered (at most 30 s:
 * then it returns -99 and prints why), so timers of the backend (expiry, backoff) run
 * only inside these calls or h_lock_run_ms -- a holder that calls nothing is a holder
 * frozen in a pause.
 *
 * Errors: 0/-1 or pointer/NULL, the reason printed with a "harness:" prefix; no
 * cmocka asserts, so they may run on any thread.
 */
#ifndef TESTS_HARNESS_LOCK_H
#define TESTS_HARNESS_LOCK_H

#include <stdbool.h>

#include "segments/locksvc.h"
#include "tests/harness.h"

/* ---- memcached ---------------------------------------------------------------- */

typedef struct h_memcached h_memcached;

/* Start one ($MEMCACHED or memcached from PATH); NULL on failure. */
h_memcached *h_memcached_start(void);
int h_memcached_port(const h_memcached *m);
/* "127.0.0.1:PORT", valid as long as `m` is. */
const char *h_memcached_addr(const h_memcached *m);
/* SIGSTOP / SIGCONT: a hung memcached that keeps its connections open. 0 or -1. */
int h_memcached_pause(h_memcached *m);
int h_memcached_resume(h_memcached *m);
/* Stop and start again on the same port: every item is forgotten. 0 or -1. */
int h_memcached_restart(h_memcached *m);
/* Stop by pid and free. NULL is fine. */
void h_memcached_free(h_memcached *m);

/* ---- redis-servers for RedLock ------------------------------------------------- */

/* Start n independent redis-servers into nodes[0..n-1]; without `persistent`, with
 * AOF and RDB off, so a restart (h_redis_restart) forgets every key. Writes
 * "A,B,C" (the RedLock target) into target. 0, or -1 after freeing what started. */
int h_redlock_nodes_start(h_redis **nodes, int n, bool persistent, char *target,
                          size_t len);

/* ---- a lock-service handle driven synchronously --------------------------------- */

typedef struct h_lock h_lock;

/* A handle of `ops` for `target` on a new event_base; NULL (reason printed). */
h_lock *h_lock_new(const struct lks_ops *ops, const char *target);
/* ops->free, then the base. NULL is fine. */
void h_lock_free(h_lock *l);

/* The backend's call, waited for: its rc (LKS_*), or -99 when no answer came in 30 s.
 * h_lock_acquire stores the hold in *out (NULL unless LKS_OK), with a lost callback
 * that counts into h_lock_lost_count. */
int h_lock_acquire(h_lock *l, const char *name, int ttl_ms, int wait_ms, lks_hold **out);
int h_lock_renew(h_lock *l, lks_hold *h, int ttl_ms);
int h_lock_release(h_lock *l, lks_hold *h);
/* Run the handle's loop for ms (its timers fire: expiries, lost callbacks). */
void h_lock_run_ms(h_lock *l, int ms);
/* How many lost callbacks ran on this handle's holds so far. */
int h_lock_lost_count(const h_lock *l);

/* Mutual exclusion under contention: `threads` threads, each with its own handle,
 * take lock `name` `iters` times (ttl_ms, waiting up to 20 s), and while holding it
 * read a shared counter, sleep 1 ms and write it back plus one -- an update lost
 * whenever two hold at once -- then release. */
struct h_lock_contention {
    int acquired; /* acquires answered LKS_OK */
    int failed;   /* anything else (and handles that could not be made) */
    int overlaps; /* times a thread entered while another was inside */
    long counter; /* the shared counter at the end: acquired when exclusive */
};
int h_lock_contend(const struct lks_ops *ops, const char *target, const char *name,
                   int threads, int iters, int ttl_ms, struct h_lock_contention *out);

#endif
