/* holdsweep.h -- the thread that gives expired reservations back (reserve.h) so that a
 * SKU's numbers are right when nobody orders: every HOLDSWEEP_EVERY_MS it asks the
 * store to settle the holds whose expiry (the store's clock) has passed. Every
 * instance runs one; a hold is settled once (one atomic step of the store). Not needed
 * for correctness: a step that meets an expired hold settles it too.
 *
 * The thread owns its store handle and touches nothing else but the counters.
 */
#ifndef SEG_HOLDSWEEP_H
#define SEG_HOLDSWEEP_H

#include <stddef.h>

#include "segments/inventory.h"

#define HOLDSWEEP_EVERY_MS 250

typedef struct holdsweep holdsweep;

struct admin;

/* Start the thread on `adm` (a store's blocking handle, admin.h, connecting on first
 * use; taken over: freed with the sweeper, or at once when NULL is returned). NULL with
 * `err` filled when the thread cannot be started. */
holdsweep *holdsweep_create(inv *v, struct admin *adm, char *err, size_t errlen);
/* Stop the thread and free. NULL is fine. */
void holdsweep_free(holdsweep *s);

#endif
