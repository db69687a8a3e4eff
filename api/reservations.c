/* reservations.c -- the reservation endpoints: a hold as JSON, a status as HTTP. */
#include "api/reservations.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "segments/reserve.h"

int api_resv_parse(struct api_request *req, struct api_parse_error *err)
{
    if (api_parse_reservation(req->body, req->body_len, &req->in.resv, err) != 0)
        return -1;
    /* An Idempotency-Key is the reservation id when the body names none. */
    return api_parse_request_id("reservation_id", req->idempotency_key, req->in.resv.id,
                                err);
}

/* ms since the Unix epoch as RFC 3339 UTC with milliseconds. */
static void iso_ms(char *buf, size_t len, long long ms)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03lldZ", day, ms % 1000);
}

/* The parts of hold h as [{segment, qty}, ...]: one, or its "seg:qty,..." list. */
static json_t *parts_json(const struct store_hold *h)
{
    json_t *a = json_array();
    if (h->parts == NULL) {
        json_array_append_new(
            a, json_pack("{s:i, s:I}", "segment", h->segment, "qty", (json_int_t)h->qty));
        return a;
    }
    const char *p = h->parts;
    int seg, used;
    long long qty;
    while (sscanf(p, "%d:%lld%n", &seg, &qty, &used) == 2) {
        json_array_append_new(
            a, json_pack("{s:i, s:I}", "segment", seg, "qty", (json_int_t)qty));
        p += used;
        if (*p != ',')
            break;
        p++;
    }
    return a;
}

/* The hold as JSON text, written by hand: through json_pack and json_dumps a place's
 * reply cost the service about as much as the rest of its request. Every string in
 * it is a valid name (names.h: nothing to escape), a state or a timestamp; NULL when
 * one is not (then jansson writes it). */
