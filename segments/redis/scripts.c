/* scripts.c -- Lua sources of every script the domain runs (ids in scripts.h).
 *
 * Numbers travel as strings: Lua formats numbers with 14 significant digits, so a
 * stock near 2^53 must never pass through a Lua number on its way into a key.
 */
#include "segments/redis/scripts.h"

#include "segments/redis/calls.h"

/* Reply codes (calls.h) spliced into the Lua as numbers. */
#define S_(x) #x
#define S(x) S_(x)

/* ACQUIRE
 * KEYS: order record, segment stock, segment lock, segment epoch.
 * ARGV: qty, token, ttl_ms, epoch.
 * Reply: {STALE} | {EXISTS, record} | {MISSING} | {SHORT, stock} | {BUSY, stock}
 *      | {OK, stock}.
 * The stock is read before the lock is tried, so an empty segment is skipped
 * without ever being locked; stock only rises under a lock, so "short" stays true.
 * Taking a lock the same token already holds is OK, so a retry after a lost reply
 * is safe. */
static const char acquire_lua[] =
    "if redis.call('GET', KEYS[4]) ~= ARGV[4] then return {" S(
        RD_STALE) "} end\n"
                  "local rec = redis.call('HGET', KEYS[1], 'r')\n"
                  "if rec then return {" S(
                      RD_EXISTS) ", rec} end\n"
                                 "local s = redis.call('GET', KEYS[2])\n"
                                 "if not s then return {" S(
                                     RD_MISSING) "} end\n"
                                                 "s = tonumber(s)\n"
                                                 "if s < tonumber(ARGV[1]) then return "
                                                 "{" S(
                                                     RD_SHORT) ", s} end\n"
                                                               "if not redis.call('SET', "
                                                               "KEYS[3], ARGV[2], 'NX', "
                                                               "'PX', ARGV[3])\n"
                                                               "   and redis.call('GET', "
                                                               "KEYS[3]) ~= ARGV[2] "
                                                               "then\n"
                                                               "  return {" S(
                                                                   RD_BUSY) ", s}\n"
                                                                            "end\n"
                                                                            "return {" S(
                                                                                RD_OK) ","
                                                                                       " "
                                                                                       "s"
                                                                                       "}"
                                                                                       "\n";

/* DEDUCT (fenced write; with an empty token it is mode `atomic`'s whole attempt)
 * KEYS: segment lock, stock, sold, orders hash, order record, segment epoch.
 * ARGV: token ('' = no lock), qty, order_id, record JSON, attempt id, epoch.
 * Reply: {FENCED} | {STALE} | {EXISTS, record} | {MISSING} | {SHORT, stock}
 *      | {OK, stock left}.
 * A record written by this very attempt (the script sent again after its reply was
 * lost) is OK: the first run placed the order. Every reply releases the lock when
 * the token still owns it. The lock, the epoch and the stock are read in one MGET
 * (a lock order makes 7 calls, not 10: Redis CPU is the hold-0 bottleneck). */
static const char deduct_lua[] =
    "local locked = ARGV[1] ~= ''\n"
    "local v = redis.call('MGET', KEYS[1], KEYS[6], KEYS[2])\n"
    "local mine = locked and v[1] == ARGV[1]\n"
    "local function done(r)\n"
    "  if mine then redis.call('DEL', KEYS[1]) end\n"
    "  return r\n"
    "end\n"
    "local rec = redis.call('HGET', KEYS[5], 'r')\n"
    "if rec and redis.call('HGET', KEYS[5], 't') == ARGV[5] then\n"
    "  return done({" S(
        RD_OK) ", tonumber(v[3] or '0')})\n"
               "end\n"
               "if locked and not mine then return {" S(
                   RD_FENCED) "} end\n"
                              "if v[2] ~= ARGV[6] then return done({" S(
                                  RD_STALE) "}) end\n"
                                            "if rec then return done({" S(
                                                RD_EXISTS) ", rec}) end\n"
                                                           "if not v[3] then return "
                                                           "done({" S(
                                                               RD_MISSING) "}) end\n"
                                                                           "local s = "
                                                                           "tonumber(v[3]"
                                                                           ")\n"
                                                                           "local q = "
                                                                           "tonumber("
                                                                           "ARGV[2])\n"
                                                                           "if s < q "
                                                                           "then return "
                                                                           "done({" S(
                                                                               RD_SHORT) ", s}) end\n"
                                                                                         "redis.call('DECRBY', KEYS[2], ARGV[2])\n"
                                                                                         "redis.call('INCRBY', KEYS[3], ARGV[2])\n"
                                                                                         "redis.call('HSET', KEYS[4], ARGV[3], ARGV[2])\n"
                                                                                         "redis.call('HSET', KEYS[5], 'r', ARGV[4], 't', ARGV[5])\n"
                                                                                         "return done({" S(
                                                                                             RD_OK) ", s - q})\n";

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
 *       first segment, parts for the others), epoch.
 * ARGV: order_id, record JSON, attempt id, epoch, then per segment: token ('' = mode
 *       atomic, no lock), qty taken from it.
 * Reply: {FENCED} | {STALE} | {EXISTS, record} | {SHORT, stock of each segment}
 *      | {OK, stock left in each segment}. A record written by this attempt is OK.
 * Every reply releases the locks the tokens still own. */
