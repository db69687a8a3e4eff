-- VIEW: the SKU view's numbers of some segments in one read (GET /admin/skus/{sku}),
-- so no step of another client (an order, a hold placed, released, confirmed or
-- expired) falls between them: stock + reserved + sold of these segments is what
-- Redis held at one instant.
-- KEYS: per segment, five: stock, sold, orders, lock, reserved (of the SKU's epoch).
-- ARGV: none.
-- Reply: {OK, then per segment: stock, sold, orders, locked (0/1), reserved}; stock,
-- sold and reserved the strings stored ('0' when absent), so no number passes through
-- a Lua number.
local r = {OK}
for k = 1, #KEYS, 5 do
  local v = redis.call('MGET', KEYS[k], KEYS[k + 1], KEYS[k + 4])
  r[#r + 1] = v[1] or '0'
  r[#r + 1] = v[2] or '0'
  r[#r + 1] = redis.call('HLEN', KEYS[k + 2])
  r[#r + 1] = redis.call('EXISTS', KEYS[k + 3])
  r[#r + 1] = v[3] or '0'
end
return r
