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

-- What it shares with orders.lua, from this script's folder.
local common = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "common.lua")
local now_ms = common.now_ms
local FOREVER_MS = common.FOREVER_MS
setup = common.setup

local cfg = { sku = "bench", qty = 1, ttl = 60 }
local t_end, path_done, headers, prefix
local queue, qhead, qtail = {}, 1, 0
local granted, n, marker_written = 0, 0, false
c201, held, c409, c503, cother, sent, answered = 0, 0, 0, 0, 0, 0, 0
t_first, t_last = -1, -1
errs = ""
local nerrs = 0

function init(args)
    common.parse_args(args, cfg)
    cfg.nonce = cfg.nonce or common.nonce("rv", tid)
    prefix = string.format("%s-t%d-", cfg.nonce, tid)
    if cfg.active then t_end = now_ms() + tonumber(cfg.active) * 1000 end
    path_done = common.done_path(cfg.donedir, tid)
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
    common.mark_done(path_done, answered)
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
    local sum, first, last, all_errs = common.gather({ "c201", "held", "c409", "c503",
        "cother", "sent", "answered" })
    common.write_result(string.format('"c201":%d,"held":%d,"c200":0,"c409":%d,' ..
        '"c503":%d,"c404":0,"c4xx":0,"c5xx":0,"cother":%d,', sum.c201, sum.held,
        sum.c409, sum.c503, sum.cother), sum.sent, sum.answered, first, last, summary,
        latency, "", common.json_strings(all_errs))
end
