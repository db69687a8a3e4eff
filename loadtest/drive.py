#!/usr/bin/env python3
"""drive.py -- the load test's driver: processes and scenarios; analyze.py does the rest.

`loadtest/run.sh [options]` runs `drive.py [options]` (RUN_USAGE below). It starts
redis-server and the service binary on free 127.0.0.1 ports (unless --url), and for
each scenario creates a fresh SKU through the admin API, runs wrk (redis-benchmark for
the Redis ceiling) and hands wrk's output to analyze.py for the audit and the row.
At the end it stops what it started and has analyze.py write the results, the plots
and, with --update-docs, the docs.

Processes: every child (redis-server, inventoryd, wrk, its poller, redis-benchmark,
idle.py) is started through Children, bounded in time (wrk by -d and a wait of -d +
30 s, the poller by 600 s, redis-benchmark by 300 s, idle.py by its own --max-seconds
and a wait of 90 s for its connections) and stopped by its pid -- SIGTERM, then SIGKILL
after a grace period -- on exit, failure, Ctrl-C or SIGTERM. At most two wrk processes
run at once (the end-of-sale scenario's orders and its poller). Everything talks to
127.0.0.1 only. The driver raises its RLIMIT_NOFILE soft limit (to 65536, past the hard
limit when allowed) so that its children inherit room for the 2000 wrk connections of
curve256 and the idle connections of idle10k; the service it starts gets a config file
of its own with max_connections raised to hold them (CONFIG below).

Exit status: 0 every audit passed, 1 an audit failed, 2 bad usage or setup error,
130 interrupted. Python 3.9 or later, standard library only.
"""

import argparse
import glob
import json
import math
import os
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.dont_write_bytecode = True  # no loadtest/__pycache__ in the source tree
import analyze as an  # noqa: E402 (after the line above)
import lockload  # noqa: E402
from analyze import SetupError, num, paint, say  # noqa: E402
from idle import raise_nofile  # noqa: E402 (one copy, shared with idle.py)

RUN_USAGE = """\
Usage: loadtest/run.sh [options]

Runs the inventory load test: for each scenario a fresh SKU, a wrk run of fixed length
and connection count, then an audit through the admin API (remaining + sold = initial,
no segment below 0, the segment arrays sum to remaining and sold, sold = the 201s wrk
saw, orders = sold, sampled order ids readable). A failed audit prints FAILED and makes
the exit status 1. run.sh starts loadtest/drive.py, which drives the processes and
leaves the audit, the tables and the plots to loadtest/analyze.py.

Scenarios, in run order (--only picks groups)
  hold0     hold 0 ms: global lock (1 segment), segment locks (20), atomic (20 segments)
  redis     redis-benchmark -c <connections> running the same deduction Lua: Redis ceiling
  livez     GET /livez: the HTTP ceiling
  soldout   sold-out storm: orders against a SKU with 0 stock, every answer 409; run
            right after livez with the same wrk settings and duration, for the ratio
            sold-out req/s / livez req/s
  idle10k   segment locks (20 segments), hold 0 ms, twice back to back with the same
            settings: idle-without, then idle-with while loadtest/idle.py holds 10000
            idle keep-alive connections (--idle-connections; --quick: 1000) open to the
            service, each served one GET /livez first, opened before wrk starts and
            closed after it ends; orders/s with / without and the service's RSS
            (VmRSS) during each. Every idle connection must open and stay open.
            idle-without's SKU is deleted before idle-with, so both meet the same
            Redis (its CPU per order grows with the records it holds).
            Runs before the curve: the memory curve256's 2000 connections leave in
            the service would otherwise hide what the idle connections add to RSS
  curve     lock mode, hold 20 ms, segments 1 2 4 8 16 20 32 64 (1 vs 20 is the seed's
            comparison; --quick: 1 4 20 64), then the curve256 point
  curve256  the curve's wide point: lock mode, hold 20 ms, 256 segments, 2000 wrk
            connections (also with --quick); its orders/s against the target 11500.
            Each order waits in a timer, not a thread: nothing in the service caps
            the orders in flight below the connections
  flash     flash sale: 1000 stock over 20 segments, a fixed number of orders (100000;
            --quick: 20000): exactly 1000 x 201, the rest 409
  rebalance the end of a sale with and without automatic rebalancing: two SKUs, 2000
            stock, 20 segments, lock, hold 20 ms, "rebalance" false / true, made uneven
            the same way first (9 orders of qty 100 empty 9 segments, 5 of qty 60 leave
            40 in 5 more), then sold out by orders of 1; orders/s while the last 10% of
            the stock sells, from the 201s' arrival times and from polling
            GET /admin/skus/{sku} every 25 ms
  batch     group commit (a SKU's "batch"): lock, hold 20 ms, segments 1 4 20 (--quick:
            1 20) at batch 1, 8 and 64 (the plot); then hold 0 ms, 20 segments, lock
            and atomic at batch 1 and 64, each row's SKU deleted once audited (every row
            meets the same Redis); each pair's ratio and the targets: 1 segment
            batch 64 >= 1000 orders/s, 20 segments batch 64 / batch 1 >= 10, hold 0
            batch 64 / batch 1 >= 1.15 and Redis CPU <= 6 us per order, p99 at hold
            20 ms <= 2 x hold + 10 ms
  batch20   group commit at hold 20 ms on 20 segments only: batch 1 then 64 at
            --connections and at 1000 connections (enough for batches to fill:
            orders/s = connections / mean answer time, and batch 1 is capped at
            segments / hold); each pair's ratio (target >= 10) and batch 64's p99
            (target <= 50 ms)
  reserve   reservations at hold 0: orders (lock, 20 segments) then, on a fresh SKU
            of the same settings, each order as a reservation and its confirm
            (loadtest/reserve.lua): confirmed orders/s against orders/s; audited
            remaining + reserved + sold = initial and sold = the confirms' 201s
  cluster   a Redis Cluster of 3 masters with a replica each (6 redis-servers) and a
            second service on it: lock 20 segments at hold 0 and at hold 20 ms, and
            hold 0 with durability "replicated"; each master's share of the script
            calls; orders/s against lock20-h0 and curve-20 of the same run
  locks     each lock beside the Redis store: "redis" (the store's own), "redlock" (3
            redis-servers without persistence), "memcached", "zookeeper" (standalone),
            started here with a second service (--redlock, --memcached, --zookeeper):
            hold 0 ms on 20 segments, hold 20 ms on 1 and on 20 segments (20 / 1 >= 19)
  pg        the PostgreSQL store (a PostgreSQL 15 of its own, fsync=off, and a service
            with --store postgres://... --threads 6): "lock" "row", "lease",
            "optimistic" at the same three points, "mode" "atomic" at hold 0 ms, then
            the database's ceiling: pgbench (--connections clients, --duration) running
            atomic's conditional UPDATE alone (atomic / pgbench: issue 23's >= 0.7);
            group commit: atomic hold 0 at batch 64, row and lease hold 20 ms on 1
            segment at batch 64 (>= 1000 orders/s).
            locks and pg: every run audited as above; loadtest/lockload.py, and
            <timestamp>-locks.png plots them side by side
  locks-h20 not in the default list: the locks group's hold-20 ms points of redlock,
            memcached and zookeeper alone (1 and 20 segments; 20 / 1 >= 19)
  pg-h20    not in the default list: the pg group's hold-20 ms points alone (row and
            lease, 1 and 20 segments; 20 / 1 >= 19), ~4 x --duration
  batch-h0  not in the default list: the batch group's hold-0 rows alone (lock and
            atomic, batch 1 and 64), ~4 x --duration
  pg-h0     not in the default list: PostgreSQL at hold 0 on 20 segments, row, lease
            and atomic, each at batch 1 then 64 (lockload.py), ~6 x --duration
  retention not in the default list (several minutes): loadtest/retention.py, the
            ledger's long run (issue 24) with its own Redis, PostgreSQL and service:
            Redis memory, keys, segment hash fields and CPU per order every 250,000
            orders over 2,500,000 (lock and atomic, hold 0, record_retention_s 10), the
            events' cost (ledger off / on) and the sink's lag; its own JSON in --out

Measures: orders/s is 201s per second of the send window; after the window wrk sends
nothing more and waits for the orders in flight, so every order the service handled
was counted. p50/p99 come from wrk's latency histogram (all requests of the run).
For every timed order scenario (hold0, curve, curve256, idle10k), per 201: the
service's CPU (utime + stime, /proc/<pid>/stat) and Redis's (INFO cpu) in µs, Redis
commands (INFO commandstats, in all, scripts, and by name), from just before wrk starts
to just after it ends; the service's pipeline batch size (commands per write) when
GET /admin/stats or GET /metrics has redis_commands and redis_writes counters (else
n/a); the service's peak VmRSS while wrk ran. Service figures need a service this run
started (n/a with --url); Redis figures need its address (--redis with --url).
Targets (ratios from this one run) are printed and saved but do not fail the run:
20 / 1 segments at hold 20 ms >= 19; lock / atomic at hold 0 ms >= 0.6; atomic /
redis-benchmark >= 0.35; p99 of lock 20 segments at hold 0 ms <= 10 ms; sold-out storm
req/s / GET /livez req/s >= 0.8; orders/s at 256 segments and 2000 connections, hold 20 ms,
/ 11500 >= 1; cluster / single Redis >= 0.8; each master's script calls within 1/3 +- 10%.

Options
  --bin PATH           service binary to start (default build/inventoryd)
  --url URL            use a running service instead of starting redis-server and one
  --redis HOST:PORT    with --url: the Redis to run redis-benchmark against (else skipped)
  --admin-token T      send "Authorization: Bearer T" to /admin/* (and start the service
                       with it)
  --connections N      wrk connections, also redis-benchmark -c (default 100)
  --wrk-threads N      wrk threads (default 2)
  --service-threads N  --threads (event loops) for the service we start (default:
                       the service's own, one per core)
  --duration S         seconds of orders per timed scenario (default 10; --quick 3)
  --flash-requests N   orders sent in the flash sale (default 100000; --quick 20000)
  --idle-connections N idle connections held during idle10k (default 10000; --quick
                       1000)
  --only LIST          comma-separated scenario groups to run (default: all)
  --quick              short runs and fewer curve points: everything in under 60 s
  --out DIR            where results go (default loadtest/results)
  --keep               keep the temp dir (logs, raw wrk output) and print its path
  --update-docs        also copy the plots to docs/ and rewrite the generated part of
                       docs/BENCHMARKS.md (meant for a full run)
  -h, --help           this text

Service config (CONFIG): the service run.sh starts reads a config file of its own
(--config, in the temp dir) with max_connections = max(--idle-connections +
--connections, 2000) + 2000 (12100 by default) and connection_timeout_s 120 (so the
idle connections outlive a run); every other setting is the built-in default or a flag.

Results: <out>/<timestamp>.{md,json} and <timestamp>-{scaling,hold0,rebalance,locks}.png
(each plot when its scenarios ran); the JSON and the .md record the git commit. Afterwards:
  loadtest/analyze.py compare [OLD.json NEW.json]   two runs side by side
  loadtest/analyze.py report RESULTS.json           the .md and the plots again
  loadtest/analyze.py audit --url URL SKU...        a SKU's invariants, any time

Colour only on a terminal; NO_COLOR=1 turns it off there too.
"""

