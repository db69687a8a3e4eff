#!/usr/bin/env bash
# run.sh -- run the unit (BUILD/tests/test_*) and integration (BUILD/tests/it_*) test
# binaries, each under a timeout, and end with one line: "N passed, N failed", counting
# test binaries. Prints the whole output of every binary that failed, and its failing
# checks once more before that last line.
#
#   tests/run.sh [--unit | --integration] [BUILD_DIR]      (BUILD_DIR defaults to build)
#
# Environment: TEST_TIMEOUT (seconds per binary, default 300), INVENTORYD (service
# binary for the integration tests, default BUILD_DIR/inventoryd), TEST_FILTER (only
# binaries whose name contains it), TEST_VERBOSE=1 (print every binary's output),
# TEST_SKIP_SLOW=1 (leave out the slow fault suites named in tests/slow.list, for a
# pass that repeats a suite another pass runs whole: CI's TSan pass).
#
# Every binary runs in its own process group with the harness's temp dirs under one
# private TMPDIR; on exit, failure, timeout or Ctrl-C the group is killed and the dir
# removed, so no redis-server or inventoryd outlives the run. (The harness also gives
# each child PR_SET_PDEATHSIG and kills its registry on SIGINT/SIGTERM.)
set -u

mode=all
case "${1:-}" in
--unit) mode=unit; shift ;;
--integration) mode=integration; shift ;;
-h | --help)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac
build=${1:-build}
timeout_s=${TEST_TIMEOUT:-300}
filter=${TEST_FILTER:-}
slow_list="$(dirname "$0")/slow.list"
skipped=0

if [ ! -d "$build" ]; then
    echo "run.sh: no build directory '$build'" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

tmproot=$(mktemp -d "${TMPDIR:-/tmp}/inv-tests.XXXXXX") || exit 1
export TMPDIR=$tmproot
export INVENTORYD=${INVENTORYD:-$build/inventoryd}
current=

# Kill the running binary's process group (timeout made it the group leader), then
# anything left of it, and remove the temp root.
stop_current() {
    [ -n "$current" ] || return 0
    kill -TERM -- "-$current" 2>/dev/null || kill -TERM "$current" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        kill -0 -- "-$current" 2>/dev/null || break
        sleep 0.2
    done
    kill -KILL -- "-$current" 2>/dev/null
    wait "$current" 2>/dev/null
    current=
}
cleanup() {
    stop_current
    rm -rf "$tmproot"
}
interrupted() {
    echo "run.sh: interrupted; stopping tests" >&2
    cleanup
    trap - EXIT
    exit 130
}
trap cleanup EXIT
trap interrupted INT TERM HUP

passed=0
failed=0
failed_names=()
failed_why=

# run_one BINARY: run it under the timeout, record and report the result.
run_one() {
    local bin=$1 name log rc summary
    name=$(basename "$bin")
    log="$tmproot/$name.log"
    local t0=$SECONDS
    timeout -k 10 "$timeout_s" "$bin" >"$log" 2>&1 &
    current=$!
    wait "$current"
    rc=$?
    current=
    summary=$(grep -aE '^\[  (PASSED|FAILED)  \] [0-9]+ test' "$log" | tr -s ' ' |
        sed 's/\[ PASSED \]/passed/; s/\[ FAILED \]/failed/; s/, listed below://' |
        paste -sd ';' -)
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        printf 'PASS %-20s %3ds  %s\n' "$name" $((SECONDS - t0)) "$summary"
        if [ "${TEST_VERBOSE:-0}" = 1 ]; then
            cat "$log"
        fi
    else
        failed=$((failed + 1))
        failed_names+=("$name")
        local why="exit $rc"
        [ "$rc" -eq 124 ] && why="timed out after ${timeout_s}s"
        [ "$rc" -eq 137 ] && why="killed after timing out"
        printf 'FAIL %-20s %3ds  %s (%s)\n' "$name" $((SECONDS - t0)) "$summary" "$why"
        echo "----- output of $name -----"
        cat "$log"
        echo "----- end of $name -----"
        # The failing checks again, for the summary at the end: a long output may be
        # cut by whatever shows the run (a CI page keeps its head and tail).
        failed_why+="$name: $(grep -aE -B8 -A1 '^\[ +(ERROR|FAILED|LINE) +\]' "$log" |
            grep -avE '^\[ +(RUN|OK) +\]' | tail -30)"$'\n'
    fi
}

run_set() {
    local pattern=$1 found=0 bin
    for bin in "$build"/tests/$pattern; do
        [ -x "$bin" ] && [ -f "$bin" ] || continue
        case "$bin" in *.o | *.d) continue ;; esac
        if [ -n "$filter" ] && [[ "$(basename "$bin")" != *"$filter"* ]]; then
            continue
        fi
        if [ "${TEST_SKIP_SLOW:-0}" = 1 ] &&
            grep -qx "$(basename "$bin")" <(sed 's/#.*//; s/[[:space:]]//g' "$slow_list"); then
            printf 'SKIP %-20s (slow fault suite: TEST_SKIP_SLOW=1)\n' "$(basename "$bin")"
            skipped=$((skipped + 1))
            continue
        fi
        found=1
        run_one "$bin"
    done
    if [ "$found" = 0 ]; then
        echo "run.sh: no $pattern binaries in $build/tests" >&2
    fi
}

if [ "$mode" != integration ]; then
    run_set 'test_*'
fi
if [ "$mode" != unit ]; then
    if [ ! -x "$INVENTORYD" ]; then
        echo "run.sh: warning: service binary $INVENTORYD not found" >&2
    fi
    run_set 'it_*'
fi

if [ "${#failed_names[@]}" -gt 0 ]; then
    echo "----- the failed checks -----"
    printf '%s' "$failed_why"
    echo "failed: ${failed_names[*]}"
fi
if [ $((passed + failed)) -eq 0 ]; then
    echo "run.sh: no test binaries ran" >&2
    echo "0 passed, 0 failed"
    exit 1
fi
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
