/* access.c -- the query and client fields of the access log (contract: access.h). */
#include "api/access.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* True when the parameter name `name` (`len` bytes) looks like it names a secret. */
static bool secret_name(const char *name, size_t len)
{
    static const char *const words[] = {"token",  "password", "passwd",
                                        "secret", "auth",     "key"};
    for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
        size_t wl = strlen(words[w]);
        for (size_t i = 0; i + wl <= len; i++)
            if (strncasecmp(name + i, words[w], wl) == 0)
                return true;
    }
    return false;
}

void api_access_query(char dst[API_ACCESS_QUERY_MAX], const char *query)
{
    size_t n = 0, cap = API_ACCESS_QUERY_MAX - 4; /* room for "..." and the NUL */
    bool cut = false;
    for (const char *p = query; p != NULL && *p != '\0' && !cut;) {
        size_t plen = strcspn(p, "&");
        const char *eq = memchr(p, '=', plen);
        size_t keep =
            eq != NULL && secret_name(p, (size_t)(eq - p)) ? (size_t)(eq - p) + 1 : plen;
        const char *mask = keep < plen ? "***" : "";
        size_t want = keep + strlen(mask) + (p[plen] == '&');
        if (n + want > cap) {
            cut = true;
            break;
        }
        memcpy(dst + n, p, keep);
        n += keep;
        memcpy(dst + n, mask, strlen(mask));
        n += strlen(mask);
        if (p[plen] == '&')
            dst[n++] = '&';
        p += plen + (p[plen] == '&');
    }
    if (cut)
        memcpy(dst + n, "...", 3), n += 3;
    dst[n] = '\0';
}

void api_access_client(char dst[API_ACCESS_CLIENT_MAX], const struct sockaddr *sa)
{
    char ip[INET6_ADDRSTRLEN];
    dst[0] = '\0';
    if (sa != NULL && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        if (inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip) != NULL)
            snprintf(dst, API_ACCESS_CLIENT_MAX, "%s:%u", ip, ntohs(in->sin_port));
    } else if (sa != NULL && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        if (inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip) != NULL)
            snprintf(dst, API_ACCESS_CLIENT_MAX, "[%s]:%u", ip, ntohs(in6->sin6_port));
    }
}