GROUPS = ("curve", "curve256", "hold0", "flash", "soldout", "livez", "redis", "rebalance",
          "idle10k", "batch", "batch20", "reserve", "cluster", "locks", "pg")  # run order: run_scenarios()
EXTRA_GROUPS = ("retention",)  # only with --only: loadtest/retention.py
CLUSTER_MASTERS = 3  # the cluster group: masters, each with a replica
BIG_STOCK = 100000000  # never sells out in a timed run
FLASH_STOCK = 1000
REDIS_BENCH_STOCK = 1000000000
EXTRA_GROUPS += ("pg-h20", "locks-h20")  # only with --only: a group's hold-20 ms rows
EXTRA_GROUPS += ("batch-h0", "pg-h0")  # only with --only: group commit at hold 0 alone

# The Redis ceiling: the same check-and-deduct Lua, straight from redis-benchmark.
DEDUCT_LUA = ("local s=tonumber(redis.call('GET',KEYS[1]) or '0') if s>=1 then "
              "redis.call('DECRBY',KEYS[1],1) redis.call('INCRBY',KEYS[2],1) "
              "return 1 end return 0")


class Interrupted(Exception):
    """SIGTERM: stop what was started, exit 130 (SIGINT raises KeyboardInterrupt)."""


# ------------------------------------------------------------------------ Redis

class RedisError(Exception):
    pass


def redis_command(addr, *args, timeout=5):
    """Sends one command to the Redis at "host:port"; returns its reply (str, int, None or
    list). Raises RedisError on an error reply, OSError when Redis cannot be reached."""
    host, port = addr.rsplit(":", 1)
    parts = [str(a).encode() for a in args]
    payload = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(payload)
        with s.makefile("rb") as f:
            return _resp_reply(f)


def _resp_reply(f):
    line = f.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RedisError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2].decode()
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_resp_reply(f) for _ in range(n)]
    raise RedisError(f"unexpected reply {line[:80]!r}")


def redis_ping(addr):
    try:
        return redis_command(addr, "PING", timeout=1) == "PONG"
    except (OSError, RedisError):
        return False


# ------------------------------------------------------------------------ processes

class Children:
    """The processes this run started; each is stopped by its pid, never by name."""

    def __init__(self):
        self.live = []  # (Popen, grace seconds), in start order

    def start(self, argv, log, grace=5, env=None):
        """Starts `argv` with stdout and stderr appended to the file `log` (and `env`,
        when given, as its environment)."""
        with open(log, "ab") as out:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, env=env)
        self.live.append((p, grace))
        return p

    def stop(self, p):
        """SIGTERM, up to the process's grace period, then SIGKILL; reaps it."""
        grace = next((g for q, g in self.live if q is p), 2)
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.live = [(q, g) for q, g in self.live if q is not p]

    def wait(self, p, seconds):
        """Waits up to `seconds` for `p` to end by itself, then stops it."""
        try:
            p.wait(max(seconds, 1))
        except subprocess.TimeoutExpired:
            pass
        self.stop(p)

    def stop_all(self):
        """Stops every child still running, the last started first."""
        for p, _ in reversed(list(self.live)):
            self.stop(p)


