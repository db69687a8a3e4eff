/* loop.h -- one event loop thread of the HTTP front: a libevent event_base that drives
 * its own libmicrohttpd daemon through the daemon's epoll fd, and the order engine
 * (segments/engine.h) that places the orders its connections bring.
 *
 * A loop is a shared-nothing shard: the daemon, the engine (its Redis connection,
 * its SKU table, its timers) and every order placed here belong to this thread. An
 * order lives and dies on its loop: the request handler starts it on the loop's
 * engine and suspends the connection; the engine's callback, on the same thread,
 * stores the reply, resumes the connection and kicks the loop, which runs the daemon
 * again. Other threads (the worker pools, the event-stream publisher) may resume a
 * connection of the loop, then wake it (api_loop_wake): the loop runs the daemon.
 *
 * Stopping: api_loop_quiesce stops accepting (the listening socket is shared by every
 * loop and closed by the caller), api_loop_stop waits for the orders in flight, then
 * ends the thread and frees everything.
 */
#ifndef API_LOOP_H
#define API_LOOP_H

#include <microhttpd.h>
#include <stddef.h>

#include "segments/engine.h"

struct api_loop;

/* Makes the loop's daemon: libmicrohttpd with MHD_USE_EPOLL and no thread of its
 * own, on the shared listening socket; called once on the caller's thread. */
typedef struct MHD_Daemon *(*api_loop_daemon_fn)(struct api_loop *l, void *arg);

/* Start loop number `index` of `count` (its engine on `v`, its daemon from `mk`).
 * NULL with `err` filled when the daemon, the loop or the thread cannot be made. */
struct api_loop *api_loop_start(inv *v, int index, int count, api_loop_daemon_fn mk,
                                void *arg, char *err, size_t errlen);

int api_loop_index(const struct api_loop *l);
engine *api_loop_engine(struct api_loop *l);

/* Run the daemon again soon (a connection was resumed on this thread). Loop thread. */
void api_loop_kick(struct api_loop *l);

/* Run fn(arg) on the loop's thread, soon, in the order posted (any thread). A call
 * posted after api_loop_stop has begun may never run. */
void api_loop_post(struct api_loop *l, void (*fn)(void *arg), void *arg);

/* Run the daemon again soon, from any thread: after resuming one of its connections
 * elsewhere (libmicrohttpd 0.9.75 does not wake an external epoll loop for that). */
void api_loop_wake(struct api_loop *l);

/* Stop accepting new connections (any thread but the loop's: it waits for the loop
 * to do it). */
void api_loop_quiesce(struct api_loop *l);

/* Wait until no order is in flight (at most `wait_ms`), end the thread, stop the
 * daemon, free. NULL is fine. */
void api_loop_stop(struct api_loop *l, int wait_ms);

#endif
