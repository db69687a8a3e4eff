-- HOLD: a reservation's every step on its segment, one script per step (so one slot).
-- KEYS: stock, sold, reserved (of the epoch), holds (of the epoch), segment epoch,
--       lock, meta, holding (the sweeper's list), then for one reservation: its
--       index, its record in the segment, the segment's orders hash, its order record.
-- Or, for confirm, release and read on a standalone Redis, KEYS: the index alone, and
-- ARGV: action, id, attempt (three: Redis builds ARGV anew for every call); the rest
-- comes from the index (one round trip instead of two); every reply of a step then
-- ends with the index's sku, segment, epoch, placed name, durability and parts ('' for
-- a hold of one segment; "seg:qty,..." for one of several, run_parts below) after
-- `settled` (segment and epoch as strings).
-- Numbers reach redis.call as strings made once: Redis formats every Lua number
-- argument with snprintf, which cost a place more than its writes did.
-- ARGV: action ('place' | 'confirm' | 'release' | 'read' | 'sweep'), epoch, sku,
--       segment, member (this segment's entry in the holding list), prefix of the
--       segment's hold records, id, qty, ttl_ms, token ('' = the lock must be free),
--       attempt, order record JSON (confirm), placed name.
-- The store's clock decides: now is Redis's TIME, a hold expires at now + ttl_ms and is
-- expired from that millisecond on. Every step first settles the expired holds of the
-- segment it meets (their units back in stock, their records 'expired'), and the
-- holding entry of the segment always carries its first expiry (or is gone).
-- Units: place moves qty from stock to reserved; confirm from reserved to sold (and
-- writes the order, id = the reservation id); release and expiry from reserved back to
-- stock and bump gen (stock rose from outside the order path, as a cancel).
-- Reply: place   {OK, stock left, expires} | {EXISTS, sku, epoch, seg, qty, expires}
--                (the id is a reservation already: where) | {CONFLICT} (an order has
--                the id) | {BUSY, stock} | {SHORT, stock} | {FENCED} | {STALE}
--        (steps answer {code, state, qty, expires, record or ''}; MISSING: empty ones)
--        confirm {OK, state, qty, expires, record} (state 'confirmed': done, or this
--                attempt's earlier run) | {EXISTS, 'confirmed', qty, expires, record}
--                (confirmed before) | {CONFLICT, state, qty, expires} (released,
--                expired; 'order': another order has the id) | {MISSING} | {STALE}
--        release {OK, state, qty, expires} (released or expired: its units are back)
--                | {CONFLICT, 'confirmed', ...} | {MISSING} | {STALE}
--        read    {OK, state, qty, expires} | {MISSING} | {STALE}
--        sweep   {OK}
-- After the epoch check, every reply ends with one more element: the expired holds
-- this run settled (an expired one a step meets counts).
-- On a Redis Cluster (ARGV[16], the end of the id's claim in ms, present: "slot"
-- mode) a step touches its segment's slot alone: KEYS 7, 8, 9 and 12 are placeholders
-- in the slot, never touched; the index, the order record, the sweeper's list and the
-- SKU's gen are the caller's steps in their own slots (lua/hold_id.lua,
-- lua/holding.lua); a sweep answers {OK, settled, the first expiry left or ''}. A place
-- after the claim's end is STALE (an attempt taken for dead places nothing), and one
-- that finds the id held in this segment already (its own earlier run, or a dead
-- attempt's of the same qty) takes that hold as its own.
local DAY = 86400000
local K, A = KEYS, ARGV
local by_sku = #KEYS == 1 and ARGV[1] == 'place'
local by_id = #KEYS == 1 and not by_sku
local SLOT = ARGV[16] ~= nil
-- The reservation id and the attempt of a by-id step (elsewhere ARGV[7], ARGV[11]).
local ID = by_id and ARGV[2] or ARGV[7]
local ATT = by_id and ARGV[3] or ARGV[11]
local ix
-- K and A of part i (qty q) of the hold the index ix names, for a by-id step; rec its
-- order record (confirm).
local function at(i, q, rec)
  local tag, id = 'inv:{' .. ix[2] .. ':' .. i .. '}:', ID
  K = {tag .. 'stock', tag .. 'sold', tag .. 'reserved:' .. ix[4], tag .. 'holds:' .. ix[4],
       tag .. 'epoch', tag .. 'lock', 'inv:sku:{' .. ix[1] .. '}', 'inv:holding', KEYS[1],
       tag .. 'hold:' .. id, tag .. 'orders', 'inv:order:{' .. id .. '}'}
  A = {ARGV[1], ix[4], ix[1], i, ix[2] .. ' ' .. i .. ' ' .. ix[4],
       tag .. 'hold:', id, q, '0', '', ATT, rec, ix[2], ix[6] or 'async', ix[7] or ''}
end
if by_id then
  -- By id (a standalone Redis): the index names the segment, and its keys are built
  -- here as keys.h names them; the order record as record.c writes it. A hold over
  -- several segments has its parts in the index's `m` ("seg:qty,seg:qty,...").
  ix = redis.call('HMGET', KEYS[1], 'k', 'p', 'i', 'e', 'q', 'd', 'm')
  if not ix[1] then return {MISSING, '', 0, 0, '', 0} end
  local parts, rec = {}, nil
  if ix[7] and ix[7] ~= '' then
    local segs = {}
    for i, q in string.gmatch(ix[7], '(%d+):(%d+)') do
      parts[#parts + 1] = {i, q}
      segs[#segs + 1] = '{"segment":' .. i .. ',"qty":' .. q .. '}'
    end
    rec = string.format('{"order_id":"%s","sku":"%s","qty":%s,"segment":%s,' ..
                        '"segments":[%s],"status":"confirmed"}',
                        ID, ix[1], ix[5], parts[1][1], table.concat(segs, ','))
  else
    parts[1] = {ix[3], ix[5]}
    rec = string.format('{"order_id":"%s","sku":"%s","qty":%s,"segment":%s,' ..
                        '"segments":[{"segment":%s,"qty":%s}],"status":"confirmed"}',
                        ID, ix[1], ix[5], ix[3], ix[3], ix[5])
  end
  ix.parts = parts
  at(parts[1][1], parts[1][2], rec)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nows = t[1] .. string.sub('00000' .. t[2], -6, -4) -- now, as a string
local settled = 0

-- The helpers of a step, on the segment K and A name (upvalues: a by-SKU walk moves
-- them from segment to segment).
local function back(hid, q, state)
  redis.call('INCRBY', K[1], q)
  redis.call('DECRBY', K[3], q)
  redis.call('ZREM', K[4], hid)
  redis.call('HSET', A[6] .. hid, 's', state)
  LEDGER(K[1], 'k', state == 'expired' and 'expire' or 'release', 'e', A[2], 'h', hid,
         'ds', q, 'dq', '0')
  settled = settled + 1
end

-- The holding entry follows the first expiry; gen moves when stock came back.
local function finish()
  local first = redis.call('ZRANGE', K[4], 0, 0, 'WITHSCORES')
  if first[1] then
    if not SLOT then redis.call('ZADD', K[8], first[2], A[5]) end
  else
    if not SLOT then redis.call('ZREM', K[8], A[5]) end
    if redis.call('GET', K[3]) == '0' then redis.call('DEL', K[3]) end
  end
  if settled > 0 and not SLOT and redis.call('EXISTS', K[7]) == 1 then
    redis.call('HINCRBY', K[7], 'gen', 1)
  end
end

-- Every reply after the epoch check ends with how many holds this run settled.
local function ret(r)
  r[#r + 1] = settled
  if K ~= KEYS then
    r[#r + 1] = A[3]
    r[#r + 1] = A[4]
    r[#r + 1] = A[2]
    r[#r + 1] = A[13]
    r[#r + 1] = A[14]
    r[#r + 1] = A[15] or ''
  end
  return r
end

local function sweep(limit)
  local due = redis.call('ZRANGEBYSCORE', K[4], '-inf', nows, 'LIMIT', '0', limit)
  for _, hid in ipairs(due) do
    local h = redis.call('HMGET', A[6] .. hid, 'q', 's')
    if h[1] and h[2] == 'held' then
      back(hid, h[1], 'expired')
    else
      redis.call('ZREM', K[4], hid)
    end
  end
end

-- One step on the segment K and A name.
local function run()
  local act, epoch, id = A[1], A[2], A[7]
  -- The epoch, the lock and the stock in one MGET (as DEDUCT reads them); a step on
  -- a hold needs the epoch alone.
  local v = act == 'place' and redis.call('MGET', K[5], K[6], K[1]) or {redis.call('GET', K[5])}
  if v[1] ~= epoch then
    if act == 'sweep' then -- reset or deleted: the holds of that epoch are void
      redis.call('UNLINK', K[3], K[4])
      if not SLOT then redis.call('ZREM', K[8], A[5]) end
      return {OK, 0}
    end
    return {STALE}
  end

  if act == 'sweep' then
    sweep('256')
    finish()
    if SLOT then -- and the first expiry left, for the cluster's list (holding.lua)
      local first = redis.call('ZRANGE', K[4], 0, 0, 'WITHSCORES')
      return {OK, settled, first[2] or ''}
    end
    return ret({OK})
  end

  local old_ix -- a place's index of an old sale (standalone)
  if act == 'place' and SLOT then
    local h = redis.call('HMGET', K[10], 's', 't', 'q', 'x')
    if h[1] == 'held' and redis.call('ZSCORE', K[4], id) then
      if h[2] == A[11] or h[3] == A[8] then return ret({OK, tonumber(v[3] or '0'), tonumber(h[4])}) end
      return ret({CONFLICT})
    end
    if now >= tonumber(A[16]) then return ret({STALE}) end
  elseif act == 'place' then
    local ix = redis.call('HMGET', K[9], 'k', 'e', 'i', 'q', 'x', 't', 'm')
    if ix[1] and ix[6] == A[11] then -- this attempt's earlier run
      A[4], A[15] = ix[3], ix[7]
      return ret({OK, tonumber(v[3] or '0'), tonumber(ix[5])})
    end
    if ix[1] and not (ix[1] == A[3] and ix[2] ~= epoch) then
      return ret({EXISTS, ix[1], ix[2], ix[3], ix[4], ix[5]})
    end
    local rec = redis.call('HMGET', K[12], 'r', 'k', 'e')
    if rec[1] and (rec[2] ~= A[3] or rec[3] == epoch) then return ret({CONFLICT}) end
    old_ix = ix[1]
  end
  if act == 'place' then
    local lock = v[2]
    if A[10] == '' then
      if lock then return ret({BUSY, tonumber(v[3] or '0')}) end
    elseif lock ~= A[10] then
      return ret({FENCED})
    end
    local before = settled
    sweep('16')
    local s = settled > before and redis.call('GET', K[1]) or v[3]
    if not s then finish() return ret({STALE}) end
    s = tonumber(s)
    local q = tonumber(A[8])
    if s < q then finish() return ret({SHORT, s}) end
    local x = now + tonumber(A[9])
    local xs, xd = tostring(x), tostring(x + DAY)
    redis.call('DECRBY', K[1], A[8])
    redis.call('INCRBY', K[3], A[8])
    redis.call('ZADD', K[4], xs, id)
    redis.call('HSET', K[10], 'q', A[8], 'x', xs, 's', 'held', 't', A[11])
    redis.call('PEXPIREAT', K[10], xd)
    if not SLOT then
      if old_ix then redis.call('HDEL', K[9], 'm') end -- an old sale's index
      redis.call('HSET', K[9], 'k', A[3], 'p', A[13], 'i', A[4], 'e', epoch, 'q',
                 A[8], 'x', xs, 't', A[11], 'd', A[14] or 'async')
      redis.call('PEXPIREAT', K[9], xd)
    end
    LEDGER(K[1], 'k', 'hold', 'e', epoch, 'h', id, 'ds', '-' .. A[8], 'dq', '0')
    if settled > 0 then
      finish()
    elseif not SLOT then -- the first expiry: the earlier of the listed and this hold's
      redis.call('ZADD', K[8], 'LT', xs, A[5])
    end
    return ret({OK, s - q, x})
  end

  -- confirm, release, read: one reservation, expired ones settled first.
  local h = redis.call('HMGET', K[10], 'q', 'x', 's', 'c')
  if not h[1] then
    sweep('16')
    if settled > 0 then finish() end
    return ret({MISSING, '', 0, 0, ''})
  end
  local q, x, state = h[1], tonumber(h[2]), h[3]
  if state == 'held' and now >= x then
    back(id, q, 'expired')
    state = 'expired'
  end
  sweep('16')
  local reply
  if act == 'read' then
    reply = {OK, state, tonumber(q), x, ''}
  elseif act == 'release' then
    if state == 'held' then
      back(id, q, 'released')
      state = 'released'
    end
    reply = {state == 'confirmed' and CONFLICT or OK, state, tonumber(q), x, ''}
  elseif state == 'confirmed' then
    local r = not SLOT and redis.call('HGET', K[12], 'r') or ''
    reply = {h[4] == A[11] and OK or EXISTS, state, tonumber(q), x, r}
  elseif state ~= 'held' then
    reply = {CONFLICT, state, tonumber(q), x, ''}
  else
    local rec = SLOT and {} or redis.call('HMGET', K[12], 'r', 'k', 'e')
    if rec[1] and (rec[2] ~= A[3] or rec[3] == epoch) then
      reply = {CONFLICT, 'order', tonumber(q), x, ''}
    else
      redis.call('DECRBY', K[3], q)
      redis.call('INCRBY', K[2], q)
      redis.call('ZREM', K[4], id)
      redis.call('HSET', K[11], id, q)
      if not SLOT then
        redis.call('HSET', K[12], 'r', A[12], 't', A[11], 'k', A[3], 'e', epoch)
      end
      redis.call('HSET', K[10], 's', 'confirmed', 'c', A[11])
      LEDGER(K[1], 'k', 'sale', 'e', epoch, 'o', id, 'ds', '0', 'dq', q, 'r', A[12])
      reply = {OK, 'confirmed', tonumber(q), x, A[12]}
    end
  end
  -- Nothing given back: the holding entry may name an expiry earlier than the first
  -- one left (a confirmed first hold), which only brings the sweeper's look forward.
  if settled > 0 then finish() end
  return ret(reply)
end

-- A by-id step on a hold of several parts: each part is a hold record on its segment
-- (all of one expiry); the step runs on them all in this one script. Expired parts
-- are settled first; the hold is 'held' while every part is. Confirm sells every part
-- (one order over those segments: the first part's segment records it in `orders`,
-- the others in `parts`, as DEDUCT_MULTI does), release returns every part.
local function run_parts()
  local act, id, epoch = ARGV[1], ID, ix[4]
  local rec, parts, first = A[12], ix.parts, nil
  local state, qty, x = 'held', 0, 0
  for k, p in ipairs(parts) do
    at(p[1], p[2], rec)
    if redis.call('GET', K[5]) ~= epoch then return {STALE} end
    local h = redis.call('HMGET', K[10], 'q', 'x', 's', 'c')
    if not h[1] then return ret({MISSING, '', 0, 0, ''}) end
    p.s, p.x = h[3], tonumber(h[2])
    if p.s == 'held' and now >= p.x then
      back(id, h[1], 'expired')
      p.s = 'expired'
    end
    sweep('16')
    if k == 1 then first = h end
    if p.s ~= 'held' and (state == 'held' or p.s == 'confirmed') then state = p.s end
    qty = qty + tonumber(h[1])
    x = k == 1 and p.x or x
  end
  local reply
  if act == 'read' then
    reply = {OK, state, qty, x, ''}
  elseif act == 'release' then
    for _, p in ipairs(parts) do
      if p.s == 'held' and state ~= 'confirmed' then
        at(p[1], p[2], rec)
        back(id, p[2], 'released')
      end
    end
    if state == 'held' then state = 'released' end
    reply = {state == 'confirmed' and CONFLICT or OK, state, qty, x, ''}
  elseif state == 'confirmed' then
    local r = redis.call('HGET', K[12], 'r') or ''
    reply = {first[4] == ATT and OK or EXISTS, state, qty, x, r}
  elseif state ~= 'held' then
    reply = {CONFLICT, state, qty, x, ''}
  else
    local o = redis.call('HMGET', K[12], 'r', 'k', 'e')
    if o[1] and (o[2] ~= ix[1] or o[3] == epoch) then
      reply = {CONFLICT, 'order', qty, x, ''}
    else
      for k, p in ipairs(parts) do
        at(p[1], p[2], rec)
        redis.call('DECRBY', K[3], p[2])
        redis.call('INCRBY', K[2], p[2])
        redis.call('ZREM', K[4], id)
        redis.call('HSET', k == 1 and K[11] or (A[6]:sub(1, -6) .. 'parts'), id, p[2])
        redis.call('HSET', K[10], 's', 'confirmed', 'c', ATT)
        LEDGER(K[1], 'k', 'sale', 'e', epoch, 'o', id, 'ds', '0', 'dq', p[2], 'r',
               k == 1 and rec or '')
      end
      redis.call('HSET', K[12], 'r', rec, 't', ATT, 'k', ix[1], 'e', epoch)
      reply = {OK, 'confirmed', qty, x, rec}
    end
  end
  if settled > 0 then
    for _, p in ipairs(parts) do
      at(p[1], p[2], rec)
      finish()
    end
  end
  at(parts[1][1], parts[1][2], rec)
  return ret(reply)
end

if not by_sku then
  if ix and ix[7] and ix[7] ~= '' then return run_parts() end
  return run()
end

-- A place by SKU (a standalone Redis): KEYS[1] is the SKU's meta; ARGV as for a place
-- but epoch, member, prefix, token and placed name, which come from the meta; ARGV[4]
-- the segment to start from. The segments are walked from there as an order walks
-- them: one whose lock is held is passed (BUSY), one short is passed (SHORT), the
-- first that holds qty takes the hold; when none does but the short ones together do,
-- parts of it are taken from them (below). Reply: a segment's reply (OK, EXISTS,
-- CONFLICT, STALE) with the segment's fields and parts after `settled`, or {BUSY |
-- SHORT, the stock of the segments walked, settled}; {MISSING} no SKU; {MISMATCH} a
-- lock service's SKU.
local m = redis.call('HMGET', KEYS[1], 'epoch', 'segments', 'salt', 'lock', 'durability')
if not m[1] then return {MISSING} end
if m[4] and m[4] ~= '' then return {MISMATCH} end
local sku, id = ARGV[3], ARGV[7]
local placed = (m[3] and m[3] ~= '' and m[3] ~= '0') and (sku .. '/' .. m[3]) or sku
local n = tonumber(m[2])
local start = tonumber(ARGV[4]) % n
local total, busy, avail, short = 0, false, 0, {}
local function seg(i, q)
  i = tostring(i) -- once: a number in a concatenation is formatted each time
  local tag = 'inv:{' .. placed .. ':' .. i .. '}:'
  K = {tag .. 'stock', tag .. 'sold', tag .. 'reserved:' .. m[1], tag .. 'holds:' .. m[1],
       tag .. 'epoch', tag .. 'lock', KEYS[1], 'inv:holding', 'inv:hold:{' .. id .. '}',
       tag .. 'hold:' .. id, tag .. 'orders', 'inv:order:{' .. id .. '}'}
  A = {'place', m[1], sku, i, placed .. ' ' .. i .. ' ' .. m[1], tag .. 'hold:', id,
       q, ARGV[9], '', ARGV[11], '', placed, m[5] or 'async'}
end
for k = 0, n - 1 do
  local i = (start + k) % n
  seg(i, ARGV[8])
  local r = run()
  if r[1] == BUSY then busy = true end
  if r[1] ~= BUSY and r[1] ~= SHORT then return r end
  total = total + r[2]
  if r[1] == SHORT and r[2] > 0 then
    avail = avail + r[2]
    short[#short + 1] = {i, r[2]}
  end
end
local want = tonumber(ARGV[8])
if avail < want then return {busy and BUSY or SHORT, total, settled} end
-- No one segment holds qty, the free ones together do: parts from them in the walk's
-- order, all in this step (each was checked above: epoch, lock free, id free, expired
-- holds settled). The index lists the parts; the reply names the first.
local x = now + tonumber(ARGV[9])
local parts, left = {}, want
for _, p in ipairs(short) do
  if left == 0 then break end
  local q = math.min(left, p[2])
  left = left - q
  parts[#parts + 1] = {p[1], q}
end
-- By segment, as an order record lists its segments (order.c reads them so).
table.sort(parts, function(u, v) return u[1] < v[1] end)
for k, p in ipairs(parts) do
  local q = p[2]
  seg(p[1], tostring(q))
  redis.call('DECRBY', K[1], q)
  redis.call('INCRBY', K[3], q)
  redis.call('ZADD', K[4], x, id)
  redis.call('HSET', K[10], 'q', q, 'x', x, 's', 'held', 't', ARGV[11])
  redis.call('PEXPIREAT', K[10], x + DAY)
  LEDGER(K[1], 'k', 'hold', 'e', m[1], 'h', id, 'ds', '-' .. q, 'dq', '0')
  redis.call('ZADD', K[8], 'LT', x, A[5])
  parts[k] = p[1] .. ':' .. q
end
local list = table.concat(parts, ',')
local i0 = tonumber(parts[1]:match('^(%d+)'))
redis.call('HSET', K[9], 'k', sku, 'p', placed, 'i', i0, 'e', m[1], 'q', want, 'x', x,
           't', ARGV[11], 'd', m[5] or 'async', 'm', list)
redis.call('PEXPIREAT', K[9], x + DAY)
seg(i0, ARGV[8])
A[15] = list
return ret({OK, avail - want, x})
