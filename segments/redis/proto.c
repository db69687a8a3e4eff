/* proto.c -- encoders and decoders of the seam's calls, and rd_reply_clear for what
 * the decoders fill (see proto.h). */
#include "segments/redis/proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segments/redis/keys.h"
#include "base/xalloc.h"

/* ---- encoders ------------------------------------------------------------------ */

void proto_ping(struct rd_cmd *c)
{
    cmd_plain(c, "PING");
}

void proto_meta_read(struct rd_cmd *c, const char *sku)
{
    char key[SEG_KEY_MAX];
    static const char *const fields[] = {
        "segments",   "mode", "hold_ms",   "initial", "gen",     "rebalance", "epoch",
        "durability", "salt", "adj_until", "lock",    "fencing", "batch"};
    cmd_plain(c, "HMGET");
    cmd_key(c, seg_key_meta(key, sku));
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        cmd_arg(c, fields[i]);
}

void proto_record_read(struct rd_cmd *c, const char *id)
{
    char key[SEG_KEY_MAX];
    cmd_plain(c, "HMGET");
    cmd_key(c, seg_key_order(key, id));
    cmd_arg(c, "r");
    cmd_arg(c, "k");
    cmd_arg(c, "e");
}

void proto_stocks_read(struct rd_cmd *c, const char *sku, int n)
{
    char key[SEG_KEY_MAX];
    cmd_plain(c, "MGET");
    for (int i = 0; i < n; i++)
        cmd_key(c, seg_key_stock(key, sku, i));
}

/* One command on `key` of segment i. */
static void one_key(struct rd_cmd *c, const char *name, const char *key)
{
    cmd_plain(c, name);
    cmd_key(c, key);
}

void proto_segment_reads(struct rd_cmd *c, const char *sku, int i, bool full)
{
    char key[SEG_KEY_MAX];
    one_key(&c[0], "GET", seg_key_stock(key, sku, i));
    if (!full)
        return;
    one_key(&c[1], "GET", seg_key_sold(key, sku, i));
    one_key(&c[2], "HLEN", seg_key_orders(key, sku, i));
    one_key(&c[3], "EXISTS", seg_key_lock(key, sku, i));
}

void proto_skus_list(struct rd_cmd *c)
{
    char key[SEG_KEY_MAX];
    cmd_plain(c, "SMEMBERS");
    cmd_key(c, seg_key_skus(key));
}

void proto_acquire(struct rd_cmd *c, const char *sku, long long epoch, int i,
                   const char *id, long long qty, const char *token, int ttl_ms,
                   long long fence)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_ACQUIRE);
    cmd_key(c, seg_key_order(key, id));
    cmd_key(c, seg_key_stock(key, sku, i));
    cmd_key(c, seg_key_lock(key, sku, i));
    cmd_key(c, seg_key_epoch(key, sku, i));
    cmd_key(c, seg_key_fence(key, sku, i));
    cmd_argll(c, qty);
    cmd_arg(c, token);
    cmd_argll(c, ttl_ms);
    cmd_argll(c, epoch);
    cmd_arg(c, sku);
    cmd_argll(c, fence);
}

void proto_deduct(struct rd_cmd *c, const char *sku, long long epoch, int i,
                  const char *token, const char *attempt, const char *id, long long qty,
                  const char *record, bool keep, long long fence)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_DEDUCT);
    cmd_key(c, seg_key_lock(key, sku, i));
    cmd_key(c, seg_key_stock(key, sku, i));
    cmd_key(c, seg_key_sold(key, sku, i));
    cmd_key(c, seg_key_orders(key, sku, i));
    cmd_key(c, seg_key_order(key, id));
    cmd_key(c, seg_key_epoch(key, sku, i));
    cmd_key(c, seg_key_fence(key, sku, i));
    cmd_arg(c, token);
    cmd_argll(c, qty);
    cmd_arg(c, id);
    cmd_arg(c, record);
    cmd_arg(c, attempt);
    cmd_argll(c, epoch);
    cmd_arg(c, sku);
    cmd_arg(c, keep ? "1" : "0");
    cmd_argll(c, fence);
}

