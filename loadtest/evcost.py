"""evcost.py -- what the ledger's events cost Redis per order (issue 24), apart from
HTTP, the service and PostgreSQL: Redis CPU (INFO cpu) per call of the real DEDUCT
(segments/redis/lua/deduct.lua, mode atomic: the whole order in one script) behind
variants of the LEDGER prelude, and of the sink's own scripts per order.

  python3 loadtest/evcost.py [--orders N] [--rounds R]

Variants, each on an emptied redis-server of its own (127.0.0.1, a free port, stopped
by pid), N orders pipelined 256 at a time, R rounds (the lowest figure is printed:
the machine is shared):
  off        LEDGER a no-op (a service without a ledger that never checks)
  flag-off   scripts.c's LEDGER, the segment's ledger flag absent (a SKU of a service
             without a ledger: the EXISTS only)
  on         scripts.c's LEDGER, flag set: the XADD with every field
  on-no-r    as on, the record field left out of the event
  on+sink    as on, and after each 256 orders the sink's Redis side as segments/ledger.c
             runs it: EV_READ (then XREADGROUP), EV_DONE (with the retire list), RETAIN
             of the 256 records
Standard library only.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import analyze as an  # noqa: E402
import drive as d  # noqa: E402

LUA = os.path.join(HERE, "..", "segments", "redis", "lua")
CODES = ("local OK, BUSY, SHORT, EXISTS, MISSING, FENCED, STALE, CONFLICT, LIMIT, "
         "REPLAYED, MISMATCH = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11\n")
LEDGER = """local function LEDGER(key, ...)
  local tag = string.match(key, '^inv:{[^}]*}')
  if redis.call('EXISTS', tag .. ':ledger') == 1 then
    redis.call('XADD', tag .. ':events', '*', ...)
  end
end
"""
NO_R = """local function LEDGER(key, k, kv, e, ev, o, ov, ds, dsv, dq, dqv)
  local tag = string.match(key, '^inv:{[^}]*}')
  if redis.call('EXISTS', tag .. ':ledger') == 1 then
    redis.call('XADD', tag .. ':events', '*', k, kv, e, ev, o, ov, ds, dsv, dq, dqv)
  end
end
"""
PRELUDES = {"off": "local function LEDGER() end\n", "flag-off": LEDGER, "on": LEDGER,
            "on-no-r": NO_R, "on+sink": LEDGER}
BATCH = 256
SKU = "evcost"
T = "inv:{evcost:0}:"


class Conn:
    """One pipelined RESP connection."""

    def __init__(self, addr):
        import socket
        host, port = addr.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)))
        self.f = self.s.makefile("rb")

    @staticmethod
    def enc(*args):
        parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p)
                                                   for p in parts)

    def many(self, cmds):
        self.s.sendall(b"".join(cmds))
        return [d._resp_reply(self.f) for _ in cmds]

    def call(self, *args):
        return self.many([self.enc(*args)])[0]


def source(name):
    with open(os.path.join(LUA, name)) as f:
        return f.read()


def record(oid):
    return ('{"order_id":"%s","sku":"%s","qty":1,"segment":0,"segments":[{"segment":0,'
            '"qty":1}],"status":"confirmed"}' % (oid, SKU))


def run(c, variant, n):
    """Redis CPU (us) per order of `variant` over n orders."""
    c.call("FLUSHALL")
    c.call("SET", T + "stock", 10 ** 12)
    c.call("SET", T + "epoch", "7")
    if variant.startswith("on"):
        c.call("SET", T + "ledger", "1")
    deduct = c.call("SCRIPT", "LOAD", CODES + PRELUDES[variant] + source("deduct.lua"))
    sink = {s: c.call("SCRIPT", "LOAD", CODES + LEDGER + source(s + ".lua"))
            for s in ("ev_read", "ev_done", "retain")}
    cpu0 = an.redis_cpu_seconds(c.call("INFO", "cpu"))
    for b in range(0, n, BATCH):
        ids = [f"o{j}" for j in range(b, min(n, b + BATCH))]
        c.many([Conn.enc("EVALSHA", deduct, 7, T + "lock", T + "stock", T + "sold",
                         T + "orders", "inv:order:{%s}" % i, T + "epoch", T + "fence", "",
                         1, i, record(i), "a" + i, 7, SKU, 0, 0) for i in ids])
        if variant == "on+sink":
            got = c.call("EVALSHA", sink["ev_read"], 5, T + "events", T + "retire",
                         T + "orders", T + "parts", T + "cancelled", "sink", BATCH, 5000)
            entries = [e[0] for e in got[1]]
            if not entries:  # none pending: new ones by a plain XREADGROUP (evstream.c)
                new = c.call("XREADGROUP", "GROUP", "ledger", "sink", "COUNT", BATCH,
                             "STREAMS", T + "events", ">")
                entries = [e[0] for e in new[0][1]] if new else []
            c.call("EVALSHA", sink["ev_done"], 2, T + "events", T + "retire", 5,
                   len(entries), *entries, *ids)
            args = []
            for _ in ids:
                args += [7, "s"]
            c.call("EVALSHA", sink["retain"], len(ids),
                   *["inv:order:{%s}" % i for i in ids], SKU, 5, *args)
    cpu1 = an.redis_cpu_seconds(c.call("INFO", "cpu"))
    return (cpu1 - cpu0) * 1e6 / n


def main(argv):
    p = argparse.ArgumentParser(prog="evcost.py")
    p.add_argument("--orders", type=int, default=100000)
    p.add_argument("--rounds", type=int, default=3)
    o = p.parse_args(argv)
    children = d.Children()
    try:
        port = d.free_port()
        proc = children.start(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"], os.devnull)
        addr = f"127.0.0.1:{port}"
        if not d.wait_up(10, proc, lambda: d.redis_ping(addr)):
            print("evcost.py: redis-server did not start", file=sys.stderr)
            return 2
        c = Conn(addr)
        best = {}
        for _ in range(o.rounds):
            for v in PRELUDES:
                x = run(c, v, o.orders)
                best[v] = min(best.get(v, x), x)
        base = best["off"]
        print(f"Redis CPU per order, DEDUCT (atomic) and variants, {o.orders} orders, "
              f"best of {o.rounds}")
        for v, x in best.items():
            print(f"  {v:9} {x:6.2f} us  {100 * (x - base) / base:+6.1f}%")
        return 0
    finally:
        children.stop_all()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
