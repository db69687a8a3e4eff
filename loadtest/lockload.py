"""lockload.py -- the load test's groups `locks` and `pg`: each lock service, and the
PostgreSQL store's schemes, side by side with the Redis store's own lock.

Contract
  Groups    `locks`: three redis-servers without persistence (RedLock), a memcached and
            a standalone ZooKeeper, started here, and a second service on the run's
            Redis with --redlock, --memcached and --zookeeper; for each lock of
            LOCKS ("redis", the store's own, first): hold 0 ms on 20 segments, then
            hold 20 ms on 1 and on 20 segments. `pg`: a PostgreSQL 15 of its own
            (initdb in a temp dir, as the postgres user when root, fsync=off like the
            tests' harness: no durability, as the Redis here has none), a service with
            --store postgres://... --threads PG_THREADS --pg-pool PG_POOL (the `row`
            scheme holds a pooled connection per hold); for each of PG_LOCKS the
            same three points, then `"mode": "atomic"` at hold 0 ms on 20 segments,
            at batch 1 and 64, and hold 20 ms on 1 segment at batch 64 for row and
            lease (PG_EXTRA: group commit), then pgbench running atomic's
            conditional UPDATE alone (run_pgbench).
            PG_THREADS and PG_POOL: 6 and 8, or LOADTEST_PG_THREADS / LOADTEST_PG_POOL.
            `pg-h0` (only with --only): hold 0 ms on 20 segments, `row`, `lease` and
            `"mode": "atomic"`, each at batch 1 then 64 (group commit at hold 0).
            `pg-h20` (only with --only): the pg group's hold-20 ms points of `row`
            and `lease` alone (rows named as in `pg`), for the 20 / 1 ratio.
            `locks-h20` (only with --only): the locks group's hold-20 ms points of
            the lock services (LOCKS_H20) alone, rows named as in `locks`.
            Every run is a drive.py orders_row: a fresh SKU, wrk, the usual audit.
  Processes started through drive.py's Children (stopped by pid, last first), on
            127.0.0.1 and free ports, each waited for at most WAIT_S; the group's
            service is stopped when the group ends, its servers with it.
  Results   rows named <group>-<lock>-h0, <group>-<lock>-h20-1, <group>-<lock>-h20-20
            (and pg-atomic-h0, pg-pgbench), each with "lock_group" and "lock";
            summary() gives per strategy the hold-0 orders/s, the hold-20 ms points
            and the ratio 20 / 1 segments (target >= 19), and atomic / pgbench;
            plot() one PNG: the hold-20 ms lines against segments and the hold-0 bars
            (the pgbench ceiling in grey).
Standard library only; nothing here imports analyze.py (drive.py hands its modules in).
"""

import os
import re
import shutil
import socket
import subprocess

LOCKS = ("redis", "redlock", "memcached", "zookeeper")
PG_LOCKS = ("row", "lease", "optimistic")
PG_THREADS = int(os.environ.get("LOADTEST_PG_THREADS", "6"))  # the service's event loops
# Each loop's pool for `row` holds. 20 segments on 6 loops: 3-4 at home on each, and
# a lock is kept from order to order only while 2 more of the loop's connections are
# free (DESIGN, PostgreSQL store): 4 per loop (6 x 4 = 24 >= 20 by count) held ~10 of
# the 20 row locks at a time (pg_stat_activity), the rest taken again per order.
PG_POOL = int(os.environ.get("LOADTEST_PG_POOL", "8"))
PG_BIN = os.environ.get("PG_BINDIR", "/usr/lib/postgresql/15/bin")
WAIT_S = 30  # the longest any server of the groups may take to answer
ZK_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
BIG_STOCK = 100000000
TARGET = 19  # 20 / 1 segments at hold 20 ms
PG_H20 = "pg-h20"  # --only pg-h20: the pg group's hold-20 ms points of row and lease
PG_H20_LOCKS = ("row", "lease")
PG_H0 = "pg-h0"  # --only pg-h0: group commit at hold 0, batch 1 and 64 side by side
PG_H0_ROWS = tuple((f"pg-{lock}-h0-b{b}", f"pg: {lock}, batch {b}",
                    "atomic" if lock == "atomic" else "lock", 20, 0,
                    {"batch": b, **({} if lock == "atomic" else {"lock": lock})})
                   for lock in ("row", "lease", "atomic") for b in (1, 64))
