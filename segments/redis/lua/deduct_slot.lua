-- DEDUCT on a Redis Cluster: deduct.lua with the segment's keys only. The order record
-- lives in the id's slot: the id was claimed before (claim.lua) and CONFIRM writes the
-- record after.
-- KEYS: segment lock, stock, sold, orders hash, segment epoch, segment fence.
-- ARGV: token ('' = no lock), qty, order_id, epoch, the end of the id's claim ('0' =
--       none: a fresh id), fence (deduct.lua's).
-- The id in the segment's orders hash is this order's own earlier run (a resend after
-- a lost reply; the claim keeps other attempts of the id out): OK. Past the claim's
-- end nothing is written (STALE: the caller claims again), so an attempt taken for
-- dead can never sell after another took its id over.
-- A sale appends its event (no record: CONFIRM writes it) to the ledger stream.
-- Reply: {FENCED} | {STALE} | {MISSING} | {SHORT, stock} | {OK, stock left}. Every
-- reply releases the lock when the token still owns it.
local locked = ARGV[1] ~= ''
local v = redis.call('MGET', KEYS[1], KEYS[5], KEYS[2])
local mine = locked and v[1] == ARGV[1]
local function done(r)
  if mine then redis.call('DEL', KEYS[1]) end
  return r
end
if redis.call('HEXISTS', KEYS[4], ARGV[3]) == 1 then
  return done({OK, tonumber(v[3] or '0')})
end
if locked and not mine then return {FENCED} end
local fence = tonumber(ARGV[6] or '0')
if fence > 0 and fence < tonumber(redis.call('GET', KEYS[6]) or '0') then return {FENCED} end
if v[2] ~= ARGV[4] then return done({STALE}) end
if ARGV[5] ~= '0' then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) >= tonumber(ARGV[5]) then
    return done({STALE})
  end
end
if not v[3] then return done({MISSING}) end
local s = tonumber(v[3])
local q = tonumber(ARGV[2])
if s < q and fence ~= -1 then return done({SHORT, s}) end
redis.call('DECRBY', KEYS[2], ARGV[2])
redis.call('INCRBY', KEYS[3], ARGV[2])
redis.call('HSET', KEYS[4], ARGV[3], ARGV[2])
LEDGER(KEYS[2], 'k', 'sale', 'e', ARGV[4], 'o', ARGV[3], 'ds', '-' .. ARGV[2], 'dq', ARGV[2])
return done({OK, s - q})
