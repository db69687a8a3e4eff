-- CANCEL_RECORD: on a Redis Cluster, the record's part of a cancel (after
-- cancel_segment.lua gave the units back).
-- KEYS: order record.
-- ARGV: the record as the caller read it, the cancelled record.
-- Reply: {STALE} (the record is neither: another order has the id now) | {OK}.
local v = redis.call('HMGET', KEYS[1], 'r', 'k')
local r = RECORD(v[1], KEYS[1], v[2])
if r ~= ARGV[1] and r ~= ARGV[2] then return {STALE} end
redis.call('HSET', KEYS[1], 'r', ARGV[2])
return {OK}