LOCKS_H20 = "locks-h20"  # --only locks-h20: the lock services' hold-20 ms points
LOCKS_H20_LOCKS = ("redlock", "memcached", "zookeeper")
# The pg group's rows after the schemes' three points: (name, strategy, mode,
# segments, hold_ms, settings); group commit (postgres/batch.c) at batch 64.
PG_EXTRA = (
    ("pg-atomic-h0", "pg: mode atomic", "atomic", 20, 0, {}),
    ("pg-atomic-h0-b64", "pg: mode atomic, batch 64", "atomic", 20, 0, {"batch": 64}),
    ("pg-row-h20-1-b64", "pg: lock row, batch 64", "lock", 1, 20,
     {"lock": "row", "batch": 64}),
    ("pg-lease-h20-1-b64", "pg: lock lease, batch 64", "lock", 1, 20,
     {"lock": "lease", "batch": 64}),
)
BATCH_ONE_SEG = 1000  # issue 26: hold 20 ms, 1 segment, batch 64 >= 1000 orders/s


def port_answers(port, probe=None, reply=None):
    """True when 127.0.0.1:port accepts a connection (and answers `probe` with a reply
    that starts with `reply`)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            if probe is None:
                return True
            s.sendall(probe)
            return s.recv(16).startswith(reply)
    except OSError:
        return False


def _field(text, pattern, kind=int):
    m = re.search(pattern, text)
    return kind(m.group(1)) if m else None


def _base(group):
    """The group whose servers and rows `group` has ("pg-h20": "pg")."""
    return {PG_H20: "pg", PG_H0: "pg", LOCKS_H20: "locks"}.get(group, group)


def missing(group):
    """Why `group` cannot run on this machine, or None."""
    need = {"locks": ["redis-server", "memcached", "java"],
            "pg": [os.path.join(PG_BIN, "postgres"), os.path.join(PG_BIN, "initdb")]}[
                _base(group)]
    gone = [t for t in need if shutil.which(t) is None]
    if _base(group) == "locks" and not zk_classpath():
        gone.append("/etc/zookeeper/conf/environment (the zookeeper package)")
    return ", ".join(gone) or None


def zk_classpath():
    """The classpath the zookeeper package gives its own scripts, or None."""
    try:
        with open("/etc/zookeeper/conf/environment") as f:
            for line in f:
                if line.startswith("CLASSPATH="):
                    return line[len("CLASSPATH="):].strip().strip('"') or None
    except OSError:
        pass
    return None


class Group:
    """One group's servers and service; `d` is drive.py, `run` its Run."""

    def __init__(self, d, run, name):
        self.d, self.run, self.an, self.name = d, run, d.an, name
        self.dir = os.path.join(run.tmp, name)
        os.makedirs(self.dir, exist_ok=True)

    def spawn(self, argv, log, ready, what, grace=5):
        """Starts `argv` (log in the group's dir) and waits until `ready(port)` for a
        free port put in place of "{port}" in argv; retried on a new port."""
        for _ in range(3):
            port = self.d.free_port()
            p = self.run.children.start([a.replace("{port}", str(port)) for a in argv],
                                        os.path.join(self.dir, log), grace=grace)
            if self.d.wait_up(WAIT_S, p, lambda: ready(port)):
                self.d.say(f"{what}: 127.0.0.1:{port} (pid {p.pid})")
                return port
            self.run.children.stop(p)
        self.d.sys.stderr.write(self.an.tail(os.path.join(self.dir, log), 20))
        raise self.d.SetupError(f"{what} did not start")

    def start_redlock(self):
        addrs = []
        for i in range(3):
            port = self.spawn(["redis-server", "--port", "{port}", "--bind", "127.0.0.1",
                               "--dir", self.dir, "--dbfilename", f"rl{i}.rdb", "--save",
                               "", "--appendonly", "no", "--daemonize", "no"],
                              f"redlock-{i}.log",
                              lambda p: self.d.redis_ping(f"127.0.0.1:{p}"),
                              f"RedLock master {i + 1} (redis-server, no persistence)")
            addrs.append(f"127.0.0.1:{port}")
        return ["--redlock", ",".join(addrs)]

    def start_memcached(self):
        argv = ["memcached", "-l", "127.0.0.1", "-p", "{port}", "-U", "0", "-m", "64"]
        if os.geteuid() == 0:
            argv += ["-u", "nobody"]
        port = self.spawn(argv, "memcached.log",
                          lambda p: port_answers(p, b"version\r\n", b"VERSION"),
                          "memcached")
        return ["--memcached", f"127.0.0.1:{port}"]

    def start_zookeeper(self):
        cfg = os.path.join(self.dir, "zoo-{port}.cfg")

        def ready(port):
            return port_answers(port, b"ruok", b"imok")

        # the config names the port: written for each port tried
        for _ in range(3):
            port = self.d.free_port()
            path = cfg.replace("{port}", str(port))
            os.makedirs(os.path.join(self.dir, f"zk-{port}"), exist_ok=True)
            with open(path, "w") as f:
                f.write(f"tickTime=500\ndataDir={self.dir}/zk-{port}\nclientPort={port}\n"
                        f"clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                        f"4lw.commands.whitelist=ruok\nforceSync=no\n")
            p = self.run.children.start(
                ["java", "-Xmx256m", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true",
                 f"-Dzookeeper.log.dir={self.dir}", "-cp", zk_classpath(), ZK_MAIN, path],
                os.path.join(self.dir, "zookeeper.log"))
            if self.d.wait_up(WAIT_S, p, lambda: ready(port)):
                self.d.say(f"ZooKeeper: 127.0.0.1:{port} (pid {p.pid}, standalone)")
                return ["--zookeeper", f"127.0.0.1:{port}"]
            self.run.children.stop(p)
        self.d.sys.stderr.write(self.an.tail(os.path.join(self.dir, "zookeeper.log"), 20))
        raise self.d.SetupError("ZooKeeper did not start")

    def start_postgres(self):
        """initdb and postgres (as the postgres user when root), in a dir of its own."""
        pgdir = os.path.join(self.dir, "pg")
        os.makedirs(pgdir)
        as_pg = []
        if os.geteuid() == 0:
            shutil.chown(pgdir, "postgres", "postgres")
            os.chmod(self.dir, 0o755)
            os.chmod(self.run.tmp, 0o755)
            as_pg = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
                     "--pdeathsig=KILL", "--"]
        log = os.path.join(self.dir, "initdb.log")
        with open(log, "wb") as out:
            rc = subprocess.run(as_pg + [os.path.join(PG_BIN, "initdb"), "-D",
                                         os.path.join(pgdir, "data"), "-U", "postgres",
                                         "-A", "trust", "-E", "UTF8", "--locale", "C"],
                                stdout=out, stderr=subprocess.STDOUT, timeout=120).returncode
        if rc != 0:
            self.d.sys.stderr.write(self.an.tail(log, 20))
            raise self.d.SetupError("initdb failed")
        isready = os.path.join(PG_BIN, "pg_isready")
        port = self.spawn(as_pg + [os.path.join(PG_BIN, "postgres"), "-D",
                                   os.path.join(pgdir, "data"), "-p", "{port}", "-c",
                                   "listen_addresses=127.0.0.1", "-c",
                                   f"unix_socket_directories={pgdir}", "-c", "fsync=off",
                                   "-c", "max_connections=200", "-c",
                                   "shared_buffers=128MB"],
                          "postgres.log",
                          lambda p: subprocess.run([isready, "-q", "-h", "127.0.0.1", "-p",
                                                    str(p)], timeout=10).returncode == 0,
                          "PostgreSQL 15 (fsync=off)", grace=10)
        return ["--store", f"postgres://postgres@127.0.0.1:{port}/postgres",
                "--threads", str(PG_THREADS), "--pg-pool", str(PG_POOL)]

    def start_service(self, extra):
        """A service of the group's own: the run's config file, `extra` flags."""
        config = os.path.join(self.run.tmp, "inventoryd.json")
        argv = [self.run.o.bin, "--config", config, "--bind", "127.0.0.1", "--port",
                "{port}"] + extra
        if self.run.o.admin_token:
            argv += ["--admin-token", self.run.o.admin_token]
        api = {}

        def ready(port):
            api["a"] = self.an.Api(f"http://127.0.0.1:{port}", self.run.o.admin_token,
                                   timeout=2)
            return api["a"].call("GET", "/livez")[0] == 200

        self.d.say(f"service ({self.name}): {' '.join(argv[1:])}")
        port = self.spawn(argv, "inventoryd.log", ready, f"service ({self.name})")
        svc = next(p for p, _ in reversed(self.run.children.live)
                   if p.args[0] == self.run.o.bin)
        return svc, f"http://127.0.0.1:{port}"

    def psql(self, port, sql):
        """One value from `sql` (psql -tA as postgres, over TCP), or None."""
        try:
            out = subprocess.run([os.path.join(PG_BIN, "psql"), "-h", "127.0.0.1", "-p",
                                  str(port), "-U", "postgres", "-d", "postgres", "-tAc",
                                  sql], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    def run_pgbench(self, port):
        """The database's ceiling: pgbench (as many clients as wrk has connections, for
        the run's duration) running atomic mode's conditional UPDATE of one of 20
        segment rows of a fresh SKU, without the order row, with synchronous_commit on
        as the service's sessions (segments/postgres/conn.h); audited: the stock moved by
        exactly one unit per transaction pgbench counted, none failed."""
        run, o, name = self.run, self.run.o, "pg-pgbench"
        gone = [t for t in ("pgbench", "psql") if not os.access(os.path.join(PG_BIN, t),
                                                                  os.X_OK)]
        if gone:
            self.d.say(f"[{name}] skipped: not installed: {', '.join(gone)} in {PG_BIN}")
            return
        sku, fails = run.new_sku(name), []
        run.header(name, f"pgbench -c {o.connections} -j {o.wrk_threads} -T {o.duration} "
                         f"-M prepared: the conditional UPDATE alone (PostgreSQL ceiling)")
        base = {"name": name, "strategy": "pgbench UPDATE (PostgreSQL ceiling)",
                "mode": "-", "sku": sku, "segments": 20, "hold_ms": 0,
                "lock_group": self.name, "lock": "pgbench"}
        tps = n = None
        if run.put_sku(sku, {"stock": BIG_STOCK, "segments": 20, "mode": "atomic",
                             "hold_ms": 0}, fails):
            # the SKU's key in the table (a salted SKU is "name/salt"); names here are
            # [0-9a-z-] only, so quoting them in SQL is safe
            key = self.psql(port, f"SELECT sku FROM segments WHERE sku = '{sku}' OR sku "
                                  f"LIKE '{sku}/%' LIMIT 1")
            total = f"SELECT sum(stock) FROM segments WHERE sku = '{key}'"
            before = self.psql(port, total)
            script = os.path.join(self.dir, "pgbench.sql")
            with open(script, "w") as f:
                f.write("\\set seg random(0, 19)\n"
                        "UPDATE segments SET stock = stock - 1 WHERE sku = :key"
                        " AND seg = :seg AND stock >= 1;\n")
            out = os.path.join(self.dir, "pgbench.txt")
            p = run.children.start([os.path.join(PG_BIN, "pgbench"), "-n", "-h",
                                    "127.0.0.1", "-p", str(port), "-U", "postgres", "-c",
                                    str(o.connections), "-j", str(o.wrk_threads), "-T",
                                    str(o.duration), "-M", "prepared", "-D", f"key={key}",
                                    "-f", script, "postgres"], out, grace=5,
                                   # commits as the service's sessions make them
                                   env=dict(os.environ,
                                            PGOPTIONS="-c synchronous_commit=on"))
            run.children.wait(p, o.duration + 60)
            with open(out, errors="replace") as f:
                text = f.read()
            after = self.psql(port, total)
            n = _field(text, r"number of transactions actually processed: (\d+)")
            tps = _field(text, r"tps = ([0-9.]+) \(without initial connection time\)",
                         float)
            failed = _field(text, r"number of failed transactions: (\d+)")
            if not key or n is None or tps is None:
                fails.append("pgbench gave no figures: " + text[-300:].replace("\n", " | "))
            elif not (before and after and int(before) - int(after) == n):
                fails.append(f"stock {before} -> {after}: not {n} units, one per "
                             f"transaction")
            if failed:
                fails.append(f"{failed} failed transactions")
        row = {**base, "orders_s": tps, "req_s": tps, "p50_ms": None, "p99_ms": None,
               "c201": None, "c409": None, "c503": None, "transactions": n,
               "audit": "FAILED" if fails else "ok", "failures": fails}
        run.finish(row, f"{'-' if tps is None else round(tps)} UPDATEs/s, {n} in all")

    def scenarios(self, locks, extra_rows, hold0=True):
        """The three points of each lock (without hold 0 when not `hold0`), then
        `extra_rows` (name, strategy, mode, segments, hold_ms, settings)."""
        run, dur = self.run, self.run.o.duration
        for lock in locks:
            s = {"lock": lock}
            if self.name == "locks" and lock != "redis":
                s["rebalance"] = False  # refused with a lock service
            what = f"{self.name}: lock {lock}"
            for suffix, segs, hold in (("h0", 20, 0), ("h20-1", 1, 20),
                                       ("h20-20", 20, 20))[0 if hold0 else 1:]:
                row, text = run.orders_row(f"{self.name}-{lock}-{suffix}", what, "lock",
                                           segs, hold, BIG_STOCK, "active", dur,
                                           settings=s)
                row.update(lock_group=self.name, lock=lock)
                run.finish(row, text)
        for name, strategy, mode, segs, hold, settings in extra_rows:
            row, text = run.orders_row(name, strategy, mode, segs, hold, BIG_STOCK,
                                       "active", dur, settings=settings)
            row.update(lock_group=self.name, lock=settings.get("lock", mode),
                       batch=settings.get("batch", 1))
            run.finish(row, text)


def run_group(d, run, name):
    """Runs group `name` ("locks" or "pg") within drive.py's Run `run`; its service and
    servers are stopped at the end, the run's own service left as it was."""
    why = missing(name)
    if why:
        d.say(f"[{name}] skipped: not installed: {why}")
        return
    locks = _base(name) == "locks"
    run.header(name, "lock services beside the Redis store" if locks else
               "the PostgreSQL store's schemes")
    g = Group(d, run, _base(name))
    before = len(run.children.live)
    saved = (run.svc, run.url, run.api, run.redis)
    try:
        if g.name == "locks":
            extra = ["--redis", run.redis] + g.start_redlock() + g.start_memcached() + \
                g.start_zookeeper()
        else:
            extra = g.start_postgres()
            pg_port = int(extra[1].rsplit(":", 1)[1].split("/")[0])
            run.redis = None  # no Redis behind this service: no Redis figures
        run.svc, run.url = g.start_service(extra)
        run.api = d.an.Api(run.url, run.o.admin_token)
        if name == "locks":
            g.scenarios(LOCKS, [])
        elif name == LOCKS_H20:
            g.scenarios(LOCKS_H20_LOCKS, [], hold0=False)
        elif name == PG_H20:
            g.scenarios(PG_H20_LOCKS, [], hold0=False)
        elif name == PG_H0:
            g.scenarios((), PG_H0_ROWS)
        else:
            g.scenarios(PG_LOCKS, PG_EXTRA)
            g.run_pgbench(pg_port)
    finally:
        for p, _ in list(reversed(run.children.live[before:])):
            run.children.stop(p)
        run.svc, run.url, run.api, run.redis = saved


# ------------------------------------------------------------------------ analysis

def _rate(row):
    return None if row is None or row.get("audit") != "ok" else row.get("orders_s")


def summary(rows):
    """Per strategy of the groups: hold-0 and hold-20 ms orders/s, 20 / 1 segments."""
    by = {r["name"]: r for r in rows if r.get("lock_group")}
    out = []
    for group, locks in (("locks", LOCKS), ("pg", PG_LOCKS + ("atomic",))):
        for lock in locks:
            h0 = by.get(f"{group}-{lock}-h0")
            one, twenty = by.get(f"{group}-{lock}-h20-1"), by.get(f"{group}-{lock}-h20-20")
            if h0 is None and one is None:
                continue
            r1, r20 = _rate(one), _rate(twenty)
            ratio = r20 / r1 if r1 and r20 is not None else None
            out.append({"group": group, "lock": lock,
                        "label": ("redis store, lock " if group == "locks" else
                                  "postgres, ") + lock,
                        "h0": _rate(h0), "h0_p99_ms": (h0 or {}).get("p99_ms"),
                        "h20_1": r1, "h20_20": r20, "ratio": ratio,
                        "met": None if ratio is None else ratio >= TARGET,
                        "audits": "ok" if all(r is None or r.get("audit") == "ok"
                                              for r in (h0, one, twenty)) else "FAILED"})
    bench = by.get("pg-pgbench")
    if bench is not None:
        atomic = next((s["h0"] for s in out if s["lock"] == "atomic"), None)
        ceiling = _rate(bench)
        out.append({"group": "pg", "lock": "pgbench", "ceiling": True,
                    "label": "postgres, pgbench UPDATE (ceiling)", "h0": ceiling,
                    "h0_p99_ms": None, "h20_1": None, "h20_20": None,
                    "ratio": None, "met": None, "audits": bench.get("audit"),
                    "atomic_over_ceiling": atomic / ceiling if atomic and ceiling else None})
    b64 = _rate(by.get("pg-atomic-h0-b64"))
    if b64 is not None or by.get("pg-row-h20-1-b64") is not None:
        atomic = next((s["h0"] for s in out if s["lock"] == "atomic"), None)
        ceiling = _rate(bench)
        out.append({"group": "pg", "lock": "batch64", "batch": True,
                    "label": "postgres, batch 64", "h0": b64, "h0_p99_ms":
                    (by.get("pg-atomic-h0-b64") or {}).get("p99_ms"),
                    "h20_1": _rate(by.get("pg-row-h20-1-b64")),
                    "h20_1_lease": _rate(by.get("pg-lease-h20-1-b64")),
                    "h20_20": None, "ratio": None, "met": None,
                    "audits": "ok" if all(r is None or r.get("audit") == "ok" for r in (
                        by.get(n) for n in ("pg-atomic-h0-b64", "pg-row-h20-1-b64",
                                            "pg-lease-h20-1-b64"))) else "FAILED",
                    "b64_over_b1": b64 / atomic if b64 and atomic else None,
                    "b64_over_ceiling": b64 / ceiling if b64 and ceiling else None})
    return out


def fmt_summary(summ):
    """Markdown: the strategies of the groups, one line each."""
    def f(x, digits=0):
        return "-" if x is None else f"{x:.{digits}f}"
    lines = ["| strategy | hold 0, 20 segments: orders/s | p99 ms | hold 20 ms, 1 segment "
             "| hold 20 ms, 20 segments | 20 / 1 (>= 19) | audits |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for s in summ:
        met = "" if s["met"] is None else (" yes" if s["met"] else " NO")
        lines.append(f"| {s['label']} | {f(s['h0'])} | {f(s['h0_p99_ms'], 2)} "
                     f"| {f(s['h20_1'])} | {f(s['h20_20'])} | {f(s['ratio'], 1)}{met} "
                     f"| {s['audits']} |")
    for s in summ:
        if s.get("ceiling"):
            lines += ["", f"PostgreSQL: atomic / pgbench = {f(s['atomic_over_ceiling'], 2)} "
                          f"(issue 23's target >= 0.7)."]
        if s.get("batch"):
            one = s["h20_1"]
            met = "" if one is None else (" yes" if one >= BATCH_ONE_SEG else " NO")
            lines += ["", f"PostgreSQL group commit (batch 64): atomic hold 0 "
                          f"{f(s['h0'])} orders/s = {f(s['b64_over_b1'], 2)} x batch 1, "
                          f"{f(s['b64_over_ceiling'], 2)} x pgbench (target >= 0.7); "
                          f"hold 20 ms, 1 segment: row {f(one)}{met}, lease "
                          f"{f(s['h20_1_lease'])} orders/s (target >= {BATCH_ONE_SEG})."]
    return lines


def plot(res, png, tmp, term, gnuplot):
    """One PNG, two panels: orders/s against segments at hold 20 ms per strategy (log
    scales, the ideal 50/s per segment dashed) and the hold-0 orders/s as bars."""
    summ = summary(res.get("scenarios") or [])
    if not summ:
        return False
    lines, plots = os.path.join(tmp, "locks-h20.dat"), []
    with open(lines, "w") as f:
        for i, s in enumerate(x for x in summ if x["h20_1"] or x["h20_20"]):
            f.write(f"# {s['label']}\n")
            for segs, v in ((1, s["h20_1"]), (20, s["h20_20"])):
                if v:
                    f.write(f"{segs} {v:.1f}\n")
            f.write("\n\n")
            plots.append(f"'{lines}' index {i} using 1:2 with linespoints lw 2 pt 7 "
                         f"title '{s['label']}'")
    bars = os.path.join(tmp, "locks-h0.dat")
    with open(bars, "w") as f:
        for s in summ:
            f.write(f"\"{s['label']}\" {s['h0'] if s['h0'] is not None else 0:.1f} "
                    f"{1 if s.get('ceiling') else 0}\n")
    conns = res["wrk"]["connections"]
    left = ", \\\n     ".join(["ideal(x) with lines dashtype 2 lc rgb '#888888' "
                               "title 'ideal: 50/s per segment'"] + plots)
    return gnuplot(f"""set terminal {term.replace('900,560', '1400,600')}
set output '{png}'
set termoption noenhanced
set multiplot layout 1,2 title "Lock services and the PostgreSQL store, {conns} connections"
set title 'hold 20 ms: orders/s against segments (1 and 20)'
set xlabel 'segments'
set ylabel 'orders/s (201s)'
set logscale xy
set xrange [0.8:30]
set yrange [10:3000]
set xtics (1, 2, 5, 10, 20)
set grid
set key top left font ',8'
ideal(x) = 50.0 * x
plot {left}
unset logscale
set title 'hold 0 ms, 20 segments: orders/s'
set xlabel ''
set bmargin 9
set xtics rotate by -40 font ',8'
set xrange [*:*]
set yrange [0:*]
set style fill solid 0.8 border -1
set boxwidth 0.6
unset key
plot '{bars}' using 0:2:($3 > 0 ? 0xaaaaaa : 0x1f77b4):xtic(1) with boxes lc rgb variable, \\
     '' using 0:2:(sprintf('%.0f', $2)) with labels offset 0,0.8
unset multiplot
""", os.path.join(tmp, "gnuplot.log"), "locks")

