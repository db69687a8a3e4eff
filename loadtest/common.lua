-- common.lua -- what the wrk scripts orders.lua and reserve.lua share: the clock, the
-- threads' registration, the script arguments, the run nonce, the done marker, and
-- done()'s sums and `LOADTEST_RESULT {json}` line.
--
-- Loaded by each script from its own folder (wrk runs a script in one Lua state per
-- thread and one for setup() and done(): each loads this file once):
--   local common = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "")
--                         .. "common.lua")

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } lt_timespec;
int clock_gettime(int clk, lt_timespec *ts);
]]

local M = {}

M.FOREVER_MS = 3600 * 1000

local ts = ffi.new("lt_timespec")
-- Milliseconds on CLOCK_MONOTONIC: one clock for every thread.
function M.now_ms()
    ffi.C.clock_gettime(1, ts)
    return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

-- Main state: the thread handles, for done(). A script sets `setup = common.setup`;
-- each thread's state then has its number in the global `tid`.
M.threads = {}
local next_tid = 0
function M.setup(thread)
    thread:set("tid", next_tid)
    next_tid = next_tid + 1
    table.insert(M.threads, thread)
end

-- The script arguments (after `--`), key=value, into `cfg` (values stay strings).
function M.parse_args(args, cfg)
    for _, a in pairs(args) do
        local k, v = tostring(a):match("^([%w_]+)=(.*)$")
        if k then cfg[k] = v end
    end
end

-- A run nonce when none was given: `tag`, the time and a random number, so that ids
-- are unique across runs.
function M.nonce(tag, thread_id)
    math.randomseed(os.time() + thread_id)
    return string.format("%s%x%04x", tag, os.time(), math.random(0, 65535))
end

-- The thread's done marker, DIR/done-<thread>, or nil without donedir.
function M.done_path(donedir, thread_id)
    return donedir and string.format("%s/done-%d", donedir, thread_id) or nil
end

-- Write the done marker (the driver then ends wrk): the answers counted.
function M.mark_done(path, answered)
    if not path then return end
    local f = io.open(path, "w")
    if f then f:write(tostring(answered), "\n"); f:close() end
end

-- In done(): `keys` summed over the threads, the first send and the last answer of all
-- threads (nil when none), and each thread's `errs` lines, in thread order.
function M.gather(keys)
    local sum = {}
    for _, k in ipairs(keys) do sum[k] = 0 end
    local first, last, errs = nil, nil, {}
    for _, t in ipairs(M.threads) do
        for _, k in ipairs(keys) do sum[k] = sum[k] + (t:get(k) or 0) end
        local f, l = t:get("t_first"), t:get("t_last")
        if f and f >= 0 and (not first or f < first) then first = f end
        if l and l >= 0 and (not last or l > last) then last = l end
        local es = t:get("errs")
        if es and es ~= "" then
            for line in es:gmatch("[^\n]+") do table.insert(errs, line) end
        end
    end
    return sum, first, last, errs
end

-- `lines` as JSON strings, comma separated (controls blanked, quotes escaped).
function M.json_strings(lines)
    local quoted = {}
    for _, b in ipairs(lines) do
        local q = b:gsub('[%c"\\]', function(ch)
            if ch == '"' or ch == "\\" then return "\\" .. ch end
            return " "
        end)
        table.insert(quoted, '"' .. q .. '"')
    end
    return table.concat(quoted, ",")
end

-- Print `LOADTEST_RESULT {json}`: `counts`, the script's own `"name":n,` pairs, then
-- what every script reports: requests sent and answered, the window from the first
-- send to the last answer, wrk's latency and errors, `ids` and `bodies` (JSON array
-- contents).
function M.write_result(counts, sent, answered, first, last, summary, latency, ids,
                        bodies)
    local e = summary.errors
    local window = (first and last) and (last - first) / 1000 or 0
    io.write(string.format(
        'LOADTEST_RESULT {%s"sent":%d,"answered":%d,"window_s":%.4f,' ..
        '"p50_us":%d,"p99_us":%d,"max_us":%d,"wrk_requests":%d,"wrk_duration_us":%d,' ..
        '"errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},"ids":[%s],' ..
        '"bodies":[%s]}\n',
        counts, sent, answered, window,
        latency:percentile(50), latency:percentile(99), latency.max,
        summary.requests, summary.duration,
        e.connect, e.read, e.write, e.timeout, ids, bodies))
end

return M
