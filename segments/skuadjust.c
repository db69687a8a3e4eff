/* skuadjust.c -- the cluster's spread for the sweeper, and what every adjust shares
 * (see skuadjust.h). */
#include "segments/skuadjust.h"

#include <stdio.h>

#include <event2/event.h>

#include "segments/clock.h"
#include "segments/rand.h"
#include "segments/ring.h"
#include "segments/ltab.h"

/* What an admin write is, for its request id: a retry under the same id must be the
 * same write. */
void skuadj_signature(char *buf, size_t len, const char *op, long long n,
                      const struct sku_config *cfg)
{
    if (cfg != NULL)
        snprintf(buf, len, "%s:%lld:%d:%s:%d:%d:%d:%s:%d:%d", op, cfg->stock,
                 cfg->segments, sku_mode_name(cfg->mode), cfg->hold_ms, cfg->rebalance,
                 cfg->replicated, sku_lock_name(cfg->lock), cfg->unfenced,
                 cfg->batch > 1 ? cfg->batch : 1);
    else
        snprintf(buf, len, "%s:%lld", op, n);
}

/* Map what RESET or ADJUST answered to a status. */
int skuadj_status(int code)
{
    switch (code) {
    case STORE_OK:
    case ADMIN_REPLAYED:
        return INV_OK;
    case ADMIN_CONFLICT:
        return INV_REQUEST_CONFLICT;
    case STORE_EXISTS:
        return INV_SKU_EXISTS;
    case ADMIN_MISMATCH:
        return INV_PRECONDITION;
    case STORE_MISSING:
        return INV_UNKNOWN_SKU;
    case STORE_FENCED:
        return INV_BUSY;
    case ADMIN_LIMIT:
        return INV_INVALID;
    case ADMIN_NOT_REPLICATED:
        return INV_NOT_REPLICATED;
    case STORE_STALE:
        return -1; /* look again */
    default:
        return INV_UNAVAILABLE;
    }
}

/* What an answered ADJUST changed: counted, and every loop's view of it dropped. */
void skuadj_adjusted(inv_conn *c, const char *sku, int code, long long gen, long long add)
{
    if (gen > 0) {
        stat_add(c->v, add > 0 ? STAT_RESTOCKS : STAT_REBALANCES, 1);
        skutab_invalidate(c->v, sku);
    } else if (code == ADMIN_NOT_REPLICATED) { /* it may have committed: look again */
        skutab_invalidate(c->v, sku);
    }
}

struct spread_answer {
    bool done;
    int code;
    long long gen;
};

static void on_spread(void *arg, int rc, struct store_reply *r)
{
    struct spread_answer *a = arg;
    a->done = true;
    a->code = rc < 0 ? -1 : r->code;
    a->gen = rc == 0 && r->code == STORE_OK ? r->value : 0;
}

/* One ADJUST "spread" of `sku` as `view` has it, on a Redis Cluster: the store's
 * per-slot steps without locks (store.h adjust), on c's own loop (made by the caller:
 * skuadjust.h), each on a replica
 * before the next for a `replicated` SKU. The store's code, or -1 without an
 * answer. */
static int spread_once(inv_conn *c, const char *sku, const struct sku_view *view)
{
    char placed[STORE_SKU_PLACED_MAX];
    store_sku_placed(placed, sku, view->salt);
    int wait_ms = view->cfg.replicated ? c->v->opt.redis_timeout_ms / 2 : 0;
    struct spread_answer a = {0};
    STORE_CALL(c->st, adjust, placed, view->epoch, view->cfg.segments, NULL, NULL,
               "spread", 0, SKU_STOCK_MAX, NULL, "", wait_ms, on_spread, &a);
    while (!a.done)
        event_base_loop(c->base, EVLOOP_ONCE);
    skuadj_adjusted(c, sku, a.code, a.gen, 0);
    return a.code;
}

/* Durability "replicated" on a standalone Redis: a restock or rebalance is 200 once a
 * replica has it too; else 503 not_replicated, and its retry under the same request id
 * answers 200 (replayed). (On a cluster the seam WAITs after every step.) */
static inv_status replicated(inv_conn *c, const char *sku, const struct sku_view *view)
{
    char placed[STORE_SKU_PLACED_MAX];
    store_sku_placed(placed, sku, view->salt);
    int replicas = ADMIN_CALL(c->adm, wait, placed, view->cfg.segments, NULL, NULL, sku,
                              c->v->opt.redis_timeout_ms / 2);
    return replicas < 0 ? INV_UNAVAILABLE : replicas < 1 ? INV_NOT_REPLICATED : INV_OK;
}

/* An answered ADJUST's status: `code` (STALE: -1, look again), a replica waited for
 * first where the request asked for durability "replicated" on a standalone store. */
int skuadj_settle(inv_conn *c, const char *sku, int code, const struct sku_view *view,
                  const char *rid)
{
    if (code == ADMIN_NOT_REPLICATED)
        return INV_NOT_REPLICATED;
    int got = skuadj_status(code);
    if (got == INV_OK && view->cfg.replicated && rid != NULL &&
        !(ADMIN_CALL0(c->adm, caps) & ADMIN_CAP_CLUSTER))
        return replicated(c, sku, view);
    return got;
}

/* (sku.h) Run here, not in sku.c: the sweeper calls it, and sku.c calls the engine,
 * which calls the sweeper. The settings read again when stale, another adjust's BUSY
 * tried again within lock_wait_ms. */
inv_status sku_spread(inv_conn *c, const char *sku)
{
    if (!seg_valid_name(sku))
        return INV_INVALID;
    int64_t deadline = inv_now_ms() + c->v->opt.lock_wait_ms;
    for (int try = 0, round = 0; try < 4;) {
        lsku *s;
        struct sku_view view;
        inv_status st = ltab_get(c, sku, &s, &view);
        if (st != INV_OK)
            return st;
        int code = spread_once(c, sku, &view);
        ltab_release(ltab_of_conn(c), s);
        if (code == STORE_BUSY) {
            int left = (int)(deadline - inv_now_ms());
            if (left <= 0)
                return INV_BUSY;
            inv_sleep_ms(ring_backoff_ms(round++, inv_rand(c, UINT32_MAX), left));
            continue;
        }
        int got = skuadj_settle(c, sku, code, &view, NULL);
        if (got >= 0)
            return (inv_status)got;
        skutab_invalidate(c->v, sku);
        try++;
    }
    return INV_BUSY;
}
