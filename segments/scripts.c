/* scripts.c -- Lua sources of every script the domain runs (ids in scripts.h).
 *
 * Numbers travel as strings: Lua formats numbers with 14 significant digits, so a
 * stock near 2^53 must never pass through a Lua number on its way into a key.
 */
#include "segments/scripts.h"

/* ACQUIRE
 * KEYS: order record, segment stock, segment lock.  ARGV: qty, token, ttl_ms.
 * Reply: {EXISTS, record} | {MISSING} | {SHORT, stock} | {BUSY, stock} | {OK, stock}.
 * The stock is read before the lock is tried, so an empty segment is skipped
 * without ever being locked; stock only rises under a lock, so "short" stays true.
 * Taking a lock the same token already holds is OK, so a retry after a lost reply
 * is safe. */
static const char acquire_lua[] =
    "local rec = redis.call('GET', KEYS[1])\n"
    "if rec then return {3, rec} end\n"
    "local s = redis.call('GET', KEYS[2])\n"
    "if not s then return {4} end\n"
    "s = tonumber(s)\n"
    "if s < tonumber(ARGV[1]) then return {2, s} end\n"
    "if not redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[3])\n"
    "   and redis.call('GET', KEYS[3]) ~= ARGV[2] then\n"
    "  return {1, s}\n"
    "end\n"
    "return {0, s}\n";

/* DEDUCT (fenced write; with an empty token it is mode `atomic`'s whole attempt)
 * KEYS: segment lock, stock, sold, orders hash, order record.
 * ARGV: token ('' = no lock), qty, order_id, record JSON.
 * Reply: {FENCED} | {EXISTS, record} | {MISSING} | {SHORT, stock} | {OK, stock left}.
 * With a token, every reply but FENCED also releases the lock. */
static const char deduct_lua[] =
    "local locked = ARGV[1] ~= ''\n"
    "if locked and redis.call('GET', KEYS[1]) ~= ARGV[1] then return {5} end\n"
    "local function done(r)\n"
    "  if locked then redis.call('DEL', KEYS[1]) end\n"
    "  return r\n"
    "end\n"
    "local rec = redis.call('GET', KEYS[5])\n"
    "if rec then return done({3, rec}) end\n"
    "local s = redis.call('GET', KEYS[2])\n"
    "if not s then return done({4}) end\n"
    "s = tonumber(s)\n"
    "local q = tonumber(ARGV[2])\n"
    "if s < q then return done({2, s}) end\n"
    "redis.call('DECRBY', KEYS[2], ARGV[2])\n"
    "redis.call('INCRBY', KEYS[3], ARGV[2])\n"
    "redis.call('HSET', KEYS[4], ARGV[3], ARGV[2])\n"
    "redis.call('SET', KEYS[5], ARGV[4])\n"
    "return done({0, s - q})\n";

/* RELEASE  KEYS: lock.  ARGV: token.  Reply: 1 released, 0 not ours. */
static const char release_lua[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('DEL', KEYS[1])\n"
    "end\n"
    "return 0\n";

/* RENEW  KEYS: lock.  ARGV: token, ttl_ms.  Reply: 1 renewed, 0 not ours. */
static const char renew_lua[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "end\n"
    "return 0\n";

/* RESET
 * KEYS: meta, SKU set, then per old-or-new segment i: stock, sold, lock, orders.
 * ARGV: sku, order key prefix, order key suffix, segments (0 = delete the SKU),
 *       mode, hold_ms, initial, share+1, share, count of segments given share+1.
 * Deletes every listed segment key and the order records they list; then, unless
 * deleting, writes the new shares, zero sold counts and the meta with a bumped gen.
 * Reply: {OK, gen} (gen 0 when deleted). */
static const char reset_lua[] =
    "local m = (#KEYS - 2) / 4\n"
    "for i = 0, m - 1 do\n"
    "  local b = 2 + i * 4\n"
    "  for _, id in ipairs(redis.call('HKEYS', KEYS[b + 4])) do\n"
    "    redis.call('DEL', ARGV[2] .. id .. ARGV[3])\n"
    "  end\n"
    "  redis.call('DEL', KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[b + 4])\n"
    "end\n"
    "local n = tonumber(ARGV[4])\n"
    "if n == 0 then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  redis.call('SREM', KEYS[2], ARGV[1])\n"
    "  return {0, 0}\n"
    "end\n"
    "local extra = tonumber(ARGV[10])\n"
    "for i = 0, n - 1 do\n"
    "  local b = 2 + i * 4\n"
    "  redis.call('SET', KEYS[b + 1], i < extra and ARGV[8] or ARGV[9])\n"
    "  redis.call('SET', KEYS[b + 2], '0')\n"
    "end\n"
    "local gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)\n"
    "redis.call('HSET', KEYS[1], 'segments', ARGV[4], 'mode', ARGV[5],\n"
    "           'hold_ms', ARGV[6], 'initial', ARGV[7])\n"
    "redis.call('SADD', KEYS[2], ARGV[1])\n"
    "return {0, gen}\n";

const char *script_source(enum script_id id)
{
    static const char *const sources[SCRIPT__COUNT] = {
        [SCRIPT_ACQUIRE] = acquire_lua, [SCRIPT_DEDUCT] = deduct_lua,
        [SCRIPT_RELEASE] = release_lua, [SCRIPT_RENEW] = renew_lua,
        [SCRIPT_RESET] = reset_lua,
    };
    return sources[id];
}
