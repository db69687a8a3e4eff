-- EV_READ: the ledger sink's read of one segment's ledger stream (evstream.h).
-- KEYS: the stream.
-- ARGV: the reader (consumer) name, at most how many entries, the idle time (ms) after
--       which another reader's pending entries are taken over.
-- Makes the consumer group "ledger" when the stream has none (from its first entry),
-- then answers the reader's own pending entries (a batch it read and did not finish),
-- else another reader's idle ones (XAUTOCLAIM: that reader died mid-batch), else new
-- ones. No stream: nothing, and nothing made.
-- Reply: {stream length, {{id, {field, value, ...}}, ...}}; an entry deleted since it
--      was read has no fields.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, {}} end
redis.pcall('XGROUP', 'CREATE', KEYS[1], 'ledger', '0')
local function entries(r)
  if not r or not r[1] then return {} end
  return r[1][2]
end
local e = entries(redis.call('XREADGROUP', 'GROUP', 'ledger', ARGV[1], 'COUNT', ARGV[2],
                             'STREAMS', KEYS[1], '0'))
if #e == 0 then
  e = redis.call('XAUTOCLAIM', KEYS[1], 'ledger', ARGV[1], ARGV[3], '0-0', 'COUNT',
                 ARGV[2])[2]
end
if #e == 0 then
  e = entries(redis.call('XREADGROUP', 'GROUP', 'ledger', ARGV[1], 'COUNT', ARGV[2],
                         'STREAMS', KEYS[1], '>'))
end
return {redis.call('XLEN', KEYS[1]), e}
