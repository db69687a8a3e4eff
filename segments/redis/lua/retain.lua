-- RETAIN: give an order record its TTL once the ledger holds it (segments/ledger.h).
-- KEYS: order record.
-- ARGV: the record's SKU as its segments are keyed (keys.h 'k'), its epoch, seconds.
-- Only the record of that sale gets the TTL: a record the id has been given since (a
-- reset, then another order with the id) is left alone.
-- Reply: 1 when the TTL was set, else 0.
local v = redis.call('HMGET', KEYS[1], 'k', 'e')
if v[1] ~= ARGV[1] or v[2] ~= ARGV[2] then return 0 end
return redis.call('EXPIRE', KEYS[1], ARGV[3])
