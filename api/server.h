/* server.h -- the HTTP front: a libmicrohttpd daemon plus a worker pool.
 *
 * One internal epoll thread owns every connection (thousands of idle keep-alive
 * connections cost a socket each, no thread). For each request it accumulates the
 * body (at most cfg->max_body_bytes, else 413 `payload_too_large`) and runs the
 * inline checks of routes.h. A request that needs Redis is handed to a worker pool
 * and its connection suspended, so a slow order (hold_ms, lock waits) blocks one
 * worker, never the event loop; the worker runs the handler on its own inv_conn,
 * stores the reply and resumes the connection, and the event loop sends it.
 * Orders have a pool of cfg->threads workers; the quick Redis calls (healthz,
 * admin, order lookups) a small one of their own, so they stay fast while every
 * order worker is waiting. Per-request state lives in MHD's con_cls, from the
 * request line (MHD's URI-log callback) to the request-completed callback, which
 * frees it.
 *
 * Before any route runs, the head is checked (400 `bad_header`: HTTP/1.1 without a
 * Host, two Hosts, Content-Lengths that disagree; 414 `uri_too_long`; 431
 * `headers_too_large`; 413 for an announced body over the limit) and the request
 * gets its X-Request-Id (the client's when valid, else 16 random hex characters),
 * which every reply of ours carries. Each finished request writes one access-log
 * line (log_access) from the completed callback. What libmicrohttpd answers by
 * itself, before any of this, is listed in server.c: it is HTML and has no id.
 *
 * The server also owns the dashboard's parts (api/events.h, api/simulate.h): the
 * event-stream publisher thread, whose streams it opens for GET /admin/events
 * (routes flagged API_ROUTE_STREAM), and the simulated-order runs.
 *
 * Shutdown (api_server_stop): stop accepting connections, tell the simulations to
 * stop, end every event stream (its shutdown event, then the end of the response),
 * drain the pools (every suspended connection is resumed with its reply; a request
 * arriving meanwhile on an open connection gets 503 `shutting_down`), then stop the
 * daemon, join the simulations and free everything.
 */
#ifndef API_SERVER_H
#define API_SERVER_H

#include <stddef.h>

#include "segments/inventory.h"
#include "service/config.h"

struct api_server;

/* Start the pools (one inv_conn per worker) and the daemon on
 * cfg->bind:cfg->port. `cfg` and `v` are borrowed and must outlive the server.
 * Returns NULL with `err` filled when the address cannot be bound or a thread
 * cannot be started. */
struct api_server *api_server_start(const struct cfg *cfg, inv *v, char *err,
                                    size_t errlen);

/* Shut down as described above and free the server. NULL is a no-op. */
void api_server_stop(struct api_server *s);

#endif
