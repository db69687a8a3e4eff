/* store.h -- one worker's Redis connection: lazy connect, timeouts, script calls.
 *
 * A connection is made on first use with the configured timeout, which also bounds
 * every command, so a hung Redis costs at most redis_timeout_ms per call. Each
 * connection loads the scripts once (SCRIPT LOAD) and calls them by SHA, falling back
 * to EVAL when Redis lost its script cache (a restart, SCRIPT FLUSH).
 *
 * Every call returns NULL when Redis did not give a usable answer: I/O errors and
 * timeouts (the connection is dropped; the next call reconnects) and error replies
 * (LOADING, OOM, a script error). c->errstr says which; STAT_REDIS_ERRORS counts it.
 * A non-NULL reply is the caller's to freeReplyObject exactly once.
 */
#ifndef SEG_STORE_H
#define SEG_STORE_H

#include <hiredis/hiredis.h>

#include "segments/internal.h"

/* 0 when connected (scripts loaded), -1 with c->errstr set. */
int store_connect(inv_conn *c);

/* Close the connection (if any); the next call reconnects. */
void store_drop(inv_conn *c);

/* A command in hiredis format: every %s is one argument, never parsed by Redis. */
redisReply *store_command(inv_conn *c, const char *fmt, ...);

/* Run script `id` with `nkeys` keys and `nargs` arguments (NUL-terminated strings). */
redisReply *store_eval(inv_conn *c, enum script_id id, int nkeys, const char *const *keys,
                       int nargs, const char *const *args);

/* Send `n` commands built with redisAppendCommand by `append` (called once with the
 * context) and read their replies into out[0..n-1]. 0, or -1 with nothing to free. */
int store_pipeline(inv_conn *c, int n, void (*append)(redisContext *rc, void *arg),
                   void *arg, redisReply **out);

/* Helpers for reply shapes: an array of at least `n` elements / an integer. */
int store_is_array(const redisReply *r, size_t n);
long long store_integer(const redisReply *r, long long dflt);

#endif
