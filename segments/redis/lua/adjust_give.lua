-- ADJUST_GIVE: on a Redis Cluster, units given to one segment by a restock or a
-- rebalance (after adjust_begin.lua and a rebalance's takes; segments/redis/adjust.h).
-- KEYS: the segment's stock, epoch, adjust marks.
-- ARGV: epoch, intent id, units (> 0, decimal), the runner's lease end (ms, the meta
--       node's clock).
-- Adds the units with INCRBY and records them under the intent id, so that a rerun
-- answers the same and adds nothing again (and writes its mark again, for the
-- runner's WAIT, as adjust_take.lua). Refused past the lease as adjust_take.lua.
-- The units given are an event on the segment's ledger stream (a rerun adds none).
-- Reply: {STALE} (the segment is not of this epoch: a reset since) | {FENCED}
--      | {OK, given}.
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return {STALE} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= tonumber(ARGV[4]) - 1000 then return {FENCED} end
local done = redis.call('HGET', KEYS[3], ARGV[2])
if done then
  redis.call('HSET', KEYS[3], ARGV[2], done) -- a write: see above
  return {OK, done}
end
redis.call('INCRBY', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
LEDGER(KEYS[1], 'k', 'give', 'e', ARGV[1], 'ds', ARGV[3], 'dq', '0')
return {OK, ARGV[3]}
