/* calls.c -- the typed calls of the Redis seam: C values to keys and arguments, and
 * replies back to C values (see calls.h; the scripts' KEYS/ARGV are in scripts.c). */
#include "segments/redis/calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/redis/keys.h"
#include "segments/redis/store.h"
#include "segments/xalloc.h"

void rd_reply_clear(struct rd_reply *r)
{
    free(r->record);
    r->record = NULL;
}

/* A script's {code, value} reply into `out`, freeing `r`: 0, or -1 when the reply
 * is missing or not of that shape. */
static int scripted(redisReply *r, struct rd_reply *out)
{
    memset(out, 0, sizeof *out);
    if (!store_is_array(r, 1) || r->element[0]->type != REDIS_REPLY_INTEGER) {
        if (r != NULL)
            freeReplyObject(r);
        return -1;
    }
    out->code = (int)r->element[0]->integer;
    if (r->elements > 1) {
        const redisReply *val = r->element[1];
        if (val->type == REDIS_REPLY_INTEGER)
            out->value = val->integer;
        else if (val->type == REDIS_REPLY_STRING && out->code == RD_EXISTS)
            out->record = seg_strdup(val->str);
    }
    freeReplyObject(r);
    return 0;
}

/* ---- reads ------------------------------------------------------------------- */

int rd_ping(rd_conn *c)
{
    redisReply *r = store_command(c, "PING");
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    return 0;
}

static void copy_string(char *dst, size_t cap, const redisReply *r)
{
    snprintf(dst, cap, "%s", r != NULL && r->type == REDIS_REPLY_STRING ? r->str : "");
}

int rd_meta_read(rd_conn *c, const char *sku, struct rd_meta *out)
{
    char key[SEG_KEY_MAX];
    redisReply *r =
        store_command(c, "HMGET %s segments mode hold_ms initial gen rebalance epoch",
                      seg_key_meta(key, sku));
    if (r == NULL)
        return -1;
    int found = store_is_array(r, 7) && r->element[0]->type == REDIS_REPLY_STRING;
    if (found) {
        out->segments = (int)store_integer(r->element[0], 0);
        copy_string(out->mode, sizeof out->mode, r->element[1]);
        out->hold_ms = (int)store_integer(r->element[2], 0);
        out->initial = store_integer(r->element[3], 0);
        out->gen = store_integer(r->element[4], 0);
        out->rebalance = store_integer(r->element[5], 1) != 0;
        out->epoch = store_integer(r->element[6], 0);
    }
    freeReplyObject(r);
    return found;
}

int rd_record_read(rd_conn *c, const char *id, char **record)
{
    char key[SEG_KEY_MAX];
    redisReply *r = store_command(c, "HGET %s r", seg_key_order(key, id));
    if (r == NULL)
        return -1;
    int found = r->type == REDIS_REPLY_STRING;
    if (found)
        *record = seg_strdup(r->str);
    freeReplyObject(r);
    return found;
}

struct segment_reads {
    const char *sku;
    int n;
    bool full; /* also sold, orders and the lock */
};

static void append_segment_reads(redisContext *rc, void *arg)
{
    const struct segment_reads *s = arg;
    char key[SEG_KEY_MAX];
    for (int i = 0; i < s->n; i++) {
        redisAppendCommand(rc, "GET %s", seg_key_stock(key, s->sku, i));
        if (!s->full)
            continue;
        redisAppendCommand(rc, "GET %s", seg_key_sold(key, s->sku, i));
        redisAppendCommand(rc, "HLEN %s", seg_key_orders(key, s->sku, i));
        redisAppendCommand(rc, "EXISTS %s", seg_key_lock(key, s->sku, i));
    }
}

int rd_segments_read(rd_conn *c, const char *sku, int n, long long *stock,
                     long long *sold, long long *orders, bool *locked)
{
    struct segment_reads s = {sku, n, sold != NULL};
    int per = s.full ? 4 : 1;
    redisReply **r = seg_malloc(sizeof *r * (size_t)(per * n));
    if (store_pipeline(c, per * n, append_segment_reads, &s, r) != 0) {
        free(r);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        stock[i] = store_integer(r[per * i], 0);
        if (s.full) {
            sold[i] = store_integer(r[4 * i + 1], 0);
            orders[i] = store_integer(r[4 * i + 2], 0);
            locked[i] = store_integer(r[4 * i + 3], 0) > 0;
        }
    }
    for (int i = 0; i < per * n; i++)
        freeReplyObject(r[i]);
    free(r);
    return 0;
}