static const char deduct_multi_lua[] =
    "local n = (#KEYS - 1) / 5\n"
    "local function done(r)\n"
    "  for i = 0, n - 1 do\n"
    "    local t = ARGV[5 + 2 * i]\n"
    "    if t ~= '' and redis.call('GET', KEYS[2 + 5 * i]) == t then\n"
    "      redis.call('DEL', KEYS[2 + 5 * i])\n"
    "    end\n"
    "  end\n"
    "  return r\n"
    "end\n"
    "local function stocks(code)\n"
    "  local out = {code}\n"
    "  for i = 0, n - 1 do\n"
    "    out[i + 2] = tonumber(redis.call('GET', KEYS[3 + 5 * i]) or '0')\n"
    "  end\n"
    "  return out\n"
    "end\n"
    "local rec = redis.call('HGET', KEYS[1], 'r')\n"
    "if rec and redis.call('HGET', KEYS[1], 't') == ARGV[3] then\n"
    "  return done(stocks(" S(
        RD_OK) "))\n"
               "end\n"
               "for i = 0, n - 1 do\n"
               "  local t = ARGV[5 + 2 * i]\n"
               "  if t ~= '' and redis.call('GET', KEYS[2 + 5 * i]) ~= t then return "
               "done({" S(
                   RD_FENCED) "}) end\n"
                              "end\n"
                              "for i = 0, n - 1 do\n"
                              "  if redis.call('GET', KEYS[6 + 5 * i]) ~= ARGV[4] then "
                              "return done({" S(
                                  RD_STALE) "}) end\n"
                                            "end\n"
                                            "if rec then return done({" S(
                                                RD_EXISTS) ", rec}) end\n"
                                                           "local st = stocks(" S(
                                                               RD_OK) ")\n"
                                                                      "for i = 0, n - 1 "
                                                                      "do\n"
                                                                      "  if st[i + 2] < "
                                                                      "tonumber(ARGV[6 + "
                                                                      "2 * i]) then "
                                                                      "st[1] = " S(
                                                                          RD_SHORT) " end"
                                                                                    "\n"
                                                                                    "end"
                                                                                    "\n"
                                                                                    "if "
                                                                                    "st["
                                                                                    "1] "
                                                                                    "=="
                                                                                    " " S(
                                                                                        RD_SHORT) " then return done(st) end\n"
                                                                                                  "local left = {" S(
                                                                                                      RD_OK) "}\n"
                                                                                                             "for i = 0, n - 1 do\n"
                                                                                                             "  local q = ARGV[6 + 2 * i]\n"
                                                                                                             "  left[i + 2] = redis.call('DECRBY', KEYS[3 + 5 * i], q)\n"
                                                                                                             "  redis.call('INCRBY', KEYS[4 + 5 * i], q)\n"
                                                                                                             "  redis.call('HSET', KEYS[5 + 5 * i], ARGV[1], q)\n"
                                                                                                             "end\n"
                                                                                                             "redis.call('HSET', KEYS[1], 'r', ARGV[2], 't', ARGV[3])\n"
                                                                                                             "return done(left)\n";

