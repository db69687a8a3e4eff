/* pool.h -- a few pgc connections of one event loop (pgp_*), so that a transaction
 * holding one (a `row` lock across its hold) does not hold up the loop's other calls.
 *
 * The pool lives on one event_base and is used from that loop's thread only, like
 * its connections. It chooses a connection per call; a transaction's later calls go
 * on the connection its first call went on (the caller keeps it: pgs_row_take's
 * caller passes the same pgc_conn to pgs_row_deduct). Connections connect at once and
 * reconnect on their own (conn.h).
 */
#ifndef SEG_POSTGRES_POOL_H
#define SEG_POSTGRES_POOL_H

#include "segments/postgres/conn.h"

typedef struct pgp_pool pgp_pool;

/* `size` connections (1..64) with options `o`. Free with pgp_free on the loop. */
pgp_pool *pgp_create(struct event_base *base, const struct pgc_opts *o, int size);
/* Every connection freed: their pending calls answered -1. NULL is fine. */
void pgp_free(pgp_pool *p);
/* The connection for the next call (or transaction): a connected one that no
 * transaction holds, with the fewest calls owed; else one no transaction holds (it
 * is connecting: the call waits there); else, all held, the one owing the fewest
 * calls (the call waits for its transaction to end). Borrowed. */
pgc_conn *pgp_pick(pgp_pool *p);
int pgp_size(const pgp_pool *p);
/* Connection i (0..size-1), borrowed: for stats and tests. */
pgc_conn *pgp_at(const pgp_pool *p, int i);

#endif
