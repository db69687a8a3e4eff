#!/usr/bin/env bash
# run.sh -- what `make run` runs: the service, with a redis-server of its own when no
# Redis answers at the configured address. Ctrl-C stops both.
#
#   service/run.sh BIN [inventoryd flags...]
#
# The Redis address and HTTP port are found the way inventoryd finds them: a flag,
# else INVENTORY_REDIS / INVENTORY_PORT, else the config file, else the defaults.
#
# CLUSTER=N (make run CLUSTER=3): a local Redis Cluster instead, N masters (3 or more)
# with a replica each on ports 7000.. (bus ports 17000..), data in var/cluster/<port>;
# made on first use with redis-cli --cluster create, started again as it was later.
# The service gets every node as a seed (--redis 127.0.0.1:7000,...).
#
# STORE=postgres (make run STORE=postgres): a PostgreSQL of its own instead of Redis:
# initdb into a temp dir (as the `postgres` user when run as root: PostgreSQL refuses
# root), the server on 127.0.0.1 with a free port and its socket in that dir, stopped
# by pid on exit and the dir removed. The service gets --store postgres://... and
# migrates the schema at start. PG_BINDIR: default /usr/lib/postgresql/15/bin.
#
# LOCK=redlock|memcached|zookeeper (make run LOCK=...): a lock service of its own
# beside the store, for SKUs with that "lock": three redis-servers without persistence
# (--redlock), a memcached (--memcached) or a standalone ZooKeeper (--zookeeper, java
# with the zookeeper package's classpath), on 127.0.0.1 with free ports and data in a
# temp dir, stopped by pid on exit and the dir removed.
set -euo pipefail

bin=$1
shift
config=${INVENTORY_CONFIG:-config/inventoryd.json}
redis_addr=${INVENTORY_REDIS:-}
port=${INVENTORY_PORT:-}
bind=${INVENTORY_BIND:-}
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case ${args[i]} in
    --config) config=${args[i + 1]:-} ;;
    --redis) redis_addr=${args[i + 1]:-} ;;
    --port) port=${args[i + 1]:-} ;;
    --bind) bind=${args[i + 1]:-} ;;
    esac
