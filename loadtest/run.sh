#!/usr/bin/env bash
# run.sh -- the load test: lock strategies side by side, every run audited, then plotted.
#
# Starts its own redis-server and inventoryd (unless --url), runs each scenario with wrk,
# audits the SKU through the admin API after every run, prints a markdown table and the
# target ratios, and writes loadtest/results/<timestamp>.{md,json} and PNG plots.
# Exit status: 0 when every audit passed, 1 when any failed, 2 on a setup error.

set -u -o pipefail

SCRIPT_DIR=$(cd "$(dirname "$0")" && pwd)

usage() {
    cat <<'EOF'
Usage: loadtest/run.sh [options]

Runs the inventory load test: for each scenario a fresh SKU, a wrk run of fixed length
and connection count, then an audit through the admin API (remaining + sold = initial,
no segment below 0, sold = the 201s wrk saw, orders = sold, sampled order ids readable).
A failed audit prints FAILED and makes the exit status 1.

Scenarios, in run order (--only picks groups)
  hold0     hold 0 ms: global lock (1 segment), segment locks (20), atomic (20 segments)
  redis     redis-benchmark -c <connections> running the same deduction Lua: Redis ceiling
  livez     GET /livez: the HTTP ceiling
  soldout   sold-out storm: orders against a SKU with 0 stock, every answer 409; run
            right after livez with the same wrk settings and duration, for the ratio
            sold-out req/s / livez req/s
  curve     lock mode, hold 20 ms, segments 1 2 4 8 16 20 32 64 (1 vs 20 is the seed's
            comparison; --quick: 1 4 20 64)
  flash     flash sale: 1000 stock over 20 segments, a fixed number of orders (100000;
            --quick: 20000): exactly 1000 x 201, the rest 409
  rebalance the end of a sale with and without automatic rebalancing: two SKUs, 2000
            stock, 20 segments, lock, hold 20 ms, "rebalance" false / true, made uneven
            the same way first (9 orders of qty 100 empty 9 segments, 5 of qty 60 leave
            40 in 5 more), then sold out by orders of 1; orders/s while the last 10% of
            the stock sells, from the 201s' arrival times and from polling
            GET /admin/skus/{sku} every 25 ms

Measures: orders/s is 201s per second of the send window; after the window wrk sends
nothing more and waits for the orders in flight, so every order the service handled
was counted. p50/p99 come from wrk's latency histogram (all requests of the run).
Targets (ratios from this one run) are printed and saved but do not fail the run:
20 / 1 segments at hold 20 ms >= 19; lock / atomic at hold 0 ms >= 0.6; atomic /
redis-benchmark >= 0.35; p99 of lock 20 segments at hold 0 ms <= 10 ms; sold-out storm
req/s / GET /livez req/s >= 0.8.

Options
  --bin PATH           service binary to start (default build/inventoryd)
  --url URL            use a running service instead of starting redis-server and one
  --redis HOST:PORT    with --url: the Redis to run redis-benchmark against (else skipped)
  --admin-token T      send "Authorization: Bearer T" to /admin/* (and start the service
                       with it)
  --connections N      wrk connections, also redis-benchmark -c (default 100)
  --wrk-threads N      wrk threads (default 2)
  --service-threads N  --threads (worker pool) for the service we start (default 64)
  --duration S         seconds of orders per timed scenario (default 10; --quick 3)
  --flash-requests N   orders sent in the flash sale (default 100000; --quick 20000)
  --only LIST          comma-separated scenario groups to run (default: all)
  --quick              short runs and fewer curve points: everything in under 60 s
  --out DIR            where results go (default loadtest/results)
  --keep               keep the temp dir (logs, raw wrk output) and print its path
  --update-docs        also copy the plots to docs/ and rewrite the generated part of
                       docs/BENCHMARKS.md (meant for a full run)
  -h, --help           this text

Environment: NO_COLOR=1 turns off the red/green.
EOF
}

# ---------------------------------------------------------------------------- options
BIN=build/inventoryd
URL=
REDIS_ADDR=
ADMIN_TOKEN=
CONNS=100
WRK_THREADS=2
SVC_THREADS=64
DURATION=
FLASH_REQUESTS=
ONLY=curve,hold0,flash,soldout,livez,redis,rebalance
QUICK=0
OUT_DIR=$SCRIPT_DIR/results
KEEP=0
UPDATE_DOCS=0
ARGV_ORIG="$*"

die() { echo "run.sh: $*" >&2; exit 2; }
need_val() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value (see --help)"; }
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

while [ $# -gt 0 ]; do
    case $1 in
        --bin) need_val "$@"; BIN=$2; shift 2 ;;
        --url) need_val "$@"; URL=${2%/}; shift 2 ;;
        --redis) need_val "$@"; REDIS_ADDR=$2; shift 2 ;;
        --admin-token) need_val "$@"; ADMIN_TOKEN=$2; shift 2 ;;
        --connections) need_val "$@"; CONNS=$2; shift 2 ;;
        --wrk-threads) need_val "$@"; WRK_THREADS=$2; shift 2 ;;
        --service-threads) need_val "$@"; SVC_THREADS=$2; shift 2 ;;
        --duration) need_val "$@"; DURATION=$2; shift 2 ;;
        --flash-requests) need_val "$@"; FLASH_REQUESTS=$2; shift 2 ;;
        --only) need_val "$@"; ONLY=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --out) need_val "$@"; OUT_DIR=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        --update-docs) UPDATE_DOCS=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done

if [ "$QUICK" = 1 ]; then
    : "${DURATION:=3}"
    : "${FLASH_REQUESTS:=20000}"
    CURVE_SEGMENTS="1 4 20 64"
    LIVEZ_SECS=2
    REDIS_BENCH_N=60000
else
    : "${DURATION:=10}"
    : "${FLASH_REQUESTS:=100000}"
    CURVE_SEGMENTS="1 2 4 8 16 20 32 64"
    LIVEZ_SECS=10
    REDIS_BENCH_N=500000
fi

# The storm and the livez reference run with the same wrk settings for the same time.
SOLDOUT_SECS=$LIVEZ_SECS
# The end-of-sale scenario (rebalance): REB_STOCK over REB_SEGS segments (100 each),
# then orders placed before the sale, COUNTxQTY: 9 of qty 100 empty 9 segments (one
# short of half: no automatic rebalance yet), 5 of qty 60 leave 40 in 5 of the rest;
# 6 segments keep 100. 800 units are left for the sale.
REB_STOCK=2000 REB_SEGS=20 REB_HOLD=20 REB_PRE="9x100 5x60" REB_POLL_MS=25
REB_PRE_TEXT="9 orders of qty 100 and 5 of qty 60 first: 9 segments empty, 5 hold 40, 6 hold 100"

for v in CONNS WRK_THREADS DURATION FLASH_REQUESTS; do
    is_uint "${!v}" && [ "${!v}" -gt 0 ] || die "bad value for $v: '${!v}'"
done
[ -z "$SVC_THREADS" ] || is_uint "$SVC_THREADS" || die "bad --service-threads '$SVC_THREADS'"
[ "$CONNS" -ge "$WRK_THREADS" ] || die "--connections must be >= --wrk-threads"
[ "$FLASH_REQUESTS" -ge 1000 ] || die "--flash-requests must be >= 1000 (the stock)"
for g in ${ONLY//,/ }; do
    case $g in curve|hold0|flash|soldout|livez|redis|rebalance) ;;
        *) die "unknown scenario '$g'" ;; esac
done
wants() { [[ ",$ONLY," == *",$1,"* ]]; }

for tool in wrk jq curl gnuplot; do
    command -v "$tool" >/dev/null || die "$tool not found (make deps installs it)"
done
if [ -z "$URL" ]; then
    command -v redis-server >/dev/null || die "redis-server not found (make deps)"
    [ -x "$BIN" ] || die "service binary '$BIN' not found or not executable (run make)"
fi

if [ -z "${NO_COLOR:-}" ]; then
    RED=$'\033[31m' GREEN=$'\033[32m' YELLOW=$'\033[33m' BOLD=$'\033[1m' RESET=$'\033[0m'
else
    RED= GREEN= YELLOW= BOLD= RESET=
fi

# ---------------------------------------------------------------------------- processes
TMP=$(mktemp -d /tmp/loadtest.XXXXXX) || die "mktemp failed"
REDIS_PID= SVC_PID= WRK_PID= BENCH_PID= POLL_PID=

stop_pid() { # pid [grace seconds]: TERM, wait, then KILL
    local pid=$1 grace=${2:-5} i
    [ -n "$pid" ] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < grace * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 0
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_pid "$WRK_PID" 2
    stop_pid "$POLL_PID" 2
    stop_pid "$BENCH_PID" 2
    stop_pid "$SVC_PID" 5
    stop_pid "$REDIS_PID" 5
    if [ "$KEEP" = 1 ]; then
        echo "run.sh: kept $TMP"
    else
        rm -rf "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted" >&2; exit 130' INT TERM

# A loopback port nothing listens on, below the kernel's ephemeral range so that no
# client socket (wrk's connections, other test runs) can be holding it.
free_port() {
    local lo=32768 p i
    read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
    [ "$lo" -gt 11000 ] || lo=32768
    for ((i = 0; i < 100; i++)); do
        p=$((10000 + RANDOM % (lo - 10000)))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# Polls until `cmd...` succeeds (0), the process $2 exits (1) or $1 seconds pass (1).
wait_up() {
    local secs=$1 pid=$2 i
    shift 2
    for ((i = 0; i < secs * 10; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# Each start retries on a fresh port: another process may take the one we picked.
start_redis() {
    local try
    mkdir -p "$TMP/redis"
    for try in 1 2 3 4 5; do
        REDIS_PORT=$(free_port) || die "no free port for redis-server"
        redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$TMP/redis" \
            --save '' --appendonly no --daemonize no --maxclients 10000 \
            >"$TMP/redis.log" 2>&1 &
        REDIS_PID=$!
        if wait_up 10 "$REDIS_PID" redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping; then
            REDIS_ADDR=127.0.0.1:$REDIS_PORT
            return 0
        fi
        stop_pid "$REDIS_PID" 2
        REDIS_PID=
    done
    tail -n 20 "$TMP/redis.log" >&2
    die "redis-server did not start"
}

start_service() {
    local port args try
    for try in 1 2 3 4 5; do
        port=$(free_port) || die "no free port for the service"
        args=(--port "$port" --bind 127.0.0.1 --redis "$REDIS_ADDR")
        [ -z "$SVC_THREADS" ] || args+=(--threads "$SVC_THREADS")
        [ -z "$ADMIN_TOKEN" ] || args+=(--admin-token "$ADMIN_TOKEN")
        "$BIN" "${args[@]}" >"$TMP/inventoryd.log" 2>&1 &
        SVC_PID=$!
        URL=http://127.0.0.1:$port
        if wait_up 15 "$SVC_PID" curl -fsS -o /dev/null "$URL/livez"; then
            echo "service: $BIN ${args[*]}"
            return 0
        fi
        stop_pid "$SVC_PID" 5
        SVC_PID=
    done
    tail -n 30 "$TMP/inventoryd.log" >&2
    die "the service did not answer GET /livez"
}

service_alive() {
    [ -z "$SVC_PID" ] || kill -0 "$SVC_PID" 2>/dev/null
}

# ---------------------------------------------------------------------------- HTTP
# api METHOD PATH [BODY]: the body goes to $TMP/resp, the status code to stdout.
api() {
    local auth=()
    [ -z "$ADMIN_TOKEN" ] || auth=(-H "Authorization: Bearer $ADMIN_TOKEN")
    if [ $# -ge 3 ]; then
        curl -sS -m 30 -o "$TMP/resp" -w '%{http_code}' -X "$1" "${auth[@]}" \
            -H 'Content-Type: application/json' --data-binary "$3" "$URL$2" 2>>"$TMP/curl.log"
    else
        curl -sS -m 30 -o "$TMP/resp" -w '%{http_code}' -X "$1" "${auth[@]}" \
            "$URL$2" 2>>"$TMP/curl.log"
    fi
}

# stat_counter NAME: one counter of GET /admin/stats, or nothing.
stat_counter() {
    [ "$(api GET /admin/stats)" = 200 ] || return 0
    jq -r --arg k "$1" '.[$k] // empty' "$TMP/resp" 2>/dev/null
}

# ---------------------------------------------------------------------------- scenarios
NONCE=$(printf 'lt%x%04x' "$(date +%s)" $((RANDOM)))
ROWS=$TMP/rows.jsonl
: >"$ROWS"
FAILED_COUNT=0
SCEN_INDEX=0

# Runs wrk in the background; with a done-dir, sends SIGINT once every thread has put
# its marker there (all its orders answered) instead of waiting out the -d cap.
# run_wrk SCRIPT OUTFILE CAP_SECONDS DONEDIR [script args...]
run_wrk() {
    local script=$1 out=$2 cap=$3 donedir=$4 n
    shift 4
    wrk -t "$WRK_THREADS" -c "$CONNS" -d "${cap}s" --timeout 30s -s "$script" "$URL" \
        -- "$@" >"$out" 2>&1 &
    WRK_PID=$!
    if [ -n "$donedir" ]; then
        while kill -0 "$WRK_PID" 2>/dev/null; do
            n=$(find "$donedir" -type f -name "done-*" | wc -l)
            if [ "$n" -ge "$WRK_THREADS" ]; then
                kill -INT "$WRK_PID" 2>/dev/null
                break
            fi
            sleep 0.05
        done
    fi
    wait "$WRK_PID"
    local rc=$?
    WRK_PID=
    return $rc
}

# Prints the LOADTEST_RESULT json of a wrk output file, or nothing.
wrk_result() {
    sed -n 's/^LOADTEST_RESULT //p' "$1" | tail -n 1
}

# Waits (up to 5 s) for the SKU's locks to be released, then leaves its status in
# $TMP/resp; prints the HTTP status.
sku_status() {
    local sku=$1 code i
    for ((i = 0; i < 50; i++)); do
        code=$(api GET "/admin/skus/$sku")
        [ "$code" = 200 ] || break
        [ "$(jq -r '.locks_held // 0' "$TMP/resp" 2>/dev/null)" = 0 ] && break
        sleep 0.1
    done
    echo "$code"
}

# Audit of one order scenario. Prints a JSON array of failure messages.
# audit SKU RESULT_JSON EXPECT_JSON
audit() {
    local sku=$1 result=$2 expect=$3 code status fails id ocode
    code=$(sku_status "$sku")
    if [ "$code" != 200 ]; then
        jq -cn --arg c "$code" '["GET /admin/skus answered \($c)"]'
        return
    fi
    status=$(cat "$TMP/resp")
    echo "$status" >"$TMP/status-$sku.json"
    fails=$(jq -cn --argjson r "$result" --argjson s "$status" --argjson e "$expect" '
        def chk(c; msg): if c then [] else [msg] end;
        ($s.segment_stock // []) as $ss | ($s.segment_sold // null) as $sd |
        ($e.pre_units // 0) as $pre_u | ($e.pre_orders // 0) as $pre_o |
        ($r.c201 * $e.qty + $pre_u) as $units |
          chk($s.initial == $e.stock; "initial \($s.initial) != stock set \($e.stock)")
        + chk($s.remaining + $s.sold == $s.initial;
              "remaining \($s.remaining) + sold \($s.sold) != initial \($s.initial)")
        + chk(($ss | length) == $e.segments;
              "segment_stock has \($ss | length) entries, want \($e.segments)")
        + chk(([$ss[] | select(. < 0)] | length) == 0;
              "segment below 0: \([$ss[] | select(. < 0)])")
        + chk(($ss | add // 0) == $s.remaining;
              "sum(segment_stock) \($ss | add) != remaining \($s.remaining)")
        + chk($sd == null or (($sd | add // 0) == $s.sold);
              "sum(segment_sold) != sold \($s.sold)")
        + chk($s.sold == $units;
              "sold \($s.sold) != units in the 201s wrk saw + sold before it \($units)")
        + chk($s.orders == $r.c201 + $pre_o;
              "orders \($s.orders) != 201s wrk saw + orders before it \($r.c201 + $pre_o)")
        + chk(($s.locks_held // 0) == 0; "locks_held \($s.locks_held) after the run")
        + chk($r.sent == $r.answered;
              "\($r.sent - $r.answered) orders sent but never answered")
        + chk($r.c200 == 0; "\($r.c200) x 200 (replays) with unique order ids")
        + chk($r.c404 + $r.c4xx + $r.c5xx + $r.cother == 0;
              "unexpected statuses: 404 \($r.c404), 4xx \($r.c4xx), 5xx \($r.c5xx), other \($r.cother)")
        + chk($e.mode == "lock" or $r.c503 == 0; "\($r.c503) x 503 in mode \($e.mode)")
        + chk(($r.errors | .connect + .read + .write + .timeout) == 0;
              "wrk socket errors \($r.errors)")
        + chk($e.requests == null or $r.sent == $e.requests;
              "sent \($r.sent) orders, want \($e.requests)")
        + chk($e.sold == null or ($s.sold == $e.sold + $pre_u and $r.c201 == $e.sold);
              "sold \($s.sold) / 201s \($r.c201), want exactly \($e.sold)")
        + chk($e.sold == null or $s.remaining == 0; "remaining \($s.remaining), want 0")
        + chk($e.all_409 != true or $r.c409 == $r.answered - $r.c201;
              "\($r.answered - $r.c201 - $r.c409) answers neither 201 nor 409")
        + chk($r.c201 == 0 or ($r.ids | length) > 0; "no order ids sampled")
        | if length > 0 and (($r.bodies // []) | length) > 0
          then . + ["answers seen: \($r.bodies | join(" | "))"] else . end
    ')
    # One order record per sale, sampled: every sampled 201 id must be readable.
    for id in $(jq -r '.ids[]' <<<"$result"); do
        ocode=$(api GET "/orders/$id")
        if [ "$ocode" != 200 ]; then
            fails=$(jq -c --arg m "GET /orders/$id answered $ocode" '. + [$m]' <<<"$fails")
        elif ! jq -e --arg id "$id" --arg sku "$sku" \
            '.order_id == $id and .sku == $sku' "$TMP/resp" >/dev/null 2>&1; then
            fails=$(jq -c --arg m "GET /orders/$id: record $(head -c 200 "$TMP/resp")" \
                '. + [$m]' <<<"$fails")
        fi
    done
    echo "$fails"
}

# Appends a table row. add_row JSON
add_row() { echo "$1" >>"$ROWS"; }

report_row() { # name fails_json extra_text
    local name=$1 fails=$2 n
    n=$(jq 'length' <<<"$fails")
    if [ "$n" -gt 0 ]; then
        FAILED_COUNT=$((FAILED_COUNT + 1))
        echo "  ${RED}${BOLD}FAILED${RESET} $name"
        jq -r '.[] | "    - " + .' <<<"$fails"
    else
        echo "  ${GREEN}ok${RESET} $name $3"
    fi
}

# run_orders NAME STRATEGY MODE SEGMENTS HOLD_MS STOCK (active SECS | requests N) [sold N]
run_orders() {
    local name=$1 strategy=$2 mode=$3 segs=$4 hold=$5 stock=$6 how=$7 amount=$8
    local expect_sold=${10:-} sku code donedir out result cap fails expect row
    SCEN_INDEX=$((SCEN_INDEX + 1))
    sku="$NONCE-$SCEN_INDEX-$name"
    echo "${BOLD}[$name]${RESET} $strategy: mode $mode, $segs segments, hold $hold ms," \
        "stock $stock, $how $amount"
    code=$(api PUT "/admin/skus/$sku" \
        "{\"stock\":$stock,\"segments\":$segs,\"mode\":\"$mode\",\"hold_ms\":$hold}")
    case $code in
        200|201|204) ;;
        *)
            fails=$(jq -cn --arg m "PUT /admin/skus/$sku answered $code: $(head -c 200 "$TMP/resp")" '[$m]')
            report_row "$name" "$fails"
            add_row "$(jq -cn --arg n "$name" --arg st "$strategy" --arg m "$mode" \
                --argjson seg "$segs" --argjson h "$hold" --argjson f "$fails" \
                '{name:$n,strategy:$st,mode:$m,segments:$seg,hold_ms:$h,orders_s:null,
                  req_s:null,p50_ms:null,p99_ms:null,c201:null,c409:null,c503:null,
                  audit:"FAILED",failures:$f}')"
            return
            ;;
    esac
    donedir=$TMP/markers-$SCEN_INDEX
    mkdir -p "$donedir"
    out=$TMP/wrk-$SCEN_INDEX-$name.txt
    # The -d cap: the window plus room for the slowest order (lock wait + hold) to be
    # answered; the driver normally stops wrk much earlier, when the threads are done.
    if [ "$how" = active ]; then
        cap=$((amount + 10 + hold / 100))
        run_wrk "$SCRIPT_DIR/orders.lua" "$out" "$cap" "$donedir" \
            "sku=$sku" qty=1 "nonce=$NONCE-$SCEN_INDEX" "threads=$WRK_THREADS" \
            "active=$amount" "donedir=$donedir"
    else
        cap=$((60 + amount / 1000))
        run_wrk "$SCRIPT_DIR/orders.lua" "$out" "$cap" "$donedir" \
            "sku=$sku" qty=1 "nonce=$NONCE-$SCEN_INDEX" "threads=$WRK_THREADS" \
            "requests=$amount" "donedir=$donedir"
    fi
    result=$(wrk_result "$out")
    if [ -z "$result" ]; then
        tail -n 20 "$out" >&2
        fails='["wrk printed no LOADTEST_RESULT line"]'
        result='{"c201":0,"c200":0,"c409":0,"c503":0,"p50_us":0,"p99_us":0,"window_s":0,"answered":0}'
    else
        expect=$(jq -cn --arg m "$mode" --argjson seg "$segs" --argjson st "$stock" \
            --arg how "$how" --argjson amt "$amount" --arg sold "$expect_sold" '
            {mode:$m, segments:$seg, stock:$st, qty:1,
             requests: (if $how == "requests" then $amt else null end),
             sold: (if $sold == "" then null else ($sold | tonumber) end),
             all_409: ($sold != "")}')
        fails=$(audit "$sku" "$result" "$expect")
    fi
    service_alive || fails=$(jq -c '. + ["the service process died"]' <<<"$fails")
    row=$(jq -cn --arg n "$name" --arg st "$strategy" --arg m "$mode" --arg sku "$sku" \
        --argjson seg "$segs" --argjson h "$hold" --argjson r "$result" \
        --argjson f "$fails" --argjson stock "$stock" '
        ($r.window_s) as $w |
        {name:$n, strategy:$st, mode:$m, sku:$sku, segments:$seg, hold_ms:$h, stock:$stock,
         orders_s: (if $w > 0 then $r.c201 / $w else 0 end),
         req_s: (if $w > 0 then $r.answered / $w else 0 end),
         p50_ms: ($r.p50_us / 1000), p99_ms: ($r.p99_us / 1000),
         c201:$r.c201, c409:$r.c409, c503:$r.c503, sent:$r.sent, window_s:$w,
         audit: (if ($f | length) == 0 then "ok" else "FAILED" end), failures:$f, wrk:$r}')
    add_row "$row"
    report_row "$name" "$fails" "$(jq -r '"\(.orders_s | floor) orders/s, \(.req_s | floor) req/s, p50 \(.p50_ms) ms, p99 \(.p99_ms) ms, 201 \(.c201), 409 \(.c409), 503 \(.c503)"' <<<"$row")"
}

run_soldout() {
    local name=soldout sku code out result fails row
    SCEN_INDEX=$((SCEN_INDEX + 1))
    sku="$NONCE-$SCEN_INDEX-$name"
    local fast0 fast1 fast
    echo "${BOLD}[$name]${RESET} sold-out storm: 0 stock, 20 segments, lock, ${SOLDOUT_SECS}s"
    code=$(api PUT "/admin/skus/$sku" '{"stock":0,"segments":20,"mode":"lock","hold_ms":0}')
    out=$TMP/wrk-$SCEN_INDEX-$name.txt
    fast0=$(stat_counter sold_out_fast)
    if [[ $code != 20? ]]; then
        fails=$(jq -cn --arg m "PUT /admin/skus/$sku answered $code" '[$m]')
        result='{"c201":0,"c200":0,"c409":0,"c503":0,"p50_us":0,"p99_us":0,"window_s":0,"answered":0}'
    else
        run_wrk "$SCRIPT_DIR/soldout.lua" "$out" "$SOLDOUT_SECS" "" "sku=$sku" qty=1
        result=$(wrk_result "$out")
        fast1=$(stat_counter sold_out_fast)
        if [ -z "$result" ]; then
            fails='["wrk printed no LOADTEST_RESULT line"]'
            result='{"c201":0,"c200":0,"c409":0,"c503":0,"p50_us":0,"p99_us":0,"window_s":0,"answered":0}'
        else
            code=$(sku_status "$sku")
            local status
            status=$(cat "$TMP/resp")
            # wrk stops mid-flight here (no drain), which is fine: nothing can be sold.
            fails=$(jq -cn --argjson r "$result" --argjson s "$status" --arg c "$code" '
                def chk(c; msg): if c then [] else [msg] end;
                  chk($c == "200"; "GET /admin/skus answered \($c)")
                + chk($s.sold == 0 and $s.remaining == 0 and $s.initial == 0;
                      "sold \($s.sold), remaining \($s.remaining), initial \($s.initial)")
                + chk(($s.orders // 0) == 0; "orders \($s.orders), want 0")
                + chk([($s.segment_stock // [])[] | select(. != 0)] | length == 0;
                      "segment_stock not all 0")
                + chk($r.c201 == 0 and $r.c200 == 0; "\($r.c201 + $r.c200) orders succeeded")
                + chk($r.c409 == $r.answered; "\($r.answered - $r.c409) answers were not 409")
                + chk(($r.errors | .connect + .read + .write) == 0;
                      "wrk socket errors \($r.errors)")')
        fi
    fi
    service_alive || fails=$(jq -c '. + ["the service process died"]' <<<"$fails")
    # sold_out_fast counts the orders answered from the in-process flag (no Redis);
    # over the storm it should be nearly all of them (the flag is re-checked against
    # the SKU's settings every meta_cache_ms, and those orders go the long way).
    fast=null
    if is_uint "${fast0:-x}" && is_uint "${fast1:-x}"; then fast=$((fast1 - fast0)); fi
    # req/s counts the 409s, as the livez row counts its 200s: the same measure.
    row=$(jq -cn --arg sku "$sku" --argjson r "$result" --argjson f "$fails" \
        --argjson fast "$fast" '
        ($r.window_s) as $w |
        {name:"soldout", strategy:"sold-out storm", mode:"lock", sku:$sku, segments:20,
         hold_ms:0, stock:0, orders_s:0, sold_out_fast:$fast,
         req_s: (if $w > 0 then $r.c409 / $w else 0 end),
         p50_ms: ($r.p50_us / 1000), p99_ms: ($r.p99_us / 1000),
         c201:$r.c201, c409:$r.c409, c503:$r.c503, sent:$r.answered, window_s:$w,
         audit: (if ($f | length) == 0 then "ok" else "FAILED" end), failures:$f, wrk:$r}')
    add_row "$row"
    report_row "$name" "$fails" "$(jq -r '"\(.req_s | floor) req/s (all 409), p50 \(.p50_ms) ms, p99 \(.p99_ms) ms, fast path \(.sold_out_fast // "?") of \(.c409)"' <<<"$row")"
}

run_livez() {
    local out result fails row
    SCEN_INDEX=$((SCEN_INDEX + 1))
    echo "${BOLD}[livez]${RESET} GET /livez, ${LIVEZ_SECS}s: the HTTP ceiling"
    out=$TMP/wrk-$SCEN_INDEX-livez.txt
    run_wrk "$SCRIPT_DIR/livez.lua" "$out" "$LIVEZ_SECS" ""
    result=$(wrk_result "$out")
    if [ -z "$result" ]; then
        fails='["wrk printed no LOADTEST_RESULT line"]'
        result='{"c200":0,"c409":0,"c503":0,"p50_us":0,"p99_us":0,"window_s":0,"answered":0,"cother":0}'
    else
        fails=$(jq -c 'if .cother == 0 and (.errors | .connect + .read + .write) == 0
            then [] else ["\(.cother) non-200 answers, socket errors \(.errors)"] end' \
            <<<"$result")
    fi
    row=$(jq -cn --argjson r "$result" --argjson f "$fails" '
        ($r.window_s) as $w |
        {name:"livez", strategy:"GET /livez (HTTP ceiling)", mode:"-", segments:null,
         hold_ms:null, orders_s:null,
         req_s: (if $w > 0 then $r.c200 / $w else 0 end),
         p50_ms: ($r.p50_us / 1000), p99_ms: ($r.p99_us / 1000),
         c201:null, c409:null, c503:null, window_s:$w,
         audit: (if ($f | length) == 0 then "ok" else "FAILED" end), failures:$f, wrk:$r}')
    add_row "$row"
    report_row livez "$fails" "$(jq -r '"\(.req_s | floor) req/s, p50 \(.p50_ms) ms, p99 \(.p99_ms) ms"' <<<"$row")"
}

# ---------------------------------------------------------------------------- end of a sale
# What automatic rebalancing buys at the end of a sale. Both variants start from the
# same uneven stock: REB_STOCK over REB_SEGS segments, then the REB_PRE orders. An
# order of qty q takes it from one segment holding >= q, so the multiset of segment
# stocks that results is the same every time (checked: both variants must match).
# Fewer than half the segments are empty, so no rebalance starts before the sale.
# Under a saturating load every segment lock sells at the same rate (1 / hold_ms), so
# the small segments run dry first and the rest of the sale runs on the 6 full ones,
# unless a rebalance spreads it back over all 20. Then the sale: 2 x the rest in
# orders of 1 from wrk, until every unit is sold. The 201s' arrival times (orders.lua
# times=1) and a poll of GET /admin/skus/{sku} (poll.lua, every REB_POLL_MS) give the
# time at which sold crossed 90% of the stock and the time of the sell-out.
REB_PRE_DIST=

# run_rebalance_variant NAME FLAG(true|false)
run_rebalance_variant() {
    local name=$1 flag=$2 sku code k pre remaining pre_units dist out pout result times
    local samples reb0 reb1 reb fails expect row requests cap donedir i spec pre_orders
    SCEN_INDEX=$((SCEN_INDEX + 1))
    sku="$NONCE-$SCEN_INDEX-$name"
    echo "${BOLD}[$name]${RESET} end of a sale, rebalance $flag: mode lock, $REB_SEGS segments," \
        "hold $REB_HOLD ms, stock $REB_STOCK; before the sale: $REB_PRE (count x qty)"
    fails='[]'
    reb0=$(stat_counter rebalances)
    code=$(api PUT "/admin/skus/$sku" \
        "{\"stock\":$REB_STOCK,\"segments\":$REB_SEGS,\"mode\":\"lock\",\"hold_ms\":$REB_HOLD,\"rebalance\":$flag}")
    if [[ $code != 20? ]]; then
        fails=$(jq -cn --arg m "PUT /admin/skus/$sku answered $code: $(head -c 200 "$TMP/resp")" '[$m]')
        report_row "$name" "$fails"
        add_row "$(jq -cn --arg n "$name" --arg f "$flag" --argjson fl "$fails" \
            '{name:$n, strategy:"end of sale, rebalance \($f)", mode:"lock", audit:"FAILED",
              failures:$fl}')"
        return
    fi
    # Uneven before the sale: each order from one segment (checked in its answer).
    pre_orders=0
    for spec in $REB_PRE; do
        for ((k = 1; k <= ${spec%x*}; k++)); do
            pre_orders=$((pre_orders + 1))
            code=$(api POST /orders \
                "{\"sku\":\"$sku\",\"qty\":${spec#*x},\"order_id\":\"$NONCE-$SCEN_INDEX-pre-$pre_orders\"}")
            if [ "$code" != 201 ] || ! jq -e --argjson q "${spec#*x}" \
                '(.segments | length) == 1 and .segments[0].qty == $q' "$TMP/resp" >/dev/null 2>&1; then
                fails=$(jq -c --arg m "order $pre_orders (qty ${spec#*x}) before the sale: $code $(head -c 200 "$TMP/resp")" \
                    '. + [$m]' <<<"$fails")
            fi
        done
    done
    code=$(sku_status "$sku")
    pre=$(cat "$TMP/resp")
    if [ "$code" != 200 ] || ! remaining=$(jq -er '.remaining' <<<"$pre" 2>/dev/null); then
        fails=$(jq -c --arg m "GET /admin/skus/$sku before the sale answered $code" '. + [$m]' <<<"$fails")
        remaining=0
        pre='{}'
    fi
    pre_units=$((REB_STOCK - remaining))
    dist=$(jq -c '.segment_stock // [] | sort' <<<"$pre")
    if [ -z "$REB_PRE_DIST" ]; then
        REB_PRE_DIST=$dist
    elif [ "$dist" != "$REB_PRE_DIST" ]; then
        fails=$(jq -c --arg m "stock before the sale $dist differs from the first variant's $REB_PRE_DIST" \
            '. + [$m]' <<<"$fails")
    fi

    requests=$((2 * remaining))
    donedir=$TMP/markers-$SCEN_INDEX
    mkdir -p "$donedir"
    out=$TMP/wrk-$SCEN_INDEX-$name.txt
    pout=$TMP/poll-$SCEN_INDEX-$name.txt
    wrk -t 1 -c 1 -d 600s --timeout 10s -s "$SCRIPT_DIR/poll.lua" "$URL" \
        -- "sku=$sku" "interval=$REB_POLL_MS" "token=$ADMIN_TOKEN" >"$pout" 2>&1 &
    POLL_PID=$!
    sleep 0.2
    cap=$((60 + requests / 1000))
    run_wrk "$SCRIPT_DIR/orders.lua" "$out" "$cap" "$donedir" \
        "sku=$sku" qty=1 "nonce=$NONCE-$SCEN_INDEX" "threads=$WRK_THREADS" \
        "requests=$requests" "donedir=$donedir" times=1
    # Let the poller see the final state, then stop it (done() prints on SIGINT).
    sleep 0.3
    kill -INT "$POLL_PID" 2>/dev/null
    for ((i = 0; i < 50; i++)); do kill -0 "$POLL_PID" 2>/dev/null || break; sleep 0.1; done
    stop_pid "$POLL_PID" 2
    POLL_PID=
    reb1=$(stat_counter rebalances)
    reb=null
    if is_uint "${reb0:-x}" && is_uint "${reb1:-x}"; then reb=$((reb1 - reb0)); fi

    result=$(wrk_result "$out")
    times=$(sed -n 's/^LOADTEST_TIMES //p' "$out" | tail -n 1)
    samples=$(sed -n 's/^LOADTEST_SAMPLES //p' "$pout" | tail -n 1)
    [ -n "$times" ] || { times='{"t_first":-1,"t201":[]}';
        fails=$(jq -c '. + ["wrk printed no LOADTEST_TIMES line"]' <<<"$fails"); }
    [ -n "$samples" ] || { samples='{"samples":[],"bad":0,"first_bad":""}';
        fails=$(jq -c '. + ["the poller printed no LOADTEST_SAMPLES line"]' <<<"$fails"); }
    if [ -z "$result" ]; then
        tail -n 20 "$out" >&2
        fails=$(jq -c '. + ["wrk printed no LOADTEST_RESULT line"]' <<<"$fails")
        result='{"c201":0,"c200":0,"c409":0,"c503":0,"p50_us":0,"p99_us":0,"window_s":0,"answered":0}'
    else
        expect=$(jq -cn --argjson seg "$REB_SEGS" --argjson st "$REB_STOCK" \
            --argjson req "$requests" --argjson rem "$remaining" --argjson pu "$pre_units" \
            --argjson po "$pre_orders" '
            {mode:"lock", segments:$seg, stock:$st, qty:1, requests:$req, sold:$rem,
             all_409:true, pre_units:$pu, pre_orders:$po}')
        fails=$(jq -c --argjson a "$(audit "$sku" "$result" "$expect")" '. + $a' <<<"$fails")
    fi
    if [ "$flag" = false ] && [ "$reb" != null ] && [ "$reb" != 0 ]; then
        fails=$(jq -c --arg m "$reb rebalance(s) counted for a SKU created with \"rebalance\": false" \
            '. + [$m]' <<<"$fails")
    fi
    service_alive || fails=$(jq -c '. + ["the service process died"]' <<<"$fails")

    row=$(jq -cn --arg n "$name" --arg flag "$flag" --arg sku "$sku" --argjson r "$result" \
        --argjson f "$fails" --argjson t "$times" --argjson p "$samples" \
        --argjson init "$REB_STOCK" --argjson pu "$pre_units" --argjson seg "$REB_SEGS" \
        --argjson hold "$REB_HOLD" --argjson reb "$reb" --argjson dist "$dist" \
        --argjson poll "$REB_POLL_MS" '
        ($r.window_s) as $w |
        ($p.samples) as $s |
        ($init * 0.9 | ceil) as $u90 |
        ($u90 - $pu) as $k90 | ($init - $pu) as $kend |
        ($t.t201) as $a |
        # client side: the 201 that took sold to 90%, and the last 201
        (if ($a | length) >= $kend and $k90 >= 1 and $kend > $k90
         then {t90: $a[$k90 - 1], tend: $a[$kend - 1]} else null end) as $c |
        # server side: where the polled sold count crossed a level (linear in between)
        def cross($L):
            ([range(0; $s | length)] | map(select($s[.][1] >= $L)) | first) as $i |
            if $i == null then null elif $i == 0 then $s[0][0]
            else $s[$i - 1] as $x | $s[$i] as $y |
                 $x[0] + ($L - $x[1]) / ($y[1] - $x[1]) * ($y[0] - $x[0]) end;
        def at($L): ([$s[] | select(.[1] >= $L)] | first);
        cross($u90) as $p90 | cross($init) as $pend |
        {name:$n, strategy:"end of sale, rebalance \($flag)", mode:"lock", sku:$sku,
         segments:$seg, hold_ms:$hold, stock:$init,
         orders_s: (if $w > 0 then $r.c201 / $w else 0 end),
         req_s: (if $w > 0 then $r.answered / $w else 0 end),
         p50_ms: ($r.p50_us / 1000), p99_ms: ($r.p99_us / 1000),
         c201:$r.c201, c409:$r.c409, c503:$r.c503, sent:$r.sent, window_s:$w,
         audit: (if ($f | length) == 0 then "ok" else "FAILED" end), failures:$f, wrk:$r,
         end_of_sale: {
            rebalance: ($flag == "true"), sold_before_sale: $pu,
            stock_before_sale_sorted: $dist,
            units_last_10pct: ($init - $u90),
            last10_s: (if $c then ($c.tend - $c.t90) / 1000 else null end),
            last10_orders_s: (if $c and $c.tend > $c.t90
                              then ($kend - $k90) / (($c.tend - $c.t90) / 1000) else null end),
            sale_s: (if $c and $t.t_first >= 0 then ($c.tend - $t.t_first) / 1000 else null end),
            sale_orders_s: (if $c and $t.t_first >= 0 and $c.tend > $t.t_first
                            then $kend / (($c.tend - $t.t_first) / 1000) else null end),
            max_latency_ms: ($r.max_us / 1000),
            polled_last10_s: (if $p90 and $pend then ($pend - $p90) / 1000 else null end),
            polled_last10_orders_s: (if $p90 and $pend and $pend > $p90
                                     then ($init - $u90) / (($pend - $p90) / 1000) else null end),
            segments_with_stock_at_90pct: (at($u90) | if . then .[2] else null end),
            rebalances: $reb, poll_ms: $poll, polls: ($s | length), polls_bad: $p.bad,
            samples: [$s[] | [((.[0] - $t.t_first) / 1000 * 1000 | round / 1000), .[1], .[2]]]}}')
    add_row "$row"
    report_row "$name" "$fails" "$(jq -r '
        def f(x): if x == null then "n/a" else (x * 10 | round / 10 | tostring) end;
        .end_of_sale as $e |
        "sale \(f($e.sale_orders_s)) orders/s in \(f($e.sale_s)) s; last 10%: \(f($e.last10_orders_s)) orders/s in \(f($e.last10_s)) s (polled \(f($e.polled_last10_orders_s))); rebalances +\($e.rebalances); segments with stock at 90%: \($e.segments_with_stock_at_90pct)"' <<<"$row")"
}

run_rebalance() {
    REB_PRE_DIST=
    run_rebalance_variant rebalance-off false
    run_rebalance_variant rebalance-on true
}

# The Redis ceiling: the same check-and-deduct Lua, straight from redis-benchmark.
DEDUCT_LUA="local s=tonumber(redis.call('GET',KEYS[1]) or '0') if s>=1 then redis.call('DECRBY',KEYS[1],1) redis.call('INCRBY',KEYS[2],1) return 1 end return 0"
run_redis_bench() {
    local host=${REDIS_ADDR%:*} port=${REDIS_ADDR##*:} out fails row initial=1000000000
    local k_stock="loadtest:$NONCE:stock" k_sold="loadtest:$NONCE:sold" csv stock sold
    echo "${BOLD}[redis]${RESET} redis-benchmark -c $CONNS -n $REDIS_BENCH_N EVAL <deduct> on $REDIS_ADDR"
    out=$TMP/redis-benchmark.csv
    redis-cli -h "$host" -p "$port" SET "$k_stock" "$initial" >/dev/null &&
        redis-cli -h "$host" -p "$port" SET "$k_sold" 0 >/dev/null ||
        { fails='["cannot SET the benchmark keys"]'; }
    redis-benchmark -h "$host" -p "$port" -c "$CONNS" -n "$REDIS_BENCH_N" --csv \
        EVAL "$DEDUCT_LUA" 2 "$k_stock" "$k_sold" >"$out" 2>&1 &
    BENCH_PID=$!
    wait "$BENCH_PID"
    BENCH_PID=
    csv=$(grep '^"EVAL' "$out" | tail -n 1)
    stock=$(redis-cli -h "$host" -p "$port" GET "$k_stock")
    sold=$(redis-cli -h "$host" -p "$port" GET "$k_sold")
    redis-cli -h "$host" -p "$port" DEL "$k_stock" "$k_sold" >/dev/null
    row=$(jq -cn --arg csv "$csv" --arg stock "$stock" --arg sold "$sold" \
        --argjson n "$REDIS_BENCH_N" --argjson init "$initial" '
        def chk(c; msg): if c then [] else [msg] end;
        ($csv | [scan("\"([^\"]*)\"")[0]]) as $f |
        (if ($f | length) >= 7 then
            {rps: ($f[1] | tonumber), p50: ($f[4] | tonumber), p99: ($f[6] | tonumber)}
         else null end) as $b |
        (  chk($b != null; "no CSV result from redis-benchmark")
         + chk(($sold | tonumber? // -1) == $n; "sold \($sold), want \($n) (one per EVAL)")
         + chk(($stock | tonumber? // -1) + ($sold | tonumber? // 0) == $init;
               "stock \($stock) + sold \($sold) != \($init)")) as $fails |
        {name:"redis", strategy:"redis-benchmark EVAL (Redis ceiling)", mode:"-",
         segments:null, hold_ms:null, orders_s: (if $b then $b.rps else null end),
         req_s: (if $b then $b.rps else null end),
         p50_ms: (if $b then $b.p50 else null end), p99_ms: (if $b then $b.p99 else null end),
         c201:null, c409:null, c503:null,
         audit: (if ($fails | length) == 0 then "ok" else "FAILED" end), failures:$fails}')
    [ -z "${fails:-}" ] || row=$(jq -c --argjson f "$fails" '.failures += $f | .audit = "FAILED"' <<<"$row")
    add_row "$row"
    report_row redis "$(jq -c .failures <<<"$row")" "$(jq -r '"\(.orders_s) EVAL/s, p50 \(.p50_ms) ms, p99 \(.p99_ms) ms"' <<<"$row")"
}

# ---------------------------------------------------------------------------- run
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
STAMP=$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$OUT_DIR" || die "cannot create $OUT_DIR"

if [ -z "$URL" ]; then
    start_redis
    echo "redis-server: $REDIS_ADDR (pid $REDIS_PID, no persistence)"
    start_service
    echo "service: $URL (pid $SVC_PID)"
else
    curl -fsS -o /dev/null "$URL/livez" || die "no answer from $URL/livez"
    echo "service: $URL (already running)"
fi
echo "wrk: $WRK_THREADS threads, $CONNS connections, ${DURATION}s per timed scenario," \
    "run nonce $NONCE"

BIG_STOCK=100000000 # never sells out in a timed run
# The hold-0 strategies run back to back with the two ceilings right after them, so
# the ratios between them come from minutes-apart measurements on a noisy machine.
if wants hold0; then
    run_orders "global-h0" "global lock" lock 1 0 "$BIG_STOCK" active "$DURATION"
    run_orders "lock20-h0" "segment locks" lock 20 0 "$BIG_STOCK" active "$DURATION"
    run_orders "atomic-h0" "atomic" atomic 20 0 "$BIG_STOCK" active "$DURATION"
fi
if wants redis; then
    if [ -n "$REDIS_ADDR" ] && command -v redis-benchmark >/dev/null; then
        run_redis_bench
    else
        echo "[redis] skipped: no --redis address (or no redis-benchmark)"
    fi
fi
# The storm right after its reference, with the same wrk settings and duration.
wants livez && run_livez
wants soldout && run_soldout
if wants curve; then
    for s in $CURVE_SEGMENTS; do
        run_orders "curve-$s" "lock" lock "$s" 20 "$BIG_STOCK" active "$DURATION"
    done
fi
if wants flash; then
    run_orders "flash" "flash sale" lock 20 0 1000 requests "$FLASH_REQUESTS" sold 1000
fi
wants rebalance && run_rebalance

# ---------------------------------------------------------------------------- report
# Rows keyed by name; ratios from this one run.
ALL=$(jq -cs '.' "$ROWS")
RATIOS=$(jq -c '
    (map({(.name): .}) | add // {}) as $r |
    def val(n; f): ($r[n] // {}) | f;
    def ratio(a; b): if a != null and b != null and b > 0 then a / b else null end;
    [ {name: "20 segments / 1 segment, hold 20 ms", target: ">= 19", min: 19,
       value: ratio(val("curve-20"; .orders_s); val("curve-1"; .orders_s))},
      {name: "lock 20 segments / atomic, hold 0 ms", target: ">= 0.6", min: 0.6,
       value: ratio(val("lock20-h0"; .orders_s); val("atomic-h0"; .orders_s))},
      {name: "atomic / redis-benchmark EVAL", target: ">= 0.35", min: 0.35,
       value: ratio(val("atomic-h0"; .orders_s); val("redis"; .orders_s))},
      {name: "p99 ms, lock 20 segments, hold 0 ms", target: "<= 10 ms", max: 10,
       value: val("lock20-h0"; .p99_ms)},
      {name: "sold-out storm req/s / GET /livez req/s", target: ">= 0.8", min: 0.8,
       value: ratio(val("soldout"; .req_s); val("livez"; .req_s))}
    ] | map(. + {met: (if .value == null then null
                       elif .min then .value >= .min else .value <= .max end)})' <<<"$ALL")

# The end of a sale with and without rebalancing: both variants and their ratio.
END_OF_SALE=$(jq -c '
    (map({(.name): .}) | add // {}) as $r |
    def ratio(a; b): if a != null and b != null and b > 0 then a / b else null end;
    if $r["rebalance-off"] == null and $r["rebalance-on"] == null then null else
    {variants: [ $r["rebalance-off"], $r["rebalance-on"] | select(. != null)
                 | {name, audit, orders_s, c201, c409, c503} + .end_of_sale
                 | del(.samples) ],
     last10_on_over_off: ratio($r["rebalance-on"].end_of_sale.last10_orders_s;
                               $r["rebalance-off"].end_of_sale.last10_orders_s),
     polled_last10_on_over_off: ratio($r["rebalance-on"].end_of_sale.polled_last10_orders_s;
                                      $r["rebalance-off"].end_of_sale.polled_last10_orders_s),
     sale_on_over_off: ratio($r["rebalance-on"].end_of_sale.sale_orders_s;
                             $r["rebalance-off"].end_of_sale.sale_orders_s)}
    end' <<<"$ALL")

fmt_end_of_sale() { # markdown: the rebalance scenario, or nothing
    [ "$END_OF_SALE" != null ] || return 0
    jq -r --argjson stock "$REB_STOCK" --argjson segs "$REB_SEGS" --argjson hold "$REB_HOLD" \
        --arg pre "$REB_PRE_TEXT" --argjson conns "$CONNS" '
        def n(x; d): if x == null then "n/a" else (x * pow(10; d) | round / pow(10; d) | tostring) end;
        "End of a sale: \($stock) stock, \($segs) segments, lock, hold \($hold) ms, \($conns) connections; \($pre) (\(.variants[0].sold_before_sale // "-") sold); then sold out by orders of 1. Last 10% = the last \(.variants[0].units_last_10pct // "-") units, from the 201 that took sold to 90% to the last 201.",
        "",
        "| variant | sale s | sale orders/s | last 10% took s | last 10% orders/s | last 10% orders/s (polled) | segments with stock at 90% | rebalances | slowest answer ms | 503s | audit |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        (.variants[] | "| \(.name) | \(n(.sale_s; 3)) | \(n(.sale_orders_s; 0)) | \(n(.last10_s; 3)) | \(n(.last10_orders_s; 0)) | \(n(.polled_last10_orders_s; 0)) | \(.segments_with_stock_at_90pct // "n/a") | \(.rebalances // "n/a") | \(n(.max_latency_ms; 0)) | \(.c503 // "-") | \(.audit) |"),
        "",
        "Sale s: from the first order sent to the last 201; sale orders/s: the 201s over that time (the table above divides by the whole send window, which also holds the 409s after the sell-out). Slowest answer: the maximum latency wrk saw in the run, 409s included.",
        "",
        "With / without rebalancing: last 10% \(n(.last10_on_over_off; 2))x (polled \(n(.polled_last10_on_over_off; 2))x), whole sale \(n(.sale_on_over_off; 2))x."
    ' <<<"$END_OF_SALE"
}

fmt_results() { # markdown: the table, the target ratios and the end of a sale
    fmt_table
    echo
    fmt_ratios
    if [ "$END_OF_SALE" != null ]; then
        echo
        fmt_end_of_sale
    fi
}

fmt_table() { # markdown table of all rows
    jq -r '
        def n(x; d): if x == null then "-" else (x * pow(10; d) | round / pow(10; d) | tostring) end;
        "| scenario | strategy | segments | hold_ms | orders/s | req/s | p50 ms | p99 ms | 201s | 409s | 503s | audit |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        (.[] | "| \(.name) | \(.strategy) | \(.segments // "-") | \(.hold_ms // "-") | \(n(.orders_s; 0)) | \(n(.req_s; 0)) | \(n(.p50_ms; 2)) | \(n(.p99_ms; 2)) | \(.c201 // "-") | \(.c409 // "-") | \(.c503 // "-") | \(.audit) |")
    ' <<<"$ALL"
}
fmt_ratios() {
    jq -r '
        "| target | value | goal | met |", "|---|---:|---|---|",
        (.[] | "| \(.name) | \(if .value == null then "n/a" else (.value * 100 | round / 100 | tostring) end) | \(.target) | \(if .met == null then "n/a" elif .met then "yes" else "NO" end) |")
    ' <<<"$RATIOS"
}

MD=$OUT_DIR/$STAMP.md
JSON=$OUT_DIR/$STAMP.json
PNG_SCALING=$OUT_DIR/$STAMP-scaling.png
PNG_HOLD0=$OUT_DIR/$STAMP-hold0.png
PNG_REBALANCE=$OUT_DIR/$STAMP-rebalance.png
MACHINE=$(jq -cn --arg nproc "$(nproc)" \
    --arg model "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)" \
    --arg mem "$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)" \
    --arg kernel "$(uname -sr)" \
    '{nproc: ($nproc | tonumber), cpu: $model, memory: $mem, kernel: $kernel}')
COMMAND="loadtest/run.sh $ARGV_ORIG"
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
VERSIONS=$(jq -cn --arg wrk "$(wrk -v 2>&1 | head -n 1 | awk '{print $2}')" \
    --arg redis "$(redis-server --version 2>/dev/null | sed -n 's/.* v=\([^ ]*\).*/\1/p')" \
    --arg svc "$( [ -n "$SVC_PID" ] && "$BIN" --version 2>/dev/null | head -n 1)" \
    '{wrk: $wrk, redis: $redis, service: $svc}')

{
    echo "# Load test $STARTED ($([ "$QUICK" = 1 ] && echo quick || echo full))"
    echo
    echo "Command: \`$COMMAND\`; wrk $WRK_THREADS threads, $CONNS connections," \
        "${DURATION}s per timed scenario."
    echo "Machine: $(jq -r '"\(.nproc) CPUs, \(.cpu), \(.memory) RAM, \(.kernel)"' <<<"$MACHINE");" \
        "load average $LOAD_START at the start, $LOAD_END at the end."
    echo
    fmt_results
    if [ "$FAILED_COUNT" -gt 0 ]; then
        echo
        echo "## Audit failures"
        jq -r '.[] | select(.audit != "ok") | "- \(.name): \(.failures | join("; "))"' <<<"$ALL"
    fi
} >"$MD"

jq -n --arg started "$STARTED" --arg cmd "$COMMAND" --argjson quick "$QUICK" \
    --argjson machine "$MACHINE" --argjson rows "$ALL" --argjson ratios "$RATIOS" \
    --argjson conns "$CONNS" --argjson wt "$WRK_THREADS" --argjson dur "$DURATION" \
    --argjson failed "$FAILED_COUNT" --arg url "$URL" --argjson versions "$VERSIONS" \
    --arg l0 "$LOAD_START" --arg l1 "$LOAD_END" --argjson eos "$END_OF_SALE" \
    '{started: $started, command: $cmd, quick: ($quick == 1), url: $url, machine: $machine,
      versions: $versions, loadavg: {start: $l0, end: $l1},
      wrk: {threads: $wt, connections: $conns, duration_s: $dur},
      scenarios: $rows, ratios: $ratios, end_of_sale: $eos, audits_failed: $failed}' >"$JSON"

