/* reserve.c -- reservations on a blocking connection (see reserve.h). */
#include "segments/reserve.h"

#include <stdio.h>
#include <string.h>

#include "segments/internal.h"
#include "segments/order.h"
#include "segments/record.h"
#include "segments/skutab.h"

/* How many views of the SKU a hold tries before answering busy. */
#define STALE_TRIES 4

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
    h->record = NULL;
}

/* The store keeps reservations: not PostgreSQL yet, nor a Redis Cluster (whose
 * index, order record, meta and holding list live in other slots than the segment:
 * docs/DESIGN.md "Reservations", Not yet). */
static bool supported(inv_conn *c)
{
    return c->adm->ops->hold_place != NULL &&
           !(ADMIN_CALL0(c->adm, caps) & ADMIN_CAP_CLUSTER);
}

/* Durability "replicated": a replica has segment `seg`'s step (and the order record
 * of `id`, when not NULL). */
static resv_status replicated(inv_conn *c, const struct store_hold *h, const char *id)
{
    int n = ADMIN_CALL(c->adm, wait, h->placed, 1, &h->segment, id, h->sku,
                       c->v->opt.redis_timeout_ms / 2);
    return n < 0 ? RESV_UNAVAILABLE : n < 1 ? RESV_NOT_REPLICATED : RESV_OK;
}

/* A hold found under the id a place asked for: the same request (its state now), or
 * another's. */
static resv_status replay(inv_conn *c, const struct resv_request *rq, const char *id,
                          struct store_hold *h)
{
    if (ADMIN_CALL(c->adm, hold_find, id, h) != 1) /* gone meanwhile: say so */
        return RESV_CONFLICT;
    if (strcmp(h->sku, rq->sku) != 0 || h->qty != rq->qty)
        return RESV_CONFLICT;
    struct store_reply r = {0};
    if (ADMIN_CALL(c->adm, hold_step, h, id, STORE_HOLD_READ, NULL, NULL, &r) < 0)
        return RESV_UNAVAILABLE;
    return r.code == STORE_OK ? RESV_REPLAYED : RESV_CONFLICT;
}

/* One try over the segments of the SKU as `view` has it: RESV_* or -1 (stale). */
static int place_once(inv_conn *c, const struct resv_request *rq, const char *id,
                      const char *attempt, const struct sku_view *view,
                      struct store_hold *h)
{
    char placed[STORE_SKU_PLACED_MAX];
    store_sku_placed(placed, rq->sku, view->salt);
    int n = view->cfg.segments;
    int64_t deadline = inv_now_ms() + c->v->opt.lock_wait_ms;
    int start = (int)inv_rand(c, (uint32_t)n);
    for (;;) {
        bool busy = false;
        long long total = 0;
        for (int k = 0; k < n; k++) {
            int i = (start + k) % n;
            struct store_reply r = {0};
            if (ADMIN_CALL(c->adm, hold_place, rq->sku, placed, view->epoch, i, id,
                           rq->qty, (int)(rq->ttl_s * 1000), "", attempt, &r, h) < 0)
                return RESV_UNAVAILABLE;
            if (h->settled > 0)
                stat_add(c->v, STAT_HOLDS_EXPIRED, h->settled);
            switch (r.code) {
            case STORE_OK:
                return RESV_OK;
            case STORE_EXISTS:
                return replay(c, rq, id, h);
            case ADMIN_CONFLICT:
                return RESV_CONFLICT;
            case STORE_STALE:
                return -1;
            case STORE_BUSY:
            case STORE_FENCED:
                stat_add(c->v, STAT_BUSY_SKIPS, 1);
                busy = true;
                total += r.value;
                break;
            default: /* SHORT */
                stat_add(c->v, STAT_FALL_THROUGHS, 1);
                total += r.value;
                break;
            }
        }
        if (!busy)
            return total == 0 ? RESV_SOLD_OUT : RESV_INSUFFICIENT;
        if (inv_now_ms() >= deadline)
            return RESV_BUSY;
        stat_add(c->v, STAT_LOCK_WAITS, 1);
        inv_sleep_ms(1 + (int)inv_rand(c, 4));
    }
}

/* The place in one call per walk (admin_ops.hold_place_any): the store reads the
 * SKU's settings and walks its segments itself; BUSY walks again after a jittered
 * pause until lock_wait_ms. */
static resv_status place_any(inv_conn *c, const struct resv_request *rq, const char *id,
                             const char *attempt, struct store_hold *h)
{
    int64_t deadline = inv_now_ms() + c->v->opt.lock_wait_ms;
    int start = (int)inv_rand(c, SEG_MAX_SEGMENTS);
    for (int stale = 0;;) {
        struct store_reply r = {0};
        if (ADMIN_CALL(c->adm, hold_place_any, rq->sku, id, rq->qty,
                       (int)(rq->ttl_s * 1000), start, attempt, &r, h) < 0)
            return RESV_UNAVAILABLE;
        if (h->settled > 0) {
            stat_add(c->v, STAT_HOLDS_EXPIRED, h->settled);
            skutab_invalidate(c->v, rq->sku);
        }
        switch (r.code) {
        case STORE_OK:
            return h->replicated ? replicated(c, h, NULL) : RESV_OK;
        case STORE_EXISTS:
            return replay(c, rq, id, h);
        case ADMIN_CONFLICT:
            return RESV_CONFLICT;
        case STORE_MISSING:
            return RESV_UNKNOWN_SKU;
        case ADMIN_MISMATCH:
            return RESV_UNSUPPORTED;
        case STORE_SHORT:
            stat_add(c->v, STAT_FALL_THROUGHS, 1);
            return r.value == 0 ? RESV_SOLD_OUT : RESV_INSUFFICIENT;
        case STORE_STALE: /* a segment of another epoch than the meta: a reset */
            if (++stale >= STALE_TRIES)
                return RESV_BUSY;
            break;
        default: /* BUSY */
            stat_add(c->v, STAT_BUSY_SKIPS, 1);
            if (inv_now_ms() >= deadline)
                return RESV_BUSY;
            stat_add(c->v, STAT_LOCK_WAITS, 1);
            inv_sleep_ms(1 + (int)inv_rand(c, 4));
            break;
        }
    }
}

