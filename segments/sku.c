/* sku.c -- SKU administration (see sku.h). */
#include "segments/sku.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/internal.h"
#include "segments/lockset.h"
#include "segments/skutab.h"
#include "segments/store.h"
#include "segments/xalloc.h"

const char *sku_mode_name(sku_mode m)
{
    return m == SKU_MODE_ATOMIC ? "atomic" : "lock";
}

int sku_mode_parse(const char *s, sku_mode *out)
{
    if (s != NULL && strcmp(s, "lock") == 0)
        *out = SKU_MODE_LOCK;
    else if (s != NULL && strcmp(s, "atomic") == 0)
        *out = SKU_MODE_ATOMIC;
    else
        return -1;
    return 0;
}

/* What an admin write is, for its request id: a retry under the same id must be the
 * same write. */
static void signature(char *buf, size_t len, const char *op, long long n,
                      const struct sku_config *cfg)
{
    if (cfg != NULL)
        snprintf(buf, len, "%s:%lld:%d:%s:%d:%d", op, cfg->stock, cfg->segments,
                 sku_mode_name(cfg->mode), cfg->hold_ms, cfg->rebalance);
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
    case SCRIPT_R_OK:
    case SCRIPT_R_REPLAYED:
        return INV_OK;
    case SCRIPT_R_CONFLICT:
        return INV_REQUEST_CONFLICT;
    case SCRIPT_R_MISSING:
        return INV_UNKNOWN_SKU;
    case SCRIPT_R_FENCED:
        return INV_BUSY;
    case SCRIPT_R_LIMIT:
        return INV_INVALID;
    case SCRIPT_R_STALE:
        return -1; /* look again */
    default:
        return INV_UNAVAILABLE;
    }
}

/* Run RESET over the SKU as `old` found it (segments 0 when there is none), writing
 * `cfg` (NULL: delete the SKU) under request id `rid`. Returns the script's code, or
 * -1 when Redis gave no usable answer. */
static int reset(inv_conn *c, const char *sku, const struct sku_view *old,
                 const struct sku_config *cfg, const char *rid)
{
    int n = cfg ? cfg->segments : 0;
    int m = old->cfg.segments > n ? old->cfg.segments : n;
    int nkeys = 3 + 7 * m;
    char(*names)[SEG_KEY_MAX] = seg_malloc(sizeof *names * (size_t)nkeys);
    const char **keys = seg_malloc(sizeof *keys * (size_t)nkeys);
    keys[0] = seg_key_meta(names[0], sku);
    keys[1] = seg_key_skus(names[1]);
    keys[2] = seg_key_request(names[2], sku, rid);
    for (int i = 0; i < m; i++) {
        int b = 3 + 7 * i;
        keys[b] = seg_key_stock(names[b], sku, i);
        keys[b + 1] = seg_key_sold(names[b + 1], sku, i);
        keys[b + 2] = seg_key_lock(names[b + 2], sku, i);
        keys[b + 3] = seg_key_orders(names[b + 3], sku, i);
        keys[b + 4] = seg_key_parts(names[b + 4], sku, i);
        keys[b + 5] = seg_key_cancelled(names[b + 5], sku, i);
        keys[b + 6] = seg_key_epoch(names[b + 6], sku, i);
    }
    /* Order keys are "<prefix><id><suffix>": split a key built around an empty id. */
    char order_key[SEG_KEY_MAX], prefix[SEG_KEY_MAX];
    seg_key_order(order_key, "");
    const char *suffix = strchr(order_key, '}');
    snprintf(prefix, sizeof prefix, "%.*s", (int)(suffix - order_key), order_key);

    char segs[16], hold[16], initial[24], more[24], share[24], extra[16];
    char old_epoch[24], old_segs[16], epoch[24], sig[128];
    long long stock = cfg ? cfg->stock : 0;
    snprintf(segs, sizeof segs, "%d", n);
    snprintf(hold, sizeof hold, "%d", cfg ? cfg->hold_ms : 0);
    snprintf(initial, sizeof initial, "%lld", stock);
    snprintf(share, sizeof share, "%lld", n ? stock / n : 0);
    snprintf(more, sizeof more, "%lld", n ? stock / n + 1 : 0);
    snprintf(extra, sizeof extra, "%lld", n ? stock % n : 0);
    snprintf(old_epoch, sizeof old_epoch, "%lld", old->epoch);
    snprintf(old_segs, sizeof old_segs, "%d", old->cfg.segments);
    snprintf(epoch, sizeof epoch, "%lld", inv_new_epoch());
    signature(sig, sizeof sig, cfg ? "put" : "delete", 0, cfg);
    const char *args[] = {
        sku,      prefix, suffix, segs,  sku_mode_name(cfg ? cfg->mode : 0), hold,
        initial,  more,   share,  extra, cfg && cfg->rebalance ? "1" : "0",  old_epoch,
        old_segs, epoch,  sig};

    redisReply *r = store_eval(c, SCRIPT_RESET, nkeys, keys, 15, args);
    free(keys);
    free(names);
    skutab_invalidate(c->v, sku);
    int code = store_is_array(r, 1) ? (int)r->element[0]->integer : -1;
    if (r != NULL)
        freeReplyObject(r);
    return code;
}

