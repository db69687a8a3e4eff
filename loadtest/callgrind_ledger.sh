#!/usr/bin/env bash
# callgrind_ledger.sh -- instructions per order with the ledger's events off and on (issue 24).
#
#   loadtest/callgrind_ledger.sh [BIN] [ORDERS] [service|redis]  (build/inventoryd, 5000, service)
#
# Starts a redis-server, a PostgreSQL 15 of its own (initdb in a temp dir) and BIN
# (--threads 1, no ledger) on free loopback ports, the service or the redis-server
# (third argument) under `valgrind --tool=callgrind --separate-threads=yes`. Three
# runs, each a fresh SKU (lock, 20 segments, hold 0) warmed with 300 orders, then the
# counters zeroed, ORDERS orders sent (loadtest/orders.lua), and the counters dumped:
#   off     the SKU made by the service without a ledger: no event written
#   events  the SKU made by a second service with --ledger (its segments' ledger flag
#           set), which is stopped before the orders: the orders, through the first
#           service, write their events and no sink reads them (the order path alone)
#   on      the ledger service started again and the orders sent through it, the
#           counters dumped once its sink has copied them all (backlog 0): the order
#           path and the sink
# Prints the process's instructions (Ir, every thread) per order; for the service, the
# sink thread's apart. Stops what it started, by pid. Deterministic to ~1-2%.
set -u
bin=${1:-build/inventoryd}
orders=${2:-5000}
who=${3:-service}
here=$(cd "$(dirname "$0")" && pwd)
pgbin=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
tmp=$(mktemp -d /tmp/callgrind_ledger.XXXXXX)
chmod 755 "$tmp"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
vg=(valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$tmp/cg.%p")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
}
trap cleanup EXIT

as_pg=()
mkdir -p "$tmp/pg"
if [ "$(id -u)" = 0 ]; then
    chown postgres:postgres "$tmp/pg"
    as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups --)
fi
"${as_pg[@]}" "$pgbin/initdb" -D "$tmp/pg/data" -U postgres -A trust -E UTF8 --locale C \
    >"$tmp/initdb.log" 2>&1 || { echo "initdb failed"; exit 2; }
pport=$(free_port)
"${as_pg[@]}" "$pgbin/postgres" -D "$tmp/pg/data" -p "$pport" -c listen_addresses=127.0.0.1 \
    -c unix_socket_directories="$tmp/pg" -c fsync=off >"$tmp/pg.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 60); do "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$pport" && break; sleep 0.5; done
pg="postgres://postgres@127.0.0.1:$pport/postgres"

rport=$(free_port)
rcmd=(redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp")
[ "$who" = redis ] && rcmd=("${vg[@]}" "${rcmd[@]}")
"${rcmd[@]}" >"$tmp/redis.log" 2>&1 &
rpid=$!
pids+=("$rpid")
for _ in $(seq 1 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.2; done

start_service() { # port [--ledger ...]: the pid in $spid
    local port=$1
    shift
    local cmd=("$bin" --port "$port" --bind 127.0.0.1 --redis "127.0.0.1:$rport" --threads 1
        --log-level warn --access-log false "$@")
    [ "$who" = service ] && cmd=("${vg[@]}" "${cmd[@]}")
    "${cmd[@]}" >>"$tmp/svc-$port.log" 2>&1 &
    spid=$!
    pids+=("$spid")
    for _ in $(seq 1 120); do
        curl -fs "http://127.0.0.1:$port/livez" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    echo "the service on $port did not start"
    exit 2
}
stop() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }
orders_wrk() { # url sku requests nonce donedir out
    mkdir -p "$5"
    wrk -t 2 -c 16 -d 600s -s "$here/orders.lua" "$1" -- sku="$2" threads=2 \
        requests="$3" nonce="$4" donedir="$5" >"$6" 2>&1 &
    local w=$!
    while kill -0 "$w" 2>/dev/null && [ "$(ls "$5" | wc -l)" -lt 2 ]; do sleep 0.2; done
    kill -INT "$w" 2>/dev/null
    wait "$w"
}
make_sku() { # url sku
    curl -fs -X PUT "$1/admin/skus/$2" -H 'Content-Type: application/json' \
        -d '{"stock":100000000,"segments":20,"mode":"lock","hold_ms":0}' >/dev/null ||
        { echo "PUT $2 failed"; exit 2; }
}
backlog() { # url: the sink's backlog (events not yet copied)
    curl -fs "$1/metrics" | awk '/^inventory_ledger_backlog_events / {print $2}'
}
measure() { # name url sku pid-measured [sink url]
    local name=$1 url=$2 sku=$3 pid=$4 sink=${5:-} d="$tmp/done-$1"
    orders_wrk "$url" "$sku" 300 "w$name$$" "$d.w" /dev/null
    if [ -n "$sink" ]; then
        for _ in $(seq 1 600); do [ "$(backlog "$sink")" = 0 ] && break; sleep 0.5; done
    fi
    callgrind_control -z "$pid" >/dev/null
    orders_wrk "$url" "$sku" "$orders" "m$name$$" "$d" "$tmp/wrk-$name.log"
    if [ -n "$sink" ]; then
        for _ in $(seq 1 600); do [ "$(backlog "$sink")" = 0 ] && break; sleep 0.5; done
    fi
    rm -f "$tmp"/cg.*
    callgrind_control -d "$pid" >/dev/null
    sleep 1
    local ir sink_ir=0 c201 f
    ir=$(cat "$tmp"/cg.* | awk '/^summary:/ {s += $2} END {print s}')
    for f in "$tmp"/cg.*; do # the sink thread: the one that ran its pass
        if grep -q 'rd_ev_read\|pgl_copy_send' "$f"; then
            sink_ir=$((sink_ir + $(awk '/^summary:/ {print $2}' "$f")))
        fi
    done
    c201=$(grep -o '"c201":[0-9]*' "$tmp/wrk-$name.log" | head -1 | cut -d: -f2)
    printf '%-7s %s: %d instructions per order (sink thread %d; %s orders, %s answered 201)\n' \
        "$name" "$who" $((ir / orders)) $((sink_ir / orders)) "$orders" "${c201:-?}"
}

aport=$(free_port)
start_service "$aport"
apid=$spid
a="http://127.0.0.1:$aport"
lport=$(free_port)
l="http://127.0.0.1:$lport"
mpid() { if [ "$who" = redis ]; then echo "$rpid"; else echo "$1"; fi; }

make_sku "$a" "cg-off-$$"
measure off "$a" "cg-off-$$" "$(mpid "$apid")"

start_service "$lport" --ledger "$pg"
make_sku "$l" "cg-ev-$$"
stop "$spid"
measure events "$a" "cg-ev-$$" "$(mpid "$apid")"

start_service "$lport" --ledger "$pg"
make_sku "$l" "cg-on-$$"
measure on "$l" "cg-on-$$" "$(mpid "$spid")" "$l"