# ---------------------------------------------------------------------------- plots
if gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1; then
    TERM_PNG="pngcairo size 900,560 font 'sans,10'"
else
    TERM_PNG="png size 900,560"
fi

jq -r '.[] | select(.name | startswith("curve-")) | select(.orders_s != null)
       | "\(.segments) \(.orders_s)"' <<<"$ALL" | sort -n >"$TMP/curve.dat"
if [ -s "$TMP/curve.dat" ]; then
    # Room above the highest point (ideal or measured) for its label on the log axis.
    CURVE_YMAX=$(awk '{ m = ($1 * 50 > m) ? $1 * 50 : m; m = ($2 > m) ? $2 : m }
                      END { printf "%d", (m > 0 ? m : 100) * 2 }' "$TMP/curve.dat")
    gnuplot <<EOF 2>>"$TMP/gnuplot.log" || echo "run.sh: gnuplot failed (scaling plot)" >&2
set terminal $TERM_PNG
set output '$PNG_SCALING'
set termoption noenhanced
set title "Orders/s against segments, lock mode, hold 20 ms, $CONNS connections"
set xlabel 'segments'
set ylabel 'orders/s (201s)'
set logscale xy 2
set xrange [0.8:80]
set xtics (1, 2, 4, 8, 16, 20, 32, 64)
set yrange [20:$CURVE_YMAX]
set grid
set key top left
ideal(x) = 1000.0 / 20 * x
plot ideal(x) with lines dashtype 2 lw 2 lc rgb '#888888' title 'ideal: (1000 / 20 ms) x segments = 50/s per segment', \
     '$TMP/curve.dat' using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f77b4' title 'measured', \
     '$TMP/curve.dat' using 1:2:(sprintf('%.0f', \$2)) with labels offset 0,1.2 notitle
EOF
fi

jq -r '.[] | select(.name == "global-h0" or .name == "lock20-h0" or .name == "atomic-h0"
                    or .name == "livez" or .name == "redis")
       | select(.req_s != null)
       | [ (if .name == "global-h0" then "global lock\\n(1 segment)"
            elif .name == "lock20-h0" then "segment locks\\n(20 segments)"
            elif .name == "atomic-h0" then "atomic\\n(20 segments)"
            elif .name == "livez" then "GET /livez\\n(HTTP ceiling)"
            else "redis-benchmark EVAL\\n(Redis ceiling)" end),
           (if .name == "livez" then .req_s else .orders_s end),
           (if .name == "livez" or .name == "redis" then 1 else 0 end) ]
       | "\"\(.[0])\" \(.[1]) \(.[2])"' <<<"$ALL" >"$TMP/hold0.dat"
