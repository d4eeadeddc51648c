#!/usr/bin/env python3
"""The fetch's retries under a source that drops every connection after
DROP bytes (issue 28 item 3; docs/benchmarks.md): `gpufrac cache fetch` of
one SIZE-byte file from tests/node/test_modelcache_http.py's loopback
server; prints the result, the requests made and bytes fetched / bytes
needed.

Usage: bench/modelcache_drops.py GPUFRAC [SIZE_MIB] [DROP_MIB]
       (defaults 96 and 6)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import http.server

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "node"))
gpufrac = sys.argv[1]
size = int(sys.argv[2]) << 20 if len(sys.argv) > 2 else 96 << 20
drop = int(sys.argv[3]) << 20 if len(sys.argv) > 3 else 6 << 20
sys.argv = [sys.argv[0], gpufrac]
import test_modelcache_http as t  # noqa: E402

work = tempfile.mkdtemp(prefix="gf_mc_drops.")
try:
    src = os.path.join(work, "src")
    os.makedirs(src)
    t.Handler.root = src
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), t.Handler)
    srv.daemon_threads = True
    srv.handle_error = lambda *a: None
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % srv.server_address[1]
    hexd = t.make_model(src, {"w.bin": os.urandom(size)})
    t.B.reset()
    t.B.drop_every["w.bin"] = drop
    r = subprocess.run([gpufrac, "cache", "--dir", os.path.join(work, "c"),
                        "fetch", "m@sha256:" + hexd, "--source", url],
                       capture_output=True, text=True, timeout=600)
    reqs = len([p for p, _ in t.B.requests if p == "w.bin"])
    sent = t.B.sent.get("w.bin", 0)
    on_disk = 0
    for root, _, fs in os.walk(os.path.join(work, "c")):
        for f in fs:
            if f.startswith("w.bin"):
                on_disk = max(on_disk, os.path.getsize(os.path.join(root, f)))
    print("%s: %s; %d requests; bytes fetched / bytes needed = %d / %d (%.2f); "
          "%d bytes of the file on disk" % (
              gpufrac, "fetched" if r.returncode == 0 else "FAILED (exit %d)" %
              r.returncode, reqs, sent, size, sent / size, on_disk))
    srv.shutdown()
finally:
    shutil.rmtree(work, ignore_errors=True)
