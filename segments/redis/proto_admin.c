/* proto_admin.c -- the encoders of the admin operations: the rebalance and restock
 * (ADJUST), the reset, in one script or in steps on a cluster, a cancel's steps on a
 * cluster, the SKU set and the scans (see proto.h). */
#include "segments/redis/proto.h"

#include <string.h>

#include "segments/redis/keys.h"
#include "segments/redis/slots.h"

/* ---- encoders of the admin operations ------------------------------------------ */

void proto_adjust(struct rd_cmd *c, const char *sku, long long epoch, int segments,
                  const char *const *tok, const long long *fence, const char *op,
                  long long add, long long limit, const char *rid, const char *sig)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_ADJUST);
    cmd_key(c, seg_key_meta(key, sku));
    cmd_key(c, rid != NULL ? seg_key_request(key, sku, rid) : seg_key_meta(key, sku));
    for (int i = 0; i < segments; i++) {
        cmd_key(c, seg_key_lock(key, sku, i));
        cmd_key(c, seg_key_stock(key, sku, i));
    }
    for (int i = 0; fence != NULL && i < segments; i++) /* a lock service's holds */
        cmd_key(c, seg_key_fence(key, sku, i));
    cmd_arg(c, op);
    cmd_argll(c, add);
    cmd_argll(c, epoch);
    cmd_argll(c, segments);
    cmd_argll(c, limit);
    cmd_arg(c, rid != NULL ? sig : "");
    for (int i = 0; i < segments; i++) /* no tokens: no lock of ours (FENCED) */
        cmd_arg(c, tok != NULL ? tok[i] : "");
    for (int i = 0; fence != NULL && i < segments; i++)
        cmd_argll(c, fence[i]);
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
    cmd_key(c, seg_key_ledger_streams(key, 0)); /* one script: standalone */
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
                         const char *dead, long long epoch, long long stock, bool ledger,
                         bool replicated)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_RESET_SEGMENT);
    seg_key_stock(key, sku, i);
    int slot = rd_key_slot(key, strlen(key));
    cmd_key(c, key);
    cmd_key(c, seg_key_sold(key, sku, i));
    cmd_key(c, seg_key_lock(key, sku, i));
    cmd_key(c, seg_key_orders(key, sku, i));
    cmd_key(c, seg_key_parts(key, sku, i));
    cmd_key(c, seg_key_cancelled(key, sku, i));
    cmd_key(c, seg_key_epoch(key, sku, i));
    cmd_key(c, seg_key_adjust(key, sku, i));
    cmd_key(c, seg_key_gone(key, sku, i, old_epoch, "orders"));
    cmd_key(c, seg_key_gone(key, sku, i, old_epoch, "cancelled"));
    cmd_key(c, seg_key_ledger_streams(key, slot));
    cmd_argll(c, old_epoch);
    cmd_arg(c, dead);
    cmd_argll(c, epoch);
    if (stock >= 0)
        cmd_argll(c, stock);
    else
        cmd_arg(c, "");
    cmd_arg(c, ledger ? "1" : "0");
    cmd_arg(c, replicated ? "replicated" : "async");
}

void proto_ledger_slots(struct rd_cmd *c, const char *placed, int segments)
{
    char key[SEG_KEY_MAX];
    cmd_plain(c, "SADD");
    cmd_key(c, seg_key_ledger_slots());
    for (int i = 0; i < segments; i++) {
        seg_key_stock(key, placed, i);
        cmd_argll(c, rd_key_slot(key, strlen(key)));
    }
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

void proto_cancel_segment(struct rd_cmd *c, const char *sku, long long epoch, int i,
                          const char *id, const char *token, int part,
                          const char *restored)
{
    bool first = part == 0;
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_CANCEL_SEGMENT);
    cmd_key(c, seg_key_lock(key, sku, i));
    cmd_key(c, seg_key_stock(key, sku, i));
    cmd_key(c, seg_key_sold(key, sku, i));
    cmd_key(c, first ? seg_key_orders(key, sku, i) : seg_key_parts(key, sku, i));
    cmd_key(c, seg_key_epoch(key, sku, i));
    cmd_key(c, seg_key_cancelled(key, sku, i));
    cmd_arg(c, id);
    cmd_arg(c, token);
    cmd_argll(c, epoch);
    cmd_arg(c, first ? "1" : "0");
    cmd_arg(c, restored != NULL ? restored : "");
    cmd_argll(c, part + 1);
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
