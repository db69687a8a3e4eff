-- soldout.lua -- wrk script: the sold-out storm, the same POST /orders over and over.
--
-- Aimed at a SKU with no stock, every answer should be 409 and nothing may be sold.
-- The request is static (no order_id: the service generates one), so wrk sends it
-- without calling Lua per request. Script arguments (after `--`): sku=NAME qty=N.
-- done() prints `LOADTEST_RESULT {json}` in the same shape as orders.lua.

local threads = {}

function setup(thread)
    table.insert(threads, thread)
end

c201, c200, c409, c503, c404, c4xx, c5xx, cother = 0, 0, 0, 0, 0, 0, 0, 0

function init(args)
    local cfg = { sku = "soldout", qty = 1 }
    for _, a in pairs(args) do
        local k, v = tostring(a):match("^([%w_]+)=(.*)$")
        if k then cfg[k] = v end
    end
    wrk.method = "POST"
    wrk.path = "/orders"
    wrk.headers["Content-Type"] = "application/json"
    wrk.body = string.format('{"sku":"%s","qty":%d}', cfg.sku, tonumber(cfg.qty))
end

function response(status, headers, body)
    if status == 201 then c201 = c201 + 1
    elseif status == 200 then c200 = c200 + 1
    elseif status == 409 then c409 = c409 + 1
    elseif status == 503 then c503 = c503 + 1
    elseif status == 404 then c404 = c404 + 1
    elseif status >= 400 and status < 500 then c4xx = c4xx + 1
    elseif status >= 500 then c5xx = c5xx + 1
    else cother = cother + 1 end
end

function done(summary, latency, requests)
    local keys = { "c201", "c200", "c409", "c503", "c404", "c4xx", "c5xx", "cother" }
    local sum = {}
    for _, k in ipairs(keys) do sum[k] = 0 end
    for _, t in ipairs(threads) do
        for _, k in ipairs(keys) do sum[k] = sum[k] + (t:get(k) or 0) end
    end
    local e = summary.errors
    io.write(string.format(
        'LOADTEST_RESULT {"c201":%d,"c200":%d,"c409":%d,"c503":%d,"c404":%d,' ..
        '"c4xx":%d,"c5xx":%d,"cother":%d,"sent":%d,"answered":%d,"window_s":%.4f,' ..
        '"p50_us":%d,"p99_us":%d,"max_us":%d,"wrk_requests":%d,"wrk_duration_us":%d,' ..
        '"errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},"ids":[]}\n',
        sum.c201, sum.c200, sum.c409, sum.c503, sum.c404, sum.c4xx, sum.c5xx, sum.cother,
        summary.requests, summary.requests, summary.duration / 1e6,
        latency:percentile(50), latency:percentile(99), latency.max,
        summary.requests, summary.duration,
        e.connect, e.read, e.write, e.timeout))
end
