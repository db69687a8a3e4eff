/* reserve_loop.c -- reservations placed and confirmed on an event loop (reserve.h): one
 * call of the loop's store each (Redis, standalone or a cluster; PostgreSQL),
 * pipelined with the loop's orders; a busy walk is tried again from a timer. */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "segments/engine_internal.h"
#include "segments/reserve.h"
#include "segments/skutab.h"

/* One reservation call on its way (the loop's, freed when answered). */
struct rl {
    engine *e;
    resv_done_fn done;
    void *arg;
    enum { RL_PLACE, RL_REPLAY, RL_CONFIRM, RL_WAIT } state;
    char id[SEG_NAME_MAX + 1];
    char sku[SEG_NAME_MAX + 1];
    char attempt[33];
    long long qty, ttl_s;
    int start, stale;
    int waits, least; /* RL_WAIT: WAITs out, the fewest replicas answered */
    int64_t deadline;
    struct event *timer;
    struct store_hold h; /* the answer so far (h.record, h.parts owned here) */
    resv_status result;
};

bool resv_loop_supported(engine *e)
{
    return e->st->ops->hold_place_any != NULL && e->st->ops->hold_by_id != NULL;
}

static void finish(struct rl *q, resv_status s)
{
    if (q->timer != NULL)
        event_free(q->timer);
    q->e->in_flight--;
    q->done(q->arg, s, q->id, &q->h);
    free(q->h.record);
    free(q->h.parts);
    free(q);
}

static void send_place(struct rl *q);
static void send_confirm(struct rl *q);

static void on_wait(void *arg, int rc, int replicas)
{
    struct rl *q = arg;
    if (rc < 0)
        q->least = -1;
    else if (q->least >= 0 && replicas < q->least)
        q->least = replicas;
    if (--q->waits > 0)
        return;
    finish(q, q->least < 0   ? RESV_UNAVAILABLE
              : q->least < 1 ? RESV_NOT_REPLICATED
                             : q->result);
}

/* s for q's hold, after a WAIT when its SKU is "replicated": on the node of every
 * segment it holds units on (each part's, on a Redis Cluster's other nodes) and the
 * id's. */
static void settle(struct rl *q, resv_status s, const char *order_id)
{
    if ((s == RESV_OK || s == RESV_REPLAYED) && q->h.replicated) {
        q->result = s;
        q->state = RL_WAIT;
        q->least = 1 << 30;
        int seg[SEG_MAX_SEGMENTS], n = 0;
        for (const char *p = q->h.parts; p != NULL && *p != '\0' && n < SEG_MAX_SEGMENTS;
             p += strcspn(p, ","), p += *p == ',')
            seg[n++] = atoi(p);
        if (n == 0)
            seg[n++] = q->h.segment;
        q->waits = n;
        for (int k = 0; k < n; k++)
            STORE_CALL(q->e->st, wait, q->h.placed, seg[k], k == 0 ? order_id : NULL,
                       q->e->v->opt.redis_timeout_ms / 2, on_wait, q);
        return;
    }
    finish(q, s);
}

/* Count what the store settled on its way; its stock rose: sold-out flags go. */
static void settled_on_the_way(struct rl *q, const struct store_hold *h)
{
    if (h->settled <= 0)
        return;
    stat_add(q->e->v, STAT_HOLDS_EXPIRED, h->settled);
    skutab_invalidate(q->e->v, h->sku[0] != '\0' ? h->sku : q->sku);
}

/* Take h over as q's answer (its record and parts included). */
static void keep(struct rl *q, struct store_hold *h)
{
    free(q->h.record);
    free(q->h.parts);
    q->h = *h;
    h->record = NULL;
    h->parts = NULL;
}

static void on_replay(void *arg, int rc, const struct store_reply *r,
                      struct store_hold *h)
{
    struct rl *q = arg;
    if (rc < 0) {
        finish(q, RESV_UNAVAILABLE);
        return;
    }
    settled_on_the_way(q, h);
    if (r->code == STORE_STALE || r->code == STORE_MISSING) {
        /* The hold the place found went between the two calls: a reset or a delete
         * made it void, and its id is free in the new sale (or there is none). Not
         * another's: place again, as after a STALE place. */
        if (++q->stale >= 4) {
            finish(q, RESV_BUSY);
            return;
        }
        q->state = RL_PLACE;
        send_place(q);
        return;
    }
    keep(q, h);
    bool same = r->code == STORE_OK && strcmp(h->sku, q->sku) == 0 && h->qty == q->qty;
    finish(q, same ? RESV_REPLAYED : RESV_CONFLICT);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct rl *q = arg;
    if (q->state == RL_CONFIRM)
        send_confirm(q);
    else
        send_place(q);
}