if [ -s "$TMP/hold0.dat" ]; then
    gnuplot <<EOF 2>>"$TMP/gnuplot.log" || echo "run.sh: gnuplot failed (hold 0 plot)" >&2
set terminal $TERM_PNG
set output '$PNG_HOLD0'
set termoption noenhanced
set bmargin 5
set title "Strategies at hold 0 ms, $CONNS connections (grey: reference ceilings)"
set ylabel 'orders/s (201s); ceilings: requests/s'
set style fill solid 0.8 border -1
set boxwidth 0.6
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set grid ytics
set xtics nomirror
unset key
plot '$TMP/hold0.dat' using 0:2:(\$3 > 0 ? 0xaaaaaa : 0x1f77b4):xtic(1) with boxes lc rgb variable, \
     '' using 0:2:(sprintf('%.0f', \$2)) with labels offset 0,0.8
EOF
fi

for v in off on; do
    jq -r --arg n "rebalance-$v" '.[] | select(.name == $n) | .end_of_sale.samples // [] | .[]
        | "\(.[0]) \(.[1]) \(.[2])"' <<<"$ALL" >"$TMP/reb-$v.dat"
done
if [ -s "$TMP/reb-off.dat" ] || [ -s "$TMP/reb-on.dat" ]; then
    REB_U90=$(( (REB_STOCK * 9 + 9) / 10 ))
    gnuplot <<EOF 2>>"$TMP/gnuplot.log" || echo "run.sh: gnuplot failed (rebalance plot)" >&2
