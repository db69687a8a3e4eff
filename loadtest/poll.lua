-- poll.lua -- wrk script: samples a SKU's sold count over time while a sale runs.
--
-- Run with one thread and one connection (`wrk -t1 -c1`). Every `interval` ms it sends
-- GET /admin/skus/{sku} and records (time, sold, segments holding stock, remaining)
-- from the answer; the driver ends it with SIGINT once the sale is over, and done()
-- prints one line `LOADTEST_SAMPLES {json}` with the samples. Times are milliseconds
-- on CLOCK_MONOTONIC, the clock orders.lua uses, so the two can be lined up.
--
-- Script arguments (after `--`), key=value:
--   sku=NAME        the SKU to watch (required)
--   interval=MS     time between polls (default 25)
--   token=T         admin token, sent as "Authorization: Bearer T" (optional)

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } lt_timespec;
int clock_gettime(int clk, lt_timespec *ts);
]]
local ts = ffi.new("lt_timespec")
local function now_ms()
    ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
    return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

local threads = {}

function setup(thread)
    table.insert(threads, thread)
end

local cfg = { interval = 25 }
local req

-- Read by done(): "t,sold,nonempty,remaining;..." and the count of bad answers.
samples = ""
nsamples, nbad = 0, 0
bad = ""

function init(args)
    for _, a in pairs(args) do
        local k, v = tostring(a):match("^([%w_]+)=(.*)$")
        if k then cfg[k] = v end
    end
    cfg.interval = tonumber(cfg.interval)
    local headers = {}
    if cfg.token and cfg.token ~= "" then headers["Authorization"] = "Bearer " .. cfg.token end
    req = wrk.format("GET", "/admin/skus/" .. (cfg.sku or "none"), headers)
end

local first = true
function delay()
    if first then first = false; return 0 end
    return cfg.interval
end

function request()
    return req
end

function response(status, headers, body)
    -- The sample's time is when the answer came: under load the request first waits
    -- in the service's job queue behind orders, and sold is read just before the
    -- reply, so the arrival is the closer of the two ends.
    local t = now_ms()
    local sold = status == 200 and body:match('"sold"%s*:%s*(%-?%d+)')
    local remaining = status == 200 and body:match('"remaining"%s*:%s*(%-?%d+)')
    local segs = status == 200 and body:match('"segment_stock"%s*:%s*%[([^%]]*)%]')
    if not (sold and remaining and segs) then
        nbad = nbad + 1
        if bad == "" then bad = status .. " " .. body:sub(1, 120) end
        return
    end
    local nonempty = 0
    for v in segs:gmatch("%-?%d+") do
        if tonumber(v) > 0 then nonempty = nonempty + 1 end
    end
    samples = samples .. (nsamples > 0 and ";" or "") ..
        string.format("%.2f,%s,%d,%s", t, sold, nonempty, remaining)
    nsamples = nsamples + 1
end

function done(summary, latency, requests)
    local out, nb, firstbad = {}, 0, ""
    for _, t in ipairs(threads) do
        local s = t:get("samples")
        if s and s ~= "" then
            for item in s:gmatch("[^;]+") do
                local a, b, c, d = item:match("^([^,]+),([^,]+),([^,]+),([^,]+)$")
                table.insert(out, string.format("[%s,%s,%s,%s]", a, b, c, d))
            end
        end
        nb = nb + (t:get("nbad") or 0)
        local fb = t:get("bad")
        if firstbad == "" and fb and fb ~= "" then
            firstbad = fb:gsub('[%c"\\]', " ")
        end
    end
    io.write(string.format('LOADTEST_SAMPLES {"samples":[%s],"bad":%d,"first_bad":"%s"}\n',
                           table.concat(out, ","), nb, firstbad))
end
