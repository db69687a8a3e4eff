#!/usr/bin/env bash
# ci-deb.sh -- the packaging checks of CI (.ci/run), as root on Debian:
#   1. `make install` into temp DESTDIRs installs exactly the expected files, keeps an
#      existing configuration file, and `make uninstall` removes all but that file;
#   2. `make deb`, then lintian on the package: any error fails (the full output is shown);
#   3. `dpkg -i` it: inventoryd --version, the system user, the conffile's permissions,
#      --check-config as that user finding /etc/inventoryd/inventoryd.json by itself,
#      the unit's reload (ExecReload) and log directory (LogsDirectory), the postinst's
#      restart on upgrade (and a reinstall running it), `logrotate -d` on the logrotate
#      file, and `systemd-analyze verify` on the unit when systemd-analyze exists;
#   4. the installed binary, as user inventoryd, logging to /var/log/inventoryd as the
#      unit would, against a throwaway redis-server on a free 127.0.0.1 port: PUT a
#      SKU, POST /orders -> 201; then the installed logrotate file rotates the log
#      (`logrotate -f`), SIGHUP (what `systemctl reload` sends) reopens it, and the
#      next request's line is in the new file; both stopped by pid;
#   5. `dpkg -r` (binary gone, conffile kept), then `dpkg --purge` (conffile gone).
# Installs lintian and dpkg-dev when missing (CI only: `make deps` does not need them).
# Refuses to run when inventoryd is already installed or /etc/inventoryd exists, so it
# never removes an installation it did not make.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

die() {
    echo "ci-deb: FAIL: $*" >&2
    exit 1
}
say() { echo "ci-deb: $*"; }

[ "$(id -u)" = 0 ] || die "needs root (dpkg -i, a system user)"
pkg_status() { dpkg-query -W -f='${db:Status-Abbrev}' inventoryd 2>/dev/null || true; }
case "$(pkg_status)" in
"" | "un "*) ;;
*) die "inventoryd is already installed ($(pkg_status)); this script installs and purges its own" ;;
esac
[ ! -e /etc/inventoryd ] || die "/etc/inventoryd exists (make install?); move it away first"

