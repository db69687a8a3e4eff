/* simulate.h -- the service's own load generator: real orders through the order path.
 *
 *   POST   /admin/skus/{sku}/simulate  {"orders": N, "concurrency": C, "qty": q}
 *          (parse.h: N 1..1000000, C 1..64 = 8, q 1..1000000 = 1): 202 with the run's
 *          status; 404 unknown_sku; 409 simulation_running while a run of the SKU is
 *          still going; 429 too_many_simulations when C more threads would pass
 *          API_SIM_THREADS_MAX; 503 shutting_down once the server stops
 *   GET    /admin/skus/{sku}/simulate  200 the status of the SKU's latest run;
 *          404 not_found when this process has none
 *   DELETE /admin/skus/{sku}/simulate  ask the run to stop: 200 with its status (state
 *          "stopping" until its threads are out); 404 not_found
 *
 * Status: {"sku","run","state","orders","concurrency","qty","sent","answered",
 * "elapsed_ms","outcomes":{"confirmed","replayed","sold_out","insufficient_stock",
 * "busy","backend_unavailable","unknown_sku","other"}}; state is "running",
 * "stopping", "finished" (every order answered) or "stopped".
 *
 * A run is C threads, each with its own inv_conn, that take order numbers 1..N from one
 * counter and place each with order_place() under the order id "sim-<run>-<n>" (run:
 * 12 random hex digits), exactly as POST /orders would: the orders are counted in
 * /admin/stats, /metrics and the SKU's own counters, and audited like any other. A
 * thread stops after the order it is placing when the run is stopped, so a stop takes
 * at most one order's time (hold_ms plus lock_wait_ms). At most one run per SKU goes at
 * once, and at most API_SIM_THREADS_MAX threads over all runs.
 *
 * Threads and ownership: the registry (struct api_sim, one per server) is guarded by
 * its mutex; a run's counters are atomics its threads write and anyone reads. The
 * threads of a run that has ended are joined by the next call that takes the
 * registry's mutex (start, get, stop, status) and, at the latest, by api_sim_free(),
 * which stops and joins every run. The registry keeps the latest API_SIM_RUNS_KEPT
 * ended runs for their status.
 */
#ifndef API_SIMULATE_H
#define API_SIMULATE_H

#include <jansson.h>

#include "api/routes.h"
#include "segments/inventory.h"

#define API_SIM_THREADS_MAX 128 /* simulated-order threads over all runs */
#define API_SIM_RUNS_KEPT 32    /* ended runs remembered for their status */

struct api_sim;

/* The registry for the process's domain handle `v` (borrowed; must outlive it).
 * Never NULL (aborts on out of memory). Free with api_sim_free(). */
struct api_sim *api_sim_create(inv *v);

/* Ask every run to stop and refuse new ones (503 shutting_down); returns at once. */
void api_sim_stop_all(struct api_sim *s);

/* Stop every run, join its threads and free the registry. NULL is a no-op. */
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
