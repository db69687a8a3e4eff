-- ACQUIRE: check the order id, read the segment's stock and, when it holds enough,
-- take the segment's lock.
-- KEYS: order record, segment stock, segment lock, segment epoch.
-- ARGV: qty, token, ttl_ms, epoch.
-- Reply: {STALE} | {EXISTS, record} | {MISSING} | {SHORT, stock} | {BUSY, stock}
--      | {OK, stock}.
-- The stock is read before the lock is tried, so an empty segment is skipped without
-- ever being locked; stock only rises under a lock, so "short" stays true. Taking a
-- lock the same token already holds is OK, so a retry after a lost reply is safe.
if redis.call('GET', KEYS[4]) ~= ARGV[4] then return {STALE} end
local rec = redis.call('HGET', KEYS[1], 'r')
if rec then return {EXISTS, rec} end
local s = redis.call('GET', KEYS[2])
if not s then return {MISSING} end
s = tonumber(s)
if s < tonumber(ARGV[1]) then return {SHORT, s} end
if not redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[3])
   and redis.call('GET', KEYS[3]) ~= ARGV[2] then
  return {BUSY, s}
end
return {OK, s}
