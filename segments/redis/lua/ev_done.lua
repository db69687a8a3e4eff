-- EV_DONE: entries of a segment's ledger stream copied into the ledger (evstream.h):
-- acknowledged in the group "ledger" and deleted, so the stream holds only what is
-- still to be copied.
-- KEYS: the stream.  ARGV: the entry ids.
-- Reply: how many were deleted.
redis.call('XACK', KEYS[1], 'ledger', unpack(ARGV))
return redis.call('XDEL', KEYS[1], unpack(ARGV))
