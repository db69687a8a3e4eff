/* proxy.h -- loopback TCP fault-injection proxy for integration tests: sits between a
 * client (the service, or hiredis in a test) and a real redis-server and can make a
 * reply get lost on the wire -- the command reached Redis and ran, but the client's
 * connection is reset before it sees the reply.
 *
 * One thread per proxy runs a poll loop over the listening socket, a wake pipe (stop,
 * arm, reset requests) and every connection pair (client, upstream). At most 256 pairs
 * are open at once; a client accepted beyond that is closed at once. Each direction
 * has a 16 KiB buffer: a full buffer stops reading that side until the other side
 * takes the bytes (no busy loop, partial writes kept). EOF, half-close or an error on
 * either side closes the pair, after a best-effort flush of what is buffered.
 *
 * Matching: what a client sent since the last reply bytes on its connection (the last
 * 4096 bytes of it) is searched for the armed pattern, so a pattern split across two
 * reads still matches; patterns longer than 4096 bytes never match.
 *
 * Errors: h_proxy_start prints the reason with a "proxy:" prefix and returns NULL; a
 * failed upstream connect closes that client (reason printed). Out of memory aborts.
 * Every function may be called from any thread; none calls cmocka's asserts.
 */
#ifndef TESTS_PROXY_H
#define TESTS_PROXY_H

typedef struct h_proxy h_proxy;

/* Listen on 127.0.0.1 on a free port and forward every accepted connection to
 * 127.0.0.1:upstream_port. Runs its own thread. NULL on failure (reason printed).
 * Free with h_proxy_free(). */
h_proxy *h_proxy_start(int upstream_port);

/* The port the proxy listens on. */
int h_proxy_port(const h_proxy *p);

/* Arm: the next `count` times a client's request bytes contain `pattern`, forward the
 * request to Redis, wait for Redis's reply bytes and, instead of forwarding them,
 * reset the client connection (SO_LINGER {1,0} then close: RST) and close the
 * upstream one. Replaces any earlier arming (count <= 0 or pattern NULL disarms); a
 * connection that already matched still loses its reply. The pattern is copied. */
void h_proxy_drop_reply(h_proxy *p, const char *pattern, int count);

/* How many replies have been dropped so far. */
int h_proxy_drops(const h_proxy *p);

/* Reset every open client connection now (like CLIENT KILL) and close its upstream.
 * Returns how many were open, once the proxy thread has done it (-1 when the thread
 * is no longer running). */
int h_proxy_reset_all(h_proxy *p);

/* Stop the thread, close every socket, free. NULL is fine. */
void h_proxy_free(h_proxy *p);

#endif