void proto_deduct_batch(struct rd_cmd *c, const char *sku, long long epoch, int i,
                        const char *token, long long fence, int n,
                        const struct store_batch_order *b)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_DEDUCT_BATCH);
    cmd_key(c, seg_key_lock(key, sku, i));
    cmd_key(c, seg_key_stock(key, sku, i));
    cmd_key(c, seg_key_sold(key, sku, i));
    cmd_key(c, seg_key_orders(key, sku, i));
    cmd_key(c, seg_key_epoch(key, sku, i));
    cmd_key(c, seg_key_fence(key, sku, i));
    for (int k = 0; k < n; k++)
        cmd_key(c, seg_key_order(key, b[k].id));
    cmd_arg(c, token);
    cmd_argll(c, epoch);
    cmd_arg(c, sku);
    cmd_argll(c, fence);
    cmd_argll(c, n);
    for (int k = 0; k < n; k++) {
        cmd_arg(c, b[k].id);
        cmd_argll(c, b[k].qty);
        cmd_arg(c, b[k].record);
        cmd_arg(c, b[k].attempt);
    }
}

void proto_acquire_slot(struct rd_cmd *c, const char *sku, long long epoch, int i,
                        long long qty, const char *token, int ttl_ms, long long fence)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_ACQUIRE_SLOT);
    cmd_key(c, seg_key_stock(key, sku, i));
    cmd_key(c, seg_key_lock(key, sku, i));
    cmd_key(c, seg_key_epoch(key, sku, i));
    cmd_key(c, seg_key_fence(key, sku, i));
    cmd_argll(c, qty);
    cmd_arg(c, token);
    cmd_argll(c, ttl_ms);
    cmd_argll(c, epoch);
    cmd_argll(c, fence);
}

void proto_deduct_slot(struct rd_cmd *c, const char *sku, long long epoch, int i,
                       const char *token, const char *id, long long qty, long long until,
                       bool first, long long fence)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_DEDUCT_SLOT);
    cmd_key(c, seg_key_lock(key, sku, i));
    cmd_key(c, seg_key_stock(key, sku, i));
    cmd_key(c, seg_key_sold(key, sku, i));
    cmd_key(c, first ? seg_key_orders(key, sku, i) : seg_key_parts(key, sku, i));
    cmd_key(c, seg_key_epoch(key, sku, i));
    cmd_key(c, seg_key_fence(key, sku, i));
    cmd_arg(c, token);
    cmd_argll(c, qty);
    cmd_arg(c, id);
    cmd_argll(c, epoch);
    cmd_argll(c, until);
    cmd_argll(c, fence);
}

void proto_undo_part(struct rd_cmd *c, const char *sku, long long epoch, int i,
                     const char *id, bool first)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_UNDO_PART);
    cmd_key(c, seg_key_stock(key, sku, i));
    cmd_key(c, seg_key_sold(key, sku, i));
    cmd_key(c, first ? seg_key_orders(key, sku, i) : seg_key_parts(key, sku, i));
    cmd_key(c, seg_key_epoch(key, sku, i));
    cmd_arg(c, id);
    cmd_argll(c, epoch);
}

void proto_intent_add(struct rd_cmd *c, const char *id, long long at_ms)
{
    cmd_plain(c, "ZADD");
    cmd_key(c, seg_key_intents());
    cmd_argll(c, at_ms);
    cmd_arg(c, id);
}

void proto_intent_done(struct rd_cmd *c, const char *id)
{
    cmd_plain(c, "ZREM");
    cmd_key(c, seg_key_intents());
    cmd_arg(c, id);
}

