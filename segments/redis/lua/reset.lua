-- RESET: create, reset or delete a SKU.
-- KEYS: meta, SKU set, request key, the ledger's registry (keys.h inv:ledger:{..}),
--       then per old-or-new segment i: stock, sold, lock,
--       orders, parts, cancelled, epoch, and the graveyards of its orders hash and
--       cancelled set under the epoch the caller found (keys.h inv:{sku:i}:gone:E:*).
-- ARGV: sku, segments (0 = delete the SKU), mode, hold_ms, initial, share+1, share,
--       count of segments given share+1, rebalance (0/1), the epoch and segment count
--       the caller found ('0', '0' for no SKU), the new epoch, the request's signature
--       ('' = no request id), durability ('async' | 'replicated'), the version the
--       caller replaces ('' = any, '-' = none: create only, '*' = any existing one,
--       'epoch.gen' = exactly that one), lock ('' = the lock here), fencing ('0'/'1'),
--       the ledger ('1': events on, '0': off), batch (the orders one lock hold may
--       sell, ARGV[19]).
-- A segment that goes (every segment on a delete, those past the new count on a
-- reset to fewer) appends a 'delete' event to its ledger stream, then loses its fence
-- and its ledger flag (inv:{sku:i}:fence, :ledger, beside its keys): with the flag
-- gone the sink drops the stream once it copied its last events (ev_read.lua). A
-- segment that stays keeps its fence, which only grows (keys.h).
-- The ledger flag of every new segment is set or deleted as ARGV[18] says; with it
-- set each new segment appends a 'reset' event (its new stock) to its ledger stream
-- and is named in the ledger's registry (field 'placed:i', its durability), which the
-- sink reads to find the streams to drain: a segment is named there from its flag
-- until the sink has drained its stream, whatever happens to the SKU meanwhile.
-- Refuses (STALE) when the SKU is not as the caller found it, so every key of every
-- old segment is listed and none is orphaned. Moves each old segment's orders hash and
-- cancelled set to its graveyards (RENAME: O(1) however big the sale) and deletes the
-- other segment keys (UNLINK: a big parts hash is freed off the main thread); then,
-- unless deleting, writes the new shares, zero sold counts, each segment's epoch and a
-- fresh meta whose gen starts at the new epoch.
-- The order records of the old segments live under their ids' keys, which this script
-- does not name: the caller reads the graveyards in steps, drops the records they name
-- (DROP_RECORDS) and then the graveyards. Until then the records are dead, since their
-- epoch is not the SKU's any more (keys.h). (This script used to answer every id: one
-- script as long as the sale, 1.9 s of Redis at 1.34M orders.)
-- The version is compared here, in the script that resets, so nothing can change the
-- SKU between the compare and the reset. A request id is recorded with '|new' after
-- its signature when the reset created the SKU, so that a replay says so too.
-- Reply: {REPLAYED, created 0/1} | {CONFLICT} | {EXISTS} (create only: the SKU exists)
--      | {MISMATCH} (not the version named) | {STALE} | {MISSING} (delete of no SKU)
--      | {OK, created 0/1}.
if ARGV[13] ~= '' then
  local prev = redis.call('GET', KEYS[3])
  if prev == ARGV[13] then return {REPLAYED, 0} end
  if prev == ARGV[13] .. '|new' then return {REPLAYED, 1} end
  if prev then return {CONFLICT} end
end
local v = redis.call('HMGET', KEYS[1], 'epoch', 'gen')
local want = ARGV[15]
if want == '-' then
  if v[1] then return {EXISTS} end
elseif want ~= '' and (not v[1] or (want ~= '*' and want ~= v[1] .. '.' .. (v[2] or ''))) then
  return {MISMATCH}
end
local created = not v[1]
local epoch = v[1] or '0'
if epoch ~= ARGV[10]
   or (redis.call('HGET', KEYS[1], 'segments') or '0') ~= ARGV[11] then
  return {STALE}
end
local n = tonumber(ARGV[2])
if n == 0 and redis.call('EXISTS', KEYS[1]) == 0 then return {MISSING} end
local m = (#KEYS - 4) / 9
for i = 0, m - 1 do
  local b = 4 + i * 9
  if redis.call('EXISTS', KEYS[b + 4]) == 1 then redis.call('RENAME', KEYS[b + 4], KEYS[b + 8]) end
  if redis.call('EXISTS', KEYS[b + 6]) == 1 then redis.call('RENAME', KEYS[b + 6], KEYS[b + 9]) end
  redis.call('UNLINK', KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[b + 5], KEYS[b + 7])
end
if ARGV[13] ~= '' then
  redis.call('SET', KEYS[3], ARGV[13] .. (created and '|new' or ''), 'EX', 86400)
end
redis.call('DEL', KEYS[1])
local function flag(key)
  return string.match(key, '^inv:{[^}]*}') .. ':ledger'
end
for i = n, m - 1 do
  LEDGER(KEYS[5 + i * 9], 'k', 'delete', 'e', ARGV[10], 'ds', '0', 'dq', '0')
  local tag = string.match(KEYS[5 + i * 9], '^inv:{[^}]*}')
  redis.call('DEL', tag .. ':fence', tag .. ':ledger')
end
if n == 0 then
  redis.call('SREM', KEYS[2], ARGV[1])
  return {OK, 0}
end
local extra = tonumber(ARGV[8])
for i = 0, n - 1 do
  local b = 4 + i * 9
  redis.call('SET', KEYS[b + 1], i < extra and ARGV[6] or ARGV[7])
  redis.call('SET', KEYS[b + 2], '0')
  redis.call('SET', KEYS[b + 7], ARGV[12])
  if ARGV[18] == '1' then
    redis.call('SET', flag(KEYS[b + 1]), '1')
    redis.call('HSET', KEYS[4], string.match(KEYS[b + 1], '^inv:{([^}]*)}'), ARGV[14])
    LEDGER(KEYS[b + 1], 'k', 'reset', 'e', ARGV[12], 'ds', redis.call('GET', KEYS[b + 1]),
           'dq', '0')
  else
    redis.call('DEL', flag(KEYS[b + 1]))
  end
end
redis.call('HSET', KEYS[1], 'segments', ARGV[2], 'mode', ARGV[3],
           'hold_ms', ARGV[4], 'initial', ARGV[5], 'rebalance', ARGV[9],
           'epoch', ARGV[12], 'gen', ARGV[12], 'durability', ARGV[14],
           'lock', ARGV[16], 'fencing', ARGV[17], 'batch', ARGV[19] or '1')
redis.call('SADD', KEYS[2], ARGV[1])
return {OK, created and 1 or 0}
