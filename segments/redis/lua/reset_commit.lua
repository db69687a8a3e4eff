-- RESET_COMMIT: the last step of a reset on a Redis Cluster (after every segment was
-- reset): the new settings become the SKU's, which is what makes the reset visible.
-- KEYS: meta, request key.
-- ARGV: the new epoch, segments (0 = delete the SKU), mode, hold_ms, initial,
--       rebalance (0/1), the request's signature ('' = no request id), durability
--       ('async' | 'replicated'), the placement salt of the segments' hash tags, lock
--       ('' = the lock here), fencing ('0'/'1'), batch (ARGV[12]).
-- A request id is recorded with '|new' after its signature when the SKU had no epoch
-- (this reset created it), as reset.lua does.
-- Reply: {STALE} (the reset is no longer the pending one: its lease ran out and
--      another took over) | {OK, created 0/1}.
local m = redis.call('HMGET', KEYS[1], 'pending', 'epoch')
if m[1] ~= ARGV[1] then return {STALE} end
local created = not m[2]
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '0' then
  redis.call('HSET', KEYS[1], 'segments', ARGV[2], 'mode', ARGV[3], 'hold_ms', ARGV[4],
             'initial', ARGV[5], 'rebalance', ARGV[6], 'epoch', ARGV[1], 'gen', ARGV[1],
             'durability', ARGV[8], 'salt', ARGV[9], 'lock', ARGV[10],
             'fencing', ARGV[11], 'batch', ARGV[12] or '1')
end
if ARGV[7] ~= '' then
  redis.call('SET', KEYS[2], ARGV[7] .. (created and ARGV[2] ~= '0' and '|new' or ''),
             'EX', 86400)
end
return {OK, created and ARGV[2] ~= '0' and 1 or 0}
