/* bconn.h -- a blocking libpq connection of the ledger's sink (pgbc_*): made on first
 * use and again after any failure, with the last failure's text kept for the logs.
 *
 * Used by one thread at a time (the sink's: ledger.h, events.h). pgbc_ready connects
 * when the connection is down, with a 3 s connect timeout and a 10 s statement
 * timeout, and answers 1 when it connected just now (the caller's per-session setup is
 * due: a schema, prepared statements), 0 when the connection was up, -1 when it could
 * not connect (the reason in pgbc's errstr). pgbc_fail records `what` failed with the
 * connection's message and drops the connection (a transaction it held rolls back),
 * returning -1, so a caller's error path is `return pgbc_fail(b, "what")`.
 */
#ifndef SEG_POSTGRES_BCONN_H
#define SEG_POSTGRES_BCONN_H

#include <libpq-fe.h>

struct pgbc {
    char *conninfo;
    PGconn *conn; /* NULL: made at the next pgbc_ready */
    char errstr[256];
};

void pgbc_init(struct pgbc *b, const char *conninfo);
void pgbc_clear(struct pgbc *b);
int pgbc_ready(struct pgbc *b);
int pgbc_fail(struct pgbc *b, const char *what);

#endif
