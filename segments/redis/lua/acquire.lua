-- ACQUIRE: check the order id, read the segment's stock and, when it holds enough,
-- take the segment's lock.
-- KEYS: order record, segment stock, segment lock, segment epoch, segment fence.
-- ARGV: qty, token, ttl_ms, epoch, sku, fence.
-- Reply: {STALE} | {EXISTS, record} | {MISSING} | {SHORT, stock} | {BUSY, stock}
--      | {OK, stock} | {FENCED} | {OK, stock, fence}.
-- Token '': the lock is a lock service's (store.h `hold`): no lock taken here, its
-- fence registered as the segment's highest (a lower one: FENCED), or with fence 0
-- the next one issued (Redisson's fenced lock).
-- The stock is read before the lock is tried, so an empty segment is skipped without
-- ever being locked; stock only rises under a lock, so "short" stays true. Taking a
-- lock the same token already holds is OK, so a retry after a lost reply is safe.
-- A record is the order's unless a reset left it behind: its SKU (k) is this one and
-- its epoch (e) is not (keys.h); such a record is ignored and later overwritten.
if redis.call('GET', KEYS[4]) ~= ARGV[4] then return {STALE} end
local rec = redis.call('HMGET', KEYS[1], 'r', 'k', 'e')
if rec[1] and (rec[2] ~= ARGV[5] or rec[3] == ARGV[4]) then return {EXISTS, RECORD(rec[1], KEYS[1], rec[2])} end
local s = redis.call('GET', KEYS[2])
if not s then return {MISSING} end
s = tonumber(s)
if s < tonumber(ARGV[1]) then return {SHORT, s} end
if ARGV[2] == '' then -- a lock service holds it: register its fence (0: issue one)
  local f, top = tonumber(ARGV[6]), tonumber(redis.call('GET', KEYS[5]) or '0')
  if f == 0 then f = top + 1 elseif f < top then return {FENCED} end
  redis.call('SET', KEYS[5], f)
  return {OK, s, f}
end
if not redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[3])
   and redis.call('GET', KEYS[3]) ~= ARGV[2] then
  return {BUSY, s}
end
return {OK, s}
