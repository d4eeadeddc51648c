#!/usr/bin/env python3
"""/filter latency of the real `gpufrac scheduler --no-kube` while slow
clients drip bytes at it (issue 12: slowloris).  Loopback only.

  python3 bench/sched_slowloris.py BUILD_DIR [SLOW] [SECONDS] [ROUNDS]

Opens SLOW connections (default 300) from 127.0.0.2 that send a request
line and then one header byte every 2 s, never finishing, for SECONDS
(default 20), while one normal client on 127.0.0.1 POSTs
tests/sched/fixtures/filter_args_nodes.json to /filter (a new connection
each time, as the Python client makes it) and GETs /healthz on the
health listener.  Prints, per round, the median and p99 of both and how
many slow connections the extender shut; then the medians over rounds.
The latencies include the Python client's own cost.
"""
import http.client
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def drip(port, n, secs, out):
    socks = []
    for _ in range(n):
        s = socket.socket()
        try:
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", port))
            s.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\n")
            s.setblocking(False)
            socks.append(s)
        except OSError:
            out["refused"] += 1
            s.close()
    t0 = time.monotonic()
    alive = set(range(len(socks)))
    while time.monotonic() - t0 < secs:
        for i in list(alive):
            try:
                if socks[i].recv(1) == b"":
                    alive.discard(i)
                    continue
            except BlockingIOError:
                pass
            except OSError:
                alive.discard(i)
                continue
            try:
                socks[i].send(b"x")
            except OSError:
                alive.discard(i)
        time.sleep(2.0)
    out["shut"] = len(socks) - len(alive)
    for s in socks:
        s.close()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def one_round(binary, body, slow, secs):
    port, hport = free_port(), free_port()
    ext = subprocess.Popen(
        [binary, "scheduler", "--no-kube", "--threads", "2", "--listen",
         "127.0.0.1:%d" % port, "--health-listen", "127.0.0.1:%d" % hport],
        stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", hport), 0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        out = {"refused": 0, "shut": 0}
        th = threading.Thread(target=drip, args=(port, slow, secs, out))
        th.start()
        time.sleep(0.5)
        filt, health = [], []
        while th.is_alive():
            t = time.perf_counter()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("POST", "/filter", body,
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            c.close()
            assert r.status == 200, r.status
            filt.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            c = http.client.HTTPConnection("127.0.0.1", hport, timeout=30)
            c.request("GET", "/healthz")
            r = c.getresponse()
            r.read()
            c.close()
            assert r.status == 200, r.status
            health.append((time.perf_counter() - t) * 1000)
            time.sleep(0.01)
        th.join()
        return (statistics.median(filt), pct(filt, 99),
                statistics.median(health), pct(health, 99), len(filt),
                out["shut"] + out["refused"])
    finally:
        ext.terminate()
        ext.wait()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = os.path.join(sys.argv[1], "gpufrac")
    slow = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    secs = float(sys.argv[3]) if len(sys.argv) > 3 else 20
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    with open(os.path.join(ROOT, "tests/sched/fixtures/filter_args_nodes.json"),
              "rb") as f:
        body = f.read()
    rows = []
    for i in range(rounds):
        r = one_round(binary, body, slow, secs)
        rows.append(r)
        print("round %d: filter median %.2f ms p99 %.2f ms; healthz median "
              "%.2f ms p99 %.2f ms; %d requests; %d of %d slow connections "
              "shut" % ((i + 1,) + r[:5] + (r[5], slow)))
    print("median of %d rounds: filter p50 %.2f ms p99 %.2f ms; healthz p50 "
          "%.2f ms p99 %.2f ms" % (rounds, statistics.median(x[0] for x in rows),
                                   statistics.median(x[1] for x in rows),
                                   statistics.median(x[2] for x in rows),
                                   statistics.median(x[3] for x in rows)))


if __name__ == "__main__":
    main()
