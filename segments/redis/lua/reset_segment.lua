-- RESET_SEGMENT: one segment of a reset on a Redis Cluster (after reset_begin.lua).
-- KEYS: the segment's stock, sold, lock, orders, parts, cancelled, epoch, adjust marks.
-- ARGV: the SKU's old epoch, the epoch of a dead reset taken over ('0': none), the new
--       epoch, the segment's new stock ('' = the segment goes: the SKU shrinks or is
--       deleted).
-- A segment already in the new epoch was done by an earlier try of this reset: OK,
-- nothing changed. A segment of the old epoch, of the dead reset's, or with no epoch
-- (never made) is emptied: its keys deleted, and then, unless it goes, its stock set,
-- its sold count zeroed and its epoch made the new one. A segment of any other epoch
-- belongs to a reset this one does not know: STALE, nothing changed.
-- Reply: {STALE} | {OK, id...} (the ids of the orders recorded in the segment: the
--      caller drops their records, DROP_RECORDS).
local e = redis.call('GET', KEYS[7])
if e == ARGV[3] then return {OK} end
if e and e ~= ARGV[1] and e ~= ARGV[2] then return {STALE} end
local out = {OK}
for _, id in ipairs(redis.call('HKEYS', KEYS[4])) do out[#out + 1] = id end
for _, id in ipairs(redis.call('SMEMBERS', KEYS[6])) do out[#out + 1] = id end
for k = 1, 8 do redis.call('DEL', KEYS[k]) end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[1], ARGV[4])
  redis.call('SET', KEYS[2], '0')
  redis.call('SET', KEYS[7], ARGV[3])
end
return out