def free_port():
    """A loopback port nothing listens on, below the kernel's ephemeral range so that no
    client socket (wrk's connections, other test runs) can be holding it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        lo = 32768
    if lo <= 11000:
        lo = 32768
    for _ in range(100):
        port = random.randrange(10000, lo)
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise SetupError("no free loopback port")


def port_free(port):
    """True when `port` can be bound on 127.0.0.1 now."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def proc_cpu_seconds(pid):
    """utime + stime of process `pid` in seconds (all its threads), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def proc_rss_kb(pid):
    """VmRSS of process `pid` in KiB, or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class RssSampler:
    """VmRSS of a process every `every` s on a thread of its own, between start() and
    stop(); stop() returns {"max", "first", "last", "samples"} (KiB) or None."""

    def __init__(self, pid, every=0.2):
        self.pid, self.every = pid, every
        self.values = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while True:
            v = proc_rss_kb(self.pid)
            if v is not None:
                self.values.append(v)
            if self.done.wait(self.every):
                return

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.done.set()
        self.thread.join(5)
        v = self.values
        if not v:
            return None
        return {"max": max(v), "first": v[0], "last": v[-1], "samples": len(v)}


def wait_up(seconds, proc, probe):
    """Polls `probe()` until it is true (True), `proc` exits or `seconds` pass (False)."""
    for _ in range(int(seconds * 10)):
        if probe():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


# ------------------------------------------------------------------------ the run