missing=()
for p in lintian dpkg-dev redis-server redis-tools curl logrotate; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' ||
        missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing ${missing[*]}"
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/inv-ci-deb.XXXXXX")
redis_pid=
svc_pid=
installed=
cleanup() {
    local rc=$?
    set +e
    [ -z "$svc_pid" ] || { kill -KILL "$svc_pid" 2>/dev/null; wait "$svc_pid" 2>/dev/null; }
    [ -z "$redis_pid" ] || { kill -KILL "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; }
    if [ -n "$installed" ]; then
        dpkg --purge inventoryd >/dev/null 2>&1 || true
    fi
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---- 1. make install ----------------------------------------------------------------
# list_files DIR: every file and symlink under DIR, relative, sorted.
list_files() { (cd "$1" && find . \( -type f -o -type l \) -printf '%P\n' | LC_ALL=C sort); }
expect_files() { # DIR EXPECTED...
    local dir=$1 got want
    shift
    got=$(list_files "$dir")
    want=$(printf '%s\n' "$@" | LC_ALL=C sort)
    if [ "$got" != "$want" ]; then
        diff <(echo "$want") <(echo "$got") >&2 || true
        die "unexpected files under $dir (- expected, + installed)"
    fi
}

say "make install DESTDIR=$tmp/local (PREFIX=/usr/local)"
make --no-print-directory install DESTDIR="$tmp/local" >/dev/null
expect_files "$tmp/local" \
    etc/inventoryd/inventoryd.json \
    etc/logrotate.d/inventoryd \
    usr/local/lib/systemd/system/inventoryd.service \
    usr/local/sbin/inventoryd \
    usr/local/share/man/man8/inventoryd.8
grep -qx 'ExecStart=/usr/local/sbin/inventoryd --config /etc/inventoryd/inventoryd.json' \
    "$tmp/local/usr/local/lib/systemd/system/inventoryd.service" ||
    die "ExecStart of the installed unit does not name /usr/local/sbin/inventoryd"
! grep -q '@[A-Z]*@' "$tmp/local/usr/local/lib/systemd/system/inventoryd.service" ||
    die "a @PLACEHOLDER@ is left in the installed unit"
cmp -s config/inventoryd.json "$tmp/local/etc/inventoryd/inventoryd.json" ||
    die "the installed configuration differs from config/inventoryd.json"
[ "$(stat -c %a "$tmp/local/usr/local/sbin/inventoryd")" = 755 ] || die "binary not 0755"
"$tmp/local/usr/local/sbin/inventoryd" --version >/dev/null || die "installed binary fails"

say "make install again keeps an edited configuration"
echo '{"port": 9999}' >"$tmp/local/etc/inventoryd/inventoryd.json"
out=$(make --no-print-directory install DESTDIR="$tmp/local")
grep -q 'keeping the existing' <<<"$out" || die "make install did not say it kept the configuration"
grep -q 9999 "$tmp/local/etc/inventoryd/inventoryd.json" || die "configuration overwritten"

say "make uninstall leaves only the configuration"
make --no-print-directory uninstall DESTDIR="$tmp/local" >/dev/null
expect_files "$tmp/local" etc/inventoryd/inventoryd.json

say "make install DESTDIR=$tmp/usr PREFIX=/usr"
make --no-print-directory install DESTDIR="$tmp/usr" PREFIX=/usr >/dev/null
expect_files "$tmp/usr" \
    etc/inventoryd/inventoryd.json \
    etc/logrotate.d/inventoryd \
    usr/lib/systemd/system/inventoryd.service \
    usr/sbin/inventoryd \
    usr/share/man/man8/inventoryd.8

# ---- 2. make deb and lintian ------------------------------------------------------------
say "make deb"
make --no-print-directory deb
version=$(dpkg-parsechangelog -l packaging/debian/changelog -S Version)
deb=build/inventoryd_${version}_$(dpkg --print-architecture).deb
[ -f "$deb" ] || die "make deb did not produce $deb"
contents=$(dpkg-deb --contents "$deb" | awk '{print $NF}' | grep -v '/$' | sed 's|^\./||' |
    LC_ALL=C sort)
want=$(printf '%s\n' etc/inventoryd/inventoryd.json etc/logrotate.d/inventoryd \
    lib/systemd/system/inventoryd.service \
    usr/sbin/inventoryd usr/share/doc/inventoryd/changelog.Debian.gz \
    usr/share/doc/inventoryd/copyright usr/share/man/man8/inventoryd.8.gz | LC_ALL=C sort)
[ "$contents" = "$want" ] || {
    diff <(echo "$want") <(echo "$contents") >&2 || true
    die "unexpected files in $deb"
}

say "lintian $deb (errors fail; warnings are listed)"
lintian_rc=0
lintian_out=$(lintian --fail-on error --display-info "$deb" 2>&1) || lintian_rc=$?
grep -v '^running with root privileges' <<<"$lintian_out" || echo "(no tags)"
[ "$lintian_rc" = 0 ] || die "lintian reports errors (exit $lintian_rc)"

# ---- 3. dpkg -i -------------------------------------------------------------------------
say "dpkg -i $deb"
installed=1
dpkg -i "$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log" >&2; die "dpkg -i failed"; }
case "$(pkg_status)" in
ii*) ;;
*) die "after dpkg -i the status is '$(pkg_status)'" ;;
esac
inventoryd --version
[ "$(command -v inventoryd)" = /usr/sbin/inventoryd ] || die "inventoryd not in /usr/sbin"
getent passwd inventoryd >/dev/null || die "no system user inventoryd"
[ "$(stat -c '%U:%G %a' /etc/inventoryd/inventoryd.json)" = "root:inventoryd 640" ] ||
    die "conffile is $(stat -c '%U:%G %a' /etc/inventoryd/inventoryd.json), not root:inventoryd 640"
as_user() { setpriv --reuid inventoryd --regid inventoryd --init-groups -- "$@"; }
check=$(cd / && as_user inventoryd --check-config) || die "--check-config as inventoryd failed"
mapfile -t lines <<<"$check"
printf '    %s\n' "${lines[@]}"
grep -qx 'config file: /etc/inventoryd/inventoryd.json' <<<"$check" ||
    die "--check-config did not find /etc/inventoryd/inventoryd.json by itself"

