/* link.h -- one pipelined asynchronous connection to one Redis node on a libevent
 * loop: the transport under async.c (which routes each call to a link: the only one
 * for a standalone Redis, the master of the call's slot for a cluster). Private to
 * segments/redis/.
 *
 * A link is used from its loop's thread only. Commands are written as they come;
 * every command queued during one turn of the loop goes out in one write.
 *
 * Answers. link_send hands a request over; its `done` runs exactly once, on the loop,
 * never from inside link_send: with the reply (which may be an error reply: the
 * caller decides what a MOVED or a WRONGTYPE means), or with NULL when the node gave
 * none -- refused, closed, or no reply within `timeout_ms` (hiredis 0.14.1 has no
 * command timeout, so the link keeps its own deadline, the oldest reply owed: when it
 * passes the connection is dropped, every command waiting on it is answered NULL and
 * a new one is made). A command whose connection the server closed under it (a
 * restart, CLIENT KILL) is sent once more on the next connection (unless marked
 * `once`): every script
 * recognises its own earlier run, so a reply lost on the wire does not turn into a
 * false answer. Scripts go by EVALSHA once the link has loaded them (SCRIPT LOAD on
 * every connection), by EVAL before that and after NOSCRIPT.
 *
 * Connection. Made at link_create and again after every failure, with a backoff (50
 * ms doubling to 1 s); AUTH and SELECT first when configured. A working connection
 * the server closes is made again at once, and commands meanwhile wait for it. While
 * no connection is up otherwise, a command brings the next attempt forward (to 50 ms
 * after the last one) and waits for it: answered NULL when that attempt fails.
 * Sentinel (`to->sentinel`): each attempt goes to the master the resolver names now
 * and sends ROLE first (not a master: dropped, the resolver asked again); when the
 * resolver names another master, the connection is dropped at the next command or
 * tick (what it owed answered NULL) and made again to the new one.
 * Failures go to the owner's error text and counters and to the seam's logger.
 */
#ifndef SEG_REDIS_LINK_H
#define SEG_REDIS_LINK_H

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <stdbool.h>

#include "segments/redis/async.h"
#include "segments/redis/cmd.h"

struct link;

/* What the links of one rda_conn share: its counters, statistics and last error. */
struct link_owner {
    struct rda_counters counts;
    struct rda_stats stats;
    char errstr[160];
};

/* Record a failure: the owner's error text and error counter, and the seam's log. */
void link_owner_error(struct link_owner *o, const char *what, const char *detail);

/* A request: embedded in the caller's own struct. The caller fills `cmd` and `done`;
 * the rest belongs to the link while the request is in it. */
struct lreq {
    struct rd_cmd cmd;
    /* The answer (see above); `r` is freed by hiredis after the call. The request is
     * the callee's again from here on (it may send it anew or free it). */
    void (*done)(struct lreq *q, redisReply *r);
    long long sent_ms;
    bool resent; /* sent again once after its connection was closed under it */
    bool setup;  /* the link's own (AUTH, SELECT, SCRIPT LOAD, ASKING) */
    bool once;   /* never sent again on a new connection: it means something on this
                    one only (a WAIT counts from its connection's last write) */
    bool unsent; /* answered NULL without having gone out: no connection to its node
                    could be made, so it cannot have run (set by the link) */
    struct link *l;
    struct lreq *prev, *next;
};

/* A link to `to` (host, port, AUTH, SELECT, timeout), connecting now. `owner` must
 * outlive it. Free with link_free on the loop's thread. */
struct link *link_create(struct event_base *base, const struct rd_target *to,
                         struct link_owner *owner);
/* Close; every request still in the link is answered NULL first. NULL is fine. */
void link_free(struct link *l);

/* Send `q` (see above). */
void link_send(struct link *l, struct lreq *q);
/* Send ASKING, so that the next command on this link may use a slot being imported. */
void link_asking(struct link *l);

/* Where the link connects. */
const char *link_host(const struct link *l);
int link_port(const struct link *l);
/* True while its connection is up. */
bool link_up(const struct link *l);

#endif
