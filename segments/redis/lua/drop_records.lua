-- DROP_RECORDS: delete order records a reset left behind.
-- KEYS: order records.  ARGV: sku, the epoch the reset ended.
-- Deletes each record that is that SKU's in that epoch, and each record written before
-- records named their SKU and epoch (its id was listed by the SKU's reset, so it was
-- that SKU's); a record the id has been given since (another epoch or SKU) stays.
-- A record names its SKU as its segments were keyed: "sku/salt" for a SKU placed on a
-- Redis Cluster with a salt (keys.h); the name is what precedes the '/'.
-- Reply: how many were deleted.
local dropped = 0
for i = 1, #KEYS do
  local r = redis.call('HMGET', KEYS[i], 'k', 'e')
  local name = r[1] and string.match(r[1], '^[^/]*')
  if (name == ARGV[1] and r[2] == ARGV[2]) or not r[1] then
    dropped = dropped + redis.call('DEL', KEYS[i])
  end
end
return dropped
