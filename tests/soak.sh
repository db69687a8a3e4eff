#!/usr/bin/env bash
# soak.sh -- run the history checker (BUILD/tests/it_history) round after round, each
# with a fresh random HISTORY_SEED, until about SECONDS have been used; print per round
# the seed, the operations checked and the violations, and at the end the totals.
#
#   tests/soak.sh [--seconds N] [--round N] [--cluster | --pg | --locks] [BUILD_DIR]
#
#   --seconds N   total time to use (default 600)
#   --round N     HISTORY_SECONDS of one round (default 60; the last round is shorter)
#   --cluster     run tests/it_history_cluster instead: each round on a fresh 3+3 Redis
#                 Cluster with failovers (HISTORY_CLUSTER_ALL, HISTORY_OPS and
#                 HISTORY_FAULTS are passed on from the environment)
#   --pg          run tests/it_history_pg instead: each round on a fresh PostgreSQL
#                 with 3 instances on the PostgreSQL store, backends terminated and
#                 one restart
#   --locks       run tests/it_history_locks instead: SKUs locked in ZooKeeper,
#                 RedLock and memcached, each service faulted once per round
#   BUILD_DIR     where inventoryd and tests/it_history are (default build)
#
# On the first failing round it prints that round's output, the seed, where its log
# is kept (BUILD_DIR/soak/) and the command that reproduces it, and exits 1. Logs of
# passing rounds are removed. Every round runs under a timeout in a private TMPDIR,
# removed on exit or Ctrl-C.
set -u

total=600
round=60
build=
name=it_history
overhead=5 # setup and checks of one round, on top of its HISTORY_SECONDS
extra=120  # a round's timeout past its HISTORY_SECONDS
while [ $# -gt 0 ]; do
    case "$1" in
    --seconds) total=$2; shift 2 ;;
    --round) round=$2; shift 2 ;;
    --cluster)
        name=it_history_cluster
        overhead=25 # the cluster's start, the settling of unknown outcomes, the checks
        extra=240
        shift
        ;;
    --pg)
        name=it_history_pg
        overhead=10 # PostgreSQL's initdb, start and restart, the checks
        shift
        ;;
    --locks)
        name=it_history_locks
        overhead=15 # ZooKeeper's start, the faults, the checks
        shift
        ;;
    -h | --help)
        sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *) build=$1; shift ;;
    esac
done
build=${build:-build}
bin=$build/tests/$name
export INVENTORYD=${INVENTORYD:-$build/inventoryd}
for f in "$bin" "$INVENTORYD"; do
    if [ ! -x "$f" ]; then
        echo "soak.sh: $f not found (make $f)" >&2
        exit 2
    fi
done
case "$total$round" in
*[!0-9]*)
    echo "soak.sh: --seconds and --round take whole seconds" >&2
    exit 2
    ;;
esac

min_round=5
logroot=$build/soak/$(date +%Y%m%d-%H%M%S)
mkdir -p "$logroot" || exit 2
tmproot=$(mktemp -d "${TMPDIR:-/tmp}/inv-soak.XXXXXX") || exit 2
export TMPDIR=$tmproot
child=
cleanup() {
    if [ -n "$child" ]; then
        kill -TERM -- "-$child" 2>/dev/null || kill -TERM "$child" 2>/dev/null
        wait "$child" 2>/dev/null
    fi
    rm -rf "$tmproot"
    rmdir "$logroot" "$(dirname "$logroot")" 2>/dev/null
}
trap cleanup EXIT
trap 'echo "soak.sh: interrupted" >&2; exit 130' INT TERM HUP

# field NAME LINE: the value of NAME=value in a history-result line.
field() {
    sed -n "s/.*[[:space:]]$1=\([0-9]*\).*/\1/p" <<<"$2"
}

rounds=0
requests=0
checked=0
failovers=0
start=$(date +%s)
echo "soak: $total s in rounds of up to $round s; logs of failing rounds in $logroot"
while :; do
    left=$((total - ($(date +%s) - start)))
    secs=$((left - overhead < round ? left - overhead : round))
    [ "$secs" -ge "$min_round" ] || break
    rounds=$((rounds + 1))
    seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
    dir=$logroot/round-$rounds
    mkdir -p "$dir"
    HISTORY_SEED=$seed HISTORY_SECONDS=$secs HISTORY_LOG_DIR=$dir \
        timeout -k 10 $((secs + extra)) "$bin" >"$dir/output.txt" 2>&1 &
    child=$!
    wait "$child"
    rc=$?
    child=
    result=$(grep -a '^history-result ' "$dir/output.txt" | tail -1)
    r=$(field requests "$result")
    c=$(field judged "$result")
    v=$(field violations "$result")
    fo=$(field failovers "$result")
    printf 'round %d: seed %s, %d s: %s requests, %s checked, %s failovers, %s violations%s\n' \
        "$rounds" "$seed" "$secs" "${r:-?}" "${c:-?}" "${fo:-?}" "${v:-?}" \
        "$([ "$rc" -eq 0 ] || echo " -- FAILED (exit $rc)")"
    requests=$((requests + ${r:-0}))
    checked=$((checked + ${c:-0}))
    failovers=$((failovers + ${fo:-0}))
    if [ "$rc" -ne 0 ]; then
        echo "----- output of round $rounds -----"
        cat "$dir/output.txt"
        echo "----- end of round $rounds -----"
        echo "soak: FAILED after $rounds round(s): seed $seed (log and output in $dir)"
        echo "reproduce: ${HISTORY_CLUSTER_ALL:+HISTORY_CLUSTER_ALL=$HISTORY_CLUSTER_ALL }${HISTORY_OPS:+HISTORY_OPS=$HISTORY_OPS }${HISTORY_FAULTS:+HISTORY_FAULTS=$HISTORY_FAULTS }HISTORY_SEED=$seed HISTORY_SECONDS=$secs $bin"
        echo "soak: totals: $rounds rounds, $requests requests, $checked checked," \
            "$failovers failovers, 1 failed"
        exit 1
    fi
    rm -rf "$dir"
done
echo "soak: totals: $rounds rounds, $requests requests, $checked checked," \
    "$failovers failovers, 0 violations, $(($(date +%s) - start)) s"
[ "$rounds" -gt 0 ]
