#!/usr/bin/env python3
"""analyze.py -- the load test's analysis: audit, rows, tables, targets, plots, docs, comparison.

loadtest/drive.py (started by loadtest/run.sh) runs the processes and the scenarios and
calls the functions here; on its own this program re-renders, compares and audits.
Python 3.9 or later (Debian's python3), standard library only; plots by gnuplot.

Command line
  analyze.py report RESULTS.json [--update-docs] [--docs-dir DIR]
        the .md and the plots of a results file again (next to it); --update-docs also
        rewrites the generated block of DIR/BENCHMARKS.md and DIR/bench-*.png (docs/)
  analyze.py compare [OLD.json NEW.json] [--out DIR]
        two runs side by side: rates, p99, audits, targets, costs per order, idle
        connections (default: the two newest results in loadtest/results)
  analyze.py audit --url URL [--admin-token T] [--c201 N] SKU...
        the invariants of SKUs at rest, from a running service; with --c201, also sold
        = orders = N (the 201s a client counted for unit orders)

Contract
  Inputs    wrk's lines `LOADTEST_RESULT {json}` and `LOADTEST_TIMES {json}` (orders.lua,
            soldout.lua, livez.lua), `LOADTEST_SAMPLES {json}` (poll.lua) and
            `LOADTEST_IDLE {json}` (idle.py); INFO cpu and INFO commandstats; the last
            `"EVAL..."` line of `redis-benchmark --csv`; GET /admin/skus/{sku},
            GET /admin/stats and GET /orders/{id} of the service, over HTTP (urllib,
            never through a proxy, 30 s per request).
  Cost      per timed order scenario (cost_figures): the service's CPU (utime + stime
            of /proc/<pid>/stat) and Redis's (INFO cpu used_cpu_user + used_cpu_sys)
            and the Redis commands (INFO commandstats, in all and by name) from just
            before wrk starts to just after it ends, per 201; the service's pipeline
            counters (PIPELINE_COUNTERS, from GET /admin/stats or GET /metrics) as
            commands per write when it has them; its VmRSS while wrk runs.
  Audit     per SKU after every scenario, from GET /admin/skus/{sku} once locks_held is
            0 (audit_state): remaining + sold = initial; no segment_stock below 0;
            sum(segment_stock) = remaining; sum(segment_sold) = sold. Then what the
            scenario expects of wrk's counts (audit_orders_counts): sold = the units in
            the 201s wrk counted; orders = the 201s (= sold for unit orders); every order
            answered; no 200, 404, other 4xx/5xx or socket error; 503 only in lock mode;
            exact sales where the stock runs out; and up to 16 sampled 201 order ids
            read back. A failure is a message; any message makes the row FAILED and
            the exit status 1. The targets (ratios) never change the exit status.
  Results   one JSON record per run (drive.py's execute()): started, command, commit
            (`git rev-parse --short HEAD`, "-dirty" when `git status --porcelain`
            lists anything, untracked files too: the Makefile builds every .c it
            finds), machine, versions, load average, wrk and service settings, the
            rows (each timed order scenario with its cost and rss_kb), the targets,
            the idle-connections summary, the end-of-sale summary and the lock groups'
            summary (lockload.summary). <stamp>.md and
            <stamp>-{scaling,hold0,rebalance,locks}.png are made from that record alone
            (render_results), so `report` remakes them exactly.
  Docs      the block between DOCS_BEGIN and DOCS_END in docs/BENCHMARKS.md is
            replaced (appended when missing); nothing else in the file is touched.
  Console   ANSI colour only when stdout is a terminal and NO_COLOR is unset.
  Exit      report/compare: 0, or 2 on a bad file; audit: 0 when every SKU passes, 1
            otherwise, 2 on bad usage.
"""

import argparse
import glob
import http.client
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import lockload

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(HERE, "results")
DEFAULT_DOCS = os.path.join(ROOT, "docs")

# The end of a sale (rebalance): REB_STOCK over REB_SEGS segments (100 each), then the
# orders placed before the sale, (count, qty): 9 of qty 100 empty 9 segments (one short
# of half: no automatic rebalance yet), 5 of qty 60 leave 40 in 5 of the rest; 6
# segments keep 100. 800 units are left for the sale.
REB_STOCK, REB_SEGS, REB_HOLD, REB_POLL_MS = 2000, 20, 20, 25
REB_PRE = ((9, 100), (5, 60))
REB_PRE_SPEC = "9x100 5x60"
REB_PRE_TEXT = ("9 orders of qty 100 and 5 of qty 60 first: 9 segments empty, "
                "5 hold 40, 6 hold 100")

# The scaling curve's wide point: 256 segments under 2000 connections, hold 20 ms
# (curve256), and the orders/s the event-driven core is to reach there (issue 9).
WIDE_SEGS, WIDE_CONNS, WIDE_TARGET = 256, 2000, 11500

# Redis commands (INFO commandstats names) the tables always show per order, in this
# order; the driver's own INFO calls are left out of every count. Scripts are the
# client round trips among them: Redis also counts each redis.call a script makes.
NAMED_COMMANDS = ("evalsha", "eval", "set", "get", "hmget", "mget")
SCRIPT_COMMANDS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")
DRIVER_COMMANDS = ("info",)

# The service's pipeline counters (total Redis commands sent, and the socket writes
# that carried them), by the names GET /admin/stats or GET /metrics may give them; the
# event-driven core adds them, the thread-per-order core has none. pipeline_counters()
# is the only place that looks them up.
PIPELINE_COUNTERS = {"commands": "redis_commands", "writes": "redis_writes"}

DOCS_BEGIN = ("<!-- BEGIN GENERATED by loadtest/run.sh --update-docs: "
              "edits here are overwritten -->")
DOCS_END = "<!-- END GENERATED -->"

EMPTY_RESULT = {
    "c201": 0, "c200": 0, "c409": 0, "c503": 0, "c404": 0, "c4xx": 0, "c5xx": 0,
    "cother": 0, "sent": 0, "answered": 0, "window_s": 0, "p50_us": 0, "p99_us": 0,
    "max_us": 0, "errors": {"connect": 0, "read": 0, "write": 0, "timeout": 0},
    "ids": [], "bodies": [],
}


class SetupError(Exception):
    """A bad option, an unreadable file or a setup step that failed: exit status 2."""


# ------------------------------------------------------------------------ console

COLOUR = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
STYLES = {"red": "\033[31m", "green": "\033[32m", "bold": "\033[1m"}


def paint(text, *styles):
    """`text` in ANSI `styles` when stdout is a colour terminal, else as it is."""
    if not COLOUR:
        return text
    return "".join(STYLES[s] for s in styles) + text + "\033[0m"


def say(*parts):
    print(*parts, flush=True)


def warn(prog, msg):
    print(f"{prog}: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------ numbers

def jq_round(x):
    """Rounds half away from zero, as C round() (and jq) do; Python's round() does not."""
    a = abs(x)
    r = math.floor(a)
    if a - r >= 0.5:
        r += 1
    return math.copysign(r, x)


def num(x):
    """A JSON value as text, numbers as jq prints them (12.0 -> 12, 0.1 -> 0.1)."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e17:
        return str(int(x))
    if isinstance(x, (int, float, str)):
        return str(x)
    return json.dumps(x, separators=(",", ":"))


def fixed(x, digits, none="-"):
    """`x` rounded to `digits` decimals and printed without trailing zeros; `none` if null."""
    if x is None:
        return none
    return num(jq_round(x * 10 ** digits) / 10 ** digits)


def dash(x, none="-"):
    return none if x is None else num(x)


def ratio(a, b):
    return a / b if a is not None and b is not None and b > 0 else None


# ------------------------------------------------------------------------ HTTP

class Api:
    """The service's HTTP API through urllib, never through a proxy; each call bounded."""

    def __init__(self, url, token=None, timeout=30):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._open = urllib.request.build_opener(urllib.request.ProxyHandler({})).open

    def call(self, method, path, body=None):
        """Sends one request (`body` as JSON); returns (status, text). Status 0 means no
        HTTP answer came, and the text says why."""
        headers = {"Authorization": "Bearer " + self.token} if self.token else {}
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers=headers)
        try:
            with self._open(req, timeout=self.timeout) as resp:
                return resp.status, resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            return 0, f"no answer ({e})"

    def get_json(self, path):
        """GET `path`; returns (status, parsed body or None, text)."""
        status, text = self.call("GET", path)
        return status, parse_json(text), text

    def stat_counter(self, name):
        """One counter of GET /admin/stats, or None."""
        status, stats, _ = self.get_json("/admin/stats")
        value = stats.get(name) if status == 200 and isinstance(stats, dict) else None
        return value if isinstance(value, int) else None

    def pipeline_counters(self):
        """The service's pipeline counters now (see pipeline_counters())."""
        status, stats, _ = self.get_json("/admin/stats")
        mstatus, metrics = self.call("GET", "/metrics")
        return pipeline_counters(stats if status == 200 else None,
                                 metrics if mstatus == 200 else None)

    def settled_status(self, sku, tries=50):
        """GET /admin/skus/{sku}, again every 0.1 s (up to `tries`) while locks are held;
        returns (status, parsed body or None, text)."""
        for _ in range(tries):
            status, body, text = self.get_json(f"/admin/skus/{sku}")
            if status != 200 or not isinstance(body, dict) or not body.get("locks_held"):
                break
            time.sleep(0.1)
        return status, body, text