set terminal $TERM_PNG
set output '$PNG_REBALANCE'
set termoption noenhanced
set title "End of a sale: $REB_STOCK stock, $REB_SEGS segments, lock, hold $REB_HOLD ms, $CONNS connections\n$REB_PRE_TEXT"
set xlabel 'seconds since the first order of the sale'
set ylabel 'units sold (GET /admin/skus, every $REB_POLL_MS ms)'
set y2label 'segments holding stock'
set yrange [0:$REB_STOCK * 1.05]
set y2range [0:$REB_SEGS + 1]
set ytics nomirror
set y2tics
set xrange [0:*]
set grid
set key bottom right
set arrow from graph 0, first $REB_U90 to graph 1, first $REB_U90 nohead dashtype 3 lc rgb '#888888'
set label '90% sold: the last 10% starts' at graph 0.02, first $REB_U90 offset 0,0.7 tc rgb '#666666'
plot '$TMP/reb-off.dat' using 1:2 with lines lw 2 lc rgb '#d62728' title 'sold, rebalance false', \\
     '$TMP/reb-on.dat' using 1:2 with lines lw 2 lc rgb '#1f77b4' title 'sold, rebalance true', \\
     '$TMP/reb-off.dat' using 1:3 axes x1y2 with steps dashtype 2 lc rgb '#d62728' title 'segments with stock, false', \\
     '$TMP/reb-on.dat' using 1:3 axes x1y2 with steps dashtype 2 lc rgb '#1f77b4' title 'segments with stock, true'
