#!/usr/bin/env python3
"""Hugging Face repositories as weight-cache sources (issue 28 item 8;
src/modelcache/modelcache_hf.c), driven through `gpufrac cache fetch
NAME --source hf://ORG/NAME[@REV]` against two loopback HTTPS servers
written here: a hub on 127.0.0.1 that answers the hub API's revision,
tree (paginated with Link rel="next") and resolve calls for small
generated repositories (config and tokenizer files, a 2-shard safetensors
set and its index), and a CDN on 127.0.0.2 that the hub's resolve
redirects LFS files to, as the real hub does.  A private repository needs
the token; the token must reach the hub only, never the CDN.  Hostile
variants of the hub's answers must fail with a clear error and publish
nothing.

Usage: test_modelcache_hf.py GPUFRAC
       test_modelcache_hf.py --serve DIR   (the hub and CDN alone, for the
           C tests: test_modelcache_sec test_hf_single_flight; see serve_only)
"""
import hashlib
import http.server
import json
import os
import shutil
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

GPUFRAC = sys.argv[1]
TOKEN = "hf_loopbackTestToken123"
PAGE = 3  # listing items per page: the 7-file repository takes 3 pages


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def git_oid(b):
    return hashlib.sha1(b"blob %d\0" % len(b) + b).hexdigest()


def safetensors(name, n):
    """A small but well-formed safetensors file: one F32 tensor of n."""
    data = struct.pack("<%df" % n, *[float(i % 7) for i in range(n)])
    hdr = json.dumps({name: {"dtype": "F32", "shape": [n],
                             "data_offsets": [0, len(data)]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    return struct.pack("<Q", len(hdr)) + hdr + data


def repo_files(flavour):
    s1 = safetensors("model.layers.0.weight", 60000)
    s2 = safetensors("model.layers.1.weight", 40000)
    index = json.dumps({
        "metadata": {"total_size": len(s1) + len(s2)},
        "weight_map": {"model.layers.0.weight": "model-00001-of-00002.safetensors",
                       "model.layers.1.weight": "model-00002-of-00002.safetensors"},
    }, indent=2).encode()
    return {
        "config.json": json.dumps({"model_type": "llama", "flavour": flavour}).encode(),
        "generation_config.json": b'{"do_sample": false}\n',
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"vocab": {
            "a%d" % i: i for i in range(500)}}}).encode(),
        "tokenizer_config.json": b'{"model_max_length": 4096}\n',
        "model-00001-of-00002.safetensors": s1,
        "model-00002-of-00002.safetensors": s2,
        "model.safetensors.index.json": index,
    }


LFS = lambda path: path.endswith(".safetensors")  # noqa: E731


def manifest_digest(files):
    text = "".join("%s\t%d\t%s\n" % (p, len(files[p]), sha256(files[p]))
                   for p in sorted(files))
    return sha256(text.encode())


def tree_items(files):
    items = [{"type": "directory", "oid": "0" * 40, "size": 0, "path": "unused"}]
    for p in sorted(files):
        b = files[p]
        it = {"type": "file", "oid": git_oid(b), "size": len(b), "path": p}
        if LFS(p):
            it["lfs"] = {"oid": sha256(b), "size": len(b), "pointerSize": 134}
        items.append(it)
    return items


class Repo:
    def __init__(self, files, private=False, commit=None):
        self.files = files
        self.private = private
        self.commit = commit or hashlib.sha1(repr(sorted(files)).encode()).hexdigest()
        self.items = tree_items(files)
        self.revs = {"main": self.commit}
        self.info = None  # replaces the revision answer (bytes)
        self.pages = None  # replaces the listing (list of (bytes, next url))
        self.serve = {}  # path -> bytes served instead (small files)
        self.cdn = {}  # sha256 -> bytes the CDN serves instead


REPOS = {}
LOG = []  # (host, path, Authorization header)
LOCK = threading.Lock()
CDN_PORT = [0]
HUB_PORT = [0]
SERVE = {"log": None, "delay": 0.0}  # --serve: a request log file, a delay


