/* proto.h -- what each call of the seam sends, and how its reply reads: one encoder
 * per call (C values to a command, cmd.h) and one decoder per reply shape (a
 * redisReply to C values). calls.c sends them on a blocking connection, async.c on an
 * event loop; neither builds a key or parses a reply itself. Private to
 * segments/redis/. Three files: proto.c encodes the order path, the locks and the
 * reads; proto_admin.c the admin operations (adjust, reset, a cluster's cancel steps,
 * the SKU set, scans); proto_reply.c holds the decoders. The scripts' KEYS and ARGV are
 * documented atop each file of lua/.
 */
#ifndef SEG_REDIS_PROTO_H
#define SEG_REDIS_PROTO_H

#include <hiredis/hiredis.h>

#include "segments/redis/calls.h"
#include "segments/redis/cmd.h"
#include "segments/store.h"

/* ---- encoders: start `c` (cmd_free it after use) ------------------------------- */

void proto_ping(struct rd_cmd *c);
void proto_meta_read(struct rd_cmd *c, const char *sku);
void proto_record_read(struct rd_cmd *c, const char *id);
/* MGET of the stock of segments 0..n-1. */
void proto_stocks_read(struct rd_cmd *c, const char *sku, int n);
/* Segment i's stock (c[0]: GET) and, when `full`, its sold count, orders and lock
 * (c[1..3]: GET, HLEN, EXISTS): one command per key, each in the segment's slot. */
void proto_segment_reads(struct rd_cmd *c, const char *sku, int i, bool full);
/* VIEW (lua/view.lua) of segments from..to-1 of `sku` of `epoch`: their stock, sold,
 * orders, lock and reserved in one script (one slot per segment: a cluster sends one
 * segment a script), and when `meta_of` is not NULL (standalone) the settings of SKU
 * `meta_of` too, as proto_meta_read's fields (proto_meta decodes them). */
void proto_segments_view(struct rd_cmd *c, const char *meta_of, const char *sku, int from,
                         int to, long long epoch);
void proto_skus_list(struct rd_cmd *c);
/* Token "": a lock service's hold with `fence` (0: issue one), lua/acquire.lua. */
void proto_acquire(struct rd_cmd *c, const char *sku, long long epoch, int i,
                   const char *id, long long qty, const char *token, int ttl_ms,
                   long long fence);
/* lua/deduct_batch.lua: b's n orders from segment i under `token`, `fence`. */
void proto_deduct_batch(struct rd_cmd *c, const char *sku, long long epoch, int i,
                        const char *token, long long fence, int n,
                        const struct store_batch_order *b);
/* `keep`: an OK leaves the lock held; `fence`: store.h's (lua/deduct.lua). */
void proto_deduct(struct rd_cmd *c, const char *sku, long long epoch, int i,
                  const char *token, const char *attempt, const char *id, long long qty,
                  const char *record, bool keep, long long fence);
void proto_lock(struct rd_cmd *c, const char *sku, int i, const char *token, int ttl_ms);
/* The order path on a cluster (lua/claim.lua, confirm.lua, acquire_slot.lua,
 * deduct_slot.lua), and the one-key reads it fans out: HGET of `id` in segment i's
 * orders hash, GET of segment i's stock. */
void proto_acquire_slot(struct rd_cmd *c, const char *sku, long long epoch, int i,
                        long long qty, const char *token, int ttl_ms, long long fence);
/* `first`: the order's first (or only) segment, whose orders hash records it; a later
 * part of a multi-segment order is recorded in its segment's parts hash. */
void proto_deduct_slot(struct rd_cmd *c, const char *sku, long long epoch, int i,
                       const char *token, const char *id, long long qty, long long until,
                       bool first, long long fence);
void proto_claim(struct rd_cmd *c, const char *id, const char *attempt, const char *sku,
                 long long epoch, int lease_ms, const char *dead, const char *plan,
                 long long dead_epoch);
/* Multi-segment orders and holds on a cluster: UNDO_PART of a part in segment i (what
 * the id holds or bought there given back: lua/undo_part.lua); the ZADD and
 * ZREM of an id in the intents set, the ids in it older than before_ms (at most
 * `limit`); HMGET of an id's claim: c (attempt), p (plan), k (sku), e (epoch). */