done
from_config() { [ -r "$config" ] && jq -r ".$1 // empty" "$config" 2>/dev/null || true; }
redis_addr=${redis_addr:-$(from_config redis)}
redis_addr=${redis_addr:-127.0.0.1:6379}
port=${port:-$(from_config port)}
port=${port:-8080}
bind=${bind:-$(from_config bind)}
bind=${bind:-127.0.0.1}
redis_host=${redis_addr%:*}
redis_port=${redis_addr##*:}

redis_pid=
svc_pid=
cluster_pids=()
pg_pid=
pg_dir=
lock_pids=()
lock_dir=
cleanup() {
    trap - EXIT INT TERM
    [ -n "$svc_pid" ] && kill -TERM "$svc_pid" 2>/dev/null && wait "$svc_pid" 2>/dev/null
    if [ -n "$pg_pid" ]; then
        kill -INT "$pg_pid" 2>/dev/null && wait "$pg_pid" 2>/dev/null
        echo "run: stopped PostgreSQL (pid $pg_pid)"
    fi
    [ -n "$pg_dir" ] && rm -rf "$pg_dir"
    if [ "${#lock_pids[@]}" -gt 0 ]; then
        kill -TERM "${lock_pids[@]}" 2>/dev/null || true
        wait "${lock_pids[@]}" 2>/dev/null || true # java exits 143 on SIGTERM
        echo "run: stopped the lock service (pids ${lock_pids[*]})"
    fi
    [ -n "$lock_dir" ] && rm -rf "$lock_dir"
    if [ -n "$redis_pid" ]; then
        kill -TERM "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
        echo "run: stopped redis-server (data kept in var/redis)"
    fi
    if [ "${#cluster_pids[@]}" -gt 0 ]; then
        kill -TERM "${cluster_pids[@]}" 2>/dev/null
        wait "${cluster_pids[@]}" 2>/dev/null
        echo "run: stopped the Redis Cluster (data kept in var/cluster)"
    fi
    exit 0
}
trap cleanup EXIT INT TERM

cluster=${CLUSTER:-}
if [ -n "$cluster" ]; then
    if ! [ "$cluster" -ge 3 ] 2>/dev/null; then
        echo "run: CLUSTER must be a number of masters, 3 or more (got '$cluster')" >&2
        exit 2
    fi
    nodes=$((2 * cluster))
    seeds=
    for ((i = 0; i < nodes; i++)); do
        p=$((7000 + i))
        mkdir -p "var/cluster/$p"
        redis-server --bind 127.0.0.1 --port "$p" --dir "$PWD/var/cluster/$p" \
            --cluster-enabled yes --cluster-config-file nodes.conf \
            --cluster-node-timeout 2000 --appendonly yes --save '' \
            --logfile "$PWD/var/cluster/$p/redis.log" --daemonize no &
        cluster_pids+=($!)
        seeds+="${seeds:+,}127.0.0.1:$p"
    done
    for ((i = 0; i < nodes; i++)); do
        for _ in $(seq 100); do
            redis-cli -p $((7000 + i)) ping >/dev/null 2>&1 && break
            sleep 0.1
        done
    done
    if ! redis-cli -p 7000 cluster info | grep -q 'cluster_state:ok'; then
        if [ "$(redis-cli -p 7000 cluster info | sed -n 's/^cluster_known_nodes:\([0-9]*\).*/\1/p')" = 1 ]; then
            echo "run: creating a Redis Cluster of $cluster masters with a replica each"
            redis-cli --cluster create $(echo "$seeds" | tr ',' ' ') --cluster-replicas 1 \
                --cluster-yes >var/cluster/create.log 2>&1 ||
                { echo "run: redis-cli --cluster create failed; see var/cluster/create.log" >&2; exit 1; }
        fi
        for _ in $(seq 150); do
            redis-cli -p 7000 cluster info | grep -q 'cluster_state:ok' && break
            sleep 0.2
        done
    fi
    echo "run: Redis Cluster on 127.0.0.1:7000-$((7000 + nodes - 1)) (data in var/cluster)"
    set -- "$@" --redis "$seeds"
    redis_addr=$seeds
fi

store=${STORE:-}
if [ "$store" = postgres ]; then
    pg_bin=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
    pg_dir=$(mktemp -d /tmp/inventoryd-pg.XXXXXX)
    chmod 755 "$pg_dir"
    as_pg=()
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$pg_dir"
        as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups --)
    fi
    "${as_pg[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -U postgres -A trust -E UTF8 \
        --locale C >"$pg_dir/initdb.log" 2>&1 ||
        { echo "run: initdb failed:" >&2; cat "$pg_dir/initdb.log" >&2; exit 1; }
    pg_port=
    for _ in 1 2 3 4 5; do # a free port (another server may take it first: try again)
        p=$((20000 + RANDOM % 20000))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
        "${as_pg[@]}" "$pg_bin/postgres" -D "$pg_dir/data" -p "$p" \
            -c listen_addresses=127.0.0.1 -c unix_socket_directories="$pg_dir" \
            >"$pg_dir/postgres.log" 2>&1 &
        pg_pid=$!
        for _ in $(seq 100); do
            if "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$p"; then
                pg_port=$p
                break
            fi
            kill -0 "$pg_pid" 2>/dev/null || break
            sleep 0.1
        done
        [ -n "$pg_port" ] && break
        kill -INT "$pg_pid" 2>/dev/null && wait "$pg_pid" 2>/dev/null
        pg_pid=
    done
    [ -n "$pg_port" ] ||
        { echo "run: postgres did not start:" >&2; cat "$pg_dir/postgres.log" >&2; exit 1; }
    pg_url="postgres://postgres@127.0.0.1:$pg_port/postgres"
    echo "run: PostgreSQL on 127.0.0.1:$pg_port (pid $pg_pid, data in $pg_dir, removed on exit)"
    set -- "$@" --store "$pg_url"
elif [ -n "$store" ]; then
    echo "run: STORE must be postgres (or unset: Redis), got '$store'" >&2
    exit 2
fi