void proto_intents_due(struct rd_cmd *c, long long before_ms, int limit)
{
    cmd_plain(c, "ZRANGEBYSCORE");
    cmd_key(c, seg_key_intents());
    cmd_arg(c, "-inf");
    cmd_argll(c, before_ms);
    cmd_arg(c, "LIMIT");
    cmd_arg(c, "0");
    cmd_argll(c, limit);
}

void proto_claim_read(struct rd_cmd *c, const char *id)
{
    char key[SEG_KEY_MAX];
    cmd_plain(c, "HMGET");
    cmd_key(c, seg_key_order(key, id));
    cmd_arg(c, "c");
    cmd_arg(c, "p");
    cmd_arg(c, "k");
    cmd_arg(c, "e");
}

void proto_claim(struct rd_cmd *c, const char *id, const char *attempt, const char *sku,
                 long long epoch, int lease_ms, const char *dead, const char *plan,
                 long long dead_epoch)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_CLAIM);
    cmd_key(c, seg_key_order(key, id));
    cmd_arg(c, attempt);
    cmd_arg(c, sku);
    cmd_argll(c, epoch);
    cmd_argll(c, lease_ms);
    cmd_arg(c, dead != NULL ? dead : "");
    cmd_arg(c, plan != NULL ? plan : "");
    if (dead_epoch != 0)
        cmd_argll(c, dead_epoch);
    else
        cmd_arg(c, "");
}

void proto_confirm(struct rd_cmd *c, const char *id, const char *attempt,
                   const char *record, const char *sku, long long epoch)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_CONFIRM);
    cmd_key(c, seg_key_order(key, id));
    cmd_arg(c, attempt);
    cmd_arg(c, record != NULL ? record : "");
    cmd_arg(c, sku);
    cmd_argll(c, epoch);
}

void proto_order_in_segment(struct rd_cmd *c, const char *sku, int i, const char *id)
{
    char key[SEG_KEY_MAX];
    cmd_plain(c, "HGET");
    cmd_key(c, seg_key_orders(key, sku, i));
    cmd_arg(c, id);
}

/* WAIT 1 timeout_ms, sent to the node of `key`. */
static void wait_at(struct rd_cmd *c, const char *key, int timeout_ms)
{
    cmd_plain(c, "WAIT");
    cmd_route_as(c, key);
    cmd_arg(c, "1");
    cmd_argll(c, timeout_ms);
}

void proto_wait_segment(struct rd_cmd *c, const char *sku, int i, int timeout_ms)
{
    char key[SEG_KEY_MAX];
    wait_at(c, seg_key_stock(key, sku, i), timeout_ms);
}

void proto_wait_record(struct rd_cmd *c, const char *id, int timeout_ms)
{
    char key[SEG_KEY_MAX];
    wait_at(c, seg_key_order(key, id), timeout_ms);
}

void proto_wait_meta(struct rd_cmd *c, const char *sku, int timeout_ms)
{
    char key[SEG_KEY_MAX];
    wait_at(c, seg_key_meta(key, sku), timeout_ms);
}

void proto_ack_mark(struct rd_cmd *c, int slot)
{
    char key[SEG_KEY_MAX];
    cmd_plain(c, "SET");
    cmd_key(c, seg_key_ack(key, slot));
    cmd_arg(c, "1");
    cmd_arg(c, "PX");
    cmd_arg(c, "60000");
}

void proto_wait(struct rd_cmd *c, int timeout_ms)
{
    cmd_plain(c, "WAIT");
    cmd_arg(c, "1");
    cmd_argll(c, timeout_ms);
}

void proto_stock_read(struct rd_cmd *c, const char *sku, int i)
{
    char key[SEG_KEY_MAX];
    cmd_plain(c, "GET");
    cmd_key(c, seg_key_stock(key, sku, i));
}

