-- livez.lua -- wrk script: GET /livez, the HTTP ceiling (no Redis behind it).
--
-- A static request, so wrk sends it without calling Lua per request; statuses are
-- counted in response() and done() prints `LOADTEST_RESULT {json}` in the same shape
-- as orders.lua (c200 is the count of good answers here).

local threads = {}

function setup(thread)
    table.insert(threads, thread)
end

c200, cother = 0, 0

function init(args)
    wrk.method = "GET"
    wrk.path = "/livez"
end

function response(status, headers, body)
    if status == 200 then c200 = c200 + 1 else cother = cother + 1 end
end

function done(summary, latency, requests)
    local ok, other = 0, 0
    for _, t in ipairs(threads) do
        ok = ok + (t:get("c200") or 0)
        other = other + (t:get("cother") or 0)
    end
    local e = summary.errors
    io.write(string.format(
        'LOADTEST_RESULT {"c201":0,"c200":%d,"c409":0,"c503":0,"c404":0,"c4xx":0,' ..
        '"c5xx":0,"cother":%d,"sent":%d,"answered":%d,"window_s":%.4f,' ..
        '"p50_us":%d,"p99_us":%d,"max_us":%d,"wrk_requests":%d,"wrk_duration_us":%d,' ..
        '"errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},"ids":[]}\n',
        ok, other, summary.requests, summary.requests, summary.duration / 1e6,
        latency:percentile(50), latency:percentile(99), latency.max,
        summary.requests, summary.duration,
        e.connect, e.read, e.write, e.timeout))
end