# ------------------------------------------------------------------------ parsing

def parse_json(text):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def parse_marker(text, marker):
    """The JSON after the last line starting `marker ` in a wrk output, or None."""
    found = None
    for line in text.splitlines():
        if line.startswith(marker + " "):
            found = line[len(marker) + 1:]
    return parse_json(found) if found is not None else None


def parse_redis_benchmark(text):
    """{rps, p50, p99} from the last "EVAL..." line of `redis-benchmark --csv`, or None.
    Its columns: test, rps, avg, min, p50, p95, p99, max (latencies in ms)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"EVAL')]
    fields = re.findall(r'"([^"]*)"', lines[-1]) if lines else []
    try:
        return {"rps": float(fields[1]), "p50": float(fields[4]), "p99": float(fields[6])}
    except (IndexError, ValueError):
        return None


def flatten(obj, prefix=""):
    """A JSON object's numbers by their key paths joined with "_" ({"redis":
    {"commands": 3}} -> {"redis_commands": 3})."""
    out = {}
    for k, v in (obj or {}).items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}_"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[prefix + k] = v
    return out


def metric_totals(text):
    """Prometheus text: each sample's value summed over its labels, by the name without
    the `inventory_`/`inventoryd_` prefix and the `_total` suffix."""
    out = {}
    for line in (text or "").splitlines():
        m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or line.startswith("#"):
            continue
        name = re.sub(r"^inventoryd?_", "", m.group(1))
        name = re.sub(r"_total$", "", name)
        try:
            out[name] = out.get(name, 0) + float(m.group(3))
        except ValueError:
            pass
    return out


def pipeline_counters(stats, metrics_text):
    """{"commands", "writes", "source"} from the service's GET /admin/stats JSON
    (`stats`) or, failing that, its GET /metrics text: each counter of
    PIPELINE_COUNTERS, None when the service does not expose it."""
    flat = flatten(stats) if isinstance(stats, dict) else {}
    flat = {re.sub(r"_total$", "", k): v for k, v in flat.items()}
    source = "admin/stats"
    if not any(n in flat for n in PIPELINE_COUNTERS.values()):
        flat, source = metric_totals(metrics_text), "metrics"
    out = {key: flat.get(name) for key, name in PIPELINE_COUNTERS.items()}
    out["source"] = source if any(v is not None for v in out.values()) else None
    return out


def parse_info(text):
    """`INFO` output as {field: text}."""
    out = {}
    for line in (text or "").splitlines():
        k, sep, v = line.partition(":")
        if sep and not k.startswith("#"):
            out[k.strip()] = v.strip()
    return out


def redis_cpu_seconds(info_cpu):
    """used_cpu_user + used_cpu_sys from `INFO cpu`, or None."""
    f = parse_info(info_cpu)
    try:
        return float(f["used_cpu_user"]) + float(f["used_cpu_sys"])
    except (KeyError, ValueError):
        return None


def redis_calls(info_commandstats):
    """{command name: calls} from `INFO commandstats` (subcommands as "script|load"),
    without DRIVER_COMMANDS."""
    out = {}
    for k, v in parse_info(info_commandstats).items():
        m = re.search(r"(?:^|,)calls=(\d+)", v)
        if k.startswith("cmdstat_") and m and k[8:] not in DRIVER_COMMANDS:
            out[k[8:]] = int(m.group(1))
    return out


def tail(path, n):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


# ------------------------------------------------------------------------ audit

def socket_errors(result, kinds=("connect", "read", "write", "timeout")):
    errors = result.get("errors") or {}
    return sum(errors.get(k, 0) for k in kinds)


def status_shape(s):
    """What is missing or mistyped in a GET /admin/skus answer; [] when usable."""
    if not isinstance(s, dict):
        return ["the SKU status is not a JSON object"]
    bad = [k for k in ("initial", "remaining", "sold", "orders")
           if not isinstance(s.get(k), int)]
    for k in ("segment_stock", "segment_sold"):
        v = s.get(k)
        if k in s and not (isinstance(v, list) and all(isinstance(x, int) for x in v)):
            bad.append(k)
    if "segment_stock" not in s:
        bad.append("segment_stock")
    return [f"the SKU status lacks or mistypes {', '.join(bad)}"] if bad else []


def audit_state(s):
    """The invariants of any SKU at rest, from its GET /admin/skus answer: a list of
    failure messages, [] when all hold."""
    shape = status_shape(s)
    if shape:
        return shape
    ss, sd = s["segment_stock"], s.get("segment_sold")
    below = [x for x in ss if x < 0]
    checks = [
        (s["remaining"] + s["sold"] == s["initial"],
         f"remaining {s['remaining']} + sold {s['sold']} != initial {s['initial']}"),
        (not below, f"segment below 0: {num(below)}"),
        (sum(ss) == s["remaining"],
         f"sum(segment_stock) {sum(ss)} != remaining {s['remaining']}"),
        (sd is None or sum(sd) == s["sold"],
         f"sum(segment_sold) {sum(sd or [])} != sold {s['sold']}"),
        (not s.get("locks_held"), f"locks_held {s.get('locks_held')} after the run"),
    ]
    return [msg for ok, msg in checks if not ok]


def audit_orders_counts(s, r, e):
    """What an order scenario expects of the SKU's status `s` given wrk's result `r`.
    `e`: mode, segments, stock, qty; optional requests (orders to send), sold (exact
    units wrk must sell), all_409, pre_units and pre_orders (sold before wrk ran)."""
    ss = s["segment_stock"]
    pre_u, pre_o = e.get("pre_units", 0), e.get("pre_orders", 0)
    units = r["c201"] * e["qty"] + pre_u
    odd = r["c404"] + r["c4xx"] + r["c5xx"] + r["cother"]
    want_sold = e.get("sold")
    checks = [
        (s["initial"] == e["stock"], f"initial {s['initial']} != stock set {e['stock']}"),
        (len(ss) == e["segments"],
         f"segment_stock has {len(ss)} entries, want {e['segments']}"),
        (s["sold"] == units,
         f"sold {s['sold']} != units in the 201s wrk saw + sold before it {units}"),
        (s["orders"] == r["c201"] + pre_o,
         f"orders {s['orders']} != 201s wrk saw + orders before it {r['c201'] + pre_o}"),
        (e["qty"] != 1 or pre_o or s["orders"] == s["sold"],
         f"orders {s['orders']} != sold {s['sold']} (unit orders)"),
        (r["sent"] == r["answered"],
         f"{r['sent'] - r['answered']} orders sent but never answered"),
        (r["c200"] == 0, f"{r['c200']} x 200 (replays) with unique order ids"),
        (odd == 0, f"unexpected statuses: 404 {r['c404']}, 4xx {r['c4xx']}, "
                   f"5xx {r['c5xx']}, other {r['cother']}"),
        (e["mode"] == "lock" or r["c503"] == 0, f"{r['c503']} x 503 in mode {e['mode']}"),
        (socket_errors(r) == 0, f"wrk socket errors {num(r.get('errors'))}"),
        (e.get("requests") is None or r["sent"] == e["requests"],
         f"sent {r['sent']} orders, want {e.get('requests')}"),
        (want_sold is None or (s["sold"] == want_sold + pre_u and r["c201"] == want_sold),
         f"sold {s['sold']} / 201s {r['c201']}, want exactly {want_sold}"),
        (want_sold is None or s["remaining"] == 0, f"remaining {s['remaining']}, want 0"),
        (not e.get("all_409") or r["c409"] == r["answered"] - r["c201"],
         f"{r['answered'] - r['c201'] - r['c409']} answers neither 201 nor 409"),
        (r["c201"] == 0 or r.get("ids"), "no order ids sampled"),
    ]
    return [msg for ok, msg in checks if not ok]


def audit_orders(api, sku, r, e, keep_dir=None):
    """The audit of one order scenario: the SKU's invariants, wrk's counts against it,
    and every sampled 201 order id read back. Returns failure messages."""
    code, s, text = api.settled_status(sku)
    if keep_dir:
        with open(os.path.join(keep_dir, f"status-{sku}.json"), "w") as f:
            f.write(text)
    if code != 200:
        return [f"GET /admin/skus answered {code}"]
    fails = audit_state(s)
    if not status_shape(s):
        fails += audit_orders_counts(s, r, e)
    if fails and r.get("bodies"):
        fails.append("answers seen: " + " | ".join(r["bodies"]))
    for oid in r.get("ids") or []:
        fails += audit_order_record(api, sku, oid)
    return fails


def audit_order_record(api, sku, oid):
    """One order record per sale, sampled: GET /orders/{id} must return it for `sku`."""
    code, body, text = api.get_json(f"/orders/{oid}")
    if code != 200:
        return [f"GET /orders/{oid} answered {code}"]
    if not (isinstance(body, dict) and body.get("order_id") == oid and body.get("sku") == sku):
        return [f"GET /orders/{oid}: record {text[:200]}"]
    return []


def audit_soldout(api, sku, r):
    """The sold-out storm: nothing sold, every answer 409 (wrk stops mid-flight here,
    which is fine: nothing can be sold). Returns failure messages."""
    code, s, _ = api.settled_status(sku)
    if code != 200:
        return [f"GET /admin/skus answered {code}"]
    shape = status_shape(s)
    if shape:
        return shape
    checks = [
        (s["sold"] == 0 and s["remaining"] == 0 and s["initial"] == 0,
         f"sold {s['sold']}, remaining {s['remaining']}, initial {s['initial']}"),
        (s["orders"] == 0, f"orders {s['orders']}, want 0"),
        (all(x == 0 for x in s["segment_stock"]), "segment_stock not all 0"),
        (r["c201"] == 0 and r["c200"] == 0, f"{r['c201'] + r['c200']} orders succeeded"),
        (r["c409"] == r["answered"], f"{r['answered'] - r['c409']} answers were not 409"),
        (socket_errors(r, ("connect", "read", "write")) == 0,
         f"wrk socket errors {num(r.get('errors'))}"),
    ]
    return audit_state(s) + [msg for ok, msg in checks if not ok]


def audit_livez(r):
    """GET /livez: only 200s, no socket errors."""
    if r.get("cother", 0) == 0 and socket_errors(r, ("connect", "read", "write")) == 0:
        return []
    return [f"{r.get('cother')} non-200 answers, socket errors {num(r.get('errors'))}"]


def audit_redis_bench(bench, stock, sold, requests, initial):
    """The Redis ceiling moved its keys by exactly one unit per EVAL."""
    def as_int(v):
        try:
            return int(v)
        except (TypeError, ValueError):
            return None
    st, so = as_int(stock), as_int(sold)
    checks = [
        (bench is not None, "no CSV result from redis-benchmark"),
        (so == requests, f"sold {num(sold)}, want {requests} (one per EVAL)"),
        (st is not None and (so or 0) + st == initial,
         f"stock {num(stock)} + sold {num(sold)} != {initial}"),
    ]
    return [msg for ok, msg in checks if not ok]


# ------------------------------------------------------------------------ rows

def rate(n, seconds):
    return n / seconds if seconds > 0 else 0


def wrk_row(base, r, fails, orders_s, req_s, counts=("c201", "c409", "c503")):
    """A table row for a wrk scenario: `base`, the two rates, wrk's latencies, the
    status `counts` that apply (the others None), the audit and wrk's whole result."""
    row = {**base, "orders_s": orders_s, "req_s": req_s,
           "p50_ms": r["p50_us"] / 1000, "p99_ms": r["p99_us"] / 1000}
    row.update({k: r[k] if k in counts else None for k in ("c201", "c409", "c503")})
    row.update(sent=r["sent"], window_s=r["window_s"], audit="FAILED" if fails else "ok",
               failures=fails, wrk=r)
    return row


