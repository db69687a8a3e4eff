-- ACQUIRE on a Redis Cluster: acquire.lua with the segment's keys only (the order id
-- was claimed before, claim.lua).
-- KEYS: segment stock, segment lock, segment epoch, segment fence.
-- ARGV: qty, token, ttl_ms, epoch, fence.
-- Reply: {STALE} | {MISSING} | {SHORT, stock} | {BUSY, stock} | {OK, stock}
--      | {FENCED} | {OK, stock, fence} (token '': acquire.lua's lock service hold).
if redis.call('GET', KEYS[3]) ~= ARGV[4] then return {STALE} end
local s = redis.call('GET', KEYS[1])
if not s then return {MISSING} end
s = tonumber(s)
if s < tonumber(ARGV[1]) then return {SHORT, s} end
if ARGV[2] == '' then -- a lock service holds it: register its fence (0: issue one)
  local f, top = tonumber(ARGV[5]), tonumber(redis.call('GET', KEYS[4]) or '0')
  if f == 0 then f = top + 1 elseif f < top then return {FENCED} end
  redis.call('SET', KEYS[4], f)
  return {OK, s, f}
end
if not redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3])
   and redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return {BUSY, s}
end
return {OK, s}