static char *hold_text(const char *id, const struct store_hold *h, const char *at,
                       size_t *len)
{
    const char *state = h->state[0] ? h->state : "held";
    if (!seg_valid_name(id) || !seg_valid_name(h->sku) || !seg_valid_name(state))
        return NULL;
    /* A part "s:q," (4 bytes or more) becomes {"segment":s,"qty":q}, (23 or more). */
    size_t cap =
        256 + strlen(id) + strlen(h->sku) + 8 * (h->parts ? strlen(h->parts) : 0);
    char *buf = malloc(cap);
    if (buf == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    size_t n = (size_t)snprintf(buf, cap,
                                "{\"reservation_id\":\"%s\",\"sku\":\"%s\",\"qty\":%lld,"
                                "\"segment\":%d,\"segments\":[",
                                id, h->sku, h->qty, h->segment);
    if (h->parts == NULL) {
        n += (size_t)snprintf(buf + n, cap - n, "{\"segment\":%d,\"qty\":%lld}",
                              h->segment, h->qty);
    } else {
        const char *p = h->parts;
        int seg, used;
        long long qty;
        while (sscanf(p, "%d:%lld%n", &seg, &qty, &used) == 2) {
            n += (size_t)snprintf(buf + n, cap - n, "%s{\"segment\":%d,\"qty\":%lld}",
                                  p == h->parts ? "" : ",", seg, qty);
            p += used;
            if (*p != ',')
                break;
            p++;
        }
    }
    n += (size_t)snprintf(
        buf + n, cap - n,
        "],\"status\":\"%s\",\"expires_at\":\"%s\",\"expires_at_ms\":%lld}", state, at,
        h->expires_ms);
    *len = n;
    return buf;
}

static void reply_hold(struct api_reply *rep, int status, const char *id,
                       const struct store_hold *h)
{
    char at[48];
    iso_ms(at, sizeof at, h->expires_ms);
    size_t len;
    char *text = hold_text(id, h, at, &len);
    if (text != NULL) {
        api_reply_raw(rep, status, "application/json", text, len);
    } else {
        json_t *o = json_pack(
            "{s:s, s:s, s:I, s:i, s:o, s:s, s:s, s:I}", "reservation_id", id, "sku",
            h->sku, "qty", (json_int_t)h->qty, "segment", h->segment, "segments",
            parts_json(h), "status", h->state[0] ? h->state : "held", "expires_at", at,
            "expires_at_ms", (json_int_t)h->expires_ms);
        api_reply_json(rep, status, o);
    }
    if (status == 201) {
        char location[sizeof("/reservations/") + SEG_NAME_MAX + 2];
        snprintf(location, sizeof location, "/reservations/%s", id);
        api_reply_header(rep, "Location", location);
    }
}

/* The error reply of a failed status. */
static void reply_failed(struct api_reply *rep, resv_status s, const char *id,
                         const char *sku)
{
    const char *code = resv_status_name(s);
    switch (s) {
    case RESV_SOLD_OUT:
        api_reply_status(rep, INV_SOLD_OUT, "sku %s is sold out", sku);
        break;
    case RESV_INSUFFICIENT:
        api_reply_status(rep, INV_INSUFFICIENT,
                         "sku %s holds fewer units than that (a reservation takes "
                         "them from one segment or, all or nothing, from several)",
                         sku);
        break;
    case RESV_UNKNOWN_SKU:
        api_reply_status(rep, INV_UNKNOWN_SKU, "no sku %s", sku);
        break;
    case RESV_NOT_FOUND:
        api_reply_error(rep, 404, "not_found", "no reservation %s", id);
        break;
    case RESV_CONFLICT:
        api_reply_error(rep, 409, code,
                        "reservation_id %s is another reservation's or an order's", id);
        break;
    case RESV_BUSY:
        api_reply_status(rep, INV_BUSY, "no segment lock of sku %s could be had in time",
                         sku);
        break;
    case RESV_UNAVAILABLE:
        api_reply_status(rep, INV_UNAVAILABLE,
                         "the backend did not answer, so the outcome for reservation %s "
                         "is unknown; retrying with reservation_id %s is safe",
                         id, id);
        break;
    case RESV_INVALID:
        api_reply_error(rep, 400, code, "invalid reservation request");
        break;
    case RESV_EXPIRED:
        api_reply_error(rep, 410, code,
                        "reservation %s expired before the confirm: its units went "
                        "back to stock and nothing was sold",
                        id);
        break;
    case RESV_RELEASED:
        api_reply_error(rep, 409, code, "reservation %s was released", id);
        break;
    case RESV_CONFIRMED:
        api_reply_error(rep, 409, code,
                        "reservation %s is confirmed: order %s; cancel the order instead",
                        id, id);
        break;
    case RESV_GONE:
        api_reply_error(
            rep, 410, code,
            "the sku of reservation %s was reset or deleted: the hold is void", id);
        break;
    case RESV_UNSUPPORTED:
        api_reply_error(rep, 409, code,
                        "this store, or this SKU's lock service, keeps no reservations");
        break;
    case RESV_NOT_REPLICATED:
        api_reply_status(rep, INV_NOT_REPLICATED,
                         "reservation %s: no replica confirmed it in time; retry with "
                         "the same id",
                         id);
        break;
    default:
        api_reply_error(rep, 500, "internal", "reservation %s: %s", id, code);
        break;
    }
}

bool api_resv_fast(const struct api_ctx *ctx, struct api_request *req,
                   struct api_reply *rep)
{
    (void)req;
    if (resv_loop_supported(ctx->engine))
        return false;
    reply_failed(rep, RESV_UNSUPPORTED, "", "");
    return true;
}

/* A place or confirm on its way through the loop: what its reply needs. */
struct resv_call {
    struct api_request *req; /* valid until the reply */
    struct api_reply *rep;
    void (*done)(void *tag);
    void *tag;
    bool confirm;
};

static void reply_confirmed(struct api_reply *rep, resv_status s, const char *id,
                            struct store_hold *h)
{
    if ((s == RESV_OK || s == RESV_REPLAYED) && h->record != NULL) {
        api_reply_text(rep, s == RESV_OK ? 201 : 200, h->record, strlen(h->record));
        if (s == RESV_OK) {
            char location[sizeof("/orders/") + SEG_NAME_MAX + 2];
            snprintf(location, sizeof location, "/orders/%s", id);
            api_reply_header(rep, "Location", location);
        }
    } else {
        reply_failed(rep, s, id, h->sku);
    }
}

static void on_resv_done(void *arg, resv_status s, const char *id, struct store_hold *h)
{
    struct resv_call *c = arg;
    if (c->confirm)
        reply_confirmed(c->rep, s, id, h);
    else if (s == RESV_OK || s == RESV_REPLAYED)
        reply_hold(c->rep, s == RESV_OK ? 201 : 200, id, h);
    else
        reply_failed(c->rep, s, id, c->req->in.resv.sku);
    c->done(c->tag);
    free(c);
}

static struct resv_call *call_new(struct api_request *req, struct api_reply *rep,
                                  void (*done)(void *tag), void *tag, bool confirm)
{
    struct resv_call *c = malloc(sizeof *c);
    if (c == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    *c = (struct resv_call){req, rep, done, tag, confirm};
    return c;
}

void api_resv_start_place(const struct api_ctx *ctx, struct api_request *req,
                          struct api_reply *rep, void (*done)(void *tag), void *tag)
{
    const struct api_resv_body *b = &req->in.resv;
    struct resv_request rq = {b->sku, b->qty, b->ttl_s, b->id};
    resv_place_start(ctx->engine, &rq, on_resv_done,
                     call_new(req, rep, done, tag, false));
}

void api_resv_start_confirm(const struct api_ctx *ctx, struct api_request *req,
                            struct api_reply *rep, void (*done)(void *tag), void *tag)
{
    resv_confirm_start(ctx->engine, req->name, on_resv_done,
                       call_new(req, rep, done, tag, true));
}

void api_resv_get(const struct api_ctx *ctx, struct api_request *req,
                  struct api_reply *rep)
{
    struct store_hold h;
    resv_status s = resv_get(ctx->conn, req->name, &h);
    if (s == RESV_OK)
        reply_hold(rep, 200, req->name, &h);
    else
        reply_failed(rep, s, req->name, h.sku);
    resv_clear(&h);
}

void api_resv_release(const struct api_ctx *ctx, struct api_request *req,
                      struct api_reply *rep)
{
    struct store_hold h;
    resv_status s = resv_release(ctx->conn, req->name, &h);
    if (s == RESV_OK)
        reply_hold(rep, 200, req->name, &h);
    else
        reply_failed(rep, s, req->name, h.sku);
    resv_clear(&h);
}
