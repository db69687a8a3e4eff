#!/usr/bin/env bash
# callgrind.sh -- service instructions per order under callgrind, one event loop.
#
#   loadtest/callgrind.sh [BIN] [ORDERS]     (default build/inventoryd, 20000)
#
# Starts a redis-server and BIN (--threads 1) under `valgrind --tool=callgrind` on free
# loopback ports, then for each path -- lock 20 segments hold 0 ms ("lock-h0") and atomic
# 20 segments ("atomic") -- makes a fresh SKU, warms it with 500 orders, zeroes the
# counters (callgrind_control -z), sends ORDERS orders with wrk (loadtest/orders.lua,
# 2 threads, 16 connections), dumps (callgrind_control -d) and prints the service's
# instructions (Ir, every thread) divided by ORDERS. Stops what it started, by pid.
# The figures vary by ~1% from run to run on a shared machine; compare two binaries
# with the same command, back to back.
set -u
bin=${1:-build/inventoryd}
orders=${2:-20000}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/callgrind.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$tmp" >"$tmp/redis.log" 2>&1 &
rpid=$!
sport=$(free_port)
valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.%p" \
    "$bin" --port "$sport" --bind 127.0.0.1 --redis "127.0.0.1:$rport" --threads 1 \
    --log-level warn --access-log false \
    >"$tmp/svc.log" 2>&1 &
spid=$!
cleanup() { kill "$spid" "$rpid" 2>/dev/null; wait "$spid" "$rpid" 2>/dev/null; }
trap cleanup EXIT
url="http://127.0.0.1:$sport"
for _ in $(seq 1 120); do
    curl -fs "$url/livez" >/dev/null 2>&1 && break
    sleep 0.5
done
curl -fs "$url/livez" >/dev/null || { tail "$tmp/svc.log"; exit 2; }
# wrk ends its run with SIGINT once each of its 2 threads has every answer (orders.lua
# puts a marker in the donedir), as loadtest/drive.py does.
orders_wrk() { # sku requests nonce donedir out
    mkdir -p "$4"
    wrk -t 2 -c 16 -d 600s -s "$here/orders.lua" "$url" -- sku="$1" threads=2 \
        requests="$2" nonce="$3" donedir="$4" >"$5" 2>&1 &
    local w=$!
    while kill -0 "$w" 2>/dev/null && [ "$(ls "$4" | wc -l)" -lt 2 ]; do sleep 0.2; done
    kill -INT "$w" 2>/dev/null
    wait "$w"
}
run() { # name mode
    local sku="cg-$1-$$" d="$tmp/done-$1"
    curl -fs -X PUT "$url/admin/skus/$sku" -H 'Content-Type: application/json' \
        -d "{\"stock\":100000000,\"segments\":20,\"mode\":\"$2\",\"hold_ms\":0}" >/dev/null ||
        { echo "PUT $sku failed"; exit 2; }
    orders_wrk "$sku" 500 "w$1$$" "$d.w" /dev/null
    callgrind_control -z "$spid" >/dev/null
    orders_wrk "$sku" "$orders" "m$1$$" "$d" "$tmp/wrk-$1.log"
    rm -f "$tmp"/cg.*
    callgrind_control -d "$spid" >/dev/null
    local ir c201
    ir=$(cat "$tmp"/cg.* | awk '/^summary:/ {s += $2} END {print s}')
    c201=$(grep -o '"c201":[0-9]*' "$tmp/wrk-$1.log" | head -1 | cut -d: -f2)
    echo "$1: $((ir / orders)) instructions per order ($ir Ir, $orders orders, ${c201:-?} answered 201)"
}
run lock-h0 lock
run atomic atomic