/* CANCEL (give an order's stock back to the segments it came from)
 * KEYS: order record, meta, then per segment of the order: lock, stock, sold, hash,
 *       epoch, and last the cancelled set of the order's first segment.
 * ARGV: order_id, cancelled record JSON, the confirmed record as the caller read it,
 *       epoch, then per segment: token.
 * Reply: {MISSING} (no such order) | {EXISTS, record} (already cancelled: also what
 *      a resend of a cancel that worked finds) | {STALE} (the order is not the one
 *      the caller read, or the SKU was reset) | {FENCED} | {OK}.
 * The units given back are the ones the segments' hashes record for the order, not
 * the caller's. Every reply releases the locks the tokens still own; OK bumps gen. */
static const char cancel_lua[] =
    "local n = (#KEYS - 3) / 5\n"
    "local function done(r)\n"
    "  for i = 0, n - 1 do\n"
    "    if redis.call('GET', KEYS[3 + 5 * i]) == ARGV[5 + i] then\n"
    "      redis.call('DEL', KEYS[3 + 5 * i])\n"
    "    end\n"
    "  end\n"
    "  return r\n"
    "end\n"
    "local rec = redis.call('HGET', KEYS[1], 'r')\n"
    "if not rec then return done({" S(
        RD_MISSING) "}) end\n"
                    "if rec ~= ARGV[3] then\n"
                    "  if redis.call('SISMEMBER', KEYS[#KEYS], ARGV[1]) == 1 then\n"
                    "    return done({" S(
                        RD_EXISTS) ", rec})\n"
                                   "  end\n"
                                   "  return done({" S(
                                       RD_STALE) "})\n"
                                                 "end\n"
                                                 "for i = 0, n - 1 do\n"
                                                 "  if redis.call('GET', KEYS[3 + 5 * "
                                                 "i]) ~= ARGV[5 + i] then return "
                                                 "done({" S(
                                                     RD_FENCED) "}) end\n"
                                                                "end\n"
                                                                "local q = {}\n"
                                                                "for i = 0, n - 1 do\n"
                                                                "  q[i] = "
                                                                "redis.call('HGET', "
                                                                "KEYS[6 + 5 * i], "
                                                                "ARGV[1])\n"
                                                                "  if redis.call('GET', "
                                                                "KEYS[7 + 5 * i]) ~= "
                                                                "ARGV[4] or not q[i] "
                                                                "then\n"
                                                                "    return done({" S(
                                                                    RD_STALE) "})\n"
                                                                              "  end\n"
                                                                              "end\n"
                                                                              "for i = "
                                                                              "0, n - 1 "
                                                                              "do\n"
                                                                              "  "
                                                                              "redis."
                                                                              "call('"
                                                                              "INCRBY', "
                                                                              "KEYS[4 + "
                                                                              "5 * i], "
                                                                              "q[i])\n"
                                                                              "  "
                                                                              "redis."
                                                                              "call('"
                                                                              "DECRBY', "
                                                                              "KEYS[5 + "
                                                                              "5 * i], "
                                                                              "q[i])\n"
                                                                              "  "
                                                                              "redis."
                                                                              "call('"
                                                                              "HDEL', "
                                                                              "KEYS[6 + "
                                                                              "5 * i], "
                                                                              "ARGV[1])\n"
                                                                              "end\n"
                                                                              "redis."
                                                                              "call('"
                                                                              "SADD', "
                                                                              "KEYS[#"
                                                                              "KEYS], "
                                                                              "ARGV[1])\n"
                                                                              "redis."
                                                                              "call('"
                                                                              "HSET', "
                                                                              "KEYS[1], "
                                                                              "'r', "
                                                                              "ARGV[2])\n"
                                                                              "redis."
                                                                              "call('"
                                                                              "HINCRBY', "
                                                                              "KEYS[2], "
                                                                              "'gen', "
                                                                              "1)\n"
                                                                              "return "
                                                                              "done({" S(
                                                                                  RD_OK) "})\n";

