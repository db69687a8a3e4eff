/* orders.c -- the order endpoints: start an order on the engine, pass its record
 * through. */
#include "api/orders.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/engine.h"
#include "segments/order.h"

int api_orders_parse(struct api_request *req, struct api_parse_error *err)
{
    if (api_parse_order(req->body, req->body_len, &req->in.order, err) != 0)
        return -1;
    /* An Idempotency-Key is the order id when the body names none, as it is the
     * request id of an admin write. */
    return api_parse_request_id("order_id", req->idempotency_key, req->in.order.order_id,
                                err);
}

/* One order on its way through the engine: what its reply needs. */
struct placing {
    const struct api_order_body *body; /* the request's; valid until the reply */
    engine *engine;
    struct api_reply *rep;
    void (*done)(void *tag);
    void *tag;
};

/* The reply for an order's result. */
static void reply_order(const struct placing *p, const struct order_result *res)
{
    const struct api_order_body *b = p->body;
    struct api_reply *rep = p->rep;
    inv_status s = res->status;
    if ((s == INV_OK || s == INV_REPLAYED) && res->record != NULL) {
        api_reply_text(rep, s == INV_OK ? 201 : 200, res->record, strlen(res->record));
        if (s == INV_OK) {
            char location[sizeof("/orders/") + SEG_NAME_MAX];
            snprintf(location, sizeof location, "/orders/%s", res->order_id);
            api_reply_header(rep, "Location", location);
        }
        return;
    }
    switch (s) {
    case INV_OK:
    case INV_REPLAYED:
        api_reply_error(rep, 500, "internal", "order %s placed but no record returned",
                        res->order_id);
        break;
    case INV_SOLD_OUT:
        api_reply_status(rep, s, "sku %s is sold out", b->sku);
        break;
    case INV_INSUFFICIENT:
        api_reply_status(rep, s, "sku %s holds fewer than %lld units", b->sku, b->qty);
        break;
    case INV_CONFLICT:
        api_reply_status(rep, s, "order_id %s was used for a different sku or qty",
                         res->order_id[0] ? res->order_id : b->order_id);
        break;
    case INV_UNKNOWN_SKU:
        api_reply_status(rep, s, "no sku %s", b->sku);
        break;
    case INV_BUSY:
        api_reply_status(rep, s, "no segment lock of sku %s could be had in time",
                         b->sku);
        break;
    case INV_NOT_REPLICATED:
        api_reply_status(rep, s,
                         "order %s was applied but no replica confirmed it in time, so a "
                         "failover may lose it; retry with order_id %s: 200 if it "
                         "survived, placed again if it was lost",
                         res->order_id, res->order_id);
        break;
    case INV_UNAVAILABLE:
        /* The deduction may have been applied before the answer was lost. */
        api_reply_status(rep, s,
                         "the backend did not answer (%s), so whether order %s was "
                         "placed is unknown; retrying with order_id %s is safe",
                         engine_error(p->engine), res->order_id, res->order_id);
        break;
    default:
        api_reply_status(rep, s, "order rejected: %s", inv_status_name(s));
        break;
    }
}

static void on_placed(void *arg, struct order_result *res)
{
    struct placing *p = arg;
    reply_order(p, res);
    order_result_clear(res);
    p->done(p->tag);
    free(p);
}

void api_orders_start(const struct api_ctx *ctx, struct api_request *req,
                      struct api_reply *rep, void (*done)(void *tag), void *tag)
{
    const struct api_order_body *b = &req->in.order;
    struct placing *p = malloc(sizeof *p);
    if (p == NULL) {
        fputs("inventoryd: out of memory\n", stderr);
        abort();
    }
    *p = (struct placing){b, ctx->engine, rep, done, tag};
    struct order_request oreq = {
        .sku = b->sku,
        .qty = b->qty,
        .order_id = b->order_id[0] != '\0' ? b->order_id : NULL,
    };
    engine_order(ctx->engine, &oreq, on_placed, p);
}

/* Answer an order lookup or cancel: the record, or the error for `s`. */
static void reply_record(struct api_request *req, struct api_reply *rep, inv_status s,
                         char *record)
{
    if (s == INV_OK && record != NULL)
        api_reply_text(rep, 200, record, strlen(record));
    else if (s == INV_OK || s == INV_NOT_FOUND)
        api_reply_error(rep, 404, "not_found", "no order %s", req->name);
    else if (s == INV_UNAVAILABLE)
        api_reply_status(rep, s, "the backend did not answer");
    else if (s == INV_BUSY)
        api_reply_status(rep, s, "the segment locks of order %s could not be had in time",
                         req->name);
    else if (s == INV_NOT_REPLICATED)
        api_reply_status(
            rep, s,
            "the cancel of order %s: no replica confirmed it in time (applied, or "
            "on a cluster stopped part way), so a failover may lose it; retry it: "
            "200 once it holds",
            req->name);
    else
        api_reply_status(rep, s, "order %s: %s", req->name, inv_status_name(s));
    free(record);
}

bool api_orders_fast(const struct api_ctx *ctx, struct api_request *req,
                     struct api_reply *rep)
{
    const struct api_order_body *b = &req->in.order;
    if (b->order_id[0] != '\0' || !engine_sold_out_fast(ctx->engine, b->sku))
        return false;
    api_reply_status(rep, INV_SOLD_OUT, "sku %s is sold out", b->sku);
    return true;
}

void api_orders_get(const struct api_ctx *ctx, struct api_request *req,
                    struct api_reply *rep)
{
    char *record = NULL;
    inv_status s = order_get(ctx->conn, req->name, &record);
    reply_record(req, rep, s, record);
}

void api_orders_cancel(const struct api_ctx *ctx, struct api_request *req,
                       struct api_reply *rep)
{
    char *record = NULL;
    inv_status s = order_cancel(ctx->conn, req->name, &record);
    reply_record(req, rep, s, record);
}