int rd_skus_list(rd_conn *c, char ***names, size_t *n)
{
    char key[SEG_KEY_MAX];
    redisReply *r = store_command(c, "SMEMBERS %s", seg_key_skus(key));
    if (r == NULL)
        return -1;
    char **out = seg_malloc(sizeof *out * (r->elements + 1));
    size_t k = 0;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING)
            out[k++] = seg_strdup(r->element[i]->str);
    freeReplyObject(r);
    *names = out;
    *n = k;
    return 0;
}

/* ---- one segment's lock -------------------------------------------------------- */

int rd_acquire(rd_conn *c, const char *sku, long long epoch, int i, const char *id,
               long long qty, const char *token, int ttl_ms, struct rd_reply *out)
{
    char order[SEG_KEY_MAX], stock[SEG_KEY_MAX], lock[SEG_KEY_MAX], ep[SEG_KEY_MAX];
    char q[24], ttl[16], e[24];
    snprintf(q, sizeof q, "%lld", qty);
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    snprintf(e, sizeof e, "%lld", epoch);
    const char *keys[] = {seg_key_order(order, id), seg_key_stock(stock, sku, i),
                          seg_key_lock(lock, sku, i), seg_key_epoch(ep, sku, i)};
    const char *args[] = {q, token, ttl, e};
    return scripted(store_eval(c, SCRIPT_ACQUIRE, 4, keys, 4, args), out);
}

int rd_deduct(rd_conn *c, const char *sku, long long epoch, int i, const char *token,
              const char *attempt, const char *id, long long qty, const char *record,
              struct rd_reply *out)
{
    char lock[SEG_KEY_MAX], stock[SEG_KEY_MAX], sold[SEG_KEY_MAX], orders[SEG_KEY_MAX],
        order[SEG_KEY_MAX], ep[SEG_KEY_MAX], q[24], e[24];
    snprintf(q, sizeof q, "%lld", qty);
    snprintf(e, sizeof e, "%lld", epoch);
    const char *keys[] = {seg_key_lock(lock, sku, i), seg_key_stock(stock, sku, i),
                          seg_key_sold(sold, sku, i), seg_key_orders(orders, sku, i),
                          seg_key_order(order, id),   seg_key_epoch(ep, sku, i)};
    const char *args[] = {token, q, id, record, attempt, e};
    return scripted(store_eval(c, SCRIPT_DEDUCT, 6, keys, 6, args), out);
}

int rd_lock(rd_conn *c, const char *sku, int i, const char *token, int ttl_ms)
{
    /* With GET, a SET that did not happen answers the holder's token: when it is
     * ours, this is the command sent again after its reply was lost. */
    char key[SEG_KEY_MAX];
    redisReply *r = store_command(c, "SET %s %s NX PX %d GET", seg_key_lock(key, sku, i),
                                  token, ttl_ms);
    if (r == NULL)
        return -1;
    int taken = r->type == REDIS_REPLY_NIL ||
                (r->type == REDIS_REPLY_STRING && strcmp(r->str, token) == 0);
    freeReplyObject(r);
    return taken;
}

/* RELEASE or RENEW of segment i's lock: 1 done, 0 not ours, -1. */
static int compare_and(rd_conn *c, enum script_id id, const char *sku, int i,
                       const char *token, int ttl_ms)
{
    char key[SEG_KEY_MAX], ttl[16];
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    const char *keys[] = {seg_key_lock(key, sku, i)};
    const char *args[] = {token, ttl};
    redisReply *r = store_eval(c, id, 1, keys, id == SCRIPT_RENEW ? 2 : 1, args);
    if (r == NULL)
        return -1;
    int done = store_integer(r, 0) == 1;
    freeReplyObject(r);
    return done;
}

