-- VIEW: the SKU view's numbers of some segments in one read (GET /admin/skus/{sku}),
-- so no step of another client (an order, a hold placed, released, confirmed or
-- expired, a restock) falls between them: stock + reserved + sold of these segments
-- is what Redis held at one instant, and so is the SKU's settings (its initial) when
-- asked for.
-- KEYS: with ARGV, first the SKU's meta; then per segment, five: stock, sold, orders,
-- lock, reserved (of the SKU's epoch).
-- ARGV: the meta fields to read (none: the segments only, as a cluster sends it).
-- Reply: {OK, the meta fields' values (HMGET; {} without ARGV), then per segment:
-- stock, sold, orders, locked (0/1), reserved}; stock, sold and reserved the strings
-- stored ('0' when absent), so no number passes through a Lua number.
local first = 1
local meta = {}
if #ARGV > 0 then
  meta = redis.call('HMGET', KEYS[1], unpack(ARGV))
  first = 2
end
local r = {OK, meta}
for k = first, #KEYS, 5 do
  local v = redis.call('MGET', KEYS[k], KEYS[k + 1], KEYS[k + 4])
  r[#r + 1] = v[1] or '0'
  r[#r + 1] = v[2] or '0'
  r[#r + 1] = redis.call('HLEN', KEYS[k + 2])
  r[#r + 1] = redis.call('EXISTS', KEYS[k + 3])
  r[#r + 1] = v[3] or '0'
end
return r