void proto_undo_part(struct rd_cmd *c, const char *sku, long long epoch, int i,
                     const char *id, bool first);
void proto_intent_add(struct rd_cmd *c, const char *id, long long at_ms);
void proto_intent_done(struct rd_cmd *c, const char *id);
void proto_intents_due(struct rd_cmd *c, long long before_ms, int limit);
void proto_claim_read(struct rd_cmd *c, const char *id);
/* A multi-segment order's plan (the claim's field p): "placed epoch seg:qty ...",
 * built by rd_plan_build (calls.h) and read back here (proto_reply.c): 0 with `out`
 * filled (free with proto_plan_free), or -1 when `s` is not one. */
struct proto_plan {
    char placed[RD_SKU_PLACED_MAX];
    long long epoch;
    int n;
    int *seg;
    long long *qty;
};
int proto_plan_parse(const char *s, struct proto_plan *out);
void proto_plan_free(struct proto_plan *p);
void proto_confirm(struct rd_cmd *c, const char *id, const char *attempt,
                   const char *record, const char *sku, long long epoch);
void proto_order_in_segment(struct rd_cmd *c, const char *sku, int i, const char *id);
void proto_stock_read(struct rd_cmd *c, const char *sku, int i);
/* WAIT 1 timeout_ms on the node of segment i (of the record of `id`): how many
 * replicas have every write of this connection so far. */
void proto_wait_segment(struct rd_cmd *c, const char *sku, int i, int timeout_ms);
void proto_wait_record(struct rd_cmd *c, const char *id, int timeout_ms);
void proto_wait_meta(struct rd_cmd *c, const char *sku, int timeout_ms);
void proto_wait_skus(struct rd_cmd *c, int timeout_ms); /* the SKU set's node */
/* A WAIT's mark (keys.h inv:ack) in `slot`, and the plain WAIT 1 timeout_ms sent after
 * it on the same connection (waits.h). */
void proto_ack_mark(struct rd_cmd *c, int slot);
void proto_wait(struct rd_cmd *c, int timeout_ms);
void proto_release(struct rd_cmd *c, const char *sku, int i, const char *token);
void proto_renew(struct rd_cmd *c, const char *sku, int i, const char *token, int ttl_ms);
void proto_deduct_multi(struct rd_cmd *c, const char *sku, long long epoch,
                        const char *id, const char *record, const char *attempt,
                        const struct rd_parts *p);
void proto_cancel(struct rd_cmd *c, const char *sku, long long epoch, const char *id,
                  const char *cancelled, const char *expected, const struct rd_parts *p);
void proto_adjust(struct rd_cmd *c, const char *sku, long long epoch, int segments,
                  const char *const *tok, const long long *fence, const char *op,
                  long long add, long long limit, const char *rid, const char *sig);
void proto_reset(struct rd_cmd *c, const char *sku, long long old_epoch, int old_segments,
                 const struct rd_reset *to, const char *rid, const char *sig);

/* ---- decoders: 0, or -1 when the reply is not of the shape the call expects ------ */

/* An integer reply, or a string holding a whole decimal integer; else `dflt`. */
long long proto_integer(const redisReply *r, long long dflt);

/* A script's {code, value-or-record}. */
int proto_scripted(const redisReply *r, struct rd_reply *out);
/* DEDUCT_BATCH's: n scripts' replies, out[k] as proto_scripted fills it (records
 * malloc'd, the caller frees them; none left on -1). */
int proto_batch(const redisReply *r, int n, struct store_reply *out);
/* DEDUCT_MULTI's: as proto_scripted, and for OK/SHORT the n stocks. */
int proto_multi(const redisReply *r, int n, struct rd_reply *out, long long *stocks);
/* RELEASE/RENEW: *done 1 or 0. */
int proto_done(const redisReply *r, int *done);
/* SET NX PX GET: *taken 1 (ours) or 0 (held by another token). */
int proto_taken(const redisReply *r, const char *token, int *taken);
/* HMGET of the meta: *found 1 with `out` filled, or 0. */
int proto_meta(const redisReply *r, struct rd_meta *out, int *found);
/* HMGET of order `id`'s record: *record (malloc'd; its JSON, unpacked: recpack.h) or
 * NULL, and the SKU and epoch it was written in (`sku`: SEG_NAME_MAX + 1 bytes; "" and
 * 0 for a record older than those fields). */
