/* calls.h -- the Redis seam: a connection, and one typed call per script or read.
 *
 * Everything that knows Redis lives in segments/redis/: key names (keys.h), Lua
 * (the lua/ files, scripts.c), the connections (async.h on an event loop; store.h, the
 * blocking one, waits on that same code) and the reply shapes (proto_reply.c). The rest
 * of the program passes C values in and gets C values back; no redisReply, key or Lua
 * crosses this header. Each call here is blocking on its connection (a thread's own).
 *
 * Results. Every call returns -1 when Redis gave no usable answer (refused, reset
 * twice, timed out, an error reply; rd_conn_error says which, the connection's error
 * counter counts it, and the next call reconnects); otherwise what it documents.
 * Script calls fill a `struct rd_reply` whose `code` is one of the RD_* codes, the
 * same numbers the Lua returns (scripts.c splices them in).
 *
 * Every script that writes a SKU carries what the caller believes of it (its epoch,
 * and for the scripts that span the SKU its segment count) and refuses with RD_STALE
 * when Redis says otherwise. Every script is idempotent against itself: sent again
 * after a lost reply it recognises its own earlier work (lock token, attempt id,
 * request id) and reports what really happened.
 */
#ifndef SEG_REDIS_CALLS_H
#define SEG_REDIS_CALLS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/names.h"

/* Script reply codes, as numbers so that scripts.c can splice them into Lua:
 *   RD_OK        done
 *   RD_BUSY      ACQUIRE: the lock is held by another token
 *   RD_SHORT     the segment(s) hold less than asked; value/stocks: what they hold
 *   RD_EXISTS    the order id is recorded already; record: that record (RESET
 *                create only: the SKU exists)
 *   RD_MISSING   the segment (CANCEL: the order; RESET delete: the SKU) is absent
 *   RD_FENCED    a token no longer owns its lock: nothing written
 *   RD_STALE     the SKU (or the order) is not what the caller believed: nothing
 *                written; re-read and try again
 *   RD_CONFLICT  the request id was used for another admin write
 *   RD_LIMIT     ADJUST: the restock would pass the stock limit
 *   RD_REPLAYED  the request id was applied already: nothing done again
 *   RD_NOT_REPLICATED  (the seam's own, no script answers it) durability "replicated"
 *                on a cluster: a step of a multi-step call (adjust, reset; a cancel,
 *                async.h rda_cancel) reached no replica in time (WAIT), so the call
 *                stopped before its next step (see adjust.h, reset.c)
 *   RD_MISMATCH  RESET: the SKU is not the version the caller names (struct
 * rd_reset.expect)
 */
#define RD_OK 0
#define RD_BUSY 1
#define RD_SHORT 2
#define RD_EXISTS 3
#define RD_MISSING 4
#define RD_FENCED 5
#define RD_STALE 6
#define RD_CONFLICT 7
#define RD_LIMIT 8
#define RD_REPLAYED 9
#define RD_NOT_REPLICATED 10
#define RD_MISMATCH 11

typedef struct rd_conn rd_conn;
typedef struct rd_smap rd_smap;
typedef struct rd_sentinel rd_sentinel;

struct rd_target {
    const char *host; /* copied; ignored when unix_path is set */
    int port;
    const char *unix_path; /* a unix socket instead of TCP, or NULL/""; copied */
    const char *user;      /* ACL user for AUTH, or NULL/"" (the default user); copied */
    const char *password;  /* AUTH on every (re)connect when set; copied */
    int db;                /* SELECT on every (re)connect when not 0 */
    int timeout_ms;        /* connect and per-command timeout */
    bool cluster;          /* host:port is a seed of a Redis Cluster (async.h routes) */
    rd_smap *map;          /* the process's slot map that connections share and its
                              mode (borrowed: outlives them), or NULL: a cluster
                              connection makes its own, a standalone one stays so */
    rd_sentinel *sentinel; /* Sentinel: every (re)connect goes to the master these
                              name, host and port ignored, and checks ROLE; a change
                              of master drops a connection to the old one (borrowed:
                              outlives the connections), or NULL */
};

/* One Sentinel resolver per process (sentinel.h): the current master of `name` as
 * the sentinels at `sentinels` ("host:port,host:port", "[v6]:port" too) say, AUTH
 * `password` (the sentinels' own, or NULL/"") on each connection to a sentinel,
 * `timeout_ms` per connect and command. Asks once before it returns (no answer is
 * not an error: the thread keeps asking); NULL with err set when the list does not
 * parse. Free after the last connection that uses it. */
struct rd_sentinel_opts {
    const char *sentinels;
    const char *name;
    const char *password;
    int timeout_ms;
};
rd_sentinel *rd_sentinel_create(const struct rd_sentinel_opts *o, char *err,
                                size_t errlen);
void rd_sentinel_free(rd_sentinel *s);

