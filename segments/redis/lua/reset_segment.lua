-- RESET_SEGMENT: one segment of a reset on a Redis Cluster (after reset_begin.lua).
-- KEYS: the segment's stock, sold, lock, orders, parts, cancelled, epoch, adjust marks,
--       and the graveyards of its orders hash and cancelled set under the old epoch
--       (keys.h inv:{sku:i}:gone:E:*), the ledger's registry of the segment's slot
--       (keys.h inv:ledger:{NNNNNN}).
-- ARGV: the SKU's old epoch, the epochs of the dead resets taken over ('e1,e2,...';
--       '0': none), the new epoch, the segment's new stock ('' = the segment goes:
--       the SKU shrinks or is deleted), the ledger ('1': events on, '0': off:
--       reset.lua), the SKU's durability.
-- A segment already in the new epoch was done by an earlier try of this reset: OK,
-- nothing changed. A segment of the old epoch, of a dead reset's, or with no epoch
-- (never made) is emptied: its orders hash and cancelled set moved to their graveyards
-- (RENAME, O(1); the caller reads them in steps and drops the records they name, as
-- after RESET), its other keys deleted, and then, unless it goes, its stock set, its
-- sold count zeroed and its epoch made the new one. A segment of any other epoch
-- belongs to a reset this one does not know: STALE, nothing changed.
-- The segment's ledger flag is set as reset.lua sets it (and with it the segment
-- named in the registry, its durability), and its ledger stream gets a 'reset' event
-- (its new stock). A segment that goes gets a 'delete' event, then
-- loses its fence and its ledger flag (inv:{sku:i}:fence, :ledger, beside its keys;
-- the sink drops the stream once copied, ev_read.lua); one that stays keeps its
-- fence, since fences only grow (keys.h).
-- Reply: {STALE} | {OK}.
local e = redis.call('GET', KEYS[7])
if e == ARGV[3] then return {OK} end
if e and e ~= ARGV[1] then
  local known = false
  for d in string.gmatch(ARGV[2], '[^,]+') do
    if d == e then known = true end
  end
  if not known then return {STALE} end
end
if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('RENAME', KEYS[4], KEYS[9]) end
if redis.call('EXISTS', KEYS[6]) == 1 then redis.call('RENAME', KEYS[6], KEYS[10]) end
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[7], KEYS[8])
local flag = string.match(KEYS[1], '^inv:{[^}]*}') .. ':ledger'
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[1], ARGV[4])
  redis.call('SET', KEYS[2], '0')
  redis.call('SET', KEYS[7], ARGV[3])
  if ARGV[5] == '1' then
    redis.call('SET', flag, '1')
    redis.call('HSET', KEYS[11], string.match(KEYS[1], '^inv:{([^}]*)}'), ARGV[6])
  else
    redis.call('DEL', flag)
  end
  LEDGER(KEYS[1], 'k', 'reset', 'e', ARGV[3], 'ds', ARGV[4], 'dq', '0')
else
  if e then LEDGER(KEYS[1], 'k', 'delete', 'e', e, 'ds', '0', 'dq', '0') end
  redis.call('DEL', string.match(KEYS[1], '^inv:{[^}]*}') .. ':fence', flag)
end
return {OK}