/* Again after a jittered 1-4 ms (a busy walk; a confirm whose id another step holds). */
static void again_later(struct rl *q)
{
    stat_add(q->e->v, STAT_LOCK_WAITS, 1);
    if (q->timer == NULL)
        q->timer = evtimer_new(q->e->base, on_timer, q);
    struct timeval tv = {0, 1000 * (1 + (int)ord_rnd(q->e, 4))};
    evtimer_add(q->timer, &tv);
}

static void on_place(void *arg, int rc, const struct store_reply *r, struct store_hold *h)
{
    struct rl *q = arg;
    if (rc < 0) {
        finish(q, RESV_UNAVAILABLE);
        return;
    }
    settled_on_the_way(q, h);
    switch (r->code) {
    case STORE_OK:
        keep(q, h);
        stat_add(q->e->v, STAT_HOLDS_PLACED, 1);
        settle(q, RESV_OK, q->id); /* the id: the index's node too, where apart */
        return;
    case STORE_EXISTS: /* the id is a hold already: the same request, or another's */
        q->state = RL_REPLAY;
        STORE_CALL(q->e->st, hold_by_id, q->id, STORE_HOLD_READ, q->attempt, on_replay,
                   q);
        return;
    case ADMIN_CONFLICT:
        finish(q, RESV_CONFLICT);
        return;
    case STORE_MISSING:
        finish(q, RESV_UNKNOWN_SKU);
        return;
    case ADMIN_MISMATCH:
        finish(q, RESV_UNSUPPORTED);
        return;
    case STORE_SHORT:
        stat_add(q->e->v, STAT_FALL_THROUGHS, 1);
        finish(q, r->value == 0 ? RESV_SOLD_OUT : RESV_INSUFFICIENT);
        return;
    case STORE_STALE:
        if (++q->stale >= 4) {
            finish(q, RESV_BUSY);
            return;
        }
        break;
    default: /* BUSY: every segment that could take it is locked right now */
        stat_add(q->e->v, STAT_BUSY_SKIPS, 1);
        if (inv_now_ms() >= q->deadline) {
            finish(q, RESV_BUSY);
            return;
        }
        break;
    }
    again_later(q);
}

static void send_place(struct rl *q)
{
    STORE_CALL(q->e->st, hold_place_any, q->sku, q->id, q->qty, (int)(q->ttl_s * 1000),
               q->start, q->attempt, on_place, q);
}

static struct rl *rl_new(engine *e, resv_done_fn done, void *arg)
{
    struct rl *q = seg_calloc(1, sizeof *q);
    q->e = e;
    q->done = done;
    q->arg = arg;
    inv_random_hex(q->attempt);
    e->in_flight++;
    return q;
}

void resv_place_start(engine *e, const struct resv_request *rq, resv_done_fn done,
                      void *arg)
{
    struct rl *q = rl_new(e, done, arg);
    q->state = RL_PLACE;
    snprintf(q->sku, sizeof q->sku, "%s", rq->sku);
    if (rq->id != NULL && rq->id[0] != '\0')
        snprintf(q->id, sizeof q->id, "%s", rq->id);
    else
        inv_random_hex(q->id);
    q->qty = rq->qty;
    q->ttl_s = rq->ttl_s;
    q->start = (int)ord_rnd(e, SEG_MAX_SEGMENTS);
    q->deadline = inv_now_ms() + e->v->opt.lock_wait_ms;
    send_place(q);
}

static void on_confirm(void *arg, int rc, const struct store_reply *r,
                       struct store_hold *h)
{
    struct rl *q = arg;
    if (rc < 0) {
        finish(q, RESV_UNAVAILABLE);
        return;
    }
    settled_on_the_way(q, h);
    if (r->code == STORE_BUSY && inv_now_ms() < q->deadline) {
        /* a Redis Cluster: another step holds the id's claim (a confirm racing this
         * one, an order with the id): wait and claim again, as an order does */
        again_later(q);
        return;
    }
    keep(q, h);
    resv_status s = resv_step_status(&q->h, r->code);
    if (s == RESV_OK)
        stat_add(q->e->v, STAT_HOLDS_CONFIRMED, 1);
    if ((s == RESV_OK || s == RESV_REPLAYED) && q->h.record == NULL)
        s = RESV_UNAVAILABLE;
    settle(q, s, q->id);
}

void resv_confirm_start(engine *e, const char *id, resv_done_fn done, void *arg)
{
    struct rl *q = rl_new(e, done, arg);
    q->state = RL_CONFIRM;
    snprintf(q->id, sizeof q->id, "%s", id);
    q->deadline = inv_now_ms() + e->v->opt.lock_wait_ms;
    send_confirm(q);
}

static void send_confirm(struct rl *q)
{
    STORE_CALL(q->e->st, hold_by_id, q->id, STORE_HOLD_CONFIRM, q->attempt, on_confirm,
               q);
}
