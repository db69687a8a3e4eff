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
static const char release_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                  "  return redis.call('DEL', KEYS[1])\n"
                                  "end\n"
                                  "return 0\n";

/* RENEW  KEYS: lock.  ARGV: token, ttl_ms.  Reply: 1 renewed, 0 not ours. */
static const char renew_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                "  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                                "end\n"
                                "return 0\n";

/* DEDUCT_MULTI (one order over several segments, all or nothing)
 * KEYS: order record, then per segment: lock, stock, sold, hash (orders for the
 *       first segment, parts for the others).
 * ARGV: order_id, record JSON, then per segment: token ('' = mode atomic, no lock),
 *       qty taken from it.
 * Reply: {FENCED} | {EXISTS, record} | {SHORT, stock of each segment}
 *      | {OK, stock left in each segment}. Every reply but FENCED releases every lock. */
static const char deduct_multi_lua[] =
    "local n = (#KEYS - 1) / 4\n"
    "for i = 0, n - 1 do\n"
    "  local t = ARGV[3 + 2 * i]\n"
    "  if t ~= '' and redis.call('GET', KEYS[2 + 4 * i]) ~= t then return {5} end\n"
    "end\n"
    "local function done(r)\n"
    "  for i = 0, n - 1 do\n"
    "    if ARGV[3 + 2 * i] ~= '' then redis.call('DEL', KEYS[2 + 4 * i]) end\n"
    "  end\n"
    "  return r\n"
    "end\n"
    "local rec = redis.call('GET', KEYS[1])\n"
    "if rec then return done({3, rec}) end\n"
    "local short = {2}\n"
    "for i = 0, n - 1 do\n"
    "  local s = tonumber(redis.call('GET', KEYS[3 + 4 * i]) or '0')\n"
    "  short[i + 2] = s\n"
    "  if s < tonumber(ARGV[4 + 2 * i]) then short[1] = -2 end\n"
    "end\n"
    "if short[1] == -2 then short[1] = 2 return done(short) end\n"
    "local left = {0}\n"
    "for i = 0, n - 1 do\n"
    "  local q = ARGV[4 + 2 * i]\n"
    "  left[i + 2] = redis.call('DECRBY', KEYS[3 + 4 * i], q)\n"
    "  redis.call('INCRBY', KEYS[4 + 4 * i], q)\n"
    "  redis.call('HSET', KEYS[5 + 4 * i], ARGV[1], q)\n"
    "end\n"
    "redis.call('SET', KEYS[1], ARGV[2])\n"
    "return done(left)\n";

/* CANCEL (give an order's stock back to the segments it came from)
 * KEYS: order record, meta, then per segment of the order: lock, stock, sold, hash,
 *       and last the cancelled set of the order's first segment.
 * ARGV: order_id, cancelled record JSON, then per segment: token, qty.
 * Reply: {FENCED} | {MISSING} (no such order) | {EXISTS, record} (already cancelled)
 *      | {OK}. Every reply but FENCED releases every lock; OK bumps the SKU's gen. */
static const char cancel_lua[] =
    "local n = (#KEYS - 3) / 4\n"
    "for i = 0, n - 1 do\n"
    "  if redis.call('GET', KEYS[3 + 4 * i]) ~= ARGV[3 + 2 * i] then return {5} end\n"
    "end\n"
    "local function done(r)\n"
    "  for i = 0, n - 1 do redis.call('DEL', KEYS[3 + 4 * i]) end\n"
    "  return r\n"
    "end\n"
    "local rec = redis.call('GET', KEYS[1])\n"
    "if not rec then return done({4}) end\n"
    "if redis.call('HEXISTS', KEYS[6], ARGV[1]) == 0 then return done({3, rec}) end\n"
    "for i = 0, n - 1 do\n"
    "  local q = ARGV[4 + 2 * i]\n"
    "  redis.call('INCRBY', KEYS[4 + 4 * i], q)\n"
    "  redis.call('DECRBY', KEYS[5 + 4 * i], q)\n"
    "  redis.call('HDEL', KEYS[6 + 4 * i], ARGV[1])\n"
    "end\n"
    "redis.call('SADD', KEYS[#KEYS], ARGV[1])\n"
    "redis.call('SET', KEYS[1], ARGV[2])\n"
    "redis.call('HINCRBY', KEYS[2], 'gen', 1)\n"
    "return done({0})\n";

/* ADJUST (restock or rebalance a SKU, every segment locked)
 * KEYS: meta, then per segment: lock, stock.
 * ARGV: 'restock' | 'rebalance' | 'spread', units to add (restock), then per
 *       segment: token.
 * restock spreads the units evenly (lower segments take the remainder) and raises
 * the SKU's initial stock by as much; rebalance spreads the remaining stock evenly;
 * spread does what rebalance does, but only when that puts stock in more segments
 * (the automatic rebalance), and otherwise changes nothing.
 * Reply: {FENCED} | {OK, gen} (gen 0: nothing changed). Releases every lock unless
 * FENCED. */
