"""retention.py -- the load test's group `retention` (issue 24's long run): Redis memory
and Redis CPU per order sampled every --step orders over a few million orders with the
ledger on and a short record_retention_s; also the events' cost and the sink's lag.

Contract
  Run       loadtest/run.sh --only retention (off by default: several minutes), or
            python3 loadtest/retention.py [--bin build/inventoryd] [--orders N]
            [--step N] [--retention S] [--modes lock,atomic] [--no-compare]
  Processes a redis-server (no persistence), a PostgreSQL 15 of its own (initdb in a
            temp dir, fsync=off), and the service, all on 127.0.0.1 and free ports,
            started through drive.py's Children and stopped by pid when the run ends.
  Phases    compare (unless --no-compare): per mode, --step orders at hold 0 on 20
            segments by a service WITHOUT a ledger (no events written), then the same
            by a service with one (events on), each on an emptied Redis: Redis CPU per
            order without / with events. long: per mode, a fresh SKU (hold 0, 20
            segments) and --orders orders in steps of --step, by the service with
            --ledger and --record-retention-s; after each step one row: orders so far,
            used_memory, keys, keys with a TTL, fields of the SKU's segment hashes
            (orders, parts, cancelled), the step's Redis CPU per order (us) and script
            calls per order, the sink's highest lag and backlog seen while it ran
            (GET /metrics polled every 0.5 s) and orders/s.
  Audit     each step: every order answered 201; at the end of a mode the sink caught
            up (backlog 0 within 60 s) and GET /admin/skus/{sku}/reconcile answers
            drift 0. A failed audit makes the exit status 1.
  --settle  after each step: wait for the sink's backlog to reach 0, then
            record_retention_s + 2 s, before the sample (the steady state once
            retention applied, apart from the sink's lag, which the step's row shows).
  Output    the tables on stdout, and <out>/<timestamp>-retention.json.
Standard library only.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import analyze as an  # noqa: E402
import drive as d  # noqa: E402

PG_BIN = os.environ.get("PG_BINDIR", "/usr/lib/postgresql/15/bin")
BIG_STOCK = 100000000


def info(addr, section):
    return an.parse_info(d.redis_command(addr, "INFO", section))


def redis_cpu(addr):
    return an.redis_cpu_seconds(d.redis_command(addr, "INFO", "cpu"))


def command_usec(addr):
    """{command: (calls, usec)} from INFO commandstats (Redis 7 counts the commands a
    script runs apart, as well as the script's own call)."""
    out = {}
    for k, v in an.parse_info(d.redis_command(addr, "INFO", "commandstats")).items():
        m = re.search(r"calls=(\d+),usec=(\d+)", v)
        if k.startswith("cmdstat_") and m:
            out[k[8:]] = (int(m.group(1)), int(m.group(2)))
    return out


def script_calls(stats):
    return sum(stats.get(k, (0, 0))[0] for k in ("evalsha", "eval", "fcall"))


def metric(text, name):
    m = re.search(r"^%s ([0-9.eE+-]+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


class Retention:
    def __init__(self, o):
        self.o = o
        self.children = d.Children()
        self.tmp = tempfile.mkdtemp(prefix="inventoryd-retention-")
        self.redis = None
        self.pg = None
        self.svc = None
        self.api = None
        self.failed = 0
        self.nonce = "rt%x" % int(time.time())

    def fail(self, msg):
        self.failed += 1
        print(f"  FAILED {msg}", flush=True)

    # ---- processes

    def start_redis(self):
        for _ in range(5):
            port = d.free_port()
            p = self.children.start(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir",
                 self.tmp, "--save", "", "--appendonly", "no", "--maxclients", "10000"],
                os.path.join(self.tmp, "redis.log"))
            addr = f"127.0.0.1:{port}"
            if d.wait_up(10, p, lambda: d.redis_ping(addr)):
                self.redis = addr
                return
            self.children.stop(p)
        raise d.SetupError("redis-server did not start")

    def start_postgres(self):
        pgdir = os.path.join(self.tmp, "pg")
        os.makedirs(pgdir)
        as_pg = []
        if os.geteuid() == 0:
            shutil.chown(pgdir, "postgres", "postgres")
            os.chmod(self.tmp, 0o755)
            as_pg = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
                     "--pdeathsig=KILL", "--"]
        with open(os.path.join(self.tmp, "initdb.log"), "wb") as out:
            rc = subprocess.run(as_pg + [os.path.join(PG_BIN, "initdb"), "-D",
                                         os.path.join(pgdir, "data"), "-U", "postgres",
                                         "-A", "trust", "-E", "UTF8", "--locale", "C"],
                                stdout=out, stderr=subprocess.STDOUT, timeout=120).returncode
        if rc != 0:
            raise d.SetupError("initdb failed")
        isready = os.path.join(PG_BIN, "pg_isready")
        for _ in range(5):
            port = d.free_port()
            p = self.children.start(
                as_pg + [os.path.join(PG_BIN, "postgres"), "-D",
                         os.path.join(pgdir, "data"), "-p", str(port), "-c",
                         "listen_addresses=127.0.0.1", "-c",
                         f"unix_socket_directories={pgdir}", "-c", "fsync=off", "-c",
                         "synchronous_commit=off"],
                os.path.join(self.tmp, "postgres.log"), grace=10)
            if d.wait_up(30, p, lambda: subprocess.run(
                    [isready, "-q", "-h", "127.0.0.1", "-p", str(port)],
                    timeout=10).returncode == 0):
                self.pg = f"postgres://postgres@127.0.0.1:{port}/postgres"
                return
            self.children.stop(p)
        raise d.SetupError("PostgreSQL did not start")

    def start_service(self, ledger):
        self.stop_service()
        for _ in range(5):
            port = d.free_port()
            args = ["--port", str(port), "--bind", "127.0.0.1", "--redis", self.redis]
            if ledger:
                args += ["--ledger", self.pg, "--record-retention-s",
                         str(self.o.retention)]
            p = self.children.start([self.o.bin] + args,
                                    os.path.join(self.tmp, "inventoryd.log"))
            api = an.Api(f"http://127.0.0.1:{port}", None, timeout=5)
            if d.wait_up(15, p, lambda: api.call("GET", "/livez")[0] == 200):
                self.svc, self.api = p, api
                return
            self.children.stop(p)
        raise d.SetupError("the service did not answer GET /livez")

    def stop_service(self):
        if self.svc is not None:
            self.children.stop(self.svc)
            self.svc = None

    # ---- measures

    def new_sku(self, mode, tag):
        sku = f"{self.nonce}-{tag}-{mode}"
        body = {"stock": BIG_STOCK, "segments": 20, "hold_ms": 0}
        if mode == "atomic":
            body["mode"] = "atomic"
        code, text = self.api.call("PUT", f"/admin/skus/{sku}?reset=true", body)
        if code not in (200, 201, 204):
            raise d.SetupError(f"PUT /admin/skus/{sku}: {code} {text[:200]}")
        return sku

    def orders(self, sku, n, tag):
        """wrk sends exactly n orders; the count of 201s, or -1."""
        donedir = os.path.join(self.tmp, f"done-{tag}")
        os.makedirs(donedir, exist_ok=True)
        out = os.path.join(self.tmp, f"wrk-{tag}.txt")
        argv = ["wrk", "-t", "2", "-c", str(self.o.connections), "-d", "600s",
                "--timeout", "30s", "-s", os.path.join(HERE, "orders.lua"), self.api.url,
                "--", f"sku={sku}", "threads=2", f"requests={n}", f"nonce={tag}",
                f"donedir={donedir}"]
        p = self.children.start(argv, out, grace=2)
        deadline = time.monotonic() + 630
        while p.poll() is None and time.monotonic() < deadline:
            if len(os.listdir(donedir)) >= 2:
                p.send_signal(2)
                break
            time.sleep(0.05)
        self.children.wait(p, deadline - time.monotonic())
        with open(out, errors="replace") as f:
            r = an.parse_marker(f.read(), "LOADTEST_RESULT")
        return -1 if r is None else r.get("c201", -1)

    def segment_keys(self, sku):
        keys, cursor = [], "0"
        while True:
            cursor, found = d.redis_command(self.redis, "SCAN", cursor, "MATCH",
                                            "inv:{%s*}:*" % sku, "COUNT", "100000",
                                            timeout=60)
            keys += found
            if cursor == "0":
                return keys

    def hash_fields(self, keys):
        n = 0
        for k in keys:
            if k.endswith(":orders") or k.endswith(":parts"):
                n += d.redis_command(self.redis, "HLEN", k)
            elif k.endswith(":cancelled"):
                n += d.redis_command(self.redis, "SCARD", k)
        return n

    def step(self, sku, n, tag):
        """n orders, measured: (ok, figures)."""
        lag = {"max": 0.0, "backlog": 0, "stop": False}

        def poll():
            while not lag["stop"]:
                code, text = self.api.call("GET", "/metrics")
                if code == 200:
                    lag["max"] = max(lag["max"],
                                     metric(text, "inventory_ledger_lag_seconds") or 0)
                    lag["backlog"] = max(lag["backlog"], int(
                        metric(text, "inventory_ledger_backlog_events") or 0))
                time.sleep(0.5)

        t = threading.Thread(target=poll, daemon=True)
        t.start()
        cpu0, st0, t0 = redis_cpu(self.redis), command_usec(self.redis), time.monotonic()
        got = self.orders(sku, n, tag)
        t1, st1, cpu1 = time.monotonic(), command_usec(self.redis), redis_cpu(self.redis)
        lag["stop"] = True
        t.join()
        if got != n:
            self.fail(f"{tag}: {got} of {n} orders answered 201")
        return got == n, {"cpu_us": (cpu1 - cpu0) * 1e6 / max(got, 1),
                          "calls": (script_calls(st1) - script_calls(st0)) / max(got, 1),
                          "usec": {k: round((v[1] - st0.get(k, (0, 0))[1]) / max(got, 1), 3)
                                   for k, v in st1.items()},
                          "rate": got / max(t1 - t0, 1e-9), "lag_s": lag["max"],
                          "backlog": lag["backlog"]}

    def settle(self):
        """--settle: until the sink has copied everything, then record_retention_s and
        a pass more, so that the sample shows what stays once retention applied (the
        steady state), apart from what the sink had yet to copy. Seconds waited."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < 300:
            code, text = self.api.call("GET", "/metrics")
            if code == 200 and metric(text, "inventory_ledger_backlog_events") == 0:
                break
            time.sleep(0.5)
        time.sleep(self.o.retention + 2)
        return time.monotonic() - t0

    def caught_up(self, sku, seconds=60):
        """The sink has copied everything (backlog 0) and the reconciliation agrees."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            code, text = self.api.call("GET", "/metrics")
            if code == 200 and metric(text, "inventory_ledger_backlog_events") == 0:
                code, text = self.api.call("GET", f"/admin/skus/{sku}/reconcile")
                if code == 200 and json.loads(text).get("drift") == 0:
                    return True
            time.sleep(1)
        self.fail(f"{sku}: the sink did not catch up, or drift: {text[:200]}")
        return False

    # ---- phases

    def compare(self, modes):
        """Redis CPU per order without and with events, each on an emptied Redis."""
        rows = []
        print("\n[compare] Redis CPU per order, events off / on "
              f"({self.o.step} orders, hold 0, 20 segments)")
        print(f"  {'mode':8} {'off us':>8} {'on us':>8} {'on/off':>7} "
              f"{'off calls':>9} {'on calls':>9}")
        for mode in modes:
            fig = {}
            for ledger in (False, True):
                d.redis_command(self.redis, "FLUSHALL")
                self.start_service(ledger)
                sku = self.new_sku(mode, "cmp" + ("on" if ledger else "off"))
                _, fig[ledger] = self.step(sku, self.o.step, f"cmp-{mode}-{int(ledger)}")
            rows.append({"mode": mode, "off": fig[False], "on": fig[True]})
            print(f"  {mode:8} {fig[False]['cpu_us']:8.1f} {fig[True]['cpu_us']:8.1f} "
                  f"{fig[True]['cpu_us'] / fig[False]['cpu_us']:7.2f} "
                  f"{fig[False]['calls']:9.2f} {fig[True]['calls']:9.2f}", flush=True)
            off, on = fig[False]["usec"], fig[True]["usec"]
            more = sorted(((on.get(k, 0) - off.get(k, 0), k) for k in set(on) | set(off)),
                          reverse=True)
            print("    commandstats us per order, on - off: " + ", ".join(
                f"{k} {v:+.2f}" for v, k in more if abs(v) >= 0.05))
        d.redis_command(self.redis, "FLUSHALL")
        return rows

    def long(self, mode):
        self.start_service(True)
        sku = self.new_sku(mode, "long")
        print(f"\n[long {mode}] {self.o.orders} orders, hold 0, 20 segments, "
              f"record_retention_s {self.o.retention}")
        print(f"  {'orders':>9} {'used_memory':>12} {'keys':>9} {'ttl keys':>9} "
              f"{'hash flds':>9} {'cpu us':>7} {'calls':>6} {'orders/s':>9} "
              f"{'lag s':>6} {'backlog':>8} {'settle s':>8}")
        rows, done, keys = [], 0, None
        while done < self.o.orders:
            n = min(self.o.step, self.o.orders - done)
            ok, fig = self.step(sku, n, f"{mode}-{done}")
            done += n
            if self.o.settle:
                fig["settle_s"] = self.settle()
            if keys is None:
                keys = self.segment_keys(sku)
            ks = info(self.redis, "keyspace").get("db0", "")
            kv = dict(x.split("=") for x in ks.split(",")) if ks else {}
            fig.update({"orders": done,
                        "used_memory": int(info(self.redis, "memory")["used_memory"]),
                        "keys": int(kv.get("keys", 0)),
                        "expires": int(kv.get("expires", 0)),
                        "hash_fields": self.hash_fields(keys)})
            rows.append(fig)
            print(f"  {done:9d} {fig['used_memory']:12d} {fig['keys']:9d} "
                  f"{fig['expires']:9d} {fig['hash_fields']:9d} {fig['cpu_us']:7.1f} "
                  f"{fig['calls']:6.2f} {fig['rate']:9.0f} {fig['lag_s']:6.2f} "
                  f"{fig['backlog']:8d} {fig.get('settle_s', 0):8.1f}", flush=True)
            if not ok:
                break
        self.caught_up(sku)
        return rows

    def run(self):
        modes = self.o.modes.split(",")
        self.start_redis()
        self.start_postgres()
        result = {"orders": self.o.orders, "step": self.o.step,
                  "retention_s": self.o.retention}
        if not self.o.no_compare:
            result["compare"] = self.compare(modes)
        result["long"] = {m: self.long(m) for m in modes}
        os.makedirs(self.o.out, exist_ok=True)
        path = os.path.join(self.o.out, time.strftime("%Y%m%d-%H%M%S") + "-retention.json")
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
        print(f"\nresults: {path}")
        return 1 if self.failed else 0


def options(argv):
    p = argparse.ArgumentParser(prog="retention.py")
    p.add_argument("--bin", default="build/inventoryd")
    p.add_argument("--orders", type=int, default=1250000, help="orders per mode")
    p.add_argument("--step", type=int, default=250000)
    p.add_argument("--retention", type=int, default=10, help="record_retention_s")
    p.add_argument("--modes", default="lock,atomic")
    p.add_argument("--connections", type=int, default=100)
    p.add_argument("--no-compare", action="store_true")
    p.add_argument("--settle", action="store_true",
                   help="after each step wait for the sink and the retention to pass")
    p.add_argument("--out", default=an.DEFAULT_OUT)
    p.add_argument("--keep", action="store_true")
    return p.parse_args(argv)


def on_signal(signum, frame):
    raise KeyboardInterrupt()


def main(argv):
    o = options(argv)
    signal.signal(signal.SIGTERM, on_signal)
    r = Retention(o)
    try:
        return r.run()
    except d.SetupError as e:
        print(f"retention.py: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        r.children.stop_all()
        if o.keep:
            print(f"kept: {r.tmp}")
        else:
            shutil.rmtree(r.tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
