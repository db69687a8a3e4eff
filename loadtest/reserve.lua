-- reserve.lua -- wrk script: reserve then confirm, each confirm an order; counts in done().
--
-- Script arguments (after `--`), key=value: sku=NAME, qty=N (1), nonce=STR, ttl=S
-- (hold length, default 60), active=SEC (send for SEC seconds, then let what is in
-- flight finish), donedir=DIR (as orders.lua: DIR/done-<thread> once drained).
--
-- A thread alternates as answers come: a 201 to POST /reservations queues its id, and
-- the thread's next request confirms the oldest queued id (POST
-- /reservations/{id}/confirm) before it places a new hold. wrk's Lua state is per
-- thread, not per connection, so the queue is the thread's. After the window no new
-- hold is placed and the queued ones are still confirmed, so at the end nothing is
-- held but what a non-201 left.
--
-- done() prints `LOADTEST_RESULT {json}` in orders.lua's shape: c201 = confirms that
-- answered 201 (orders made), held = holds placed, c409/c503 over both kinds, sent and
-- answered requests, the window from the first send to the last answer.

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } lt_timespec;
int clock_gettime(int clk, lt_timespec *ts);
]]
local ts = ffi.new("lt_timespec")
local function now_ms()
    ffi.C.clock_gettime(1, ts)
    return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

local FOREVER_MS = 3600 * 1000
local threads = {}
local next_tid = 0

function setup(thread)
    thread:set("tid", next_tid)
    next_tid = next_tid + 1
    table.insert(threads, thread)
end

local cfg = { sku = "bench", qty = 1, ttl = 60 }
local t_end, path_done, headers, prefix
local queue, qhead, qtail = {}, 1, 0
local granted, n, marker_written = 0, 0, false
c201, held, c409, c503, cother, sent, answered = 0, 0, 0, 0, 0, 0, 0
t_first, t_last = -1, -1
errs = ""
local nerrs = 0

function init(args)
    for _, a in pairs(args) do
        local k, v = tostring(a):match("^([%w_]+)=(.*)$")
        if k then cfg[k] = v end
    end
    if not cfg.nonce then
        math.randomseed(os.time() + tid)
        cfg.nonce = string.format("rv%x%04x", os.time(), math.random(0, 65535))
    end
    prefix = string.format("%s-t%d-", cfg.nonce, tid)
    if cfg.active then t_end = now_ms() + tonumber(cfg.active) * 1000 end
    if cfg.donedir then path_done = string.format("%s/done-%d", cfg.donedir, tid) end
    headers = { ["Content-Type"] = "application/json" }
end

local function closed()
    return t_end ~= nil and now_ms() >= t_end
end

local function maybe_mark_done()
    if marker_written or answered < granted or not closed() or qtail >= qhead then
        return
    end
    marker_written = true
    if path_done then
        local f = io.open(path_done, "w")
        if f then f:write(tostring(answered), "\n"); f:close() end
    end
end

function delay()
    if closed() and qtail < qhead then
        maybe_mark_done()
        return FOREVER_MS
    end
    granted = granted + 1
    return 0
end

function request()
    if granted == 0 then return wrk.format("GET", "/livez") end
    sent = sent + 1
    if sent > granted then granted = sent end
    if t_first < 0 then t_first = now_ms() end
    if qtail >= qhead then
        local id = queue[qhead]
        queue[qhead] = nil
        qhead = qhead + 1
        return wrk.format("POST", "/reservations/" .. id .. "/confirm")
    end
    n = n + 1
    return wrk.format("POST", "/reservations", headers, string.format(
        '{"sku":"%s","qty":%d,"ttl_s":%d,"reservation_id":"%s%d"}', cfg.sku,
        tonumber(cfg.qty), tonumber(cfg.ttl), prefix, n))
end

function response(status, hdrs, body)
    answered = answered + 1
    t_last = now_ms()
    local id = status == 201 and body:match('"reservation_id"%s*:%s*"([^"]+)"')
    if id then
        held = held + 1
        qtail = qtail + 1
        queue[qtail] = id
    elseif status == 201 then c201 = c201 + 1
    elseif status == 409 then c409 = c409 + 1
    elseif status == 503 then c503 = c503 + 1
    else cother = cother + 1 end
    if status ~= 201 and nerrs < 3 then
        errs = errs .. (errs == "" and "" or "\n") .. status .. " " .. body:sub(1, 160)
        nerrs = nerrs + 1
    end
    maybe_mark_done()
end

function done(summary, latency, requests)
    local keys = { "c201", "held", "c409", "c503", "cother", "sent", "answered" }
    local sum = {}
    for _, k in ipairs(keys) do sum[k] = 0 end
    local first, last, all_errs = nil, nil, {}
    for _, t in ipairs(threads) do
        for _, k in ipairs(keys) do sum[k] = sum[k] + (t:get(k) or 0) end
        local f, l = t:get("t_first"), t:get("t_last")
        if f and f >= 0 and (not first or f < first) then first = f end
        if l and l >= 0 and (not last or l > last) then last = l end
        local es = t:get("errs")
        if es and es ~= "" then
            for line in es:gmatch("[^\n]+") do
                table.insert(all_errs, '"' .. line:gsub('[%c"\\]', " ") .. '"')
            end
        end
    end
    local e = summary.errors
    io.write(string.format(
        'LOADTEST_RESULT {"c201":%d,"held":%d,"c200":0,"c409":%d,"c503":%d,"c404":0,' ..
        '"c4xx":0,"c5xx":0,"cother":%d,"sent":%d,"answered":%d,"window_s":%.4f,' ..
        '"p50_us":%d,"p99_us":%d,"max_us":%d,"wrk_requests":%d,"wrk_duration_us":%d,' ..
        '"errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},"ids":[],' ..
        '"bodies":[%s]}\n',
        sum.c201, sum.held, sum.c409, sum.c503, sum.cother, sum.sent, sum.answered,
        (first and last) and (last - first) / 1000 or 0,
        latency:percentile(50), latency:percentile(99), latency.max,
        summary.requests, summary.duration,
        e.connect, e.read, e.write, e.timeout, table.concat(all_errs, ",")))
end