/* One slot map per process (smap.h): every connection made with it in its target
 * routes by the newest map, which one thread refreshes for all of them. It also
 * holds the process's mode: a cluster (seed->cluster), or standalone until the seed
 * says it is a cluster node (the thread asks INFO cluster when a connection met an
 * answer only a cluster gives, and every 5 s after rd_smap_unsure); then a cluster
 * for good. `seed` as
 * for a connection (its strings copied); NULL for a unix socket (never a cluster).
 * Free after the last connection that uses it. rd_smap_cluster: the mode now (one
 * atomic load; NULL: false). */
rd_smap *rd_smap_create(const struct rd_target *seed);
void rd_smap_free(rd_smap *m);
bool rd_smap_cluster(rd_smap *m);
/* Standalone because no seed answered at start (a guess): ask INFO cluster every
 * 5 s until one answers too. NULL is fine. */
void rd_smap_unsure(rd_smap *m);

/* Which of `to` (host:port) and the seeds in `seeds` ("host:port,host:port", may be
 * NULL) answers first, and whether it is a Redis Cluster node: fills `to->host` (into
 * host[0..hostlen), `to->port` and `to->cluster` from the first that answers and
 * returns 0, or -1 when none does (`to` unchanged). `to->cluster` already true is
 * kept. A unix socket is asked nothing: 0, standalone. Blocking. */
int rd_pick_seed(struct rd_target *to, const char *seeds, char *host, size_t hostlen,
                 char *err, size_t errlen);

/* Where the seam reports what an operator should see: every failure (`failure`
 * true: refused, timed out, AUTH, OOM, LOADING, NOSCRIPT, ...) with `what` naming
 * the step, and a connection made again after a failure (`failure` false). Called
 * from whichever thread owns the connection; the function must be thread-safe and
 * should rate-limit by `what`. Set once, before any connection is used. */
typedef void (*rd_log_fn)(bool failure, const char *what, const char *detail);
void rd_set_logger(rd_log_fn fn);
/* Hand a failure or a reconnect to that logger, if any. */
void rd_log(bool failure, const char *what, const char *detail);

/* A connection, made lazily on first use. `errors` (may be NULL) counts failures. */
rd_conn *rd_conn_create(const struct rd_target *to, _Atomic long long *errors);
void rd_conn_free(rd_conn *c);
/* The last failure, for logs ("" when none). */
const char *rd_conn_error(const rd_conn *c);
/* True when the connection routes over a cluster: its target said so, or the
 * process's mode (the target's map) has become a cluster since. */
bool rd_conn_cluster(rd_conn *c);

struct rd_reply {
    int code;        /* RD_* */
    long long value; /* OK/BUSY/SHORT: a segment's stock; ADJUST OK: the new gen */
    char *record;    /* EXISTS: the order record (JSON); CLAIM MISSING: the dead claim's
                        attempt (malloc'd; rd_reply_clear) */
    char *plan;      /* CLAIM MISSING: the dead claim's plan, "" for none (malloc'd) */
    long long fence; /* ACQUIRE OK of a lock service's hold: the fence registered */
};
void rd_reply_clear(struct rd_reply *r);

/* A SKU's settings as stored (the meta hash). */
struct rd_meta {
    int segments;
    char mode[16];
    int hold_ms;
    int batch; /* 1 when absent */
    long long initial;
    long long epoch; /* 0 for a SKU written before epochs existed */
    long long gen;
    bool rebalance;
    bool replicated; /* durability "replicated" */
    char lock[16];   /* a lock service's name, "": the lock in Redis */
    bool unfenced;   /* "fencing": false */
    int salt;        /* placement: 0, or the salt in its segments' hash tags */
    /* A restock or rebalance under way on a cluster (adjust.h: units may be in
     * transit between its steps): its lease end, ms on the meta node's clock; 0 none. */
    long long adjust_until;
};

/* A SKU as the calls on its segments take it: `sku` itself, or "sku/salt" when its
 * segments were placed with a salt (a Redis Cluster: RESET picks the salt that spreads
 * the segments evenly over the masters, and stores it in the meta). The key schema
 * (keys.h) puts the salt in the segments' hash tags only. `buf`: RD_SKU_PLACED_MAX. */
#define RD_SKU_PLACED_MAX (SEG_NAME_MAX + 16)
const char *rd_sku_placed(char *buf, const char *sku, int salt);

/* Where segment i of `placed` (rd_sku_placed) lives: its slot, and on a cluster the
 * master serving it as "host:port" into node[0..len) ("" standalone). 0 or -1. */
int rd_segment_place(rd_conn *c, const char *placed, int i, int *slot, char *node,
                     size_t len);

/* ---- reads ------------------------------------------------------------------- */

/* PING: 0 or -1. */
int rd_ping(rd_conn *c);
/* The settings of `sku`: 1 (found), 0 (no such SKU) or -1. */
int rd_meta_read(rd_conn *c, const char *sku, struct rd_meta *out);
/* The record of order `id`: 1 with *record (malloc'd), 0 (none, or one a reset of its
 * SKU left behind) or -1. */
