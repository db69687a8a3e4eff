-- RELEASE: compare-and-delete a segment's lock.
-- KEYS: lock.  ARGV: token.  Reply: 1 released, 0 not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