def redis_row(bench, fails):
    """The Redis ceiling's row from parse_redis_benchmark() (None: no figures)."""
    b = bench or {}
    return {"name": "redis", "strategy": "redis-benchmark EVAL (Redis ceiling)",
            "mode": "-", "segments": None, "hold_ms": None,
            "orders_s": b.get("rps"), "req_s": b.get("rps"),
            "p50_ms": b.get("p50"), "p99_ms": b.get("p99"),
            "c201": None, "c409": None, "c503": None,
            "audit": "FAILED" if fails else "ok", "failures": fails}


def delta(before, after, key):
    a, b = (before or {}).get(key), (after or {}).get(key)
    return b - a if a is not None and b is not None else None


def per(value, orders, scale=1):
    return value * scale / orders if value is not None and orders else None


def cost_figures(before, after, orders):
    """What one scenario cost per order, from two usage snapshots (drive.py's usage():
    service_cpu_s, redis_cpu_s, redis_calls, pipeline) taken just before wrk started
    and just after it ended; `orders`: the 201s. Missing figures are None."""
    calls0 = (before or {}).get("redis_calls")
    calls1 = (after or {}).get("redis_calls")
    by_name = None
    if calls0 is not None and calls1 is not None:
        by_name = {k: v - calls0.get(k, 0) for k, v in calls1.items()
                   if v - calls0.get(k, 0) > 0}
    total = sum(by_name.values()) if by_name is not None else None
    scripts = (sum(by_name.get(k, 0) for k in SCRIPT_COMMANDS)
               if by_name is not None else None)
    svc, red = delta(before, after, "service_cpu_s"), delta(before, after, "redis_cpu_s")
    p0, p1 = (before or {}).get("pipeline") or {}, (after or {}).get("pipeline") or {}
    commands, writes = delta(p0, p1, "commands"), delta(p0, p1, "writes")
    return {
        "orders": orders,
        "service_cpu_s": svc, "service_cpu_us_per_order": per(svc, orders, 1e6),
        "redis_cpu_s": red, "redis_cpu_us_per_order": per(red, orders, 1e6),
        "redis_commands": total, "redis_commands_per_order": per(total, orders),
        "redis_scripts_per_order": per(scripts, orders),
        "redis_calls_by_name": by_name,
        "redis_commands_per_order_by_name":
            {k: v / orders for k, v in by_name.items()} if by_name and orders else None,
        "pipeline": {"commands": commands, "writes": writes,
                     "commands_per_write": ratio(commands, writes),
                     "source": p1.get("source")},
    }


def idle_summary(rows):
    """The idle-connections pair (idle-without, idle-with) and its ratios, or None."""
    by = {row["name"]: row for row in rows}
    off, on = by.get("idle-without"), by.get("idle-with")
    if off is None and on is None:
        return None

    def rss(row, key):
        return ((row or {}).get("rss_kb") or {}).get(key)

    idle = (on or {}).get("idle") or {}
    return {
        "connections": idle.get("requested"), "opened": idle.get("opened"),
        "closed_by_peer": idle.get("closed_by_peer"),
        "without_orders_s": (off or {}).get("orders_s"),
        "with_orders_s": (on or {}).get("orders_s"),
        "with_over_without": ratio((on or {}).get("orders_s"), (off or {}).get("orders_s")),
        "rss_kb_without_max": rss(off, "max"), "rss_kb_with_max": rss(on, "max"),
        "rss_kb_before_idle": rss(on, "before_idle"),
        "rss_kb_idle_open": rss(on, "idle_open"),
        "audits": [r.get("audit") for r in (off, on) if r is not None],
    }


def cross(samples, level):
    """When the polled sold count reached `level`: linear between the two samples around
    it; the first sample's time if it already had; None if never."""
    for i, (t, sold) in enumerate((x[0], x[1]) for x in samples):
        if sold >= level:
            if i == 0:
                return t
            t0, s0 = samples[i - 1][0], samples[i - 1][1]
            return t0 + (level - s0) / (sold - s0) * (t - t0)
    return None


