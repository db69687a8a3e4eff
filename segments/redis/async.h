/* async.h -- the Redis seam on an event loop: one handle, and one typed call per
 * script or read (the same calls as calls.h), answered through a callback with C
 * values.
 *
 * A handle lives on one libevent event_base and is used from that loop's thread only.
 * Under it are links (link.h), pipelined connections to one node each: every command
 * queued during one turn of the loop goes out in one write, so many orders share a
 * round trip (rda_stats counts commands and writes).
 *
 * Replies. Every call's callback runs exactly once, on the loop, never from inside
 * the call itself. `rc` is 0 with the decoded reply, or -1 when Redis gave none:
 * refused, closed, an error reply, or no reply within `timeout_ms` (the link's own
 * deadline; the outcome is unknown and the caller's ids make a retry safe). A command
 * whose connection the server closed under it is sent once more (link.h).
 *
 * Routing. A standalone Redis is one link. With `cluster` set in the target, host:port
 * is a seed of a Redis Cluster: the handle asks it for the slot map (CLUSTER SHARDS,
 * or CLUSTER SLOTS before 7.0) and sends each command to the master of its first
 * key's slot (cmd.h; a command's keys must share it), over one link per master, made
 * as the map names them. A command whose slot is not known yet goes to the seed. The
 * map is asked for again on MOVED, on a link's failure and every 5 s, at most every
 * 100 ms. Error replies that redirect are followed, never answered:
 *   MOVED        the slot lives elsewhere: the command goes there, and so does the
 *                route of the slot at once (before the new map arrives);
 *   ASK          the slot is migrating: ASKING, then the command, on that node; the
 *                route stays;
 *   TRYAGAIN     (a multi-key command mid-migration), CLUSTERDOWN, READONLY (a
 *                demoted master): sent again after 5..25 ms, while the call is
 *                younger than timeout_ms; CLUSTERDOWN and READONLY refresh the map.
 * A standalone handle with the process's map in its target follows the mode when it
 * becomes a cluster, at the caller's say (rda_mode_follow).
 * At most 5 MOVED/ASK per call. A command whose link failed is answered -1, never
 * sent to another node: its outcome is unknown (rda_raw_blocking routes one that
 * never went out again). NOSCRIPT is answered per node, which
 * has its own script cache (link.h).
 *
 * Connection. Each link connects at once and again after failures, with a backoff;
 * a call to a link that is down waits for its next attempt (link.h). Failures and
 * reconnects go to the seam's logger (rd_set_logger).
 */
#ifndef SEG_REDIS_ASYNC_H
#define SEG_REDIS_ASYNC_H

#include <event2/event.h>
#include <stdatomic.h>

#include "segments/redis/calls.h"
#include "segments/store.h"

typedef struct rda_conn rda_conn;

struct rda_stats {
    long long commands; /* sent */
    long long writes;   /* times the connection had output to write: commands/writes
                           is the mean pipeline batch */
    long long timeouts; /* connections dropped at the reply deadline */
    long long connects; /* connections made (the first included) */
    /* A cluster: */
    long long moved;         /* MOVED replies followed (the map was stale) */
    long long asked;         /* ASK replies followed (a slot in migration) */
    long long retried;       /* TRYAGAIN, CLUSTERDOWN, READONLY: sent again later */
    long long map_refreshes; /* slot map requests sent */
    int links;               /* connections to nodes (1 for a standalone Redis) */
};

/* Process-wide counters a connection adds to (any may be NULL): failures, commands
 * sent, writes (as in rda_stats), so that other threads can read them. */
struct rda_counters {
    _Atomic long long *errors, *commands, *writes;
};

/* A connection on `base`, connecting now; `counts` (may be NULL) is copied. Free
 * with rda_free on the loop's thread. */
rda_conn *rda_create(struct event_base *base, const struct rd_target *to,
                     const struct rda_counters *counts);
/* Close every link; every call still owed a reply is answered -1 first. NULL is
 * fine. */
