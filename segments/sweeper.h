/* sweeper.h -- on a Redis Cluster, undoes what dead multi-segment orders left.
 *
 * A multi-segment order on a cluster deducts its parts in several slots, so it
 * records its intent first (calls.h): its id in the intents set, its plan in the id's
 * claim. An order whose process died between its parts and its record leaves both.
 * A retry with a client's order id undoes it; an order with a generated id has no
 * retry, so this thread does: once a second it asks the seam to settle the intents
 * older than SWEEP_AGE_MS (rd_intents_settle: each whose claim ran out is taken over,
 * its parts given back, the claim and the intent dropped). Every instance runs one;
 * the claim keeps two from undoing the same order. It owns its Redis connection and
 * touches nothing else of the process but the stats.
 */
#ifndef SEG_SWEEPER_H
#define SEG_SWEEPER_H

#include <stddef.h>

#include "segments/internal.h"

typedef struct sweeper sweeper;

/* Start the thread on a connection of its own to `to` (copied). NULL with `err`
 * filled when the thread cannot be started. */
sweeper *sweeper_create(inv *v, const struct rd_target *to, char *err, size_t errlen);
/* Stop the thread (at once, or after the settle under way) and free. NULL is fine. */
void sweeper_free(sweeper *s);

#endif
