#!/usr/bin/python3
"""The real `gpufrac scheduler` (--no-kube) under hostile clients (issue 29).

usage: test_hostile.py PATH/TO/gpufrac CASE
CASE: http     strict HTTP/1.1 framing (RFC 9112 section 6): Content-Length
               beside Transfer-Encoding, two different Content-Lengths and an
               unknown transfer coding each get 400 and the connection
               closed, and a request smuggled behind is never answered
      memory   reply amplification: a request may name only about the nodes
               the model knows; 120 connections from 4 loopback addresses
               that send big /filter requests and never read keep the RSS
               within +64 MiB, a good client is served meanwhile, and the
               RSS comes back down once they close
      deadline a client reading a 1 MB answer at 500 B/s loses its
               connection at the request deadline
      slots    300 slow clients from 20 addresses, half of them TLS
               handshakes left half-open, reopened as they are closed, on a
               listener of 128 slots: a good client (curl with a client
               certificate) keeps getting answers
Raw sockets from Python (several source addresses 127.0.0.x) and curl.
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/src/cli/gpufrac"
CASE = sys.argv[2] if len(sys.argv) > 2 else "http"
MiB = 1 << 20


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


class Extender:
    def __init__(self, *extra):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="hostile-",
                                               suffix=".log")
        self.proc = subprocess.Popen(
            [BIN, "scheduler", "--no-kube", "--listen", "127.0.0.1:0",
             "--threads", "4"] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        self.port = None
        while time.time() < deadline and self.port is None:
            self.log.seek(0)
            m = re.search(r"serving on port (\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                break
            else:
                time.sleep(0.05)
        if self.port is None:
            self.log.seek(0)
            fail("extender did not start: " + self.log.read())

    def rss(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def connect(port, src="127.0.0.1", timeout=5):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_all(s, limit=8 * MiB):
    """Reads until the peer closes; returns (bytes, closed)."""
    out = b""
    try:
        while len(out) < limit:
            b = s.recv(65536)
            if not b:
                return out, True
            out += b
    except (socket.timeout, ConnectionResetError):
        return out, isinstance(sys.exc_info()[1], ConnectionResetError)
    return out, False


def post(path, body, ctype="application/json"):
    return ("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\n"
            "Content-Length: %d\r\n\r\n" % (path, ctype, len(body))
            ).encode() + body


def one_call(port, path, body, src="127.0.0.1", timeout=5):
    """One POST on a fresh connection; returns (status, body)."""
    s = connect(port, src, timeout)
    try:
        s.sendall(post(path, body) if body is not None else
                  ("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                   % path).encode())
        data = b""
        while b"\r\n\r\n" not in data:
            b = s.recv(65536)
            if not b:
                raise OSError("closed before an answer")
            data += b
        head, rest = data.split(b"\r\n\r\n", 1)
        status = int(head.split()[1])
        m = re.search(rb"(?i)content-length:\s*(\d+)", head)
        n = int(m.group(1)) if m else 0
        while len(rest) < n:
            b = s.recv(65536)
            if not b:
                break
            rest += b
        return status, rest[:n]
    finally:
        s.close()


POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
       "spec": {"containers": [{"name": "c", "resources": {"limits": {
           "gpufrac.io/gpu": "1", "gpufrac.io/gpu-memory": "1Gi"}}}]}}


def node(name):
    return {"metadata": {"name": name},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}


# ---- http ---------------------------------------------------------------

def raw_exchange(port, data, wait=3.0):
    """Sends data; reads everything until the server closes or `wait`
    passes.  Returns (bytes read, closed by the server, seconds)."""
    s = connect(port, timeout=wait)
    t0 = time.time()
    s.sendall(data)
    out, closed = read_all(s)
    s.close()
    return out, closed, time.time() - t0


def case_http():
    ext = Extender("--request-timeout-ms", "8000")
    try:
        body = json.dumps({"Pod": POD, "NodeNames": []}).encode()
        smuggled = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        # 1. Content-Length and Transfer-Encoding: chunked together.  The
        # chunked body ends where the smuggled request begins.
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        req = (b"POST /filter HTTP/1.1\r\nHost: x\r\n"
               b"Content-Type: application/json\r\n"
               b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n"
               % len(chunked + smuggled)) + chunked + smuggled
        out, closed, took = raw_exchange(ext.port, req)
        answers = out.count(b"HTTP/1.1 ")
        if not out.startswith(b"HTTP/1.1 400") or answers != 1 or not closed:
            fail("CL + TE: want one 400 and the connection closed, got %d "
                 "answer(s), closed=%s: %r" % (answers, closed, out[:300]))
        if b"gpufrac_" in out:
            fail("CL + TE: the smuggled GET /metrics was answered")
        print("CL+TE: 400 and closed in %.3f s" % took)
        # The same with the order of the headers swapped.
        req = (b"POST /filter HTTP/1.1\r\nHost: x\r\n"
               b"Transfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n"
               % len(chunked + smuggled)) + chunked + smuggled
        out, closed, took = raw_exchange(ext.port, req)
        if not out.startswith(b"HTTP/1.1 400") or not closed or \
                out.count(b"HTTP/1.1 ") != 1:
            fail("TE + CL: want one 400 and close, got %r" % out[:300])
        # 2. Two different Content-Lengths (as two fields and as a list).
        for cls in ([b"Content-Length: %d" % len(body),
                     b"Content-Length: %d" % (len(body) - 20)],
                    [b"Content-Length: %d, %d" % (len(body),
                                                   len(body) - 20)]):
            req = (b"POST /filter HTTP/1.1\r\nHost: x\r\n" +
                   b"\r\n".join(cls) + b"\r\n\r\n" + body + smuggled)
            out, closed, took = raw_exchange(ext.port, req)
            # (libmicrohttpd 0.9.75 refuses the list form itself, and sends
            # its 400's header twice: only 400s may come back)
            if not out.startswith(b"HTTP/1.1 400") or not closed or \
                    out.count(b"HTTP/1.1 ") != out.count(b"HTTP/1.1 400"):
                fail("two Content-Lengths %r: want 400 and close, got "
                     "%r" % (cls, out[:300]))
        print("two Content-Lengths: 400 and closed")
        # The same length twice is one length (RFC 9112 6.3 allows it).
        req = (b"POST /filter HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
               b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
               % (len(body), len(body))) + body
        out, closed, took = raw_exchange(ext.port, req)
        if not out.startswith(b"HTTP/1.1 200"):
            fail("the same Content-Length twice: want 200, got %r" % out[:200])
        # 3. An unknown transfer coding: 400 at once, not at the deadline.
        for te in (b"gzip", b"gzip, chunked", b"chunked, chunked", b"xyz"):
            req = (b"POST /filter HTTP/1.1\r\nHost: x\r\n"
                   b"Transfer-Encoding: " + te + b"\r\n\r\n" + chunked)
            out, closed, took = raw_exchange(ext.port, req, wait=6.0)
            if not out.startswith(b"HTTP/1.1 400") or not closed or \
                    took > 2.0:
                fail("Transfer-Encoding %r: want 400 and close at once, got "
                     "%r after %.1f s (closed=%s)" % (te, out[:200], took,
                                                       closed))
        print("unknown transfer codings: 400 and closed at once")
        # Transfer-Encoding in HTTP/1.0 (RFC 9112 6.1: faulty framing).
        req = (b"POST /filter HTTP/1.0\r\nHost: x\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" + chunked + smuggled)
        out, closed, took = raw_exchange(ext.port, req)
        if not out.startswith(b"HTTP/1.1 400") or not closed or \
                out.count(b"HTTP/1.1 ") != 1:
            fail("HTTP/1.0 with Transfer-Encoding: want one 400 and close, "
                 "got %r" % out[:300])
        # curl's chunked upload (a real client) still works.
        r = subprocess.run(
            ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "-H",
             "Transfer-Encoding: chunked", "-H",
             "Content-Type: application/json", "--data-binary", "@-",
             "http://127.0.0.1:%d/filter" % ext.port],
            input=body, capture_output=True, timeout=20)
        code = r.stdout.rsplit(b"\n", 1)[-1]
        if code != b"200" or b"NodeNames" not in r.stdout:
            fail("curl chunked /filter: %r %r" % (r.stdout[:300], r.stderr))
        print("curl chunked upload: 200")
        if not ext.alive():
            fail("extender died")
    finally:
        ext.stop()


# ---- memory -------------------------------------------------------------

def teach(port, names):
    """Makes the model learn `names` (Nodes sent in full, as kube-scheduler
    does without nodeCacheCapable)."""
    body = json.dumps({"Pod": POD, "Nodes": {
        "items": [node(n) for n in names]}}).encode()
    st, rep = one_call(port, "/filter", body, timeout=30)
    if st != 200:
        fail("teaching nodes: %d %r" % (st, rep[:200]))


def case_memory():
    ext = Extender("--request-timeout-ms", "4000")
    try:
        # 1. 100,000 names the model does not know are refused in a few
        # hundred bytes, not answered one reason each.
        teach(ext.port, ["known-%d" % i for i in range(50)])
        names = ["n%07d.example.internal" % i for i in range(100000)]
        body = json.dumps({"Pod": POD, "NodeNames": names}).encode()
        st, rep = one_call(ext.port, "/filter", body, timeout=30)
        print("100000 unknown names (%d B): %d, %d B reply" % (
            len(body), st, len(rep)))
        if len(rep) > 4096 or b"Error" not in rep:
            fail("100000 unknown names: want a short Error, got %d B: %r"
                 % (len(rep), rep[:300]))
        err = json.loads(rep)["Error"]
        if "100000" not in err or "50" not in err:
            fail("the Error should give both counts: %r" % err)
        st, rep = one_call(ext.port, "/prioritize", body, timeout=30)
        if st != 400 or len(rep) > 4096 or b"100000" not in rep:
            fail("/prioritize with 100000 unknown names: want a short 400, "
                 "got %d, %d B" % (st, len(rep)))
        # Names the model knows still get one answer each.
        body = json.dumps({"Pod": POD, "NodeNames": ["known-%d" % i for i in
                                                     range(50)]}).encode()
        st, rep = one_call(ext.port, "/filter", body)
        j = json.loads(rep) if st == 200 else {}
        if st != 200 or len(j.get("FailedNodes") or {}) + len(
                j.get("FailedAndUnresolvableNodes") or {}) != 50:
            fail("50 known names: %d %r" % (st, rep[:300]))

        # 2. A model of 4000 nodes with long names: a /filter naming them
        # all is answered in about 1 MB, legitimately.
        big = ["%s-%05d" % ("x" * 200, i) for i in range(4000)]
        teach(ext.port, big)
        body = json.dumps({"Pod": POD, "NodeNames": big}).encode()
        st, rep = one_call(ext.port, "/filter", body, timeout=30)
        if st != 200 or len(rep) < 800000:
            fail("4000 names: want a ~1 MB answer, got %d, %d B" %
                 (st, len(rep)))
        print("/filter naming 4000 known nodes: %d B in, %d B out" % (
            len(body), len(rep)))
        time.sleep(0.5)
        base = ext.rss()
        # 3. 120 connections from 4 addresses send it and never read.
        conns = []
        for i in range(120):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.bind(("127.0.0.%d" % (2 + i % 4), 0))
            s.settimeout(10)
            s.connect(("127.0.0.1", ext.port))
            s.sendall(post("/filter", body))
            conns.append(s)
        peak = base
        lat = []
        served = 0
        t_end = time.time() + 3.0
        while time.time() < t_end:
            peak = max(peak, ext.rss())
            t0 = time.time()
            try:
                st, rep = one_call(ext.port, "/filter", json.dumps(
                    {"Pod": POD, "NodeNames": big[:20]}).encode(),
                    src="127.0.0.9", timeout=5)
                if st == 200:
                    served += 1
                    lat.append(time.time() - t0)
            except OSError:
                pass
            time.sleep(0.02)
        peak = max(peak, ext.rss())
        lat.sort()
        p99 = lat[int(len(lat) * 0.99) - 1] * 1000 if lat else -1
        print("120 non-reading connections: RSS %.1f MiB -> peak %.1f MiB; "
              "good client %d calls served, p99 %.2f ms" % (
                  base / MiB, peak / MiB, served, p99))
        if peak - base > 64 * MiB:
            fail("RSS grew %.1f MiB (bound: 64 MiB)" % ((peak - base) / MiB))
        if served < 10:
            fail("the good client was served %d times in 3 s" % served)
        for s in conns:
            s.close()
        time.sleep(1.5)
        after = ext.rss()
        print("after they closed: RSS %.1f MiB" % (after / MiB))
        if after - base > 16 * MiB:
            fail("RSS stays %.1f MiB above the start after the clients "
                 "closed" % ((after - base) / MiB))

        if not ext.alive():
            fail("extender died")
    finally:
        ext.stop()


def case_deadline():
    ext = Extender("--request-timeout-ms", "4000")
    try:
        big = ["%s-%05d" % ("x" * 200, i) for i in range(4000)]
        teach(ext.port, big)
        body = json.dumps({"Pod": POD, "NodeNames": big}).encode()
        # 4. A client reading 500 B/s loses its connection at the deadline
        # (4 s here), the time to send the answer counted.  What it reads
        # may still come from its own receive queue after that: the state
        # of its socket (TCP_INFO) says whether the connection is there.
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(2)
        s.connect(("127.0.0.1", ext.port))
        t0 = time.time()
        s.sendall(post("/filter", body))
        got = 0
        closed_at = None
        while time.time() - t0 < 15:
            state = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
            if state != 1:  # TCP_ESTABLISHED
                closed_at = time.time() - t0
                break
            try:
                b = s.recv(50)
            except (ConnectionResetError, socket.timeout):
                b = b""
            got += len(b)
            time.sleep(0.1)  # 500 B/s
        s.close()
        slow_closed_at = closed_at
        # A good keep-alive client that sends its next request before it
        # has read the end of the previous answer (as over a network, where
        # the send queue is never seen empty between requests) keeps its
        # connection past the deadline: the deadline is per request, not per
        # connection.
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)
        s.settimeout(5)
        s.connect(("127.0.0.1", ext.port))
        t0, calls = time.time(), 0
        s.sendall(post("/filter", body))
        try:
            while time.time() - t0 < 9:
                data = b""
                while b"\r\n\r\n" not in data:
                    b = s.recv(65536)
                    if not b:
                        raise OSError("closed")
                    data += b
                head, rest = data.split(b"\r\n\r\n", 1)
                n = int(re.search(rb"(?i)content-length:\s*(\d+)",
                                  head).group(1))
                sent = False
                while len(rest) < n:
                    if not sent and len(rest) >= n - 200000:
                        s.sendall(post("/filter", body))  # the next one
                        sent = True
                        time.sleep(0.03)  # a network's round trip or so
                    b = s.recv(min(65536, n - len(rest)))
                    if not b:
                        raise OSError("closed mid-answer")
                    rest += b
                if not sent:
                    s.sendall(post("/filter", body))
                calls += 1
        except OSError as e:
            fail("a keep-alive client sending its next request before the "
                 "end of each answer lost its "
                 "connection after %.1f s and %d calls: %s" % (
                     time.time() - t0, calls, e))
        s.close()
        print("keep-alive client: %d calls in 9 s on one connection" % calls)
        closed_at = slow_closed_at
        print("slow reader: %d B read, connection gone after %s s" % (
            got, "%.1f" % closed_at if closed_at else "never (15 s)"))
        if closed_at is None or closed_at > 4.0 + 1.5:
            fail("a client reading 500 B/s kept its connection past the "
                 "4 s deadline")
        if not ext.alive():
            fail("extender died")
    finally:
        ext.stop()


# ---- slots --------------------------------------------------------------

def case_slots():
    tmp = tempfile.mkdtemp(prefix="hostile-tls-")

    def sh(*a):
        subprocess.run(a, check=True, capture_output=True, cwd=tmp)
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
       "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out",
       "ca.crt", "-days", "2", "-subj", "/CN=ca")
    for who, eku in (("srv", "serverAuth"), ("cli", "clientAuth")):
        sh("openssl", "req", "-newkey", "ec", "-pkeyopt",
           "ec_paramgen_curve:P-256", "-nodes", "-keyout", who + ".key",
           "-out", who + ".csr", "-subj", "/CN=" + who)
        with open(os.path.join(tmp, who + ".ext"), "w") as f:
            f.write("extendedKeyUsage=%s\nsubjectAltName=IP:127.0.0.1\n"
                    % eku)
        sh("openssl", "x509", "-req", "-in", who + ".csr", "-CA", "ca.crt",
           "-CAkey", "ca.key", "-CAcreateserial", "-out", who + ".crt",
           "-days", "2", "-extfile", who + ".ext")
    ext = Extender("--request-timeout-ms", "10000", "--max-conns", "128",
                   "--tls-cert", tmp + "/srv.crt", "--tls-key",
                   tmp + "/srv.key", "--tls-client-ca", tmp + "/ca.crt")
    stop = threading.Event()
    held = [0]

    def attacker(addr, n):
        """n slow connections from addr, reopened as they are closed:
        half of them open TLS and stall mid-handshake (a ClientHello
        never sent whole), half say nothing at all."""
        socks = []
        while not stop.is_set():
            socks = [s for s in socks if s.fileno() >= 0]
            alive = []
            for s in socks:
                try:
                    if s.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) \
                            == b"":
                        s.close()
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    s.close()
                    continue
                alive.append(s)
            socks = alive
            while len(socks) < n and not stop.is_set():
                try:
                    s = socket.socket()
                    s.bind((addr, 0))
                    s.settimeout(1)
                    s.connect(("127.0.0.1", ext.port))
                    if len(socks) % 2:
                        s.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03")
                    socks.append(s)
                except OSError:
                    s.close()
                    break
            held[0] = max(held[0], len(socks))
            stop.wait(0.05)
        for s in socks:
            s.close()
    threads = [threading.Thread(target=attacker,
                                args=("127.0.1.%d" % (i + 1), 15))
               for i in range(20)]
    try:
        for t in threads:
            t.start()
        time.sleep(3)  # the slots fill
        body = json.dumps({"Pod": POD, "NodeNames": []}).encode()
        lat, bad = [], []
        t_end = time.time() + 12
        while time.time() < t_end:
            t0 = time.time()
            r = subprocess.run(
                ["curl", "-sS", "--max-time", "3", "--cacert",
                 tmp + "/ca.crt", "--cert", tmp + "/cli.crt", "--key",
                 tmp + "/cli.key", "-o", "/dev/null", "-w", "%{http_code}",
                 "-H", "Content-Type: application/json", "--data-binary",
                 "@-", "https://127.0.0.1:%d/filter" % ext.port],
                input=body, capture_output=True)
            took = time.time() - t0
            if r.stdout != b"200":
                bad.append((r.stdout, r.stderr[:120], took))
            else:
                lat.append(took)
        lat.sort()
        print("good client (curl, client certificate) beside %d attacking "
              "connections: %d answered, %d not; median %.1f ms, max %.1f ms"
              % (20 * 15, len(lat),
                 len(bad), lat[len(lat) // 2] * 1000 if lat else -1,
                 lat[-1] * 1000 if lat else -1))
        if bad or len(lat) < 5:
            fail("the good client was not served: %r" % bad[:5])
        if not ext.alive():
            fail("extender died")
    finally:
        stop.set()
        for t in threads:
            t.join()
        ext.stop()


{"http": case_http, "memory": case_memory,
 "deadline": case_deadline, "slots": case_slots}[CASE]()
print("ok: " + CASE)