/* Create, reset (cfg) or delete (NULL) `sku`: read what the SKU is now, and reset
 * exactly that, again when another writer changed it in between. */
static inv_status reset_current(inv_conn *c, const char *sku,
                                const struct sku_config *cfg, const char *rid)
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
        int got = admin_status(reset(c, sku, &old, cfg, rid));
        if (got >= 0)
            return (inv_status)got;
    }
    return INV_BUSY;
}

inv_status sku_put(inv_conn *c, const char *sku, const struct sku_config *cfg,
                   const char *rid)
{
    if (!seg_valid_name(sku) || cfg->segments < 1 || cfg->segments > SEG_MAX_SEGMENTS ||
        cfg->stock < 0 || cfg->stock > SKU_STOCK_MAX || cfg->hold_ms < 0 ||
        cfg->hold_ms > SKU_HOLD_MAX_MS ||
        (cfg->mode != SKU_MODE_LOCK && cfg->mode != SKU_MODE_ATOMIC) ||
        (rid != NULL && rid[0] != '\0' && !seg_valid_name(rid)))
        return INV_INVALID;
    return reset_current(c, sku, cfg, rid);
}

inv_status sku_delete(inv_conn *c, const char *sku, const char *rid)
{
    if (!seg_valid_name(sku) || (rid != NULL && rid[0] != '\0' && !seg_valid_name(rid)))
        return INV_INVALID;
    return reset_current(c, sku, NULL, rid);
}

/* One ADJUST (scripts.c) of `sku` as `view` has it, under locks of every segment:
 * the script's code, -1 without an answer, or -2 with *st set when the locks were
 * not had. */
static int adjust_once(inv_conn *c, const char *sku, sku_local *e,
                       const struct sku_view *view, const char *op, long long add,
                       const char *rid, inv_status *st)
{
    const int n = view->cfg.segments;
    int seg[SEG_MAX_SEGMENTS];
    for (int i = 0; i < n; i++)
        seg[i] = i;
    struct lockset *set =
        lockset_take(c, e, sku, seg, n, inv_now_ms() + c->v->opt.lock_wait_ms, st);
    if (set == NULL)
        return -2;

    int nkeys = 2 + 2 * n, nargs = 6 + n;
    char(*names)[SEG_KEY_MAX] = seg_malloc(sizeof *names * (size_t)nkeys);
    const char **keys = seg_malloc(sizeof *keys * (size_t)nkeys);
    const char **args = seg_malloc(sizeof *args * (size_t)nargs);
    char amount[24], epoch[24], segs[16], limit[24], sig[128] = "";
    snprintf(amount, sizeof amount, "%lld", add);
    snprintf(epoch, sizeof epoch, "%lld", view->epoch);
    snprintf(segs, sizeof segs, "%d", n);
    snprintf(limit, sizeof limit, "%lld", SKU_STOCK_MAX - add);
    if (rid != NULL)
        signature(sig, sizeof sig, op, add, NULL);
    keys[0] = seg_key_meta(names[0], sku);
    keys[1] = rid != NULL ? seg_key_request(names[1], sku, rid) : keys[0];
    const char *head[] = {op, amount, epoch, segs, limit, sig};
    memcpy(args, head, sizeof head);
    for (int i = 0; i < n; i++) {
        keys[2 + 2 * i] = seg_key_lock(names[2 + 2 * i], sku, i);
        keys[3 + 2 * i] = seg_key_stock(names[3 + 2 * i], sku, i);
        args[6 + i] = lockset_token(set, i);
    }
    redisReply *r = store_eval(c, SCRIPT_ADJUST, nkeys, keys, nargs, args);
    free(names);
    free(keys);
    free(args);
    int code = store_is_array(r, 1) ? (int)r->element[0]->integer : -1;
    long long gen =
        code == SCRIPT_R_OK && store_is_array(r, 2) ? r->element[1]->integer : 0;
    if (r != NULL)
        freeReplyObject(r);
    lockset_drop(c, set, code < 0);
    if (gen > 0) {
        stat_add(c->v, add > 0 ? STAT_RESTOCKS : STAT_REBALANCES, 1);
        skutab_invalidate(c->v, sku);
    }
    return code;
}