def end_of_sale_figures(r, times, polled, pre_units):
    """The rebalance scenario's figures: the sale and its last 10% timed from the 201s'
    arrival times (client side) and from the poll of GET /admin/skus (server side)."""
    s = polled["samples"]
    u90 = (REB_STOCK * 9 + 9) // 10
    k90, kend = u90 - pre_units, REB_STOCK - pre_units
    a, t_first = times["t201"], times["t_first"]
    t90 = tend = None
    if len(a) >= kend and k90 >= 1 and kend > k90:
        t90, tend = a[k90 - 1], a[kend - 1]
    p90, pend = cross(s, u90), cross(s, REB_STOCK)
    at90 = next((x for x in s if x[1] >= u90), None)
    client = t90 is not None
    started = client and t_first >= 0
    return {
        "units_last_10pct": REB_STOCK - u90,
        "last10_s": (tend - t90) / 1000 if client else None,
        "last10_orders_s": (kend - k90) / ((tend - t90) / 1000)
        if client and tend > t90 else None,
        "sale_s": (tend - t_first) / 1000 if started else None,
        "sale_orders_s": kend / ((tend - t_first) / 1000)
        if started and tend > t_first else None,
        "max_latency_ms": r.get("max_us", 0) / 1000,
        "polled_last10_s": (pend - p90) / 1000
        if p90 is not None and pend is not None else None,
        "polled_last10_orders_s": (REB_STOCK - u90) / ((pend - p90) / 1000)
        if p90 is not None and pend is not None and pend > p90 else None,
        "segments_with_stock_at_90pct": at90[2] if at90 else None,
        "polls": len(s), "polls_bad": polled.get("bad"),
        "samples": [[jq_round((x[0] - t_first) / 1000 * 1000) / 1000, x[1], x[2]]
                    for x in s],
    }


def targets(rows):
    """The target ratios of one run; `met` is None when a figure is missing."""
    by = {row["name"]: row for row in rows}

    def val(name, key):
        return by.get(name, {}).get(key)

    def cost(name, key):
        return (by.get(name, {}).get("cost") or {}).get(key)

    idle = idle_summary(rows) or {}
    rss_with = idle.get("rss_kb_with_max")
    goals = [
        ("20 segments / 1 segment, hold 20 ms", ">= 19", 19, None,
         ratio(val("curve-20", "orders_s"), val("curve-1", "orders_s"))),
        ("lock 20 segments, hold 0 ms / GET /livez req/s", ">= 0.30", 0.30, None,
         ratio(val("lock20-h0", "orders_s"), val("livez", "req_s"))),
        ("atomic, hold 0 ms / GET /livez req/s", ">= 0.50", 0.50, None,
         ratio(val("atomic-h0", "orders_s"), val("livez", "req_s"))),
        ("lock 20 segments / atomic, hold 0 ms", ">= 0.6", 0.6, None,
         ratio(val("lock20-h0", "orders_s"), val("atomic-h0", "orders_s"))),
        ("atomic / redis-benchmark EVAL", ">= 0.35", 0.35, None,
         ratio(val("atomic-h0", "orders_s"), val("redis", "orders_s"))),
        ("p99 ms, lock 20 segments, hold 0 ms", "<= 5 ms", None, 5,
         val("lock20-h0", "p99_ms")),
        ("service CPU us per order, lock 20 segments, hold 0 ms", "<= 25", None, 25,
         cost("lock20-h0", "service_cpu_us_per_order")),
        ("Redis CPU us per order, lock 20 segments, hold 0 ms", "<= 12", None, 12,
         cost("lock20-h0", "redis_cpu_us_per_order")),
        ("orders/s with / without 10,000 idle connections", ">= 0.9", 0.9, None,
         idle.get("with_over_without")),
        ("service RSS MiB with 10,000 idle connections", "<= 200", None, 200,
         rss_with / 1024 if rss_with is not None else None),
        ("sold-out storm req/s / GET /livez req/s", ">= 0.8", 0.8, None,
         ratio(val("soldout", "req_s"), val("livez", "req_s"))),
        (f"orders/s at {WIDE_SEGS} segments, {WIDE_CONNS} connections, hold 20 ms "
         f"/ {WIDE_TARGET}", ">= 1", 1, None,
         ratio(val(f"curve-{WIDE_SEGS}", "orders_s"), WIDE_TARGET)),
        ("reserve + confirm / orders, lock 20 segments, hold 0 ms", ">= 0.5", 0.5, None,
         ratio(val("reserve-confirm", "orders_s"), val("reserve-orders", "orders_s"))),
        ("cluster / single Redis, lock 20 segments, hold 0 ms", ">= 0.8", 0.8, None,
         ratio(val("cluster-lock20-h0", "orders_s"), val("lock20-h0", "orders_s"))),
        ("cluster / single Redis, lock 20 segments, hold 20 ms", ">= 0.8", 0.8, None,
         ratio(val("cluster-lock20-h20", "orders_s"), val("curve-20", "orders_s"))),
        ("cluster: most script calls on one master / 1/3", "<= 1.1", None, 1.1,
         max(by["cluster-lock20-h0"]["master_share"]) * 3
         if by.get("cluster-lock20-h0", {}).get("master_share") else None),
        ("cluster: replicated / async orders/s, hold 0 ms", "(measured)", 0, None,
         ratio(val("cluster-repl-h0", "orders_s"), val("cluster-lock20-h0", "orders_s"))),
    ]
    out = []
    for name, target, lo, hi, value in goals:
        met = None if value is None else (value >= lo if lo is not None else value <= hi)
        bound = {"min": lo} if lo is not None else {"max": hi}
        out.append({"name": name, "target": target, **bound, "value": value, "met": met})
    return out


def end_of_sale_summary(rows):
    """Both rebalance variants and their ratios, or None when neither ran."""
    by = {row["name"]: row for row in rows}
    off, on = by.get("rebalance-off"), by.get("rebalance-on")
    if off is None and on is None:
        return None
    variants = []
    for row in (off, on):
        if row is not None:
            eos = {k: v for k, v in (row.get("end_of_sale") or {}).items() if k != "samples"}
            variants.append({k: row.get(k) for k in
                             ("name", "audit", "orders_s", "c201", "c409", "c503")} | eos)

    def fig(row, key):
        return ((row or {}).get("end_of_sale") or {}).get(key)

    return {
        "variants": variants,
        "last10_on_over_off": ratio(fig(on, "last10_orders_s"), fig(off, "last10_orders_s")),
        "polled_last10_on_over_off": ratio(fig(on, "polled_last10_orders_s"),
                                           fig(off, "polled_last10_orders_s")),
        "sale_on_over_off": ratio(fig(on, "sale_orders_s"), fig(off, "sale_orders_s")),
    }


# ------------------------------------------------------------------------ tables

