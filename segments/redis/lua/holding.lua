-- HOLDING: the hold sweeper's work list (inv:holding, "placed i E" scored by a first
-- expiry) on a Redis Cluster, where no segment's script can reach it (its own slot).
-- KEYS: inv:holding. ARGV: action, member, then:
--   hint   score: a place about to try that segment lists it (sent with the segment's
--          step, so a process that dies leaves both or neither): added when absent,
--          lowered when listed later, moved on when listed as due (the sweeper may be
--          looking at it: its look below then sees the change). The score is the
--          service's estimate; the sweeper's first look puts Redis's own expiry there.
--   look   the score the sweeper read, the first expiry its sweep left ('' none): when
--          nothing moved the entry since, the entry becomes that (or goes); when a place
--          moved it, it is only lowered to that.
-- Reply: {OK}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local s = redis.call('ZSCORE', KEYS[1], ARGV[2])
if ARGV[1] == 'hint' then
  local x = tonumber(ARGV[3])
  if not s or tonumber(s) > x or tonumber(s) <= now then
    redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
  end
  return {OK}
end
if s and tonumber(s) == tonumber(ARGV[3]) then
  if ARGV[4] == '' then
    redis.call('ZREM', KEYS[1], ARGV[2])
  else
    redis.call('ZADD', KEYS[1], ARGV[4], ARGV[2])
  end
elseif ARGV[4] ~= '' then
  redis.call('ZADD', KEYS[1], 'LT', ARGV[4], ARGV[2])
end
return {OK}
