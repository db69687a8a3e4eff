/* conn.h -- one asynchronous libpq connection on a libevent loop (pgc_*): calls of
 * one or more SQL statements, pipelined, each answered once through a callback.
 *
 * A handle lives on one event_base and is used from that loop's thread only. It
 * connects at once (PQconnectStartParams / PQconnectPoll on the loop), and again after
 * any failure with a backoff (50 ms doubling to 2 s); a call made while it is down
 * waits for the next connection, within its deadline.
 *
 * Calls. pgc_call queues statements (PQsendQueryParams, text parameters) and a sync
 * point; every call queued during one turn of the loop goes out in one write, in
 * libpq's pipeline mode, so many orders share a round trip. Each call's statements run
 * in order; with no transaction of the caller's, each statement is its own implicit
 * transaction, and an error skips the rest of that call only.
 *
 * Prepared statements. In a call with PGC_PREPARE, each statement with parameters is
 * parsed and planned once per session: the first call to send it on a connection
 * sends its PQsendPrepare ahead of its statements (same pipeline segment, result not
 * shown), later ones PQsendQueryPrepared. The name is "inv_" and a 64-bit hash of the
 * text (the text compared too), so a statement's text is the one place defining it;
 * pass only texts from a fixed set. Prepared names outlive a ROLLBACK but not the
 * session: the table is emptied when the connection drops, and the next session
 * prepares again. A prepare that fails, or a name the server does not know (SQLSTATE
 * 26000), is taken out of the table and prepared again by the next call. At most
 * PGC_PREPARED_MAX per connection; past that, statements go unprepared. With
 * no_prepare (PgBouncer in transaction pooling, where a session's prepared names do
 * not follow it from one server connection to the next) PGC_PREPARE is ignored and
 * every statement goes out unprepared (PQsendQueryParams, the unnamed statement).
 *
 * Replies. The callback runs exactly once, on the loop, never from inside pgc_call.
 * rc 0: the server answered; res[0..n-1] is one result per statement (an error is a
 * PGRES_FATAL_ERROR result, the statements after it PGRES_PIPELINE_ABORTED), valid
 * during the callback only. rc -1, res NULL: no answer -- the connection failed or was
 * closed, or the call's deadline (call_timeout_ms from pgc_call) passed. The outcome
 * is then unknown (the caller's order id makes a retry safe). A call whose deadline
 * passes after it was sent drops the connection, so the server rolls back whatever
 * it was doing and nothing answers late; the calls sent with it are answered -1 too.
 *
 * Transactions. A call with PGC_BEGIN opens a transaction (BEGIN is sent before its
 * statements; its result is not shown) and returns the transaction's id; from then on
 * the connection is the transaction's: other calls wait until it ends. The caller
 * continues it with calls that pass that id (after the previous one is answered) and
 * ends it with a PGC_END call whose last statement is COMMIT. The transaction also
 * ends on any error result, any -1, or a lost connection: the connection is rolled
 * back (ROLLBACK sent for it) and later calls with that id are answered -1 at once,
 * never run outside it.
 *
 * Session. The connection string is any libpq one (URI or key=value, unix socket
 * included). Added to it (and winning over it): idle_in_transaction_session_timeout =
 * lock_ttl_ms, so the server ends the session of a holder frozen past its lock's time
 * and frees its row locks; statement_timeout; TCP keepalives on both ends (idle and
 * interval lock_ttl_ms/3, 3 probes) and tcp_user_timeout = lock_ttl_ms on ours;
 * client_connection_check_interval (lock_ttl_ms/3), so that a statement whose client
 * is gone (a call dropped at its deadline) stops instead of running on;
 * synchronous_commit = on, so that a COMMIT answered (an order acknowledged) survives a
 * crash of the server even where its default is off. The
 * application_name is the caller's app_name unless the string names one.
 * Notices (a ROLLBACK with no transaction) are dropped.
 */
#ifndef SEG_POSTGRES_CONN_H
#define SEG_POSTGRES_CONN_H

#include <event2/event.h>
#include <stdbool.h>
#include <libpq-fe.h>

typedef struct pgc_conn pgc_conn;

struct pgc_opts {
    const char *conninfo;     /* libpq connection string; copied */
    int lock_ttl_ms;          /* the session timeouts above; 0: 5000 */
    int statement_timeout_ms; /* 0: lock_ttl_ms */
    int call_timeout_ms;      /* each call's deadline, and a connect attempt's; 0: 3000 */
    const char *app_name;     /* pg_stat_activity's application_name unless the
                                 connection string names one; NULL: "inventoryd" */
    bool no_prepare;          /* PGC_PREPARE ignored: every statement unprepared */
    bool ledger;              /* the session's inv.ledger on: its order rows' events
                                 are written (postgres/events.h) */
};

struct pgc_stmt {
    const char *sql; /* one statement, $1.. parameters */
    int nparams;
    const char *const *params; /* text; NULL entries are SQL NULL */
};

#define PGC_PREPARED_MAX 64

typedef void (*pgc_fn)(void *arg, int rc, PGresult *const *res, int n);

#define PGC_BEGIN 0x1u   /* open a transaction that holds the connection */
#define PGC_END 0x2u     /* the last call of the transaction (ends in COMMIT) */
#define PGC_PREPARE 0x4u /* its statements with parameters prepared (above) */

struct pgc_stats {
    long long connects; /* connections made (the first included) */
    long long calls;    /* calls sent */
    long long writes;   /* turns that sent calls: calls/writes is the mean batch */
    long long timeouts; /* calls answered -1 at their deadline */
    long long failures; /* connections lost or refused */
    long long prepares; /* statements prepared (PQsendPrepare sent) */
};

/* A handle on `base`, connecting now. Free with pgc_free on the loop's thread. */
pgc_conn *pgc_create(struct event_base *base, const struct pgc_opts *o);
/* Close; every call still owed an answer is answered -1 first (from inside pgc_free).
 * Not from inside one of its callbacks. NULL is fine. */
void pgc_free(pgc_conn *c);
/* The last failure, for logs ("" when none). */
const char *pgc_error(const pgc_conn *c);
void pgc_stats(const pgc_conn *c, struct pgc_stats *out);
/* True while connected (calls go out at once). */
int pgc_ready(const pgc_conn *c);
/* True while a transaction holds the connection or waits to open on it (other calls
 * wait behind it). */
int pgc_held(const pgc_conn *c);
/* Calls made and not answered yet. */
int pgc_owed(const pgc_conn *c);

/* Queue a call of `n` statements (copied; n >= 1). `txn`: 0, or the id of this
 * caller's open transaction. `flags`: PGC_BEGIN (with txn 0) and/or PGC_END. Returns
 * the transaction's id for PGC_BEGIN, else `txn`. PGC_PREPARE may go with either. `fn`
 * may be NULL. */
unsigned long long pgc_call(pgc_conn *c, unsigned long long txn, unsigned flags,
                            const struct pgc_stmt *st, int n, pgc_fn fn, void *arg);

#endif