class Hub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms per answer (delayed ACK)

    def log_message(self, *a):
        pass

    def reply(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with LOCK:
            LOG.append(("hub", self.path, self.headers.get("Authorization")))
            if SERVE["log"]:
                with open(SERVE["log"], "a") as f:
                    f.write("hub %s\n" % self.path)
        if SERVE["delay"] and "/api/" in self.path:
            time.sleep(SERVE["delay"])  # every pod asks while the first waits
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query)
        parts = [urllib.parse.unquote(x) for x in u.path.split("/")[1:]]
        if parts[:2] == ["api", "models"]:
            repo = REPOS.get("/".join(parts[2:4]))
            rest = parts[4:]
        else:
            repo = REPOS.get("/".join(parts[0:2]))
            rest = parts[2:]
        if repo is None:
            return self.reply(404, b'{"error":"Repository not found"}')
        if repo.private and self.headers.get("Authorization") != "Bearer " + TOKEN:
            return self.reply(401, b'{"error":"Invalid credentials"}')
        if parts[:2] == ["api", "models"] and rest[:1] == ["revision"]:
            if repo.info is not None:
                if isinstance(repo.info, tuple):  # a redirect elsewhere
                    return self.reply(302, b"", [("Location", repo.info[1])])
                return self.reply(200, repo.info)
            commit = repo.revs.get("/".join(rest[1:]))
            if not commit:
                return self.reply(404, b'{"error":"Revision not found"}')
            body = {"id": "/".join(parts[2:4]), "sha": commit,
                    "siblings": [{"rfilename": p} for p in sorted(repo.files)]}
            return self.reply(200, json.dumps(body).encode())
        if parts[:2] == ["api", "models"] and rest[:1] == ["tree"]:
            if rest[1] != repo.commit or q.get("recursive") != ["true"]:
                return self.reply(404, b'{"error":"wrong tree call"}')
            page = int(q.get("cursor", ["0"])[0])
            if repo.pages is not None:
                body, nxt = repo.pages[min(page, len(repo.pages) - 1)]
                hdr = [("Link", '<%s>; rel="next"' % nxt)] if nxt else []
                return self.reply(200, body, hdr)
            items = repo.items[page * PAGE:(page + 1) * PAGE]
            hdr = []
            if (page + 1) * PAGE < len(repo.items):
                nxt = "https://127.0.0.1:%d%s?recursive=true&cursor=%d" % (
                    HUB_PORT[0], u.path, page + 1)
                hdr = [("Link", '<%s>; rel="next"' % nxt)]
            return self.reply(200, json.dumps(items).encode(), hdr)
        if rest[:1] == ["resolve"] and len(rest) >= 3:
            if rest[1] != repo.commit:
                return self.reply(404, b"wrong commit")
            path = "/".join(rest[2:])
            it = next((i for i in repo.items if i.get("path") == path
                       and i.get("type") == "file"), None)
            if it is None:
                return self.reply(404, b"Entry not found")
            if "lfs" in it:
                loc = "https://127.0.0.2:%d/cdn/%s?sig=x" % (
                    CDN_PORT[0], it["lfs"].get("oid", "none"))
                return self.reply(302, b"", [("Location", loc)])
            return self.reply(200, repo.serve.get(path, repo.files.get(path, b"")))
        return self.reply(404, b"no such call")


