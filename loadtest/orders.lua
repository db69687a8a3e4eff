-- orders.lua -- wrk script: POST /orders with unique order ids; status counts summed in done().
--
-- Script arguments (after `--`), key=value, all optional:
--   sku=NAME       SKU to order (default "bench")
--   qty=N          units per order (default 1)
--   nonce=STR      run nonce; ids are "<nonce>-t<thread>-<n>", unique across threads
--                  and, with a fresh nonce per run, across runs (default: time + random)
--   threads=N      wrk's -t, needed to split `requests` over the threads (default 2)
--   active=SEC     send orders for SEC seconds, then stop sending and let the orders in
--                  flight finish (the "drain"), so every order the service saw has its
--                  response counted here. Set wrk's -d longer than this.
--   requests=N     instead of `active`: send exactly N orders in all, then drain.
--   donedir=DIR    when a thread has sent its last order and has every answer, it
--                  creates DIR/done-<thread>; the driver then ends wrk with SIGINT
--                  instead of waiting out -d.
--   samples=N      order ids of 201s kept per thread for the driver's audit (default 8)
--   times=1        also record when each 201 arrived: done() then prints a second line,
--                  `LOADTEST_TIMES {"t_first":ms,"t201":[ms,...]}` (CLOCK_MONOTONIC ms,
--                  all threads, sorted); meant for sales of a few thousand units
--
-- done() prints one line, `LOADTEST_RESULT {json}`: counts of 201, 200, 409, 503 and
-- other statuses, orders sent and answered, the send window, latency p50/p99/max in
-- microseconds (wrk's histogram, all requests), the sampled order ids and the first
-- few bodies of answers other than 201 and 409.
--
-- Every request goes through delay() first (wrk calls it before each request on a
-- connection), so the budget and the clock are checked before an order is sent: an
-- order is only ever sent when it was granted, and none is sent after the window.

-- What it shares with reserve.lua (the clock, the threads, the arguments, done()'s
-- sums and result line), from this script's folder.
local common = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "common.lua")
local now_ms = common.now_ms
local FOREVER_MS = common.FOREVER_MS

-- Thread states: their own counters (globals, so thread:get() can read them).
setup = common.setup

local cfg = { sku = "bench", qty = 1, threads = 2, samples = 8 }
local budget, t_end, path_done, headers
-- The request is built by concatenation from parts made once in init(): wrk.format
-- builds a table and formats every header per call: 25.6k -> 18.2k instructions per
-- order in wrk (callgrind, 5000 orders), on the cores wrk shares with the service.
local req_head, body_head, body_tail
local granted, marker_written = 0, false

-- Counters read by done(); plain numbers/strings only.
c201, c200, c409, c503, c404, c4xx, c5xx, cother = 0, 0, 0, 0, 0, 0, 0, 0
sent, answered = 0, 0
t_first, t_last = -1, -1
ids = ""
errs = ""
times = ""
local want_times = false
local nsamples, nerrs = 0, 0

function init(args)
    common.parse_args(args, cfg)
    cfg.qty = tonumber(cfg.qty)
    cfg.threads = tonumber(cfg.threads)
    cfg.samples = tonumber(cfg.samples)
    want_times = cfg.times == "1"
    cfg.nonce = cfg.nonce or common.nonce("lt", tid)
    local prefix = string.format("%s-t%d-", cfg.nonce, tid)
    if cfg.requests then
        local total = tonumber(cfg.requests)
        budget = math.floor(total / cfg.threads)
        if tid < total % cfg.threads then budget = budget + 1 end
    end
    if cfg.active then t_end = now_ms() + tonumber(cfg.active) * 1000 end
    path_done = common.done_path(cfg.donedir, tid)
    headers = { ["Content-Type"] = "application/json" }
    -- wrk.format's own output for an empty body, less its Content-Length and blank
    -- line, so Host and any header wrk adds stay as wrk would send them.
    req_head = wrk.format("POST", "/orders", headers, "")
        :gsub("\r\nContent%-Length: 0", ""):gsub("\r\n\r\n$", "")
        .. "\r\nContent-Length: "
    body_head = string.format('{"sku":"%s","qty":%d,"order_id":"%s', cfg.sku, cfg.qty,
                              prefix)
    body_tail = '"}'
