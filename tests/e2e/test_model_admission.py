#!/usr/bin/env python3
"""A model not cached yet never holds kubelet's admission (issue 28 item 1;
CTest label e2e).

Usage: test_model_admission.py K8S_BIN GPUFRAC [--keep]

The real kubelet with the fake CRI runtime, as in test_kubelet.py (root, a
mount namespace of its own).  The agent runs with a weight cache and pods
may name sources under a loopback HTTP server that sends a 1 GiB model at a
bounded rate (GF_E2E_MODEL_RATE bytes/s, default 48 MiB/s: about 21 s).

  1. Pod "model" asks for the uncached 1 GiB model (gpufrac.io/model and
     gpufrac.io/model-source) and declares the readiness gate
     gpufrac.io/model-ready; pods share-1..3 (no model) are created right
     after it.  kubelet admits pods one at a time and calls Allocate inside
     that step with no deadline: the three must reach Running within 8 s of
     their creation while the model is still being sent (with the download
     inside Allocate they wait for all of it).  "model" is Running too, not
     Ready, its container created with the pod's view mounted read-only at
     /gpufrac/models;
  2. once the model is fetched, the view holds the model's files (hard links
     of the cache's) and .ready, the pod's gpufrac.io/model-ready condition
     is True and the pod Ready, with a ModelReady event;
  3. pod "flaky" names a source that answers 503 to its first two manifest
     requests: ModelFetchFailed events (retried with backoff), then Ready.
The times to Running are logged (docs/benchmarks.md).
"""

import base64
import hashlib
import http.server
import os
import socketserver
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Failure, log, wait_for  # noqa: E402
from kubelet_node import (NODE, kubelet_main, node_obj, ready,  # noqa: E402
                          start_agent, wait_node_ready)
from test_k8s import E2E, NS, SLOTS, pod  # noqa: E402
from test_kubelet import NGPUS, SPEC, GuardExtender  # noqa: E402

GiB = 1 << 30
COND = "gpufrac.io/model-ready"
RATE = int(os.environ.get("GF_E2E_MODEL_RATE", str(48 << 20)))
START_LIMIT_S = 8.0


def fail(msg):
    raise Failure(msg)


