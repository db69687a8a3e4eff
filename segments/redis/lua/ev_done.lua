-- EV_DONE: entries of a segment's ledger stream copied into the ledger (evstream.h):
-- acknowledged in the group "ledger", and the stream trimmed up to the oldest entry
-- still pending with any reader (or, none pending, past the last one delivered), so it
-- holds only what may still have to be copied.
-- KEYS: the stream.  ARGV: the entry ids.
-- XTRIM MINID drops whole nodes of the stream: XDEL of each id cost Redis about 1 us
-- an entry, as much as the XACK.
-- Reply: how many were trimmed.
redis.call('XACK', KEYS[1], 'ledger', unpack(ARGV))
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
