-- ACQUIRE on a Redis Cluster: acquire.lua with the segment's keys only (the order id
-- was claimed before, claim.lua).
-- KEYS: segment stock, segment lock, segment epoch.
-- ARGV: qty, token, ttl_ms, epoch.
-- Reply: {STALE} | {MISSING} | {SHORT, stock} | {BUSY, stock} | {OK, stock}.
if redis.call('GET', KEYS[3]) ~= ARGV[4] then return {STALE} end
local s = redis.call('GET', KEYS[1])
if not s then return {MISSING} end
s = tonumber(s)
if s < tonumber(ARGV[1]) then return {SHORT, s} end
if not redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3])
   and redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return {BUSY, s}
end
return {OK, s}
