-- CANCEL_SEGMENT: on a Redis Cluster, the segment's part of a cancel (then
-- cancel_record.lua in the id's slot, then the SKU's gen bumped in the meta's).
-- KEYS: segment lock, stock, sold, orders hash (the order's first segment) or parts
--       hash (its other parts), epoch, the segment's cancelled set.
-- ARGV: order_id, token, epoch, '1' for the order's first segment else '0', the
--       record when it is one RESTORE wrote back from the ledger (restore.lua) else
--       '', the part's place in the record's segments (1-based).
-- Gives back the units the segment's hash records for the order, marks it cancelled
-- in the segment's set (an event on its ledger stream); fenced by the lock's token and
-- the SKU's epoch. The field gone: the set holding the id means given back already (a
-- cancel that died before its record was marked: EXISTS); else, only for a restored
-- record, the segment forgot the sale (ev_read.lua; the ledger has had it, so no
-- failover lost it) and gives back the part the record says it took. The set's id
-- goes only once the ledger has this cancel, after which no cancel restores the
-- record. Every reply but FENCED releases the lock (the token's).
-- Reply: {FENCED} | {STALE} | {MISSING} (not an order of this segment) | {EXISTS}
--      (cancelled here already: a cancel that died before its record is finished by
--      the retry) | {OK}.
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return {FENCED} end
redis.call('DEL', KEYS[1])
if redis.call('GET', KEYS[5]) ~= ARGV[3] then return {STALE} end
local q = redis.call('HGET', KEYS[4], ARGV[1])
if not q then
  if redis.call('SISMEMBER', KEYS[6], ARGV[1]) == 1 then return {EXISTS} end
  if ARGV[5] == '' then
    -- A part of another segment gone and not marked: given back by a cancel older
    -- than the marks (or lost with its master): nothing to give.
    if ARGV[4] == '1' then return {MISSING} end
    return {EXISTS}
  end
  local ok, o = pcall(cjson.decode, ARGV[5])
  local parts = ok and type(o) == 'table' and o['segments']
  local p = type(parts) == 'table' and parts[tonumber(ARGV[6])]
  if type(p) ~= 'table' or type(p['qty']) ~= 'number' then return {STALE} end
  q = string.format('%d', p['qty'])
end
redis.call('INCRBY', KEYS[2], q)
redis.call('DECRBY', KEYS[3], q)
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('SADD', KEYS[6], ARGV[1])
LEDGER(KEYS[2], 'k', 'cancel', 'e', ARGV[3], 'o', ARGV[1], 'ds', q, 'dq', '-' .. q)
return {OK}
