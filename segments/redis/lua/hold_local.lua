-- HOLD_LOCAL: a reservation's every step on a standalone Redis, one script each (a
-- Redis Cluster runs hold.lua's per-slot steps instead, with its own layout).
-- The hold is one string, inv:hold:{id}, which is both its record and its index:
--   "s c x q e i d t k p[ m]"  state (held | confirmed | released | expired), the
--   confirming attempt ('-' none), expiry ms, qty, epoch, segment (the first part's),
--   durability, the placing attempt, SKU, placed name, and for a hold over several
--   segments its parts "seg:qty,..." (by segment). Kept a day past its expiry (PXAT).
-- A segment counts the units it holds in reserved:E and lists the holds that still
-- hold units there in holds:E (member id, scored by expiry): a hold leaves that set
-- in the step that returns or sells its units, so a ZREM that removed it is the one
-- step that moves them (a part the sweeper settled is never settled again).
-- One string read and written whole, and few calls a step: Redis's cost per call and
-- per field read into Lua is what a reservation costs (docs/DESIGN.md "Reservations").
-- KEYS[1]: place: the SKU's meta; confirm, release, read: the hold; sweep: inv:holding.
-- ARGV: place    'place', sku, segment to start from, id, qty, ttl_ms, attempt,
--                ttl_ms + a day (the string's TTL; strings made by the caller, so no
--                Lua number is formatted for it)
--       by id    'confirm' | 'release' | 'read', id, attempt
--       sweep    'sweep', placed, segment, epoch, sku
-- The store's clock decides: now is Redis's TIME, a hold expires at now + ttl_ms and is
-- expired from that millisecond on. Every step first settles the expired holds of the
-- segments it meets (up to 16; the sweep 256): their units back in stock, their
-- holds 'expired'; the holding list's entry of a segment carries its first expiry (or
-- earlier: a confirm's ZREM only brings the sweeper's look forward), or is gone.
-- Units: place moves qty from stock to reserved; confirm from reserved to sold (and
-- writes the order, id = the reservation id); release and expiry from reserved back to
-- stock and bump the SKU's gen (stock rose from outside the order path, as a cancel).
-- Replies (holds.c decodes them; few elements, each costs Redis; the hold's fields
-- travel as its string, which the service splits):
--   place   {OK, stock left, settled, hold} | {EXISTS, 0, 0, hold} (the id is a hold
--           already) | {CONFLICT, 0, 0} (an order has the id) | {BUSY | SHORT, stock
--           walked, settled} | {STALE} | {MISSING} (no SKU) | {MISMATCH} (a lock
--           service's SKU)
--   by id   {code, settled, state, hold (as it stands after), record or ''} |
--           {MISSING, 0} | {STALE}: confirm OK (sold now, or this attempt's earlier
--           run) | EXISTS (confirmed before) | CONFLICT (released, expired; state
--           'order': an order has the id); release OK (released or expired) |
--           CONFLICT (confirmed); read OK
--   sweep   {OK, settled}
local act = ARGV[1]
local t = redis.call('TIME')
local nows = t[1] .. string.sub('00000' .. t[2], -6, -4) -- now in ms, as a string
local now = tonumber(nows)
local settled, gen = 0, false
local HOLDING = 'inv:holding'

-- Segment i (a string) of `placed` of `epoch`: its keys; led (its ledger flag) is set
-- by the caller's MGET.
local function segment(placed, i, epoch)
  local tag = 'inv:{' .. placed .. ':' .. i .. '}:'
  return {tag = tag, i = i, epoch = epoch, placed = placed, stock = tag .. 'stock',
          res = tag .. 'reserved:' .. epoch, holds = tag .. 'holds:' .. epoch}
end

-- S's entry in the holding list.
local function member(S)
  return S.placed .. ' ' .. S.i .. ' ' .. S.epoch
end

-- The hold's string as a table (nil: not one).
local function parse(v)
  local s, c, rest, x, q, e, i, at, k, p, m = string.match(v,
    '^(%a+) (%S+) ((%d+) (%d+) (%d+) (%d+) %a+ (%S+) (%S+) (%S+) ?(.*))$')
  if not s then return nil end
  return {s = s, c = c, rest = rest, x = x, q = q, e = e, i = i, t = at, k = k, p = p,
          m = m}
end

-- The qty part of hold h holds on segment S, or nil (not one of S's).
local function part_qty(h, S)
  if h.p ~= S.placed or h.e ~= S.epoch then return nil end
  if h.m == '' then return h.i == S.i and h.q or nil end
  for i, q in string.gmatch(h.m, '(%d+):(%d+)') do
    if i == S.i then return q end
  end
  return nil
end

-- Hold `id`'s q units on S back in stock, unless a step did it already (not in holds).
local function back(S, id, q, kind)
  if redis.call('ZREM', S.holds, id) == 0 then return end
  redis.call('INCRBY', S.stock, q)
  redis.call('DECRBY', S.res, q)
  if S.led then
    redis.call('XADD', S.tag .. 'events', '*', 'k', kind, 'e', S.epoch, 'h', id, 'ds', q,
               'dq', '0')
  end
  settled = settled + 1
  gen = true
end

-- S's holds due by now (up to limit) settled: units back, the hold 'expired'.
local function sweep(S, limit)
  local due = redis.call('ZRANGEBYSCORE', S.holds, '-inf', nows, 'LIMIT', '0', limit)
  for _, hid in ipairs(due) do
    local key = 'inv:hold:{' .. hid .. '}'
    local v = redis.pcall('GET', key)
    local h = type(v) == 'string' and parse(v)
    local q = h and part_qty(h, S)
    if type(v) == 'table' then -- placed before this layout: its index a hash, its record
      local rk = S.tag .. 'hold:' .. hid -- in the segment (returned, never migrated)
      local r = redis.call('HMGET', rk, 'q', 's')
      if r[1] and r[2] == 'held' then
        back(S, hid, r[1], 'expire')
        redis.call('HSET', rk, 's', 'expired')
      else
        redis.call('ZREM', S.holds, hid)
      end
    elseif q then
      back(S, hid, q, 'expire')
      if h.s == 'held' then
        redis.call('SET', key, 'expired ' .. h.c .. ' ' .. h.rest, 'KEEPTTL')
      end
    else -- no hold of this segment's by that id (its string gone): out of the set
      redis.call('ZREM', S.holds, hid)
    end
  end
end

-- The holding entry of S follows its first expiry; an empty count goes.
local function finish(S)
  local first = redis.call('ZRANGE', S.holds, '0', '0', 'WITHSCORES')
  if first[1] then
    redis.call('ZADD', HOLDING, first[2], member(S))
  else
    redis.call('ZREM', HOLDING, member(S))
    if redis.call('GET', S.res) == '0' then redis.call('DEL', S.res) end
  end
end

-- S's due holds settled (up to 16); true when any was. (A look for due holds alone:
-- the first hold and its score, formatted by Redis and parsed here, cost more.)
local function look(S)
  local before = settled
  sweep(S, '16')
  if settled == before then return false end
  finish(S)
  return true
end

-- Stock came back: the SKU's gen moves (sold-out verdicts go).
local function bump(sku)
  if not gen then return end
  local meta = 'inv:sku:{' .. sku .. '}'
  if redis.call('EXISTS', meta) == 1 then redis.call('HINCRBY', meta, 'gen', 1) end
end

if act == 'sweep' then
  local placed, sku = ARGV[2], ARGV[5]
  local S = segment(placed, ARGV[3], ARGV[4])
  local g = redis.call('MGET', S.tag .. 'epoch', S.tag .. 'ledger')
  if g[1] ~= S.epoch then -- reset or deleted: the holds of that epoch are void
    redis.call('UNLINK', S.res, S.holds)
    redis.call('ZREM', HOLDING, member(S))
    return {OK, 0}
  end
  S.led = g[2]
  sweep(S, '256')
  finish(S)
  bump(sku)
  return {OK, settled}
end

if act == 'place' then
  local sku, id, qs, att = ARGV[2], ARGV[4], ARGV[5], ARGV[7]
  local m = redis.call('HMGET', KEYS[1], 'epoch', 'segments', 'salt', 'lock', 'durability')
  if not m[1] then return {MISSING} end
  if m[4] and m[4] ~= '' then return {MISMATCH} end
  local epoch, dur = m[1], m[5] or 'async'
  local placed = (m[3] and m[3] ~= '' and m[3] ~= '0') and (sku .. '/' .. m[3]) or sku
  local key = 'inv:hold:{' .. id .. '}'
  local v = redis.call('GET', key)
  local h = v and parse(v)
  if h and h.t == att then -- this attempt's earlier run (its reply was lost)
    local st = redis.call('GET', 'inv:{' .. placed .. ':' .. h.i .. '}:stock')
    return {OK, tonumber(st or '0'), 0, v}
  end
  if h and not (h.k == sku and h.e ~= epoch) then -- the id is a hold (an old sale's of
    return {EXISTS, 0, 0, v}                      -- this SKU: the id is free again)
  end
  local o = redis.call('HMGET', 'inv:order:{' .. id .. '}', 'r', 'k', 'e')
  if o[1] and (o[2] ~= sku or o[3] == epoch) then return {CONFLICT, 0, 0} end

  -- The walk, as an order's: a locked segment is passed (BUSY), a short one too.
  local q = tonumber(qs)
  local n = tonumber(m[2])
  local start = tonumber(ARGV[3]) % n
  local total, busy, avail, short = 0, false, 0, {}
  local x = now + tonumber(ARGV[6])
  local xs = tostring(x)
  for k = 0, n - 1 do
    local S = segment(placed, tostring((start + k) % n), epoch)
    local g = redis.call('MGET', S.tag .. 'epoch', S.tag .. 'lock', S.stock,
                         S.tag .. 'ledger')
    if g[1] ~= epoch then bump(sku) return {STALE} end
    if not g[3] then bump(sku) return {STALE, 0, settled} end
    S.led = g[4]
    if g[2] then
      busy = true
      total = total + tonumber(g[3])
    else
      local s = g[3]
      if look(S) then s = redis.call('GET', S.stock) end
      s = tonumber(s)
      if s >= q then
        redis.call('DECRBY', S.stock, qs)
        redis.call('INCRBY', S.res, qs)
        redis.call('ZADD', S.holds, xs, id)
        v = 'held - ' .. xs .. ' ' .. qs .. ' ' .. epoch .. ' ' .. S.i .. ' ' .. dur .. ' ' ..
            att .. ' ' .. sku .. ' ' .. placed
        redis.call('SET', key, v, 'PX', ARGV[8])
        if S.led then
          redis.call('XADD', S.tag .. 'events', '*', 'k', 'hold', 'e', epoch, 'h', id, 'ds',
                     '-' .. qs, 'dq', '0')
        end
        redis.call('ZADD', HOLDING, 'LT', xs, member(S)) -- the first expiry, or earlier
        bump(sku)
        return {OK, s - q, settled, v}
      end
      total = total + s
      if s > 0 then
        avail = avail + s
        short[#short + 1] = {S, s}
      end
    end
  end
  bump(sku)
  if avail < q then return {busy and BUSY or SHORT, total, settled} end
  -- No one segment holds qty, the free ones together do: parts from them in the walk's
  -- order, all in this step (each checked above: epoch, lock free, expired holds
  -- settled), listed by segment (as an order record lists its segments).
  local parts, left = {}, q
  for _, p in ipairs(short) do
    if left == 0 then break end
    local take = math.min(left, p[2])
    left = left - take
    parts[#parts + 1] = {p[1], tostring(take)}
  end
  table.sort(parts, function(u, w) return tonumber(u[1].i) < tonumber(w[1].i) end)
  local list = {}
  for k, p in ipairs(parts) do
    local S, pq = p[1], p[2]
    redis.call('DECRBY', S.stock, pq)
    redis.call('INCRBY', S.res, pq)
    redis.call('ZADD', S.holds, xs, id)
    if S.led then
      redis.call('XADD', S.tag .. 'events', '*', 'k', 'hold', 'e', epoch, 'h', id, 'ds',
                 '-' .. pq, 'dq', '0')
    end
    redis.call('ZADD', HOLDING, 'LT', xs, member(S))
    list[k] = S.i .. ':' .. pq
  end
  v = 'held - ' .. xs .. ' ' .. qs .. ' ' .. epoch .. ' ' .. parts[1][1].i .. ' ' .. dur ..
      ' ' .. att .. ' ' .. sku .. ' ' .. placed .. ' ' .. table.concat(list, ',')
  redis.call('SET', key, v, 'PX', ARGV[8])
  return {OK, avail - q, settled, v}
end

-- confirm, release, read: the hold's string names its segments.
local id, att = ARGV[2], ARGV[3]
local v = redis.call('GET', KEYS[1])
local h = v and parse(v)
if not h then return {MISSING, 0} end
local epoch = h.e
local segs = {}
if h.m == '' then
  segs[1] = segment(h.p, h.i, epoch)
  segs[1].q = h.q
else
  for i, q in string.gmatch(h.m, '(%d+):(%d+)') do
    local S = segment(h.p, i, epoch)
    S.q = q
    segs[#segs + 1] = S
  end
end
for _, S in ipairs(segs) do
  local g = redis.call('MGET', S.tag .. 'epoch', S.tag .. 'ledger')
  if g[1] ~= epoch then return {STALE} end
  S.led = g[2]
end
local state, c = h.s, h.c
local write = false
if state == 'held' and now >= tonumber(h.x) then
  for _, S in ipairs(segs) do back(S, id, S.q, 'expire') end
  state, write = 'expired', true
end
for _, S in ipairs(segs) do look(S) end
local code, rec, shown = OK, '', nil
if act == 'read' then
  code = OK
elseif act == 'release' then
  if state == 'held' then
    for _, S in ipairs(segs) do back(S, id, S.q, 'release') end
    state, write = 'released', true
  end
  code = state == 'confirmed' and CONFLICT or OK
elseif state == 'confirmed' then
  local okey = 'inv:order:{' .. id .. '}'
  local o = redis.call('HMGET', okey, 'r', 'k')
  rec = RECORD(o[1], okey, o[2]) or ''
  code = c == att and OK or EXISTS
elseif state ~= 'held' then
  code = CONFLICT
else
  local okey = 'inv:order:{' .. id .. '}'
  local o = redis.call('HMGET', okey, 'r', 'k', 'e')
  if o[1] and (o[2] ~= h.k or o[3] == epoch) then
    code, shown = CONFLICT, 'order'
  else
    -- The order record as record.c writes it.
    local list = {}
    for k, S in ipairs(segs) do list[k] = '{"segment":' .. S.i .. ',"qty":' .. S.q .. '}' end
    rec = '{"order_id":"' .. id .. '","sku":"' .. h.k .. '","qty":' .. h.q .. ',"segment":' ..
          h.i .. ',"segments":[' .. table.concat(list, ',') .. '],"status":"confirmed"}'
    for k, S in ipairs(segs) do
      redis.call('DECRBY', S.res, S.q)
      redis.call('INCRBY', S.tag .. 'sold', S.q)
      redis.call('ZREM', S.holds, id)
      redis.call('HSET', S.tag .. (k == 1 and 'orders' or 'parts'), id, S.q)
      if S.led then
        redis.call('XADD', S.tag .. 'events', '*', 'k', 'sale', 'e', epoch, 'o', id, 'ds',
                   '0', 'dq', S.q, 'r', k == 1 and rec or '')
      end
    end
    -- Stored packed (prelude.lua RECORD) when it unpacks to rec: a listpack hash.
    local packed = {'#' .. h.q}
    for k, S in ipairs(segs) do packed[k + 1] = S.i .. ' ' .. S.q end
    redis.call('HSET', okey, 'r', segs[1].i == h.i and table.concat(packed, ' ') or rec, 't',
               att, 'k', h.k, 'e', epoch)
    state, c, write = 'confirmed', att, true
  end
end
if write then
  v = state .. ' ' .. c .. ' ' .. h.rest
  redis.call('SET', KEYS[1], v, 'KEEPTTL')
end
if settled > 0 then
  for _, S in ipairs(segs) do finish(S) end
end
bump(h.k)
return {code, settled, shown or state, v, rec}
