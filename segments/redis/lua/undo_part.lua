-- UNDO_PART: on a Redis Cluster, one part of a multi-segment plan given back: an order's
-- part (the order fell short in another part, or its process died before its record:
-- the next holder of the id's claim undoes its plan), or a reservation's (a hold over
-- several segments whose place, or whose confirm, could not take every part).
-- KEYS: segment stock, sold, the hash the part was recorded in (orders for the plan's
--       first segment, parts for the others), segment epoch, the segment's reserved
--       count and held set of the plan's epoch, the reservation's record in the segment.
-- ARGV: order_id, epoch.
-- Only the holder of the id's claim sends it, and no record exists for the id (CONFIRM
-- writes the record and drops the claim in one script; a hold's COMMIT writes its index
-- and drops the plan in one script), so what the segment holds for the id is that
-- claim's unplaced part: units held for it (the id in the held set: back from reserved)
-- or sold to it (in the hash: back from sold). A reservation's part so given back is
-- marked 'expired' (its expiry passed by this node's clock) or 'released'. Safe to run
-- again: a part not there (never landed, undone already, or its segment reset since)
-- is OK.
-- The part given back is an event on the segment's ledger stream.
-- Reply: {OK, units given back}.
if redis.call('GET', KEYS[4]) ~= ARGV[2] then return {OK, 0} end
local got = 0
if redis.call('ZREM', KEYS[6], ARGV[1]) == 1 then
  local q = redis.call('HGET', KEYS[7], 'q')
  if q then
    redis.call('INCRBY', KEYS[1], q)
    redis.call('DECRBY', KEYS[5], q)
    LEDGER(KEYS[1], 'k', 'release', 'e', ARGV[2], 'h', ARGV[1], 'ds', q, 'dq', '0')
    got = tonumber(q)
  end
end
local q = redis.call('HGET', KEYS[3], ARGV[1])
if q then
  redis.call('INCRBY', KEYS[1], q)
  redis.call('DECRBY', KEYS[2], q)
  redis.call('HDEL', KEYS[3], ARGV[1])
  LEDGER(KEYS[1], 'k', 'undo', 'e', ARGV[2], 'o', ARGV[1], 'ds', q, 'dq', '-' .. q)
  got = got + tonumber(q)
end
if got > 0 then
  local x = redis.call('HGET', KEYS[7], 'x')
  if x then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('HSET', KEYS[7], 's', now >= tonumber(x) and 'expired' or 'released')
  end
end
return {OK, got}
