-- EV_ADOPT: a segment with its ledger flag set is named in the ledger's registry of
-- its slot (keys.h inv:ledger:{NNNNNN}) if it is not there: a segment flagged before
-- the registry existed (an older version's reset), or one whose registry entry was
-- lost, is drained again. A sink runs it for every segment of every SKU when it
-- starts (ledger.c); the resets name each segment they flag (reset.lua).
-- KEYS: the segment's ledger flag, the registry of its slot.
-- ARGV: the segment's field ('placed:i'), the SKU's durability.
-- Reply: 1 named now, 0 named already or no flag.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2])