/* ADJUST (restock or rebalance a SKU, every segment locked)
 * KEYS: meta, request key, then per segment: lock, stock.
 * ARGV: 'restock' | 'rebalance' | 'spread', units to add (restock), epoch, segment
 *       count, the largest initial stock that may still take the units (decimal),
 *       the request's signature ('' = no request id), then per segment: token.
 * restock spreads the units evenly (lower segments take the remainder) and raises
 * the SKU's initial stock by as much; rebalance spreads the remaining stock evenly;
 * spread does what rebalance does, but only when that puts stock in more segments
 * (the automatic rebalance), and otherwise changes nothing.
 * The limit is compared as decimal strings and the units added with INCRBY, so
 * nothing rounds; with initial <= 2^53 - 1 every sum below is exact in Lua.
 * Reply: {REPLAYED} | {CONFLICT} | {STALE} | {FENCED} | {LIMIT}
 *      | {OK, gen} (gen 0: nothing changed). Releases the locks the tokens own. */
static const char adjust_lua[] =
    "local n = (#KEYS - 2) / 2\n"
    "local function done(r)\n"
    "  for i = 0, n - 1 do\n"
    "    if redis.call('GET', KEYS[3 + 2 * i]) == ARGV[7 + i] then\n"
    "      redis.call('DEL', KEYS[3 + 2 * i])\n"
    "    end\n"
    "  end\n"
    "  return r\n"
    "end\n"
    "if ARGV[6] ~= '' then\n"
    "  local prev = redis.call('GET', KEYS[2])\n"
    "  if prev == ARGV[6] then return done({" S(
        RD_REPLAYED) "}) end\n"
                     "  if prev then return done({" S(
                         RD_CONFLICT) "}) end\n"
                                      "end\n"
                                      "if redis.call('HGET', KEYS[1], 'epoch') ~= "
                                      "ARGV[3]\n"
                                      "   or redis.call('HGET', KEYS[1], 'segments') ~= "
                                      "ARGV[4] then\n"
                                      "  return done({" S(
                                          RD_STALE) "})\n"
                                                    "end\n"
                                                    "for i = 0, n - 1 do\n"
                                                    "  if redis.call('GET', KEYS[3 + 2 * "
                                                    "i]) ~= ARGV[7 + i] then return "
                                                    "done({" S(
                                                        RD_FENCED) "}) end\n"
                                                                   "end\n"
                                                                   "local function "
                                                                   "above(a, b)\n"
                                                                   "  if #a ~= #b then "
                                                                   "return #a > #b end\n"
                                                                   "  return a > b\n"
                                                                   "end\n"
                                                                   "if ARGV[1] == "
                                                                   "'restock'\n"
                                                                   "   and "
                                                                   "above(redis.call('"
                                                                   "HGET', KEYS[1], "
                                                                   "'initial') or '0', "
                                                                   "ARGV[5]) then\n"
                                                                   "  return done({" S(
                                                                       RD_LIMIT) "})\n"
                                                                                 "end\n"
                                                                                 "local "
                                                                                 "functio"
                                                                                 "n "
                                                                                 "split("
                                                                                 "total)"
                                                                                 "\n"
                                                                                 "  "
                                                                                 "local "
                                                                                 "each = "
                                                                                 "math."
                                                                                 "floor("
                                                                                 "total "
                                                                                 "/ n)\n"
                                                                                 "  "
                                                                                 "while "
                                                                                 "each * "
                                                                                 "n > "
                                                                                 "total "
                                                                                 "do "
                                                                                 "each = "
                                                                                 "each - "
                                                                                 "1 end\n"
                                                                                 "  "
                                                                                 "while "
                                                                                 "(each "
                                                                                 "+ 1) * "
                                                                                 "n <= "
                                                                                 "total "
                                                                                 "do "
                                                                                 "each = "
                                                                                 "each + "
                                                                                 "1 end\n"
                                                                                 "  "
                                                                                 "return "
                                                                                 "each, "
                                                                                 "total "
                                                                                 "- each "
                                                                                 "* n\n"
                                                                                 "end\n"
                                                                                 "local "
                                                                                 "total "
                                                                                 "= 0\n"
                                                                                 "local "
                                                                                 "stock "
                                                                                 "= {}\n"
                                                                                 "for i "
                                                                                 "= 0, n "
                                                                                 "- 1 "
                                                                                 "do\n"
                                                                                 "  "
                                                                                 "stock["
                                                                                 "i] = "
                                                                                 "tonumbe"
                                                                                 "r("
                                                                                 "redis."
                                                                                 "call('"
                                                                                 "GET', "
                                                                                 "KEYS[4 "
                                                                                 "+ 2 * "
                                                                                 "i]) or "
                                                                                 "'0')\n"
                                                                                 "  "
                                                                                 "total "
                                                                                 "= "
                                                                                 "total "
                                                                                 "+ "
                                                                                 "stock["
                                                                                 "i]\n"
                                                                                 "end\n"
                                                                                 "if "
                                                                                 "ARGV[1]"
                                                                                 " == "
                                                                                 "'spread"
                                                                                 "' "
                                                                                 "then\n"
                                                                                 "  "
                                                                                 "local "
                                                                                 "nonempt"
                                                                                 "y = 0\n"
                                                                                 "  for "
                                                                                 "i = 0, "
                                                                                 "n - 1 "
                                                                                 "do if "
                                                                                 "stock["
                                                                                 "i] > 0 "
                                                                                 "then "
                                                                                 "nonempt"
                                                                                 "y = "
                                                                                 "nonempt"
                                                                                 "y + 1 "
                                                                                 "end "
                                                                                 "end\n"
                                                                                 "  if "
                                                                                 "math."
                                                                                 "min("
                                                                                 "total, "
                                                                                 "n) <= "
                                                                                 "nonempt"
                                                                                 "y then "
                                                                                 "return "
                                                                                 "done("
                                                                                 "{" S(
                                                                                     RD_OK) ", 0}) end\n"
                                                                                            "end\n"
                                                                                            "if ARGV[1] == 'restock' then\n"
                                                                                            "  local each, extra = split(tonumber(ARGV[2]))\n"
                                                                                            "  for i = 0, n - 1 do\n"
                                                                                            "    local share = each + ((i < extra) and 1 or 0)\n"
                                                                                            "    redis.call('INCRBY', KEYS[4 + 2 * i], string.format('%d', share))\n"
                                                                                            "  end\n"
                                                                                            "  redis.call('HINCRBY', KEYS[1], 'initial', ARGV[2])\n"
                                                                                            "else\n"
                                                                                            "  local each, extra = split(total)\n"
                                                                                            "  for i = 0, n - 1 do\n"
                                                                                            "    local share = each + ((i < extra) and 1 or 0)\n"
                                                                                            "    redis.call('SET', KEYS[4 + 2 * i], string.format('%d', share))\n"
                                                                                            "  end\n"
                                                                                            "end\n"
                                                                                            "if ARGV[6] ~= '' then redis.call('SET', KEYS[2], ARGV[6], 'EX', 86400) end\n"
                                                                                            "return done({" S(
                                                                                                RD_OK) ", redis.call('HINCRBY', KEYS[1], 'gen', 1)})\n";

