/* orders.h -- POST /orders, GET /orders/{id} and DELETE /orders/{id}.
 *
 * POST /orders places an order (engine_order, on the request's loop) and answers 201 with
 * the stored order record verbatim and Location: /orders/{order_id}, 200 with the same
 * record for a replayed order_id, or the error for the domain status (reply.h). GET
 * /orders/{id} answers the record or 404 `not_found`. DELETE /orders/{id} cancels
 * (order_cancel): 200 with the cancelled record (again 200 when already cancelled), 404
 * `not_found`, 503 `busy` when the segment locks could not be had in time. GET and DELETE
 * run on a pool worker (they block on Redis). HEAD /orders/{id} is the GET without its
 * body.
 */
#ifndef API_ORDERS_H
#define API_ORDERS_H

#include "api/routes.h"

/* Body parser for POST /orders: fills req->in.order. */
int api_orders_parse(struct api_request *req, struct api_parse_error *err);

/* POST /orders, on the request's event loop (engine_order). */
void api_orders_start(const struct api_ctx *ctx, struct api_request *req,
                      struct api_reply *rep, void (*done)(void *tag), void *tag);
/* The sold-out fast path of POST /orders (engine_sold_out_fast): 409 sold_out on the
 * loop, no Redis, for an order without a client order_id. */
bool api_orders_fast(const struct api_ctx *ctx, struct api_request *req,
                     struct api_reply *rep);
void api_orders_get(const struct api_ctx *ctx, struct api_request *req,
                    struct api_reply *rep);
void api_orders_cancel(const struct api_ctx *ctx, struct api_request *req,
                       struct api_reply *rep);

#endif