def fmt_table(rows, colour=False):
    """Markdown: one line per scenario; FAILED in red when `colour`."""
    lines = ["| scenario | strategy | segments | hold_ms | orders/s | req/s | p50 ms | p99 ms "
             "| 201s | 409s | 503s | audit |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        audit = r.get("audit")
        if colour and audit == "FAILED":
            audit = paint(audit, "red")
        lines.append(
            f"| {r['name']} | {num(r.get('strategy'))} | {dash(r.get('segments'))} "
            f"| {dash(r.get('hold_ms'))} | {fixed(r.get('orders_s'), 0)} "
            f"| {fixed(r.get('req_s'), 0)} | {fixed(r.get('p50_ms'), 2)} "
            f"| {fixed(r.get('p99_ms'), 2)} | {dash(r.get('c201'))} | {dash(r.get('c409'))} "
            f"| {dash(r.get('c503'))} | {num(audit)} |")
    return lines


def fmt_ratios(ratios):
    lines = ["| target | value | goal | met |", "|---|---:|---|---|"]
    for t in ratios:
        met = "n/a" if t["met"] is None else ("yes" if t["met"] else "NO")
        lines.append(f"| {t['name']} | {fixed(t['value'], 2, 'n/a')} | {t['target']} | {met} |")
    return lines


def times(x):
    """A ratio as "1.23x", or "n/a"."""
    return "n/a" if x is None else fixed(x, 2) + "x"


def mib(kb):
    return None if kb is None else kb / 1024


def fmt_cost(rows):
    """Markdown: per order, what the service and Redis spent in each scenario that was
    measured (the timed order scenarios); [] when none was."""
    rows = [r for r in rows if r.get("cost")]
    if not rows:
        return []
    lines = [
        "| scenario | connections | orders | service CPU µs/order | Redis CPU µs/order "
        "| Redis commands/order | scripts/order | pipeline commands/write "
        "| service RSS MiB (max) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        c = r["cost"]
        lines.append(
            f"| {r['name']} | {dash(r.get('connections'))} | {dash(c.get('orders'))} "
            f"| {fixed(c.get('service_cpu_us_per_order'), 1, 'n/a')} "
            f"| {fixed(c.get('redis_cpu_us_per_order'), 1, 'n/a')} "
            f"| {fixed(c.get('redis_commands_per_order'), 2, 'n/a')} "
            f"| {fixed(c.get('redis_scripts_per_order'), 2, 'n/a')} "
            f"| {fixed((c.get('pipeline') or {}).get('commands_per_write'), 2, 'n/a')} "
            f"| {fixed(mib((r.get('rss_kb') or {}).get('max')), 1, 'n/a')} |")
    lines += [
        "",
        "CPU: the service's utime + stime (/proc/<pid>/stat) and Redis's used_cpu_user + "
        "used_cpu_sys (INFO cpu), from just before wrk started to just after it ended, "
        "over the 201s. Commands: INFO commandstats over the same span, the driver's "
        "INFO calls left out; Redis counts every redis.call a script makes as well, so "
        "scripts/order (EVALSHA, EVAL, ...) is the client's share. Pipeline "
        "commands/write: the service's redis_commands / redis_writes counters (n/a: "
        "it has none). RSS: VmRSS sampled every 0.2 s while wrk ran.",
    ]
    return lines


def fmt_commands(rows):
    """Markdown: Redis commands per order by name, for the measured scenarios."""
    rows = [r for r in rows
            if (r.get("cost") or {}).get("redis_commands_per_order_by_name")]
    if not rows:
        return []
    totals = {}
    for r in rows:
        for k, v in r["cost"]["redis_calls_by_name"].items():
            totals[k] = totals.get(k, 0) + v
    names = list(NAMED_COMMANDS) + sorted((k for k in totals if k not in NAMED_COMMANDS),
                                          key=lambda k: (-totals[k], k))
    # INFO names subcommands "script|load": the bar escaped, for Markdown tables
    lines = ["| scenario | " + " | ".join(k.replace("|", "\\|") for k in names) + " |",
             "|---|" + "---:|" * len(names)]
    for r in rows:
        by = r["cost"]["redis_commands_per_order_by_name"]
        lines.append(f"| {r['name']} | "
                     + " | ".join(fixed(by.get(k, 0), 2) for k in names) + " |")
    return ["Redis commands per order, by name (INFO commandstats):", ""] + lines


def fmt_idle(idle):
    return [
        f"Idle connections: {dash(idle.get('connections'), 'n/a')} idle keep-alive "
        f"connections ({dash(idle.get('opened'), 'n/a')} opened, "
        f"{dash(idle.get('closed_by_peer'), 'n/a')} closed by the service) held open "
        f"during the segment-locks hold-0 run: "
        f"{fixed(idle.get('with_orders_s'), 0, 'n/a')} orders/s with, "
        f"{fixed(idle.get('without_orders_s'), 0, 'n/a')} without (back to back): "
        f"{times(idle.get('with_over_without'))}. Service RSS (VmRSS): "
        f"{fixed(mib(idle.get('rss_kb_before_idle')), 1, 'n/a')} MiB before they were "
        f"opened, {fixed(mib(idle.get('rss_kb_idle_open')), 1, 'n/a')} MiB once open, "
        f"{fixed(mib(idle.get('rss_kb_with_max')), 1, 'n/a')} MiB at most during the run "
        f"with them; {fixed(mib(idle.get('rss_kb_without_max')), 1, 'n/a')} MiB at most "
        f"during the run without."]


def fmt_end_of_sale(eos, conns):
    first = eos["variants"][0] if eos["variants"] else {}
    lines = [
        f"End of a sale: {REB_STOCK} stock, {REB_SEGS} segments, lock, hold {REB_HOLD} ms, "
        f"{conns} connections; {REB_PRE_TEXT} ({dash(first.get('sold_before_sale'))} sold); "
        f"then sold out by orders of 1. Last 10% = the last "
        f"{dash(first.get('units_last_10pct'))} units, from the 201 that took sold to 90% "
        f"to the last 201.",
        "",
        "| variant | sale s | sale orders/s | last 10% took s | last 10% orders/s "
        "| last 10% orders/s (polled) | segments with stock at 90% | rebalances "
        "| slowest answer ms | 503s | audit |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for v in eos["variants"]:
        lines.append(
            f"| {v['name']} | {fixed(v.get('sale_s'), 3, 'n/a')} "
            f"| {fixed(v.get('sale_orders_s'), 0, 'n/a')} "
            f"| {fixed(v.get('last10_s'), 3, 'n/a')} "
            f"| {fixed(v.get('last10_orders_s'), 0, 'n/a')} "
            f"| {fixed(v.get('polled_last10_orders_s'), 0, 'n/a')} "
            f"| {dash(v.get('segments_with_stock_at_90pct'), 'n/a')} "
            f"| {dash(v.get('rebalances'), 'n/a')} "
            f"| {fixed(v.get('max_latency_ms'), 0, 'n/a')} | {dash(v.get('c503'))} "
            f"| {v.get('audit')} |")
    lines += [
        "",
        "Sale s: from the first order sent to the last 201; sale orders/s: the 201s over "
        "that time (the table above divides by the whole send window, which also holds "
        "the 409s after the sell-out). Slowest answer: the maximum latency wrk saw in the "
        "run, 409s included.",
        "",
        f"With / without rebalancing: last 10% {fixed(eos['last10_on_over_off'], 2, 'n/a')}x "
        f"(polled {fixed(eos['polled_last10_on_over_off'], 2, 'n/a')}x), whole sale "
        f"{fixed(eos['sale_on_over_off'], 2, 'n/a')}x.",
    ]
    return lines


def fmt_results(res, colour=False):
    """Markdown: the table, the target ratios, the cost per order, the idle
    connections and the end of a sale."""
    lines = fmt_table(res["scenarios"], colour) + [""] + fmt_ratios(res["ratios"])
    for block in (fmt_cost(res["scenarios"]), fmt_commands(res["scenarios"]),
                  fmt_idle(res["idle"]) if res.get("idle") else []):
        if block:
            lines += [""] + block
    if res.get("end_of_sale"):
        lines += [""] + fmt_end_of_sale(res["end_of_sale"], res["wrk"]["connections"])
    if res.get("locks"):
        lines += [""] + lockload.fmt_summary(res["locks"])
    return lines


def run_kind(res):
    return "quick" if res.get("quick") else "full"


def fmt_machine(m):
    return f"{m['nproc']} CPUs, {m['cpu']}, {m['memory']} RAM, {m['kernel']}"


def fmt_service(res):
    """The settings the driver started the service with ("already running" with --url)."""
    svc = res.get("service") or {}
    if svc.get("threads") is None:
        return "already running (settings unknown)"
    return f"--threads {svc['threads']}" + "".join(
        f", {k} {num(v)}" for k, v in (svc.get("config") or {}).items())


def fmt_md(res):
    """The results file <stamp>.md."""
    w, load = res["wrk"], res["loadavg"]
    lines = [
        f"# Load test {res['started']} ({run_kind(res)})",
        "",
        f"Command: `{res['command']}` at commit {res.get('commit', 'unknown')}; "
        f"wrk {w['threads']} threads, {w['connections']} connections, "
        f"{w['duration_s']}s per timed scenario.",
        f"Machine: {fmt_machine(res['machine'])}; load average {load['start']} at the start, "
        f"{load['end']} at the end.",
        f"Service: {fmt_service(res)}.",
        "",
    ] + fmt_results(res)
    failed = [r for r in res["scenarios"] if r.get("audit") != "ok"]
    if failed:
        lines += ["", "## Audit failures"]
        lines += [f"- {r['name']}: {'; '.join(r.get('failures') or [])}" for r in failed]
    return "\n".join(lines) + "\n"


def fmt_docs_block(res):
    """The generated block of docs/BENCHMARKS.md, markers included."""
    w, load, v = res["wrk"], res["loadavg"], res["versions"]
    threads = (res.get("service") or {}).get("threads")
    svc_cfg = (res.get("service") or {}).get("config") or {}
    lines = [
        DOCS_BEGIN,
        f"## Latest run: {res['started']} ({run_kind(res)})",
        "",
        f"- Command: `{res['command']}`",
        f"- Commit: {res.get('commit', 'unknown')}",
        f"- Machine: {fmt_machine(res['machine']).replace(' CPUs', ' CPUs (nproc)', 1)}",
        f"- Load average: {load['start']} at the start, {load['end']} at the end "
        f"(the machine is shared)",
        f"- Versions: wrk {v['wrk']}, redis-server {v['redis']}, {v['service']}",
        f"- wrk: {w['threads']} threads, {w['connections']} connections, "
        f"{w['duration_s']}s per timed scenario; service: --threads "
        f"{threads if threads is not None else 'default'}"
        + "".join(f", {k} {num(v)}" for k, v in svc_cfg.items()),
        "",
    ] + fmt_results(res) + [
        "",
        "![orders/s against segments at hold 20 ms](bench-scaling.png)",
        "",
        "![strategies at hold 0 ms](bench-hold0.png)",
    ]
    if res.get("end_of_sale"):
        lines += ["", "![the end of a sale with and without rebalancing](bench-rebalance.png)"]
    return lines + [DOCS_END]


def replace_block(text, block_lines):
    """`text` with the lines from DOCS_BEGIN to DOCS_END replaced by `block_lines`, or
    with the block appended when the markers are missing."""
    lines = text.split("\n") if text else []
    if DOCS_BEGIN in lines and DOCS_END in lines[lines.index(DOCS_BEGIN):]:
        b = lines.index(DOCS_BEGIN)
        e = lines.index(DOCS_END, b)
        return "\n".join(lines[:b] + block_lines + lines[e + 1:])
    head = text + "\n" if text else "# Benchmarks\n"
    return head + "\n" + "\n".join(block_lines) + "\n"


# ------------------------------------------------------------------------ plots

def gnuplot_terminal():
    try:
        ok = subprocess.run(["gnuplot", "-e", "set terminal pngcairo"], timeout=30,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return "pngcairo size 900,560 font 'sans,10'" if ok else "png size 900,560"


def gnuplot(script, log, what):
    """Runs one gnuplot script (60 s at most); False, with a warning, when it fails."""
    try:
        with open(log, "a") as err:
            rc = subprocess.run(["gnuplot"], input=script, text=True, timeout=60,
                                stdout=err, stderr=err).returncode
    except (OSError, subprocess.TimeoutExpired):
        rc = -1
    if rc != 0:
        warn("run.sh", f"gnuplot failed ({what} plot)")
    return rc == 0


def write_dat(path, lines):
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    return bool(lines)


def plot_scaling(res, png, tmp, term):
    """orders/s against segments at hold 20 ms, with the ideal 50/s per segment."""
    conns = res["wrk"]["connections"]
    curve = [r for r in res["scenarios"]
             if r["name"].startswith("curve-") and r.get("orders_s") is not None]
    # The wide point runs with its own connection count: a point of its own, not on
    # the line through the others.
    wide = [r for r in curve if r["name"] == f"curve-{WIDE_SEGS}"]
    pts = sorted((r["segments"], r["orders_s"]) for r in curve if r not in wide)
    dat, wdat = os.path.join(tmp, "curve.dat"), os.path.join(tmp, "curve-wide.dat")
    has_line = write_dat(dat, [f"{s} {num(o)}" for s, o in pts])
    has_wide = write_dat(wdat, [f"{r['segments']} {num(r['orders_s'])}" for r in wide])
    if not has_line and not has_wide:
        return False
    everything = pts + [(r["segments"], r["orders_s"]) for r in wide]
    top = max(max(s * 50, o) for s, o in everything)  # room above for labels (log axis)
    ymax = int((top if top > 0 else 100) * 2)
    xmax = 320 if has_wide else 80
    wide_conns = wide[0].get("connections", WIDE_CONNS) if wide else WIDE_CONNS
    plots = [f"ideal(x) with lines dashtype 2 lw 2 lc rgb '#888888' title 'ideal: "
             f"(1000 / 20 ms) x segments = 50/s per segment'"]
    if has_line:
        plots += [f"'{dat}' using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f77b4' "
                  f"title 'measured, {conns} connections'",
                  f"'{dat}' using 1:2:(sprintf('%.0f', $2)) with labels offset 0,1.2 "
                  f"notitle"]
    if has_wide:
        plots += [f"'{wdat}' using 1:2 with points pt 9 ps 1.6 lc rgb '#d62728' "
                  f"title 'measured, {wide_conns} connections'",
                  f"'{wdat}' using 1:2:(sprintf('%.0f', $2)) with labels offset 0,-1.2 "
                  f"notitle",
                  f"'-' using 1:2 with points pt 6 ps 1.6 lc rgb '#2ca02c' "
                  f"title 'target: {WIDE_TARGET} orders/s at {WIDE_SEGS} segments'"]
    data = f"{WIDE_SEGS} {WIDE_TARGET}\ne\n" if has_wide else ""
    xtics = "1, 2, 4, 8, 16, 20, 32, 64" + (f", {WIDE_SEGS}" if has_wide else "")
    plot = ", \\\n     ".join(plots)
    return gnuplot(f"""set terminal {term}
set output '{png}'
set termoption noenhanced
set title "Orders/s against segments, lock mode, hold 20 ms"
set xlabel 'segments'
set ylabel 'orders/s (201s)'
set logscale xy 2
set xrange [0.8:{xmax}]
set xtics ({xtics})
set yrange [20:{ymax}]
set grid
set key top left
ideal(x) = 1000.0 / 20 * x
plot {plot}
{data}""", os.path.join(tmp, "gnuplot.log"), "scaling")


HOLD0_BARS = {  # name -> (label, is a reference ceiling)
    "global-h0": ("global lock\\n(1 segment)", 0),
    "lock20-h0": ("segment locks\\n(20 segments)", 0),
    "atomic-h0": ("atomic\\n(20 segments)", 0),
    "livez": ("GET /livez\\n(HTTP ceiling)", 1),
    "redis": ("redis-benchmark EVAL\\n(Redis ceiling)", 1),
}


def plot_hold0(res, png, tmp, term):
    """The strategies at hold 0 ms as bars, the two ceilings in grey."""
    lines = []
    for r in res["scenarios"]:
        if r["name"] in HOLD0_BARS and r.get("req_s") is not None:
            label, ceiling = HOLD0_BARS[r["name"]]
            value = r["req_s"] if r["name"] == "livez" else r["orders_s"]
            lines.append(f'"{label}" {num(value)} {ceiling}')
    dat = os.path.join(tmp, "hold0.dat")
    if not write_dat(dat, lines):
        return False
    conns = res["wrk"]["connections"]
    return gnuplot(f"""set terminal {term}
set output '{png}'
set termoption noenhanced
set bmargin 5
set title "Strategies at hold 0 ms, {conns} connections (grey: reference ceilings)"
set ylabel 'orders/s (201s); ceilings: requests/s'
set style fill solid 0.8 border -1
set boxwidth 0.6
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set grid ytics
set xtics nomirror
unset key
plot '{dat}' using 0:2:($3 > 0 ? 0xaaaaaa : 0x1f77b4):xtic(1) with boxes lc rgb variable, \\
     '' using 0:2:(sprintf('%.0f', $2)) with labels offset 0,0.8
""", os.path.join(tmp, "gnuplot.log"), "hold 0")


def plot_rebalance(res, png, tmp, term):
    """Units sold and segments holding stock against time, both rebalance variants."""
    by = {r["name"]: r for r in res["scenarios"]}
    dats, any_data = {}, False
    for v in ("off", "on"):
        samples = ((by.get(f"rebalance-{v}") or {}).get("end_of_sale") or {}).get("samples")
        dats[v] = os.path.join(tmp, f"reb-{v}.dat")
        any_data |= write_dat(dats[v], [" ".join(num(x) for x in s) for s in samples or []])
    if not any_data:
        return False
    u90 = (REB_STOCK * 9 + 9) // 10
    conns = res["wrk"]["connections"]
    return gnuplot(f"""set terminal {term}
set output '{png}'
set termoption noenhanced
set title "End of a sale: {REB_STOCK} stock, {REB_SEGS} segments, lock, hold {REB_HOLD} ms, {conns} connections\\n{REB_PRE_TEXT}"
set xlabel 'seconds since the first order of the sale'
set ylabel 'units sold (GET /admin/skus, every {REB_POLL_MS} ms)'
set y2label 'segments holding stock'
set yrange [0:{REB_STOCK} * 1.05]
set y2range [0:{REB_SEGS} + 1]
set ytics nomirror
set y2tics
set xrange [0:*]
set grid
set key bottom right
set arrow from graph 0, first {u90} to graph 1, first {u90} nohead dashtype 3 lc rgb '#888888'
set label '90% sold: the last 10% starts' at graph 0.02, first {u90} offset 0,0.7 tc rgb '#666666'
plot '{dats["off"]}' using 1:2 with lines lw 2 lc rgb '#d62728' title 'sold, rebalance false', \\
     '{dats["on"]}' using 1:2 with lines lw 2 lc rgb '#1f77b4' title 'sold, rebalance true', \\
     '{dats["off"]}' using 1:3 axes x1y2 with steps dashtype 2 lc rgb '#d62728' title 'segments with stock, false', \\
     '{dats["on"]}' using 1:3 axes x1y2 with steps dashtype 2 lc rgb '#1f77b4' title 'segments with stock, true'
""", os.path.join(tmp, "gnuplot.log"), "rebalance")


def plot_locks(res, png, tmp, term):
    """The lock services and PostgreSQL's schemes (groups locks, pg): lockload.py."""
    return lockload.plot(res, png, tmp, term, gnuplot)


BATCH_SIZES = (1, 8, 64)  # the batch group's sizes at hold 20 ms (drive.py run_batch)
BATCH_SEGS = (1, 4, 20)


def batch_summary(rows):
    """The batch group's pairs and targets, as text (drive.py prints it)."""
    def get(name, key):
        r = rows.get(name) or {}
        return r.get(key) if key != "redis_us" else \
            (r.get("cost") or {}).get("redis_cpu_us_per_order")

    def ratio(a, b):
        return a / b if a and b else None

    def num(x):  # this summary's figures: one decimal
        return "n/a" if x is None else f"{x:.1f}"

    lines = ["batch: group commit, one run"]
    one = get("batch64-h20-s1", "orders_s")
    lines.append(f"  hold 20 ms, 1 segment, batch 64: {num(one)} orders/s "
                 f"(target >= 1000: {'met' if one and one >= 1000 else 'NOT met'}); "
                 f"batch 1: {num(get('batch1-h20-s1', 'orders_s'))}")
    r20 = ratio(get("batch64-h20-s20", "orders_s"), get("batch1-h20-s20", "orders_s"))
    lines.append(f"  hold 20 ms, 20 segments, batch 64 / batch 1: {num(r20)} "
                 f"(target >= 10: {'met' if r20 and r20 >= 10 else 'NOT met'})")
    for mode in ("lock", "atomic"):
        r0 = ratio(get(f"batch64-h0-{mode}", "orders_s"), get(f"batch1-h0-{mode}", "orders_s"))
        us64, us1 = get(f"batch64-h0-{mode}", "redis_us"), get(f"batch1-h0-{mode}", "redis_us")
        lines.append(f"  hold 0, {mode}, 20 segments: batch 64 / batch 1 orders/s {num(r0)} "
                     f"(target >= 1.15: {'met' if r0 and r0 >= 1.15 else 'NOT met'}); "
                     f"Redis CPU per order {num(us64)} µs vs {num(us1)} µs (target <= 6: "
                     f"{'met' if us64 is not None and us64 <= 6 else 'NOT met'})")
    for name in sorted(rows):
        if "-h20-" in name and rows[name].get("batch", 1) > 1:
            p99 = rows[name].get("p99_ms")
            lines.append(f"  {name}: p99 {num(p99)} ms (target <= 50: "
                         f"{'met' if p99 is not None and p99 <= 50 else 'NOT met'})")
    return "\n".join(lines)


BATCH20_WIDE_CONNS = 1000  # the batch20 group's second connection count (drive.py)


def batch20_summary(rows):
    """The batch20 group: batch 64 / batch 1 at each connection count, and the p99.
    Batch 1 is capped at segments / hold (20 / 0.020 s = 1000 orders/s); each
    connection waits for its answer, so orders/s = connections / mean answer time
    (Little's law), and 10x batch 1 needs a mean answer of connections / (10 x batch
    1's orders/s): 10 ms at 100 connections, half the hold. An order queued during
    a hold waits only what is left of it, so this is not out of reach by itself."""
    lines = ["batch20: hold 20 ms, 20 segments, one run"]
    conns = sorted({int(n.rsplit("-c", 1)[1]) for n in rows})

    def num(x):
        return "n/a" if x is None else f"{x:.1f}"
    for c in conns:
        one = (rows.get(f"batch1-h20-s20-c{c}") or {}).get("orders_s")
        big = rows.get(f"batch64-h20-s20-c{c}") or {}
        r = big.get("orders_s") / one if one and big.get("orders_s") else None
        need = c * 1000 / (10 * one) if one else None
        mean = c * 1000 / big["orders_s"] if big.get("orders_s") else None
        lines.append(f"  {c} connections: batch 64 {num(big.get('orders_s'))} / batch 1 "
                     f"{num(one)} orders/s = {num(r)}x (target >= 10: "
                     f"{'met' if r and r >= 10 else 'NOT met'}; 10x needs a mean answer "
                     f"<= {num(need)} ms, batch 64 had {num(mean)} ms); batch 64 p50 "
                     f"{num(big.get('p50_ms'))} ms, p99 {num(big.get('p99_ms'))} ms "
                     f"(target <= 50: {'met' if (big.get('p99_ms') or 1e9) <= 50 else 'NOT met'})")
    return "\n".join(lines)


def plot_batch(res, png, tmp, term):
    """orders/s against segments at hold 20 ms, one line per batch size."""
    plots, i = [], 0
    colours = ("#1f77b4", "#ff7f0e", "#2ca02c")
    for b in BATCH_SIZES:
        pts = sorted((r["segments"], r["orders_s"]) for r in res["scenarios"]
                     if re.fullmatch(rf"batch{b}-h20-s\d+", r["name"])
                     and r.get("orders_s") is not None)
        dat = os.path.join(tmp, f"batch{b}.dat")
        if not write_dat(dat, [f"{s} {num(o)}" for s, o in pts]):
            continue
        c = colours[i % len(colours)]
        i += 1
        plots += [f"'{dat}' using 1:2 with linespoints lw 2 pt 7 lc rgb '{c}' "
                  f"title 'batch {b}'",
                  f"'{dat}' using 1:2:(sprintf('%.0f', $2)) with labels offset 0,1.2 "
                  f"notitle"]
    if not plots:
        return False
    plot = ", \\\n     ".join(plots)
    return gnuplot(f"""set terminal {term}
set output '{png}'
set termoption noenhanced
set title "Group commit: orders/s against segments, lock mode, hold 20 ms"
set xlabel 'segments'
set ylabel 'orders/s (201s)'
set logscale xy 2
set xrange [0.8:32]
set xtics (1, 4, 20)
set grid
set key top left
plot {plot}
""", os.path.join(tmp, "gnuplot.log"), "batch")


PLOTS = (("scaling", plot_scaling), ("hold0", plot_hold0), ("rebalance", plot_rebalance),
         ("batch", plot_batch), ("locks", plot_locks))


def render_results(res, json_path, tmp):
    """Writes <stamp>.md and the plots next to `json_path`; returns the files written."""
    base = json_path[:-len(".json")] if json_path.endswith(".json") else json_path
    with open(base + ".md", "w") as f:
        f.write(fmt_md(res))
    written = [base + ".md"]
    term = gnuplot_terminal()
    for name, plot in PLOTS:
        png = f"{base}-{name}.png"
        if os.path.exists(png):
            os.remove(png)
        if plot(res, png, tmp, term) and os.path.exists(png):
            written.append(png)
    return written


def update_docs(res, pngs, docs_dir):
    """Copies the plots to docs_dir/bench-*.png and rewrites the generated block of
    docs_dir/BENCHMARKS.md (appending one when it has none)."""
    os.makedirs(docs_dir, exist_ok=True)
    for png in pngs:
        for name, _ in PLOTS:
            if png.endswith(f"-{name}.png"):
                shutil.copyfile(png, os.path.join(docs_dir, f"bench-{name}.png"))
    path = os.path.join(docs_dir, "BENCHMARKS.md")
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    new = replace_block(text, fmt_docs_block(res))
    with open(path + ".tmp", "w") as f:
        f.write(new)
    os.replace(path + ".tmp", path)


def print_summary(res, files):
    """The tables (FAILED in red on a terminal) and the files written."""
    say()
    for line in fmt_results(res, colour=True):
        say(line)
    say()
    say("results: " + files[0])
    for path in files[1:]:
        say("         " + path)


def write_results(res, json_path, tmp, docs_dir=None):
    """Writes a run's record to `json_path`, its .md and plots next to it (gnuplot's data
    and log in `tmp`) and, with `docs_dir`, the docs; prints the summary. Returns the
    exit status: 1 when an audit failed, else 0."""
    with open(json_path, "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    md, *pngs = render_results(res, json_path, tmp)
    if docs_dir:
        try:
            update_docs(res, pngs, docs_dir)
            say("docs: updated docs/BENCHMARKS.md and the plots in docs/")
        except OSError as e:
            warn("run.sh", f"could not update docs/: {e}")
    print_summary(res, [md, json_path] + pngs)
    if res["audits_failed"]:
        say(f"{paint('FAILED', 'red', 'bold')}: {res['audits_failed']} scenario(s) failed "
            f"their audit")
        return 1
    say(paint("all audits passed", "green"))
    return 0


# ------------------------------------------------------------------------ the record

def git_commit():
    """`git rev-parse --short HEAD` of the project, "-dirty" when `git status` shows
    changes (untracked files too: the Makefile builds every .c it finds); "unknown"
    outside a git checkout."""
    def git(*args):
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()
    try:
        head = git("rev-parse", "--short", "HEAD")
        return head + ("-dirty" if git("status", "--porcelain") else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def first_line(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        lines = (out.stdout + out.stderr).splitlines()
        return lines[0] if lines else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def machine():
    cpu = mem = ""
    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f
                    if ln.startswith("model name")), "")
    with open("/proc/meminfo") as f:
        kb = next((int(ln.split()[1]) for ln in f if ln.startswith("MemTotal")), 0)
        mem = f"{kb / 1048576:.1f} GiB"
    return {"nproc": len(os.sched_getaffinity(0)), "cpu": cpu, "memory": mem,
            "kernel": f"{platform.system()} {platform.release()}"}


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def versions(bin_path):
    """wrk, redis-server and (when given) the service binary's versions."""
    wrk = first_line(["wrk", "-v"]).split()
    redis = re.search(r" v=(\S+)", first_line(["redis-server", "--version"]))
    return {"wrk": wrk[1] if len(wrk) > 1 else "",
            "redis": redis.group(1) if redis else "",
            "service": first_line([bin_path, "--version"]) if bin_path else ""}


# ------------------------------------------------------------------------ comparison

def pct(old, new):
    if old is None or new is None or old == 0:
        return "n/a"
    return f"{(new - old) / old * 100:+.1f}%"


def describe(path, res):
    return (f"{os.path.basename(path)}: {res.get('started')} ({run_kind(res)}), "
            f"commit {res.get('commit', 'unknown')}, load {res.get('loadavg', {}).get('start')}")


def fmt_compare(old_path, old, new_path, new):
    """Markdown: two runs' scenarios, targets, costs per order, idle connections and
    end-of-sale figures side by side."""
    lines = [f"- old: {describe(old_path, old)}", f"- new: {describe(new_path, new)}"]
    if old.get("quick") != new.get("quick") or old.get("wrk") != new.get("wrk"):
        lines.append("- the runs differ in length or wrk settings: compare with care")
    lines += ["", "| scenario | orders/s old | new | change | req/s old | new | change "
                  "| p99 ms old | new | audit old | new |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    olds = {r["name"]: r for r in old["scenarios"]}
    news = {r["name"]: r for r in new["scenarios"]}
    names = [r["name"] for r in new["scenarios"]]
    names += [n for n in olds if n not in news]
    for n in names:
        a, b = olds.get(n, {}), news.get(n, {})
        lines.append(
            f"| {n} | {fixed(a.get('orders_s'), 0)} | {fixed(b.get('orders_s'), 0)} "
            f"| {pct(a.get('orders_s'), b.get('orders_s'))} | {fixed(a.get('req_s'), 0)} "
            f"| {fixed(b.get('req_s'), 0)} | {pct(a.get('req_s'), b.get('req_s'))} "
            f"| {fixed(a.get('p99_ms'), 2)} | {fixed(b.get('p99_ms'), 2)} "
            f"| {a.get('audit', '-')} | {b.get('audit', '-')} |")
    lines += ["", "| target | goal | old | new | met old | new |",
              "|---|---|---:|---:|---|---|"]
    old_t = {t["name"]: t for t in old.get("ratios") or []}
    for t in new.get("ratios") or []:
        o = old_t.get(t["name"], {})
        met = {None: "n/a", True: "yes", False: "NO"}
        lines.append(f"| {t['name']} | {t['target']} | {fixed(o.get('value'), 2, 'n/a')} "
                     f"| {fixed(t['value'], 2, 'n/a')} | {met[o.get('met')]} "
                     f"| {met[t['met']]} |")
    cost_names = [n for n in names if (olds.get(n) or {}).get("cost")
                  or (news.get(n) or {}).get("cost")]
    if cost_names:
        lines += ["", "| scenario | service CPU µs/order old | new | Redis CPU µs/order old "
                      "| new | Redis commands/order old | new | scripts/order old | new "
                      "| pipeline commands/write old | new |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for n in cost_names:
            a = (olds.get(n) or {}).get("cost") or {}
            b = (news.get(n) or {}).get("cost") or {}
            cells = []
            for key, digits in (("service_cpu_us_per_order", 1),
                                ("redis_cpu_us_per_order", 1),
                                ("redis_commands_per_order", 2),
                                ("redis_scripts_per_order", 2)):
                cells += [fixed(a.get(key), digits, "n/a"), fixed(b.get(key), digits, "n/a")]
            cells += [fixed((a.get("pipeline") or {}).get("commands_per_write"), 2, "n/a"),
                      fixed((b.get("pipeline") or {}).get("commands_per_write"), 2, "n/a")]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
    io_, in_ = old.get("idle") or {}, new.get("idle") or {}
    if io_ or in_:
        lines += ["", f"Idle connections, orders/s with / without: "
                      f"{times(io_.get('with_over_without'))} -> "
                      f"{times(in_.get('with_over_without'))}; service RSS with "
                      f"them {fixed(mib(io_.get('rss_kb_with_max')), 1, 'n/a')} -> "
                      f"{fixed(mib(in_.get('rss_kb_with_max')), 1, 'n/a')} MiB."]
    eo, en = old.get("end_of_sale") or {}, new.get("end_of_sale") or {}
    if eo or en:
        lines += ["", f"End of a sale, with / without rebalancing, last 10%: "
                      f"{fixed(eo.get('last10_on_over_off'), 2, 'n/a')}x -> "
                      f"{fixed(en.get('last10_on_over_off'), 2, 'n/a')}x; whole sale "
                      f"{fixed(eo.get('sale_on_over_off'), 2, 'n/a')}x -> "
                      f"{fixed(en.get('sale_on_over_off'), 2, 'n/a')}x."]
    return lines


# ------------------------------------------------------------------------ command line

def load_results(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise SetupError(f"cannot read {path}: {e}")


def cmd_report(argv):
    """`report`: the .md and plots of a results file again (and the docs block)."""
    p = argparse.ArgumentParser(prog="analyze.py report", allow_abbrev=False)
    p.add_argument("results", help="a loadtest/results/<stamp>.json")
    p.add_argument("--update-docs", action="store_true")
    p.add_argument("--docs-dir", default=DEFAULT_DOCS)
    o = p.parse_args(argv)
    res = load_results(o.results)
    with tempfile.TemporaryDirectory(prefix="loadtest-report.") as tmp:
        md, *pngs = render_results(res, os.path.abspath(o.results), tmp)
    if o.update_docs:
        update_docs(res, pngs, o.docs_dir)
        say(f"docs: updated {o.docs_dir}/BENCHMARKS.md and its plots")
    print_summary(res, [md, o.results] + pngs)
    return 0


def cmd_compare(argv):
    """`compare`: two results files side by side, default the two newest."""
    p = argparse.ArgumentParser(prog="analyze.py compare", allow_abbrev=False)
    p.add_argument("files", nargs="*", metavar="RESULTS.json")
    p.add_argument("--out", default=DEFAULT_OUT, help="where the newest are looked for")
    o = p.parse_args(argv)
    files = o.files or sorted(glob.glob(os.path.join(o.out, "*.json")))[-2:]
    if len(files) != 2:
        raise SetupError("compare needs two results files (or two runs in --out)")
    for line in fmt_compare(files[0], load_results(files[0]),
                            files[1], load_results(files[1])):
        say(line)
    return 0


def cmd_audit(argv):
    """`audit`: the invariants of SKUs at rest, against a running service."""
    p = argparse.ArgumentParser(prog="analyze.py audit", allow_abbrev=False)
    p.add_argument("--url", required=True)
    p.add_argument("--admin-token")
    p.add_argument("--c201", type=int, help="201s (unit orders) a client counted")
    p.add_argument("skus", nargs="+", metavar="SKU")
    o = p.parse_args(argv)
    api, failed = Api(o.url, o.admin_token), 0
    for sku in o.skus:
        code, s, _ = api.settled_status(sku)
        fails = [f"GET /admin/skus/{sku} answered {code}"] if code != 200 else audit_state(s)
        if code == 200 and not status_shape(s) and o.c201 is not None:
            fails += [msg for ok, msg in (
                (s["sold"] == o.c201, f"sold {s['sold']} != 201s counted {o.c201}"),
                (s["orders"] == o.c201, f"orders {s['orders']} != 201s counted {o.c201}"),
            ) if not ok]
        if fails:
            failed += 1
            say(f"{paint('FAILED', 'red', 'bold')} {sku}")
            for msg in fails:
                say(f"  - {msg}")
        else:
            say(f"{paint('ok', 'green')} {sku}: initial {s['initial']}, remaining "
                f"{s['remaining']}, sold {s['sold']}, orders {s['orders']}")
    return 1 if failed else 0


COMMANDS = {"report": cmd_report, "compare": cmd_compare, "audit": cmd_audit}


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        sys.stdout.write(__doc__)
        return 0
    if not argv or argv[0] not in COMMANDS:
        warn("analyze.py", "usage: analyze.py report|compare|audit ... (see --help)")
        return 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except SetupError as e:
        warn("analyze.py", str(e))
        return 2
    except KeyboardInterrupt:
        warn("analyze.py", "interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