class Run:
    """One load test: its options, the processes it started, the rows it measured."""

    def __init__(self, opts, children, tmp):
        self.o = opts
        self.children = children
        self.tmp = tmp
        self.redis = opts.redis
        self.url = opts.url
        self.svc = None
        self.api = None
        self.nonce = "lt%x%04x" % (int(time.time()), random.randrange(65536))
        self.index = 0
        self.rows = []
        self.failed = 0
        self.reb_pre_dist = None
        self.service_config = None
        self.nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]

    # ---- processes

    def start_redis(self):
        """redis-server on a free loopback port, no persistence; retried on a new port."""
        rdir = os.path.join(self.tmp, "redis")
        os.makedirs(rdir, exist_ok=True)
        log = os.path.join(self.tmp, "redis.log")
        for _ in range(5):
            port = free_port()
            p = self.children.start(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", rdir,
                 "--save", "", "--appendonly", "no", "--daemonize", "no",
                 "--maxclients", "10000"], log)
            addr = f"127.0.0.1:{port}"
            if wait_up(10, p, lambda: redis_ping(addr)):
                self.redis = addr
                say(f"redis-server: {addr} (pid {p.pid}, no persistence)")
                return
            self.children.stop(p)
        sys.stderr.write(an.tail(log, 20))
        raise SetupError("redis-server did not start")

    def start_service(self):
        """The service binary on a free loopback port against our Redis, with a config
        file of its own (CONFIG in RUN_USAGE); retried."""
        log = os.path.join(self.tmp, "inventoryd.log")
        self.service_config = {"max_connections": self.o.service_max_connections,
                               "connection_timeout_s": 120}
        config = os.path.join(self.tmp, "inventoryd.json")
        with open(config, "w") as f:
            json.dump(self.service_config, f)
        for _ in range(5):
            port = free_port()
            args = ["--config", config, "--port", str(port), "--bind", "127.0.0.1",
                    "--redis", self.redis]
            if self.o.service_threads:
                args += ["--threads", str(self.o.service_threads)]
            if self.o.admin_token:
                args += ["--admin-token", self.o.admin_token]
            p = self.children.start([self.o.bin] + args, log)
            api = an.Api(f"http://127.0.0.1:{port}", self.o.admin_token, timeout=2)
            if wait_up(15, p, lambda: api.call("GET", "/livez")[0] == 200):
                say(f"service: {self.o.bin} {' '.join(args)}")
                self.svc, self.url = p, api.url
                say(f"service: {self.url} (pid {p.pid})")
                return
            self.children.stop(p)
        sys.stderr.write(an.tail(log, 30))
        raise SetupError("the service did not answer GET /livez")

    def service_died(self):
        return self.svc is not None and self.svc.poll() is not None

    def run_wrk(self, script, out, cap, args, donedir=None, connections=None):
        """wrk with `script` for at most `cap` s and `connections` (default --connections);
        with `donedir`, ended by SIGINT once every thread has put its marker there (all
        its orders answered). Returns wrk's output."""
        argv = ["wrk", "-t", str(self.o.wrk_threads), "-c",
                str(connections or self.o.connections),
                "-d", f"{cap}s", "--timeout", "30s", "-s", os.path.join(an.HERE, script),
                self.url, "--", *args]
        p = self.children.start(argv, out, grace=2)
        deadline = time.monotonic() + cap + 30
        while donedir and p.poll() is None and time.monotonic() < deadline:
            if len(glob.glob(os.path.join(donedir, "done-*"))) >= self.o.wrk_threads:
                p.send_signal(signal.SIGINT)
                break
            time.sleep(0.05)
        self.children.wait(p, deadline - time.monotonic())
        with open(out, errors="replace") as f:
            return f.read()

    def usage(self, before):
        """What the service and Redis have used so far (analyze.cost_figures' input):
        service_cpu_s, redis_cpu_s, redis_calls and the service's pipeline counters, each
        None when unknown. Read in the order that keeps the reads themselves out of the
        window: the HTTP reads first and the service's CPU last `before` wrk, the
        reverse after it."""
        snap = {"service_cpu_s": None, "redis_cpu_s": None, "redis_calls": None,
                "pipeline": None}

        def service():
            if self.svc is not None:
                snap["service_cpu_s"] = proc_cpu_seconds(self.svc.pid)

        def redis():
            if self.redis:
                try:
                    snap["redis_cpu_s"] = an.redis_cpu_seconds(
                        redis_command(self.redis, "INFO", "cpu"))
                    snap["redis_calls"] = an.redis_calls(
                        redis_command(self.redis, "INFO", "commandstats"))
                except (OSError, RedisError):
                    pass

        def pipeline():
            snap["pipeline"] = self.api.pipeline_counters()

        for step in (pipeline, redis, service) if before else (service, redis, pipeline):
            step()
        return snap

    # ---- bookkeeping

    def new_sku(self, name):
        self.index += 1
        return f"{self.nonce}-{self.index}-{name}"

    def tmp_path(self, kind, name):
        return os.path.join(self.tmp, f"{kind}-{self.index}-{name}.txt")

    def markers(self):
        d = os.path.join(self.tmp, f"markers-{self.index}")
        os.makedirs(d, exist_ok=True)
        return d

    def header(self, name, text):
        say(f"{paint('[' + name + ']', 'bold')} {text}")

    def finish(self, row, extra=""):
        """Records a row and prints ok (with `extra`) or FAILED with its reasons."""
        if self.service_died():
            row["failures"].append("the service process died")
            row["audit"] = "FAILED"
        self.rows.append(row)
        if row["failures"]:
            self.failed += 1
            say(f"  {paint('FAILED', 'red', 'bold')} {row['name']}")
            for msg in row["failures"]:
                say(f"    - {msg}")
        else:
            say(f"  {paint('ok', 'green')} {row['name']} {extra}")

    def wrk_result(self, text, out, fails):
        """wrk's LOADTEST_RESULT, or None (with a failure added and wrk's last lines)."""
        r = an.parse_marker(text, "LOADTEST_RESULT")
        if r is None:
            sys.stderr.write(an.tail(out, 20))
            fails.append("wrk printed no LOADTEST_RESULT line")
            return None
        return {**an.EMPTY_RESULT, **r}

    def put_sku(self, sku, settings, fails):
        # ?reset=true: a scenario's SKU may be left from an earlier run; start it over
        code, text = self.api.call("PUT", f"/admin/skus/{sku}?reset=true", settings)
        if code not in (200, 201, 204):
            fails.append(f"PUT /admin/skus/{sku} answered {code}: {text[:200]}")
            return False
        return True

    # ---- scenarios

    def run_orders(self, *args, **kwargs):
        """orders_row(), recorded and printed."""
        self.finish(*self.orders_row(*args, **kwargs))

    def orders_row(self, name, strategy, mode, segs, hold, stock, how, amount,
                   expect_sold=None, connections=None, settings=None):
        """Orders of 1 on a fresh SKU, for `amount` s (how="active") or `amount` orders
        (how="requests"), from `connections` (default --connections), then the audit;
        `expect_sold`: exactly that many 201s. A timed run (active) also measures the
        cost per order and the service's RSS while wrk runs. Returns (row, the text
        finish() prints after ok)."""
        sku = self.new_sku(name)
        conns = connections or self.o.connections
        self.header(name, f"{strategy}: mode {mode}, {segs} segments, hold {hold} ms, "
                          f"stock {stock}, {how} {amount}, {conns} connections")
        base = {"name": name, "strategy": strategy, "mode": mode, "sku": sku,
                "segments": segs, "hold_ms": hold, "stock": stock, "connections": conns}
        fails = []
        if not self.put_sku(sku, {"stock": stock, "segments": segs, "mode": mode,
                                  "hold_ms": hold, **(settings or {})}, fails):
            return {**base, "audit": "FAILED", "failures": fails}, ""
        if conns + 64 > self.nofile:
            fails.append(f"RLIMIT_NOFILE is {self.nofile}: too low for {conns} wrk "
                         f"connections")
        donedir, out = self.markers(), self.tmp_path("wrk", name)
        # The -d cap: the window plus room for the slowest order (lock wait + hold) to
        # be answered; wrk is normally ended much earlier, when its threads are done.
        cap = amount + 10 + hold // 100 if how == "active" else 60 + amount // 1000
        timed = how == "active"
        before = self.usage(True) if timed else None
        rss = RssSampler(self.svc.pid).start() if timed and self.svc else None
        text = self.run_wrk("orders.lua", out, cap, [
            f"sku={sku}", "qty=1", f"nonce={self.nonce}-{self.index}",
            f"threads={self.o.wrk_threads}", f"{how}={amount}", f"donedir={donedir}"],
            donedir, conns)
        rss_kb = rss.stop() if rss else None
        after = self.usage(False) if timed else None
        r = self.wrk_result(text, out, fails)
        if r is not None:
            fails += an.audit_orders(self.api, sku, r, {
                "mode": mode, "segments": segs, "stock": stock, "qty": 1,
                "requests": amount if how == "requests" else None,
                "sold": expect_sold, "all_409": expect_sold is not None}, self.tmp)
        r = r or an.EMPTY_RESULT
        w = r["window_s"]
        row = an.wrk_row(base, r, fails, an.rate(r["c201"], w), an.rate(r["answered"], w))
        extra = ""
        if timed:
            c = row["cost"] = an.cost_figures(before, after, r["c201"])
            row["rss_kb"] = rss_kb
            def f(x, digits):
                return an.fixed(x, digits, "n/a")
            extra = (f"; per order: service {f(c['service_cpu_us_per_order'], 1)} µs CPU, "
                     f"Redis {f(c['redis_cpu_us_per_order'], 1)} µs CPU, "
                     f"{f(c['redis_commands_per_order'], 2)} commands "
                     f"({f(c['redis_scripts_per_order'], 2)} scripts); commands/write "
                     f"{f(c['pipeline']['commands_per_write'], 2)}; RSS "
                     f"{f(an.mib((rss_kb or {}).get('max')), 1)} MiB")
        return row, (f"{math.floor(row['orders_s'])} orders/s, "
                     f"{math.floor(row['req_s'])} req/s, p50 {num(row['p50_ms'])} ms, "
                     f"p99 {num(row['p99_ms'])} ms, 201 {r['c201']}, 409 {r['c409']}, "
                     f"503 {r['c503']}" + extra)

    def run_soldout(self):
        """The sold-out storm: orders against 0 stock for the livez run's time."""
        sku = self.new_sku("soldout")
        self.header("soldout", f"sold-out storm: 0 stock, 20 segments, lock, "
                               f"{self.o.livez_secs}s")
        fails, fast, r = [], None, None
        if self.put_sku(sku, {"stock": 0, "segments": 20, "mode": "lock", "hold_ms": 0},
                        fails):
            out = self.tmp_path("wrk", "soldout")
            fast0 = self.api.stat_counter("sold_out_fast")
            text = self.run_wrk("soldout.lua", out, self.o.livez_secs,
                                [f"sku={sku}", "qty=1"])
            fast1 = self.api.stat_counter("sold_out_fast")
            # sold_out_fast counts the orders answered from the in-process flag (no
            # Redis); over the storm it should be nearly all of them.
            if fast0 is not None and fast1 is not None:
                fast = fast1 - fast0
            r = self.wrk_result(text, out, fails)
        if r is not None:
            fails += an.audit_soldout(self.api, sku, r)
        r = r or an.EMPTY_RESULT
        # req/s counts the 409s, as the livez row counts its 200s: the same measure.
        row = an.wrk_row({"name": "soldout", "strategy": "sold-out storm", "mode": "lock",
                          "sku": sku, "segments": 20, "hold_ms": 0, "stock": 0,
                          "sold_out_fast": fast}, r, fails, 0,
                         an.rate(r["c409"], r["window_s"]))
        self.finish(row, f"{math.floor(row['req_s'])} req/s (all 409), "
                         f"p50 {num(row['p50_ms'])} ms, p99 {num(row['p99_ms'])} ms, "
                         f"fast path {an.dash(fast, '?')} of {r['c409']}")

    def run_livez(self):
        """GET /livez: the HTTP ceiling."""
        self.index += 1
        self.header("livez", f"GET /livez, {self.o.livez_secs}s: the HTTP ceiling")
        out, fails = self.tmp_path("wrk", "livez"), []
        r = self.wrk_result(self.run_wrk("livez.lua", out, self.o.livez_secs, []), out,
                            fails)
        if r is not None:
            fails += an.audit_livez(r)
        r = r or an.EMPTY_RESULT
        row = an.wrk_row({"name": "livez", "strategy": "GET /livez (HTTP ceiling)",
                          "mode": "-", "segments": None, "hold_ms": None}, r, fails,
                         None, an.rate(r["c200"], r["window_s"]), counts=())
        self.finish(row, f"{math.floor(row['req_s'])} req/s, p50 {num(row['p50_ms'])} ms, "
                         f"p99 {num(row['p99_ms'])} ms")

    def run_redis_bench(self):
        """The Redis ceiling: redis-benchmark running the deduction Lua on two keys."""
        n = self.o.redis_bench_n
        k_stock, k_sold = f"loadtest:{self.nonce}:stock", f"loadtest:{self.nonce}:sold"
        self.header("redis", f"redis-benchmark -c {self.o.connections} -n {n} "
                             f"EVAL <deduct> on {self.redis}")
        fails = []
        try:
            redis_command(self.redis, "SET", k_stock, REDIS_BENCH_STOCK)
            redis_command(self.redis, "SET", k_sold, 0)
        except (OSError, RedisError):
            fails.append("cannot SET the benchmark keys")
        host, port = self.redis.rsplit(":", 1)
        out = os.path.join(self.tmp, "redis-benchmark.csv")
        p = self.children.start(["redis-benchmark", "-h", host, "-p", port, "-c",
                                 str(self.o.connections), "-n", str(n), "--csv", "EVAL",
                                 DEDUCT_LUA, "2", k_stock, k_sold], out, grace=2)
        self.children.wait(p, 300)
        with open(out, errors="replace") as f:
            bench = an.parse_redis_benchmark(f.read())
        stock = sold = None
        try:
            stock = redis_command(self.redis, "GET", k_stock)
            sold = redis_command(self.redis, "GET", k_sold)
            redis_command(self.redis, "DEL", k_stock, k_sold)
        except (OSError, RedisError) as e:
            fails.append(f"cannot read the benchmark keys: {e}")
        fails = an.audit_redis_bench(bench, stock, sold, n, REDIS_BENCH_STOCK) + fails
        row = an.redis_row(bench, fails)
        self.finish(row, f"{num(row['orders_s'])} EVAL/s, p50 {num(row['p50_ms'])} ms, "
                         f"p99 {num(row['p99_ms'])} ms")

    def uneven_start(self, sku, fails):
        """The orders before the sale, each filled from one segment (checked in its
        answer). Returns (orders placed, units sold before the sale, sorted stock)."""
        placed = 0
        for count, qty in an.REB_PRE:
            for _ in range(count):
                placed += 1
                code, text = self.api.call("POST", "/orders", {
                    "sku": sku, "qty": qty,
                    "order_id": f"{self.nonce}-{self.index}-pre-{placed}"})
                body = an.parse_json(text)
                parts = body.get("segments") if isinstance(body, dict) else None
                if code != 201 or not (isinstance(parts, list) and len(parts) == 1
                                       and isinstance(parts[0], dict)
                                       and parts[0].get("qty") == qty):
                    fails.append(f"order {placed} (qty {qty}) before the sale: "
                                 f"{code} {text[:200]}")
        code, s, _ = self.api.settled_status(sku)
        if code != 200 or not isinstance(s, dict) or not isinstance(s.get("remaining"), int):
            fails.append(f"GET /admin/skus/{sku} before the sale answered {code}")
            return placed, an.REB_STOCK, []
        return placed, an.REB_STOCK - s["remaining"], sorted(s.get("segment_stock") or [])

    def run_rebalance_variant(self, name, flag):
        """One end of a sale: the uneven start, then 2 x the rest in orders of 1 from wrk
        while poll.lua samples GET /admin/skus; audited, timed and plotted."""
        sku = self.new_sku(name)
        strategy = f"end of sale, rebalance {num(flag)}"
        self.header(name, f"end of a sale, rebalance {num(flag)}: mode lock, "
                          f"{an.REB_SEGS} segments, hold {an.REB_HOLD} ms, stock "
                          f"{an.REB_STOCK}; before the sale: {an.REB_PRE_SPEC} (count x qty)")
        fails = []
        reb0 = self.api.stat_counter("rebalances")
        if not self.put_sku(sku, {"stock": an.REB_STOCK, "segments": an.REB_SEGS,
                                  "mode": "lock", "hold_ms": an.REB_HOLD,
                                  "rebalance": flag}, fails):
            return self.finish({"name": name, "strategy": strategy, "mode": "lock",
                                "audit": "FAILED", "failures": fails})
        pre_orders, pre_units, dist = self.uneven_start(sku, fails)
        if self.reb_pre_dist is None:
            self.reb_pre_dist = dist
        elif dist != self.reb_pre_dist:
            fails.append(f"stock before the sale {num(dist)} differs from the first "
                         f"variant's {num(self.reb_pre_dist)}")
        left = an.REB_STOCK - pre_units
        r, times, polled = self.sell_out(sku, name, 2 * left, fails)
        reb1 = self.api.stat_counter("rebalances")
        reb = reb1 - reb0 if reb0 is not None and reb1 is not None else None
        if r is not None:
            fails += an.audit_orders(self.api, sku, r, {
                "mode": "lock", "segments": an.REB_SEGS, "stock": an.REB_STOCK, "qty": 1,
                "requests": 2 * left, "sold": left, "all_409": True,
                "pre_units": pre_units, "pre_orders": pre_orders}, self.tmp)
        if not flag and reb:
            fails.append(f'{reb} rebalance(s) counted for a SKU created with '
                         f'"rebalance": false')
        r = r or an.EMPTY_RESULT
        w = r["window_s"]
        row = an.wrk_row({"name": name, "strategy": strategy, "mode": "lock", "sku": sku,
                          "segments": an.REB_SEGS, "hold_ms": an.REB_HOLD,
                          "stock": an.REB_STOCK}, r, fails,
                         an.rate(r["c201"], w), an.rate(r["answered"], w))
        e = row["end_of_sale"] = {
            "rebalance": flag, "sold_before_sale": pre_units,
            "stock_before_sale_sorted": dist,
            **an.end_of_sale_figures(r, times, polled, pre_units),
            "rebalances": reb, "poll_ms": an.REB_POLL_MS}
        self.finish(row, f"sale {an.fixed(e['sale_orders_s'], 1, 'n/a')} orders/s in "
                         f"{an.fixed(e['sale_s'], 1, 'n/a')} s; last 10%: "
                         f"{an.fixed(e['last10_orders_s'], 1, 'n/a')} orders/s in "
                         f"{an.fixed(e['last10_s'], 1, 'n/a')} s (polled "
                         f"{an.fixed(e['polled_last10_orders_s'], 1, 'n/a')}); rebalances "
                         f"+{num(reb)}; segments with stock at 90%: "
                         f"{num(e['segments_with_stock_at_90pct'])}")

    def sell_out(self, sku, name, requests, fails):
        """wrk sends `requests` orders of 1 (times=1) while poll.lua samples the SKU;
        returns wrk's result (or None), its 201 arrival times and the poll samples."""
        pout = self.tmp_path("poll", name)
        poller = self.children.start(
            ["wrk", "-t", "1", "-c", "1", "-d", "600s", "--timeout", "10s", "-s",
             os.path.join(an.HERE, "poll.lua"), self.url, "--", f"sku={sku}",
             f"interval={an.REB_POLL_MS}", f"token={self.o.admin_token or ''}"], pout,
            grace=2)
        time.sleep(0.2)
        donedir, out = self.markers(), self.tmp_path("wrk", name)
        text = self.run_wrk("orders.lua", out, 60 + requests // 1000, [
            f"sku={sku}", "qty=1", f"nonce={self.nonce}-{self.index}",
            f"threads={self.o.wrk_threads}", f"requests={requests}", f"donedir={donedir}",
            "times=1"], donedir)
        time.sleep(0.3)  # let the poller see the final state; its done() prints on SIGINT
        if poller.poll() is None:
            poller.send_signal(signal.SIGINT)
        self.children.wait(poller, 5)
        with open(pout, errors="replace") as f:
            polled = an.parse_marker(f.read(), "LOADTEST_SAMPLES")
        times = an.parse_marker(text, "LOADTEST_TIMES")
        if times is None:
            fails.append("wrk printed no LOADTEST_TIMES line")
            times = {"t_first": -1, "t201": []}
        if polled is None:
            fails.append("the poller printed no LOADTEST_SAMPLES line")
            polled = {"samples": [], "bad": 0, "first_bad": ""}
        return self.wrk_result(text, out, fails), times, polled

    def open_idle(self, n, fails):
        """Starts idle.py holding `n` idle connections to the service and waits (90 s at
        most) until they are open; returns (the process or None, its ready record, the
        file its output goes to)."""
        ready, out = os.path.join(self.tmp, f"idle-ready-{self.index}.json"), \
            self.tmp_path("idle", "connections")
        u = urllib.parse.urlsplit(self.url)
        if u.hostname not in ("127.0.0.1", "localhost") or not u.port:
            fails.append(f"idle connections go to 127.0.0.1 only, not {self.url}")
            return None, {}, out
        port = u.port
        p = self.children.start([sys.executable, os.path.join(an.HERE, "idle.py"),
                                 "--port", str(port), "--connections", str(n),
                                 "--ready", ready, "--open-seconds", "60",
                                 "--max-seconds", "600"], out, grace=5)
        deadline = time.monotonic() + 90
        while not os.path.exists(ready) and p.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        if not os.path.exists(ready):
            self.children.stop(p)
            fails.append("idle.py did not open its connections: "
                         + an.tail(out, 5).strip().replace("\n", " | "))
            return None, {}, out
        with open(ready) as f:
            info = an.parse_json(f.read()) or {}
        if info.get("opened") != n:
            fails.append(f"{info.get('opened')} of {n} idle connections opened (first "
                         f"error: {info.get('first_error') or '-'}; does the service's "
                         f"max_connections leave room for them?)")
        return p, info, out

    def close_idle(self, p, out, fails):
        """Ends idle.py (SIGINT) and returns its LOADTEST_IDLE record ({} if none); a
        connection the service closed while it was meant to be held is a failure."""
        p.send_signal(signal.SIGINT)
        self.children.wait(p, 30)
        with open(out, errors="replace") as f:
            rec = an.parse_marker(f.read(), "LOADTEST_IDLE")
        if rec is None:
            fails.append("idle.py printed no LOADTEST_IDLE line")
            return {}
        if rec.get("closed_by_peer"):
            fails.append(f"the service closed {rec['closed_by_peer']} idle connections "
                         f"during the run")
        return rec

    def run_idle(self):
        """idle10k: segment locks at hold 0, without and then with --idle-connections
        idle keep-alive connections held open (idle.py), back to back, the first run's
        SKU deleted in between."""
        n, o = self.o.idle_connections, self.o
        self.run_orders("idle-without", "segment locks, no idle connections", "lock", 20,
                        0, BIG_STOCK, "active", o.duration)
        # Its SKU and records go before the run with: Redis's CPU per order grows with
        # what it holds (13.5 -> 16.8 µs from one run to the next in a full run), and
        # the pair is there to measure the idle connections, not the records of the
        # run before.
        sku = self.rows[-1].get("sku")
        if sku:
            code, text = self.api.call("DELETE", f"/admin/skus/{sku}")
            if code != 200:
                say(f"  DELETE /admin/skus/{sku} answered {code}: {text[:200]}")
        self.index += 1
        self.header("idle-with", f"opening {n} idle keep-alive connections (idle.py)")
        fails = []
        rss0 = proc_rss_kb(self.svc.pid) if self.svc else None
        if n + 64 > self.nofile:
            fails.append(f"RLIMIT_NOFILE is {self.nofile}: too low for {n} idle "
                         f"connections")
        p, info, out = self.open_idle(n, fails)
        rss1 = proc_rss_kb(self.svc.pid) if self.svc else None
        if p is None:
            return self.finish({"name": "idle-with", "strategy": f"segment locks + {n} "
                                "idle connections", "mode": "lock", "segments": 20,
                                "hold_ms": 0, "audit": "FAILED", "failures": fails})
        say(f"  {info.get('opened')} open in {num(info.get('open_s'))} s; service RSS "
            f"{an.fixed(an.mib(rss0), 1, 'n/a')} -> {an.fixed(an.mib(rss1), 1, 'n/a')} MiB")
        row, text = self.orders_row("idle-with", f"segment locks + {n} idle connections",
                                    "lock", 20, 0, BIG_STOCK, "active", o.duration)
        rec = self.close_idle(p, out, fails)
        row["idle"] = {**info, **rec}
        row["rss_kb"] = {**(row.get("rss_kb") or {}), "before_idle": rss0,
                         "idle_open": rss1}
        if fails:
            row["failures"] = row.get("failures", []) + fails
            row["audit"] = "FAILED"
        self.finish(row, text + f"; {rec.get('still_open', '?')} of {n} idle connections "
                                f"held {num(rec.get('held_s'))} s")

    def run_scenarios(self):
        o, wants = self.o, self.o.only.__contains__
        # The hold-0 strategies run back to back with the two ceilings right after them,
        # so the ratios between them come from minutes-apart measurements.
        if wants("hold0"):
            for name, strategy, mode, segs in (("global-h0", "global lock", "lock", 1),
                                               ("lock20-h0", "segment locks", "lock", 20),
                                               ("atomic-h0", "atomic", "atomic", 20)):
                self.run_orders(name, strategy, mode, segs, 0, BIG_STOCK, "active",
                                o.duration)
        if wants("redis"):
            if self.redis and shutil.which("redis-benchmark"):
                self.run_redis_bench()
            else:
                say("[redis] skipped: no --redis address (or no redis-benchmark)")
        # The storm right after its reference, with the same wrk settings and duration.
        if wants("livez"):
            self.run_livez()
        if wants("soldout"):
            self.run_soldout()
        # Before the curve: the RSS without idle connections is then not the memory
        # curve256's 2000 connections left behind.
        if wants("idle10k"):
            self.run_idle()
        if wants("curve"):
            for segs in o.curve_segments:
                self.run_orders(f"curve-{segs}", "lock", "lock", segs, 20, BIG_STOCK,
                                "active", o.duration)
        if wants("curve") or wants("curve256"):
            self.run_orders(f"curve-{an.WIDE_SEGS}", "lock", "lock", an.WIDE_SEGS, 20,
                            BIG_STOCK, "active", o.duration, connections=an.WIDE_CONNS)
        if wants("flash"):
            self.run_orders("flash", "flash sale", "lock", 20, 0, FLASH_STOCK, "requests",
                            o.flash_requests, expect_sold=FLASH_STOCK)
        if wants("rebalance"):
            self.reb_pre_dist = None
            self.run_rebalance_variant("rebalance-off", False)
            self.run_rebalance_variant("rebalance-on", True)
        if wants("batch") or wants("batch-h0"):
            self.run_batch(h20=wants("batch"))
        if wants("batch20"):
            self.run_batch20()
        if wants("reserve"):
            self.run_orders("reserve-orders", "segment locks", "lock", 20, 0, BIG_STOCK,
                            "active", o.duration)
            self.run_reserve()
        # Last: it starts a cluster and a second service, and stops both after.
        if wants("cluster"):
            if self.svc is None:
                say("[cluster] skipped: the service under test was not started here")
            else:
                self.run_cluster()
        for group in ("locks", "locks-h20", "pg", "pg-h20", "pg-h0"):  # own servers each
            if wants(group):
                lockload.run_group(sys.modules[__name__], self, group)
        if wants("retention"):  # its own servers and service, its own tables and JSON
            rc = subprocess.run([sys.executable, os.path.join(an.HERE, "retention.py"),
                                 "--bin", o.bin, "--out", o.out]).returncode
            self.failed += rc != 0

    # ---- the batch group

    def run_batch(self, h20=True):
        """Group commit: the same SKU settings at batch 1 (one order per hold) and
        more, in this run; the pairs' ratios and the targets printed and saved.
        Without `h20` (--only batch-h0) the hold-0 rows alone."""
        o = self.o
        segs_list = ((1, 20) if o.quick else an.BATCH_SEGS) if h20 else ()
        rows = {}

        def forget(row):
            # Each row meets the same Redis: its SKU and records go once it is audited
            # (Redis's CPU per order grows with the records it holds: see idle10k),
            # or the second of a pair pays for the first's (batch 64 run first beat
            # batch 1 by 1.3-1.8x at hold 0, run second it lost by 0.6x).
            sku = row.get("sku")
            if sku:
                code, text = self.api.call("DELETE", f"/admin/skus/{sku}")
                if code != 200:
                    say(f"  DELETE /admin/skus/{sku} answered {code}: {text[:200]}")
        for segs in segs_list:
            for b in an.BATCH_SIZES:
                name = f"batch{b}-h20-s{segs}"
                row, text = self.orders_row(name, f"lock, batch {b}", "lock", segs, 20,
                                            BIG_STOCK, "active", o.duration,
                                            settings={"batch": b})
                row["batch"] = b
                self.finish(row, text)
                forget(row)
                rows[name] = row
        for mode in ("lock", "atomic"):
            for b in (1, 64):
                name = f"batch{b}-h0-{mode}"
                row, text = self.orders_row(name, f"{mode}, batch {b}", mode, 20, 0,
                                            BIG_STOCK, "active", o.duration,
                                            settings={"batch": b})
                row["batch"] = b
                self.finish(row, text)
                forget(row)
                rows[name] = row
        say(an.batch_summary(rows))

    def run_batch20(self):
        """Hold 20 ms, 20 segments, batch 1 then 64, at --connections and at
        an.BATCH20_WIDE_CONNS, each row's SKU deleted once audited: issue 26's 10x
        and p99 at 20 segments (analyze.batch20_summary says what 10x asks of it)."""
        rows = {}
        for conns in sorted({self.o.connections, an.BATCH20_WIDE_CONNS}):
            for b in (1, 64):
                name = f"batch{b}-h20-s20-c{conns}"
                row, text = self.orders_row(name, f"lock, batch {b}", "lock", 20, 20,
                                            BIG_STOCK, "active", self.o.duration,
                                            connections=conns, settings={"batch": b})
                row["batch"] = b
                self.finish(row, text)
                sku = row.get("sku")
                if sku:  # the next row meets the same Redis (run_batch's forget)
                    self.api.call("DELETE", f"/admin/skus/{sku}")
                rows[name] = row
        say(an.batch20_summary(rows))

    def run_reserve(self):
        """Reserve + confirm pairs for --duration s on a fresh SKU (lock, 20 segments,
        hold 0); the row's orders/s counts the confirms that made an order."""
        name = "reserve-confirm"
        sku = self.new_sku(name)
        self.header(name, f"reserve then confirm: lock, 20 segments, hold 0 ms, "
                          f"{self.o.duration}s, {self.o.connections} connections")
        base = {"name": name, "strategy": "reservation + confirm", "mode": "lock",
                "sku": sku, "segments": 20, "hold_ms": 0, "stock": BIG_STOCK,
                "connections": self.o.connections}
        fails, r = [], None
        if self.put_sku(sku, {"stock": BIG_STOCK, "segments": 20, "mode": "lock",
                              "hold_ms": 0}, fails):
            donedir, out = self.markers(), self.tmp_path("wrk", name)
            text = self.run_wrk("reserve.lua", out, self.o.duration + 10, [
                f"sku={sku}", "qty=1", f"nonce={self.nonce}-{self.index}",
                f"active={self.o.duration}", f"donedir={donedir}"], donedir)
            r = self.wrk_result(text, out, fails)
        if r is not None:
            code, text = self.api.call("GET", f"/admin/skus/{sku}")
            s = json.loads(text) if code == 200 else None
            if s is None:
                fails.append(f"GET /admin/skus/{sku} answered {code}")
            else:
                if s["remaining"] + s.get("reserved", 0) + s["sold"] != s["initial"]:
                    fails.append(f"remaining {s['remaining']} + reserved "
                                 f"{s.get('reserved')} + sold {s['sold']} != initial "
                                 f"{s['initial']}")
                if s["sold"] != r["c201"]:
                    fails.append(f"sold {s['sold']} != confirms answered 201 {r['c201']}")
        r = r or an.EMPTY_RESULT
        w = r["window_s"]
        row = an.wrk_row(base, r, fails, an.rate(r["c201"], w), an.rate(r["answered"], w))
        self.finish(row, f"{math.floor(row['orders_s'])} confirmed orders/s, "
                         f"{math.floor(row['req_s'])} req/s, p50 {num(row['p50_ms'])} ms, "
                         f"p99 {num(row['p99_ms'])} ms, holds {r.get('held')}, "
                         f"orders {r['c201']}, 409 {r['c409']}, 503 {r['c503']}")

    # ---- the cluster group

    def start_cluster(self):
        """CLUSTER_MASTERS masters with a replica each (no persistence) on loopback
        ports whose bus ports (+10000) are free too, joined by redis-cli; returns the
        node addresses, masters first."""
        addrs = []
        for i in range(2 * CLUSTER_MASTERS):
            ndir = os.path.join(self.tmp, f"cluster-{i}")
            os.makedirs(ndir, exist_ok=True)
            for _ in range(20):
                port = random.randrange(12000, 22000)
                if all(port_free(p) for p in (port, port + 10000)):
                    break
            p = self.children.start(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", ndir,
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", "2000", "--save", "", "--appendonly", "no",
                 "--daemonize", "no", "--maxclients", "10000"],
                os.path.join(ndir, "redis.log"))
            addr = f"127.0.0.1:{port}"
            if not wait_up(10, p, lambda: redis_ping(addr)):
                raise SetupError(f"cluster node {addr} did not start")
            addrs.append(addr)
        out = subprocess.run(["redis-cli", "--cluster", "create", *addrs,
                              "--cluster-replicas", "1", "--cluster-yes"],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise SetupError(f"redis-cli --cluster create: {out.stdout[-300:]}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all("cluster_state:ok" in redis_command(a, "CLUSTER", "INFO") for a in addrs):
                return addrs
            time.sleep(0.2)
        raise SetupError("the cluster did not reach cluster_state:ok")

    def master_calls(self, masters):
        """Script calls (EVALSHA + EVAL) each master has served so far."""
        calls = []
        for a in masters:
            c = an.redis_calls(redis_command(a, "INFO", "commandstats")) or {}
            calls.append(c.get("evalsha", 0) + c.get("eval", 0))
        return calls

    def run_cluster(self):
        """The hold-0 and hold-20 ms scenarios again against a cluster of
        CLUSTER_MASTERS masters, through a second service, in this run: orders/s
        against the single Redis, each master's share of the script calls, and the
        cost of durability "replicated"."""
        self.header("cluster", f"{CLUSTER_MASTERS} masters with a replica each")
        addrs = self.start_cluster()
        masters = []
        for a in addrs:
            if "role:master" in redis_command(a, "INFO", "replication"):
                masters.append(a)
        saved = (self.svc, self.url, self.api, self.redis)
        self.redis = addrs[0]
        try:
            self.start_service()
            self.api = an.Api(self.url, self.o.admin_token)
            self.redis = None  # Redis CPU per order: one node's INFO does not tell
            before = self.master_calls(masters)
            row, extra = self.orders_row("cluster-lock20-h0", "cluster, segment locks",
                                         "lock", 20, 0, BIG_STOCK, "active", self.o.duration)
            after = self.master_calls(masters)
            total = sum(b - a for a, b in zip(before, after)) or 1
            row["master_share"] = [round((b - a) / total, 3) for a, b in zip(before, after)]
            self.finish(row, extra + f"; script calls per master {row['master_share']}")
            self.run_orders("cluster-lock20-h20", "cluster, segment locks", "lock", 20, 20,
                            BIG_STOCK, "active", self.o.duration)
            self.run_orders("cluster-repl-h0", "cluster, durability replicated", "lock",
                            20, 0, BIG_STOCK, "active", self.o.duration,
                            settings={"durability": "replicated"})
        finally:
            if self.svc is not None and self.svc is not saved[0]:
                self.children.stop(self.svc)
            self.svc, self.url, self.api, self.redis = saved

    def execute(self):
        """Starts what is needed and runs the scenarios; returns the results record
        (analyze.py's input) and its timestamp."""
        started = time.gmtime()
        load_start = an.loadavg()
        if self.url is None:
            self.start_redis()
            self.start_service()
        elif an.Api(self.url, self.o.admin_token, timeout=5).call("GET", "/livez")[0] != 200:
            raise SetupError(f"no answer from {self.url}/livez")
        else:
            say(f"service: {self.url} (already running)")
        self.api = an.Api(self.url, self.o.admin_token)
        say(f"wrk: {self.o.wrk_threads} threads, {self.o.connections} connections, "
            f"{self.o.duration}s per timed scenario, run nonce {self.nonce}")
        self.run_scenarios()
        res = {
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", started),
            "command": self.o.command, "commit": an.git_commit(), "quick": self.o.quick,
            "url": self.url, "machine": an.machine(),
            "versions": an.versions(self.o.bin if self.svc else None),
            "loadavg": {"start": load_start, "end": an.loadavg()},
            "wrk": {"threads": self.o.wrk_threads, "connections": self.o.connections,
                    "duration_s": self.o.duration},
            "service": {"threads": self.o.service_threads if self.svc else None,
                        "config": self.service_config},
            "nofile": self.nofile,
            "scenarios": self.rows, "ratios": an.targets(self.rows),
            "idle": an.idle_summary(self.rows),
            "end_of_sale": an.end_of_sale_summary(self.rows), "audits_failed": self.failed,
            "locks": lockload.summary(self.rows),
        }
        return res, time.strftime("%Y%m%d-%H%M%S", started)


# ------------------------------------------------------------------------ command line

class Options(argparse.ArgumentParser):
    """argparse with one-line errors ("run.sh: ... (see --help)"), exit status 2."""

    def error(self, message):
        raise SetupError(f"{message} (see --help)")


def positive_int(text):
    if not re.fullmatch(r"[0-9]+", text) or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"bad value '{text}'")
    return int(text)


def run_options(argv):
    """The options (RUN_USAGE), checked, with the --quick defaults filled in."""
    p = Options(prog="run.sh", add_help=False, allow_abbrev=False)
    p.add_argument("--bin", default="build/inventoryd")
    p.add_argument("--url", type=lambda u: u.rstrip("/"))
    p.add_argument("--redis")
    p.add_argument("--admin-token")
    p.add_argument("--connections", type=positive_int, default=100)
    p.add_argument("--wrk-threads", type=positive_int, default=2)
    p.add_argument("--service-threads", type=positive_int)
    p.add_argument("--duration", type=positive_int)
    p.add_argument("--flash-requests", type=positive_int)
    p.add_argument("--idle-connections", type=positive_int)
    p.add_argument("--only", default=",".join(GROUPS))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=an.DEFAULT_OUT)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--update-docs", action="store_true")
    p.add_argument("-h", "--help", action="store_true")
    o = p.parse_args(argv)
    if o.help:
        return o
    o.command = " ".join(["loadtest/run.sh"] + argv)
    q = o.quick
    o.duration = o.duration or (3 if q else 10)
    o.flash_requests = o.flash_requests or (20000 if q else 100000)
    o.curve_segments = (1, 4, 20, 64) if q else (1, 2, 4, 8, 16, 20, 32, 64)
    o.livez_secs = 2 if q else 10  # the storm runs as long as its reference
    o.redis_bench_n = 60000 if q else 500000
    o.idle_connections = o.idle_connections or (1000 if q else 10000)
    if o.idle_connections > 25000:
        raise SetupError("--idle-connections must be <= 25000 (one loopback address "
                         "and port: the ephemeral ports run out)")
    o.service_max_connections = max(o.idle_connections + o.connections,
                                    an.WIDE_CONNS) + 2000
    o.only = [g for g in o.only.split(",") if g]
    for g in o.only:
        if g not in GROUPS + EXTRA_GROUPS:
            raise SetupError(f"unknown scenario '{g}'")
    if o.connections < o.wrk_threads:
        raise SetupError("--connections must be >= --wrk-threads")
    if o.flash_requests < FLASH_STOCK:
        raise SetupError(f"--flash-requests must be >= {FLASH_STOCK} (the stock)")
    for tool in ["wrk", "gnuplot"] + ([] if o.url else ["redis-server"]):
        if not shutil.which(tool):
            raise SetupError(f"{tool} not found (make deps installs it)")
    if not o.url and not os.access(o.bin, os.X_OK):
        raise SetupError(f"service binary '{o.bin}' not found or not executable (run make)")
    return o


def on_sigterm(signum, frame):
    raise Interrupted()


def drive(argv):
    """The load test; returns the exit status."""
    opts = run_options(argv)
    if opts.help:
        sys.stdout.write(RUN_USAGE)
        return 0
    try:
        os.makedirs(opts.out, exist_ok=True)
    except OSError as e:
        raise SetupError(f"cannot create {opts.out}: {e}")
    signal.signal(signal.SIGTERM, on_sigterm)
    raise_nofile(65536)  # inherited by wrk, the service and idle.py
    tmp = tempfile.mkdtemp(prefix="loadtest.", dir="/tmp")
    children = Children()
    try:
        res, stamp = Run(opts, children, tmp).execute()
        children.stop_all()  # the service and Redis are not needed for what follows
        return an.write_results(res, os.path.join(opts.out, stamp + ".json"), tmp,
                                an.DEFAULT_DOCS if opts.update_docs else None)
    finally:
        children.stop_all()
        if opts.keep:
            say(f"run.sh: kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv):
    try:
        return drive(argv)
    except SetupError as e:
        an.warn("run.sh", str(e))
        return 2
    except (KeyboardInterrupt, Interrupted):
        an.warn("run.sh", "interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
