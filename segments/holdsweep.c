/* holdsweep.c -- the expired-reservation sweeper thread (see holdsweep.h). */
#include "segments/holdsweep.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/periodic.h"
#include "base/xalloc.h"
#include "segments/internal.h"

/* Segments settled per look: more wait for the next look (a tick later). */
#define SWEEP_SEGMENTS 64

struct holdsweep {
    inv *v;
    admin *adm; /* the thread's own */
    periodic *thread;
};

/* One look (periodic.h's round): the time to the next. */
static int sweep(periodic *p, void *arg)
{
    (void)p;
    holdsweep *s = arg;
    int settled = 0;
    if (s->adm->ops->holds_sweep != NULL &&
        ADMIN_CALL(s->adm, holds_sweep, SWEEP_SEGMENTS, &settled) == 0 && settled > 0)
        stat_add(s->v, STAT_HOLDS_EXPIRED, settled);
    return HOLDSWEEP_EVERY_MS;
}

holdsweep *holdsweep_create(inv *v, admin *adm, char *err, size_t errlen)
{
    holdsweep *s = seg_calloc(1, sizeof *s);
    s->v = v;
    s->adm = adm;
    char why[128];
    s->thread = periodic_start(sweep, s, HOLDSWEEP_EVERY_MS, why, sizeof why);
    if (s->thread == NULL) {
        snprintf(err, errlen, "hold sweeper thread: %s", why);
        adm->ops->free(adm);
        free(s);
        return NULL;
    }
    return s;
}

void holdsweep_free(holdsweep *s)
{
    if (s == NULL)
        return;
    periodic_stop(s->thread);
    s->adm->ops->free(s->adm);
    free(s);
}
