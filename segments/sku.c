/* sku.c -- SKU administration (see sku.h). */
#include "segments/sku.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/engine.h"
#include "segments/internal.h"
#include "segments/clock.h"
#include "segments/rand.h"
#include "segments/reserve.h"
#include "segments/ring.h"
#include "segments/skuadjust.h"
#include "segments/skutab.h"
#include "base/xalloc.h"

/* The request id to record a write under: the caller's, or a fresh one, so that a
 * script sent again after a lost reply still finds its own earlier run. */
static const char *request_id(const char *given, char fresh[33])
{
    if (given != NULL && given[0] != '\0')
        return given;
    inv_random_hex(fresh);
    return fresh;
}

struct reset_answer {
    bool done;
    int rc;
    struct store_reply r;
};

static void on_reset(void *arg, int rc, struct store_reply *r)
{
    struct reset_answer *a = arg;
    a->done = true;
    a->rc = rc;
    if (rc == 0)
        a->r = (struct store_reply){.code = r->code, .value = r->value};
}

/* Run RESET over the SKU as `old` found it (segments 0 when there is none), writing
 * `cfg` (NULL: delete the SKU) under request id `rid`, if the SKU is the version
 * `expect` names (store.h store_reset.expect); `retake`: store_reset.retake. On the
 * store's asynchronous code on c's own loop (store.h reset), waited for. Returns the
 * store's code, or -1 when it gave no usable answer; *created as the reset's value. */
static int reset(inv_conn *c, const char *sku, const struct sku_view *old,
                 const struct sku_config *cfg, const char *lock, const char *expect,
                 const char *rid, bool retake, bool *created)
{
    char sig[128 + SKU_LOCK_MAX];
    skuadj_signature(sig, sizeof sig, cfg ? "put" : "delete", 0, cfg);
    if (lock[0] != '\0') /* a retry naming another scheme is another write */
        snprintf(sig + strlen(sig), sizeof sig - strlen(sig), ":%s", lock);
    const struct store_reset to = {
        .segments = cfg ? cfg->segments : 0,
        .mode = sku_mode_name(cfg ? cfg->mode : SKU_MODE_LOCK),
        .lock = lock,
        .hold_ms = cfg ? cfg->hold_ms : 0,
        .batch = cfg && cfg->batch > 1 ? cfg->batch : 1,
        .stock = cfg ? cfg->stock : 0,
        .rebalance = cfg && cfg->rebalance,
        .replicated = cfg && cfg->replicated,
        .unfenced = cfg && cfg->unfenced,
        .salt = old->epoch != 0 ? old->salt : -1, /* kept; a new SKU is placed */
        .epoch = inv_new_epoch(),
        /* "replicated" before or after: every step on a replica before the next */
        .wait_ms = (cfg && cfg->replicated) || (old->epoch != 0 && old->cfg.replicated)
                       ? c->v->opt.redis_timeout_ms / 2
                       : 0,
        .expect = expect,
        .ledger = c->v->opt.ledger,
        .retake = retake,
    };
    struct reset_answer a = {0};
    STORE_CALL(inv_conn_store(c), reset, sku, old->epoch, old->cfg.segments, &to, rid,
               sig, on_reset, &a);
    inv_conn_wait(c, &a.done);
    skutab_invalidate(c->v, sku);
    *created = a.rc == 0 && a.r.value == 1;
    return a.rc < 0 ? -1 : a.r.code;
}

/* Create, reset (cfg) or delete (NULL) `sku` if it is the version `expect` names:
 * read what the SKU is now, and reset exactly that, again when another writer changed
 * it in between. */
static inv_status reset_current(inv_conn *c, const char *sku,
                                const struct sku_config *cfg, const char *lock,
                                const char *expect, const char *rid, bool *created)
{
    char fresh[33];
    rid = request_id(rid, fresh);
    for (int try = 0; try < 8; try++) {
        struct sku_view old = {.epoch = 0};
        inv_status st = skutab_read(c, sku, &old);
        if (st == INV_UNAVAILABLE)
            return st;
        if (st == INV_UNKNOWN_SKU)
            old.epoch = 0, old.cfg.segments = 0;
        /* The first look takes over an earlier attempt of this request (its retry's
         * case: that attempt answered 503 and died half way); a later look does not,
         * or two attempts sent at once would take each other over in turn. */
        int got =
            skuadj_status(reset(c, sku, &old, cfg, lock, expect, rid, try == 0, created));
        if (cfg == NULL && (got == INV_OK || got == INV_UNKNOWN_SKU))
            skutab_drop(c->v, sku); /* gone: nothing of it stays in the process */
        if (got >= 0)
            return (inv_status)got;
    }
    return INV_BUSY;
}

inv_status sku_put(inv_conn *c, const char *sku, const struct sku_config *cfg,
                   enum sku_replace how, const struct sku_version *v, const char *rid,
                   bool *created)
{
    return sku_put_lock(c, sku, cfg, NULL, how, v, rid, created);
}

