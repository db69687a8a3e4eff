-- HOLD: on a Redis Cluster, a reservation's every step on its segment, one script per
-- step (so one slot); a standalone Redis runs lua/hold_local.lua instead.
-- KEYS: stock, sold, reserved (of the epoch), holds (of the epoch), segment epoch,
--       lock, then placeholders in the slot (never touched; the meta, the holding list
--       and the index live in other slots), the hold's record in the segment, the
--       segment's orders hash, a placeholder (the order record).
-- Numbers reach redis.call as strings made once: Redis formats every Lua number
-- argument with snprintf, which cost a place more than its writes did.
-- ARGV: action ('place' | 'confirm' | 'release' | 'read' | 'sweep'), epoch, sku,
--       segment, member (this segment's entry in the holding list), prefix of the
--       segment's hold records, id, qty, ttl_ms, token ('' = the lock must be free),
--       attempt, order record JSON (confirm), placed name, durability, the expiry in
--       ms ('' = now + ttl_ms: a part of a hold over several segments is given the one
--       expiry of every part), the end of the id's claim in ms (a confirm: '0' = none;
--       a part of a multi-segment confirm is refused FENCED past it).
-- The store's clock decides: now is Redis's TIME, a hold expires at now + ttl_ms and is
-- expired from that millisecond on. Every step first settles the expired holds of the
-- segment it meets (their units back in stock, their records 'expired').
-- Units: place moves qty from stock to reserved; confirm from reserved to sold; release
-- and expiry from reserved back to stock.
-- The index, the order record, the sweeper's list and the SKU's gen are the caller's
-- steps in their own slots (lua/hold_id.lua, lua/holding.lua). A place after the
-- claim's end is STALE (an attempt taken for dead places nothing), and one that finds
-- the id held in this segment already (its own earlier run, or a dead attempt's of the
-- same qty) takes that hold as its own.
-- Reply: place   {OK, stock left, expires} | {CONFLICT} (the id is held here by another
--                attempt) | {BUSY, stock} | {SHORT, stock} | {FENCED} | {STALE}
--        (steps answer {code, state, qty, expires, record or ''}; MISSING: empty ones)
--        confirm {OK, state, qty, expires, ''} (state 'confirmed': done, or this
--                attempt's earlier run) | {EXISTS, 'confirmed', qty, expires, ''}
--                (confirmed before) | {CONFLICT, state, qty, expires} (released,
--                expired) | {FENCED, state, ...} (past the claim's end) | {MISSING} |
--                {STALE}
--        release {OK, state, qty, expires} (released or expired: its units are back)
--                | {CONFLICT, 'confirmed', ...} | {MISSING} | {STALE}
--        read    {OK, state, qty, expires} | {MISSING} | {STALE}
--        sweep   {OK, settled, the first expiry left or ''}
-- After the epoch check, every reply but the sweep's ends with one more element: the
-- expired holds this run settled (an expired one a step meets counts).
local DAY = 86400000
local K, A = KEYS, ARGV
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nows = t[1] .. string.sub('00000' .. t[2], -6, -4) -- now, as a string
local settled = 0

-- The helpers of a step, on the segment KEYS (K) and ARGV (A) name.
local function back(hid, q, state)
  redis.call('INCRBY', K[1], q)
  redis.call('DECRBY', K[3], q)
  redis.call('ZREM', K[4], hid)
  redis.call('HSET', A[6] .. hid, 's', state)
  LEDGER(K[1], 'k', state == 'expired' and 'expire' or 'release', 'e', A[2], 'h', hid,
         'ds', q, 'dq', '0')
  settled = settled + 1
end

-- An empty count goes with the last hold (the holding list and the gen are the
-- caller's, in their own slots).
local function finish()
  if not redis.call('ZRANGE', K[4], 0, 0)[1] and redis.call('GET', K[3]) == '0' then
    redis.call('DEL', K[3])
  end
end

-- Every reply after the epoch check ends with how many holds this run settled.
local function ret(r)
  r[#r + 1] = settled
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
      return {OK, 0}
    end
    return {STALE}
  end

  if act == 'sweep' then
    sweep('256')
    finish()
    -- and the first expiry left, for the cluster's list (holding.lua)
    local first = redis.call('ZRANGE', K[4], 0, 0, 'WITHSCORES')
    return {OK, settled, first[2] or ''}
  end

  if act == 'place' then
    local h = redis.call('HMGET', K[10], 's', 't', 'q', 'x')
    if h[1] == 'held' and redis.call('ZSCORE', K[4], id) then
      if h[2] == A[11] or h[3] == A[8] then return ret({OK, tonumber(v[3] or '0'), tonumber(h[4])}) end
      return ret({CONFLICT})
    end
    if now >= tonumber(A[16]) then return ret({STALE}) end
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
    local x = A[15] ~= '' and tonumber(A[15]) or now + tonumber(A[9])
    local xs, xd = tostring(x), tostring(x + DAY)
    redis.call('DECRBY', K[1], A[8])
    redis.call('INCRBY', K[3], A[8])
    redis.call('ZADD', K[4], xs, id)
    redis.call('HSET', K[10], 'q', A[8], 'x', xs, 's', 'held', 't', A[11])
    redis.call('PEXPIREAT', K[10], xd)
    LEDGER(K[1], 'k', 'hold', 'e', epoch, 'h', id, 'ds', '-' .. A[8], 'dq', '0')
    if settled > 0 then finish() end
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
    reply = {h[4] == A[11] and OK or EXISTS, state, tonumber(q), x, ''}
  elseif state ~= 'held' then
    reply = {CONFLICT, state, tonumber(q), x, ''}
  elseif A[16] ~= '0' and now >= tonumber(A[16]) then
    reply = {FENCED, state, tonumber(q), x, ''} -- the claim ran out: its undo may run
  else
    -- (an order with the id is the caller's check: its claim on the record)
    redis.call('DECRBY', K[3], q)
    redis.call('INCRBY', K[2], q)
    redis.call('ZREM', K[4], id)
    redis.call('HSET', K[11], id, q)
    redis.call('HSET', K[10], 's', 'confirmed', 'c', A[11])
    LEDGER(K[1], 'k', 'sale', 'e', epoch, 'o', id, 'ds', '0', 'dq', q, 'r', A[12])
    reply = {OK, 'confirmed', tonumber(q), x, A[12]}
  end
  -- Nothing given back: the holding entry may name an expiry earlier than the first
  -- one left (a confirmed first hold), which only brings the sweeper's look forward.
  if settled > 0 then finish() end
  return ret(reply)
end

return run()