void rda_free(rda_conn *c);
/* The last failure, for logs and error details ("" when none). */
const char *rda_error(const rda_conn *c);
void rda_stats(const rda_conn *c, struct rda_stats *out);

/* Callbacks: the store seam's (segments/store.h), with its C types; the codes of
 * struct store_reply are the RD_* codes. `r` and what it points to are valid during
 * the call only, but a callback may take r->record (set it to NULL). */
typedef store_reply_fn rda_reply_fn;
typedef store_multi_fn rda_multi_fn;
typedef store_int_fn rda_int_fn;
typedef store_meta_fn rda_meta_fn;
typedef store_record_fn rda_record_fn; /* record: callee frees */
typedef store_stocks_fn rda_stocks_fn;
typedef store_found_fn rda_found_fn;
typedef store_intents_fn rda_intents_fn;

/* The calls of calls.h, with the same arguments and codes. `fn` may be NULL when
 * nobody waits for the answer (a release on the way out). */
void rda_ping(rda_conn *c, rda_int_fn fn, void *arg);
/* Send `cmd` (built by the caller, taken over) and hand its reply as it is to `fn`
 * (NULL: none came), for a decoder of the seam's own (holds.h). */
struct redisReply;
struct rd_cmd;
typedef void (*rda_raw_fn)(void *arg, const struct redisReply *r);
void rda_raw(rda_conn *c, struct rd_cmd *cmd, rda_raw_fn fn, void *arg);
/* As rda_raw, for a caller that waits for the answer (store.h's blocking connection):
 * on a cluster, a command that never went out (no connection to its node could be
 * made: a master gone) is routed again every 5..25 ms by the newest map, within
 * timeout_ms, instead of answered NULL at once -- so it reaches the promoted replica
 * once the map names it. One that went out and got no reply is answered NULL. */
void rda_raw_blocking(rda_conn *c, struct rd_cmd *cmd, rda_raw_fn fn, void *arg);
/* Send `cmd` (a script's, taken over) and decode its {code, value-or-record} as the
 * typed calls do: a step of a multi-step call (cancel.c). */
void rda_step(rda_conn *c, struct rd_cmd *cmd, rda_reply_fn fn, void *arg);
void rda_meta_read(rda_conn *c, const char *sku, rda_meta_fn fn, void *arg);
/* As rd_record_read, for a caller that knows the SKU it expects and that SKU's epoch:
 * a record of `sku` from another epoch was left behind by a reset, and reads as none.
 * (A record of another SKU is answered as it is.) */
void rda_record_read(rda_conn *c, const char *id, const char *sku, long long epoch,
                     rda_record_fn fn, void *arg);
void rda_stocks_read(rda_conn *c, const char *sku, int n, rda_stocks_fn fn, void *arg);
/* Token "": a lock service's hold, `fence` registered (0: one issued): OK's fence. */
void rda_acquire(rda_conn *c, const char *sku, long long epoch, int i, const char *id,
                 long long qty, const char *token, int ttl_ms, long long fence,
                 rda_reply_fn fn, void *arg);
/* `until`: on a cluster, the end of the id's claim (rda_claim; 0 for a fresh id):
 * the segment refuses (STALE) past it. Returns true when the DEDUCT writes the
 * record too: always on a standalone Redis; on a cluster for an unclaimed id in the
 * segment's slot (rda_id_for_segment). Otherwise it writes none, and the caller
 * confirms it (rda_confirm) once the deduction is OK. `keep`: an OK leaves the lock
 * held, for the holder's next order (only where the DEDUCT writes the record). */
bool rda_deduct(rda_conn *c, const char *sku, long long epoch, int i, const char *token,
                long long fence, const char *attempt, const char *id, long long qty,
                const char *record, long long until, bool keep, rda_reply_fn fn,
                void *arg);
/* DEDUCT_BATCH (store.h deduct_batch, lua/deduct_batch.lua): false, sending nothing,
 * when a record of `b` is not in segment i's slot. */
bool rda_deduct_batch(rda_conn *c, const char *sku, long long epoch, int i,
                      const char *token, long long fence, int n,
                      const struct store_batch_order *b, store_batch_fn fn, void *arg);