end

local function window_closed()
    if budget and granted >= budget then return true end
    if t_end and now_ms() >= t_end then return true end
    return false
end

local function maybe_mark_done()
    if marker_written or answered < granted or not window_closed() then return end
    marker_written = true
    common.mark_done(path_done, answered)
end

function delay()
    if window_closed() then
        maybe_mark_done()
        return FOREVER_MS
    end
    granted = granted + 1
    return 0
end

function request()
    -- wrk calls request() once before the run to check the script (thread 0): that
    -- request is never sent, so it is not counted and uses no id.
    if granted == 0 then
        return wrk.format("POST", "/orders", headers, "{}")
    end
    sent = sent + 1
    -- After a broken connection wrk reconnects and sends without asking delay():
    -- count that order as granted too, so the drain waits for its answer.
    if sent > granted then granted = sent end
    if t_first < 0 then t_first = now_ms() end
    local body = body_head .. sent .. body_tail
    return req_head .. #body .. "\r\n\r\n" .. body
end

function response(status, hdrs, body)
    answered = answered + 1
    t_last = now_ms()
    if status == 201 then
        c201 = c201 + 1
        if want_times then
            times = times .. (times == "" and "" or ",") .. string.format("%.2f", t_last)
        end
        if nsamples < cfg.samples then
            local id = body:match('"order_id"%s*:%s*"([^"]+)"')
            if id then
                ids = ids == "" and id or (ids .. "," .. id)
                nsamples = nsamples + 1
            end
        end
    elseif status == 200 then c200 = c200 + 1
    elseif status == 409 then c409 = c409 + 1
    elseif status == 503 then c503 = c503 + 1
    elseif status == 404 then c404 = c404 + 1
    elseif status >= 400 and status < 500 then c4xx = c4xx + 1
    elseif status >= 500 then c5xx = c5xx + 1
    else cother = cother + 1 end
    -- Keep the first few bodies of answers other than 201/409, for the report.
    if status ~= 201 and status ~= 409 and nerrs < 3 then
        errs = errs .. (errs == "" and "" or "\n") .. status .. " " .. body:sub(1, 160)
        nerrs = nerrs + 1
    end
    maybe_mark_done()
end

function done(summary, latency, requests)
    local sum, first, last, all_errs = common.gather({ "c201", "c200", "c409", "c503",
        "c404", "c4xx", "c5xx", "cother", "sent", "answered" })
    local all_ids, all_times = {}, {}
    for _, t in ipairs(common.threads) do
        local ts201 = t:get("times")
        if ts201 and ts201 ~= "" then
            for v in ts201:gmatch("[^,]+") do table.insert(all_times, tonumber(v)) end
        end
        local s = t:get("ids")
        if s and s ~= "" then
            for id in s:gmatch("[^,]+") do table.insert(all_ids, '"' .. id .. '"') end
        end
    end
    common.write_result(string.format('"c201":%d,"c200":%d,"c409":%d,"c503":%d,' ..
        '"c404":%d,"c4xx":%d,"c5xx":%d,"cother":%d,', sum.c201, sum.c200, sum.c409,
        sum.c503, sum.c404, sum.c4xx, sum.c5xx, sum.cother), sum.sent, sum.answered,
        first, last, summary, latency, table.concat(all_ids, ","),
        common.json_strings(all_errs))
    if #all_times > 0 then
        table.sort(all_times)
        local parts = {}
        for i, v in ipairs(all_times) do parts[i] = string.format("%.2f", v) end
        io.write(string.format('LOADTEST_TIMES {"t_first":%.2f,"t201":[%s]}\n',
                               first or -1, table.concat(parts, ",")))
    end
end
