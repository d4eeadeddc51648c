#!/usr/bin/python3
"""The weight cache on the DRA path (issue 15 sections 2 and 3,
docs/dra-node.md "Models") against a real control plane (CTest label e2e).

Usage: test_dra_models.py K8S_BIN GPUFRAC --pb DIR [--keep]

deploy/namespace.yaml, deploy/node-agent.yaml (the agent's ServiceAccount
gpufrac-node and its RBAC) and deploy/dra/ applied; kube-scheduler run with
deploy/dra's configuration (its extender ignorable, none runs); two Nodes:
drm1, where `gpufrac node --mode dra` runs as gpufrac-node with a weight
cache (one fake A100-80GB, shared), and drm2, whose slice (the same GPU, no
models) the test writes.  A fake kubelet here (python3-grpcio, messages
compiled from proto/dra/v1 into DIR) calls the agent's DRAPlugin.

  published  model-a, fetched into the cache before the agent starts, is on
             drm1's slice (attribute model_<16 hex>: "ready") and in its
             Node's gpufrac.io/inventory (no GPUs, the models); nothing is
             written again while nothing changes (resourceVersions stay).
  cel        a claim whose CEL selector asks for model-a ready is allocated
             by kube-scheduler on drm1, never drm2; one asking for model-b
             (nowhere yet) is not allocated.
  prepare    NodePrepareResources of that claim: the agent finds the pod in
             the claim's status.reservedFor (written by kube-scheduler), reads
             its gpufrac.io/model and mounts the pod's view (the model under
             model-a/, then .ready; made by the agent's model loader since
             it saw the pod bound) read-only at /gpufrac/models in the
             claim's CDI spec; the model is pinned for the claim and the pod.
  fetch      a pod on drm1 naming model-b and a file:// source: prepared, the
             agent fetches model-b (held for the pod's namespace alone), and
             within seconds the slice lists it ready under that namespace's
             key (never the shared one) and the Node lists it; kube-scheduler then allocates the claim waiting
             for model-b on drm1.
  pruned     the agent stops, model-a's pod and claim are deleted (kubelet
             never unprepares it); after the agent's restart the claim's pin
             is gone, model-b's pins (pb's claim, pod pc) stay, and the slices (same
             GPUs, same models) keep their generation.
Exit 0 only when every step passed; a missing tool is a failure.
"""

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import DEPLOY, ApiError, Cluster, Failure, log, wait_for  # noqa: E402

import grpc  # noqa: E402

DRIVER = "gpu.gpufrac.io"
NODE, OTHER = "drm1", "drm2"
NS = "e2e-drm"
RES = "/apis/resource.k8s.io/v1"
SLICES = RES + "/resourceslices"
CLAIMS = RES + "/namespaces/%s/resourceclaims" % NS
PODS = "/api/v1/namespaces/%s/pods" % NS
INVENTORY = "gpufrac.io/inventory"
DRA_SVC = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
GATES = {"DRAConsumableCapacity": True, "DRADeviceTaints": True}
GPUS = "1xA100-80GB"

dra = None  # the generated message module


def fail(msg):
    raise Failure(msg)


def eq(got, want, what):
    if got != want:
        fail("%s: got %r, want %r" % (what, got, want))


def load_pb(root, rel, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, rel))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def call(sock, method, req, resp_cls, timeout=60):
    with grpc.insecure_channel("unix://" + sock) as ch:
        f = ch.unary_unary(method, request_serializer=type(req).SerializeToString,
                           response_deserializer=resp_cls.FromString)
        return f(req, timeout=timeout)


def make_model(gpufrac, d, tag):
    """A model source directory (two files and gpufrac.manifest); returns
    its digest, sha256:<hex>."""
    os.makedirs(os.path.join(d, "sub"))
    for i, n in enumerate(("a.bin", "sub/b.bin")):
        with open(os.path.join(d, n), "wb") as f:
            f.write((tag * 1000 + str(i)).encode() * 100)
    r = subprocess.run([gpufrac, "cache", "manifest", d], capture_output=True,
                       text=True, check=True)
    with open(os.path.join(d, "gpufrac.manifest"), "w") as f:
        f.write(r.stdout)
    return r.stderr.strip()