static const char adjust_lua[] =
    "local n = (#KEYS - 1) / 2\n"
    "for i = 0, n - 1 do\n"
    "  if redis.call('GET', KEYS[2 + 2 * i]) ~= ARGV[3 + i] then return {5} end\n"
    "end\n"
    "local function split(total)\n"
    "  local each = math.floor(total / n)\n"
    "  while each * n > total do each = each - 1 end\n"
    "  while (each + 1) * n <= total do each = each + 1 end\n"
    "  return each, total - each * n\n"
    "end\n"
    "local add = tonumber(ARGV[2])\n"
    "local total = 0\n"
    "local stock = {}\n"
    "for i = 0, n - 1 do\n"
    "  stock[i] = tonumber(redis.call('GET', KEYS[3 + 2 * i]) or '0')\n"
    "  total = total + stock[i]\n"
    "end\n"
    "if ARGV[1] == 'spread' then\n"
    "  local nonempty = 0\n"
    "  for i = 0, n - 1 do if stock[i] > 0 then nonempty = nonempty + 1 end end\n"
    "  if math.min(total, n) <= nonempty then\n"
    "    for i = 0, n - 1 do redis.call('DEL', KEYS[2 + 2 * i]) end\n"
    "    return {0, 0}\n"
    "  end\n"
    "end\n"
    "local each, extra\n"
    "if ARGV[1] == 'restock' then each, extra = split(add) else each, extra = "
    "split(total) end\n"
    "for i = 0, n - 1 do\n"
    "  local share = each + ((i < extra) and 1 or 0)\n"
    "  if ARGV[1] == 'restock' then share = stock[i] + share end\n"
    "  redis.call('SET', KEYS[3 + 2 * i], string.format('%d', share))\n"
    "  redis.call('DEL', KEYS[2 + 2 * i])\n"
    "end\n"
    "if ARGV[1] == 'restock' then redis.call('HINCRBY', KEYS[1], 'initial', ARGV[2]) "
    "end\n"
    "return {0, redis.call('HINCRBY', KEYS[1], 'gen', 1)}\n";

/* RESET
 * KEYS: meta, SKU set, then per old-or-new segment i: stock, sold, lock, orders, parts,
 *       cancelled.
 * ARGV: sku, order key prefix, order key suffix, segments (0 = delete the SKU),
 *       mode, hold_ms, initial, share+1, share, count of segments given share+1,
 *       rebalance (0/1).
 * Deletes every listed segment key and the order records listed by the orders
 * hashes and cancelled sets; then, unless
 * deleting, writes the new shares, zero sold counts and the meta with a bumped gen.
 * Reply: {OK, gen} (gen 0 when deleted). */
static const char reset_lua[] =
    "local m = (#KEYS - 2) / 6\n"
    "local function drop(ids)\n"
    "  for _, id in ipairs(ids) do redis.call('DEL', ARGV[2] .. id .. ARGV[3]) end\n"
    "end\n"
    "for i = 0, m - 1 do\n"
    "  local b = 2 + i * 6\n"
    "  drop(redis.call('HKEYS', KEYS[b + 4]))\n"
    "  drop(redis.call('SMEMBERS', KEYS[b + 6]))\n"
    "  for k = 1, 6 do redis.call('DEL', KEYS[b + k]) end\n"
    "end\n"
    "local n = tonumber(ARGV[4])\n"
    "if n == 0 then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  redis.call('SREM', KEYS[2], ARGV[1])\n"
    "  return {0, 0}\n"
    "end\n"
    "local extra = tonumber(ARGV[10])\n"
    "for i = 0, n - 1 do\n"
    "  local b = 2 + i * 6\n"
    "  redis.call('SET', KEYS[b + 1], i < extra and ARGV[8] or ARGV[9])\n"
    "  redis.call('SET', KEYS[b + 2], '0')\n"
    "end\n"
    "local gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)\n"
    "redis.call('HSET', KEYS[1], 'segments', ARGV[4], 'mode', ARGV[5],\n"
    "           'hold_ms', ARGV[6], 'initial', ARGV[7], 'rebalance', ARGV[11])\n"
    "redis.call('SADD', KEYS[2], ARGV[1])\n"
    "return {0, gen}\n";

const char *script_source(enum script_id id)
{
    static const char *const sources[SCRIPT__COUNT] = {
        [SCRIPT_ACQUIRE] = acquire_lua,
        [SCRIPT_DEDUCT] = deduct_lua,
        [SCRIPT_DEDUCT_MULTI] = deduct_multi_lua,
        [SCRIPT_RELEASE] = release_lua,
        [SCRIPT_RENEW] = renew_lua,
        [SCRIPT_RESET] = reset_lua,
        [SCRIPT_CANCEL] = cancel_lua,
        [SCRIPT_ADJUST] = adjust_lua,
    };
    return sources[id];
}