int proto_record(const redisReply *r, const char *id, char **record, char *sku,
                 long long *epoch);
/* True when that HMGET, asked a 4th field "t" (the attempt), read 'ledger': a record
 * RESTORE wrote back from the ledger (restore.lua). */
bool proto_record_restored(const redisReply *r);
/* True when a record written for `owner` in `owner_epoch` was left behind by a reset
 * of `sku`, now in `epoch` (keys.h): no order any more. */
bool proto_record_dead(const char *owner, long long owner_epoch, const char *sku,
                       long long epoch);
/* One page of HSCAN (`hash`) or SSCAN of `key` from `cursor`, about `count` long; and
 * its reply: the next cursor (into cursor[0..cursor_len), "0" at the end) and the
 * page's fields or members (*names: malloc'd array of *n malloc'd strings, NULL when
 * none). 0 or -1. */
void proto_scan(struct rd_cmd *c, const char *key, bool hash, const char *cursor,
                int count);
int proto_scan_page(const redisReply *r, bool hash, char *cursor, size_t cursor_len,
                    char ***names, size_t *n);
/* A reset on a cluster: RESET_BEGIN, RESET_SEGMENT of segment i (`stock` < 0: the
 * segment goes), RESET_COMMIT, and the SADD (or SREM) of the SKU's name; RESET_YIELD:
 * the reset in `epoch` stopped part way and gives up its lease (`untouched`: it reset
 * no segment and took over no dead reset, so its mark goes). `expect`: the version
 * the reset replaces (calls.h struct rd_reset's expect); `retake`: its retake. */
void proto_reset_begin(struct rd_cmd *c, const char *sku, long long old_epoch,
                       int old_segments, long long epoch, int segments, int lease_ms,
                       const char *expect, const char *rid, const char *sig, bool retake);
void proto_reset_segment(struct rd_cmd *c, const char *sku, int i, long long old_epoch,
                         const char *dead, long long epoch, long long stock, bool ledger,
                         bool replicated);
/* The SADD of the slots of segments 0..segments-1 of `placed` to the ledger's slot
 * index (keys.h inv:ledger:slots): sent before the segment steps that name them in
 * their slots' registries, so the sink finds every registry that has a field. */
void proto_ledger_slots(struct rd_cmd *c, const char *placed, int segments);
void proto_reset_commit(struct rd_cmd *c, const char *sku, const struct rd_reset *to,
                        const char *rid, const char *sig);
void proto_skus_change(struct rd_cmd *c, const char *sku, bool add);
void proto_reset_yield(struct rd_cmd *c, const char *sku, long long epoch,
                       bool untouched);
/* A cancel on a cluster: CANCEL_SEGMENT in segment i, CANCEL_RECORD, and the SKU's gen
 * bumped (HINCRBY) so that every cache sees the stock rise. `restored`: the record
 * when RESTORE wrote it back from the ledger (its segments[part] gives the units of a
 * part the segment forgot), else NULL; part 0 is the order's first segment. */
void proto_cancel_segment(struct rd_cmd *c, const char *sku, long long epoch, int i,
                          const char *id, const char *token, int part,
                          const char *restored);
void proto_cancel_record(struct rd_cmd *c, const char *id, const char *expected,
                         const char *cancelled);
void proto_gen_bump(struct rd_cmd *c, const char *sku);
/* DROP_RECORDS of the records of `ids[0..n-1]`, for `sku` in the epoch a reset ended. */
void proto_drop_records(struct rd_cmd *c, const char *sku, long long epoch,
                        char *const *ids, size_t n);
/* MGET of stocks: stock[0..n-1] (absent: 0). */
int proto_stocks(const redisReply *r, int n, long long *stock);

#endif
