/* sku.c -- SKU administration (see sku.h). */
#include "segments/sku.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/clock.h"
#include "segments/internal.h"
#include "segments/lockset.h"
#include "segments/rand.h"
#include "segments/reserve.h"
#include "segments/ring.h"
#include "segments/skutab.h"
#include "base/xalloc.h"

/* What an admin write is, for its request id: a retry under the same id must be the
 * same write. */
static void signature(char *buf, size_t len, const char *op, long long n,
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

/* The request id to record a write under: the caller's, or a fresh one, so that a
 * script sent again after a lost reply still finds its own earlier run. */
static const char *request_id(const char *given, char fresh[33])
{
    if (given != NULL && given[0] != '\0')
        return given;
    inv_random_hex(fresh);
    return fresh;
}

/* Map what RESET or ADJUST answered to a status. */
static int admin_status(int code)
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

/* Run RESET over the SKU as `old` found it (segments 0 when there is none), writing
 * `cfg` (NULL: delete the SKU) under request id `rid`, if the SKU is the version
 * `expect` names (calls.h rd_reset.expect); `retake`: admin.h admin_reset.retake. Returns
 * the script's code, or -1 when Redis gave no usable answer; *created as rd_reset's
 * value. */
static int reset(inv_conn *c, const char *sku, const struct sku_view *old,
                 const struct sku_config *cfg, const char *lock, const char *expect,
                 const char *rid, bool retake, bool *created)
{
    char sig[128 + SKU_LOCK_MAX];
    signature(sig, sizeof sig, cfg ? "put" : "delete", 0, cfg);
    if (lock[0] != '\0') /* a retry naming another scheme is another write */
        snprintf(sig + strlen(sig), sizeof sig - strlen(sig), ":%s", lock);
    const struct admin_reset to = {
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
    struct store_reply r = {0};
    int rc =
        ADMIN_CALL(c->adm, reset, sku, old->epoch, old->cfg.segments, &to, rid, sig, &r);
    skutab_invalidate(c->v, sku);
    *created = rc == 0 && r.value == 1;
    admin_reply_clear(&r);
    return rc < 0 ? -1 : r.code;
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
            admin_status(reset(c, sku, &old, cfg, lock, expect, rid, try == 0, created));
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

/* One ADJUST (scripts.c) of `sku` as `view` has it: under locks of every segment on
 * a standalone Redis; on a Redis Cluster without them, in the seam's per-slot steps
 * (calls.h rd_adjust), each on a replica before the next for a `replicated` SKU. The
 * script's code (ADMIN_NOT_REPLICATED: a step reached no replica), -1 without an answer,
 * or -2 with *st set when the locks were not had. */
static int adjust_once(inv_conn *c, const char *sku, sku_local *e,
                       const struct sku_view *view, const char *op, long long add,
                       const char *rid, inv_status *st)
{
    const int n = view->cfg.segments;
    struct lockset *set = NULL;
    const char **tok = NULL;
    if (ADMIN_CALL0(c->adm, caps) & ADMIN_CAP_LOCKS) {
        int seg[SEG_MAX_SEGMENTS];
        for (int i = 0; i < n; i++)
            seg[i] = i;
        set = lockset_take(c, e, sku, seg, n, inv_now_ms() + c->v->opt.lock_wait_ms, st);
        if (set == NULL)
            return -2;
        tok = seg_malloc(sizeof *tok * (size_t)n);
        for (int i = 0; i < n; i++)
            tok[i] = lockset_token(set, i);
    }
    char sig[128] = "";
    if (rid != NULL)
        signature(sig, sizeof sig, op, add, NULL);
    struct store_reply r = {0};
    int wait_ms = view->cfg.replicated ? c->v->opt.redis_timeout_ms / 2 : 0;
    int code = ADMIN_CALL(c->adm, adjust, sku, view->epoch, n, tok, op, add,
                          SKU_STOCK_MAX - add, rid, sig, wait_ms, &r) < 0
                   ? -1
                   : r.code;
    long long gen = code == STORE_OK ? r.value : 0;
    admin_reply_clear(&r);
    free(tok);
    if (set != NULL)
        lockset_drop(c, set, code < 0);
    if (gen > 0) {
        stat_add(c->v, add > 0 ? STAT_RESTOCKS : STAT_REBALANCES, 1);
        skutab_invalidate(c->v, sku);
    } else if (code == ADMIN_NOT_REPLICATED) { /* it may have committed: look again */
        skutab_invalidate(c->v, sku);
    }
    return code;
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

/* Restock (`add` units) or rebalance (add 0) every segment of `sku`, with the view of
 * the SKU re-read whenever the script finds it stale. On a cluster, another adjust (or
 * a reset) of the SKU under way answers BUSY: tried again within lock_wait_ms, as a
 * standalone Redis waits for the locks. `rid` NULL: no request id (the automatic
 * rebalance). */
static inv_status adjust(inv_conn *c, const char *sku, const char *op, long long add,
                         const char *rid)
{
    int64_t deadline = inv_now_ms() + c->v->opt.lock_wait_ms;
    for (int try = 0, round = 0; try < 4;) {
        sku_local *e;
        struct sku_view view;
        inv_status st = skutab_get(c, sku, &e, &view);
        if (st != INV_OK)
            return st;
        int code = adjust_once(c, sku, e, &view, op, add, rid, &st);
        skutab_release(c->v->tab, e);
        if (code == -2)
            return st;
        if (code == STORE_BUSY) {
            int left = (int)(deadline - inv_now_ms());
            if (left <= 0)
                return INV_BUSY;
            inv_sleep_ms(ring_backoff_ms(round++, inv_rand(c, UINT32_MAX), left));
            continue;
        }
        if (code == ADMIN_NOT_REPLICATED)
            return INV_NOT_REPLICATED;
        int got = admin_status(code);
        if (got == INV_OK && view.cfg.replicated && rid != NULL &&
            !(ADMIN_CALL0(c->adm, caps) & ADMIN_CAP_CLUSTER))
            return replicated(c, sku, &view);
        if (got >= 0)
            return (inv_status)got;
        skutab_invalidate(c->v, sku);
        try++;
    }
    return INV_BUSY;
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

inv_status sku_spread(inv_conn *c, const char *sku)
{
    if (!seg_valid_name(sku))
        return INV_INVALID;
    return adjust(c, sku, "spread", 0, NULL);
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
