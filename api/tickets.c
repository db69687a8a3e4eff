/* tickets.c -- the event streams' single-use tickets (see tickets.h). */
#include "api/tickets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

void api_tickets_new_id(char out[API_TICKET_LEN + 1])
{
    unsigned char b[API_TICKET_LEN / 2];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t r = getrandom(b + got, sizeof b - got, 0);
        if (r <= 0) {
            fputs("inventoryd: getrandom failed\n", stderr);
            abort();
        }
        got += (size_t)r;
    }
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* Constant-time equality of two ids of API_TICKET_LEN digits. */
static bool ticket_equal(const char *a, const char *b)
{
    unsigned char diff = 0;
    for (size_t i = 0; i < API_TICKET_LEN; i++)
        diff |= (unsigned char)a[i] ^ (unsigned char)b[i];
    return diff == 0;
}

void api_tickets_add(struct api_tickets *tt, const char *id, long long now_ms,
                     long long expires_ms)
{
    /* A free or expired slot, else the one that expires first. */
    struct api_ticket *slot = &tt->t[0];
    for (int i = 0; i < API_TICKETS_MAX; i++) {
        struct api_ticket *k = &tt->t[i];
        if (k->id[0] == '\0' || k->expires_ms <= now_ms) {
            slot = k;
            break;
        }
        if (k->expires_ms < slot->expires_ms)
            slot = k;
    }
    snprintf(slot->id, sizeof slot->id, "%s", id);
    slot->expires_ms = expires_ms;
}

bool api_tickets_take(struct api_tickets *tt, const char *id, long long now_ms)
{
    if (strlen(id) != API_TICKET_LEN)
        return false;
    for (int i = 0; i < API_TICKETS_MAX; i++) {
        struct api_ticket *k = &tt->t[i];
        if (k->id[0] == '\0' || !ticket_equal(k->id, id))
            continue;
        bool fresh = k->expires_ms > now_ms;
        k->id[0] = '\0';
        return fresh;
    }
    return false;
}
