/* lease.c -- lease renewal of the segment lock(s) an order holds (every lock_ttl_ms / 3).
 */
#include "segments/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/xalloc.h"

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

/* A lock service's renewal: LOST was counted by the lost callback, which runs first;
 * no answer changes nothing (the hold's end, if it comes, calls that callback). */
static void on_svc_renewed(void *arg, int rc)
{
    struct ord *o = arg;
    o->pending--;
    if (rc == LKS_OK)
        stat_add(o->e->v, STAT_LEASE_RENEWALS, 1);
    else if (rc == LKS_LOST)
        o->lease_lost = true;
    if (o->state == ORD_DONE && o->pending == 0)
        ord_finish(o, o->res.status); /* frees it */
}

/* The renewal of the order's own hold (lh): only an OK keeps it fit to go on to
 * the loop's next order (handover_svc_may_keep). */
static void on_lh_renewed(void *arg, int rc)
{
    struct ord *o = arg;
    o->renewing--;
    if (rc != LKS_OK)
        o->renew_failed = true;
    on_svc_renewed(arg, rc);
}

static void on_svc_lost(void *arg, lks_hold *h)
{
    (void)h;
    struct ord *o = arg;
    stat_add(o->e->v, STAT_LEASE_LOST, 1);
    o->lease_lost = true;
}

void lease_svc_watch(struct ord *o, lks_hold *h)
{
    h->lost = on_svc_lost;
    h->lost_arg = o;
}

void lease_svc_hold(struct ord *o, lks_hold *h)
{
    o->lh = h;
    o->lease_lost = false; /* from the grant: a loss before lease_start counts */
    o->renew_failed = false;
    lease_svc_watch(o, h);
}

bool lease_svc_ready(struct ord *o)
{
    engine *e = o->e;
    o->lk = o->view.cfg.lock;
    return e->lks[o->lk] != NULL && (store_caps(e->st) & STORE_CAP_FENCE);
}

void lease_svc_acquire(struct ord *o, int i, lks_acquire_fn fn)
{
    engine *e = o->e;
    char name[STORE_SKU_PLACED_MAX + 16];
    snprintf(name, sizeof name, "%s:%d", o->placed, i);
    for (char *p = name; *p != '\0'; p++)
        if (*p == '/') /* "sku/salt": a znode's name takes no '/' (names have no ':') */
            *p = ':';
    e->lks_ops[o->lk]->acquire(e->lks[o->lk], name, e->v->opt.lock_ttl_ms, 0, fn, o);
}

/* A release whose segment's claim goes back once the service answered. */
struct released {
    struct ord *o;
    int seg;
};

static void on_svc_released(void *arg, int rc)
{
    (void)rc; /* LOST or no answer: the lease ends it anyway */
    struct released *r = arg;
    struct ord *o = r->o;
    ltab_unclaim(o->s, r->seg);
    free(r);
    o->pending--;
    if (o->state == ORD_DONE && o->pending == 0)
        ord_finish(o, o->res.status); /* frees it */
}

void lease_svc_give(struct ord *o, lks_hold *h, int i)
{
    engine *e = o->e;
    h->lost = NULL;
    if (i < 0) {
        e->lks_ops[o->lk]->release(e->lks[o->lk], h, NULL, NULL);
        return;
    }
    struct released *r = seg_malloc(sizeof *r);
    r->o = o;
    r->seg = i;
    o->pending++;
    e->lks_ops[o->lk]->release(e->lks[o->lk], h, on_svc_released, r);
}

void lease_svc_release(struct ord *o, bool unclaim)
{
    lks_hold *h = o->lh;
    o->lh = NULL;
    lease_svc_give(o, h, unclaim ? o->seg : -1);
}

static void lease_on_tick(evutil_socket_t fd, short what, void *arg);

/* The renewal timer armed `ms` from now, then every lock_ttl_ms / 3 (re-armed by each
 * tick, so a hold gone on to another order keeps its schedule: lease_svc_pass). */
static void lease_arm(struct ord *o, int ms)
{
    if (o->renew == NULL) {
        o->renew = event_new(o->e->base, -1, 0, lease_on_tick, o);
        if (o->renew == NULL) {
            fputs("inventoryd: out of memory\n", stderr);
            abort();
        }
    }
    o->renew_due_ms = inv_now_ms() + ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(o->renew, &tv);
}

/* The renewal timer (o->renew's callback). */
static void lease_on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ord *o = arg;
    lease_arm(o, o->e->v->opt.lock_ttl_ms / 3);
    if (!o->holding || o->lease_lost)
        return;
    if (ord_admin_locks(o)) { /* an admin write's set of the store's locks */
        for (int k = 0; k < o->mk; k++) {
            o->pending++;
            STORE_CALL(o->e->st, renew, o->placed, o->mseg[k], o->mtok[k],
                       o->e->v->opt.lock_ttl_ms, on_renewed, o);
        }
        return;
    }
    if (o->lh == NULL && (o->state == ORD_MULTI || o->state == ORD_SPREAD)) {
        /* a lock service's set (multi.c, spread.c) */
        engine *e = o->e;
        for (int k = 0; k < o->mk; k++) {
            if (o->mlh[k] == NULL)
                continue;
            o->pending++;
            e->lks_ops[o->lk]->renew(e->lks[o->lk], o->mlh[k], e->v->opt.lock_ttl_ms,
                                     on_svc_renewed, o);
        }
        return;
    }
    o->pending++;
    if (o->lh != NULL) {
        engine *e = o->e;
        o->renewing++;
        e->lks_ops[o->lk]->renew(e->lks[o->lk], o->lh, e->v->opt.lock_ttl_ms,
                                 on_lh_renewed, o);
        return;
    }
    STORE_CALL(o->e->st, renew, o->placed, o->seg, o->token, o->e->v->opt.lock_ttl_ms,
               on_renewed, o);
}

void lease_start(struct ord *o)
{
    o->holding = true;
    if (o->lh == NULL) /* a service's hold was marked from its grant on */
        o->lease_lost = false;
    lease_arm(o, o->e->v->opt.lock_ttl_ms / 3);
}

void lease_svc_pass(struct ord *o, struct ord *w)
{
    lks_hold *h = o->lh;
    o->lh = NULL;
    w->lh = h;
    w->lk = o->lk;
    w->fence = o->fence;
    w->lease_lost = false; /* o's was not (handover_svc_may_keep) */
    w->renew_failed = false;
    lease_svc_watch(w, h); /* its loss marks w from now on */
    int64_t due = o->renew_due_ms - inv_now_ms();
    lease_stop(o);
    w->holding = true;
    lease_arm(w, due > 0 ? (int)due : 0);
}