/* Restock (`add` units) or rebalance (add 0) every segment of `sku` under its lock,
 * with the view of the SKU re-read whenever the script finds it stale. `rid` NULL:
 * no request id (the automatic rebalance). */
static inv_status adjust(inv_conn *c, const char *sku, const char *op, long long add,
                         const char *rid)
{
    for (int try = 0; try < 4; try++) {
        sku_local *e;
        struct sku_view view;
        inv_status st = skutab_get(c, sku, &e, &view);
        if (st != INV_OK)
            return st;
        int code = adjust_once(c, sku, e, &view, op, add, rid, &st);
        if (code == -2)
            return st;
        int got = admin_status(code);
        if (got >= 0)
            return (inv_status)got;
        skutab_invalidate(c->v, sku);
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

struct status_cmds {
    const char *sku;
    int n;
};

static void append_status(redisContext *rc, void *arg)
{
    const struct status_cmds *s = arg;
    char key[SEG_KEY_MAX];
    for (int i = 0; i < s->n; i++) {
        redisAppendCommand(rc, "GET %s", seg_key_stock(key, s->sku, i));
        redisAppendCommand(rc, "GET %s", seg_key_sold(key, s->sku, i));
        redisAppendCommand(rc, "HLEN %s", seg_key_orders(key, s->sku, i));
        redisAppendCommand(rc, "EXISTS %s", seg_key_lock(key, s->sku, i));
    }
}

inv_status sku_get(inv_conn *c, const char *sku, struct sku_status *st)
{
    if (!seg_valid_name(sku))
        return INV_INVALID;
    struct sku_view view;
    inv_status rc = skutab_read(c, sku, &view);
    if (rc != INV_OK)
        return rc;
    memset(st, 0, sizeof *st);
    snprintf(st->sku, sizeof st->sku, "%s", sku);
    st->cfg = view.cfg;

    int n = view.cfg.segments;
    redisReply **r = seg_malloc(sizeof *r * (size_t)(4 * n));
    struct status_cmds cmds = {sku, n};
    if (store_pipeline(c, 4 * n, append_status, &cmds, r) != 0) {
        free(r);
        return INV_UNAVAILABLE;
    }
    for (int i = 0; i < n; i++) {
        st->segment_stock[i] = store_integer(r[4 * i], 0);
        st->segment_sold[i] = store_integer(r[4 * i + 1], 0);
        st->remaining += st->segment_stock[i];
        st->sold += st->segment_sold[i];
        st->orders += store_integer(r[4 * i + 2], 0);
        st->locks_held += store_integer(r[4 * i + 3], 0) > 0;
    }
    for (int i = 0; i < 4 * n; i++)
        freeReplyObject(r[i]);
    free(r);
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
    char key[SEG_KEY_MAX];
    redisReply *r = store_command(c, "SMEMBERS %s", seg_key_skus(key));
    if (r == NULL)
        return INV_UNAVAILABLE;
    char **out = seg_malloc(sizeof *out * (r->elements + 1));
    size_t k = 0;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_STRING)
            continue;
        out[k++] = seg_strdup(r->element[i]->str);
    }
    freeReplyObject(r);
    qsort(out, k, sizeof *out, compare_names);
    *names = out;
    *n = k;
    return INV_OK;
}

void sku_list_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}
