/* harness_pg.h -- a real PostgreSQL 15 for the integration tests, started and stopped
 * by the test itself.
 *
 * h_pg_start runs initdb into a fresh temp dir (h_tempdir) and starts `postgres` from
 * $PG_BINDIR (default /usr/lib/postgresql/15/bin) on 127.0.0.1 with a free port, its
 * unix socket in the same dir. PostgreSQL refuses to run as root: when the test runs as
 * root, initdb and postgres run as the `postgres` system user (setpriv, which execs
 * in place, so the pid is the postmaster's and it keeps PR_SET_PDEATHSIG), with the dir
 * owned by that user and the dirs above it made searchable (o+x, never readable) so it
 * can reach it. Trust authentication, user `postgres`, database `postgres`.
 *
 * For speed the server runs with fsync=off, synchronous_commit=off and
 * full_page_writes=off: a test's data does not need to survive a crash of the machine.
 * With synchronous_commit=off a crash of the server's processes (SIGKILL, an immediate
 * shutdown) may lose the last commits it acknowledged (PostgreSQL documents up to three
 * times wal_writer_delay) -- of sessions that keep that default: the service's own
 * set synchronous_commit=on (segments/postgres/conn.h), so its COMMITs answer once
 * their WAL is written to the OS (fsync stays off: the OS does not crash).
 *
 * The postmaster is a registry child (harness.h): killed and its dir removed at exit
 * or on a fatal signal. Errors print a "harness:" line and return -1 / NULL.
 */
#ifndef TESTS_HARNESS_PG_H
#define TESTS_HARNESS_PG_H

#include <stdbool.h>

typedef struct h_pg h_pg;

/* initdb + start; waits until the server accepts connections (up to 30 s). */
h_pg *h_pg_start(void);
/* A libpq connection string for it (TCP, 127.0.0.1). Borrowed. */
const char *h_pg_conninfo(const h_pg *p);
int h_pg_port(const h_pg *p);
int h_pg_pid(const h_pg *p);
/* Stop (SIGINT: fast shutdown, then SIGKILL after 10 s); the exit status. */
int h_pg_stop(h_pg *p);
/* Stop if running, then start again on the same port and data: 0 once it accepts
 * connections, -1 otherwise. */
int h_pg_restart(h_pg *p);
/* The same after an immediate shutdown (SIGQUIT: no checkpoint, the next start
 * recovers from the WAL, as after a crash of the server's processes). */
int h_pg_restart_immediate(h_pg *p);
/* max_connections (default 40) from the next start on (h_pg_restart). */
void h_pg_set_max_connections(h_pg *p, int n);
/* Stop if running, remove the dir, free. NULL is fine. */
void h_pg_free(h_pg *p);

/* Blocking SQL on a fresh connection, for audits and for faults a test sets up: run
 * `sql` (one or more statements): 0, or -1 with the server's message printed. */
int h_pg_exec(const h_pg *p, const char *sql);
/* The first column of the first row of `sql` as an integer (NULL reads as 0); -1 on
 * any error or when there is no row. */
long long h_pg_scalar(const h_pg *p, const char *sql);

#endif
