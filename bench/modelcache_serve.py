#!/usr/bin/env python3
"""bench/modelcache.sh's model source: serves DIR over loopback HTTP (Range
supported), all connections together throttled to RATE bytes/s by one
token bucket, standing in for object storage.  Prints the port, then serves
until killed.   modelcache_serve.py DIR RATE"""
import http.server
import os
import sys
import threading
import time
import urllib.parse

ROOT, RATE = sys.argv[1], float(sys.argv[2])
lock = threading.Lock()
state = {"t": time.monotonic(), "tokens": 0.0}
CHUNK = 1 << 20


def take(n):
    """Blocks until n bytes may go (burst: one chunk)."""
    while True:
        with lock:
            now = time.monotonic()
            state["tokens"] = min(CHUNK, state["tokens"] + (now - state["t"]) * RATE)
            state["t"] = now
            if state["tokens"] >= n:
                state["tokens"] -= n
                return
            wait = (n - state["tokens"]) / RATE
        time.sleep(wait)


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        rel = urllib.parse.unquote(self.path.lstrip("/"))
        full = os.path.realpath(os.path.join(ROOT, rel))
        if not full.startswith(os.path.realpath(ROOT) + "/") or not os.path.isfile(full):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        size = os.path.getsize(full)
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, size - 1, size))
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(size - start))
        self.end_headers()
        with open(full, "rb") as f:
            f.seek(start)
            while True:
                b = f.read(CHUNK)
                if not b:
                    break
                take(len(b))
                self.wfile.write(b)


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
print(srv.server_address[1], flush=True)
srv.serve_forever()
