-- DEDUCT_BATCH: one fenced write for every order one hold of a segment's lock sells
-- (group commit, the SKU's "batch"): deduct.lua for n orders, each with its own answer.
-- KEYS: segment lock, stock, sold, orders hash, segment epoch, fence, then the record
--       of each order (n keys; a cluster: each in the segment's slot).
-- ARGV: token ('' = no lock, mode atomic), epoch, sku, fence (deduct.lua's), n, then
--       per order: order_id, qty, record JSON, attempt id.
-- Orders are taken in the order given, each as deduct.lua takes one: a record written
-- by its own attempt (a resend after a lost reply) is OK; a lock no longer the
-- token's (or a fence below the segment's highest) is FENCED for every other order,
-- nothing written; an id recorded already (by an earlier sale, or by an order before
-- it in this very batch: the same id twice is one sale) is EXISTS with that record;
-- an order more than the stock left is SHORT with what is left, and the orders after
-- it still sell if they fit. The stock and sold counts move once for the whole batch,
-- and the orders hash takes every sale in one HSET: per order the script makes one
-- call, the record's HSET (Redis CPU per order is what group commit is for): one EXISTS
-- asks for all the records at once, and an order reads its record (HMGET) only when
-- some record was there or its id came before in the batch.
-- A sale appends its event to the segment's ledger stream (as scripts.c LEDGER does,
-- its flag looked up once for the batch).
-- Reply: one element per order: {FENCED} | {STALE} | {EXISTS, record} | {MISSING}
--      | {SHORT, stock} | {OK, stock left}. The lock is released when the token owns it.
local locked = ARGV[1] ~= ''
local v = redis.call('MGET', KEYS[1], KEYS[5], KEYS[2])
local mine = locked and v[1] == ARGV[1]
local fence = tonumber(ARGV[4] or '0')
local fenced = locked and not mine
if not fenced and fence > 0 and fence < tonumber(redis.call('GET', KEYS[6]) or '0') then
  fenced = true
end
local stale = v[2] ~= ARGV[2]
local s = v[3] and tonumber(v[3])
local n = tonumber(ARGV[5])
local tag = LEDGER_TAG(KEYS[2])
-- Whether any order's record is there, asked once for the batch: almost always none,
-- and then an order looks its record up only when its id came before in this batch.
local any = n > 0 and redis.call('EXISTS', unpack(KEYS, 7, 6 + n)) > 0
local out, sold, ids, seen = {}, 0, {}, {}
for k = 1, n do
  local a = 5 + (k - 1) * 4
  local id, qs, record, attempt = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local q = tonumber(qs)
  local key = KEYS[6 + k]
  local rec = {}
  if any or seen[key] then rec = redis.call('HMGET', key, 'r', 't', 'k', 'e') end
  seen[key] = true
  if rec[1] and rec[2] == attempt then
    out[k] = {OK, s or 0}
  elseif fenced then
    out[k] = {FENCED}
  elseif stale then
    out[k] = {STALE}
  elseif rec[1] and (rec[3] ~= ARGV[3] or rec[4] == ARGV[2]) then
    out[k] = {EXISTS, RECORD(rec[1], key, rec[3])}
  elseif not s then
    out[k] = {MISSING}
  elseif s < q and fence ~= -1 then
    out[k] = {SHORT, s}
  else
    s = s - q
    sold = sold + q
    ids[#ids + 1] = id
    ids[#ids + 1] = qs
    redis.call('HSET', key, 'r', record, 't', attempt, 'k', ARGV[3], 'e', ARGV[2])
    if tag then
      redis.call('XADD', tag .. ':events', '*', 'k', 'sale', 'e', ARGV[2], 'o', id,
                 'ds', '-' .. qs, 'dq', qs, 'r', RECORD(record, key, ARGV[3]))
    end
    out[k] = {OK, s}
  end
end
if sold > 0 then
  redis.call('HSET', KEYS[4], unpack(ids))
  redis.call('DECRBY', KEYS[2], sold)
  redis.call('INCRBY', KEYS[3], sold)
end
if mine then redis.call('DEL', KEYS[1]) end
return out
