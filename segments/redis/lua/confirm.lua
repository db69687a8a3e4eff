-- CONFIRM: on a Redis Cluster, the record of an order its segment script placed (or,
-- with no record, the claim given up: the order ended without a sale).
-- KEYS: order record.
-- ARGV: the attempt id, record JSON ('' = give the claim up), sku, epoch.
-- An order with a fresh id has no claim: its record is written as it comes. A resend
-- of a CONFIRM that worked finds its own attempt: OK.
-- Reply: {STALE} (the id is claimed by another attempt) | {OK}.
local v = redis.call('HMGET', KEYS[1], 'c', 't', 'r')
if ARGV[2] == '' then
  if v[1] == ARGV[1] then
    redis.call('HDEL', KEYS[1], 'c', 'u', 'p')
    if not v[3] then redis.call('DEL', KEYS[1]) end
  end
  return {OK}
end
if v[2] == ARGV[1] and v[3] then return {OK} end
if v[1] and v[1] ~= ARGV[1] then return {STALE} end
redis.call('HSET', KEYS[1], 'r', ARGV[2], 't', ARGV[1], 'k', ARGV[3], 'e', ARGV[4])
redis.call('HDEL', KEYS[1], 'c', 'u', 'p')
return {OK}
