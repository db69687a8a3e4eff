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

/* Run RESET over `old` existing segments, writing `cfg` (NULL: delete the SKU). */
static inv_status reset(inv_conn *c, const char *sku, int old,
                        const struct sku_config *cfg)
{
    int n = cfg ? cfg->segments : 0;
    int m = old > n ? old : n;
    int nkeys = 2 + 6 * m;
    char(*names)[SEG_KEY_MAX] = seg_malloc(sizeof *names * (size_t)nkeys);
    const char **keys = seg_malloc(sizeof *keys * (size_t)nkeys);
    keys[0] = seg_key_meta(names[0], sku);
    keys[1] = seg_key_skus(names[1]);
    for (int i = 0; i < m; i++) {
        int b = 2 + 6 * i;
        keys[b] = seg_key_stock(names[b], sku, i);
        keys[b + 1] = seg_key_sold(names[b + 1], sku, i);
        keys[b + 2] = seg_key_lock(names[b + 2], sku, i);
        keys[b + 3] = seg_key_orders(names[b + 3], sku, i);
        keys[b + 4] = seg_key_parts(names[b + 4], sku, i);
        keys[b + 5] = seg_key_cancelled(names[b + 5], sku, i);
    }
    /* Order keys are "<prefix><id><suffix>": split a key built around an empty id. */
    char order_key[SEG_KEY_MAX], prefix[SEG_KEY_MAX];
    seg_key_order(order_key, "");
    const char *suffix = strchr(order_key, '}');
    snprintf(prefix, sizeof prefix, "%.*s", (int)(suffix - order_key), order_key);

    char segs[16], hold[16], initial[24], more[24], share[24], extra[16];
    long long stock = cfg ? cfg->stock : 0;
    snprintf(segs, sizeof segs, "%d", n);
    snprintf(hold, sizeof hold, "%d", cfg ? cfg->hold_ms : 0);
    snprintf(initial, sizeof initial, "%lld", stock);
    snprintf(share, sizeof share, "%lld", n ? stock / n : 0);
    snprintf(more, sizeof more, "%lld", n ? stock / n + 1 : 0);
    snprintf(extra, sizeof extra, "%lld", n ? stock % n : 0);
    const char *args[] = {
        sku,     prefix, suffix, segs,  sku_mode_name(cfg ? cfg->mode : 0), hold,
        initial, more,   share,  extra, cfg && cfg->rebalance ? "1" : "0"};

    redisReply *r = store_eval(c, SCRIPT_RESET, nkeys, keys, 11, args);
    free(keys);
    free(names);
    skutab_invalidate(c->v, sku);
    if (r == NULL)
        return INV_UNAVAILABLE;
    freeReplyObject(r);
    return INV_OK;
}

/* Segment count of `sku` in Redis: >= 1, 0 when unknown, -1 when unavailable. */
static int current_segments(inv_conn *c, const char *sku)
{
    struct sku_view view;
    inv_status st = skutab_read(c, sku, &view);
    return st == INV_OK ? view.cfg.segments : st == INV_UNKNOWN_SKU ? 0 : -1;
}

inv_status sku_put(inv_conn *c, const char *sku, const struct sku_config *cfg)
{
    if (!seg_valid_name(sku) || cfg->segments < 1 || cfg->segments > SEG_MAX_SEGMENTS ||
        cfg->stock < 0 || cfg->stock > SKU_STOCK_MAX || cfg->hold_ms < 0 ||
        cfg->hold_ms > SKU_HOLD_MAX_MS ||
        (cfg->mode != SKU_MODE_LOCK && cfg->mode != SKU_MODE_ATOMIC))
        return INV_INVALID;
    int old = current_segments(c, sku);
    return old < 0 ? INV_UNAVAILABLE : reset(c, sku, old, cfg);
}

inv_status sku_delete(inv_conn *c, const char *sku)
{
    if (!seg_valid_name(sku))
        return INV_INVALID;
    int old = current_segments(c, sku);
    return old < 0    ? INV_UNAVAILABLE
           : old == 0 ? INV_UNKNOWN_SKU
                      : reset(c, sku, old, NULL);
}

/* Restock (`add` units) or rebalance (add 0) every segment of `sku` under its lock. */
static inv_status adjust(inv_conn *c, const char *sku, const char *op, long long add)
{
    sku_local *e;
    struct sku_view view;
    inv_status st = skutab_get(c, sku, &e, &view);
    if (st != INV_OK)
        return st;
    if (view.cfg.stock > SKU_STOCK_MAX - add)
        return INV_INVALID;
    const int n = view.cfg.segments;
    int seg[SEG_MAX_SEGMENTS];
    for (int i = 0; i < n; i++)
        seg[i] = i;
    struct lockset *set =
        lockset_take(c, e, sku, seg, n, inv_now_ms() + c->v->opt.lock_wait_ms, &st);
    if (set == NULL)
        return st;

    int nkeys = 1 + 2 * n;
    char(*names)[SEG_KEY_MAX] = seg_malloc(sizeof *names * (size_t)nkeys);
    const char **keys = seg_malloc(sizeof *keys * (size_t)nkeys);
    const char **args = seg_malloc(sizeof *args * (size_t)(2 + n));
    char amount[24];
    snprintf(amount, sizeof amount, "%lld", add);
    keys[0] = seg_key_meta(names[0], sku);
    args[0] = op;
    args[1] = amount;
    for (int i = 0; i < n; i++) {
        keys[1 + 2 * i] = seg_key_lock(names[1 + 2 * i], sku, i);
        keys[2 + 2 * i] = seg_key_stock(names[2 + 2 * i], sku, i);
        args[2 + i] = lockset_token(set, i);
    }
    redisReply *r = store_eval(c, SCRIPT_ADJUST, nkeys, keys, 2 + n, args);
    free(names);
    free(keys);
    free(args);
    int code = store_is_array(r, 2) ? (int)r->element[0]->integer : -1;
    long long gen = code == SCRIPT_R_OK ? r->element[1]->integer : 0;
    if (r != NULL)
        freeReplyObject(r);
    lockset_drop(c, set, code != SCRIPT_R_OK);
    if (code != SCRIPT_R_OK)
        return code < 0 ? INV_UNAVAILABLE : INV_BUSY;
    if (gen > 0) {
        stat_add(c->v, add > 0 ? STAT_RESTOCKS : STAT_REBALANCES, 1);
        skutab_invalidate(c->v, sku);
    }
    return INV_OK;
}

inv_status sku_restock(inv_conn *c, const char *sku, long long qty)
{
    if (!seg_valid_name(sku) || qty < 1 || qty > SKU_RESTOCK_MAX)
        return INV_INVALID;
    return adjust(c, sku, "restock", qty);
}

inv_status sku_rebalance(inv_conn *c, const char *sku)
{
    if (!seg_valid_name(sku))
        return INV_INVALID;
    return adjust(c, sku, "rebalance", 0);
}

inv_status sku_spread(inv_conn *c, const char *sku)
{
    if (!seg_valid_name(sku))
        return INV_INVALID;
    return adjust(c, sku, "spread", 0);
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
