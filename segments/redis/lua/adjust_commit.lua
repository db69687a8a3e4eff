-- ADJUST_COMMIT: the last step of a restock or rebalance on a Redis Cluster, after
-- every take and give (segments/redis/adjust.h): the intent is done.
-- KEYS: meta, request key.
-- ARGV: intent id, the runner's token, units added (restock; '0' otherwise), the
--       request's signature ('' = no request id).
-- Only while the meta's intent is still this one and this runner's: drops the intent,
-- raises the initial stock by the units added (the segments hold them already), bumps
-- gen and records the request id for a day.
-- Reply: {REPLAYED} (committed already: by a runner that took it over, or by this one
--      before a lost reply) | {FENCED} (another runner took it over and finishes it)
--      | {STALE} (no longer the SKU's intent: a reset since) | {OK, gen}.
local m = redis.call('HMGET', KEYS[1], 'adj', 'adj_owner')
if m[1] ~= ARGV[1] then
  if ARGV[4] ~= '' and redis.call('GET', KEYS[2]) == ARGV[4] then
    redis.call('SET', KEYS[2], ARGV[4], 'KEEPTTL') -- a write, for the caller's WAIT
    return {REPLAYED}
  end
  return {STALE}
end
if m[2] ~= ARGV[2] then return {FENCED} end
redis.call('HDEL', KEYS[1], 'adj', 'adj_op', 'adj_add', 'adj_plan', 'adj_rid', 'adj_sig',
           'adj_owner', 'adj_until')
if ARGV[3] ~= '0' then redis.call('HINCRBY', KEYS[1], 'initial', ARGV[3]) end
if ARGV[4] ~= '' then redis.call('SET', KEYS[2], ARGV[4], 'EX', 86400) end
return {OK, redis.call('HINCRBY', KEYS[1], 'gen', 1)}
