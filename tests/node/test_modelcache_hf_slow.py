#!/usr/bin/env python3
"""A slow Hugging Face hub against the fetch's deadline (a stranger's
finding): `gpufrac cache fetch --source hf://... --deadline S` resolves the
repository (revision, listing pages, small files) before the files'
fetch; a hub that trickles its listing pages must not hold the resolution
past S (it took 45 s with --deadline 5).  The hub here is loopback HTTPS
with a CA made for the test; each listing page trickles whitespace for
several seconds before its JSON (never slow enough for the stall limit).
Also a hub whose Link rel="next" is a relative reference (RFC 8288
resolves it against the page's URL): it was refused as "not on the hub's
host".
usage: test_modelcache_hf_slow.py GPUFRAC"""
import hashlib
import http.server
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time

SHA = "89abcdef0123456789abcdef0123456789abcdef"
FILES = {"a.json": b'{"a":1}\n', "b.json": b'{"b":2}\n', "c.json": b'{"c":3}\n'}
TRICKLE_S = 6  # per listing page: three pages take 18 s
MODE = {"trickle": TRICKLE_S, "relative": False}


def blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Hub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, body, headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path, _, query = self.path.partition("?")
        if path.endswith("/revision/main"):
            return self.reply(200, json.dumps({"sha": SHA}).encode())
        if "/tree/" in path:
            names = sorted(FILES)
            at = int(query.rsplit("cursor=", 1)[1]) if "cursor=" in query else 0
            item = {"type": "file", "path": names[at], "size": len(FILES[names[at]]),
                    "oid": blob_id(FILES[names[at]])}
            body = json.dumps([item]).encode()
            self.send_response(200)
            if at + 1 < len(names):
                host, port = self.server.server_address
                base = "" if MODE["relative"] else "https://%s:%d" % (host, port)
                self.send_header("Link", '<%s%s?recursive=true&cursor=%d>; '
                                 'rel="next"' % (base, path, at + 1))
            self.send_header("Content-Length", str(MODE["trickle"] * 4 + len(body)))
            self.end_headers()
            try:
                for _ in range(MODE["trickle"]):
                    self.wfile.write(b"    ")
                    self.wfile.flush()
                    time.sleep(1)
                self.wfile.write(body)
            except OSError:
                pass
            return None
        if "/resolve/" in path:
            name = path.rsplit("/", 1)[1]
            if name in FILES:
                return self.reply(200, FILES[name])
        return self.reply(404, b"Entry not found")


def main():
    gpufrac = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        ca, key = os.path.join(tmp, "ca.pem"), os.path.join(tmp, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-keyout", key, "-out", ca, "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
        srv.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(ca, key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        endpoint = "https://127.0.0.1:%d" % srv.server_address[1]
        t0 = time.monotonic()
        p = subprocess.run([gpufrac, "cache", "--dir", os.path.join(tmp, "c"), "fetch", "m",
                            "--source", "hf://org/slow", "--hf-endpoint", endpoint,
                            "--ca-file", ca, "--deadline", "3"],
                           capture_output=True, text=True, timeout=120)
        took = time.monotonic() - t0
        print(p.stderr, end="")
        MODE.update(trickle=0, relative=True)
        r = subprocess.run([gpufrac, "cache", "--dir", os.path.join(tmp, "c"), "fetch", "m",
                            "--source", "hf://org/rel", "--hf-endpoint", endpoint,
                            "--ca-file", ca], capture_output=True, text=True, timeout=120)
        srv.shutdown()
        print(r.stderr, end="")
        ok = True
        if r.returncode != 0 or "3 files" not in r.stderr:
            print("FAIL: a relative Link rel=\"next\" was not followed")
            ok = False
        if p.returncode == 0:
            print("FAIL: the fetch succeeded (in %.1f s) past its --deadline 3" % took)
            ok = False
        elif took > 10:
            print("FAIL: the fetch failed only after %.1f s, not by its --deadline 3" % took)
            ok = False
        elif "deadline" not in p.stderr:
            print("FAIL: the error does not name the deadline")
            ok = False
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
