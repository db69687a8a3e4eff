-- RESET_YIELD: a reset on a Redis Cluster that stops part way (durability replicated:
-- a step no replica confirmed, so the next must not be sent) gives up its lease, so
-- that its retry, or any other reset, takes it over at once (reset_begin.lua answers
-- it as a dead reset) instead of waiting the lease out.
-- KEYS: meta.
-- ARGV: the stopping reset's epoch.
-- Reply: {STALE} (it is not the pending reset any more) | {OK}.
if redis.call('HGET', KEYS[1], 'pending') ~= ARGV[1] then return {STALE} end
redis.call('HSET', KEYS[1], 'pending_until', '0')
return {OK}
