-- ADJUST: restock or rebalance a SKU, every segment locked.
-- KEYS: meta, request key, then per segment: lock, stock; then, under a lock
--       service's holds (store.h `adjust` with fences), per segment: fence.
-- ARGV: 'restock' | 'rebalance' | 'spread', units to add (restock), epoch, segment count,
--       the largest initial stock that may still take the units (decimal), the
--       request's signature ('' = no request id), then per segment: token; then, with
--       the fence keys, per segment: the fence its holder registered (acquire.lua;
--       below the segment's highest: FENCED, nothing moved; '-1', the lab's
--       unfenced write: not checked). A token '' then names no lock of the store's.
-- restock spreads the units evenly (lower segments take the remainder) and raises the
-- SKU's initial stock by as much; rebalance spreads the remaining stock evenly; spread
-- does what rebalance does, but only when that puts stock in more segments (the
-- automatic rebalance), and otherwise changes nothing.
-- Each segment whose stock moved appends an event to its ledger stream.
-- The limit is compared as decimal strings and the units added with INCRBY, so nothing
-- rounds; with initial <= 2^53 - 1 every sum below is exact in Lua.
-- Reply: {REPLAYED} | {CONFLICT} | {STALE} | {FENCED} | {LIMIT}
--      | {OK, gen} (gen 0: nothing changed). Releases the locks the tokens own.
local n = tonumber(ARGV[4])
local fenced = #KEYS == 2 + 3 * n
local function done(r)
  for i = 0, n - 1 do
    if redis.call('GET', KEYS[3 + 2 * i]) == ARGV[7 + i] then
      redis.call('DEL', KEYS[3 + 2 * i])
    end
  end
  return r
end
if ARGV[6] ~= '' then
  local prev = redis.call('GET', KEYS[2])
  if prev == ARGV[6] then return done({REPLAYED}) end
  if prev then return done({CONFLICT}) end
end
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[3]
   or redis.call('HGET', KEYS[1], 'segments') ~= ARGV[4] then
  return done({STALE})
end
for i = 0, n - 1 do
  local t = ARGV[7 + i]
  if not (fenced and t == '') and redis.call('GET', KEYS[3 + 2 * i]) ~= t then
    return done({FENCED})
  end
  local f = fenced and tonumber(ARGV[7 + n + i]) or 0
  if f > 0 and f < tonumber(redis.call('GET', KEYS[3 + 2 * n + i]) or '0') then
    return done({FENCED})
  end
end
local function above(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
if ARGV[1] == 'restock'
   and above(redis.call('HGET', KEYS[1], 'initial') or '0', ARGV[5]) then
  return done({LIMIT})
end
local function split(total)
  local each = math.floor(total / n)
  while each * n > total do each = each - 1 end
  while (each + 1) * n <= total do each = each + 1 end
  return each, total - each * n
end
local total = 0
local stock = {}
for i = 0, n - 1 do
  stock[i] = tonumber(redis.call('GET', KEYS[4 + 2 * i]) or '0')
  total = total + stock[i]
end
if ARGV[1] == 'spread' then
  local nonempty = 0
  for i = 0, n - 1 do if stock[i] > 0 then nonempty = nonempty + 1 end end
  if math.min(total, n) <= nonempty then return done({OK, 0}) end
end
if ARGV[1] == 'restock' then
  local each, extra = split(tonumber(ARGV[2]))
  for i = 0, n - 1 do
    local share = each + ((i < extra) and 1 or 0)
    redis.call('INCRBY', KEYS[4 + 2 * i], string.format('%d', share))
    if share > 0 then
      LEDGER(KEYS[4 + 2 * i], 'k', 'restock', 'e', ARGV[3], 'ds', string.format('%d', share),
             'dq', '0')
    end
  end
  redis.call('HINCRBY', KEYS[1], 'initial', ARGV[2])
else
  local each, extra = split(total)
  for i = 0, n - 1 do
    local share = each + ((i < extra) and 1 or 0)
    redis.call('SET', KEYS[4 + 2 * i], string.format('%d', share))
    if share ~= stock[i] then
      LEDGER(KEYS[4 + 2 * i], 'k', ARGV[1], 'e', ARGV[3], 'ds',
             string.format('%d', share - stock[i]), 'dq', '0')
    end
  end
end
if ARGV[6] ~= '' then redis.call('SET', KEYS[2], ARGV[6], 'EX', 86400) end
return done({OK, redis.call('HINCRBY', KEYS[1], 'gen', 1)})
