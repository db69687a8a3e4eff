#!/usr/bin/env python3
"""grafana_check.py -- check a Grafana dashboard against a live GET /metrics body.

    tests/grafana_check.py DASHBOARD.json METRICS.txt [--keep-rules FILE]

1. Every PromQL expression of the dashboard (panel targets, rows' nested panels, and
   the metric selectors of label_values() template queries) is collected and its
   Grafana variables replaced: $__rate_interval, $__interval, $__range by 5m, any
   other $var / ${var} / ${var:fmt} / [[var]] by .* (they stand in label matchers).
2. Every metric name an expression names must be a sample name in METRICS.txt.
3. The expressions become recording rules of one group in a rules file, and
   `promtool check rules` must accept it (exit 0, one rule per expression): that
   parses every expression with Prometheus's own parser. Without promtool on PATH
   this step is skipped and says so.

Exit 0 when all holds; 1 with one line per problem otherwise. Python 3 stdlib only.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

INTERVALS = re.compile(r"\$\{?__(rate_interval|interval|range)(?::\w+)?\}?")
VARIABLE = re.compile(r"\$\{(\w+)(?::[\w]+)?\}|\$(\w+)|\[\[(\w+)\]\]")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
TOKEN = re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[A-Za-z_:][A-Za-z0-9_:]*")
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan", "Inf", "NaN", "start", "end"}
LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$")


def expressions(dashboard):
    """(where, expr) for every query of the dashboard."""
    out = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                if t.get("expr", "").strip():
                    out.append((f'panel {p.get("id")} "{p.get("title")}" '
                                f'target {t.get("refId")}', t["expr"]))

    walk(dashboard.get("panels", []))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        m = LABEL_VALUES.match(q)
        if m:
            out.append((f'variable "{v.get("name")}"', m.group(1)))
        elif q.strip():
            out.append((f'variable "{v.get("name")}"', None))  # not a form we know
    return out


def substitute(expr):
    expr = INTERVALS.sub("5m", expr)
    return VARIABLE.sub(".*", expr)


def metric_names(expr):
    """Metric names in a PromQL expression (after substitute)."""
    s = STRING.sub('""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)    # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)   # range and subquery durations
    s = GROUPING.sub(" ", s)            # by (...), on (...), ...
    names = set()
    for m in TOKEN.finditer(s):
        tok = m.group(0)
        if tok[0].isdigit() or tok in KEYWORDS:
            continue
        if re.match(r"\s*\(", s[m.end():]):  # a function or an aggregation
            continue
        names.add(tok)
    return names


def exposed(metrics_text):
    names = set()
    for line in metrics_text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    keep = None
    if "--keep-rules" in argv:
        keep = argv[argv.index("--keep-rules") + 1]
        args.remove(keep)
    if len(args) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    with open(args[0]) as f:
        dashboard = json.load(f)
    with open(args[1]) as f:
        have = exposed(f.read())

    problems, rules = [], []
    for where, expr in expressions(dashboard):
        if expr is None:
            problems.append(f"{where}: not a label_values(selector, label) query")
            continue
        q = substitute(expr)
        if "$" in q:
            problems.append(f"{where}: a variable is left in {q!r}")
        names = metric_names(q)
        if not names:
            problems.append(f"{where}: names no metric: {expr!r}")
        for n in sorted(names - have):
            problems.append(f"{where}: {n} is not in {args[1]}")
        rules.append(q)

    used = set().union(*(metric_names(r) for r in rules)) if rules else set()
    print(f"grafana_check: {len(rules)} queries naming {len(used)} metrics "
          f"({', '.join(sorted(used))})")

    lines = ["groups:", "  - name: grafana_dashboard", "    rules:"]
    for i, q in enumerate(rules):
        lines.append(f"      - record: grafana:query_{i}")
        lines.append(f"        expr: {json.dumps(q)}")  # a JSON string is YAML too
    text = "\n".join(lines) + "\n"
    if keep:
        with open(keep, "w") as f:
            f.write(text)

    promtool = shutil.which("promtool")
    if promtool is None:
        print("grafana_check: promtool is not on PATH: skipped `promtool check rules`")
    else:
        with tempfile.NamedTemporaryFile("w", suffix=".rules.yml", delete=False) as f:
            f.write(text)
            path = f.name
        try:
            r = subprocess.run([promtool, "check", "rules", path], capture_output=True,
                               text=True, timeout=60)
        finally:
            os.unlink(path)
        out = (r.stdout + r.stderr).strip()
        print("promtool check rules: " + out.replace("\n", "\n  "))
        if r.returncode != 0:
            problems.append(f"promtool check rules exited {r.returncode}")
        elif f"SUCCESS: {len(rules)} rules found" not in out:
            problems.append(f"promtool did not report {len(rules)} rules")

    for p in problems:
        print("grafana_check: " + p)
    print("grafana_check: " + ("FAILED" if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
