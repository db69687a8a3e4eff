/* reserve.c -- reservations on a blocking connection (see reserve.h). */
#include "segments/reserve.h"

#include <stdio.h>
#include <string.h>

#include "segments/internal.h"
#include "segments/skutab.h"

static const char *const names[] = {
    [RESV_OK] = "ok",
    [RESV_REPLAYED] = "replayed",
    [RESV_SOLD_OUT] = "sold_out",
    [RESV_INSUFFICIENT] = "insufficient_stock",
    [RESV_UNKNOWN_SKU] = "unknown_sku",
    [RESV_NOT_FOUND] = "not_found",
    [RESV_CONFLICT] = "reservation_conflict",
    [RESV_BUSY] = "busy",
    [RESV_UNAVAILABLE] = "backend_unavailable",
    [RESV_INVALID] = "invalid_field",
    [RESV_EXPIRED] = "reservation_expired",
    [RESV_RELEASED] = "reservation_released",
    [RESV_CONFIRMED] = "reservation_confirmed",
    [RESV_GONE] = "reservation_void",
    [RESV_UNSUPPORTED] = "reservations_unsupported",
    [RESV_NOT_REPLICATED] = "not_replicated",
};

const char *resv_status_name(resv_status s)
{
    return (size_t)s < sizeof names / sizeof *names ? names[s] : "unknown";
}

void resv_clear(struct store_hold *h)
{
    free(h->record);
    free(h->parts);
    h->record = h->parts = NULL;
}

/* The store keeps reservations (Redis, standalone or a cluster; PostgreSQL). */
static bool supported(inv_conn *c)
{
    return c->adm->ops->hold_by_id != NULL;
}

resv_status resv_step_status(const struct store_hold *h, int code)
{
    switch (code) {
    case STORE_OK:
        return RESV_OK;
    case STORE_EXISTS:
        return RESV_REPLAYED;
    case STORE_BUSY: /* a release's wait for its segment ran out: nothing done */
        return RESV_BUSY;
    case STORE_MISSING:
        return RESV_NOT_FOUND;
    case STORE_STALE:
        return RESV_GONE;
    case ADMIN_CONFLICT:
        if (strcmp(h->state, "expired") == 0)
            return RESV_EXPIRED;
        return strcmp(h->state, "released") == 0    ? RESV_RELEASED
               : strcmp(h->state, "confirmed") == 0 ? RESV_CONFIRMED
                                                    : RESV_CONFLICT;
    default:
        return RESV_UNAVAILABLE;
    }
}

/* Reservation `id` found and `act` run on it, in one call of the store. */
static resv_status step(inv_conn *c, const char *id, enum store_hold_action act,
                        struct store_hold *h)
{
    memset(h, 0, sizeof *h);
    if (!seg_valid_name(id))
        return RESV_INVALID;
    if (!supported(c))
        return RESV_UNSUPPORTED;
    char attempt[33];
    inv_random_hex(attempt);
    struct store_reply r = {0};
    if (ADMIN_CALL(c->adm, hold_by_id, id, act, attempt, &r, h) < 0)
        return RESV_UNAVAILABLE;
    resv_status s = resv_step_status(h, r.code);
    if (h->settled > 0)
        stat_add(c->v, STAT_HOLDS_EXPIRED, h->settled);
    if (h->sku[0] != '\0' &&
        (h->settled > 0 || (act == STORE_HOLD_RELEASE && s == RESV_OK)))
        skutab_invalidate(c->v, h->sku); /* stock rose: sold-out flags go */
    return s;
}

resv_status resv_release(inv_conn *c, const char *id, struct store_hold *h)
{
    resv_status s = step(c, id, STORE_HOLD_RELEASE, h);
    if (s == RESV_OK && strcmp(h->state, "released") == 0)
        stat_add(c->v, STAT_HOLDS_RELEASED, 1);
    return s;
}

resv_status resv_get(inv_conn *c, const char *id, struct store_hold *h)
{
    return step(c, id, STORE_HOLD_READ, h);
}
