/* access.h -- what the access log says of a request beyond its method and path: the
 * query string (with the values of secret-looking parameters masked) and the peer's
 * address. Pure functions on strings and addresses; api/server.c writes the line
 * (base/log.h log_access).
 *
 * The query is logged so that a client can be traced, but a URL is no place for a
 * secret and some clients put one there anyway: the value of any parameter whose name
 * holds "token", "password", "passwd", "secret", "auth" or "key" (any case) is
 * written as "***". The text is otherwise kept as sent (the log escapes it). */
#ifndef API_ACCESS_H
#define API_ACCESS_H

#include <stddef.h>
#include <sys/socket.h>

/* Bytes of a query kept (cut with "..." past it) and of an address. */
#define API_ACCESS_QUERY_MAX 256
#define API_ACCESS_CLIENT_MAX 64

/* Copy `query` (the text after '?', NULL for none) into `dst` of API_ACCESS_QUERY_MAX
 * bytes with the secret values masked; "" when none. Always NUL-terminates. */
void api_access_query(char dst[API_ACCESS_QUERY_MAX], const char *query);

/* "1.2.3.4:5678" or "[::1]:5678" for `sa` (NULL or another family: ""). */
void api_access_client(char dst[API_ACCESS_CLIENT_MAX], const struct sockaddr *sa);

#endif
