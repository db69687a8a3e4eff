/* conn.c -- what a worker's connection holds, freed (internal.h inv_conn_clear): its
 * own file, so that the sweeper, which embeds one, needs no call into inventory.c. */
#include <event2/event.h>

#include "segments/admin.h"
#include "segments/internal.h"
#include "segments/ltab.h"

void inv_conn_clear(inv_conn *c)
{
    c->adm->ops->free(c->adm);
    if (c->st != NULL) {
        c->st->ops->free(c->st); /* answers what the engine's orders are owed first */
        if (c->eng != NULL)
            c->eng_free(c->eng);
        event_base_free(c->base);
    }
    ltab_free(c->tab); /* after the engine, which borrows it */
}