/* value: 1 taken (ours), 0 held by another token. */
void rda_lock(rda_conn *c, const char *sku, int i, const char *token, int ttl_ms,
              rda_int_fn fn, void *arg);
/* value: 1 done, 0 not ours. */
void rda_release(rda_conn *c, const char *sku, int i, const char *token, rda_int_fn fn,
                 void *arg);
void rda_renew(rda_conn *c, const char *sku, int i, const char *token, int ttl_ms,
               rda_int_fn fn, void *arg);
/* DEDUCT_MULTI: all or nothing, fenced by every token. Codes: OK (stocks[j] = stock
 * left), SHORT (stocks[j] = stock held), FENCED, STALE, EXISTS; `stocks` has p->n
 * entries (filled for OK and SHORT). A standalone Redis only (one script, every
 * segment's keys); a cluster deducts part by part (rda_deduct_part). */
void rda_deduct_multi(rda_conn *c, const char *sku, long long epoch, const char *id,
                      const char *record, const char *attempt, const struct rd_parts *p,
                      rda_multi_fn fn, void *arg);
/* ADJUST (store.h `adjust`) on a standalone Redis: one script (lua/adjust.lua),
 * `fence` NULL: fenced by the tokens, else by a lock service's fences. (A cluster's is
 * adjust.h rda_adjust_cluster: the store's op chooses.) */
void rda_adjust(rda_conn *c, const char *sku, long long epoch, int segments,
                const char *const *tok, const long long *fence, const char *op,
                long long add, long long limit, const char *rid, const char *sig,
                rda_reply_fn fn, void *arg);

/* ---- the order path on a Redis Cluster (lua/claim.lua, confirm.lua) ------------
 * The record of an order lives in its id's slot, its deduction in its segment's: so
 * an order with a client id claims the id first (one attempt at a time), and its
 * record is written after its deduction. A fresh id is made for its segment's slot
 * instead, and its record written by the deduction itself. */

/* True when the handle routes over a cluster. */
bool rda_cluster(const rda_conn *c);
/* A cluster: the master that serves `slot` by the newest map (the process's, when the
 * target has one): a number that names it among this handle's nodes (>= 0) with
 * "host:port" into name[0..len); -1 ("") when no map has named one yet, or standalone. */
int rda_slot_master(rda_conn *c, int slot, char *name, size_t len);
/* The process's mode (the target's map, calls.h) became a cluster and this handle
 * still routes as standalone: rda_mode_behind. rda_mode_follow makes it route over
 * the cluster from its next call on (the map asked for at once); the caller does so
 * when none of its multi-call operations is under way, since an operation begun
 * standalone must not end as a cluster's. Neither changes anything otherwise. An
 * answer only a cluster gives (MOVED, CROSSSLOT, ...) to a standalone handle asks
 * the map to look at once. */
bool rda_mode_behind(const rda_conn *c);
void rda_mode_follow(rda_conn *c);
/* A cluster: rewrite the end of the fresh order id `id` (32 hex digits) so that its
 * record lives in segment i's slot (slots.h rd_name_for_slot), where the DEDUCT
 * writes it with the deduction, in one script; a standalone Redis: nothing to do. */
void rda_id_for_segment(rda_conn *c, const char *sku, int i, char *id);
/* CLAIM order `id` for `attempt` for lease_ms (`dead`: the attempt of a dead claim
 * being taken over, or NULL), with `plan` (a multi-segment order's, rd_plan_build;
 * RD_PLAN_KEEP: the claim's own; NULL: none); `dead_epoch`: the epoch of a record
 * the caller found dead (0: none). Codes: OK (value = the claim's end, for
 * rda_deduct), EXISTS (record), STALE (value = the epoch of a record of another
 * epoch than `epoch`: read the settings again; still another: claim naming it dead),
 * BUSY (another attempt holds it), MISSING (record = the attempt of a claim that ran
 * out without a record, plan = its plan or "": claim naming it, then find its order
 * or, with a plan, undo it). */
