/* tickets.h -- single-use, short-lived tickets: what opens an event stream
 * (api/events.h) when EventSource cannot send the admin token.
 *
 * A ticket is API_TICKET_LEN random hex digits, valid until its expiry and taken at
 * most once. The table holds API_TICKETS_MAX outstanding ones; issuing into a full
 * table replaces the one that expires first. The table has no lock of its own: the
 * caller holds the one guarding it (api/events.c: the registry's). Comparison is
 * constant-time.
 */
#ifndef API_TICKETS_H
#define API_TICKETS_H

#include <stdbool.h>

#define API_TICKET_LEN 32 /* hex digits */
#define API_TICKETS_MAX 64

struct api_ticket {
    char id[API_TICKET_LEN + 1]; /* "" when the slot is free */
    long long expires_ms;        /* CLOCK_MONOTONIC */
};

/* Zeroed memory is an empty table. */
struct api_tickets {
    struct api_ticket t[API_TICKETS_MAX];
};

/* A fresh random id (no lock needed): API_TICKET_LEN digits and a NUL into `out`.
 * Aborts when the system has no randomness to give. */
void api_tickets_new_id(char out[API_TICKET_LEN + 1]);

/* Keep `id` (from api_tickets_new_id) until `expires_ms`; `now_ms` finds the free
 * and expired slots. */
void api_tickets_add(struct api_tickets *tt, const char *id, long long now_ms,
                     long long expires_ms);

/* True when `id` is outstanding and unexpired at `now_ms`; it is spent either way. */
bool api_tickets_take(struct api_tickets *tt, const char *id, long long now_ms);

#endif
