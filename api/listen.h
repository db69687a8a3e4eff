/* listen.h -- the listening socket, bound once and shared by every event loop's
 * daemon (api/server.c).
 *
 * No SO_REUSEPORT: a second process on the same port is refused, not handed half the
 * connections. SO_REUSEADDR, so that a restart does not wait out TIME_WAIT; an IPv6
 * address listens on IPv6 only. The socket is non-blocking and close-on-exec, with a
 * backlog of 4096. */
#ifndef API_LISTEN_H
#define API_LISTEN_H

#include <stdbool.h>
#include <stddef.h>

/* Listen on `bind_to` (a numeric IPv4 or IPv6 address) and `port`: the socket, with
 * *v6 set for an IPv6 address; -1 with `err` filled when it cannot be had. */
int api_listen(const char *bind_to, int port, bool *v6, char *err, size_t errlen);

#endif
