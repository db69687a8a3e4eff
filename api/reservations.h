/* reservations.h -- the reservation endpoints (segments/reserve.h):
 *   POST   /reservations              {sku, qty, ttl_s, reservation_id?} -> 201 the
 *                                      hold (200: the same id again)
 *   GET    /reservations/{id}         the hold as it stands
 *   POST   /reservations/{id}/confirm 201 the order (200 again; 410 expired)
 *   DELETE /reservations/{id}         the hold released (idempotent)
 * GET and DELETE run on a control pool worker (one script each).
 */
#ifndef API_RESERVATIONS_H
#define API_RESERVATIONS_H

#include "api/routes.h"

int api_resv_parse(struct api_request *req, struct api_parse_error *err);
/* The place and the confirm run on the request's event loop (segments/reserve.h
 * resv_place_start); `fast` answers 409 reservations_unsupported inline where the
 * loop's store has no reservations (every store here has them). */
bool api_resv_fast(const struct api_ctx *ctx, struct api_request *req,
                   struct api_reply *rep);
void api_resv_start_place(const struct api_ctx *ctx, struct api_request *req,
                          struct api_reply *rep, void (*done)(void *tag), void *tag);
void api_resv_start_confirm(const struct api_ctx *ctx, struct api_request *req,
                            struct api_reply *rep, void (*done)(void *tag), void *tag);
void api_resv_get(const struct api_ctx *ctx, struct api_request *req,
                  struct api_reply *rep);
void api_resv_release(const struct api_ctx *ctx, struct api_request *req,
                      struct api_reply *rep);

#endif