void proto_lock(struct rd_cmd *c, const char *sku, int i, const char *token, int ttl_ms)
{
    /* With GET, a SET that did not happen answers the holder's token: when it is
     * ours, this is the command sent again after its reply was lost. */
    char key[SEG_KEY_MAX];
    cmd_plain(c, "SET");
    cmd_key(c, seg_key_lock(key, sku, i));
    cmd_arg(c, token);
    cmd_arg(c, "NX");
    cmd_arg(c, "PX");
    cmd_argll(c, ttl_ms);
    cmd_arg(c, "GET");
}

/* RELEASE (ttl_ms < 0) or RENEW of segment i's lock. */
static void compare_and(struct rd_cmd *c, enum script_id id, const char *sku, int i,
                        const char *token, int ttl_ms)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, id);
    cmd_key(c, seg_key_lock(key, sku, i));
    cmd_arg(c, token);
    if (ttl_ms >= 0)
        cmd_argll(c, ttl_ms);
}

void proto_release(struct rd_cmd *c, const char *sku, int i, const char *token)
{
    compare_and(c, SCRIPT_RELEASE, sku, i, token, -1);
}

void proto_renew(struct rd_cmd *c, const char *sku, int i, const char *token, int ttl_ms)
{
    compare_and(c, SCRIPT_RENEW, sku, i, token, ttl_ms);
}

/* DEDUCT_MULTI or CANCEL over the parts `p` of order `id` of `sku` in `epoch`.
 * KEYS: the order record (and for CANCEL the meta), then per part its lock, stock,
 * sold, the orders hash (first part) or parts hash, and epoch (for CANCEL, last, the
 * first segment's cancelled set; for DEDUCT_MULTI, last, each part's fence). ARGV:
 * `id`, `record`, `extra` (DEDUCT_MULTI: the attempt id; CANCEL: the record as read),
 * the epoch, the SKU, then per part its token and, for DEDUCT_MULTI, its qty and
 * fence (0: none). */
static void parts(struct rd_cmd *c, enum script_id script, const char *sku,
                  long long epoch, const char *id, const char *record, const char *extra,
                  const struct rd_parts *p)
{
    bool cancel = script == SCRIPT_CANCEL;
    char key[SEG_KEY_MAX];
    cmd_script(c, script);
    cmd_key(c, seg_key_order(key, id));
    if (cancel)
        cmd_key(c, seg_key_meta(key, sku));
    for (int j = 0; j < p->n; j++) {
        int i = p->seg[j];
        cmd_key(c, seg_key_lock(key, sku, i));
        cmd_key(c, seg_key_stock(key, sku, i));
        cmd_key(c, seg_key_sold(key, sku, i));
        cmd_key(c, j == 0 ? seg_key_orders(key, sku, i) : seg_key_parts(key, sku, i));
        cmd_key(c, seg_key_epoch(key, sku, i));
    }
    if (cancel)
        cmd_key(c, seg_key_cancelled(key, sku, p->seg[0]));
    for (int j = 0; !cancel && j < p->n; j++)
        cmd_key(c, seg_key_fence(key, sku, p->seg[j]));
    cmd_arg(c, id);
    cmd_arg(c, record);
    cmd_arg(c, extra);
    cmd_argll(c, epoch);
    cmd_arg(c, sku);
    for (int j = 0; j < p->n; j++) {
        cmd_arg(c, p->tok[j]);
        if (cancel)
            continue;
        cmd_argll(c, p->part[j]);
        cmd_argll(c, p->fence != NULL ? p->fence[j] : 0);
    }
}

void proto_deduct_multi(struct rd_cmd *c, const char *sku, long long epoch,
                        const char *id, const char *record, const char *attempt,
                        const struct rd_parts *p)
{
    parts(c, SCRIPT_DEDUCT_MULTI, sku, epoch, id, record, attempt, p);
}

void proto_cancel(struct rd_cmd *c, const char *sku, long long epoch, const char *id,
                  const char *cancelled, const char *expected, const struct rd_parts *p)
{
    parts(c, SCRIPT_CANCEL, sku, epoch, id, cancelled, expected, p);
}

