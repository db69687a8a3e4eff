/* store.h -- the blocking Redis connection (rd_conn, calls.h): each call handed to the
 * asynchronous router (async.h) on a control event loop of the connection's own, and
 * waited for. Private to segments/redis/: the rest of the program sees only calls.h.
 *
 * One router. There is no second implementation here: the connection owns an
 * rda_conn (async.h) on a private event_base, turned by a thread of its own that is
 * started on the first call and stopped and joined by rd_conn_free. A call queues its
 * commands for that loop (a mutex and a pipe wake it), the loop sends them with
 * rda_raw_blocking, and the caller waits on a condition variable for the replies,
 * which the loop copies (hiredis frees an asynchronous reply after its callback).
 * So everything async.h promises holds for a blocking call too: EVALSHA, EVAL after
 * NOSCRIPT; a command whose connection the server closed under it (a restart, CLIENT
 * KILL) sent once more on a new one (every script recognises its own earlier run,
 * scripts.h); on a cluster, routing by the process's slot map (the target's `map`,
 * smap.h; one of the connection's own when it has none), MOVED (the route updated at
 * once, the map asked for) and ASK followed, up to 5 per command, TRYAGAIN,
 * CLUSTERDOWN and READONLY retried within the timeout; a command that never went out
 * (its node's connection could not be made) routed again by the newest map within
 * the timeout, so it reaches a promoted replica; a command that got no reply never
 * sent to another node (its outcome is unknown). Standalone with the process's map:
 * the mode is read at each call, and the connection routes as a cluster's once it
 * moved (an answer only a cluster gives asks the map to check at once).
 *
 * Timeouts. timeout_ms (the target's) bounds each command on the wire (the link's
 * deadline); the router answers every command itself, so the wait normally ends with
 * its answer. As a backstop the caller waits at most 2 * timeout_ms + 250 ms (a
 * command retried within the timeout, then sent once more): past that it is answered
 * NULL, and the loop frees the late reply.
 *
 * Every call returns NULL when Redis did not give a usable answer: I/O errors and
 * timeouts (the next call reconnects) and error replies (LOADING, OOM, a script
 * error). rd_conn_error says which; the connection's error counter counts it. A
 * non-NULL reply is the caller's to freeReplyObject once.
 */
#ifndef SEG_REDIS_STORE_H
#define SEG_REDIS_STORE_H

#include <hiredis/hiredis.h>

#include "segments/redis/calls.h"
#include "segments/redis/cmd.h"
#include "segments/redis/scripts.h"

/* True when the connection routes over a cluster (rd_conn_cluster, calls.h). */
bool store_cluster(rd_conn *c);

/* A cluster: the master that serves `slot` (the map waited for, up to the timeout,
 * when none has named it yet): a number that tells nodes apart (>= 0) with its
 * "host:port" into name[0..len), or -1. */
int store_slot_node(rd_conn *c, int slot, char *name, size_t len);

/* What every caller of the seam's blocking calls does:
 * store_call   sends `cmd` (taken over), and hands over the reply (NULL: no usable
 *              one);
 * store_script sends a script's `cmd` (taken over) and decodes its reply into `out`
 *              (to rd_reply_clear): 0, or -1 when Redis gave no usable answer;
 * store_step   sends a script's `cmd` (taken over) and answers its code, or -1; when
 *              `kept` is not NULL, the reply of a code in `keep` (a bit per code) is
 *              handed over there (the caller frees it), any other is freed.
 * A taken-over `cmd` is left empty (cmd_free on it is harmless). */
redisReply *store_call(rd_conn *c, struct rd_cmd *cmd);
int store_script(rd_conn *c, struct rd_cmd *cmd, struct rd_reply *out);
int store_step(rd_conn *c, struct rd_cmd *cmd, unsigned keep, redisReply **kept);

#endif
