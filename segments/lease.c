/* lease.c -- lease renewal of the segment lock an order holds (every lock_ttl_ms / 3). */
#include "segments/engine_internal.h"

static void on_renewed(void *arg, int rc, int value)
{
    struct ord *o = arg;
    o->pending--;
    if (rc == 0 && value == 1)
        stat_add(o->e->v, STAT_LEASE_RENEWALS, 1);
    else if (rc == 0) {
        stat_add(o->e->v, STAT_LEASE_LOST, 1);
        o->lease_lost = true;
    }
    if (o->state == ORD_DONE && o->pending == 0)
        ord_finish(o, o->res.status); /* frees it */
}

void lease_on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ord *o = arg;
    if (!o->holding || o->lease_lost)
        return;
    o->pending++;
    STORE_CALL(o->e->st, renew, o->placed, o->seg, o->token, o->e->v->opt.lock_ttl_ms,
               on_renewed, o);
}

void lease_start(struct ord *o)
{
    o->holding = true;
    o->lease_lost = false;
    int every = o->e->v->opt.lock_ttl_ms / 3;
    struct timeval tv = {every / 1000, (every % 1000) * 1000};
    evtimer_add(o->renew, &tv);
}
