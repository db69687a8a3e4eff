/* zksession.h -- one ZooKeeper session driven by a libevent loop: the single-threaded
 * C client's socket and timer, its reconnects, and a new session after expiry. Private
 * to segments/zookeeper/ (the lock recipe, zklock.c and zkstep.c, sits on it).
 *
 * Why the single-threaded client. libzookeeper_mt runs its own I/O and completion
 * threads: every completion and watch would arrive on a thread of the library and
 * have to be handed over to the loop that owns the lock's caller (a queue, a lock, a
 * wake-up), and its synchronous calls would tempt blocking on a loop. libzookeeper_st
 * does no I/O of its own: `zookeeper_interest` names the socket, the events it waits
 * for and a timeout; `zookeeper_process` does the I/O and runs the completions and
 * watchers right there, on the caller's thread. So a session is one more pair of
 * libevent events (the fd, and a timer for pings and the receive deadline) on the
 * loop, re-armed after every call, and everything it does happens on that loop.
 *
 * Driving. zks_pump asks zookeeper_interest again and re-registers the fd event (the
 * client may have closed the socket and opened another with the same number, so the
 * event is always deleted and added again) and the timer. It runs after every
 * zookeeper_process and must be called by the owner after it queued requests (they
 * go out at once when the socket takes them; else the write interest sends the rest).
 *
 * States, as the owner sees them (`zks_handlers.session`):
 *   ZKS_CONNECTED     the session is connected (first time or again): send requests.
 *   ZKS_DISCONNECTED  the connection was lost. The session, and every ephemeral node
 *                     of it, lives on in the server until the session timeout passes
 *                     without the client reconnecting; the client keeps trying.
 *   ZKS_EXPIRED       the session ended: the server expired it (told at a reconnect),
 *                     auth failed, or the connection stayed down for a whole session
 *                     timeout (the server has expired it by then, unless it was down
 *                     itself). The old handle is closed on the next turn of the loop
 *                     (its pending completions then run with ZCLOSING) and a new
 *                     session is started with the same timeout.
 * Handlers run inside the client (from zookeeper_process or zookeeper_interest): they
 * must not call the client nor free the session; they record and schedule.
 *
 * Node watches set through zks_watcher/zks_watch_ctx arrive at `handlers.node`.
 * Errors: zks_create fails only for a malformed target. Out of memory aborts.
 */
#ifndef SEG_ZK_SESSION_H
#define SEG_ZK_SESSION_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zookeeper/zookeeper.h>

typedef struct zks zks;

enum zks_event { ZKS_CONNECTED, ZKS_DISCONNECTED, ZKS_EXPIRED };

struct zks_handlers {
    void (*session)(void *arg, enum zks_event ev);
    void (*node)(void *arg, int type, const char *path); /* a node watch fired */
    void *arg;
};

/* A session for `hosts` ("HOST:PORT[,HOST:PORT...]") on `base`; nothing is connected
 * before zks_start. NULL with a reason in err when `hosts` is malformed. */
zks *zks_create(struct event_base *base, const char *hosts, const struct zks_handlers *h,
                char *err, size_t len);

/* Close the session (its ephemeral nodes are deleted by the server at once; pending
 * completions run with ZCLOSING before this returns) and free. NULL is fine. */
void zks_free(zks *s);

/* Open the session, asking the server for `timeout_ms`, unless one is open already. */
void zks_start(zks *s, int timeout_ms);

/* Re-arm the fd event and the timer (see above). */
void zks_pump(zks *s);

/* The current client handle (NULL before zks_start or between an expiry and the new
 * session); valid until the next turn of the loop. */
zhandle_t *zks_handle(const zks *s);
bool zks_connected(const zks *s);
/* Monotonic ms since the connection has been down (0 while connected, or before the
 * first attempt). */
long long zks_down_since(const zks *s);
/* Counts up at every new session; the session its nodes belong to. */
uint64_t zks_generation(const zks *s);
/* The negotiated session timeout (the asked one before the first connect). */
int zks_timeout_ms(const zks *s);
/* The session's id and password, once connected: 0, else -1. */
int zks_client_id(const zks *s, int64_t *id, char passwd[16]);
/* Sessions made (1 after the first start), and how many of them expired. */
uint64_t zks_sessions(const zks *s);

/* The watcher and its context for zoo_awexists on this session. */
watcher_fn zks_watcher(void);
void *zks_watch_ctx(zks *s);

#endif
