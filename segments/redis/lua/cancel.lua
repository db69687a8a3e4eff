-- CANCEL: give an order's stock back to the segments it came from.
-- KEYS: order record, meta, then per segment of the order: lock, stock, sold, hash,
--       epoch, and last the cancelled set of the order's first segment.
-- ARGV: order_id, cancelled record JSON, the confirmed record as the caller read it,
--       epoch, sku, then per segment: token.
-- Reply: {MISSING} (no such order, or a record a reset left behind: keys.h) | {EXISTS, record} (already cancelled: also what a
--      resend of a cancel that worked finds) | {STALE} (the order is not the one the
--      caller read, or the SKU was reset) | {FENCED} | {OK}.
-- The units given back are the ones the segments' hashes record for the order, not the
-- caller's, each segment's appended to its ledger stream; a segment that forgot the
-- order (ev_read.lua: the ledger has had it for record_retention_s) gives back the
-- part the record says it took (the record is the confirmed one, of this epoch: only
-- the forgetting drops a field then). The cancelled record (c: the epoch it was
-- cancelled in) keeps no TTL until the ledger has the cancel (retain.lua). Every reply releases the locks the tokens still
-- own; OK bumps gen.
local n = (#KEYS - 3) / 5
local function done(r)
  for i = 0, n - 1 do
    if redis.call('GET', KEYS[3 + 5 * i]) == ARGV[6 + i] then
      redis.call('DEL', KEYS[3 + 5 * i])
    end
  end
  return r
end
local r = redis.call('HMGET', KEYS[1], 'r', 'k', 'e')
local rec = RECORD(r[1], KEYS[1], r[2])
if not rec or (r[2] == ARGV[5] and r[3] ~= redis.call('HGET', KEYS[2], 'epoch')) then
  return done({MISSING})
end
if rec ~= ARGV[3] then
  if redis.call('SISMEMBER', KEYS[#KEYS], ARGV[1]) == 1 then
    return done({EXISTS, rec})
  end
  return done({STALE})
end
for i = 0, n - 1 do
  if redis.call('GET', KEYS[3 + 5 * i]) ~= ARGV[6 + i] then return done({FENCED}) end
end
local ok, o = pcall(cjson.decode, rec)
if not ok or type(o) ~= 'table' then o = {} end
if o['status'] == 'cancelled' then return done({EXISTS, rec}) end
local q, parts = {}, o['segments']
for i = 0, n - 1 do
  if redis.call('GET', KEYS[7 + 5 * i]) ~= ARGV[4] then return done({STALE}) end
  q[i] = redis.call('HGET', KEYS[6 + 5 * i], ARGV[1])
  if not q[i] then
    local p = type(parts) == 'table' and parts[i + 1]
    if type(p) ~= 'table' or type(p['qty']) ~= 'number' then return done({STALE}) end
    q[i] = string.format('%d', p['qty'])
  end
end
for i = 0, n - 1 do
  redis.call('INCRBY', KEYS[4 + 5 * i], q[i])
  redis.call('DECRBY', KEYS[5 + 5 * i], q[i])
  redis.call('HDEL', KEYS[6 + 5 * i], ARGV[1])
  LEDGER(KEYS[4 + 5 * i], 'k', 'cancel', 'e', ARGV[4], 'o', ARGV[1], 'ds', q[i], 'dq',
         '-' .. q[i], 'r', i == 0 and ARGV[2] or '')
end
redis.call('SADD', KEYS[#KEYS], ARGV[1])
redis.call('HSET', KEYS[1], 'r', ARGV[2], 'c', ARGV[4])
redis.call('PERSIST', KEYS[1])
redis.call('HINCRBY', KEYS[2], 'gen', 1)
return done({OK})