EOF
fi

# ---------------------------------------------------------------------------- docs
DOCS_BEGIN='<!-- BEGIN GENERATED by loadtest/run.sh --update-docs: edits here are overwritten -->'
DOCS_END='<!-- END GENERATED -->'

# Copies the plots to docs/ and replaces the generated block of docs/BENCHMARKS.md
# (appending one when the file has none).
update_docs() {
    local docs=$SCRIPT_DIR/../docs file block
    file=$docs/BENCHMARKS.md
    block=$TMP/docs-block.md
    mkdir -p "$docs" || return 1
    [ ! -f "$PNG_SCALING" ] || cp "$PNG_SCALING" "$docs/bench-scaling.png" || return 1
    [ ! -f "$PNG_HOLD0" ] || cp "$PNG_HOLD0" "$docs/bench-hold0.png" || return 1
    [ ! -f "$PNG_REBALANCE" ] || cp "$PNG_REBALANCE" "$docs/bench-rebalance.png" || return 1
    {
        echo "$DOCS_BEGIN"
        echo "## Latest run: $STARTED ($([ "$QUICK" = 1 ] && echo quick || echo full))"
        echo
        echo "- Command: \`$COMMAND\`"
        echo "- Machine: $(jq -r '"\(.nproc) CPUs (nproc), \(.cpu), \(.memory) RAM, \(.kernel)"' <<<"$MACHINE")"
        echo "- Load average: $LOAD_START at the start, $LOAD_END at the end (the machine is shared)"
        echo "- Versions: $(jq -r '"wrk \(.wrk), redis-server \(.redis), \(.service)"' <<<"$VERSIONS")"
        echo "- wrk: $WRK_THREADS threads, $CONNS connections, ${DURATION}s per timed scenario;" \
            "service: --threads ${SVC_THREADS:-default}"
        echo
        fmt_results
        echo
        echo "![orders/s against segments at hold 20 ms](bench-scaling.png)"
        echo
        echo "![strategies at hold 0 ms](bench-hold0.png)"
        if [ -f "$PNG_REBALANCE" ]; then
            echo
            echo "![the end of a sale with and without rebalancing](bench-rebalance.png)"
        fi
        echo "$DOCS_END"
    } >"$block"
    if [ -f "$file" ] && grep -qF "$DOCS_BEGIN" "$file" && grep -qF "$DOCS_END" "$file"; then
        awk -v b="$DOCS_BEGIN" -v e="$DOCS_END" -v f="$block" '
            $0 == b { while ((getline line < f) > 0) print line; skip = 1; next }
            $0 == e { skip = 0; next }
            !skip' "$file" >"$TMP/docs-new.md" && cp "$TMP/docs-new.md" "$file"
    else
        { [ -f "$file" ] && { cat "$file"; echo; } || echo "# Benchmarks"; echo; cat "$block"; } \
            >"$TMP/docs-new.md" && cp "$TMP/docs-new.md" "$file"
    fi
}

if [ "$UPDATE_DOCS" = 1 ]; then
    if update_docs; then
        echo "docs: updated docs/BENCHMARKS.md and the plots in docs/"
    else
        echo "run.sh: could not update docs/" >&2
    fi
fi

# ---------------------------------------------------------------------------- summary
echo
fmt_table | sed "s/| FAILED |/| ${RED}FAILED${RESET} |/"
echo
fmt_ratios
if [ "$END_OF_SALE" != null ]; then
    echo
    fmt_end_of_sale
fi
echo
echo "results: $MD"
echo "         $JSON"
[ -f "$PNG_SCALING" ] && echo "         $PNG_SCALING"
[ -f "$PNG_HOLD0" ] && echo "         $PNG_HOLD0"
[ -f "$PNG_REBALANCE" ] && echo "         $PNG_REBALANCE"
if [ "$FAILED_COUNT" -gt 0 ]; then
    echo "${RED}${BOLD}FAILED${RESET}: $FAILED_COUNT scenario(s) failed their audit"
    exit 1
fi
echo "${GREEN}all audits passed${RESET}"
exit 0
