-- CLAIM: an order id, on a Redis Cluster, before the scripts of its segment (which
-- cannot touch the order record: it lives in the id's slot, not the segment's).
-- KEYS: order record.
-- ARGV: the order's attempt id, sku, epoch, lease in ms, the attempt of a dead claim
--       being taken over ('' = none), the plan of a multi-segment order (field p:
--       "placed epoch seg:qty ...", its first part in the orders hash, the others in
--       the parts hashes; '' = none, '-' = keep the one the claim has), the epoch of
--       a record the caller found dead ('' = none).
-- The claim (fields c = attempt, u = until, on this node's clock in ms) makes one
-- attempt at a time the id's: the segment scripts it sends refuse to write after
-- `until` (deduct_slot.lua), so once a claim has run out, nothing of its attempt can
-- land any more. A record a reset left behind (keys.h) counts as none, but only once
-- the caller has read the SKU's settings again and named its epoch as dead: a
-- record of another epoch than the caller's is as likely one of a newer sale than
-- the caller's settings (a reset since they were read: orders keep them up to
-- meta_cache_ms), and taking that one for dead deleted a live record and sold again.
-- Reply: {EXISTS, record} (placed already) | {STALE, epoch} (a record of another
--      epoch, not named dead: read the settings again, then claim naming it dead if
--      the SKU's epoch is still not its) | {BUSY} (another attempt holds the claim:
--      the same id in flight) | {MISSING, attempt, plan} (the claim of an attempt that
--      ran out without a record: it may have deducted and died; the caller claims again
--      naming that attempt and keeping its plan, then looks in the segments' orders, or
--      with a plan undoes its parts) | {OK, until}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('HMGET', KEYS[1], 'r', 'k', 'e', 'c', 'u', 'p')
if v[1] and (v[2] ~= ARGV[2] or v[3] == ARGV[3]) then return {EXISTS, RECORD(v[1], KEYS[1], v[2])} end
if v[1] and v[3] ~= ARGV[7] then return {STALE, tonumber(v[3] or '0')} end
if v[4] and v[4] ~= ARGV[1] then
  if tonumber(v[5] or '0') > now then return {BUSY} end
  if v[4] ~= ARGV[5] then return {MISSING, v[4], v[6] or ''} end
end
local untl = now + tonumber(ARGV[4])
if v[1] then redis.call('HDEL', KEYS[1], 'r', 't') end
redis.call('HSET', KEYS[1], 'c', ARGV[1], 'u', string.format('%d', untl), 'k', ARGV[2],
           'e', ARGV[3])
if ARGV[6] == '' then
  redis.call('HDEL', KEYS[1], 'p')
elseif ARGV[6] ~= '-' then
  redis.call('HSET', KEYS[1], 'p', ARGV[6])
end
return {OK, untl}
