#!/usr/bin/env bash
# run_smoke.sh -- `make run` as a user types it, for each store and lock service: in
# DIR (default: this repository), each variant is started in a process group of its
# own with a free HTTP and Redis port, a SKU is PUT (with the variant's lock), one
# order placed and replayed, then the group is stopped by its pid. Prints each
# answer; exits 1 when any variant did not answer PUT 201, order 201, replay 200.
#
#   service/run_smoke.sh [DIR]
set -u
cd "${1:-$(dirname "$0")/..}" || exit 1
bad=0
try() {
    local name=$1 lock=$2
    shift 2
    local port=$((18100 + RANDOM % 500)) rport=$((26500 + RANDOM % 500))
    local log=/tmp/run-smoke-$name.log
    echo "== $name: make run $*"
    setsid env INVENTORY_PORT=$port INVENTORY_REDIS=127.0.0.1:$rport make run "$@" >"$log" 2>&1 &
    local pid=$! ok=0 got=""
    for _ in $(seq 1 120); do
        curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && { ok=1; break; }
        sleep 1
    done
    if [ $ok = 1 ]; then
        local body="{\"stock\":100,\"segments\":4}" url="http://127.0.0.1:$port"
        [ -n "$lock" ] && body="{\"stock\":100,\"segments\":4,\"mode\":\"lock\",\"lock\":\"$lock\"}"
        local order="{\"sku\":\"smoke-$name\",\"qty\":3,\"order_id\":\"smoke-o-$name\"}"
        local j=(-s -o /dev/null -w "%{http_code}" -H "Content-Type: application/json")
        got="$(curl "${j[@]}" -X PUT -d "$body" "$url/admin/skus/smoke-$name")"
        got="$got $(curl "${j[@]}" -X POST -d "$order" "$url/orders")"
        got="$got $(curl "${j[@]}" -X POST -d "$order" "$url/orders")"
        echo "PUT, order, replay: $got"
    else
        echo "no /healthz after 120 s (log: $log)"
    fi
    [ "$got" = "201 201 200" ] || bad=1
    kill -INT -- -$pid 2>/dev/null
    sleep 3
    kill -TERM -- -$pid 2>/dev/null
    wait $pid 2>/dev/null
}
try redis ""
try postgres "" STORE=postgres
try zookeeper zookeeper LOCK=zookeeper
try redlock redlock LOCK=redlock
try memcached memcached LOCK=memcached
try pg-zookeeper zookeeper STORE=postgres LOCK=zookeeper
exit $bad