int rd_release(rd_conn *c, const char *sku, int i, const char *token)
{
    return compare_and(c, SCRIPT_RELEASE, sku, i, token, 0);
}

int rd_renew(rd_conn *c, const char *sku, int i, const char *token, int ttl_ms)
{
    return compare_and(c, SCRIPT_RENEW, sku, i, token, ttl_ms);
}

/* ---- several segments ---------------------------------------------------------- */

/* Run DEDUCT_MULTI or CANCEL over the parts `p` of order `id` of `sku` in `epoch`.
 * KEYS: the order record (and for CANCEL the meta), then per part its lock, stock,
 * sold, the orders hash (first part) or parts hash, and epoch (for CANCEL, last, the
 * first segment's cancelled set). ARGV: `id`, `record`, `extra` (DEDUCT_MULTI: the
 * attempt id; CANCEL: the record as read), the epoch, then per part its token and,
 * for DEDUCT_MULTI, its qty. Returns the reply, or NULL. */
static redisReply *run_parts(rd_conn *c, enum script_id script, const char *sku,
                             long long epoch, const char *id, const char *record,
                             const char *extra, const struct rd_parts *p)
{
    bool cancel = script == SCRIPT_CANCEL;
    int n = p->n, lead = cancel ? 2 : 1, nkeys = lead + 5 * n + cancel;
    int per = cancel ? 1 : 2, nargs = 4 + per * n;
    char(*keybuf)[SEG_KEY_MAX] = seg_malloc(sizeof *keybuf * (size_t)nkeys);
    char(*qbuf)[24] = seg_malloc(sizeof *qbuf * (size_t)n);
    const char **keys = seg_malloc(sizeof *keys * (size_t)nkeys);
    const char **args = seg_malloc(sizeof *args * (size_t)nargs);
    char ep[24];
    snprintf(ep, sizeof ep, "%lld", epoch);
    keys[0] = seg_key_order(keybuf[0], id);
    if (cancel) {
        keys[1] = seg_key_meta(keybuf[1], sku);
        keys[nkeys - 1] = seg_key_cancelled(keybuf[nkeys - 1], sku, p->seg[0]);
    }
    args[0] = id;
    args[1] = record;
    args[2] = extra;
    args[3] = ep;
    for (int j = 0; j < n; j++) {
        int b = lead + 5 * j, i = p->seg[j];
        keys[b] = seg_key_lock(keybuf[b], sku, i);
        keys[b + 1] = seg_key_stock(keybuf[b + 1], sku, i);
        keys[b + 2] = seg_key_sold(keybuf[b + 2], sku, i);
        keys[b + 3] = j == 0 ? seg_key_orders(keybuf[b + 3], sku, i)
                             : seg_key_parts(keybuf[b + 3], sku, i);
        keys[b + 4] = seg_key_epoch(keybuf[b + 4], sku, i);
        args[4 + per * j] = p->tok[j];
        if (!cancel) {
            snprintf(qbuf[j], sizeof qbuf[j], "%lld", p->part[j]);
            args[5 + per * j] = qbuf[j];
        }
    }
    redisReply *r = store_eval(c, script, nkeys, keys, nargs, args);
    free(keys);
    free(args);
    free(keybuf);
    free(qbuf);
    return r;
}

int rd_deduct_multi(rd_conn *c, const char *sku, long long epoch, const char *id,
                    const char *record, const char *attempt, const struct rd_parts *p,
                    struct rd_reply *out, long long *stocks)
{
    redisReply *r = run_parts(c, SCRIPT_DEDUCT_MULTI, sku, epoch, id, record, attempt, p);
    bool per_segment =
        store_is_array(r, 1) &&
        (r->element[0]->integer == RD_OK || r->element[0]->integer == RD_SHORT) &&
        r->elements == (size_t)p->n + 1;
    if (per_segment)
        for (int j = 0; j < p->n; j++)
            stocks[j] = store_integer(r->element[j + 1], 0);
    if (scripted(r, out) != 0)
        return -1;
    if ((out->code == RD_OK || out->code == RD_SHORT) && !per_segment)
        return -1; /* not the shape the script answers */
    return 0;
}

