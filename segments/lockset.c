/* lockset.c -- several segment locks taken in ascending order (see lockset.h). */
#include "segments/lockset.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "segments/clock.h"
#include "segments/rand.h"
#include "segments/ring.h"
#include "segments/watchdog.h"
#include "base/xalloc.h"
#include "segments/internal.h"

struct lockset {
    sku_local *e;
    const char *sku;
    int n;
    int *seg;
    struct lease *lease;
};

/* Claim and lock segment k of the set, waiting until the deadline. */
static inv_status take_one(inv_conn *c, struct lockset *s, int k, int64_t deadline)
{
    int i = s->seg[k];
    struct lease *l = &s->lease[k];
    int left = (int)(deadline - inv_now_ms());
    if (left <= 0 || !skutab_claim_wait(s->e, i, left))
        return INV_BUSY;
    snprintf(l->sku, sizeof l->sku, "%s", s->sku);
    l->seg = i;
    inv_new_token(c, l->token);
    stat_add(c->v, STAT_LOCK_ATTEMPTS, 1);
    for (int round = 0;; round++) {
        int got = ADMIN_CALL(c->adm, lock, s->sku, i, l->token, c->v->opt.lock_ttl_ms);
        if (got == 1)
            break;
        left = (int)(deadline - inv_now_ms());
        if (got < 0 || left <= 0) {
            skutab_unclaim(s->e, i);
            return got < 0 ? INV_UNAVAILABLE : INV_BUSY;
        }
        stat_add(c->v, STAT_BUSY_SKIPS, 1);
        inv_sleep_ms(ring_backoff_ms(round, inv_rand(c, UINT32_MAX), left));
    }
    stat_add(c->v, STAT_LOCK_ACQUIRED, 1);
    watchdog_add(c->v->wd, l);
    return INV_OK;
}

struct lockset *lockset_take(inv_conn *c, sku_local *e, const char *sku, const int *seg,
                             int n, int64_t deadline_ms, inv_status *why)
{
    struct lockset *s = seg_calloc(1, sizeof *s);
    *s = (struct lockset){.e = e,
                          .sku = sku,
                          .n = 0,
                          .seg = seg_calloc((size_t)n, sizeof *s->seg),
                          .lease = seg_calloc((size_t)n, sizeof *s->lease)};
    for (int k = 0; k < n; k++) {
        s->seg[k] = seg[k];
        inv_status st = take_one(c, s, k, deadline_ms);
        if (st != INV_OK) {
            *why = st;
            lockset_drop(c, s, true);
            return NULL;
        }
        s->n = k + 1;
    }
    return s;
}

const char *lockset_token(const struct lockset *s, int k)
{
    return s->lease[k].token;
}

bool lockset_drop(inv_conn *c, struct lockset *s, bool release)
{
    bool lost = false;
    for (int k = 0; k < s->n; k++) {
        lost |= watchdog_remove(c->v->wd, &s->lease[k]);
        if (release)
            ADMIN_CALL(c->adm, release, s->sku, s->seg[k], s->lease[k].token);
        skutab_unclaim(s->e, s->seg[k]);
    }
    free(s->seg);
    free(s->lease);
    free(s);
    return lost;
}
