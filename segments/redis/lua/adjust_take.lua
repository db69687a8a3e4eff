-- ADJUST_TAKE: on a Redis Cluster, a rebalance's units taken out of one segment
-- (after adjust_begin.lua; segments/redis/adjust.h).
-- KEYS: the segment's stock, epoch, adjust marks.
-- ARGV: epoch, intent id, units wanted (> 0), the runner's lease end (ms, the meta
--       node's clock).
-- Takes what the segment holds of the units wanted (orders may have sold some since
-- the plan: the stock never goes below zero, and the step never fails for it) and
-- records the amount under the intent id, so that a rerun (a lost reply, a runner
-- that took the intent over) answers the same amount and takes nothing again.
-- Refused once the lease, less 1 s for the clocks of two masters, has passed: a
-- runner that stalled past it may have been replaced, and writes nothing.
-- A rerun writes its mark again (same value): the runner's WAIT on this node then
-- covers the first run too, whichever connection made it (durability replicated).
-- The units taken are an event on the segment's ledger stream (a rerun adds none).
-- Reply: {STALE} (the segment is not of this epoch: a reset since) | {FENCED}
--      | {OK, taken}.
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return {STALE} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= tonumber(ARGV[4]) - 1000 then return {FENCED} end
local done = redis.call('HGET', KEYS[3], ARGV[2])
if done then
  redis.call('HSET', KEYS[3], ARGV[2], done) -- a write: see above
  return {OK, done}
end
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
local took = math.min(stock, tonumber(ARGV[3]))
if took < 0 then took = 0 end
took = string.format('%d', took)
redis.call('DECRBY', KEYS[1], took)
redis.call('HSET', KEYS[3], ARGV[2], took)
if took ~= '0' then LEDGER(KEYS[1], 'k', 'take', 'e', ARGV[1], 'ds', '-' .. took, 'dq', '0') end
return {OK, took}