void rda_claim(rda_conn *c, const char *id, const char *attempt, const char *sku,
               long long epoch, int lease_ms, const char *dead, const char *plan,
               long long dead_epoch, rda_reply_fn fn, void *arg);
/* CONFIRM: write `record` for `id` under the claim of `attempt` (or, record NULL or
 * "", give the claim up). Codes: OK, STALE (another attempt holds the claim). */
void rda_confirm(rda_conn *c, const char *id, const char *attempt, const char *record,
                 const char *sku, long long epoch, rda_reply_fn fn, void *arg);
/* Multi-segment orders (calls.h): the id added to (or taken out of) the intents set
 * (value unused); one part deducted as rda_deduct does, `first` for the order's first
 * segment; a plan undone, every part at once (value = the units given back; -1 when
 * any part had no answer). rda_undo returns -1, calling nothing, when `plan` is not
 * one. */
void rda_intent(rda_conn *c, const char *id, bool add, rda_int_fn fn, void *arg);
void rda_deduct_part(rda_conn *c, const char *sku, long long epoch, int i,
                     const char *token, long long fence, const char *id, long long qty,
                     long long until, bool first, rda_reply_fn fn, void *arg);
int rda_undo(rda_conn *c, const char *id, const char *plan, rda_int_fn fn, void *arg);
/* The intents set's ids added before `before_ms` (the wall clock, ms since the epoch),
 * oldest first, at most `limit`, each with the SKU and epoch of its claim when it has
 * a claim with a plan (store.h intents_due; intents.c): one read of the set, then one
 * of each id's claim. -1 (n 0) when any read had no answer. */
void rda_intents_due(rda_conn *c, long long before_ms, int limit, rda_intents_fn fn,
                     void *arg);
/* WAIT 1 timeout_ms on the node that holds segment i of `sku` (and, on a cluster,
 * on the one that holds the record of `id`, when that is another; i = -1: on that
 * one only, as after a claim; id NULL: on the segment's only): value = how many replicas
 * have every write those nodes answered before this call (the least of the two). The
 * WAITs go on a second connection per node (waits.h), never on the one the other calls
 * share, so they hold nothing up but each other; timeout_ms is capped at half the Redis
 * timeout, and the answer can take two of them (a round already out is not waited on). */
void rda_wait(rda_conn *c, const char *sku, int i, const char *id, int timeout_ms,
              rda_int_fn fn, void *arg);
/* As rda_wait, on the nodes of keys[0..n-1] (n >= 1; WAITs per node, waits.h): the
 * fewest replicas any of them reached. */
void rda_wait_keys(rda_conn *c, int n, char *const *keys, int timeout_ms, rda_int_fn fn,
                   void *arg);
/* RESET (store.h reset, the same arguments and codes; calls.h struct rd_reset, `to`
 * and its strings the caller's until fn): on a standalone Redis one script
 * (lua/reset.lua); on a cluster the steps of reset.c (BEGIN, one per segment, COMMIT,
 * the SKU set), each on a replica first with to->wait_ms; then the records of the old
 * segments' orders dropped a page at a time (best effort) before the answer. A new
 * SKU's salt (to->salt < 0) is chosen from the handle's slot map. */
void rda_reset(rda_conn *c, const char *sku, long long old_epoch, int old_segments,
               const struct rd_reset *to, const char *rid, const char *sig,
               rda_reply_fn fn, void *arg);
/* CANCEL (store.h cancel, the same arguments and codes): on a standalone Redis one
 * script (lua/cancel.lua); on a cluster the steps of cancel.c, one slot at a time. */
void rda_cancel(rda_conn *c, const char *placed, long long epoch, const char *id,
                const char *cancelled, const char *expected, const struct rd_parts *p,
                int wait_ms, rda_reply_fn fn, void *arg);
/* The first of segments 0..n-1 whose orders hash holds `id`: seg and qty, or seg -1
 * when none does. One HGET per segment. */
void rda_find_order(rda_conn *c, const char *sku, int n, const char *id, rda_found_fn fn,
                    void *arg);

#endif