void proto_adjust(struct rd_cmd *c, const char *sku, long long epoch, int segments,
                  const char *const *tok, const char *op, long long add, long long limit,
                  const char *rid, const char *sig)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_ADJUST);
    cmd_key(c, seg_key_meta(key, sku));
    cmd_key(c, rid != NULL ? seg_key_request(key, sku, rid) : seg_key_meta(key, sku));
    for (int i = 0; i < segments; i++) {
        cmd_key(c, seg_key_lock(key, sku, i));
        cmd_key(c, seg_key_stock(key, sku, i));
    }
    cmd_arg(c, op);
    cmd_argll(c, add);
    cmd_argll(c, epoch);
    cmd_argll(c, segments);
    cmd_argll(c, limit);
    cmd_arg(c, rid != NULL ? sig : "");
    for (int i = 0; i < segments; i++)
        cmd_arg(c, tok[i]);
}

void proto_reset(struct rd_cmd *c, const char *sku, long long old_epoch, int old_segments,
                 const struct rd_reset *to, const char *rid, const char *sig)
{
    int n = to->segments, m = old_segments > n ? old_segments : n;
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_RESET);
    cmd_key(c, seg_key_meta(key, sku));
    cmd_key(c, seg_key_skus(key));
    cmd_key(c, rid != NULL ? seg_key_request(key, sku, rid) : seg_key_meta(key, sku));
    for (int i = 0; i < m; i++) {
        cmd_key(c, seg_key_stock(key, sku, i));
        cmd_key(c, seg_key_sold(key, sku, i));
        cmd_key(c, seg_key_lock(key, sku, i));
        cmd_key(c, seg_key_orders(key, sku, i));
        cmd_key(c, seg_key_parts(key, sku, i));
        cmd_key(c, seg_key_cancelled(key, sku, i));
        cmd_key(c, seg_key_epoch(key, sku, i));
        cmd_key(c, seg_key_gone(key, sku, i, old_epoch, "orders"));
        cmd_key(c, seg_key_gone(key, sku, i, old_epoch, "cancelled"));
    }
    long long stock = to->stock;
    cmd_arg(c, sku);
    cmd_argll(c, n);
    cmd_arg(c, to->mode ? to->mode : "lock");
    cmd_argll(c, to->hold_ms);
    cmd_argll(c, stock);
    cmd_argll(c, n ? stock / n + 1 : 0);
    cmd_argll(c, n ? stock / n : 0);
    cmd_argll(c, n ? stock % n : 0);
    cmd_arg(c, to->rebalance ? "1" : "0");
    cmd_argll(c, old_epoch);
    cmd_argll(c, old_segments);
    cmd_argll(c, to->epoch);
    cmd_arg(c, rid != NULL ? sig : "");
    cmd_arg(c, to->replicated ? "replicated" : "async");
    cmd_arg(c, to->expect != NULL ? to->expect : "");
    cmd_arg(c, to->lock != NULL ? to->lock : "");
    cmd_arg(c, to->unfenced ? "0" : "1");
    cmd_arg(c, to->ledger ? "1" : "0");
    cmd_argll(c, to->batch > 1 ? to->batch : 1);
}

void proto_reset_begin(struct rd_cmd *c, const char *sku, long long old_epoch,
                       int old_segments, long long epoch, int segments, int lease_ms,
                       const char *expect, const char *rid, const char *sig, bool retake)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_RESET_BEGIN);
    cmd_key(c, seg_key_meta(key, sku));
    cmd_key(c, rid != NULL ? seg_key_request(key, sku, rid) : seg_key_meta(key, sku));
    cmd_argll(c, old_epoch);
    cmd_argll(c, old_segments);
    cmd_argll(c, epoch);
    cmd_argll(c, segments);
    cmd_argll(c, lease_ms);
    cmd_arg(c, rid != NULL ? sig : "");
    cmd_arg(c, expect != NULL ? expect : "");
    cmd_arg(c, retake ? "1" : "0");
}

