-- RETAIN: give order records their TTL once the ledger holds them (segments/ledger.h).
-- KEYS: order records (one slot on a cluster).
-- ARGV: their SKU as its segments are keyed (keys.h 'k'), seconds, then per record
--       the epoch of its sale.
-- Only the record of that sale gets the TTL: a record the id has been given since (a
-- reset, then another order with the id) is left alone. One call for a batch's
-- records of a slot: a call per record cost Redis as much as the order itself.
-- Reply: how many got the TTL.
local n = 0
for i = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[i], 'k', 'e')
  if v[1] == ARGV[1] and v[2] == ARGV[2 + i] then
    n = n + redis.call('EXPIRE', KEYS[i], ARGV[2])
  end
end
return n
