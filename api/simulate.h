/* simulate.h -- the service's own load generator: real orders through the order path.
 *
 *   POST   /admin/skus/{sku}/simulate  {"orders": N, "concurrency": C, "qty": q}
 *          (parse.h: N 1..1000000, C 1..64 = 8, q 1..1000000 = 1): 202 with the run's
 *          status; 404 unknown_sku; 409 simulation_running while a run of the SKU is
 *          still going; 429 too_many_simulations when C more orders in flight would
 *          pass API_SIM_THREADS_MAX; 503 shutting_down once the server stops (and
 *          before its event loops run)
 *   GET    /admin/skus/{sku}/simulate  200 the status of the SKU's latest run;
 *          404 not_found when this process has none
 *   DELETE /admin/skus/{sku}/simulate  ask the run to stop: 200 with its status (state
 *          "stopping" until its orders in flight are answered); 404 not_found
 *
 * Status: {"sku","run","state","orders","concurrency","qty","sent","answered",
 * "elapsed_ms","outcomes":{"confirmed","replayed","sold_out","insufficient_stock",
 * "busy","backend_unavailable","unknown_sku","other"}}; state is "running",
 * "stopping", "finished" (every order answered) or "stopped".
 *
 * A run places orders numbered 1..N on one event loop's order engine (api/loop.h,
 * segments/engine.h; the loops are taken in turn), C of them in flight at a time: each
 * answer starts the next number. Each order goes through engine_order() under the
 * order id "sim-<run>-<n>" (run: 12 random hex digits), exactly as POST /orders: the
 * orders are counted in /admin/stats, /metrics and the SKU's own counters, and audited
 * like any other. A stopped run starts no further order and ends when its orders in
 * flight are answered, so a stop takes at most one order's time (hold_ms plus
 * lock_wait_ms). At most one run per SKU goes at once, and the runs not yet ended have
 * at most API_SIM_THREADS_MAX orders in flight together (the sum of their C).
 *
 * Threads and ownership: the registry (struct api_sim, one per server) is guarded by
 * its mutex. A run is made by api_sim_start on a worker thread and handed to its loop
 * with api_loop_post(); from then on only that loop starts and answers its orders. Its
 * counters are atomics the loop writes and anyone reads; its end (the last order in
 * flight answered, none more to start) is marked on the loop under the registry's
 * mutex, the loop's last touch of the run. Only ended runs are freed: the registry
 * keeps the latest API_SIM_RUNS_KEPT of them for their status.
 */
#ifndef API_SIMULATE_H
#define API_SIMULATE_H

#include <jansson.h>

#include "api/routes.h"
#include "segments/inventory.h"

#define API_SIM_THREADS_MAX 128 /* simulated orders in flight over all runs */
#define API_SIM_RUNS_KEPT 32    /* ended runs remembered for their status */

struct api_sim;

/* The registry for the process's domain handle `v` (borrowed; must outlive it).
 * Never NULL (aborts on out of memory). Free with api_sim_free(). */
struct api_sim *api_sim_create(inv *v);

struct api_loop; /* api/loop.h */

/* The event loops runs place their orders on (borrowed; `loops` must outlive the
 * registry's use of them, up to api_sim_stop_all). Before this, or with n == 0,
 * starting a run answers 503. */
void api_sim_attach(struct api_sim *s, struct api_loop *const *loops, int n);

/* Refuse new runs (503 shutting_down), ask every run to stop, and wait (at most 30 s)
 * until every run has ended. Call it while the loops still run, so that the orders
 * in flight are answered. NULL is a no-op. */
void api_sim_stop_all(struct api_sim *s);

/* Free the registry and every run. Call it after the loops are stopped (a run still
 * going then is dropped: its loop no longer runs). NULL is a no-op. */
void api_sim_free(struct api_sim *s);

/* The status of `sku`'s latest run as described above (new reference), or NULL when
 * this process has none. Any thread. */
json_t *api_sim_status_json(struct api_sim *s, const char *sku);

/* Body parser and handlers of the routes above (ctx->sim is the registry). */
int api_sim_parse(struct api_request *req, struct api_parse_error *err);
void api_sim_start(const struct api_ctx *ctx, struct api_request *req,
                   struct api_reply *rep);
void api_sim_get(const struct api_ctx *ctx, struct api_request *req,
                 struct api_reply *rep);
void api_sim_stop(const struct api_ctx *ctx, struct api_request *req,
                  struct api_reply *rep);

#endif
