/* store.h -- one blocking Redis connection (to a node, or over a cluster's masters):
 * lazy connect, timeouts, script calls. Private to
 * segments/redis/: the rest of the program sees only calls.h.
 *
 * A connection is made on first use with the configured timeout, which also bounds
 * every command, so a hung Redis costs at most timeout_ms per call. Each connection
 * loads the scripts once (SCRIPT LOAD) and calls them by SHA, falling back to EVAL
 * when Redis lost its script cache (a restart, SCRIPT FLUSH). A command whose
 * connection the server closed (a restart, CLIENT KILL) is sent once more on a new
 * one: every script recognises its own earlier run (scripts.h), so a resend after a
 * lost reply reports what really happened.
 *
 * A cluster (`cluster` in the target: host:port is a seed). The connection routes by
 * the process's slot map (the target's `map`, smap.h; one of its own when none),
 * taking its newest snapshot at each command (the first map waited for on first use),
 * keeps one connection per node it has needed, and sends each command to the master
 * of its first key's slot (cmd.h). MOVED (the route is updated at once and the map
 * asked for) and ASK (ASKING first) are followed, up to 5 per command; TRYAGAIN,
 * CLUSTERDOWN and READONLY are retried every 20 ms within the timeout. A failed
 * command asks for the map again. One that never went out (its node's connection
 * could not be made; a connection the server closed while idle is dropped before
 * use) waits, within the timeout, for that map and goes to the slot's new master
 * when the map moved it. A command that got no reply is never sent to another node
 * (its outcome is unknown).
 *
 * Standalone, with the process's map in the target: the connection reads the mode
 * at each command (calls.h rd_smap_create) and routes as a cluster's once it moved;
 * an answer only a cluster gives asks the map to check at once.
 *
 * Every call returns NULL when Redis did not give a usable answer: I/O errors and
 * timeouts (the connection is dropped; the next call reconnects) and error replies
 * (LOADING, OOM, a script error). rd_conn_error says which; the connection's error
 * counter counts it. A non-NULL reply is the caller's to freeReplyObject once.
 */
#ifndef SEG_REDIS_STORE_H
#define SEG_REDIS_STORE_H

#include <hiredis/hiredis.h>

#include "segments/redis/calls.h"
#include "segments/redis/cmd.h"
#include "segments/redis/scripts.h"

/* True when the connection routes over a cluster's masters. */
bool store_cluster(rd_conn *c); /* read at each command: rd_conn_cluster (calls.h) */

/* A cluster: the index of the node that serves `slot` (the map fetched first when
 * none is known), or -1; how many node indexes there are; node i's "host:port". */
int store_slot_node(rd_conn *c, int slot);
int store_nodes(const rd_conn *c);
const char *store_node_name(const rd_conn *c, int i, char *buf, size_t len);

/* 0 when connected (scripts loaded), -1 with the error set. */
int store_connect(rd_conn *c);

/* Close the connection (if any); the next call reconnects. */
void store_drop(rd_conn *c);

/* Send `cmd` (a script by EVALSHA, EVAL after NOSCRIPT) and wait for its reply. */
redisReply *store_run(rd_conn *c, struct rd_cmd *cmd);

/* What every caller of the seam's blocking calls does with store_run:
 * store_call   sends `cmd`, frees it, and hands over the reply (NULL: no usable one);
 * store_script sends a script's `cmd` (freed) and decodes its reply into `out` (to
 *              rd_reply_clear): 0, or -1 when Redis gave no usable answer;
 * store_step   sends a script's `cmd` (freed) and answers its code, or -1; when `kept`
 *              is not NULL, the reply of a code in `keep` (a bit per code) is handed
 *              over there (the caller frees it), any other is freed. */
redisReply *store_call(rd_conn *c, struct rd_cmd *cmd);
int store_script(rd_conn *c, struct rd_cmd *cmd, struct rd_reply *out);
int store_step(rd_conn *c, struct rd_cmd *cmd, unsigned keep, redisReply **kept);

/* Send cmds[0..n-1] (plain commands) and read their replies into out[0..n-1]: in one
 * round trip to a standalone Redis, one by one (each to its slot's master) on a
 * cluster. 0, or -1 with nothing to free. */
int store_pipeline(rd_conn *c, int n, struct rd_cmd *cmds, redisReply **out);

#endif
