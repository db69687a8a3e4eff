-- RESET_YIELD: a reset on a Redis Cluster that stops part way (durability replicated:
-- a step no replica confirmed, so the next must not be sent) gives up its lease, so
-- that its retry, or any other reset, takes it over at once (reset_begin.lua answers
-- it as a dead reset) instead of waiting the lease out. One that touched nothing (it
-- stopped right after its RESET_BEGIN, which took over no dead reset) takes its mark
-- away instead: the SKU is as before it, and restocks are not held up by it.
-- KEYS: meta.
-- ARGV: the stopping reset's epoch, '1' when it touched nothing ('0' otherwise).
-- Reply: {STALE} (it is not the pending reset any more) | {OK}.
if redis.call('HGET', KEYS[1], 'pending') ~= ARGV[1] then return {STALE} end
if ARGV[2] == '1' then
  redis.call('HDEL', KEYS[1], 'pending', 'pending_segments', 'pending_until',
             'pending_dead', 'pending_span', 'pending_req')
else
  redis.call('HSET', KEYS[1], 'pending_until', '0')
end
return {OK}
