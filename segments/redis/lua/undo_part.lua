-- UNDO_PART: on a Redis Cluster, one part of a multi-segment order that will not be
-- placed given back (the order fell short in another part, or its process died before
-- its record: the next holder of the id's claim undoes its plan).
-- KEYS: segment stock, sold, the hash the part was recorded in (orders for the order's
--       first segment, parts for the others), segment epoch.
-- ARGV: order_id, epoch.
-- Only the holder of the id's claim sends it, and no record exists for the id (CONFIRM
-- writes the record and drops the claim in one script), so what the hash holds for
-- the id is that claim's unplaced part. Safe to run again: a part not there (never
-- landed, undone already, or its segment reset since) is OK.
-- The part given back is an event on the segment's ledger stream.
-- Reply: {OK, units given back}.
if redis.call('GET', KEYS[4]) ~= ARGV[2] then return {OK, 0} end
local q = redis.call('HGET', KEYS[3], ARGV[1])
if not q then return {OK, 0} end
redis.call('INCRBY', KEYS[1], q)
redis.call('DECRBY', KEYS[2], q)
redis.call('HDEL', KEYS[3], ARGV[1])
LEDGER(KEYS[1], 'k', 'undo', 'e', ARGV[2], 'o', ARGV[1], 'ds', q, 'dq', '-' .. q)
return {OK, tonumber(q)}