resv_status resv_place(inv_conn *c, const struct resv_request *rq, char *id,
                       struct store_hold *h)
{
    memset(h, 0, sizeof *h);
    if (!seg_valid_name(rq->sku) || rq->qty < 1 || rq->qty > ORDER_QTY_MAX ||
        rq->ttl_s < 1 || rq->ttl_s > RESV_TTL_MAX_S ||
        (rq->id != NULL && rq->id[0] != '\0' && !seg_valid_name(rq->id)))
        return RESV_INVALID;
    if (!supported(c))
        return RESV_UNSUPPORTED;
    if (rq->id != NULL && rq->id[0] != '\0')
        snprintf(id, SEG_NAME_MAX + 1, "%s", rq->id);
    else
        inv_random_hex(id);
    char attempt[33];
    inv_random_hex(attempt);
    int st = -1;
    if (c->adm->ops->hold_place_any != NULL) {
        st = place_any(c, rq, id, attempt, h);
        if (st == RESV_OK)
            stat_add(c->v, STAT_HOLDS_PLACED, 1);
        return (resv_status)st;
    }
    for (int try = 0; st == -1 && try < STALE_TRIES; try++) {
        sku_local *e;
        struct sku_view view;
        inv_status s = skutab_get(c, rq->sku, &e, &view);
        if (s != INV_OK)
            return s == INV_UNKNOWN_SKU ? RESV_UNKNOWN_SKU : RESV_UNAVAILABLE;
        /* A lock service's SKU: its holders' writes are fenced by numbers this step
         * does not take part in (docs/DESIGN.md "Reservations"). */
        st = view.cfg.lock != SKU_LOCK_STORE ? RESV_UNSUPPORTED
                                             : place_once(c, rq, id, attempt, &view, h);
        if (st == -1)
            skutab_invalidate(c->v, rq->sku);
        if (st == RESV_OK && view.cfg.replicated)
            st = replicated(c, h, NULL);
        skutab_release(c->v->tab, e);
    }
    if (st == RESV_OK)
        stat_add(c->v, STAT_HOLDS_PLACED, 1);
    return st == -1 ? RESV_BUSY : (resv_status)st;
}

resv_status resv_step_status(const struct store_hold *h, int code)
{
    switch (code) {
    case STORE_OK:
        return RESV_OK;
    case STORE_EXISTS:
        return RESV_REPLAYED;
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

/* Find reservation `id` and run `act` on it: one call where the store can, else the
 * index read and then the step. */
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
    int rc;
    if (c->adm->ops->hold_by_id != NULL) {
        rc = ADMIN_CALL(c->adm, hold_by_id, id, act, attempt, &r, h);
    } else {
        int found = ADMIN_CALL(c->adm, hold_find, id, h);
        if (found <= 0)
            return found < 0 ? RESV_UNAVAILABLE : RESV_NOT_FOUND;
        char *record =
            act == STORE_HOLD_CONFIRM
                ? record_build(id, h->sku, h->qty, 1, &h->segment, &h->qty, "confirmed")
                : NULL;
        rc = ADMIN_CALL(c->adm, hold_step, h, id, act, record, attempt, &r);
        free(record);
    }
    if (rc < 0)
        return RESV_UNAVAILABLE;
    resv_status s = resv_step_status(h, r.code);
    if (h->settled > 0)
        stat_add(c->v, STAT_HOLDS_EXPIRED, h->settled);
    if (h->sku[0] != '\0' &&
        (h->settled > 0 || (act == STORE_HOLD_RELEASE && s == RESV_OK)))
        skutab_invalidate(c->v, h->sku); /* stock rose: sold-out flags go */
    return s;
}

resv_status resv_confirm(inv_conn *c, const char *id, struct store_hold *h)
{
    resv_status s = step(c, id, STORE_HOLD_CONFIRM, h);
    if (s == RESV_OK)
        stat_add(c->v, STAT_HOLDS_CONFIRMED, 1);
    if ((s == RESV_OK || s == RESV_REPLAYED) && h->record == NULL)
        s = RESV_UNAVAILABLE;
    if (s == RESV_OK || s == RESV_REPLAYED) {
        sku_local *e;
        struct sku_view view;
        if (skutab_get(c, h->sku, &e, &view) == INV_OK) {
            bool wait = view.cfg.replicated;
            skutab_release(c->v->tab, e);
            resv_status w = wait ? replicated(c, h, id) : RESV_OK;
            if (w != RESV_OK) {
                resv_clear(h);
                return w;
            }
        }
    }
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

int resv_reserved(inv_conn *c, const char *placed, int n, long long epoch,
                  long long *reserved)
{
    if (!supported(c)) {
        memset(reserved, 0, sizeof *reserved * (size_t)n);
        return 0;
    }
    return ADMIN_CALL(c->adm, holds_reserved, placed, n, epoch, reserved);
}
