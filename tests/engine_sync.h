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

/* The answers of a batch of orders: how many, by status, the last record seen. */
struct es_tally {
    int done, by[INV_REQUEST_CONFLICT + 1];
    char last_record[512];
};

/* The engine callback that counts an answer into the es_tally `arg` (and clears it). */
void es_on_done(void *arg, struct order_result *res);

/* Start `n` orders of `qty` of `sku` on `e` at once (ids "<prefix>-k", or none when
 * prefix is NULL), *t reset; asserts none was answered from inside the call. */
void es_start(engine *e, const char *sku, long long qty, int n, const char *prefix,
              struct es_tally *t);

/* Turn `base` until `n` orders are answered in *t (up to 30 s); asserts they were and
 * that `e` has none left in flight. */
void es_finish(engine *e, struct event_base *base, int n, struct es_tally *t);

/* es_start, then es_finish. */
void es_run(engine *e, struct event_base *base, const char *sku, long long qty, int n,
            const char *prefix, struct es_tally *t);

#endif