class Cdn(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms per answer (delayed ACK)

    def log_message(self, *a):
        pass

    def do_GET(self):
        with LOCK:
            LOG.append(("cdn", self.path, self.headers.get("Authorization")))
        u = urllib.parse.urlsplit(self.path)
        oid = u.path.rsplit("/", 1)[-1]
        data = None
        for r in REPOS.values():
            if oid in r.cdn:
                data = r.cdn[oid]
            for p, b in r.files.items():
                if data is None and sha256(b) == oid:
                    data = b
        if data is None:
            # the metadata endpoint, reached only if a redirect was followed
            body = b'{"sha": "' + b"f" * 40 + b'"}'
            if not u.path.startswith("/meta"):
                self.send_response(404)
                body = b"no such object"
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        start = 0
        rng = self.headers.get("Range")
        if rng:
            start = int(rng[6:].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self.wfile.write(data[start:])


def serve(handler, host, ctx):
    srv = http.server.ThreadingHTTPServer((host, 0), handler)
    srv.daemon_threads = True
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def make_ca(tmp):
    def run(*a):
        subprocess.run(a, check=True, cwd=tmp, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=gpufrac test CA", "-keyout", "ca.key", "-out", "ca.pem",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "srv.key", "-out", "srv.csr")
    with open(os.path.join(tmp, "ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,IP:127.0.0.2\n")
    run("openssl", "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "ext", "-out", "srv.pem")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(tmp, "srv.pem"), os.path.join(tmp, "srv.key"))
    return os.path.join(tmp, "ca.pem"), ctx


FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def published(cache):
    d = os.path.join(cache, "sha256")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def main():
    tmp = tempfile.mkdtemp(prefix="gf-hf-")
    try:
        ca, ctx = make_ca(tmp)
        hub = serve(Hub, "127.0.0.1", ctx)
        cdn = serve(Cdn, "127.0.0.2", ctx)
        HUB_PORT[0] = hub.server_address[1]
        CDN_PORT[0] = cdn.server_address[1]
        endpoint = "https://127.0.0.1:%d" % HUB_PORT[0]
        token_file = os.path.join(tmp, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")

        def fetch(cache, ref, source, *extra):
            r = subprocess.run(
                [GPUFRAC, "cache", "--dir", cache, "--budget", "1Gi", "fetch", ref,
                 "--source", source, "--hf-endpoint", endpoint, "--ca-file", ca,
                 "--retries", "1"] + list(extra),
                capture_output=True, text=True, timeout=120)
            return r.returncode, r.stdout, r.stderr

        tiny = repo_files("main")
        REPOS["acme/tiny"] = Repo(tiny)
        old = repo_files("v1")
        REPOS["acme/tiny"].revs["v1"] = "1" * 40
        want = manifest_digest(tiny)

        # 1. a public repository by name alone
        cache = os.path.join(tmp, "c1")
        del LOG[:]
        rc, out, err = fetch(cache, "tiny", "hf://acme/tiny")
        check(rc == 0, "public repo fetched (rc %d: %s)" % (rc, err.strip()[-300:]))
        check("tiny@sha256:%s" % want in err,
              "the digest printed is the manifest of the hub's files (%s)" % want[:12])
        check(published(cache) == [want], "published under its manifest digest")
        files_dir = os.path.join(cache, "sha256", want, "files")
        same = os.path.isdir(files_dir) and all(
            open(os.path.join(files_dir, p), "rb").read() == b for p, b in tiny.items())
        check(same and sorted(os.listdir(files_dir)) == sorted(tiny),
              "every file (config, tokenizer, 2 shards, index) as on the hub")
        check(out.strip() == files_dir, "stdout is the model's directory")
        pages = [p for h, p, a in LOG if h == "hub" and "/tree/" in p]
        check(len(pages) == 3, "the listing was read page by page (%d pages)" % len(pages))
        cdn_got = sorted(p.split("/cdn/")[1].split("?")[0] for h, p, a in LOG if h == "cdn")
        check(cdn_got == sorted(sha256(b) for p, b in tiny.items() if LFS(p)),
              "the LFS shards came from the CDN the hub redirected to")
        check(all(a is None for h, p, a in LOG), "no token configured: none sent")

        # 2. a pinned digest: the same, and a wrong one refused
        rc, out, err = fetch(os.path.join(tmp, "c2"), "tiny@sha256:" + want, "hf://acme/tiny")
        check(rc == 0, "pinned to its digest: fetched (%s)" % err.strip()[-200:])
        wrong = "0" * 64
        rc, out, err = fetch(os.path.join(tmp, "c3"), "tiny@sha256:" + wrong, "hf://acme/tiny")
        check(rc != 0 and "not the sha256:%s asked for" % wrong in err,
              "a digest the repository does not have: refused (%s)" % err.strip()[-200:])
        check(published(os.path.join(tmp, "c3")) == [], "... nothing published")

        # 3. a revision other than main (a tag at another commit)
        REPOS["acme/tiny-v1"] = Repo(old, commit="1" * 40)
        REPOS["acme/tiny-v1"].revs = {"v1": "1" * 40}
        rc, out, err = fetch(os.path.join(tmp, "c4"), "tiny", "hf://acme/tiny-v1@v1")
        check(rc == 0 and "tiny@sha256:%s" % manifest_digest(old) in err,
              "a revision: its commit's files (%s)" % err.strip()[-200:])

        # 4. a private repository: refused without the token, fetched with it,
        #    the token sent to the hub only (not to the CDN)
        REPOS["acme/secret"] = Repo(repo_files("secret"), private=True)
        rc, out, err = fetch(os.path.join(tmp, "c5"), "secret", "hf://acme/secret")
        check(rc != 0 and "HTTP status 401" in err and "model_hf_token_file" in err,
              "private without a token: 401 with a hint (%s)" % err.strip()[-200:])
        del LOG[:]
        rc, out, err = fetch(os.path.join(tmp, "c5"), "secret", "hf://acme/secret",
                             "--hf-token-file", token_file)
        check(rc == 0, "private with the token file: fetched (%s)" % err.strip()[-300:])
        hub_auth = [a for h, p, a in LOG if h == "hub"]
        cdn_auth = [a for h, p, a in LOG if h == "cdn"]
        check(hub_auth and all(a == "Bearer " + TOKEN for a in hub_auth),
              "every hub request carried the token (%d)" % len(hub_auth))
        check(cdn_auth and all(a is None for a in cdn_auth),
              "no CDN request carried it (%d requests, across the redirect)" % len(cdn_auth))
        check(TOKEN not in err and TOKEN not in out, "the token is never printed")
        bad_tok = os.path.join(tmp, "badtoken")
        with open(bad_tok, "w") as f:
            f.write("two words\n")
        rc, out, err = fetch(os.path.join(tmp, "c5b"), "secret", "hf://acme/secret",
                             "--hf-token-file", bad_tok)
        check(rc != 0 and "not one line of visible ASCII" in err and "two" not in err,
              "a malformed token file: refused without echoing it (%s)" % err.strip()[-200:])
        # the hub redirects its API call to another host: the token stays home
        REPOS["acme/bounce"] = Repo(repo_files("bounce"), private=True)
        REPOS["acme/bounce"].info = ("redirect", "https://127.0.0.2:%d/meta" % CDN_PORT[0])
        del LOG[:]
        rc, out, err = fetch(os.path.join(tmp, "c5c"), "b", "hf://acme/bounce",
                             "--hf-token-file", token_file)
        check([a for h, p, a in LOG if h == "cdn"] == [None],
              "an API redirect to another host is followed without the token")

        # 5. hostile hubs: a clear error, nothing published
        def hostile(name, mutate, expect):
            r = Repo(repo_files(name))
            mutate(r)
            REPOS["evil/" + name] = r
            cache = os.path.join(tmp, "e-" + name)
            t0 = time.time()
            rc, out, err = fetch(cache, name, "hf://evil/" + name)
            print("     %s: %.1f s" % (name, time.time() - t0))
            check(rc != 0 and expect in err,
                  "hostile %s: refused with '%s' (%s)" % (name, expect, err.strip()[-250:]))
            check(published(cache) == [], "hostile %s: nothing published" % name)

        def set_item(r, which, **kw):
            for it in r.items:
                if it.get("path") == which:
                    for k, v in kw.items():
                        if v is None:
                            it.pop(k, None)
                        else:
                            it[k] = v

        shard = "model-00001-of-00002.safetensors"
        hostile("dotdot", lambda r: set_item(r, "config.json", path="../../etc/config.json"),
                "'.' or '..' path component")
        hostile("abs", lambda r: set_item(r, "config.json", path="/etc/passwd"),
                "an absolute path")
        hostile("ctrl", lambda r: set_item(r, "config.json", path="con\nfig.json"),
                "a control byte")
        hostile("nolfshash", lambda r: set_item(r, shard, lfs={"size": r.items[1]["size"]}),
                "without a sha256")
        hostile("nooid", lambda r: set_item(r, "config.json", oid=None), "has no hash")
        hostile("bigsmall", lambda r: set_item(r, "tokenizer.json", size=50 << 20),
                "must be in LFS")
        hostile("negsize", lambda r: set_item(r, "config.json", size=-1),
                "\"size\" is not a byte count")
        hostile("lfssize", lambda r: set_item(r, shard, lfs={
            "oid": sha256(r.files[shard]), "size": 5, "pointerSize": 134}),
            "its LFS size is not its \"size\"")
        hostile("dup", lambda r: r.items.append(dict(r.items[2])), "appears twice")

        def lie_oid(r):
            good = r.files["config.json"]
            r.serve["config.json"] = b"x" * len(good)  # same size, other bytes
        hostile("badoid", lie_oid, "git blob id")

        def cdn_lies(r):
            r.cdn[sha256(r.files[shard])] = r.files[shard][:-4] + b"evil"
        hostile("cdnlies", cdn_lies, "the manifest says")

        def cdn_longer(r):
            r.cdn[sha256(r.files[shard])] = r.files[shard] + b"x" * 4096
        hostile("cdnlonger", cdn_longer, "sent more than the manifest")

        def huge(r):
            items = [{"type": "file", "oid": "a" * 40, "size": 1, "path": "f%06d" % i}
                     for i in range(65537)]
            r.pages = [(json.dumps(items).encode(), None)]
        hostile("huge", huge, "more than 65536 files")

        def offhost(r):
            r.pages = [(json.dumps(r.items[:2]).encode(),
                        "https://127.0.0.2:%d/api/next" % CDN_PORT[0])]
        hostile("offhost", offhost, "not on the hub's host")

        def loop(r):
            nxt = "https://127.0.0.1:%d/api/models/evil/loop/tree/%s?recursive=true&cursor=1" % (
                HUB_PORT[0], r.commit)
            r.pages = [(b"[]", nxt)]
        hostile("loop", loop, "more than 1000 pages")
        hostile("notjson", lambda r: setattr(r, "pages", [(b"<html>", None)]), "not JSON")
        hostile("notarray", lambda r: setattr(r, "pages", [(b'{"a":1}', None)]),
                "not an array")
        hostile("badsha", lambda r: setattr(r, "info", b'{"sha": "../x"}'),
                "no \"sha\" of 40 lowercase hex")
        hostile("bigapi", lambda r: setattr(r, "info", b'{"x": "' + b"a" * (17 << 20) + b'"}'),
                "larger than")
        hostile("empty", lambda r: setattr(r, "pages", [(b"[]", None)]), "no files")
        for bad in ("hf://acme", "hf://a/b/c", "hf://acme/../x", "hf://acme/tiny@../x",
                    "hf://acme/ti ny", "hf://-a/b"):
            rc, out, err = fetch(os.path.join(tmp, "bad"), "x", bad)
            check(rc != 0 and "want hf://ORG/NAME" in err, "source %r refused" % bad)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILS:
        print("%d checks failed" % len(FAILS))
        sys.exit(1)
    print("all passed")


def serve_only(d):
    """The hub and the CDN with one repository, acme/tiny, until killed:
    DIR/info gets "PORT COMMIT DIGEST CA_FILE" once they listen; each hub
    request is a line "hub PATH" in DIR/log; every API answer waits 0.5 s
    (so requests that come together overlap)."""
    ca, ctx = make_ca(d)
    hub = serve(Hub, "127.0.0.1", ctx)
    cdn = serve(Cdn, "127.0.0.2", ctx)
    HUB_PORT[0] = hub.server_address[1]
    CDN_PORT[0] = cdn.server_address[1]
    files = repo_files("main")
    REPOS["acme/tiny"] = Repo(files)
    # a revision may be the commit itself (what a pod's source pins)
    REPOS["acme/tiny"].revs[REPOS["acme/tiny"].commit] = REPOS["acme/tiny"].commit
    SERVE["log"] = os.path.join(d, "log")
    SERVE["delay"] = 0.5
    with open(os.path.join(d, "info.tmp"), "w") as f:
        f.write("%d %s %s %s\n" % (HUB_PORT[0], REPOS["acme/tiny"].commit,
                                   manifest_digest(files), ca))
    os.rename(os.path.join(d, "info.tmp"), os.path.join(d, "info"))
    while True:
        time.sleep(3600)


if len(sys.argv) > 2 and sys.argv[1] == "--serve":
    serve_only(sys.argv[2])
else:
    main()
