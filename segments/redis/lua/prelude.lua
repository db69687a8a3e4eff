-- prelude.lua -- the functions every script is sent with (scripts.c: after the reply
-- codes, before the script's own text). Not a script of its own.

-- LEDGER_TAG(key): the hash tag of the segment `key` belongs to ('inv:{sku:i}') when
-- that segment's ledger flag (inv:{sku:i}:ledger, written by the resets) is set, else
-- nil: a script appends to the stream (inv:{sku:i}:events, the same slot) only then.
local function LEDGER_TAG(key)
  local tag = string.match(key, '^inv:{[^}]*}')
  if redis.call('EXISTS', tag .. ':ledger') == 1 then return tag end
  return nil
end

-- LEDGER(key, field, value, ...): append an event to the stream of the segment `key`
-- belongs to when its ledger flag is set; else nothing.
local function LEDGER(key, ...)
  local tag = LEDGER_TAG(key)
  if tag then redis.call('XADD', tag .. ':events', '*', ...) end
end

-- RECORD(r, key, k): the order record's JSON (segments/record.h) from its stored `r`
-- field, `key` its key (inv:order:{id}) and `k` its SKU as keyed ("sku" or
-- "sku/salt"). A record written by this build is packed ("#qty seg part [seg part
-- ...]", record_pack: a confirmed record whose id and SKU are its key's and its k's,
-- so that every field fits Redis's default listpack limit); one written before, a
-- cancelled one, or one restored from the ledger is the JSON itself, returned as it
-- is (so is nil). Byte for byte what record_build gives.
local function RECORD(r, key, k)
  if not r or string.byte(r) ~= 35 then return r end -- 35: '#'
  local f = {}
  for w in string.gmatch(r, '[^ #]+') do f[#f + 1] = w end
  local s = {}
  for i = 2, #f - 1, 2 do s[#s + 1] = '{"segment":' .. f[i] .. ',"qty":' .. f[i + 1] .. '}' end
  return '{"order_id":"' .. string.sub(key, 12, -2) .. '","sku":"' ..
         string.match(k or '', '^[^/]*') .. '","qty":' .. f[1] .. ',"segment":' ..
         (f[2] or '') .. ',"segments":[' .. table.concat(s, ',') ..
         '],"status":"confirmed"}'
end