/* RESET (create, reset or delete a SKU)
 * KEYS: meta, SKU set, request key, then per old-or-new segment i: stock, sold, lock,
 *       orders, parts, cancelled, epoch.
 * ARGV: sku, order key prefix, order key suffix, segments (0 = delete the SKU),
 *       mode, hold_ms, initial, share+1, share, count of segments given share+1,
 *       rebalance (0/1), the epoch and segment count the caller found ('0', '0' for
 *       no SKU), the new epoch, the request's signature ('' = no request id).
 * Refuses (STALE) when the SKU is not as the caller found it, so every key of every
 * old segment is listed and none is orphaned. Deletes every listed segment key and
 * the order records listed by the orders hashes and cancelled sets; then, unless
 * deleting, writes the new shares, zero sold counts, each segment's epoch and a
 * fresh meta whose gen starts at the new epoch.
 * Reply: {REPLAYED} | {CONFLICT} | {STALE} | {MISSING} (delete of no SKU) | {OK}. */
static const char reset_lua[] =
    "if ARGV[15] ~= '' then\n"
    "  local prev = redis.call('GET', KEYS[3])\n"
    "  if prev == ARGV[15] then return {" S(
        RD_REPLAYED) "} end\n"
                     "  if prev then return {" S(
                         RD_CONFLICT) "} end\n"
                                      "end\n"
                                      "local epoch = redis.call('HGET', KEYS[1], "
                                      "'epoch') or '0'\n"
                                      "if epoch ~= ARGV[12]\n"
                                      "   or (redis.call('HGET', KEYS[1], 'segments') or "
                                      "'0') ~= ARGV[13] then\n"
                                      "  return {" S(
                                          RD_STALE) "}\n"
                                                    "end\n"
                                                    "local n = tonumber(ARGV[4])\n"
                                                    "if n == 0 and redis.call('EXISTS', "
                                                    "KEYS[1]) == 0 then return {" S(
                                                        RD_MISSING) "} end\n"
                                                                    "local m = (#KEYS - "
                                                                    "3) / 7\n"
                                                                    "local function "
                                                                    "drop(ids)\n"
                                                                    "  for _, id in "
                                                                    "ipairs(ids) do "
                                                                    "redis.call('DEL', "
                                                                    "ARGV[2] .. id .. "
                                                                    "ARGV[3]) end\n"
                                                                    "end\n"
                                                                    "for i = 0, m - 1 "
                                                                    "do\n"
                                                                    "  local b = 3 + i * "
                                                                    "7\n"
                                                                    "  "
                                                                    "drop(redis.call('"
                                                                    "HKEYS', KEYS[b + "
                                                                    "4]))\n"
                                                                    "  "
                                                                    "drop(redis.call('"
                                                                    "SMEMBERS', KEYS[b + "
                                                                    "6]))\n"
                                                                    "  for k = 1, 7 do "
                                                                    "redis.call('DEL', "
                                                                    "KEYS[b + k]) end\n"
                                                                    "end\n"
                                                                    "if ARGV[15] ~= '' "
                                                                    "then "
                                                                    "redis.call('SET', "
                                                                    "KEYS[3], ARGV[15], "
                                                                    "'EX', 86400) end\n"
                                                                    "redis.call('DEL', "
                                                                    "KEYS[1])\n"
                                                                    "if n == 0 then\n"
                                                                    "  "
                                                                    "redis.call('SREM', "
                                                                    "KEYS[2], ARGV[1])\n"
                                                                    "  return {" S(
                                                                        RD_OK) "}\n"
                                                                               "end\n"
                                                                               "local "
                                                                               "extra = "
                                                                               "tonumber("
                                                                               "ARGV[10])"
                                                                               "\n"
                                                                               "for i = "
                                                                               "0, n - 1 "
                                                                               "do\n"
                                                                               "  local "
                                                                               "b = 3 + "
                                                                               "i * 7\n"
                                                                               "  "
                                                                               "redis."
                                                                               "call('"
                                                                               "SET', "
                                                                               "KEYS[b + "
                                                                               "1], i < "
                                                                               "extra "
                                                                               "and "
                                                                               "ARGV[8] "
                                                                               "or "
                                                                               "ARGV[9])"
                                                                               "\n"
                                                                               "  "
                                                                               "redis."
                                                                               "call('"
                                                                               "SET', "
                                                                               "KEYS[b + "
                                                                               "2], "
                                                                               "'0')\n"
                                                                               "  "
                                                                               "redis."
                                                                               "call('"
                                                                               "SET', "
                                                                               "KEYS[b + "
                                                                               "7], "
                                                                               "ARGV[14])"
                                                                               "\n"
                                                                               "end\n"
                                                                               "redis."
                                                                               "call('"
                                                                               "HSET', "
                                                                               "KEYS[1], "
                                                                               "'segments"
                                                                               "', "
                                                                               "ARGV[4], "
                                                                               "'mode', "
                                                                               "ARGV[5],"
                                                                               "\n"
                                                                               "         "
                                                                               "  "
                                                                               "'hold_ms'"
                                                                               ", "
                                                                               "ARGV[6], "
                                                                               "'initial'"
                                                                               ", "
                                                                               "ARGV[7], "
                                                                               "'rebalanc"
                                                                               "e', "
                                                                               "ARGV[11],"
                                                                               "\n"
                                                                               "         "
                                                                               "  "
                                                                               "'epoch', "
                                                                               "ARGV[14],"
                                                                               " 'gen', "
                                                                               "ARGV[14])"
                                                                               "\n"
                                                                               "redis."
                                                                               "call('"
                                                                               "SADD', "
                                                                               "KEYS[2], "
                                                                               "ARGV[1])"
                                                                               "\n"
                                                                               "return "
                                                                               "{" S(
                                                                                   RD_OK) "}\n";

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