# A free loopback port (another process may take it before the server binds it: the
# callers check that their server answers).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Wait until 127.0.0.1:$1 accepts connections while pid $2 lives (10 s).
await_port() {
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}
lock=${LOCK:-}
lock_hint=
if [ -n "$lock" ]; then
    lock_dir=$(mktemp -d /tmp/inventoryd-lock.XXXXXX)
    case $lock in
    redlock)
        addrs=
        for i in 1 2 3; do
            p=$(free_port)
            redis-server --bind 127.0.0.1 --port "$p" --save '' --appendonly no \
                --dir "$lock_dir" --logfile "$lock_dir/redlock-$i.log" --daemonize no &
            lock_pids+=($!)
            await_port "$p" "$!" || { echo "run: redis-server for RedLock failed" >&2; exit 1; }
            addrs+="${addrs:+,}127.0.0.1:$p"
        done
        echo "run: RedLock over 3 redis-servers at $addrs"
        set -- "$@" --redlock "$addrs"
        ;;
    memcached)
        p=$(free_port)
        as=()
        [ "$(id -u)" = 0 ] && as=(-u nobody)
        memcached -l 127.0.0.1 -p "$p" -U 0 "${as[@]}" >"$lock_dir/memcached.log" 2>&1 &
        lock_pids+=($!)
        await_port "$p" "$!" || { echo "run: memcached failed" >&2; exit 1; }
        echo "run: memcached on 127.0.0.1:$p"
        set -- "$@" --memcached "127.0.0.1:$p"
        ;;
    zookeeper)
        cp=$(sed -n 's/^CLASSPATH=//p' /etc/zookeeper/conf/environment 2>/dev/null | tr -d '"')
        [ -n "$cp" ] || { echo "run: no /etc/zookeeper/conf/environment (apt-get install zookeeper)" >&2; exit 1; }
        p=$(free_port)
        mkdir -p "$lock_dir/data"
        printf '%s\n' "dataDir=$lock_dir/data" "clientPort=$p" "clientPortAddress=127.0.0.1" \
            "tickTime=500" "admin.enableServer=false" >"$lock_dir/zoo.cfg"
        java -cp "$cp" -Dzookeeper.log.dir="$lock_dir" \
            org.apache.zookeeper.server.quorum.QuorumPeerMain "$lock_dir/zoo.cfg" \
            >"$lock_dir/zookeeper.log" 2>&1 &
        lock_pids+=($!)
        await_port "$p" "$!" || { echo "run: ZooKeeper failed; see $lock_dir/zookeeper.log" >&2; exit 1; }
        echo "run: ZooKeeper on 127.0.0.1:$p (pid $!)"
        set -- "$@" --zookeeper "127.0.0.1:$p"
        ;;
    *)
        echo "run: LOCK must be redlock, memcached or zookeeper (got '$lock')" >&2
        exit 2
        ;;
    esac
    lock_hint=", \"lock\": \"$lock\", \"rebalance\": false"
fi

if [ -n "$cluster" ] || [ -n "$store" ]; then
    :
elif redis-cli -h "$redis_host" -p "$redis_port" ping >/dev/null 2>&1; then
    echo "run: using the Redis that answers at $redis_addr"
else
    case $redis_host in
    127.* | localhost) ;;
    *)
        echo "run: no Redis answers at $redis_addr, and it is not this machine's to start" >&2
        exit 1
        ;;
    esac
    mkdir -p var/redis
    echo "run: no Redis at $redis_addr; starting redis-server (AOF everysec, data in var/redis)"
    redis-server --bind 127.0.0.1 --port "$redis_port" --dir "$PWD/var/redis" \
        --appendonly yes --appendfsync everysec --save '' \
        --logfile "$PWD/var/redis/redis.log" --daemonize no &
    redis_pid=$!
    for _ in $(seq 100); do
        redis-cli -h 127.0.0.1 -p "$redis_port" ping >/dev/null 2>&1 && break
        kill -0 "$redis_pid" 2>/dev/null || { echo "run: redis-server failed; see var/redis/redis.log" >&2; exit 1; }
        sleep 0.1
    done
fi

url="http://$bind:$port"
cat <<MSG
run: starting $bin on $url (Ctrl-C stops it)
  try:  curl -s -X PUT "$url/admin/skus/tv?reset=true" -H 'Content-Type: application/json' \\
             -d '{"stock": 1000, "segments": 20, "hold_ms": 20$lock_hint}'
        curl -s -X POST $url/orders -H 'Content-Type: application/json' -d '{"sku": "tv"}'
  load: make loadtest-quick   (or wrk -t2 -c100 -d10s -s loadtest/orders.lua $url/orders -- sku=tv)
MSG
"$bin" "$@" &
svc_pid=$!
wait "$svc_pid"
