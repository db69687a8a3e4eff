-- EV_READ: the ledger sink's read of one segment's ledger stream (evstream.h), and the
-- segment's forgetting of orders the ledger has had for record_retention_s.
-- KEYS: the stream, the segment's retire list, orders hash, parts hash, cancelled set,
--       ledger flag, the ledger's registry of its slot (keys.h inv:ledger:{NNNNNN}).
-- ARGV: the reader (consumer) name, at most how many entries, the idle time (ms) after
--       which another reader's pending entries are taken over, the segment's field in
--       the registry ('placed:i').
-- First the retire list's elements that are due (ev_done.lua queued them; at most two
-- a call, so a call stays short and the list still drains, as one is queued per
-- batch): their orders' fields leave the orders and parts hashes and the cancelled
-- set. A cancel that finds no field takes the units from the record (cancel.lua; on a
-- cluster from a record restored from the ledger: cancel_segment.lua).
-- Then makes the consumer group "ledger" when the stream has none (from its first
-- entry), and answers the reader's own pending entries (a batch it read and did not
-- finish), else another reader's idle ones (XAUTOCLAIM: that reader died mid-batch).
-- New ones the caller reads with a plain XREADGROUP after (evstream.c): through Lua
-- each entry's ~14 strings were converted to Lua and back, 2.6 us an order of Redis's
-- CPU. No stream: nothing, and nothing made. An empty stream (everything copied and
-- trimmed: ev_done.lua) whose flag is gone (its segment went, or the ledger was
-- turned off by a reset) will get no event again: it is deleted, with the retire
-- list (its orders' fields went with the reset), and the segment leaves the registry
-- (as does one with neither stream nor flag), so a segment that goes leaves nothing;
-- a reset that sets the flag again starts a new stream and names it there again.
-- Reply: {stream length, {{id, {field, value, ...}}, ...}}; an entry deleted since it
--      was read has no fields.
local now
for _ = 1, 2 do
  local head = redis.call('LINDEX', KEYS[2], 0)
  if not head then break end
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local due, rest = string.match(head, '^(%d+) (.*)$')
  if due and tonumber(due) > now then break end
  redis.call('LPOP', KEYS[2])
  local ids = {}
  for id in string.gmatch(rest or '', '%S+') do ids[#ids + 1] = id end
  if #ids > 0 then
    redis.call('HDEL', KEYS[3], unpack(ids))
    redis.call('HDEL', KEYS[4], unpack(ids))
    redis.call('SREM', KEYS[5], unpack(ids))
  end
end
if redis.call('EXISTS', KEYS[6]) == 0 and (redis.call('EXISTS', KEYS[1]) == 0
                                           or redis.call('XLEN', KEYS[1]) == 0) then
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('HDEL', KEYS[7], ARGV[4])
  return {0, {}}
end
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, {}} end
redis.pcall('XGROUP', 'CREATE', KEYS[1], 'ledger', '0')
local function entries(r)
  if not r or not r[1] then return {} end
  return r[1][2]
end
local e = entries(redis.call('XREADGROUP', 'GROUP', 'ledger', ARGV[1], 'COUNT', ARGV[2],
                             'STREAMS', KEYS[1], '0'))
if #e == 0 then
  e = redis.call('XAUTOCLAIM', KEYS[1], 'ledger', ARGV[1], ARGV[3], '0-0', 'COUNT',
                 ARGV[2])[2]
end
return {redis.call('XLEN', KEYS[1]), e}
