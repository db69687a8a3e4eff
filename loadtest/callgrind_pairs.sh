#!/usr/bin/env bash
# callgrind_pairs.sh -- instructions per reserve + confirm pair against per order, under callgrind.
#
#   loadtest/callgrind_pairs.sh [BIN] [PAIRS] [service|redis]   (build/inventoryd, 2000, service)
#
# Starts a redis-server and BIN (--threads 1) on free loopback ports, one of them (the
# third argument) under `valgrind --tool=callgrind`; makes a SKU (lock, 20 segments,
# hold 0), warms it with 200 pairs and 200 orders, then zeroes the counters, sends PAIRS
# reserve + confirm pairs one after the other on one keep-alive connection (a Python
# client: the pairs need each place's answer before their confirm), dumps, and does the
# same with PAIRS orders. Prints the process's instructions (Ir, every thread) per pair
# and per order. Stops what it started, by pid. The figures are deterministic to ~1%;
# compare two binaries with the same command.
set -u
bin=${1:-build/inventoryd}
n=${2:-2000}
who=${3:-service}
tmp=$(mktemp -d /tmp/callgrind_pairs.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
vg=(valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.%p")
rport=$(free_port)
sport=$(free_port)
rcmd=(redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp")
scmd=("$bin" --port "$sport" --bind 127.0.0.1 --redis "127.0.0.1:$rport" --threads 1
    --log-level warn --access-log false)
if [ "$who" = redis ]; then rcmd=("${vg[@]}" "${rcmd[@]}"); else scmd=("${vg[@]}" "${scmd[@]}"); fi
"${rcmd[@]}" >"$tmp/redis.log" 2>&1 &
rpid=$!
for _ in $(seq 1 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.2; done
"${scmd[@]}" >"$tmp/svc.log" 2>&1 &
spid=$!
cleanup() {
    kill "$spid" "$rpid" 2>/dev/null
    wait "$spid" "$rpid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
target=$spid
[ "$who" = redis ] && target=$rpid
url="http://127.0.0.1:$sport"
for _ in $(seq 1 120); do
    curl -fs "$url/livez" >/dev/null 2>&1 && break
    sleep 0.5
done
curl -fs -X PUT "$url/admin/skus/cgp$$" -H 'Content-Type: application/json' \
    -d '{"stock":100000000,"segments":20,"mode":"lock","hold_ms":0}' >/dev/null ||
    { echo "PUT failed"; tail "$tmp/svc.log"; exit 2; }
send() { # kind (p: pairs, o: orders) count tag; prints the requests that did not answer 201
    python3 - "$sport" "cgp$$" "$1" "$2" "$3" <<'PY'
import http.client, json, sys
port, sku, kind, n, tag = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
c = http.client.HTTPConnection("127.0.0.1", port)
def post(path, body=None):
    c.request("POST", path, json.dumps(body) if body else None,
              {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    return r.status
bad = 0
for i in range(n):
    if kind == "p":
        bad += post("/reservations", {"sku": sku, "qty": 1, "ttl_s": 60,
                                      "reservation_id": f"{tag}{i}"}) != 201
        bad += post(f"/reservations/{tag}{i}/confirm") != 201
    else:
        bad += post("/orders", {"sku": sku, "qty": 1, "order_id": f"{tag}{i}"}) != 201
print(bad)
PY
}
ir() {
    rm -f "$tmp"/cg.*
    callgrind_control -d "$target" >/dev/null
    cat "$tmp"/cg.* | awk '/^summary:/ {s += $2} END {print s}'
}
send p 200 w >/dev/null
send o 200 wo >/dev/null
callgrind_control -z "$target" >/dev/null
badp=$(send p "$n" p)
irp=$(ir)
callgrind_control -z "$target" >/dev/null
bado=$(send o "$n" o)
iro=$(ir)
echo "$who: $((irp / n)) instructions per reserve + confirm pair, $((iro / n)) per order" \
    "($n each; not 201: ${badp} pair requests, ${bado} orders)"