inv_status sku_put_lock(inv_conn *c, const char *sku, const struct sku_config *cfg,
                        const char *lock, enum sku_replace how,
                        const struct sku_version *v, const char *rid, bool *created)
{
    bool made = false;
    if (lock == NULL)
        lock = "";
    char expect[48] = "";
    if (how == SKU_REPLACE_NONE)
        snprintf(expect, sizeof expect, "-");
    else if (how == SKU_REPLACE_EXISTING)
        snprintf(expect, sizeof expect, "*");
    else if (how == SKU_REPLACE_VERSION && v != NULL)
        snprintf(expect, sizeof expect, "%lld.%lld", v->epoch, v->gen);
    else if (how != SKU_REPLACE_ANY)
        return INV_INVALID;
    if (!seg_valid_name(sku) || cfg->segments < 1 || cfg->segments > SEG_MAX_SEGMENTS ||
        cfg->stock < 0 || cfg->stock > SKU_STOCK_MAX || cfg->hold_ms < 0 ||
        cfg->hold_ms > SKU_HOLD_MAX_MS || cfg->batch < 0 || cfg->batch > SKU_BATCH_MAX ||
        (cfg->mode != SKU_MODE_LOCK && cfg->mode != SKU_MODE_ATOMIC) ||
        (rid != NULL && rid[0] != '\0' && !seg_valid_name(rid)))
        return INV_INVALID;
    if (cfg->batch > 1 && !(ADMIN_CALL0(c->adm, caps) & ADMIN_CAP_BATCH))
        return INV_INVALID; /* a store that cannot sell in batches (admin.h) */
    if (lock[0] != '\0') {  /* a lock scheme this store has (admin.h) */
        const char *const *l = c->adm->ops->locks;
        while (*l != NULL && strcmp(*l, lock) != 0)
            l++;
        if (*l == NULL)
            return INV_INVALID;
    }
    inv_status s = reset_current(c, sku, cfg, lock, expect, rid, &made);
    if (created != NULL)
        *created = s == INV_OK && made;
    return s;
}

inv_status sku_delete(inv_conn *c, const char *sku, const char *rid)
{
    if (!seg_valid_name(sku) || (rid != NULL && rid[0] != '\0' && !seg_valid_name(rid)))
        return INV_INVALID;
    bool made;
    return reset_current(c, sku, NULL, "", "", rid, &made);
}

struct answer {
    bool done;
    inv_status st;
};

static void answered(void *arg, struct order_result *res)
{
    struct answer *a = arg;
    a->done = true;
    a->st = res->status;
}

/* One ADJUST of `sku` on the engine's code (engine.h engine_adjust), on c's own loop,
 * with the store's segment locks (a standalone Redis) or, `unlocked`, none (a store
 * that serializes it itself: PostgreSQL; a Redis Cluster's steps): the store's code
 * (-1: no answer), or -2 with *st set when it was not answered (*view: the settings it
 * ran under). */
static int adjust_on_loop(inv_conn *c, const char *sku, const char *op, long long add,
                          const char *rid, bool unlocked, struct sku_view *view,
                          inv_status *st)
{
    char sig[128] = "";
    if (rid != NULL)
        skuadj_signature(sig, sizeof sig, op, add, NULL);
    struct engine_adjust a = {
        .op = op,
        .add = add,
        .limit = SKU_STOCK_MAX - add,
        .rid = rid,
        .sig = sig,
        .unlocked = unlocked,
        .view = view,
    };
    struct answer done = {0};
    engine_adjust(engine_of_conn(c), sku, &a, answered, &done);
    inv_conn_wait(c, &done.done);
    if (done.st != INV_OK) {
        *st = done.st;
        return -2;
    }
    skuadj_adjusted(c, sku, a.code, a.gen, add);
    return a.code;
}

/* Restock (`add` units) or rebalance (add 0) every segment of `sku`, with the view of
 * the SKU re-read whenever the store finds it stale, on the engine's code on c's loop
 * (adjust_on_loop): under the store's segment locks where the admin table wants them
 * (ADMIN_CAP_LOCKS: a standalone Redis), else without (PostgreSQL locks the rows in
 * its transaction; a Redis Cluster's steps take none: there another adjust (or a
 * reset) of the SKU under way answers BUSY, tried again within lock_wait_ms, as a
 * standalone Redis waits for the locks). */
static inv_status adjust(inv_conn *c, const char *sku, const char *op, long long add,
                         const char *rid)
{
    int64_t deadline = inv_now_ms() + c->v->opt.lock_wait_ms;
    for (int round = 0;; round++) {
        bool unlocked = !(ADMIN_CALL0(c->adm, caps) & ADMIN_CAP_LOCKS);
        struct sku_view view;
        inv_status st = INV_UNAVAILABLE;
        int code = adjust_on_loop(c, sku, op, add, rid, unlocked, &view, &st);
        if (code == -2)
            return st;
        if (code == STORE_BUSY) {
            int left = (int)(deadline - inv_now_ms());
            if (left <= 0)
                return INV_BUSY;
            inv_sleep_ms(ring_backoff_ms(round, inv_rand(c, UINT32_MAX), left));
            continue;
        }
        int got = skuadj_settle(c, sku, code, &view, rid);
        return got >= 0 ? (inv_status)got : INV_BUSY; /* STALE: the engine's retries */
    }
}

