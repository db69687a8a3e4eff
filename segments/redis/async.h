/* async.h -- the Redis seam on an event loop: one asynchronous connection, and one
 * typed call per script or read (the same calls as calls.h), answered through a
 * callback with C values.
 *
 * A connection lives on one libevent event_base and is used from that loop's thread
 * only (hiredis's async API with its libevent adapter). Calls are written as they
 * come; every command queued during one turn of the loop goes out in one write, so
 * many orders share a round trip (pipelining: rda_stats counts commands and writes).
 *
 * Replies. Every call's callback runs exactly once, on the loop, never from inside
 * the call itself. `rc` is 0 with the decoded reply, or -1 when Redis gave none:
 * refused, closed, an error reply, or no reply within `timeout_ms` -- hiredis 0.14.1
 * has no command timeout, so the connection keeps its own deadline (the oldest reply
 * owed): when it passes, the connection is dropped, every command waiting on it is
 * answered -1 (its outcome is unknown; the caller's ids make a retry safe), and a new
 * one is made. A command whose connection the server closed under it (a restart,
 * CLIENT KILL) is sent once more on the next connection: every script recognises its
 * own earlier run (scripts.c), so a reply lost on the wire does not turn into a false
 * answer. Scripts go by EVALSHA once the connection has loaded them, by EVAL before
 * that and after NOSCRIPT.
 *
 * Connection. Made at rda_create and again after every failure, with a backoff (50
 * ms doubling to 1 s); AUTH and SELECT first when configured. A working connection
 * the server closes is made again at once, and calls meanwhile wait for it. While
 * no connection is up otherwise, a call brings the next attempt forward (to 50 ms
 * after the last one) and waits for it: answered -1 when that attempt fails. Failures and
 * reconnects go to the seam's logger (rd_set_logger).
 */
#ifndef SEG_REDIS_ASYNC_H
#define SEG_REDIS_ASYNC_H

#include <event2/event.h>
#include <stdatomic.h>

#include "segments/redis/calls.h"

typedef struct rda_conn rda_conn;

struct rda_stats {
    long long commands; /* sent */
    long long writes;   /* times the connection had output to write: commands/writes
                           is the mean pipeline batch */
    long long timeouts; /* connections dropped at the reply deadline */
    long long connects; /* connections made (the first included) */
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
/* Close; every command still owed a reply is answered -1 first. NULL is fine. */
void rda_free(rda_conn *c);
/* The last failure, for logs and error details ("" when none). */
const char *rda_error(const rda_conn *c);
void rda_stats(const rda_conn *c, struct rda_stats *out);

/* Callbacks. `r` and what it points to are valid during the call only, but a callback
 * may take r->record (set it to NULL). */
typedef void (*rda_reply_fn)(void *arg, int rc, struct rd_reply *r);
typedef void (*rda_multi_fn)(void *arg, int rc, struct rd_reply *r,
                             const long long *stocks);
typedef void (*rda_int_fn)(void *arg, int rc, int value);
typedef void (*rda_meta_fn)(void *arg, int rc, int found, const struct rd_meta *m);
typedef void (*rda_record_fn)(void *arg, int rc, char *record); /* record: callee frees */
typedef void (*rda_stocks_fn)(void *arg, int rc, const long long *stock);

/* The calls of calls.h, with the same arguments and codes. `fn` may be NULL when
 * nobody waits for the answer (a release on the way out). */
void rda_ping(rda_conn *c, rda_int_fn fn, void *arg);
void rda_meta_read(rda_conn *c, const char *sku, rda_meta_fn fn, void *arg);
/* As rd_record_read, for a caller that knows the SKU it expects and that SKU's epoch:
 * a record of `sku` from another epoch was left behind by a reset, and reads as none.
 * (A record of another SKU is answered as it is.) */
void rda_record_read(rda_conn *c, const char *id, const char *sku, long long epoch,
                     rda_record_fn fn, void *arg);
void rda_stocks_read(rda_conn *c, const char *sku, int n, rda_stocks_fn fn, void *arg);
void rda_acquire(rda_conn *c, const char *sku, long long epoch, int i, const char *id,
                 long long qty, const char *token, int ttl_ms, rda_reply_fn fn,
                 void *arg);
void rda_deduct(rda_conn *c, const char *sku, long long epoch, int i, const char *token,
                const char *attempt, const char *id, long long qty, const char *record,
                rda_reply_fn fn, void *arg);
/* value: 1 taken (ours), 0 held by another token. */
void rda_lock(rda_conn *c, const char *sku, int i, const char *token, int ttl_ms,
              rda_int_fn fn, void *arg);
/* value: 1 done, 0 not ours. */
void rda_release(rda_conn *c, const char *sku, int i, const char *token, rda_int_fn fn,
                 void *arg);
void rda_renew(rda_conn *c, const char *sku, int i, const char *token, int ttl_ms,
               rda_int_fn fn, void *arg);
void rda_deduct_multi(rda_conn *c, const char *sku, long long epoch, const char *id,
                      const char *record, const char *attempt, const struct rd_parts *p,
                      rda_multi_fn fn, void *arg);
void rda_cancel(rda_conn *c, const char *sku, long long epoch, const char *id,
                const char *cancelled, const char *expected, const struct rd_parts *p,
                rda_reply_fn fn, void *arg);
void rda_adjust(rda_conn *c, const char *sku, long long epoch, int segments,
                const char *const *tok, const char *op, long long add, long long limit,
                const char *rid, const char *sig, rda_reply_fn fn, void *arg);

#endif