class Source:
    """Serves root over HTTP on loopback at RATE bytes/s per response, with
    Range; /flaky/gpufrac.manifest answers 503 twice first."""

    def __init__(self, root):
        self.root = root
        self.flaky_left = 2
        self.lock = threading.Lock()
        src = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                rel = self.path.lstrip("/")
                if rel == "flaky/gpufrac.manifest":
                    with src.lock:
                        left = src.flaky_left
                        src.flaky_left = max(0, left - 1)
                    if left:
                        self.send_response(503)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                p = os.path.join(src.root, rel)
                if ".." in rel.split("/") or not os.path.isfile(p):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                size = os.path.getsize(p)
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[6:-1])
                    self.send_response(206)
                    self.send_header("Content-Range", "bytes %d-%d/%d" %
                                     (start, size - 1, size))
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(size - start))
                self.end_headers()
                t0 = time.monotonic()
                sent = 0
                with open(p, "rb") as f:
                    f.seek(start)
                    while True:
                        b = f.read(1 << 20)
                        if not b:
                            break
                        self.wfile.write(b)
                        sent += len(b)
                        ahead = sent / RATE - (time.monotonic() - t0)
                        if ahead > 0:
                            time.sleep(ahead)

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.srv = S(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def url(self, sub):
        return "http://127.0.0.1:%d/%s/" % (self.port, sub)


def make_model(d, files):
    """Writes files {path: size} (a repeating pattern) and the manifest;
    returns the digest."""
    lines = []
    for rel, size in sorted(files.items()):
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        h = hashlib.sha256()
        block = hashlib.sha256(rel.encode()).digest() * 32768  # 1 MiB
        with open(p, "wb") as f:
            left = size
            while left:
                b = block[:min(left, len(block))]
                f.write(b)
                h.update(b)
                left -= len(b)
        lines.append("%s\t%d\t%s\n" % (rel, size, h.hexdigest()))
    text = "".join(lines).encode()
    with open(os.path.join(d, "gpufrac.manifest"), "wb") as f:
        f.write(text)
    return "sha256:" + hashlib.sha256(text).hexdigest()


def model_pod(name, ref, source):
    p = pod(name, 1, "10Gi", 20)
    p["metadata"]["annotations"] = {"gpufrac.io/model": ref,
                                    "gpufrac.io/model-source": source}
    p["spec"]["readinessGates"] = [{"conditionType": COND}]
    return p


def cond(o, t):
    for c in o.get("status", {}).get("conditions", []):
        if c["type"] == t:
            return c
    return None


def run(c, kl):
    t = E2E(c)
    t.apply_deploy()
    c.namespace(NS)
    src_root = c.path("source")
    big = make_model(os.path.join(src_root, "big"), {"weights.bin": GiB})
    small = make_model(os.path.join(src_root, "flaky"),
                       {"config.json": 1000, "w/shard.bin": 3 << 20})
    source = Source(src_root)
    kl.start()
    wait_node_ready(c, NODE, kl.alive)
    d = c.path("node-" + NODE)
    for sub in ("state", "cdi", "models"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    cache = os.path.join(d, "models")
    cfg = os.path.join(d, "node.conf")
    with open(cfg, "w") as f:
        f.write("state_dir = %s/state\ncdi_dir = %s/cdi\nkubelet_dir = %s\n"
                "slots = %d\nmodel_cache_dir = %s\nmodel_cache_budget = 4Gi\n"
                "model_pod_sources = http://127.0.0.1:%d/\n"
                % (d, d, kl.plugins, SLOTS, cache, source.port))
    start_agent(c, t, NODE, SPEC, cfg)
    t.wait_inventory(NODE, NGPUS)
    want = str(NGPUS * SLOTS)
    wait_for("kubelet reporting gpufrac.io/gpu = %s" % want,
             lambda: kl.alive() and node_obj(c)["status"].get(
                 "allocatable", {}).get("gpufrac.io/gpu") == want, 60)
    kc = c.sa_kubeconfig("extender", c.token("gpufrac-scheduler"))
    ext = GuardExtender(c, "extender", c.ext_port, kc).start()
    ext.ready_leader()
    wait_for("the extender holding Node %s" % NODE,
             lambda: ext.metric("gpufrac_extender_nodes") == 1, 30)

    # 1. the uncached model's pod, then three others
    names = ["model", "share-1", "share-2", "share-3"]
    created = {}
    t0 = time.monotonic()
    t.create(model_pod("model", "big@" + big, source.url("big")))
    created["model"] = time.monotonic()
    for nm in names[1:]:
        t.create(pod(nm, 1, "10Gi", 20))
        created[nm] = time.monotonic()
    running = {}

    def path(nm):
        return "/api/v1/namespaces/%s/pods/%s" % (NS, nm)

    def poll():
        kl.alive()
        for nm in names:
            if nm in running:
                continue
            o = c.admin.get(path(nm))
            if o["status"].get("phase") == "Running":
                running[nm] = time.monotonic()
            elif o["status"].get("phase") == "Failed":
                fail("pod %s Failed: %s; events %s" % (
                    nm, o["status"].get("message"), t.events(nm)[-4:]))
        return len(running) == len(names)
    try:
        wait_for("the four pods Running", poll, 300, interval=0.1)
    finally:
        log("time to Running (s from creation): %s" % ", ".join(
            "%s %.1f" % (nm, running[nm] - created[nm]) if nm in running
            else "%s -" % nm for nm in names))
    fetched_at = None
    view = os.path.join(cache, "pods", c.admin.get(path("model"))["metadata"]["uid"])
    if os.path.exists(os.path.join(view, ".ready")):
        fetched_at = "before all four were Running"
    for nm in names[1:]:
        took = running[nm] - created[nm]
        if took > START_LIMIT_S:
            fail("pod %s took %.1f s to Running (limit %.0f s): the uncached "
                 "model of pod 'model' held kubelet's admission" %
                 (nm, took, START_LIMIT_S))
    if fetched_at:
        fail("the model was ready %s: the source is too fast for this test "
             "(GF_E2E_MODEL_RATE)" % fetched_at)
    o = c.admin.get(path("model"))
    if ready(o):
        fail("pod 'model' is Ready before its model is: %s" %
             o["status"].get("conditions"))
    mine = kl.created_for("model")
    if len(mine) != 1:
        fail("fakecri recorded %d containers for pod 'model'" % len(mine))
    ctr = mine[0]["config"]
    mounts = {m["containerPath"]: m for m in ctr.get("mounts", [])}
    m = mounts.get("/gpufrac/models")
    if not m or not m.get("readonly") or m["hostPath"] != view:
        fail("pod 'model': no read-only mount of its view %s at /gpufrac/models: "
             "%s" % (view, mounts.get("/gpufrac/models")))
    env = {e["key"]: base64.b64decode(e.get("value", "")).decode()
           for e in ctr.get("envs", [])}
    if env.get("GPUFRAC_MODEL_DIR") != "/gpufrac/models/big" or \
            env.get("GPUFRAC_MODEL_READY") != "/gpufrac/models/.ready":
        fail("pod 'model': model env %s" % {k: v for k, v in env.items()
                                            if k.startswith("GPUFRAC_MODEL")})
    log("the three other pods Running within %.1f s; 'model' Running, not Ready, "
        "its view mounted" % max(running[nm] - created[nm] for nm in names[1:]))

    # 2. the model arrives: view, condition, Ready, event
    o = wait_for("pod 'model' Ready once its model is fetched",
                 lambda: (lambda o: o if ready(o) else None)(
                     c.admin.get(path("model"))), 300)
    ready_s = time.monotonic() - t0
    if not os.path.exists(os.path.join(view, ".ready")):
        fail("pod 'model' Ready without %s/.ready" % view)
    st = os.stat(os.path.join(view, "big", "weights.bin"))
    if st.st_size != GiB or st.st_nlink < 2:
        fail("the view's weights.bin: %d bytes, %d links" % (st.st_size, st.st_nlink))
    cnd = cond(o, COND)
    if not cnd or cnd["status"] != "True":
        fail("pod 'model': condition %s = %s" % (COND, cnd))
    ev = t.events("model")
    if not any(e.startswith("ModelReady") for e in ev):
        fail("pod 'model': no ModelReady event: %s" % ev)
    log("pod 'model' Ready %.1f s after its creation (the model at %d bytes/s)" %
        (ready_s, RATE))

    # 3. a source that fails first: retried, reported, then ready
    t.create(model_pod("flaky", "small@" + small, source.url("flaky")))
    o = wait_for("pod 'flaky' Ready after its source's failures",
                 lambda: (lambda o: o if ready(o) else None)(
                     c.admin.get(path("flaky"))), 120)
    ev = t.events("flaky")
    failed = [e for e in ev if e.startswith("ModelFetchFailed")]
    if len(failed) < 2 or not any(e.startswith("ModelReady") for e in ev):
        fail("pod 'flaky': events %s (want two ModelFetchFailed, then ModelReady)"
             % ev)
    log("pod 'flaky': %s" % "; ".join(ev))

    # 4. four pods waiting for one uncached model, created together: their
    #    loads finish together and report at once (a tester's finding: the
    #    loader's threads shared one API client; the agent crashed in
    #    libcurl, and again on every restart while the pods were there)
    twin = make_model(os.path.join(src_root, "twin"), {"w.bin": 8 << 20})
    twins = ["twin-%d" % i for i in range(4)]
    for nm in twins:
        t.create(model_pod(nm, "twin@" + twin, source.url("twin")))
    agent = [p for p in c.extra if p.name == "agent-" + NODE][0]

    def twins_ready():
        if not agent.alive():
            fail("the node agent died while the twins' model loaded: %s" %
                 agent.tail(12))
        return all(ready(c.admin.get(path(nm))) for nm in twins)
    wait_for("the four twins Ready", twins_ready, 180)
    for nm in twins:
        if not any(e.startswith("ModelReady") for e in t.events(nm)):
            fail("pod %s: no ModelReady event: %s" % (nm, t.events(nm)))
    log("four pods of one model: all Ready, each its ModelReady event, the agent alive")
    c.check_alive()
    kl.alive()


def main():
    return kubelet_main(__doc__, "e2e model admission", run, tail=30)


if __name__ == "__main__":
    sys.exit(main())
