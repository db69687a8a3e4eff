-- RENEW: compare-and-extend a segment's lock.
-- KEYS: lock.  ARGV: token, ttl_ms.  Reply: 1 renewed, 0 not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
