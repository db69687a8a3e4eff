#!/usr/bin/env python3
"""layers.py -- the layering rules, checked: exit 1 when one is broken.

1. Folders: no folder includes (#include "dir/...") a folder that includes it back,
   directly or through others. Expected order: base < segments/store.h <
   segments/redis < segments < api < service. The store seam (segments/store.h) is a
   layer of its own: every backend includes it, and it includes base only.
2. Files of segments/ and of each backend folder: no two .c files call each other round. The
   call graph comes from the objects (`nm`): a file calls another when one of its
   undefined symbols is defined there.
3. The engine's files (ENGINE) include no header of a store's or a lock service's
   folder (BACKENDS), directly or through the headers they include: they talk to
   stores through segments/store.h alone.

usage: tests/layers.py [build-dir]   (default build; run `make` first)
"""
import glob
import os
import re
import subprocess
import sys

FOLDERS = ["base", "segments/redis", "segments/postgres", "segments", "api", "service"]
FOLDERS += ["segments/redlock", "segments/memcached", "segments/zookeeper", "segments/lockcall"]
# Headers that are a layer of their own, below the folder that holds them.
SEAMS = ["segments/store.h", "segments/admin.h", "segments/locksvc.h"]
ENGINE = ["segments/" + f for f in (
    "engine.c", "ord.c", "lease.c", "handover.c", "claims.c", "multi.c", "spread.c",
    "verdict.c", "batch.c", "turns.c", "engine.h", "engine_internal.h")]
BACKENDS = ["segments/redis", "segments/postgres", "segments/redlock", "segments/memcached",
            "segments/zookeeper"]
BACKENDS += ["segments/lockcall"]


def sccs(graph):
    """Strongly connected components of {node: set(nodes)} (Tarjan), as lists."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def includes(path):
    """The project headers `path` includes (#include "..."), as paths."""
    with open(path) as src:
        return re.findall(r'#include "([^"]+)"', src.read())


def node(path):
    return path if path in SEAMS else os.path.dirname(path)


def folder_graph():
    graph = {f: set() for f in FOLDERS + SEAMS}
    for f in FOLDERS + SEAMS:
        paths = glob.glob(f) if f in SEAMS else glob.glob(f + "/*.[ch]")
        for path in paths:
            if f not in SEAMS and path in SEAMS:
                continue
            for inc in includes(path):
                d = node(inc)
                if d != f and d in graph:
                    graph[f].add(d)
    return graph


def engine_leaks():
    """(engine file, backend header, the include chain) for each engine file that
    reaches a backend's header through its includes."""
    out = []
    for start in ENGINE:
        seen, todo = {start: [start]}, [start]
        while todo:
            cur = todo.pop()
            for inc in includes(cur):
                if inc in seen or not os.path.exists(inc):
                    continue
                seen[inc] = seen[cur] + [inc]
                if os.path.dirname(inc) in BACKENDS:
                    out.append((start, inc, seen[inc]))
                else:
                    todo.append(inc)
    return out


def call_graph(build):
    srcs = sorted(glob.glob("segments/*.c") + [c for b in BACKENDS for c in glob.glob(b + "/*.c")])
    defs, uses = {}, {}
    for src in srcs:
        obj = os.path.join(build, src[:-2] + ".o")
        if not os.path.exists(obj) or os.path.getmtime(obj) < os.path.getmtime(src):
            sys.exit(f"layers: {obj} missing or older than {src}: run make first")
        nm = subprocess.run(["nm", obj], capture_output=True, text=True, check=True)
        d, u = set(), set()
        for line in nm.stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBRC":
                d.add(parts[2])
            elif len(parts) == 2 and parts[0] == "U":
                u.add(parts[1])
        defs[src], uses[src] = d, u
    owner = {sym: f for f, d in defs.items() for sym in d}
    return {f: {owner[s] for s in u if s in owner and owner[s] != f}
            for f, u in uses.items()}


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    bad = 0
    folders = folder_graph()
    for f in FOLDERS + SEAMS:
        print(f"{f:16} includes {', '.join(sorted(folders[f])) or '-'}")
    for comp in sccs(folders):
        if len(comp) > 1:
            print("layers: folders include each other round: " + " ".join(comp))
            bad = 1
    leaks = engine_leaks()
    print(f"engine: {len(ENGINE)} files, {len(leaks)} includes of a backend's headers")
    for start, inc, chain in leaks:
        print(f"layers: {start} includes {inc} (" + " > ".join(chain) + ")")
        bad = 1
    calls = call_graph(build)
    edges = sum(len(v) for v in calls.values())
    cycles = [c for c in sccs(calls) if len(c) > 1]
    print(f"segments: {len(calls)} files, {edges} call edges, {len(cycles)} cycles")
    for comp in cycles:
        print("layers: files call each other round: " + " ".join(comp))
        bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