unit=/lib/systemd/system/inventoryd.service
grep -qx 'ExecReload=/bin/kill -HUP $MAINPID' "$unit" || die "the unit has no ExecReload (SIGHUP)"
grep -qx 'LogsDirectory=inventoryd' "$unit" ||
    die "the unit has no LogsDirectory: a log_file under /var/log fails under ProtectSystem=strict"
grep -q 'deb-systemd-invoke try-restart inventoryd.service' /var/lib/dpkg/info/inventoryd.postinst ||
    die "the postinst does not restart a running service on upgrade"
say "dpkg -i again (an upgrade's postinst: configure with the version replaced)"
dpkg -i "$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log" >&2; die "dpkg -i over itself failed"; }
grep -q '^/etc/logrotate.d/inventoryd$' /var/lib/dpkg/info/inventoryd.conffiles ||
    die "/etc/logrotate.d/inventoryd is not a conffile"
say "logrotate -d /etc/logrotate.d/inventoryd"
logrotate -d /etc/logrotate.d/inventoryd >"$tmp/logrotate-d.log" 2>&1 || {
    cat "$tmp/logrotate-d.log" >&2
    die "logrotate does not accept /etc/logrotate.d/inventoryd"
}
! grep -qi 'error' "$tmp/logrotate-d.log" || {
    cat "$tmp/logrotate-d.log" >&2
    die "logrotate reports an error on /etc/logrotate.d/inventoryd"
}

if command -v systemd-analyze >/dev/null 2>&1; then
    say "systemd-analyze verify /lib/systemd/system/inventoryd.service"
    # verify exits 0 on unknown keys and bad values (it only warns): any output fails.
    out=$(systemd-analyze verify /lib/systemd/system/inventoryd.service 2>&1) ||
        die "systemd-analyze verify failed: $out"
    [ -z "$out" ] || die "systemd-analyze verify warns: $out"
    say "systemd-analyze verify: clean"
else
    say "systemd-analyze not found: skipping the unit check (apt-get install systemd)"
fi

# ---- 4. one order through the installed binary ----------------------------------------
# free_port: a 127.0.0.1 port nothing answers on, below the ephemeral range so that no
# outgoing connection holds it (the caller still retries: another job may take it).
free_port() {
    local p low
    low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    for _ in $(seq 50); do
        p=$((10000 + RANDOM % (low - 10000)))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}
# wait_up PID SECONDS COMMAND...: retry COMMAND every 0.1 s while PID lives.
wait_up() {
    local pid=$1 deadline=$((SECONDS + $2))
    shift 2
    until "$@" >/dev/null 2>&1; do
        kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}
