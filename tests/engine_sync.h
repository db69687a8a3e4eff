/* engine_sync.h -- place one order through the event-driven engine (segments/engine.h)
 * and wait for it: the blocking call the unit tests used to make, on a test's own loop.
 */
#ifndef TESTS_ENGINE_SYNC_H
#define TESTS_ENGINE_SYNC_H

#include <event2/event.h>

#include "segments/engine.h"
#include "segments/order.h"

/* Start `req` on `e` (an engine on `base`) and turn `base` on this thread until the
 * order is answered. Always fills `res` as the engine's callback got it (res->record,
 * when not NULL, is the caller's: order_result_clear) and returns res->status. Fails
 * the running cmocka test when no answer comes within 30 s. */
inv_status place_order(engine *e, struct event_base *base,
                       const struct order_request *req, struct order_result *res);

/* place_order for `qty` of `sku` under order id `id` (NULL: generated). With `record`
 * not NULL, *record is the order's JSON text or NULL (caller frees). */
inv_status place(engine *e, struct event_base *base, const char *sku, long long qty,
                 const char *id, char **record);

#endif