int rd_cancel(rd_conn *c, const char *sku, long long epoch, const char *id,
              const char *cancelled, const char *expected, const struct rd_parts *p,
              struct rd_reply *out)
{
    return scripted(run_parts(c, SCRIPT_CANCEL, sku, epoch, id, cancelled, expected, p),
                    out);
}

/* ---- the whole SKU ------------------------------------------------------------- */

int rd_adjust(rd_conn *c, const char *sku, long long epoch, int segments,
              const char *const *tok, const char *op, long long add, long long limit,
              const char *rid, const char *sig, struct rd_reply *out)
{
    int n = segments, nkeys = 2 + 2 * n, nargs = 6 + n;
    char(*names)[SEG_KEY_MAX] = seg_malloc(sizeof *names * (size_t)nkeys);
    const char **keys = seg_malloc(sizeof *keys * (size_t)nkeys);
    const char **args = seg_malloc(sizeof *args * (size_t)nargs);
    char amount[24], ep[24], segs[16], lim[24];
    snprintf(amount, sizeof amount, "%lld", add);
    snprintf(ep, sizeof ep, "%lld", epoch);
    snprintf(segs, sizeof segs, "%d", n);
    snprintf(lim, sizeof lim, "%lld", limit);
    keys[0] = seg_key_meta(names[0], sku);
    keys[1] = rid != NULL ? seg_key_request(names[1], sku, rid) : keys[0];
    const char *head[] = {op, amount, ep, segs, lim, rid != NULL ? sig : ""};
    memcpy(args, head, sizeof head);
    for (int i = 0; i < n; i++) {
        keys[2 + 2 * i] = seg_key_lock(names[2 + 2 * i], sku, i);
        keys[3 + 2 * i] = seg_key_stock(names[3 + 2 * i], sku, i);
        args[6 + i] = tok[i];
    }
    redisReply *r = store_eval(c, SCRIPT_ADJUST, nkeys, keys, nargs, args);
    free(names);
    free(keys);
    free(args);
    return scripted(r, out);
}

int rd_reset(rd_conn *c, const char *sku, long long old_epoch, int old_segments,
             const struct rd_reset *to, const char *rid, const char *sig,
             struct rd_reply *out)
{
    int n = to->segments;
    int m = old_segments > n ? old_segments : n;
    int nkeys = 3 + 7 * m;
    char(*names)[SEG_KEY_MAX] = seg_malloc(sizeof *names * (size_t)nkeys);
    const char **keys = seg_malloc(sizeof *keys * (size_t)nkeys);
    keys[0] = seg_key_meta(names[0], sku);
    keys[1] = seg_key_skus(names[1]);
    keys[2] = rid != NULL ? seg_key_request(names[2], sku, rid) : keys[0];
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

    char segs[16], hold[16], initial[24], more[24], share[24], extra[24];
    char old_ep[24], old_segs[16], ep[24];
    long long stock = to->stock;
    snprintf(segs, sizeof segs, "%d", n);
    snprintf(hold, sizeof hold, "%d", to->hold_ms);
    snprintf(initial, sizeof initial, "%lld", stock);
    snprintf(share, sizeof share, "%lld", n ? stock / n : 0);
    snprintf(more, sizeof more, "%lld", n ? stock / n + 1 : 0);
    snprintf(extra, sizeof extra, "%lld", n ? stock % n : 0);
    snprintf(old_ep, sizeof old_ep, "%lld", old_epoch);
    snprintf(old_segs, sizeof old_segs, "%d", old_segments);
    snprintf(ep, sizeof ep, "%lld", to->epoch);
    const char *args[] = {sku,
                          prefix,
                          suffix,
                          segs,
                          to->mode ? to->mode : "lock",
                          hold,
                          initial,
                          more,
                          share,
                          extra,
                          to->rebalance ? "1" : "0",
                          old_ep,
                          old_segs,
                          ep,
                          rid != NULL ? sig : ""};
    redisReply *r = store_eval(c, SCRIPT_RESET, nkeys, keys, 15, args);
    free(keys);
    free(names);
    return scripted(r, out);
}