def attr(digest, ns=None):
    """The slice attribute naming a model: model_<the digest's 16 hex>, or
    for a model held for namespace ns alone, model_<the first 16 hex of
    SHA-256("<digest> <ns>")> (docs/dra.md, "Models")."""
    if ns:
        return "model_" + hashlib.sha256(("%s %s" % (digest, ns)).encode()).hexdigest()[:16]
    return "model_" + digest[len("sha256:"):][:16]


def cel_ready(digest, ns=None):
    return ('device.attributes["%s"].?%s.orValue("") == "ready"' %
            (DRIVER, attr(digest, ns)))


class Test:
    def __init__(self, c):
        self.c = c
        self.api = c.admin
        self.work = c.path("drm")
        os.makedirs(self.work)
        self.cache = os.path.join(self.work, "models")
        self.src = os.path.join(self.work, "src")
        self.n = 0

    # ---- setup ------------------------------------------------------------
    def setup(self):
        c = self.c
        for f in ("namespace.yaml", "node-agent.yaml"):
            c.kubectl("apply", "--server-side", "--field-manager=e2e", "-f",
                      os.path.join(DEPLOY, f))
        dd = os.path.join(DEPLOY, "dra")
        for f in ("deviceclasses.yaml", "node-rbac.yaml"):
            c.kubectl("apply", "--server-side", "--field-manager=e2e", "-f",
                      os.path.join(dd, f))
        c.namespace(NS)
        for n in (NODE, OTHER):
            c.add_node(n)
            c.node_status(n, {"cpu": "32", "memory": "256Gi", "pods": "110"})
        # drm2: the same GPU, published by the test, no models.
        out = subprocess.run([c.gpufrac, "node", "--mode", "dra", "--once",
                              "--print", "slices", "--fake-gpus", GPUS,
                              "--node-name", OTHER], capture_output=True,
                             text=True, timeout=60, check=True)
        s = json.loads(out.stdout)[0]
        u = s["spec"]["devices"][0]["attributes"]["uuid"]["string"]
        s["spec"]["devices"][0]["attributes"]["uuid"]["string"] = u[:-1] + "9"
        self.api.create(SLICES, s)
        self.ga = make_model(c.gpufrac, os.path.join(self.src, "a"), "a")
        self.gb = make_model(c.gpufrac, os.path.join(self.src, "b"), "b")
        r = subprocess.run([c.gpufrac, "cache", "--dir", self.cache, "fetch",
                            "model-a@" + self.ga, "--source",
                            "file://" + os.path.join(self.src, "a")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            fail("gpufrac cache fetch model-a: %s" % r.stderr)
        self.conf = os.path.join(self.work, "node.conf")
        with open(self.conf, "w") as f:
            f.write("state_dir = %s/state\ncdi_dir = %s/cdi\n"
                    "shim_lib = /usr/lib/gpufrac/libgpufrac-cuda.so\n"
                    "preload = /usr/lib/gpufrac/ld.so.preload\n"
                    "dra_registry_dir = %s/plugins_registry\n"
                    "dra_plugin_dir = %s/plugins/%s\n"
                    "model_cache_dir = %s\nmodel_cache_budget = 1Gi\n"
                    "model_prefetch_namespace = gpufrac-system\n"
                    "model_pod_sources = file://%s/\n" %
                    (self.work, self.work, self.work, self.work, DRIVER,
                     self.cache, self.src))
        self.kc = c.sa_kubeconfig("agent", c.token("gpufrac-node"))
        self.sock = os.path.join(self.work, "plugins", DRIVER, "dra.sock")
        self.start_agent()
        with open(os.path.join(DEPLOY, "dra", "kube-scheduler-config.yaml")) as f:
            c.start_scheduler(config=f.read())

    def start_agent(self):
        self.n += 1
        self.agent = self.c.spawn("agent-%d" % self.n, [
            self.c.gpufrac, "node", "--mode", "dra", "--fake-gpus", GPUS,
            "--node-name", NODE, "--kubeconfig", self.kc, "--config", self.conf,
            "--listen", "127.0.0.1:0", "--interval", "1"])
        wait_for("the agent's DRA socket", lambda: self.alive() and
                 os.path.exists(self.sock) and "DRA driver" in self.log_text(), 30)

    def alive(self):
        if not self.agent.alive():
            fail("the agent exited: %s" % self.agent.tail())
        return True

    def writes(self):
        t = self.log_text()
        return (t.count("ResourceSlices published"),
                t.count("models published on the Node"))

    def log_text(self):
        with open(self.c.path("agent-%d.log" % self.n)) as f:
            return f.read()

    # ---- reading ----------------------------------------------------------
    def slice(self, node=NODE):
        s = self.api.items(SLICES, fieldSelector="spec.nodeName=" + node)
        return s[0] if len(s) == 1 else None

    def device_attrs(self):
        s = self.slice()
        return s["spec"]["devices"][0]["attributes"] if s else {}

    def node_models(self):
        a = self.api.get("/api/v1/nodes/" + NODE)["metadata"].get(
            "annotations", {}).get(INVENTORY)
        return json.loads(a) if a else None

    def pins(self):
        with open(os.path.join(self.cache, "state.json")) as f:
            return {(p["digest"], p["holder"]) for p in json.load(f).get("pins", [])}

    def claim(self, name):
        return self.api.get("%s/%s" % (CLAIMS, name))

    def make_pod(self, name, model, selectors=(), source=None, node=None):
        """Claim name (an 8Gi, 20-core share of class gpu.gpufrac.io with
        CEL `selectors`) and pod name using it, annotated with `model`."""
        ex = {"deviceClassName": DRIVER,
              "capacity": {"requests": {"memory": "8Gi", "cores": "20"}}}
        if selectors:
            ex["selectors"] = [{"cel": {"expression": s}} for s in selectors]
        self.api.create(CLAIMS, {"metadata": {"name": name}, "spec": {"devices": {
            "requests": [{"name": "gpu", "exactly": ex}]}}})
        ann = {"gpufrac.io/model": model}
        if source:
            ann["gpufrac.io/model-source"] = source
        spec = {"resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                "resources": {"claims": [{"name": "gpu"}]}}]}
        if node:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        self.api.create(PODS, {"metadata": {"name": name, "annotations": ann},
                               "spec": spec})

    def wait_allocated(self, name, timeout=60):
        out = {}

        def ok():
            p = self.api.get("%s/%s" % (PODS, name))
            cl = self.claim(name)
            out["pod"], out["claim"] = p, cl
            return p["spec"].get("nodeName") and \
                cl.get("status", {}).get("allocation")
        wait_for("pod %s bound and its claim allocated" % name, ok, timeout, 0.5)
        return out["pod"], out["claim"]

    def prepare(self, cl):
        q = dra.NodePrepareResourcesRequest(claims=[dra.Claim(
            namespace=NS, name=cl["metadata"]["name"], uid=cl["metadata"]["uid"])])
        r = call(self.sock, DRA_SVC + "NodePrepareResources", q,
                 dra.NodePrepareResourcesResponse).claims[cl["metadata"]["uid"]]
        eq(r.error, "", "prepare of %s" % cl["metadata"]["name"])
        return r

    def model_mount(self, uid, name):
        with open(os.path.join(self.work, "cdi", "gpufrac.io-%s_claim.json" % uid)) as f:
            spec = json.load(f)
        edits = spec["devices"][0]["containerEdits"]
        mounts = {m["containerPath"]: m for m in edits.get("mounts", [])}
        # The pod's view (its model loader's directory) at /gpufrac/models,
        # the model under <name>/ (docs/dra-node.md, "Models").
        m = mounts.get("/gpufrac/models")
        if not m:
            fail("no model mount in the CDI spec of %s: %s" % (uid, list(mounts)))
        if "GPUFRAC_MODEL_DIR=/gpufrac/models/" + name not in edits.get("env", []):
            fail("the CDI spec of %s: env %s" % (uid, edits.get("env")))
        return m

    # ---- steps ------------------------------------------------------------
    def s_published(self):
        a = attr(self.ga)
        wait_for("%s ready on %s's slice" % (a, NODE),
                 lambda: self.alive() and
                 self.device_attrs().get(a) == {"string": "ready"}, 30)
        inv = {}

        def listed():
            inv["doc"] = self.node_models()
            return inv["doc"] and any(m["digest"] == self.ga and m["state"] == "ready"
                                      for m in inv["doc"].get("models", []))
        wait_for("model-a in %s's inventory" % NODE, listed, 30)
        doc = inv["doc"]
        eq((doc["version"], doc["gpus"]), (1, []), "the inventory of a DRA node")
        eq([(m["name"], m["digest"]) for m in doc["models"]],
           [("model-a", self.ga)], "the models on the Node")
        if attr(self.ga) in self.slice(OTHER)["spec"]["devices"][0]["attributes"]:
            fail("drm2's slice names model-a")
        # Nothing changes: nothing is written (the slice's resourceVersion;
        # the Node's other writers, controllers, make its own useless here,
        # so the agent's log lines about its writes are counted).
        s0 = self.slice()
        w0 = self.writes()
        time.sleep(4)  # four publish intervals
        s1 = self.slice()
        eq((s1["metadata"]["resourceVersion"], s1["spec"]["pool"]["generation"],
            self.writes()),
           (s0["metadata"]["resourceVersion"], s0["spec"]["pool"]["generation"], w0),
           "the slice and the agent's writes while nothing changes")
        log("published: %s on the slice (generation %d), %s on the Node" %
            (a, s1["spec"]["pool"]["generation"], [m["name"] for m in doc["models"]]))

    def s_cel(self):
        self.make_pod("pa", "model-a@" + self.ga, [cel_ready(self.ga)])
        # model-b will be fetched by a pod of NS from its own source: held
        # for NS alone, published under NS's key, which pb's selector names.
        self.make_pod("pb", "model-b@" + self.gb, [cel_ready(self.gb, NS)])
        p, cl = self.wait_allocated("pa")
        eq(p["spec"]["nodeName"], NODE, "the node of the pod asking for model-a")
        res = cl["status"]["allocation"]["devices"]["results"]
        eq([(r["pool"], r["device"]) for r in res], [(NODE, "gpu-0")],
           "model-a's claim's device")
        eq([(r["resource"], r["name"], r["uid"]) for r in cl["status"]["reservedFor"]],
           [("pods", "pa", p["metadata"]["uid"])], "reservedFor")
        self.pa, self.ca = p, cl
        time.sleep(3)
        if self.claim("pb").get("status", {}).get("allocation"):
            fail("the claim asking for model-b (on no node) was allocated")
        log("cel: pa on %s; pb waits for model-b" % NODE)

    def s_prepare(self):
        cl = self.ca
        self.prepare(cl)
        uid = cl["metadata"]["uid"]
        m = self.model_mount(uid, "model-a")
        pu = self.pa["metadata"]["uid"]
        eq(m["hostPath"], os.path.join(self.cache, "pods", pu),
           "model-a's host path (pod pa's view)")
        if "ro" not in m["options"]:
            fail("model-a is mounted writable: %s" % m)
        if not os.path.isfile(os.path.join(m["hostPath"], "model-a", "sub", "b.bin")) \
                or not os.path.isfile(os.path.join(m["hostPath"], ".ready")):
            fail("model-a's files are not where the mount points")
        eq((self.ga[7:], uid) in self.pins(), True, "model-a pinned for the claim")
        eq((self.ga[7:], pu) in self.pins(), True, "model-a pinned for the pod")
        log("prepare: model-a mounted at /gpufrac/models/model-a, pinned for %s" % uid)

    def s_fetch(self):
        self.make_pod("pc", "model-b@" + self.gb,
                      source="file://" + os.path.join(self.src, "b"), node=NODE)
        p, cl = self.wait_allocated("pc")
        t0 = time.monotonic()
        self.prepare(cl)
        view = self.model_mount(cl["metadata"]["uid"], "model-b")["hostPath"]
        wait_for("model-b in pod pc's view", lambda: os.path.isfile(
            os.path.join(view, ".ready")), 10)
        self.pc = p
        b = attr(self.gb, NS)
        wait_for("%s ready on the slice" % b,
                 lambda: self.device_attrs().get(b) == {"string": "ready"}, 10)
        if attr(self.gb) in self.device_attrs():
            fail("model-b, held for %s alone, is on the slice under the shared "
                 "key %s" % (NS, attr(self.gb)))
        wait_for("model-b on the Node", lambda: any(
            m["digest"] == self.gb and m["state"] == "ready"
            for m in (self.node_models() or {}).get("models", [])), 10)
        dt = time.monotonic() - t0
        # The claim that waited for model-b: kube-scheduler sees the slice.
        pb, cb = self.wait_allocated("pb", 120)
        eq(pb["spec"]["nodeName"], NODE, "the node of the pod waiting for model-b")
        self.prepare(cb)
        self.cb, self.cc = cb, cl
        log("fetch: model-b fetched and published %.1f s after its prepare; pb "
            "allocated on %s" % (dt, NODE))

    def s_pruned(self):
        gen = self.slice()["spec"]["pool"]["generation"]
        self.c.stop_gpufrac(self.agent)
        # kubelet never unprepares: the pod and its claim go while the agent
        # is down (the claim's finalizer is what kube-scheduler set).
        name = self.ca["metadata"]["name"]
        self.api.delete("%s/pa" % PODS, gracePeriodSeconds="0")
        self.api.merge_patch("%s/%s" % (CLAIMS, name),
                             {"metadata": {"finalizers": None}})
        self.api.delete("%s/%s" % (CLAIMS, name))

        def gone():
            try:
                self.claim(name)
                return False
            except ApiError as e:
                return e.code == 404
        wait_for("claim %s gone" % name, gone, 30)
        ua = self.ca["metadata"]["uid"]
        eq((self.ga[7:], ua) in self.pins(), True, "the pin before the restart")
        self.start_agent()
        wait_for("the pin of the deleted claim dropped",
                 lambda: self.alive() and (self.ga[7:], ua) not in self.pins(), 30)
        left = self.pins()
        eq((self.gb[7:], self.cb["metadata"]["uid"]) in left, True,
           "the pin of %s (its claim is there)" % self.cb["metadata"]["name"])
        eq((self.gb[7:], self.pc["metadata"]["uid"]) in left, True,
           "the pin of pod pc (it is there)")
        if "pins of claims gone or not prepared dropped" not in self.log_text():
            fail("the agent did not say it dropped the pin")
        s = self.slice()
        eq((s["spec"]["pool"]["generation"], self.device_attrs().get(attr(self.gb, NS))),
           (gen, {"string": "ready"}),
           "the pool's generation and model-b across the restart (same models)")
        log("pruned: %s's pin dropped at the restart; %d pins left" % (ua, len(left)))


STEPS = ["published", "cel", "prepare", "fetch", "pruned"]


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("k8s_bin")
    ap.add_argument("gpufrac")
    ap.add_argument("--pb", required=True)
    ap.add_argument("--keep", action="store_true")
    global dra
    args = ap.parse_args()
    dra = load_pb(args.pb, "dra/v1/api_pb2.py", "dra_v1_pb2")
    c = None
    failed = []
    try:
        c = Cluster(args.k8s_bin, args.gpufrac, args.keep)
        c.start(scheduler=False, feature_gates=GATES)
        t = Test(c)
        t.setup()
        for s in STEPS:
            log("== %s" % s)
            try:
                getattr(t, "s_" + s)()
            except (Failure, ApiError, grpc.RpcError) as e:
                traceback.print_exc()
                failed.append("%s: %s" % (s, e))
                break  # each step builds on the one before
    except Exception as e:
        traceback.print_exc()
        failed.append("setup: %s" % e)
        if c:
            for p in c.extra:
                log("%s log ends:\n%s" % (p.name, p.tail(20)))
    finally:
        if c:
            if failed:
                for p in c.extra:
                    log("%s log ends:\n%s" % (p.name, p.tail(20)))
            c.stop()
            failed += c.bad_exits
    for f in failed:
        log("FAILED %s" % f)
    log("%d of %d steps failed" % (len(failed), len(STEPS)) if failed else
        "all %d steps passed" % len(STEPS))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
