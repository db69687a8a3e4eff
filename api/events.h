/* events.h -- GET /admin/events: live SKU states as Server-Sent Events.
 *
 *   GET  /admin/events?sku=A&sku=B...   text/event-stream (sku repeatable, 0..16 names)
 *   POST /admin/events/ticket           {"ticket","expires_in_s","path"}: a ticket for
 *                                       one stream, when an admin token is configured
 *
 * A stream is one `data:` line of JSON per update, an object with
 *   tick, time_ms, uptime_s, interval_ms
 *   skus: per SKU asked for, in the order of the names sorted, what GET
 *         /admin/skus/{sku} answers plus "orders_per_s" (order records per second over
 *         the last second, from Redis: every instance's orders), "outcomes" (this
 *         process's order outcomes for the SKU, by stat name) and "simulation" (the
 *         latest run of api/simulate.h, or null); or {"sku","error","detail"} when it
 *         cannot be read (unknown_sku, backend_unavailable)
 *   stats: the counters of GET /admin/stats (this process's)
 *   orders_per_s, attempts_per_s: this process's confirmed orders and all order
 *         answers per second over the last second
 *   streams: {"open","dropped"} event streams of this process
 * An update is sent when any of that changed (not counting the tick, times and
 * uptime), at most every EVENTS_INTERVAL_MS, and always first when the stream opens;
 * a comment line ": hb" is sent after EVENTS_HEARTBEAT_MS without one. At shutdown
 * every stream gets `event: shutdown` and then its end (the chunked terminator).
 *
 * Auth: with an admin token configured, a stream needs either Authorization: Bearer
 * <token> or ?ticket=T where T came from POST /admin/events/ticket (Bearer-
 * authenticated like the rest of /admin/) within the last EVENTS_TICKET_TTL_S seconds
 * and was not used before: EventSource cannot send headers. Tickets are this
 * process's: with several instances behind one address, open the stream on the
 * instance that issued the ticket. Errors: 400 invalid_field (a bad or 17th sku, an
 * unknown parameter), 401 unauthorized, 503 too_many_streams (below), 503
 * shutting_down.
 *
 * Slots. At most EVENTS_STREAMS_MAX streams are open. When all are, a new stream takes
 * the slot of the one idle the longest -- no update for EVENTS_IDLE_MS, the first
 * opened among equals --, which gets `event: evicted` and its end (as at shutdown;
 * the dashboard reconnects later). Only when every open stream had an update within
 * EVENTS_IDLE_MS, or EVENTS_STREAMS_MAX ended ones are still being drained, is it
 * refused 503 too_many_streams. So idle clients cannot hold every slot for good.
 *
 * Threads. One publisher thread per process, with its own inv_conn, wakes every
 * EVENTS_INTERVAL_MS while any stream is open (and sleeps otherwise): it reads each
 * SKU any stream watches once, formats one text per distinct SKU set and appends it
 * to the buffer of every stream of that set. The HTTP thread that owns a stream's
 * connection copies the buffer out in libmicrohttpd's content reader; when the buffer
 * is empty it suspends the connection (returning 0 bytes without suspending would make
 * 0.9.75's internal epoll loop spin), and the publisher resumes it when it appends. A
 * stream's buffer and state are guarded by its own mutex, the list of streams and the
 * tickets by the registry's; the publisher takes the registry's mutex, then a
 * stream's, then (resuming) libmicrohttpd's; the content reader a stream's, then
 * libmicrohttpd's. Nothing on the order path waits for a stream.
 *
 * Memory is bounded per client: a stream whose reader has not taken EVENTS_BACKLOG_MAX
 * bytes by the time the next update is due is dropped -- its buffer freed, its
 * response ended with an error the next time libmicrohttpd asks for data (a reader
 * that never reads at all is closed by the connection timeout).
 */
#ifndef API_EVENTS_H
#define API_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "api/routes.h"
#include "api/simulate.h"
#include "api/tickets.h"
#include "segments/inventory.h"

#define EVENTS_INTERVAL_MS 250
#define EVENTS_HEARTBEAT_MS 15000
#define EVENTS_SKUS_MAX 16
#define EVENTS_STREAMS_MAX 64
#define EVENTS_IDLE_MS 2000 /* a stream without an update this long may give way */
#define EVENTS_BACKLOG_MAX (64 * 1024)
#define EVENTS_TICKET_TTL_S 60
#define EVENTS_TICKETS_MAX API_TICKETS_MAX /* outstanding; api/tickets.h */

struct api_events;
struct MHD_Connection;
struct MHD_Response;

/* The registry and its publisher thread, which reads through `v` and reports `sim`'s
 * runs (both borrowed; they must outlive it). `admin_token` is copied; ""/NULL: the
 * streams are open. `started` is the server's start (uptime_s). Returns NULL with
 * `err` filled when the thread cannot be started. Free with api_events_free(). */
struct api_events *api_events_create(inv *v, struct api_sim *sim, const char *admin_token,
                                     struct timespec started, char *err, size_t errlen);

/* GET /admin/events on the HTTP thread that owns `conn`, after api_route_prepare():
 * a new response for the stream (the caller queues it and drops its reference), or
 * NULL with the error reply in `rep`. The publisher calls wake(wake_arg) after it
 * resumed the connection, so that the thread owning it runs its daemon. */
struct MHD_Response *api_events_open(struct api_events *ev, struct MHD_Connection *conn,
                                     void (*wake)(void *arg), void *wake_arg,
                                     const struct api_request *req,
                                     struct api_reply *rep);

/* Shutdown, before the daemon stops: stop the publisher, refuse new streams, send
 * every open stream its shutdown event and end it, and wait up to `wait_ms` for the
 * streams to be gone (those still there are closed with the daemon). */
void api_events_close(struct api_events *ev, int wait_ms);

/* Free the registry, once the daemon has stopped (every stream is gone). NULL: no-op. */
void api_events_free(struct api_events *ev);

/* True when an admin token is configured (streams need it or a ticket). */
bool api_events_need_auth(const struct api_events *ev);

/* POST /admin/events/ticket (ctx->events). */
void api_events_ticket(const struct api_ctx *ctx, struct api_request *req,
                       struct api_reply *rep);

/* The route table's handler of GET /admin/events: the server answers that route
 * through api_events_open(); should this run instead, it answers 500. */
void api_events_unrouted(const struct api_ctx *ctx, struct api_request *req,
                         struct api_reply *rep);

#endif