void proto_reset_segment(struct rd_cmd *c, const char *sku, int i, long long old_epoch,
                         const char *dead, long long epoch, long long stock, bool ledger)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_RESET_SEGMENT);
    cmd_key(c, seg_key_stock(key, sku, i));
    cmd_key(c, seg_key_sold(key, sku, i));
    cmd_key(c, seg_key_lock(key, sku, i));
    cmd_key(c, seg_key_orders(key, sku, i));
    cmd_key(c, seg_key_parts(key, sku, i));
    cmd_key(c, seg_key_cancelled(key, sku, i));
    cmd_key(c, seg_key_epoch(key, sku, i));
    cmd_key(c, seg_key_adjust(key, sku, i));
    cmd_key(c, seg_key_gone(key, sku, i, old_epoch, "orders"));
    cmd_key(c, seg_key_gone(key, sku, i, old_epoch, "cancelled"));
    cmd_argll(c, old_epoch);
    cmd_arg(c, dead);
    cmd_argll(c, epoch);
    if (stock >= 0)
        cmd_argll(c, stock);
    else
        cmd_arg(c, "");
    cmd_arg(c, ledger ? "1" : "0");
}

void proto_reset_commit(struct rd_cmd *c, const char *sku, const struct rd_reset *to,
                        const char *rid, const char *sig)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_RESET_COMMIT);
    cmd_key(c, seg_key_meta(key, sku));
    cmd_key(c, rid != NULL ? seg_key_request(key, sku, rid) : seg_key_meta(key, sku));
    cmd_argll(c, to->epoch);
    cmd_argll(c, to->segments);
    cmd_arg(c, to->mode ? to->mode : "lock");
    cmd_argll(c, to->hold_ms);
    cmd_argll(c, to->stock);
    cmd_arg(c, to->rebalance ? "1" : "0");
    cmd_arg(c, rid != NULL ? sig : "");
    cmd_arg(c, to->replicated ? "replicated" : "async");
    cmd_argll(c, to->salt);
    cmd_arg(c, to->lock != NULL ? to->lock : "");
    cmd_arg(c, to->unfenced ? "0" : "1");
    cmd_argll(c, to->batch > 1 ? to->batch : 1);
}

void proto_reset_yield(struct rd_cmd *c, const char *sku, long long epoch, bool untouched)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_RESET_YIELD);
    cmd_key(c, seg_key_meta(key, sku));
    cmd_argll(c, epoch);
    cmd_arg(c, untouched ? "1" : "0");
}

void proto_wait_skus(struct rd_cmd *c, int timeout_ms)
{
    char key[SEG_KEY_MAX];
    wait_at(c, seg_key_skus(key), timeout_ms);
}

void proto_cancel_segment(struct rd_cmd *c, const char *sku, long long epoch, int i,
                          const char *id, const char *token, bool first)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_CANCEL_SEGMENT);
    cmd_key(c, seg_key_lock(key, sku, i));
    cmd_key(c, seg_key_stock(key, sku, i));
    cmd_key(c, seg_key_sold(key, sku, i));
    cmd_key(c, first ? seg_key_orders(key, sku, i) : seg_key_parts(key, sku, i));
    cmd_key(c, seg_key_epoch(key, sku, i));
    if (first)
        cmd_key(c, seg_key_cancelled(key, sku, i));
    cmd_arg(c, id);
    cmd_arg(c, token);
    cmd_argll(c, epoch);
}

void proto_cancel_record(struct rd_cmd *c, const char *id, const char *expected,
                         const char *cancelled)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_CANCEL_RECORD);
    cmd_key(c, seg_key_order(key, id));
    cmd_arg(c, expected);
    cmd_arg(c, cancelled);
}

