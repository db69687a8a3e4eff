-- RESTORE: an order record that expired from Redis (record_retention_s) written back
-- as the ledger has it, so that a cancel can run (segments/ledger.h ledger_restore).
-- KEYS: order record.
-- ARGV: the record JSON, its SKU as its segments are keyed, its epoch, its TTL in
--       seconds ('0': none; a cancel's event gives it one, retain.lua -- on a Redis
--       Cluster, whose cancel events carry no record, the caller gives one: evstream.h).
-- A record there (the id placed again, or restored by another cancel) is kept. The
-- attempt field says 'ledger': no order's attempt, so no DEDUCT takes it for its own.
-- Reply: 1 written, 0 a record was there.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'r', ARGV[1], 't', 'ledger', 'k', ARGV[2], 'e', ARGV[3])
if tonumber(ARGV[4]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[4]) end
return 1