int rd_record_read(rd_conn *c, const char *id, char **record);
/* The SKU view's numbers of segments 0..n-1 of `placed` of `epoch`: stock[i], sold[i],
 * orders[i], locked[i] and reserved[i] (units held by the epoch's reservations), all
 * read at one instant (lua/view.lua): one script over every segment on a standalone
 * Redis; on a cluster, where the segments live in other slots, one per segment (each
 * segment's numbers at one instant, the segments at a few). When `meta` is not NULL,
 * a standalone Redis also reads the settings of `sku` in the same script: 1 (*meta
 * filled: the settings of that instant; a caller compares its epoch, salt and segments
 * with the ones `placed`, `n` and `epoch` came from), 2 (no such SKU at that instant);
 * otherwise (a cluster, or meta NULL) 0 (*meta untouched). -1: no usable answer. */
int rd_segments_view(rd_conn *c, const char *sku, const char *placed, int n,
                     long long epoch, long long *stock, long long *sold,
                     long long *orders, bool *locked, long long *reserved,
                     struct rd_meta *meta);
/* Every SKU name: 0 with *names (malloc'd array of *n malloc'd strings) or -1. */
int rd_skus_list(rd_conn *c, char ***names, size_t *n);

/* ---- several segments ---------------------------------------------------------- */

/* One order over segments seg[0..n-1] (ascending) taking part[j] from seg[j]; the
 * parts of an order: which segments, how much, whose lock. */
struct rd_parts {
    int n;
    const int *seg;
    const long long *part;  /* DEDUCT_MULTI only */
    const char *const *tok; /* per part: the lock token, or "" (mode atomic) */
    const long long *fence; /* DEDUCT_MULTI: per part a lock service's fence, or NULL */
};

/* ---- multi-segment orders on a Redis Cluster ------------------------------------
 * Their parts are in several slots, so no script places one all or nothing. Instead
 * the order's intent comes first: the id in the intents set (keys.h), then its plan
 * in the id's claim (lua/claim.lua), then one deduction per part (each fenced by its
 * lock and the claim's end), then the record, which drops the claim and its plan in
 * one script. An order that falls short in a part undoes its plan; one whose process
 * died leaves its claim and plan, which the next holder of the claim undoes: a retry
 * with the id (async.h rda_undo), or the sweeper (the same ops, store.h intents_due). */

/* The plan of an order over `p`'s segments of `placed` (rd_sku_placed) in `epoch`,
 * for the claim (malloc'd). */
char *rd_plan_build(const char *placed, long long epoch, const struct rd_parts *p);
/* Given as a claim's plan: keep the plan the claim has (a takeover that undoes it). */
#define RD_PLAN_KEEP "-"

/* ---- durability ---------------------------------------------------------------- */

/* WAIT 1 timeout_ms on every node this connection wrote for a change: the nodes of
 * segments seg[0..n-1] of `placed` (seg NULL: 0..n-1), of the record of `id` and of
 * the meta of `sku` (either may be NULL); once per node (a standalone Redis: one
 * WAIT). The fewest replicas any of them reached, or -1. Keep timeout_ms well under
 * the connection's timeout. */
int rd_wait(rd_conn *c, const char *placed, int n, const int *seg, const char *id,
            const char *sku, int timeout_ms);

/* Durability "replicated" between the steps of a multi-step call on a cluster
 * (wait_ms > 0): rd_wait on the nodes of segments seg[0..n-1] of `placed` and of the
 * meta of `sku` (NULL: none), then RD_OK when each has a replica, RD_NOT_REPLICATED
 * when one has none, -1 when Redis gave no answer. wait_ms 0: RD_OK at once. */
int rd_wait_step(rd_conn *c, int wait_ms, const char *placed, int n, const int *seg,
                 const char *sku);

/* ---- the whole SKU ------------------------------------------------------------- */

/* What a reset writes: the new settings and epoch (segments 0: delete the SKU). */
struct rd_reset {
    int segments;
    const char *mode;
    int hold_ms;
    int batch; /* orders one lock hold may sell (the meta's "batch") */
    long long stock;
    bool rebalance;
    bool replicated;    /* durability "replicated" */
    const char *lock;   /* a lock service's name, "" or NULL: the lock in Redis */
    bool unfenced;      /* "fencing": false */
    long long epoch;    /* the new epoch */
    int salt;           /* the placement salt the SKU has now (a cluster keeps it across
                           resets; a create picks one) */
    int wait_ms;        /* > 0: the SKU is (or becomes) "replicated": on a cluster each
                           step WAITs 1 wait_ms for a replica before the next (reset.c) */
    const char *expect; /* the version it replaces, compared in the script that starts
                           the reset: NULL or "" any, "-" none (create only: EXISTS),
                           "*" any existing one, "<epoch>.<gen>" exactly that one
                           (else MISMATCH) */
    bool ledger;        /* events on: the new segments' ledger flags set, and every
                           script that changes them appends to their ledger streams
                           (keys.h); false: the flags deleted, no event written */
    bool retake;        /* cluster: a pending reset of this same request (rid and
                           signature: its earlier attempt, dead) is taken over at once,
                           its lease or not (lua/reset_begin.lua) */
};

#endif
