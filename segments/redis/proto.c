/* proto.c -- the encoders of the order path, the locks and the reads: what each of
 * those calls of the seam sends (see proto.h; the admin operations' encoders are in
 * proto_admin.c, the decoders in proto_reply.c). */
#include "segments/redis/proto.h"

#include "segments/redis/keys.h"
#include "segments/redis/recpack.h"

/* ---- encoders ------------------------------------------------------------------ */

void proto_ping(struct rd_cmd *c)
{
    cmd_plain(c, "PING");
}

/* The meta fields a read takes, in proto_meta's order. */
static const char *const meta_fields[] = {
    "segments",   "mode", "hold_ms",   "initial", "gen",     "rebalance", "epoch",
    "durability", "salt", "adj_until", "lock",    "fencing", "batch"};

void proto_meta_read(struct rd_cmd *c, const char *sku)
{
    char key[SEG_KEY_MAX];
    cmd_plain(c, "HMGET");
    cmd_key(c, seg_key_meta(key, sku));
    for (size_t i = 0; i < sizeof meta_fields / sizeof *meta_fields; i++)
        cmd_arg(c, meta_fields[i]);
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

void proto_segments_view(struct rd_cmd *c, const char *meta_of, const char *sku, int from,
                         int to, long long epoch)
{
    char key[SEG_KEY_MAX];
    cmd_script(c, SCRIPT_VIEW);
    if (meta_of != NULL)
        cmd_key(c, seg_key_meta(key, meta_of));
    for (int i = from; i < to; i++) {
        cmd_key(c, seg_key_stock(key, sku, i));
        cmd_key(c, seg_key_sold(key, sku, i));
        cmd_key(c, seg_key_orders(key, sku, i));
        cmd_key(c, seg_key_lock(key, sku, i));
        cmd_key(c, seg_key_reserved(key, sku, i, epoch));
    }
    for (size_t i = 0; meta_of != NULL && i < sizeof meta_fields / sizeof *meta_fields;
         i++)
        cmd_arg(c, meta_fields[i]);
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
    char packed[RD_RECORD_PACKED_MAX];
    cmd_arg(c, rd_record_stored(record, id, sku, packed, sizeof packed));
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
        char packed[RD_RECORD_PACKED_MAX];
        cmd_arg(c, rd_record_stored(b[k].record, b[k].id, sku, packed, sizeof packed));
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
    cmd_key(c, seg_key_reserved(key, sku, i, epoch));
    cmd_key(c, seg_key_holds(key, sku, i, epoch));
    cmd_key(c, seg_key_hold(key, sku, i, id));
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
    char packed[RD_RECORD_PACKED_MAX];
    cmd_arg(c, record != NULL ? rd_record_stored(record, id, sku, packed, sizeof packed)
                              : "");
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
    char packed[RD_RECORD_PACKED_MAX]; /* a sale's record packed; a cancel's as it is */
    cmd_arg(c,
            cancel ? record : rd_record_stored(record, id, sku, packed, sizeof packed));
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

void proto_wait_skus(struct rd_cmd *c, int timeout_ms)
{
    char key[SEG_KEY_MAX];
    wait_at(c, seg_key_skus(key), timeout_ms);
}
