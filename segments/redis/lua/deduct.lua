-- DEDUCT: the fenced write (with an empty token it is mode `atomic`'s whole attempt).
-- KEYS: segment lock, stock, sold, orders hash, order record, segment epoch, fence.
-- ARGV: token ('' = no lock), qty, order_id, record JSON, attempt id, epoch, sku,
--       keep ('1': an OK keeps the lock for the next order of the holder's loop),
--       fence (a lock service's hold, acquire.lua: FENCED below the segment's highest;
--       '0' none; '-1' the lab's unfenced write, which trusts its lock for the stock).
-- A sale appends its event to the segment's ledger stream (scripts.c LEDGER).
-- Reply: {FENCED} | {STALE} | {EXISTS, record} | {MISSING} | {SHORT, stock}
--      | {OK, stock left}.
-- A record written by this very attempt (the script sent again after its reply was
-- lost) is OK: the first run placed the order. A record a reset left behind (its SKU
-- is this one, its epoch is not: keys.h) is no order; it is overwritten. Every reply releases the lock when the
-- token still owns it, but an OK with keep: then the lock stays, its lease as it was. The lock, the epoch and the stock are read in one MGET (a lock
-- order makes 7 calls, not 10: Redis CPU is the hold-0 bottleneck).
local locked = ARGV[1] ~= ''
local v = redis.call('MGET', KEYS[1], KEYS[6], KEYS[2])
local mine = locked and v[1] == ARGV[1]
local keep = ARGV[8] == '1'
local function done(r)
  if mine and not (keep and r[1] == OK) then redis.call('DEL', KEYS[1]) end
  return r
end
local rec = redis.call('HMGET', KEYS[5], 'r', 't', 'k', 'e')
if rec[1] and rec[2] == ARGV[5] then
  return done({OK, tonumber(v[3] or '0')})
end
if locked and not mine then return {FENCED} end
local fence = tonumber(ARGV[9] or '0')
if fence > 0 and fence < tonumber(redis.call('GET', KEYS[7]) or '0') then return {FENCED} end
if v[2] ~= ARGV[6] then return done({STALE}) end
if rec[1] and (rec[3] ~= ARGV[7] or rec[4] == ARGV[6]) then
  return done({EXISTS, RECORD(rec[1], KEYS[5], rec[3])})
end
if not v[3] then return done({MISSING}) end
local s = tonumber(v[3])
local q = tonumber(ARGV[2])
if s < q and fence ~= -1 then return done({SHORT, s}) end
redis.call('DECRBY', KEYS[2], ARGV[2])
redis.call('INCRBY', KEYS[3], ARGV[2])
redis.call('HSET', KEYS[4], ARGV[3], ARGV[2])
redis.call('HSET', KEYS[5], 'r', ARGV[4], 't', ARGV[5], 'k', ARGV[7], 'e', ARGV[6])
local tag = LEDGER_TAG(KEYS[2])
if tag then
  redis.call('XADD', tag .. ':events', '*', 'k', 'sale', 'e', ARGV[6], 'o', ARGV[3], 'ds',
             '-' .. ARGV[2], 'dq', ARGV[2], 'r', RECORD(ARGV[4], KEYS[5], ARGV[7]))
end
return done({OK, s - q})
