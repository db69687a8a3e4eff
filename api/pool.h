/* pool.h -- a fixed pool of worker threads fed from one FIFO job queue.
 *
 * Each worker calls `init(arg)` once when it starts and keeps the result as its
 * private state (the service uses it for one inv_conn per worker, so a Redis
 * connection is never shared); every job it runs receives that state; `fini(state,
 * arg)` runs on the same thread when the worker exits.
 *
 * Shutdown drains: pool_drain() stops accepting jobs, lets the workers finish every
 * job already queued and joins them; pool_submit() stays safe to call (and fails)
 * until pool_free(). Jobs may block (Redis calls, hold_ms); the
 * queue is unbounded, so the producer bounds it (the HTTP server has at most one job
 * per connection).
 */
#ifndef API_POOL_H
#define API_POOL_H

#include <stddef.h>

struct pool;

typedef void *(*pool_init_fn)(void *arg);
typedef void (*pool_fini_fn)(void *state, void *arg);
typedef void (*pool_job_fn)(void *state, void *job);

/* Start `threads` workers. `init`/`fini` may be NULL (state is then NULL).
 * Returns NULL with `err` filled when a thread cannot be started (those already
 * started are stopped again). */
struct pool *pool_create(int threads, pool_init_fn init, pool_fini_fn fini, void *arg,
                         char *err, size_t errlen);

/* Queue fn(state, job) to run on some worker. Returns 0, or -1 once shutdown has
 * begun (the job is then not run: the caller still owns `job`). */
int pool_submit(struct pool *p, pool_job_fn fn, void *job);

/* Stop accepting jobs, run every queued job and join the workers. Idempotent;
 * call it (and pool_free) from one thread, not from a job. */
void pool_drain(struct pool *p);

/* Drain (if not done yet) and free the pool. NULL is a no-op. */
void pool_free(struct pool *p);

#endif
