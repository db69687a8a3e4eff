/* holds.h -- Redis's reservations (admin.h hold_* ops, whose table admin.c fills, and
 * the loops' by-SKU place and by-id step, backend.c): their keys (keys.h: reserved, held
 * sets, the hold, the holding list), commands and replies decoded here.
 *
 * Standalone Redis (holds.c): every step is one lua/hold_local.lua script; the hold is
 * one string (its record and its index), read and written whole, and the segments'
 * keys are named by the script from it. Replies carry the hold's string, split here.
 * A Redis Cluster (holds_slot.c): no script spans two slots, so a place is the id
 * claimed in its index (lua/hold_id.lua, the id's slot: the index and the order
 * record share its hash tag), the segments walked one script each (hold.lua in slot
 * mode: refused past the claim's end), then the index written; a confirm claims the
 * order record (the order path's claim fields: an order with the id waits), sells
 * in the segment, then writes the record; read and release find the index, then
 * step. A hold no one segment can give takes parts of several (holds_parts.c), all
 * or nothing across slots as a multi-segment order is: intent, plan in the order
 * record's claim, every part, then the index (a confirm: the record), a part refused
 * undoing the plan, a dead chain's plan undone by the intent sweeper. Gens are bumped by
 * a step of their own when units came back, and the sweeper walks the SKUs' segments
 * (each one's holding key) instead of one list.
 * Errors as calls.h: -1 when Redis gave no usable answer.
 */
#ifndef SEG_REDIS_HOLDS_H
#define SEG_REDIS_HOLDS_H

#include "segments/admin.h"
#include "segments/redis/calls.h"

/* The by-SKU place and by-id step as a command and a reply decoder, for the loop's
 * asynchronous calls too (backend.c): decode 0, or -1 when the reply is not one. */
struct redisReply;
struct rd_cmd;
void rd_hold_cmd_place_any(struct rd_cmd *cmd, const char *sku, const char *id,
                           long long qty, int ttl_ms, int start, const char *attempt);
int rd_hold_decode_place_any(const struct redisReply *r, long long qty,
                             struct store_reply *out, struct store_hold *h);
void rd_hold_cmd_by_id(struct rd_cmd *cmd, const char *id, enum store_hold_action act,
                       const char *attempt);
int rd_hold_decode_by_id(const struct redisReply *r, struct store_reply *out,
                         struct store_hold *h);

int rd_hold_by_id(rd_conn *c, const char *id, enum store_hold_action act,
                  const char *attempt, struct store_reply *out, struct store_hold *h);
int rd_holds_sweep(rd_conn *c, int limit, int *settled);
/* Up to `limit` holds due by Redis's clock (TIME) from the list of holdings, oldest
 * first (`scores`: each with its due time after it), or NULL when Redis gave no
 * usable answer: both sweeps' first read. */
struct redisReply *rd_holds_due(rd_conn *c, int limit, bool scores);

/* On a Redis Cluster (holds_slot.c): store.h's hold_place_any and hold_by_id as chains
 * of calls on a loop's connection (fn once, never inside the call; -1: no answer, the
 * outcome unknown), and admin.h's hold_by_id (read and release) and holds_sweep. */
struct rda_conn;
void rd_hold_slot_place(struct rda_conn *c, const char *sku, const char *id,
                        long long qty, int ttl_ms, int start, const char *attempt,
                        store_hold_fn fn, void *arg);
void rd_hold_slot_by_id(struct rda_conn *c, const char *id, enum store_hold_action act,
                        const char *attempt, store_hold_fn fn, void *arg);
int rd_hold_slot_by_id_sync(rd_conn *c, const char *id, enum store_hold_action act,
                            const char *attempt, struct store_reply *out,
                            struct store_hold *h);
int rd_holds_sweep_slots(rd_conn *c, int limit, int *settled);

#endif