# stop_pid PID: SIGKILL and reap a child that failed to come up.
stop_pid() {
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

mkdir -p "$tmp/redis"
redis_up() { [ "$(redis-cli -p "$rport" ping 2>/dev/null)" = PONG ]; }
for _ in 1 2 3 4 5; do
    rport=$(free_port) || die "no free port for redis-server"
    redis-server --port "$rport" --bind 127.0.0.1 --dir "$tmp/redis" --save '' \
        --appendonly no >"$tmp/redis.log" 2>&1 &
    redis_pid=$!
    wait_up "$redis_pid" 10 redis_up && break
    stop_pid "$redis_pid"
    redis_pid=
done
[ -n "$redis_pid" ] || { cat "$tmp/redis.log" >&2; die "redis-server did not start"; }
say "redis-server pid $redis_pid on 127.0.0.1:$rport"

# /var/log/inventoryd as the unit's LogsDirectory (mode 0750) makes it.
logdir=/var/log/inventoryd
made_logdir=
if [ ! -e "$logdir" ]; then
    install -d -o inventoryd -g inventoryd -m 0750 "$logdir"
    made_logdir=1
fi
svclog=$logdir/inventoryd.log
for _ in 1 2 3 4 5; do
    port=$(free_port) || die "no free port for inventoryd"
    (cd / && exec setpriv --reuid inventoryd --regid inventoryd --init-groups -- \
        /usr/sbin/inventoryd --port "$port" --redis "127.0.0.1:$rport" --threads 4 \
        --log-file "$svclog" --log-format json) \
        >"$tmp/svc.log" 2>&1 &
    svc_pid=$!
    wait_up "$svc_pid" 15 curl -fsS "http://127.0.0.1:$port/livez" && break
    stop_pid "$svc_pid"
    svc_pid=
done
[ -n "$svc_pid" ] || { cat "$tmp/svc.log" >&2; die "inventoryd did not start"; }
say "installed inventoryd pid $svc_pid on 127.0.0.1:$port, as user inventoryd"
U=http://127.0.0.1:$port
J='Content-Type: application/json'

code=$(curl -sS -o "$tmp/put.json" -w '%{http_code}' -X PUT "$U/admin/skus/ci-sku" -H "$J" \
    -d '{"stock": 5, "segments": 2, "hold_ms": 0}')
[ "${code:0:1}" = 2 ] || die "PUT /admin/skus/ci-sku answered $code: $(cat "$tmp/put.json")"
code=$(curl -sS -o "$tmp/order.json" -w '%{http_code}' -X POST "$U/orders" -H "$J" \
    -d '{"sku": "ci-sku", "qty": 1, "order_id": "ci-order-1"}')
[ "$code" = 201 ] || die "POST /orders answered $code: $(cat "$tmp/order.json")"
say "POST /orders -> 201 $(cat "$tmp/order.json")"
grep -q '"sold": *1' <(curl -fsS "$U/admin/skus/ci-sku") || die "the SKU does not show 1 sold"

say "logrotate -f the installed file, SIGHUP, and the next line lands in the new log"
curl -sS -H 'X-Request-Id: ci-before-rotate' "$U/livez" >/dev/null
sleep 0.5
grep -q '"request_id":"ci-before-rotate"' "$svclog" || die "no access line in $svclog"
logrotate -f -s "$tmp/logrotate.state" /etc/logrotate.d/inventoryd ||
    die "logrotate -f failed"
[ -s "$svclog.1" ] || die "logrotate did not rotate $svclog to $svclog.1"
kill -HUP "$svc_pid"
# Until the service has taken the signal its lines still go to the rotated file.
reopened=
for i in $(seq 50); do
    curl -sS -H "X-Request-Id: ci-after-rotate-$i" "$U/livez" >/dev/null
    sleep 0.1
    if [ -f "$svclog" ] && grep -q "\"request_id\":\"ci-after-rotate-$i\"" "$svclog"; then
        reopened=1
        break
    fi
done
[ -n "$reopened" ] || die "after logrotate and SIGHUP the service did not write to a new $svclog"
say "rotated: $(wc -l <"$svclog.1") lines in $svclog.1, the new ones in $svclog"

kill -TERM "$svc_pid"
svc_rc=0
wait "$svc_pid" || svc_rc=$?
svc_pid=
[ "$svc_rc" = 0 ] || { cat "$tmp/svc.log" >&2; die "inventoryd exited $svc_rc on SIGTERM"; }
kill -TERM "$redis_pid"
wait "$redis_pid" || true
redis_pid=
[ -z "$made_logdir" ] || rm -rf "$logdir"
say "both stopped"

# ---- 5. dpkg -r, dpkg --purge ---------------------------------------------------------
say "dpkg -r inventoryd"
dpkg -r inventoryd >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log" >&2; die "dpkg -r failed"; }
[ ! -e /usr/sbin/inventoryd ] || die "/usr/sbin/inventoryd still there after dpkg -r"
[ -e /etc/inventoryd/inventoryd.json ] || die "dpkg -r removed the conffile"
say "dpkg --purge inventoryd"
dpkg --purge inventoryd >"$tmp/dpkg.log" 2>&1 || {
    cat "$tmp/dpkg.log" >&2
    die "dpkg --purge failed"
}
installed=
[ ! -e /etc/inventoryd ] || die "/etc/inventoryd still there after dpkg --purge"
! dpkg-statoverride --list /etc/inventoryd/inventoryd.json >/dev/null ||
    die "the statoverride survived dpkg --purge"
say "OK"
