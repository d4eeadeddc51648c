#!/usr/bin/env python3
"""A model not cached yet never holds the DRA path's NodePrepareResources
(issue 28 item 1 in DRA mode; CTest label e2e; docs/dra-node.md, "Models").

Usage: test_dra_kubelet_models.py K8S_BIN GPUFRAC [--keep]

The real kubelet v1.37.2 on the fake CRI runtime and the real kube-scheduler
with deploy/dra, as test_dra_kubelet.py; `gpufrac node --mode dra` with a
weight cache whose pods may name sources under a loopback HTTP server that
sends a 1 GiB model at a bounded rate (GF_E2E_MODEL_RATE bytes/s, default
48 MiB/s: about 21 s; test_model_admission.py's server).

  1. Pod "model" (a claim, gpufrac.io/model and gpufrac.io/model-source of
     the uncached 1 GiB model, the readiness gate gpufrac.io/model-ready),
     then pods share-1..3 (claims, no model).  kubelet's NodePrepareResources
     has a deadline and the agent answers the node's claims one at a time:
     the three reach Running within 8 s of their creation while the model is
     still being sent, and so does "model" (its claim's CDI spec mounts the
     pod's view <cache>/pods/<uid> read-only at /gpufrac/models, with
     GPUFRAC_MODEL_DIR and GPUFRAC_MODEL_READY), not Ready;
  2. once fetched, the view holds the model (hard links) and .ready, the
     pod's gpufrac.io/model-ready condition is True, the pod Ready, with a
     ModelReady event;
  3. a pod naming the flaky source (503 twice): ModelFetchFailed events,
     then Ready;
  4. that model damaged in the cache while the agent is down, `gpufrac cache
     verify` takes it out of service; the restarted agent fetches it again,
     replaces the pod's view and tells the pod (ModelRefetching, then
     ModelRefetched, condition True again);
  5. the pods deleted: the claims unprepared, the views removed.
The times to Running are logged (docs/benchmarks.md).
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, Failure, e2e_args, log, run_once, wait_for  # noqa: E402
from kubelet_node import NODE, node_obj, ready  # noqa: E402
import test_dra  # noqa: E402
from test_dra import DRA, GATES, NS, RES, pod  # noqa: E402
from test_dra_kubelet import Agent, DRAKubelet, Test as KTest  # noqa: E402
from test_model_admission import COND, GiB, RATE, Source, cond, make_model  # noqa: E402

START_LIMIT_S = 8.0


def fail(msg):
    raise Failure(msg)


class ModelAgent(Agent):
    def __init__(self, c, kl, source):
        super().__init__(c, kl)
        self.cache = os.path.join(self.dir, "models")
        os.makedirs(self.cache, exist_ok=True)
        self.source = source

    def config_extra(self):
        return ("model_cache_dir = %s\nmodel_cache_budget = 4Gi\n"
                "model_pod_sources = http://127.0.0.1:%d/\n" %
                (self.cache, self.source.port))


def model_pod(name, tmpl, ref, source):
    p = pod(name, tmpl)
    p["metadata"]["annotations"] = {"gpufrac.io/model": ref,
                                    "gpufrac.io/model-source": source}
    p["spec"]["readinessGates"] = [{"conditionType": COND}]
    return p


def run(c, kl):
    t = DRA(c)
    api = c.admin
    src_root = c.path("source")
    big = make_model(os.path.join(src_root, "big"), {"weights.bin": GiB})
    small = make_model(os.path.join(src_root, "flaky"),
                       {"config.json": 1000, "w/shard.bin": 3 << 20})
    source = Source(src_root)
    agent = ModelAgent(c, kl, source)
    kt = KTest(c, kl)
    kt.t, kt.agent = t, agent
    t.setup()
    kl.start()
    n = wait_for("kubelet to register Node %s Ready" % NODE,
                 lambda: kl.alive() and (lambda o: o if o and ready(o) else None)(
                     node_obj(c)), 120)
    if n["spec"].get("taints"):
        api.merge_patch("/api/v1/nodes/" + NODE, {"spec": {"taints": None}})
    agent.start()
    wait_for("kubelet registering the DRA driver", lambda: agent.p.alive() and
             "kubelet registered DRA driver" in agent.text(), 60)
    wait_for("the agent's slice", lambda: api.items(
        RES + "/resourceslices", fieldSelector="spec.nodeName=" + NODE), 30)
    api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
               test_dra.template("t-m", "10Gi", 10))

    # 1. the uncached model's pod, then three others
    names = ["model", "share-1", "share-2", "share-3"]
    created, running = {}, {}
    t0 = time.monotonic()
    api.create("/api/v1/namespaces/%s/pods" % NS,
               model_pod("model", "t-m", "big@" + big, source.url("big")))
    created["model"] = time.monotonic()
    for nm in names[1:]:
        api.create("/api/v1/namespaces/%s/pods" % NS, pod(nm, "t-m"))
        created[nm] = time.monotonic()

    def path(nm):
        return "/api/v1/namespaces/%s/pods/%s" % (NS, nm)

    def poll():
        kl.alive()
        for nm in names:
            if nm not in running and \
                    api.get(path(nm))["status"].get("phase") == "Running":
                running[nm] = time.monotonic()
        return len(running) == len(names)
    try:
        wait_for("the four pods Running", poll, 300, interval=0.1)
    finally:
        log("time to Running (s from creation): %s" % ", ".join(
            "%s %.1f" % (nm, running[nm] - created[nm]) if nm in running
            else "%s -" % nm for nm in names))
    uid = api.get(path("model"))["metadata"]["uid"]
    view = os.path.join(agent.cache, "pods", uid)
    early = os.path.exists(os.path.join(view, ".ready"))
    for nm in names[1:] + names[:1]:
        took = running[nm] - created[nm]
        if took > START_LIMIT_S:
            fail("pod %s took %.1f s to Running (limit %.0f s): the uncached "
                 "model of pod 'model' held NodePrepareResources" %
                 (nm, took, START_LIMIT_S))
    if early:
        fail("the model was ready before the pods were Running: the source is "
             "too fast for this test (GF_E2E_MODEL_RATE)")
    if ready(api.get(path("model"))):
        fail("pod 'model' is Ready before its model is")
    cl = t.claim_of(t.pods()["model"])
    kt.expect_cdi("model", cl)
    with open(os.path.join(agent.dir, "cdi", "gpufrac.io-%s_claim.json" %
                           cl["metadata"]["uid"])) as f:
        spec = json.load(f)
    edits = spec["devices"][0]["containerEdits"]
    mounts = [m for m in edits.get("mounts", [])
              if m["containerPath"] == "/gpufrac/models"]
    if len(mounts) != 1 or mounts[0]["hostPath"] != view or \
            "ro" not in mounts[0].get("options", []):
        fail("claim of 'model': no read-only mount of the view %s at "
             "/gpufrac/models: %s" % (view, edits.get("mounts")))
    env = edits.get("env", [])
    for want in ("GPUFRAC_MODEL_DIR=/gpufrac/models/big",
                 "GPUFRAC_MODEL_READY=/gpufrac/models/.ready"):
        if want not in env:
            fail("claim of 'model': %s not in its env %s" % (want, env))
    log("1. the three other pods Running within %.1f s; 'model' Running in "
        "%.1f s, not Ready, its view mounted" %
        (max(running[nm] - created[nm] for nm in names[1:]),
         running["model"] - created["model"]))

    # 2. the model arrives
    o = wait_for("pod 'model' Ready once its model is fetched",
                 lambda: (lambda o: o if ready(o) else None)(
                     api.get(path("model"))), 300)
    ready_s = time.monotonic() - t0
    st = os.stat(os.path.join(view, "big", "weights.bin"))
    if st.st_size != GiB or st.st_nlink < 2 or \
            not os.path.exists(os.path.join(view, ".ready")):
        fail("the view: weights.bin %d bytes, %d links; .ready %s" % (
            st.st_size, st.st_nlink, os.path.exists(os.path.join(view, ".ready"))))
    cnd = cond(o, COND)
    if not cnd or cnd["status"] != "True":
        fail("pod 'model': condition %s = %s" % (COND, cnd))
    ev = t.events("model")
    if not any(e.startswith("ModelReady") for e in ev):
        fail("pod 'model': no ModelReady event: %s" % ev)
    log("2. pod 'model' Ready %.1f s after its creation (the model at %d "
        "bytes/s)" % (ready_s, RATE))

    # 3. a source that fails first
    api.create("/api/v1/namespaces/%s/pods" % NS,
               model_pod("flaky", "t-m", "small@" + small, source.url("flaky")))
    wait_for("pod 'flaky' Ready after its source's failures",
             lambda: (lambda o: o if ready(o) else None)(api.get(path("flaky"))),
             120)
    ev = t.events("flaky")
    if len([e for e in ev if e.startswith("ModelFetchFailed")]) < 2 or \
            not any(e.startswith("ModelReady") for e in ev):
        fail("pod 'flaky': events %s (want two ModelFetchFailed, then "
             "ModelReady)" % ev)
    log("3. pod 'flaky': %s" % "; ".join(ev))

    # 4. the model of 'flaky' fails verification while the agent is down:
    # taken out of service, fetched again at the agent's start, the pod told
    fuid = api.get(path("flaky"))["metadata"]["uid"]
    fview = os.path.join(agent.cache, "pods", fuid)
    c.stop_gpufrac(agent.p)
    cached = os.path.join(agent.cache, "sha256", small[len("sha256:"):], "files",
                          "config.json")
    os.chmod(cached, 0o644)
    with open(cached, "r+b") as f:
        f.write(b"corrupt")
    r = subprocess.run([c.gpufrac, "cache", "--dir", agent.cache, "verify"],
                       capture_output=True, text=True, timeout=60)
    if "taken out of service" not in r.stdout + r.stderr:
        fail("gpufrac cache verify: %s %s" % (r.stdout, r.stderr))
    agent.start()

    def refetched():
        kl.alive()
        ev = t.events("flaky")
        cnd = cond(api.get(path("flaky")), COND)
        return ev if any(e.startswith("ModelRefetched") for e in ev) and \
            cnd and cnd["status"] == "True" else None
    ev = wait_for("pod 'flaky' told its model was fetched again", refetched, 60)
    if not any(e.startswith("ModelRefetching") for e in ev):
        fail("pod 'flaky': no ModelRefetching event: %s" % ev)
    with open(os.path.join(fview, "small", "config.json"), "rb") as f:
        if f.read(7) == b"corrupt":
            fail("pod 'flaky''s view still holds the copy that failed verification")
    log("4. a corrupt model in use: out of service, fetched again, the pod told "
        "(%s)" % "; ".join(e for e in ev if e.startswith("ModelRef")))

    # 5. deleted: unprepared, views gone
    for nm in names + ["flaky"]:
        api.delete(path(nm), gracePeriodSeconds=0)

    def gone():
        kl.alive()
        return not agent.checkpoint() and not agent.cdi() and not t.pods() and \
            not os.path.exists(view)
    wait_for("the claims unprepared and the views removed", gone, 120)
    log("5. pods deleted: claims unprepared, views removed")
    c.check_alive()


def main():
    a = e2e_args(__doc__, 2)
    if not a:
        return 2
    (k8s_bin, gpufrac), keep = a
    state = {}

    def body(c):
        kl = state["kl"] = DRAKubelet(c)
        c.start(scheduler=False)
        with open(os.path.join(test_dra.DRA_DEPLOY, "kube-scheduler-config.yaml")) as f:
            c.start_scheduler(config=f.read())
        try:
            run(c, kl)
        finally:
            kl.stop()

    def tails(c):
        kl = state.get("kl")
        for p in c.extra + (kl.procs if kl else []):
            log("%s log ends:\n%s" % (p.name, p.tail(30)))
    return run_once("e2e dra kubelet models",
                    lambda: Cluster(k8s_bin, gpufrac, keep, feature_gates=GATES),
                    body, tails)


if __name__ == "__main__":
    sys.exit(main())