void proto_gen_bump(struct rd_cmd *c, const char *sku)
{
    char key[SEG_KEY_MAX];
    cmd_plain(c, "HINCRBY");
    cmd_key(c, seg_key_meta(key, sku));
    cmd_arg(c, "gen");
    cmd_arg(c, "1");
}

void proto_skus_change(struct rd_cmd *c, const char *sku, bool add)
{
    char key[SEG_KEY_MAX];
    cmd_plain(c, add ? "SADD" : "SREM");
    cmd_key(c, seg_key_skus(key));
    cmd_arg(c, sku);
}

void proto_drop_records(struct rd_cmd *c, const char *sku, long long epoch,
                        char *const *ids, size_t n)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_DROP_RECORDS);
    for (size_t i = 0; i < n; i++)
        cmd_key(c, seg_key_order(key, ids[i]));
    cmd_arg(c, sku);
    cmd_argll(c, epoch);
}

void proto_scan(struct rd_cmd *c, const char *key, bool hash, const char *cursor,
                int count)
{
    cmd_plain(c, hash ? "HSCAN" : "SSCAN");
    cmd_key(c, key);
    cmd_arg(c, cursor);
    cmd_arg(c, "COUNT");
    cmd_argll(c, count);
}

/* ---- decoders ------------------------------------------------------------------ */

long long proto_integer(const redisReply *r, long long dflt)
{
    if (r == NULL)
        return dflt;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING) {
        char *end;
        errno = 0;
        long long v = strtoll(r->str, &end, 10);
        if (errno == 0 && end != r->str && *end == '\0')
            return v;
    }
    return dflt;
}

static bool is_array(const redisReply *r, size_t n)
{
    return r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= n;
}

/* Declared in calls.h with struct rd_reply; here, next to the decoders that fill
 * `record`. */
void rd_reply_clear(struct rd_reply *r)
{
    free(r->record);
    free(r->plan);
    r->record = r->plan = NULL;
}

int proto_scripted(const redisReply *r, struct rd_reply *out)
{
    memset(out, 0, sizeof *out);
    if (!is_array(r, 1) || r->element[0]->type != REDIS_REPLY_INTEGER)
        return -1;
    out->code = (int)r->element[0]->integer;
    if (r->elements > 1) {
        const redisReply *val = r->element[1];
        if (val->type == REDIS_REPLY_INTEGER)
            out->value = val->integer;
        else if (val->type == REDIS_REPLY_STRING)
            out->record = seg_strdup(val->str); /* EXISTS: a record; CLAIM: an attempt */
    }
    if (r->elements > 2 && r->element[2]->type == REDIS_REPLY_STRING)
        out->plan = seg_strdup(r->element[2]->str); /* CLAIM MISSING: the plan */
    else if (r->elements > 2 && r->element[2]->type == REDIS_REPLY_INTEGER)
        out->fence = r->element[2]->integer; /* ACQUIRE of a lock service's hold */
    return 0;
}

int proto_batch(const redisReply *r, int n, struct store_reply *out)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)n)
        return -1;
    for (int k = 0; k < n; k++) {
        struct rd_reply one;
        if (proto_scripted(r->element[k], &one) != 0) {
            for (int j = 0; j < k; j++) {
                free(out[j].record);
                out[j].record = NULL;
            }
            return -1;
        }
        free(one.plan);
        out[k] = (struct store_reply){one.code, one.value, one.record, NULL, 0};
    }
    return 0;
}

int proto_multi(const redisReply *r, int n, struct rd_reply *out, long long *stocks)
{
    if (proto_scripted(r, out) != 0)
        return -1;
    if (out->code != RD_OK && out->code != RD_SHORT)
        return 0;
    if (r->elements != (size_t)n + 1) {
        rd_reply_clear(out);
        return -1; /* not the shape the script answers */
    }
    for (int j = 0; j < n; j++)
        stocks[j] = proto_integer(r->element[j + 1], 0);
    return 0;
}

