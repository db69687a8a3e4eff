-- RETAIN: give order records their TTL once the ledger holds them (segments/ledger.h).
-- KEYS: order records (one slot on a cluster).
-- ARGV: their SKU as its segments are keyed (keys.h 'k'), seconds, then per record
--       the epoch of its event and 'c' when that event is the cancel or the store a
--       Redis Cluster (whose cancel's segment step finds the id in its segment's
--       cancelled set until the ledger has the cancel: cancel_segment.lua), else 's'.
-- Only the record of that sale gets the TTL: a record the id has been given since (a
-- reset, then another order with the id) is left alone; and a sale's event leaves a
-- cancelled record alone: it keeps no TTL (cancel.lua) until the ledger has the cancel
-- too, or a cancel after it expired would find the ledger's record of a sale and give
-- the units back twice. One call for a batch's records of a slot: a call per record
-- cost Redis as much as the order itself.
-- Reply: how many got the TTL.
-- A record is cancelled when its c (cancel.lua) is its epoch: a record of an older epoch
-- overwritten by a new order keeps the old c. Small fields only: RETAIN runs per
-- record copied, and the record ('r': a packed "#qty seg part ..." or, for a cancelled or
-- older record, its JSON of ~150 bytes) is not read here.
-- A Redis Cluster's CONFIRM writes the SKU's name, not its salted 'placed' (keys.h),
-- as 'k': either is the SKU's (before, no record on a cluster ever got its TTL).
local n = 0
local sku = string.match(ARGV[1], '^[^/]*')
for i = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[i], 'k', 'e', 'c')
  if (v[1] == ARGV[1] or v[1] == sku) and v[2] == ARGV[1 + 2 * i] and
     (ARGV[2 + 2 * i] == 'c' or v[3] ~= v[2]) then
    n = n + redis.call('EXPIRE', KEYS[i], ARGV[2])
  end
end
return n
