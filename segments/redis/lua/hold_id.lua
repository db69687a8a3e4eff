-- HOLD_ID: a reservation's steps in its id's slot on a Redis Cluster, around the
-- segment's steps (hold.lua in slot mode), as CLAIM and CONFIRM go around an order's
-- DEDUCT: the index and the order record share the id's hash tag, so one script.
-- KEYS: the index (inv:hold:{id}), the order record (inv:order:{id}).
-- ARGV[1] action, ARGV[2] attempt, then per action:
--   begin   sku, epoch, lease ms: the place claims the id in the index (fields c =
--           attempt, u = until, on this node's clock), as CLAIM claims an order id.
--           {REPLAYED, seg, qty, expires, parts} this attempt placed it already |
--           {EXISTS, sku, epoch, seg, qty, expires, parts} the id is a hold already |
--           {CONFLICT} an order has it | {BUSY} another attempt holds the claim (the
--           same id in flight; an order's claim on the record too, or a dead one's
--           plan, which the intent sweeper undoes) | {OK, until}.
--           A claim run out is taken over: its attempt's segment step refuses past
--           `until`, and a hold it placed before is found by the next place in that
--           segment (hold.lua: taken as its own) or expires by its ttl.
--   plan    plan, sku, epoch, until: a hold over several segments (a place under its
--           claim on the index, or a confirm under its claim on the record) records
--           its plan ("placed epoch seg:qty ...", as a multi-segment order's) in the
--           order record's claim, the attempt's until `until` (a confirm keeps its
--           own), before any part is sent: a process that dies leaves it for the
--           intent sweeper (or an order with the id) to undo, with the order path's
--           claim, UNDO_PART and CONFIRM. {OK} | {BUSY} (the record claimed by
--           another attempt) | {CONFLICT} (a record) | {STALE} (not this attempt's).
--   commit  sku, epoch, placed, seg, qty, expires, durability, parts ('' for one
--           segment's): the hold placed, the index written under the claim, and a
--           plan of this attempt's dropped with it. {OK} | {STALE} (taken over).
--   abort   the place ended without a hold (its parts undone): the claims given up.
--           {OK}.
--   find    the index: {OK, sku, placed, seg, epoch, qty, expires, durability, parts,
--           confirmed by ('' none), record ('' none)} | {MISSING}.
--   confirm lease ms: as find, and the order record claimed for this attempt (the
--           order path's fields c and u: an order with the id waits, BUSY) --
--           {OK, ...find's} go on to the segment | {REPLAYED | EXISTS, ...} confirmed
--           already (by this attempt | another; the record in the last field) |
--           {CONFLICT, ...} an order has the id | {BUSY} | {MISSING}. OK's reply
--           ends with the claim's end (a part of a multi-segment hold is fenced by it).
--   record  record, sku, epoch: the confirm's record written under its claim, the
--           index marked confirmed (o = attempt). {OK} | {STALE} (taken over).
-- A confirm that sells nothing gives the record's claim up with CONFIRM (confirm.lua).
local DAY = 86400000
local K, A = KEYS, ARGV
local act, att = A[1], A[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

if act == 'begin' then
  local ix = redis.call('HMGET', K[1], 'k', 'e', 'i', 'q', 'x', 't', 'c', 'u', 'm')
  if ix[5] and ix[6] == att then return {REPLAYED, ix[3], ix[4], ix[5], ix[9] or ''} end
  if ix[5] and not (ix[1] == A[3] and ix[2] ~= A[4]) then
    return {EXISTS, ix[1], ix[2], ix[3], ix[4], ix[5], ix[9] or ''}
  end
  local o = redis.call('HMGET', K[2], 'r', 'k', 'e', 'c', 'u', 'p')
  if o[1] and (o[2] ~= A[3] or o[3] == A[4]) then return {CONFLICT} end
  if o[4] and o[4] ~= att and (tonumber(o[5] or '0') > now or o[6]) then return {BUSY} end
  if ix[7] and ix[7] ~= att and tonumber(ix[8] or '0') > now then return {BUSY} end
  local untl = now + tonumber(A[5])
  redis.call('HSET', K[1], 'c', att, 'u', string.format('%d', untl))
  if not ix[5] then redis.call('PEXPIREAT', K[1], untl + DAY) end
  return {OK, untl}
end

-- The order record's claim of this attempt (a plan's) given up.
local function unplan()
  local o = redis.call('HMGET', K[2], 'c', 'r')
  if o[1] ~= att then return end
  redis.call('HDEL', K[2], 'c', 'u', 'p')
  if not o[2] then redis.call('DEL', K[2]) end
end

if act == 'plan' then
  local o = redis.call('HMGET', K[2], 'r', 'c', 'u')
  if o[2] ~= att then
    if redis.call('HGET', K[1], 'c') ~= att then return {STALE} end
    if o[1] then return {CONFLICT} end
    if o[2] and tonumber(o[3] or '0') > now then return {BUSY} end
    redis.call('HSET', K[2], 'c', att, 'u', A[6])
  end
  redis.call('HSET', K[2], 'k', A[4], 'e', A[5], 'p', A[3])
  return {OK}
end

if act == 'commit' then
  local ix = redis.call('HMGET', K[1], 'c', 't', 'x')
  if ix[1] ~= att then
    if ix[2] == att and ix[3] then return {OK} end -- a resend
    return {STALE}
  end
  redis.call('HDEL', K[1], 'c', 'u', 'm', 'o')
  redis.call('HSET', K[1], 'k', A[3], 'e', A[4], 'p', A[5], 'i', A[6], 'q', A[7],
             'x', A[8], 't', att, 'd', A[9])
  if A[10] ~= '' then redis.call('HSET', K[1], 'm', A[10]) end
  redis.call('PEXPIREAT', K[1], tonumber(A[8]) + DAY)
  unplan()
  return {OK}
end

if act == 'abort' then
  if redis.call('HGET', K[1], 'c') == att then
    redis.call('HDEL', K[1], 'c', 'u')
    if redis.call('HEXISTS', K[1], 'x') == 0 then redis.call('DEL', K[1]) end
  end
  unplan()
  return {OK}
end

local ix = redis.call('HMGET', K[1], 'k', 'p', 'i', 'e', 'q', 'x', 'd', 'm', 'o')
if not ix[6] then return {MISSING} end
local function where(code, rec)
  return {code, ix[1], ix[2], ix[3], ix[4], ix[5], ix[6], ix[7] or 'async', ix[8] or '',
          ix[9] or '', rec or ''}
end

-- The order record's JSON (prelude.lua RECORD), or nil.
local function record()
  local o = redis.call('HMGET', K[2], 'r', 'k')
  return RECORD(o[1], K[2], o[2])
end

if act == 'find' then
  return where(OK, ix[9] and record() or '')
end

if act == 'confirm' then
  if ix[9] then return where(ix[9] == att and REPLAYED or EXISTS, record()) end
  local o = redis.call('HMGET', K[2], 'r', 'k', 'e', 'c', 'u', 'p')
  if o[1] and (o[2] ~= ix[1] or o[3] == ix[4]) then return where(CONFLICT) end
  -- an order's claim in flight, or a dead multi-segment order's (its plan is the
  -- intent sweeper's to undo): wait
  if o[4] and o[4] ~= att and (tonumber(o[5] or '0') > now or o[6]) then return {BUSY} end
  if o[1] then redis.call('HDEL', K[2], 'r', 't') end -- an old sale's record
  local untl = string.format('%d', now + tonumber(A[3]))
  redis.call('HSET', K[2], 'c', att, 'u', untl, 'k', ix[1], 'e', ix[4])
  local r = where(OK)
  r[#r + 1] = untl
  return r
end

if act == 'record' then
  local o = redis.call('HMGET', K[2], 'c', 't', 'r')
  if o[2] == att and o[3] then return {OK} end
  if o[1] ~= att then return {STALE} end
  redis.call('HSET', K[2], 'r', A[3], 't', att, 'k', A[4], 'e', A[5])
  redis.call('HDEL', K[2], 'c', 'u', 'p')
  redis.call('HSET', K[1], 'o', att)
  return {OK}
end
return {MISSING}
