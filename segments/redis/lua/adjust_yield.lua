-- ADJUST_YIELD: a runner of a restock or rebalance on a Redis Cluster gives up its
-- lease early, having stopped with nothing in flight (every step it sent answered; a
-- step that reached no replica, durability replicated: segments/redis/adjust.h).
-- KEYS: meta.
-- ARGV: intent id, the runner's token.
-- While the meta's intent is still this one and this runner's, its lease ends now, so
-- that the next adjust of the SKU (or the retry under its request id) takes it over
-- at once instead of after the lease: no step of this runner can land any more.
-- Reply: {OK} (given up) | {FENCED} (not this runner's, or no longer the intent).
local m = redis.call('HMGET', KEYS[1], 'adj', 'adj_owner')
if m[1] ~= ARGV[1] or m[2] ~= ARGV[2] then return {FENCED} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'adj_until', string.format('%d', now))
return {OK}
