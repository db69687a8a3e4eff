-- unknown.lua -- wrk script: POST /orders for SKUs nobody made, every name new (each
-- a 404); for watching the service's memory stay flat (issue 21 item 5):
--   wrk -t2 -c32 -d120s -s loadtest/unknown.lua http://127.0.0.1:PORT
-- while sampling VmRSS in /proc/<inventoryd pid>/status.
local n, prefix = 0, nil
local head

function setup(thread)
    thread:set("tid", tostring(math.random(0, 0xffffff)))
end

function init(args)
    prefix = string.format("nx-%s-%x-", tid or "0", os.time())
    head = wrk.format("POST", "/orders", { ["Content-Type"] = "application/json" }, "")
        :gsub("\r\nContent%-Length: 0", ""):gsub("\r\n\r\n$", "")
        .. "\r\nContent-Length: "
end

function request()
    n = n + 1
    local body = '{"sku":"' .. prefix .. n .. '","qty":1}'
    return head .. #body .. "\r\n\r\n" .. body
end
