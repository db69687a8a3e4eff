/* harness_net.h -- a plain TCP connection to a server the test started on 127.0.0.1,
 * for tests that speak raw bytes (half requests, held-open sockets, event streams)
 * rather than the harness's own HTTP exchange.
 */
#ifndef TESTS_HARNESS_NET_H
#define TESTS_HARNESS_NET_H

/* A connected TCP socket to 127.0.0.1:port (close-on-exec, blocking, no timeouts):
 * its fd (the caller closes it), or -1 with errno set. */
int h_connect(int port);

#endif
