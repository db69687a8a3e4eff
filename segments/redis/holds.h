/* holds.h -- Redis's reservations (admin.h hold_* ops, whose table admin.c fills):
 * lua/hold.lua on a worker's connection, its keys (keys.h: reserved, holds, hold records,
 * the index, the holding list) and its replies decoded here.
 *
 * Standalone Redis: the index and the segment's keys are written by one script.
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

#endif
