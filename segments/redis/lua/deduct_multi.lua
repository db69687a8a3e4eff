-- DEDUCT_MULTI: one order over several segments, all or nothing.
-- KEYS: order record, then per segment: lock, stock, sold, hash (orders for the first
--       segment, parts for the others), epoch; then per segment its fence.
-- ARGV: order_id, record JSON, attempt id, epoch, sku, then per segment: token ('' =
--       mode atomic or a lock service's hold), qty taken from it, fence (a lock
--       service's hold, hold.lua: FENCED below the segment's highest; '0' none; '-1'
--       the lab's unfenced write: not checked).
-- Reply: {FENCED} | {STALE} | {EXISTS, record} | {SHORT, stock of each segment}
--      | {OK, stock left in each segment}. A record written by this attempt is OK.
-- Each part appends a sale event to its segment's ledger stream (the first with the
-- record). A record a reset left behind is no order (keys.h). Every reply releases the locks
-- the tokens still own.
local n = (#KEYS - 1) / 6
local function done(r)
  for i = 0, n - 1 do
    local t = ARGV[6 + 3 * i]
    if t ~= '' and redis.call('GET', KEYS[2 + 5 * i]) == t then
      redis.call('DEL', KEYS[2 + 5 * i])
    end
  end
  return r
end
local function stocks(code)
  local out = {code}
  for i = 0, n - 1 do
    out[i + 2] = tonumber(redis.call('GET', KEYS[3 + 5 * i]) or '0')
  end
  return out
end
local rec = redis.call('HMGET', KEYS[1], 'r', 't', 'k', 'e')
if rec[1] and rec[2] == ARGV[3] then
  return done(stocks(OK))
end
for i = 0, n - 1 do
  local t = ARGV[6 + 3 * i]
  if t ~= '' and redis.call('GET', KEYS[2 + 5 * i]) ~= t then return done({FENCED}) end
  local f = tonumber(ARGV[8 + 3 * i])
  if f > 0 and f < tonumber(redis.call('GET', KEYS[2 + 5 * n + i]) or '0') then
    return done({FENCED})
  end
end
for i = 0, n - 1 do
  if redis.call('GET', KEYS[6 + 5 * i]) ~= ARGV[4] then return done({STALE}) end
end
if rec[1] and (rec[3] ~= ARGV[5] or rec[4] == ARGV[4]) then
  return done({EXISTS, RECORD(rec[1], KEYS[1], rec[3])})
end
local st = stocks(OK)
for i = 0, n - 1 do
  if st[i + 2] < tonumber(ARGV[7 + 3 * i]) then st[1] = SHORT end
end
if st[1] == SHORT then return done(st) end
local left = {OK}
for i = 0, n - 1 do
  local q = ARGV[7 + 3 * i]
  left[i + 2] = redis.call('DECRBY', KEYS[3 + 5 * i], q)
  redis.call('INCRBY', KEYS[4 + 5 * i], q)
  redis.call('HSET', KEYS[5 + 5 * i], ARGV[1], q)
  LEDGER(KEYS[3 + 5 * i], 'k', 'sale', 'e', ARGV[4], 'o', ARGV[1], 'ds', '-' .. q, 'dq', q,
         'r', i == 0 and RECORD(ARGV[2], KEYS[1], ARGV[5]) or '')
end
redis.call('HSET', KEYS[1], 'r', ARGV[2], 't', ARGV[3], 'k', ARGV[5], 'e', ARGV[4])
return done(left)