int proto_done(const redisReply *r, int *done)
{
    if (r == NULL || r->type != REDIS_REPLY_INTEGER)
        return -1;
    *done = r->integer == 1;
    return 0;
}

int proto_taken(const redisReply *r, const char *token, int *taken)
{
    if (r == NULL || (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING))
        return -1;
    *taken = r->type == REDIS_REPLY_NIL || strcmp(r->str, token) == 0;
    return 0;
}

int proto_meta(const redisReply *r, struct rd_meta *out, int *found)
{
    if (!is_array(r, 13))
        return -1;
    *found = r->element[0]->type == REDIS_REPLY_STRING;
    if (*found) {
        const redisReply *mode = r->element[1];
        out->segments = (int)proto_integer(r->element[0], 0);
        snprintf(out->mode, sizeof out->mode, "%s",
                 mode->type == REDIS_REPLY_STRING ? mode->str : "");
        out->hold_ms = (int)proto_integer(r->element[2], 0);
        out->initial = proto_integer(r->element[3], 0);
        out->gen = proto_integer(r->element[4], 0);
        out->rebalance = proto_integer(r->element[5], 1) != 0;
        out->epoch = proto_integer(r->element[6], 0);
        const redisReply *d = r->element[7];
        out->replicated =
            d->type == REDIS_REPLY_STRING && strcmp(d->str, "replicated") == 0;
        out->salt = (int)proto_integer(r->element[8], 0);
        out->adjust_until = proto_integer(r->element[9], 0);
        const redisReply *lock = r->element[10];
        snprintf(out->lock, sizeof out->lock, "%s",
                 lock->type == REDIS_REPLY_STRING ? lock->str : "");
        out->unfenced = proto_integer(r->element[11], 1) == 0;
        out->batch = (int)proto_integer(r->element[12], 1);
    }
    return 0;
}

static bool is_string_or_nil(const redisReply *r)
{
    return r != NULL && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL);
}

int proto_record(const redisReply *r, char **record, char *sku, long long *epoch)
{
    *record = NULL;
    sku[0] = '\0';
    *epoch = 0;
    if (!is_array(r, 3))
        return -1;
    const redisReply *json = r->element[0], *k = r->element[1], *e = r->element[2];
    if (!is_string_or_nil(json) || !is_string_or_nil(k) || !is_string_or_nil(e))
        return -1;
    if (json->type == REDIS_REPLY_NIL)
        return 0;
    if (k->type == REDIS_REPLY_STRING)
        snprintf(sku, SEG_NAME_MAX + 1, "%s", k->str);
    *epoch = proto_integer(e, 0);
    *record = seg_strdup(json->str);
    return 0;
}

bool proto_record_dead(const char *owner, long long owner_epoch, const char *sku,
                       long long epoch)
{
    return owner[0] != '\0' && strcmp(owner, sku) == 0 && owner_epoch != epoch;
}

int proto_scan_page(const redisReply *r, bool hash, char *cursor, size_t cursor_len,
                    char ***names, size_t *n)
{
    *names = NULL;
    *n = 0;
    if (!is_array(r, 2) || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_ARRAY || r->element[0]->len >= cursor_len)
        return -1;
    const redisReply *page = r->element[1];
    size_t step = hash ? 2 : 1; /* HSCAN pages are field, value, field, value, ... */
    if (page->elements > 0)
        *names = seg_calloc(page->elements / step + 1, sizeof **names);
    for (size_t i = 0; i < page->elements; i += step)
        if (page->element[i]->type == REDIS_REPLY_STRING)
            (*names)[(*n)++] = seg_strdup(page->element[i]->str);
    memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
    return 0;
}

int proto_stocks(const redisReply *r, int n, long long *stock)
{
    if (!is_array(r, (size_t)n))
        return -1;
    for (int i = 0; i < n; i++)
        stock[i] = proto_integer(r->element[i], 0);
    return 0;
}
