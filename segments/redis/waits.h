/* waits.h -- WAITs off the order path: for one Redis node, a second connection (a
 * link, link.h) that carries nothing but WAITs, sent in rounds that answer every
 * caller waiting at the time. Private to segments/redis/ (async.c makes one per node
 * on its first WAIT there).
 *
 * Why. A WAIT holds up its connection until a replica answers or its timeout passes,
 * and Redis answers a connection's commands in order: on the connection the orders
 * use, each WAIT stalled every order behind it, of every SKU, and two in a row
 * outlasted that connection's reply deadline and dropped it (issue 21 item 6).
 *
 * What a WAIT here covers. WAIT counts the replicas that acknowledged the replication
 * offset its own connection reached (the client's `woff`: Redis 7.0.15 sets it after
 * every command, newer sources only after one that was propagated), not the master's
 * offset. So a round first writes a mark (keys.h inv:ack, in the slot of a caller's
 * write, so on its node), then WAITs, pipelined on this connection: the mark's offset
 * comes after every write whose reply reached the caller before it asked, so an
 * answer n means n replicas have each of those writes. Neither command is ever sent
 * again on a new connection (link.h `once`): a WAIT there would count from elsewhere.
 *
 * Rounds. At most one is out at a time: callers who ask while one is out join the
 * next, sent when it answers, with the longest timeout asked (at most half the link's
 * reply deadline, so that the link never drops for a WAIT). A caller waits for at
 * most two WAITs; the connection owes at most one.
 *
 * Answers. Each caller's `fn` runs exactly once, on the loop, never from inside
 * waits_ask: rc 0 with the replicas, or rc -1 when the mark or the WAIT had no answer
 * or an error reply (a MOVED: the slot moved under the write; the outcome is
 * unknown).
 */
#ifndef SEG_REDIS_WAITS_H
#define SEG_REDIS_WAITS_H

#include <event2/event.h>

#include "segments/redis/link.h"

struct waits;

/* The WAITs of the node `to` (host, port, AUTH, SELECT, timeout), connecting now;
 * `owner` (whose counters and error text the connection shares) must outlive it.
 * Free with waits_free on the loop's thread. */
struct waits *waits_create(struct event_base *base, const struct rd_target *to,
                           struct link_owner *owner);
/* Close; every caller still waiting is answered -1 first. NULL is fine. */
void waits_free(struct waits *w);

/* How many replicas have every write this node answered before now: WAIT 1
 * timeout_ms, after a mark in cluster slot `slot` (the slot of the caller's write).
 * fn(arg, rc, replicas) as above. */
void waits_ask(struct waits *w, int slot, int timeout_ms,
               void (*fn)(void *arg, int rc, int replicas), void *arg);

#endif
