-- EV_DONE: entries of a segment's ledger stream copied into the ledger (evstream.h):
-- acknowledged in the group "ledger", and the stream trimmed up to the oldest entry
-- still pending with any reader (or, none pending, past the last one delivered), so it
-- holds only what may still have to be copied. Then the orders those entries name are
-- queued for the segment to forget (ev_read.lua) once their records' retention passed.
-- KEYS: the stream, the segment's retire list, its ledger flag (keys.h). With the
--       flag gone (the segment went, or a reset turned the ledger off) nothing is
--       queued: the reset moved the orders those entries name away already.
-- ARGV: the seconds until the segment forgets them ('0': nothing queued), n, the n
--       entry ids, then the order ids of the sales and cancels among them.
-- XTRIM MINID drops whole nodes of the stream: XDEL of each id cost Redis about 1 us
-- an entry, as much as the XACK. The retire list holds one element per batch, "due_ms
-- id id ...", due by this node's clock: no per-order key, no sorted set.
-- Reply: how many were trimmed.
local n = tonumber(ARGV[2])
redis.call('XACK', KEYS[1], 'ledger', unpack(ARGV, 3, 2 + n))
local keep_s = tonumber(ARGV[1])
if keep_s > 0 and #ARGV > 2 + n and redis.call('EXISTS', KEYS[3]) == 1 then
  local t = redis.call('TIME')
  local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + keep_s * 1000
  redis.call('RPUSH', KEYS[2], string.format('%d', due) .. ' ' ..
             table.concat(ARGV, ' ', 3 + n))
  -- Gone a minute after its last element is due: a deleted SKU's list goes too.
  redis.call('PEXPIRE', KEYS[2], keep_s * 1000 + 60000)
end
local p = redis.call('XPENDING', KEYS[1], 'ledger')
local bound = p[2]
if not bound then
  local last
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    if f['name'] == 'ledger' then last = f['last-delivered-id'] end
  end
  if not last then return 0 end
  local ms, seq = string.match(last, '^(%d+)-(%d+)$')
  bound = ms .. '-' .. string.format('%d', tonumber(seq) + 1)
end
return redis.call('XTRIM', KEYS[1], 'MINID', bound)
