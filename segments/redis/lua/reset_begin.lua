-- RESET_BEGIN: the first step of a reset on a Redis Cluster, where a SKU's keys span
-- slots and RESET cannot run as one script (reset_segment.lua, reset_commit.lua follow).
-- KEYS: meta, request key.
-- ARGV: the epoch and segment count the caller found ('0', '0' for no SKU), the new
--       epoch, the new segment count, the lease in ms, the request's signature ('' =
--       no request id), the version the caller replaces ('' = any, '-' = none: create
--       only, '*' = any existing one, 'epoch.gen' = exactly that one: reset.lua),
--       '1' when a pending reset of this same request may be taken over at once.
-- Marks the reset as pending in the meta (fields pending, pending_segments,
-- pending_until), so that one reset at a time works on the SKU's segments. A pending
-- reset whose lease ran out (its process died, or it stopped and gave the lease up:
-- reset_yield.lua) is taken over: its epoch and segment count are answered, so the
-- segments it reached are reset too and none is orphaned. So are those of the dead
-- resets it had itself taken over (pending_dead, pending_span): one that stopped
-- before reaching them passes them on, or the next would find segments in an epoch
-- it did not know (STALE, for good). A BEGIN sent again by its own reset (its reply
-- lost) answers what the first answered. At most 32 dead epochs are kept.
-- The pending mark names its request (pending_req: request key and signature). A
-- retry of that request (ARGV[8] '1', the retry's first look) takes the earlier
-- attempt over at once, its lease or not: that attempt answered 503 (it died half
-- way, a failover) and its client sends it again, as the 503 asks. Waiting its lease
-- out answered the retries 503 busy for 15 s, and a client that gave up sooner left
-- the SKU half reset (restocks busy, orders on the reset segments STALE) until some
-- other reset came. Safe as any take-over: the attempt taken over, should it still
-- run, meets its segments in the new epoch and its commit the new mark (STALE).
-- The version is compared here, before the reset touches anything; until its commit
-- the pending mark keeps every other reset and adjust off the SKU.
-- Reply: {REPLAYED, created 0/1} | {CONFLICT} | {EXISTS} (create only: the SKU exists)
--      | {MISMATCH} (not the version named) | {STALE} (not as the caller found it, or
--      another reset is under way) | {MISSING} (delete of no SKU)
--      | {OK, the dead resets' epochs ('e1,e2,...'; '0': none), the most segments any
--        of them had}.
if ARGV[6] ~= '' then
  local prev = redis.call('GET', KEYS[2])
  if prev == ARGV[6] then return {REPLAYED, 0} end
  if prev == ARGV[6] .. '|new' then return {REPLAYED, 1} end
  if prev then return {CONFLICT} end
end
local m = redis.call('HMGET', KEYS[1], 'epoch', 'segments', 'pending', 'pending_segments',
                     'pending_until', 'gen', 'pending_dead', 'pending_span',
                     'pending_req')
local want = ARGV[7]
if want == '-' then
  if m[1] then return {EXISTS} end
elseif want ~= '' and (not m[1] or (want ~= '*' and want ~= m[1] .. '.' .. (m[6] or ''))) then
  return {MISMATCH}
end
if (m[1] or '0') ~= ARGV[1] or (m[2] or '0') ~= ARGV[2] then return {STALE} end
if ARGV[4] == '0' and not m[2] and not m[3] then return {MISSING} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead, dead_n = m[7] or '', tonumber(m[8] or '0')
local req = ARGV[6] ~= '' and (KEYS[2] .. '|' .. ARGV[6]) or ''
if m[3] and m[3] ~= ARGV[3] then
  local own = ARGV[8] == '1' and req ~= '' and m[9] == req
  if not own and tonumber(m[5] or '0') > now then return {STALE} end
  local list = {m[3]}
  for e in string.gmatch(dead, '[^,]+') do
    if #list < 32 then list[#list + 1] = e end
  end
  dead = table.concat(list, ',')
  dead_n = math.max(dead_n, tonumber(m[4] or '0'))
elseif not m[3] then
  dead, dead_n = '', 0
end
redis.call('HSET', KEYS[1], 'pending', ARGV[3], 'pending_segments', ARGV[4],
           'pending_until', string.format('%d', now + tonumber(ARGV[5])),
           'pending_dead', dead, 'pending_span', string.format('%d', dead_n),
           'pending_req', req)
return {OK, dead ~= '' and dead or '0', string.format('%d', dead_n)}
