-- RESET: create, reset or delete a SKU.
-- KEYS: meta, SKU set, request key, then per old-or-new segment i: stock, sold, lock,
--       orders, parts, cancelled, epoch.
-- ARGV: sku, order key prefix, order key suffix, segments (0 = delete the SKU), mode,
--       hold_ms, initial, share+1, share, count of segments given share+1, rebalance
--       (0/1), the epoch and segment count the caller found ('0', '0' for no SKU), the
--       new epoch, the request's signature ('' = no request id).
-- Refuses (STALE) when the SKU is not as the caller found it, so every key of every
-- old segment is listed and none is orphaned. Deletes every listed segment key and the
-- order records listed by the orders hashes and cancelled sets; then, unless deleting,
-- writes the new shares, zero sold counts, each segment's epoch and a fresh meta whose
-- gen starts at the new epoch.
-- Reply: {REPLAYED} | {CONFLICT} | {STALE} | {MISSING} (delete of no SKU) | {OK}.
if ARGV[15] ~= '' then
  local prev = redis.call('GET', KEYS[3])
  if prev == ARGV[15] then return {REPLAYED} end
  if prev then return {CONFLICT} end
end
local epoch = redis.call('HGET', KEYS[1], 'epoch') or '0'
if epoch ~= ARGV[12]
   or (redis.call('HGET', KEYS[1], 'segments') or '0') ~= ARGV[13] then
  return {STALE}
end
local n = tonumber(ARGV[4])
if n == 0 and redis.call('EXISTS', KEYS[1]) == 0 then return {MISSING} end
local m = (#KEYS - 3) / 7
local function drop(ids)
  for _, id in ipairs(ids) do redis.call('DEL', ARGV[2] .. id .. ARGV[3]) end
end
for i = 0, m - 1 do
  local b = 3 + i * 7
  drop(redis.call('HKEYS', KEYS[b + 4]))
  drop(redis.call('SMEMBERS', KEYS[b + 6]))
  for k = 1, 7 do redis.call('DEL', KEYS[b + k]) end
end
if ARGV[15] ~= '' then redis.call('SET', KEYS[3], ARGV[15], 'EX', 86400) end
redis.call('DEL', KEYS[1])
if n == 0 then
  redis.call('SREM', KEYS[2], ARGV[1])
  return {OK}
end
local extra = tonumber(ARGV[10])
for i = 0, n - 1 do
  local b = 3 + i * 7
  redis.call('SET', KEYS[b + 1], i < extra and ARGV[8] or ARGV[9])
  redis.call('SET', KEYS[b + 2], '0')
  redis.call('SET', KEYS[b + 7], ARGV[14])
end
redis.call('HSET', KEYS[1], 'segments', ARGV[4], 'mode', ARGV[5],
           'hold_ms', ARGV[6], 'initial', ARGV[7], 'rebalance', ARGV[11],
           'epoch', ARGV[14], 'gen', ARGV[14])
redis.call('SADD', KEYS[2], ARGV[1])
return {OK}
