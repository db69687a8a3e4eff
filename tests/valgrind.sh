#!/usr/bin/env bash
# valgrind.sh -- a short run of the service under valgrind memcheck: a real
# redis-server, a few hundred real requests (orders, bad input, admin, cancel,
# restock, metrics), then SIGTERM. Fails on any memcheck error or definite leak, on
# a failed request and on a failed audit.
#
#   tests/valgrind.sh [BIN]        (BIN defaults to build/inventoryd)
set -euo pipefail

bin=${1:-build/inventoryd}
dir=$(mktemp -d "${TMPDIR:-/tmp}/inv-valgrind.XXXXXX")
redis_pid=
svc_pid=
cleanup() {
    [ -n "$svc_pid" ] && kill -KILL "$svc_pid" 2>/dev/null
    [ -n "$redis_pid" ] && kill -KILL "$redis_pid" 2>/dev/null
    wait 2>/dev/null
    [ -n "${KEEP:-}" ] && echo "kept $dir" || rm -rf "$dir"
}
trap cleanup EXIT

# A port the kernel says is free (bind to port 0), like the test harness: a random
# pick in the ephemeral range could be a client connection's local port.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
fail() {
    echo "valgrind.sh: FAILED: $*" >&2
    [ -f "$dir/valgrind.log" ] && tail -40 "$dir/valgrind.log" >&2
    [ -f "$dir/service.log" ] && tail -5 "$dir/service.log" >&2
    exit 1
}

rport=$(free_port)
redis-server --bind 127.0.0.1 --port "$rport" --dir "$dir" --save '' --appendonly no \
    --daemonize no >"$dir/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done

port=$(free_port)
echo '{}' >"$dir/config.json"
valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite \
    --errors-for-leak-kinds=definite --log-file="$dir/valgrind.log" \
    "$bin" --config "$dir/config.json" --port "$port" --redis "127.0.0.1:$rport" --threads 4 \
    >"$dir/service.log" 2>&1 &
svc_pid=$!
U=http://127.0.0.1:$port
J='Content-Type: application/json'
for _ in $(seq 300); do curl -sf "$U/livez" >/dev/null 2>&1 && break; sleep 0.1; done
curl -sf "$U/livez" >/dev/null || fail "the service did not come up"

expect() { # STATUS METHOD PATH [BODY]
    local want=$1 method=$2 path=$3 body=${4:-}
    local got
    if [ -n "$body" ]; then
        got=$(curl -s -o /dev/null -w '%{http_code}' -X "$method" -H "$J" -d "$body" "$U$path")
    else
        got=$(curl -s -o /dev/null -w '%{http_code}' -X "$method" "$U$path")
    fi
    [ "$got" = "$want" ] || fail "$method $path $body: $got, expected $want"
}

expect 201 PUT /admin/skus/vg '{"stock": 120, "segments": 8}'
for i in $(seq 100); do expect 201 POST /orders "{\"sku\": \"vg\", \"order_id\": \"vg-$i\"}"; done
expect 200 POST /orders '{"sku": "vg", "order_id": "vg-1"}'
expect 201 POST /orders '{"sku": "vg", "qty": 12}'
expect 409 POST /orders '{"sku": "vg", "qty": 9}'
expect 200 DELETE /orders/vg-2
expect 200 POST /admin/skus/vg/restock '{"qty": 5}'
expect 200 POST /admin/skus/vg/rebalance
expect 400 POST /orders '{"sku": "vg", "qty": 0}'
expect 400 POST /orders '{"sku": '
expect 404 GET /nowhere
expect 405 PUT /orders
expect 404 GET /orders/none
expect 200 GET /metrics
expect 200 GET /admin/stats
expect 200 GET /healthz

# The dashboard: its page, a simulated run read through an event stream, the run's
# status and audit; one more stream stays open across SIGTERM (below).
expect 200 GET /
expect 200 GET /ui/app.js
expect 201 PUT /admin/skus/vg-sim '{"stock": 50, "segments": 4}'
expect 202 POST /admin/skus/vg-sim/simulate '{"orders": 60, "concurrency": 4}'
curl -sN --max-time 3 "$U/admin/events?sku=vg-sim&sku=vg" >"$dir/events.txt" || true
grep -q '^data: {"tick":' "$dir/events.txt" || fail "no update on the event stream"
for _ in $(seq 100); do
    curl -s "$U/admin/skus/vg-sim/simulate" | grep -q '"state":"finished"' && break
    sleep 0.2
done
curl -s "$U/admin/skus/vg-sim" | jq -e '.sold == 50 and .remaining == 0 and .orders == 50' \
    >/dev/null || fail "simulated run: $(curl -s "$U/admin/skus/vg-sim")"

sku=$(curl -s "$U/admin/skus/vg")
echo "$sku" | jq -e '.remaining + .sold == .initial and ([.segment_stock[] | select(. < 0)] | length == 0)
    and .initial == 125 and .sold == 111' >/dev/null || fail "audit: $sku"

curl -sN --max-time 60 "$U/admin/events?sku=vg" >"$dir/events-end.txt" &
stream_pid=$!
sleep 1
kill -TERM "$svc_pid"
rc=0
wait "$svc_pid" || rc=$?
svc_pid=
[ "$rc" = 0 ] || fail "the service exited $rc under valgrind"
wait "$stream_pid" || fail "the event stream did not end cleanly at shutdown"
grep -q '^event: shutdown' "$dir/events-end.txt" || fail "no shutdown event on the stream"
echo "valgrind.sh: no memcheck errors, no definite leaks; audit ok ($sku)"
