#!/usr/bin/env python3
"""idle.py -- hold N idle keep-alive HTTP connections open to a service on 127.0.0.1.

    idle.py --port PORT [--connections N] [--ready FILE] [--max-seconds S]

drive.py starts it for the idle-connections scenario (loadtest/run.sh --only idle10k):
it opens the connections before wrk starts, keeps them open while wrk runs, and ends
them when the driver sends SIGINT or SIGTERM.

Contract
  Open      N connections to 127.0.0.1:PORT (no other address is accepted), at most
            OPEN_AT_ONCE connecting at a time so the listen backlog never overflows.
            Each sends one `GET /livez` (HTTP/1.1, keep-alive) and reads its whole
            answer, so every connection is a kept-alive HTTP connection the service has
            served once and now holds idle. The opening phase is bounded by
            --open-seconds; a connection not served by then counts as failed.
  Ready     then writes FILE (when given) with one JSON object: requested, opened,
            failed, first_error, open_s. The driver waits for that file.
  Hold      keeps the opened connections, sending nothing, watching each for the peer
            closing it (or sending anything), until SIGINT/SIGTERM or --max-seconds.
  Report    prints `LOADTEST_IDLE {json}` on stdout: the Ready fields plus held_s,
            closed_by_peer, unexpected_bytes and still_open; then closes every socket.
  Limits    raises its RLIMIT_NOFILE soft limit to N + 64 (up to the hard limit, or
            past it when allowed); fails at once with exit status 2 when it cannot.
  Exit      0 after the report (whether or not every connection opened: the driver
            judges the numbers), 2 on bad usage or a file limit too low.

Python 3.9 or later, standard library only.
"""

import argparse
import errno
import json
import os
import resource
import selectors
import signal
import socket
import sys
import time

HOST = "127.0.0.1"  # loopback only, by design
OPEN_AT_ONCE = 256
REQUEST = b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n"

stop = False


def on_signal(signum, frame):
    global stop
    stop = True


def raise_nofile(want):
    """Raises RLIMIT_NOFILE's soft limit to at least `want` (past the hard limit when
    allowed); returns the soft limit now in force. drive.py uses it too."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return soft
    try:
        if hard != resource.RLIM_INFINITY and hard < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
        else:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def answer_complete(buf):
    """True when `buf` holds one whole HTTP answer (head and Content-Length body)."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return False
    length = 0
    for line in buf[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or b"0")
    return len(buf) >= end + 4 + length


def open_all(port, n, seconds):
    """Opens up to `n` served, idle connections within `seconds`; returns (the sockets,
    failures, the first error)."""
    sel = selectors.DefaultSelector()
    idle, failed, first_error = [], 0, ""
    started, pending = 0, {}  # socket -> bytes read so far (None: still connecting)
    deadline = time.monotonic() + seconds

    def fail(s, why):
        nonlocal failed, first_error
        failed += 1
        first_error = first_error or why
        sel.unregister(s)
        del pending[s]
        s.close()

    while (started < n or pending) and not stop:
        while started < n and len(pending) < OPEN_AT_ONCE:
            started += 1
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            rc = s.connect_ex((HOST, port))
            if rc not in (0, errno.EINPROGRESS):
                failed += 1
                first_error = first_error or f"connect: {errno.errorcode.get(rc, rc)}"
                s.close()
                continue
            pending[s] = None
            sel.register(s, selectors.EVENT_WRITE)
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for key, _ in sel.select(min(left, 1.0)):
            s = key.fileobj
            if pending[s] is None:  # connected (or refused): send the request
                rc = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if rc != 0:
                    fail(s, f"connect: {errno.errorcode.get(rc, rc)}")
                    continue
                try:
                    s.send(REQUEST)  # 70 bytes into an empty socket buffer
                except OSError as e:
                    fail(s, f"send: {e}")
                    continue
                pending[s] = b""
                sel.modify(s, selectors.EVENT_READ)
                continue
            try:
                data = s.recv(4096)
            except OSError as e:
                fail(s, f"recv: {e}")
                continue
            if not data:
                fail(s, "closed by the service before answering")
                continue
            pending[s] += data
            if answer_complete(pending[s]):
                if not pending[s].startswith(b"HTTP/1.1 200"):
                    fail(s, "answer: " + pending[s].split(b"\r\n", 1)[0].decode(
                        "latin-1")[:80])
                    continue
                sel.unregister(s)
                del pending[s]
                idle.append(s)
    for s in list(pending):
        fail(s, "not served within the opening time")
    failed += n - started
    sel.close()
    return idle, failed, first_error


def hold(conns, max_seconds):
    """Holds `conns` until a signal or `max_seconds`; returns (the sockets still open,
    how many the peer closed, bytes received that nobody asked for)."""
    sel = selectors.DefaultSelector()
    for s in conns:
        sel.register(s, selectors.EVENT_READ)
    open_ = set(conns)
    closed = unexpected = 0
    deadline = time.monotonic() + max_seconds
    while not stop and time.monotonic() < deadline:
        for key, _ in sel.select(0.5):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if data:
                unexpected += len(data)
                continue
            closed += 1
            sel.unregister(s)
            open_.discard(s)
            s.close()
    sel.close()
    return open_, closed, unexpected


def main(argv):
    p = argparse.ArgumentParser(prog="idle.py", allow_abbrev=False,
                                description="hold idle keep-alive connections open")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--connections", type=int, default=10000)
    p.add_argument("--ready")
    p.add_argument("--open-seconds", type=float, default=60)
    p.add_argument("--max-seconds", type=float, default=600)
    o = p.parse_args(argv)
    if not (0 < o.port < 65536 and 0 < o.connections <= 60000
            and 0 < o.max_seconds <= 3600 and 0 < o.open_seconds <= 600):
        print("idle.py: bad --port, --connections (1-60000) or time limit", file=sys.stderr)
        return 2
    limit = raise_nofile(o.connections + 64)
    if limit < o.connections + 64:
        print(f"idle.py: RLIMIT_NOFILE is {limit}, {o.connections + 64} needed",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    t0 = time.monotonic()
    conns, failed, first_error = open_all(o.port, o.connections, o.open_seconds)
    report = {"requested": o.connections, "opened": len(conns), "failed": failed,
              "first_error": first_error, "open_s": round(time.monotonic() - t0, 3)}
    if o.ready:
        with open(o.ready + ".tmp", "w") as f:
            json.dump(report, f)
        os.replace(o.ready + ".tmp", o.ready)
    t1 = time.monotonic()
    still, closed, unexpected = hold(conns, o.max_seconds)
    report.update(held_s=round(time.monotonic() - t1, 3), closed_by_peer=closed,
                  unexpected_bytes=unexpected, still_open=len(still))
    print("LOADTEST_IDLE " + json.dumps(report, separators=(",", ":")), flush=True)
    for s in still:
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