inv_status sku_restock(inv_conn *c, const char *sku, long long qty, const char *rid)
{
    if (!seg_valid_name(sku) || qty < 1 || qty > SKU_RESTOCK_MAX ||
        (rid != NULL && rid[0] != '\0' && !seg_valid_name(rid)))
        return INV_INVALID;
    char fresh[33];
    return adjust(c, sku, "restock", qty, request_id(rid, fresh));
}

inv_status sku_rebalance(inv_conn *c, const char *sku, const char *rid)
{
    if (!seg_valid_name(sku) || (rid != NULL && rid[0] != '\0' && !seg_valid_name(rid)))
        return INV_INVALID;
    char fresh[33];
    return adjust(c, sku, "rebalance", 0, request_id(rid, fresh));
}

inv_status sku_get(inv_conn *c, const char *sku, struct sku_status *st)
{
    if (!seg_valid_name(sku))
        return INV_INVALID;
    struct sku_view view;
    int rc_read = -1;
    /* The settings are read again with the numbers where the store can (one VIEW on a
     * standalone Redis), so initial and the segments are of one instant (a restock
     * between two reads would show initial off by its units); a reset between the two
     * reads (other keys) reads both again, a few times at most. */
    for (int try = 0; try < 4 && rc_read != 0; try++) {
        inv_status rc = skutab_read(c, sku, &view);
        if (rc != INV_OK)
            return rc;
        memset(st, 0, sizeof *st);
        store_sku_placed(st->placed, sku, view.salt);
        struct store_meta m;
        int got =
            ADMIN_CALL(c->adm, segments_read, sku, st->placed, view.cfg.segments,
                       view.epoch, st->segment_stock, st->segment_sold,
                       st->segment_orders, st->segment_locked, st->segment_reserved, &m);
        if (got < 0)
            return INV_UNAVAILABLE;
        if (got == 2)
            return INV_UNKNOWN_SKU;
        if (got == 1 && (m.epoch != view.epoch || m.salt != view.salt ||
                         m.segments != view.cfg.segments))
            continue; /* a reset in between: the keys read were another version's */
        if (got == 1) {
            /* What changes without a reset: a restock's initial, gen. */
            view.cfg.stock = m.initial;
            view.gen = m.gen;
        }
        rc_read = 0;
    }
    if (rc_read != 0)
        return INV_BUSY;
    snprintf(st->sku, sizeof st->sku, "%s", sku);
    st->cfg = view.cfg;
    memcpy(st->lock, view.lock, sizeof st->lock);
    st->version = (struct sku_version){view.epoch, view.gen};

    int n = view.cfg.segments;
    char *placed = st->placed;
    for (int i = 0; i < n && rc_read == 0; i++) {
        char node[48];
        rc_read = ADMIN_CALL(c->adm, segment_place, placed, i, &st->segment_slot[i], node,
                             sizeof node);
        st->segment_node[i] = -1;
        for (int k = 0; node[0] != '\0' && k <= st->nnodes && k < SKU_NODES_MAX; k++) {
            if (k == st->nnodes)
                snprintf(st->nodes[st->nnodes++], sizeof st->nodes[0], "%s", node);
            if (strcmp(st->nodes[k], node) == 0) {
                st->segment_node[i] = (short)k;
                break;
            }
        }
    }
    for (int i = 0; i < n && rc_read == 0; i++) {
        st->remaining += st->segment_stock[i];
        st->sold += st->segment_sold[i];
        st->orders += st->segment_orders[i];
        st->locks_held += st->segment_locked[i];
        st->reserved += st->segment_reserved[i];
    }
    if (rc_read != 0)
        return INV_UNAVAILABLE;
    return INV_OK;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

inv_status sku_list(inv_conn *c, char ***names, size_t *n)
{
    *names = NULL;
    *n = 0;
    if (ADMIN_CALL(c->adm, skus_list, names, n) != 0)
        return INV_UNAVAILABLE;
    qsort(*names, *n, sizeof **names, compare_names);
    return INV_OK;
}

inv_status sku_list_page(inv_conn *c, const char *after, size_t limit, char ***names,
                         size_t *n, bool *more)
{
    char **all;
    size_t total;
    *more = false;
    inv_status s = sku_list(c, &all, &total);
    if (s != INV_OK) {
        *names = NULL;
        *n = 0;
        return s;
    }
    size_t lo = 0, hi = total; /* the first name greater than `after` */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(all[mid], after) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t k = total - lo < limit ? total - lo : limit;
    for (size_t i = 0; i < lo; i++)
        free(all[i]);
    for (size_t i = lo + k; i < total; i++)
        free(all[i]);
    memmove(all, all + lo, k * sizeof *all);
    *names = all;
    *n = k;
    *more = lo + k < total;
    return INV_OK;
}

void sku_list_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}
