-- ADJUST_BEGIN: the first step of a restock or rebalance on a Redis Cluster, where a
-- SKU's keys span slots and ADJUST cannot run as one script (adjust_take.lua,
-- adjust_give.lua per segment, then adjust_commit.lua follow; segments/redis/adjust.h).
-- KEYS: meta, request key.
-- ARGV: 'restock' | 'rebalance' | 'spread', units to add (restock), epoch, segment
--       count, the largest initial stock that may still take the units (decimal), the
--       request's signature ('' = no request id), the intent id (fresh, random), the
--       plan (one signed delta per segment, comma-separated), the lease in ms, the
--       request id, the runner's token (fresh, random, per call).
-- Records the intent in the meta (adj, adj_op, adj_add, adj_plan, adj_rid, adj_sig)
-- with its runner (adj_owner) and lease end (adj_until, ms on this node's clock): one
-- adjust at a time per SKU. An intent whose lease ran out (its process died or
-- stalled) is taken over: it is answered, the caller becomes its runner with a new
-- lease, and finishes it (its steps are idempotent) before it begins its own. The same
-- call sent again (the same runner token) answers as it did. Every answer but the
-- refusals writes (a replay rewrites the request key, KEEPTTL; a call sent again its
-- runner), so that the caller's WAIT on this node covers what it answers, whichever
-- connection wrote it (durability replicated).
-- Reply: {REPLAYED} | {CONFLICT} | {STALE} (not the SKU the caller read, or a reset
--      that died half way: only another reset finishes it) | {BUSY} (another adjust,
--      or a reset, under way) | {LIMIT}
--      | {OK, lease end} (recorded)
--      | {EXISTS, lease end, id, op, add, plan, rid, sig} (a dead intent, now the
--        caller's to finish).
if ARGV[6] ~= '' then
  local prev = redis.call('GET', KEYS[2])
  if prev == ARGV[6] then
    redis.call('SET', KEYS[2], prev, 'KEEPTTL') -- a write, for the caller's WAIT
    return {REPLAYED}
  end
  if prev then return {CONFLICT} end
end
local m = redis.call('HMGET', KEYS[1], 'epoch', 'segments', 'initial', 'pending',
                     'pending_until', 'adj', 'adj_until', 'adj_op', 'adj_add', 'adj_plan',
                     'adj_rid', 'adj_sig', 'adj_owner')
if m[1] ~= ARGV[3] or m[2] ~= ARGV[4] then return {STALE} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if m[4] then
  if tonumber(m[5] or '0') > now then return {BUSY} end
  return {STALE}
end
local function intent(code, lease)
  if code == OK then return {OK, lease} end
  return {EXISTS, lease, m[6], m[8] or '', m[9] or '0', m[10] or '', m[11] or '',
          m[12] or ''}
end
if m[6] then
  if m[13] == ARGV[11] then -- this call, sent again
    redis.call('HSET', KEYS[1], 'adj_owner', ARGV[11]) -- a write, for the WAIT
    return intent(m[6] == ARGV[7] and OK or EXISTS, m[7])
  end
  if ARGV[6] ~= '' and m[11] == ARGV[10] and m[12] ~= ARGV[6] then return {CONFLICT} end
  if tonumber(m[7] or '0') > now then return {BUSY} end
  local lease = string.format('%d', now + tonumber(ARGV[9]))
  redis.call('HSET', KEYS[1], 'adj_owner', ARGV[11], 'adj_until', lease)
  return intent(EXISTS, lease)
end
local function above(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
if ARGV[1] == 'restock' and above(m[3] or '0', ARGV[5]) then return {LIMIT} end
local lease = string.format('%d', now + tonumber(ARGV[9]))
redis.call('HSET', KEYS[1], 'adj', ARGV[7], 'adj_op', ARGV[1], 'adj_add', ARGV[2],
           'adj_plan', ARGV[8], 'adj_rid', ARGV[10], 'adj_sig', ARGV[6],
           'adj_owner', ARGV[11], 'adj_until', lease)
return {OK, lease}
