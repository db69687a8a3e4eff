/* sentinel.h -- one Redis Sentinel resolver per process: the address of the current
 * master of one monitored name, asked of the sentinels and kept up to date by one
 * thread. Private to segments/redis/ (calls.h declares create and free).
 *
 * Asking. `SENTINEL get-master-addr-by-name NAME` goes to the sentinel that answered
 * last; when it fails (refused, timed out, an error, no answer for the name) the next
 * one in the list is asked, round the list once per round. The sentinels' own
 * password (AUTH on each connection to a sentinel) is not the master's: the master's
 * travels in the connections' rd_target, the sentinels' here.
 *
 * Following. The thread keeps its connection to the sentinel that answered and asks
 * again every RD_SENTINEL_TICK_MS, and at once (at most every RD_SENTINEL_MIN_MS)
 * when a connection asks (rd_sentinel_refresh: a refused connect, a node that says
 * it is no master). A poll instead of a +switch-master subscription: it needs no
 * second connection, survives a sentinel that dies between the two, and a switch is
 * seen within one tick either way.
 *
 * Snapshots. The address is published with a generation that grows by one whenever
 * an answer differs from the newest address; rd_sentinel_gen reads it in one atomic
 * load, so a connection checks at each command whether it still talks to the newest
 * master, and rd_sentinel_master copies the address under the mutex (never held
 * while a sentinel is asked).
 *
 * Errors. A failed round keeps the newest address and records why (rd_sentinel_error).
 * Every function is thread-safe; rd_sentinel_free comes after the last connection.
 */
#ifndef SEG_REDIS_SENTINEL_H
#define SEG_REDIS_SENTINEL_H

#include <stddef.h>

#include "segments/redis/calls.h"

#define RD_SENTINEL_TICK_MS 250 /* the sentinels are asked at least this often */
#define RD_SENTINEL_MIN_MS 50   /* and at most this often */

/* The newest generation; 0 while no sentinel has answered. Lock-free. */
long long rd_sentinel_gen(rd_sentinel *s);

/* The newest master address into host[0..hostlen) and *port; returns its generation,
 * 0 (host and port untouched) while no sentinel has answered. */
long long rd_sentinel_master(rd_sentinel *s, char *host, size_t hostlen, int *port);

/* Ask the sentinels again soon (a connection failed, or found no master). */
void rd_sentinel_refresh(rd_sentinel *s);

/* Why the last round failed, into buf[0..len) ("" when it did not). */
const char *rd_sentinel_error(rd_sentinel *s, char *buf, size_t len);

#endif
