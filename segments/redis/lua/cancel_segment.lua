-- CANCEL_SEGMENT: on a Redis Cluster, the segment's part of a cancel (then
-- cancel_record.lua in the id's slot, then the SKU's gen bumped in the meta's).
-- KEYS: segment lock, stock, sold, orders hash, epoch, cancelled set; or, for a part of
--       a multi-segment order other than its first, the parts hash in place of the
--       orders hash and no set (the part gone means given back already: EXISTS).
-- ARGV: order_id, token, epoch.
-- Gives back the units the segment's orders hash records for the order, and marks it
-- cancelled there (an event on its ledger stream); fenced by the lock's token and the SKU's epoch. Every reply but
-- FENCED releases the lock (the token's).
-- Reply: {FENCED} | {STALE} | {MISSING} (not an order of this segment) | {EXISTS}
--      (cancelled here already: a cancel that died before its record is finished by
--      the retry) | {OK}.
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return {FENCED} end
redis.call('DEL', KEYS[1])
if redis.call('GET', KEYS[5]) ~= ARGV[3] then return {STALE} end
local q = redis.call('HGET', KEYS[4], ARGV[1])
if not q then
  if not KEYS[6] or redis.call('SISMEMBER', KEYS[6], ARGV[1]) == 1 then
    return {EXISTS}
  end
  return {MISSING}
end
redis.call('INCRBY', KEYS[2], q)
redis.call('DECRBY', KEYS[3], q)
redis.call('HDEL', KEYS[4], ARGV[1])
if KEYS[6] then redis.call('SADD', KEYS[6], ARGV[1]) end
LEDGER(KEYS[2], 'k', 'cancel', 'e', ARGV[3], 'o', ARGV[1], 'ds', q, 'dq', '-' .. q)
return {OK}
