#!/usr/bin/env python3
"""gpufrac on Dynamic Resource Allocation against a real control plane
(CTest label e2e; docs/dra.md).

Usage: test_dra.py K8S_BIN GPUFRAC [--keep] [--only NAME[,NAME...]]
(GPUFRAC_E2E_SCHEDULER_V=5 in the environment: kube-scheduler at --v=5)

kube-apiserver, kube-controller-manager and kube-scheduler run with the DRA
feature gates gpufrac needs (GATES below), deploy/dra/ is applied, and a
fake node carries the ResourceSlice the node agent publishes
(tests/e2e/dra/slice-shared-80gi.json, the agreed format: one shared 80Gi
GPU, consumable capacity memory and cores).  Scenarios:

  accepted        deploy/dra's DeviceClasses, templates, policy and RBAC and
                  the slice are stored as written (nothing dropped)
  gate            deploy/dra's MutatingAdmissionPolicy gates exactly the pods
                  with claims that opt in (label gpufrac.io/placement=gpufrac
                  on the pod or its namespace)
  kube_allocates  mode 1: kube-scheduler alone allocates shares of the one
                  GPU to several pods by consumable capacity (device,
                  shareID, consumedCapacity) and leaves the one that does
                  not fit Pending with its reason
  gpufrac_allocates  mode 2: pods gated gpufrac.io/placement are placed by
                  `gpufrac scheduler --dra`, which writes the claims'
                  allocations and lifts the gate; kube-scheduler binds them
                  where their claims are
  defaults        what a request naming no capacity consumes (kube-scheduler)
  whole           the whole-GPU and NVLink-island templates on exclusive
                  devices (kube-scheduler), and a whole GPU in mode 2
  extender_scores mode 1 with the extender: kube-scheduler (deploy/dra/
                  kube-scheduler-config.yaml) allocates where the extender's
                  engine score is highest
  extended        a pod asking the extended resource gpu.gpufrac.io/gpu (no
                  claim) gets an exclusive GPU from kube-scheduler through
                  deploy/dra's whole-GPU class (DRA-backed extended resources)
  nvidia_claims   claims written for NVIDIA's driver (class gpu.nvidia.com, a
                  selector on its attribute domain) against gpufrac's slices
  mixed           mode-1 and mode-2 pods, one at a time: each lands on its
                  own allocator's GPU (one allocator per device)
  mixed_burst     8 + 8 pods of both modes at once, a GPU of each allocator
                  (run 3 times): all bound (but mode-1 pods kube-scheduler
                  itself left Pending beside room on its GPU: its requeue
                  gap, logged; docs/dra.md), nothing over-filled, nothing
                  given back
  named_claim     a claim named by its pod, allocated by gpufrac, carries
                  the delete-protection finalizer and is deallocated when
                  its pod goes
  taint_rule      a DeviceTaintRule NoSchedule on a mode-2 GPU: gpufrac
                  places there only claims that tolerate it, and records
                  the toleration in the result
  example         examples/dra-claim-share.yaml applied as written: its
                  claim allocated 8Gi and 30 cores by kube-scheduler
  preempt         mode 2 preemption: a GPU full of lower-priority claim pods,
                  a higher-priority gated pod that fits nowhere; gpufrac
                  evicts exactly the pod whose share makes room (Eviction
                  API), holds the share while the victim terminates (a
                  lower-priority pod waiting before it does not get it),
                  then allocates it to the preemptor, bound there
  preempt_budget  the same GPU with a PodDisruptionBudget over the pod that
                  would make room alone: gpufrac evicts the two that break
                  no budget instead (b and c)
  preempt_slow    the same GPU, its victim Terminating for long: nothing
                  else is evicted while it terminates (past the hold's
                  bound, 2.5 minutes), then the preemptor is bound there
  shared_claim    mode 2, one ResourceClaim named by several pods: the second
                  pod joins the claim's reservedFor (allocation untouched),
                  both bound to its node, the share booked once; the claim
                  stays allocated for the second when the first goes; a pod
                  whose other claim has no room on that node waits gated
                  with a reason (then lands there), one pinned to another
                  node is refused by kube-scheduler
  limits          mode 2's limits and reasons (issue 27): a pod another
                  controller still gates is not placed until its other gate
                  goes; one with 17 claims stays gated with one log line, one
                  GpufracRefused Event and gpufrac_dra_refused_total 1 (no
                  errors every pass); one of 36 shares in 3 claims is placed;
                  one naming a claim that does not exist and one that fits
                  nowhere get a GpufracWaiting Event
  class_selector  gpu.gpufrac.io's selector narrowed to A100s (a test gpufrac
                  does not evaluate): a mode-2 pod of that class on an H100
                  stays gated with a GpufracRefused Event naming the
                  selector; the class restored, it is placed
"""

import copy
import json
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (ApiError, Cluster, Failure, free_port, log,  # noqa: E402
                     run_scenarios, wait_for)

HERE = os.path.dirname(os.path.abspath(__file__))
DRA_DEPLOY = os.path.join(os.path.dirname(os.path.dirname(HERE)), "deploy", "dra")
NS = "e2e-dra"
DRIVER = "gpu.gpufrac.io"
GATE = "gpufrac.io/placement"
GiB = 1 << 30
RES = "/apis/resource.k8s.io/v1"
# resource.k8s.io/v1 is served by default from 1.34; consumable capacity
# (KEP-5075) is beta and on by default from 1.36 (alpha in 1.34-1.35, where
# this gate must be set).  Set explicitly so the test says what it needs.
GATES = {"DRAConsumableCapacity": True}


def fail(msg):
    raise Failure(msg)


def quantity(q):
    """A Kubernetes quantity as an integer (the forms the API server
    writes back for these values: plain, Ki/Mi/Gi)."""
    q = str(q)
    for suf, mul in (("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", GiB), ("Ti", 1 << 40)):
        if q.endswith(suf):
            return int(q[:-2]) * mul
    if q.endswith("k"):
        return int(q[:-1]) * 1000
    return int(q)


def subset(want, got, where="spec"):
    """None when got holds every field of want with the same value (the
    server may add defaults: allocationMode, count, metadata); else the
    first difference."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return "%s: %r, written %r" % (where, got, want)
        for k, v in want.items():
            if k not in got:
                return "%s.%s dropped" % (where, k)
            d = subset(v, got[k], "%s.%s" % (where, k))
            if d:
                return d
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return "%s: %r, written %r" % (where, got, want)
        for i, (w, g) in enumerate(zip(want, got)):
            d = subset(w, g, "%s[%d]" % (where, i))
            if d:
                return d
        return None
    return None if want == got else "%s: %r, written %r" % (where, got, want)


def load_slice(gpufrac, node, uuid_tail="1", allocator=None):
    """The shared 80Gi H100's slice as the node agent itself publishes it
    (`gpufrac node --mode dra --once --print slices`, with a fake GPU), so
    what kube-scheduler allocates from here is what the agent's slices
    offer, requestPolicy defaults included.  allocator "gpufrac": the agent
    runs with `dra_allocator = gpufrac` (its devices carry the allocator
    taint: mode 2's, never kube-scheduler's)."""
    argv = [gpufrac, "node", "--mode", "dra", "--once", "--print",
            "slices", "--fake-gpus", "1xH100-80GB", "--node-name", node]
    if allocator:
        cfg = "/tmp/gpufrac-e2e-dra-%d.conf" % os.getpid()
        with open(cfg, "w") as f:
            f.write("dra_allocator = %s\n" % allocator)
        argv += ["--config", cfg]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        fail("gpufrac node --print slices: %s" % out.stderr.strip())
    slices = json.loads(out.stdout)
    if len(slices) != 1 or len(slices[0]["spec"]["devices"]) != 1:
        fail("expected one slice with one device, got %s" % out.stdout[:300])
    s = slices[0]
    dev = s["spec"]["devices"][0]
    dev["attributes"]["uuid"]["string"] = dev["attributes"]["uuid"]["string"][:-1] + uuid_tail
    return s


def template(name, mem, cores):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"spec": {"devices": {"requests": [{
                "name": "gpu", "exactly": {
                    "deviceClassName": DRIVER,
                    "capacity": {"requests": {"memory": mem, "cores": str(cores)}}}}]}}}}


def pod(name, tmpl, gated=False, pclass=None, grace=0):
    spec = {"containers": [{
        "name": "main", "image": "registry.k8s.io/pause:3.10",
        "resources": {"claims": [{"name": "gpu"}],
                      "requests": {"cpu": "100m", "memory": "64Mi"}}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": tmpl}],
        "terminationGracePeriodSeconds": grace}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    if pclass:
        spec["priorityClassName"] = pclass
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"e2e": "dra", "e2e-pod": name}},
            "spec": spec}


class DRA:
    def __init__(self, c):
        self.c = c
        self.api = c.admin
        self.ext = None

    # ---- setup ---------------------------------------------------------
    def add_node(self, name):
        """A Node that is Ready and schedulable, as tests/e2e/test_k8s.py
        writes them (no kubelet runs), with the labels NVIDIA's GPU Feature
        Discovery puts on a GPU node whatever the allocation path (the
        planner reads a node's GPUs from them on a DRA cluster)."""
        self.c.add_node(name, {"nvidia.com/gpu.count": "1",
                               "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                               "nvidia.com/gpu.memory": "81920"})
        self.c.node_status(name, {"cpu": "32", "memory": "256Gi", "pods": "110"})

    def apply_dra_deploy(self):
        for f in sorted(os.listdir(DRA_DEPLOY)):
            # kube-scheduler-config.yaml is kube-scheduler's --config file.
            if f.endswith(".yaml") and f != "kube-scheduler-config.yaml":
                r = self.c.kubectl("apply", "--server-side", "--field-manager=e2e", "-f",
                                   os.path.join(DRA_DEPLOY, f))
                log("applied dra/%s: %s" % (f, " ".join(r.stdout.split())))

    def setup(self):
        # The namespace and the extender's own RBAC (deploy/), then deploy/dra.
        for f in ("namespace.yaml", "scheduler-rbac.yaml", "planner-rbac.yaml"):
            self.c.kubectl("apply", "--server-side", "--field-manager=e2e", "-f",
                           os.path.join(os.path.dirname(DRA_DEPLOY), f))
        self.apply_dra_deploy()
        self.c.namespace(NS)

    def start_extender(self):
        """gpufrac scheduler --dra allocate as deploy's ServiceAccount
        gpufrac-scheduler (so deploy/dra/scheduler-rbac.yaml is what it
        may do)."""
        if self.ext:
            return
        kc = self.c.sa_kubeconfig("extender", self.c.token("gpufrac-scheduler"))
        self.ext = self.c.spawn("extender", [
            self.c.gpufrac, "scheduler", "--listen", "127.0.0.1:%d" % self.c.ext_port,
            "--kubeconfig", kc, "--dra", "allocate"])
        wait_for("the extender leading", lambda: self.ext.alive() and
                 self.api.get("/apis/coordination.k8s.io/v1/namespaces/gpufrac-system/"
                              "leases/gpufrac-scheduler")["spec"].get("holderIdentity"),
                 60)

    def retire(self, node):
        """The node's slice goes (its GPUs with it), so later scenarios'
        pods cannot land there."""
        self.api.delete("%s/resourceslices/%s-%s-0" % (RES, node, DRIVER))

    def new_node(self, name, uuid_tail="1", allocator=None):
        self.add_node(name)
        s = load_slice(self.c.gpufrac, name, uuid_tail, allocator)
        got = self.api.create(RES + "/resourceslices", s)
        return s, got

    # ---- the API server's state ---------------------------------------
    def pods(self):
        return {p["metadata"]["name"]: p for p in
                self.api.items("/api/v1/namespaces/%s/pods" % NS, labelSelector="e2e=dra")}

    def claim_of(self, p):
        """The ResourceClaim generated for pod p's claim 'gpu' (None
        until the resourceclaim controller made it)."""
        for st in p.get("status", {}).get("resourceClaimStatuses", []):
            if st.get("name") == "gpu" and st.get("resourceClaimName"):
                return self.api.get("%s/namespaces/%s/resourceclaims/%s" %
                                    (RES, NS, st["resourceClaimName"]))
        return None

    def events(self, name):
        return [e.get("reason", "") + ": " + e.get("message", "")
                for e in self.api.items("/api/v1/namespaces/%s/events" % NS)
                if e["involvedObject"].get("name") == name]

    def wait_bound(self, names, timeout=90):
        def ok():
            ps = self.pods()
            return all(ps.get(n, {}).get("spec", {}).get("nodeName") for n in names)
        try:
            wait_for("%s bound" % ", ".join(names), ok, timeout, 0.5)
        except Failure:
            ps = self.pods()
            left = [n for n in names if not ps.get(n, {}).get("spec", {}).get("nodeName")]
            fail("not bound after %d s: %s; events of %s: %s" %
                 (timeout, left, left[0], self.events(left[0])[-3:]))
        return self.pods()

    def wait_unschedulable(self, name, timeout=60):
        """Pod name stays Pending with PodScheduled False Unschedulable;
        returns that condition's message."""
        def cond():
            p = self.pods().get(name, {})
            if p.get("spec", {}).get("nodeName"):
                fail("%s was bound to %s; it must not fit" % (name, p["spec"]["nodeName"]))
            for c in p.get("status", {}).get("conditions", []):
                if c["type"] == "PodScheduled" and c["status"] == "False" and \
                        c.get("reason") == "Unschedulable":
                    return c.get("message", "")
            return None
        return wait_for("%s Unschedulable" % name, cond, timeout, 0.5)

    def allocations(self):
        """{pod: (claim, result)} for every bound pod; each claim must hold
        exactly one result for this driver."""
        out = {}
        for n, p in self.pods().items():
            if not p["spec"].get("nodeName"):
                continue
            cl = self.claim_of(p)
            if not cl or not cl.get("status", {}).get("allocation"):
                fail("bound pod %s has no allocated claim: %s" % (n, cl and cl.get("status")))
            res = cl["status"]["allocation"]["devices"]["results"]
            if len(res) != 1 or res[0]["driver"] != DRIVER:
                fail("claim of %s: expected one %s result, got %s" % (n, DRIVER, res))
            out[n] = (cl, res[0])
        return out

    def check_sums(self, node, dev="gpu-0", mem=80 * GiB, cores=100):
        """No capacity of node's dev is given twice: consumed memory and
        cores over every allocated claim are within the device's, and every
        shareID is distinct.  Returns (memory, cores, number of shares)."""
        used_m = used_c = 0
        shares = set()
        who = []
        for cl in self.api.items("%s/namespaces/%s/resourceclaims" % (RES, NS)):
            al = cl.get("status", {}).get("allocation")
            if not al:
                continue
            for r in al["devices"]["results"]:
                if r["pool"] != node or r["device"] != dev:
                    continue
                sid = r.get("shareID")
                if not sid or sid in shares:
                    fail("claim %s: shareID %r missing or repeated" % (cl["metadata"]["name"], sid))
                shares.add(sid)
                cc = r.get("consumedCapacity", {})
                # Who wrote the allocation: the status's field manager.
                mgr = [m["manager"] for m in cl["metadata"].get("managedFields", [])
                       if m.get("subresource") == "status"]
                who.append("%s by %s at %s" % (
                    cl["metadata"]["name"], "/".join(mgr) or "?",
                    al.get("allocationTimestamp", "?")))
                used_m += quantity(cc.get("memory", 0))
                used_c += quantity(cc.get("cores", 0))
        if used_m > mem or used_c > cores:
            fail("%s/%s over-allocated: %d bytes of %d, %d cores of %d: %s" %
                 (node, dev, used_m, mem, used_c, cores, "; ".join(who)))
        return used_m, used_c, len(shares)

    def check_result(self, name, cl, r, node, mem, cores):
        if r["pool"] != node or r["device"] != "gpu-0" or r["request"] != "gpu":
            fail("%s: result %s is not request gpu on %s/gpu-0" % (name, r, node))
        cc = r.get("consumedCapacity", {})
        if quantity(cc.get("memory", -1)) != mem or quantity(cc.get("cores", -1)) != cores:
            fail("%s: consumedCapacity %s, asked memory %d cores %d" % (name, cc, mem, cores))
        if not r.get("shareID"):
            fail("%s: no shareID on a share of a multi-allocation device" % name)
        pods = [x.get("name") for x in cl["status"].get("reservedFor", [])]
        if name not in pods:
            fail("%s: claim reserved for %s, not for the pod" % (name, pods))

    def delete_all(self):
        for n in self.pods():
            self.api.delete("/api/v1/namespaces/%s/pods/%s" % (NS, n), gracePeriodSeconds=0)
        wait_for("pods gone", lambda: not self.pods(), 60)
        # The resourceclaim controller deletes generated claims with their pods.
        wait_for("claims gone", lambda: not self.api.items(
            "%s/namespaces/%s/resourceclaims" % (RES, NS)), 60)
        for t in self.api.items("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS)):
            self.api.delete("%s/namespaces/%s/resourceclaimtemplates/%s" %
                            (RES, NS, t["metadata"]["name"]))

    # ---- scenarios -----------------------------------------------------
    def s_accepted(self):
        # The classes and templates as written in deploy/dra.
        want = {}
        import yaml  # noqa: F401  (Debian's python3-yaml: /usr/bin/python3)
        for f in sorted(os.listdir(DRA_DEPLOY)):
            if f.endswith(".yaml"):
                with open(os.path.join(DRA_DEPLOY, f)) as fh:
                    for d in yaml.safe_load_all(fh):
                        if d and "metadata" in d:
                            want[(d["kind"], d["metadata"]["name"])] = d
        paths = {"DeviceClass": RES + "/deviceclasses/%s",
                 "ResourceClaimTemplate": RES + "/namespaces/default/resourceclaimtemplates/%s"}
        seen = 0
        for (kind, name), d in want.items():
            if kind not in paths:
                continue
            diff = subset(d["spec"], self.api.get(paths[kind] % name)["spec"])
            if diff:
                fail("%s %s not stored as written: %s" % (kind, name, diff))
            seen += 1
        if seen < 6:
            fail("deploy/dra: %d classes and templates, expected 3 + 3" % seen)
        # The slice as the node agent publishes it: nothing dropped (a
        # server without consumable capacity drops requestPolicy and
        # allowMultipleAllocations silently).
        s, got = self.new_node("dra0", "0")
        diff = subset(s["spec"], got["spec"])
        if diff:
            fail("ResourceSlice not stored as written: %s" % diff)
        # A requestPolicy with a validRange needs a default: the server
        # refuses one without (the node agent must publish both).
        nodef = copy.deepcopy(s)
        nodef["metadata"]["name"] = "dra0-nodefault"
        del nodef["spec"]["devices"][0]["capacity"]["cores"]["requestPolicy"]["default"]
        nodef["spec"]["pool"]["name"] = "dra0-nodefault"
        try:
            self.api.create(RES + "/resourceslices", nodef)
            fail("a requestPolicy with validRange and no default was accepted")
        except ApiError as e:
            if e.code != 422 or "requestPolicy.default: Required value" not in str(e):
                raise
            log("refused as expected: %s" % str(e)[str(e).index("spec."):][:120])
        # The server validates what it stores: a quantity that is not one.
        bad = template("bad", "eight", 30)
        try:
            self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS), bad)
            fail("a template with memory 'eight' was accepted")
        except ApiError as e:
            if e.code not in (400, 422):
                raise
        self.api.delete(RES + "/resourceslices/" + s["metadata"]["name"])
        self.api.delete("/api/v1/nodes/dra0")

    def s_gate(self):
        """deploy/dra/placement-policy.yaml gates a new pod with claims
        when it or its namespace opts in, and no other pod."""
        ns = "e2e-dra-gated"
        self.c.namespace(ns, {GATE: "gpufrac"})

        def gates(p, where):
            p = copy.deepcopy(p)
            p["metadata"]["namespace"] = where
            got = self.api.create("/api/v1/namespaces/%s/pods" % where, p)
            self.api.delete("/api/v1/namespaces/%s/pods/%s" % (where, p["metadata"]["name"]),
                            gracePeriodSeconds=0)
            return [g["name"] for g in got["spec"].get("schedulingGates", [])]

        with_claims = pod("g1", "h100-8gi-30pct")
        no_claims = pod("g2", "x")
        del no_claims["spec"]["resourceClaims"]
        del no_claims["spec"]["containers"][0]["resources"]["claims"]
        labelled = pod("g3", "h100-8gi-30pct")
        labelled["metadata"]["labels"][GATE] = "gpufrac"
        own = pod("g4", "h100-8gi-30pct", gated=True)
        own["metadata"]["labels"][GATE] = "gpufrac"
        for what, p, where, want in (
                ("claims, opted-in namespace", with_claims, ns, [GATE]),
                ("no claims, opted-in namespace", no_claims, ns, []),
                ("claims, namespace not opted in", with_claims, NS, []),
                ("claims, pod opted in", labelled, NS, [GATE]),
                ("claims, pod already gated", own, NS, [GATE])):
            got = gates(p, where)
            if got != want:
                fail("%s: gates %s, expected %s" % (what, got, want))
        self.api.delete("/api/v1/namespaces/" + ns)

    def s_kube_allocates(self):
        node = "dra1"
        self.new_node(node, "1")
        asks = {"k1": ("20Gi", 30), "k2": ("30Gi", 30), "k3": ("20Gi", 30)}
        for n, (m, c) in asks.items():
            self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                            template("t-" + n, m, c))
            self.api.create("/api/v1/namespaces/%s/pods" % NS, pod(n, "t-" + n))
        self.wait_bound(list(asks))
        al = self.allocations()
        for n, (m, c) in asks.items():
            self.check_result(n, al[n][0], al[n][1], node, quantity(m), c)
        used = self.check_sums(node)
        log("kube-scheduler allocated %d shares on %s: %d GiB, %d cores" %
            (used[2], node, used[0] // GiB, used[1]))
        self.planner_counts(asks)
        # 70Gi + 20Gi > 80Gi: memory does not fit, cores (90 + 10) would.
        self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                        template("t-k4", "20Gi", 10))
        self.api.create("/api/v1/namespaces/%s/pods" % NS, pod("k4", "t-k4"))
        msg = self.wait_unschedulable("k4")
        log("k4 refused: %s" % msg)
        if "claim" not in msg:
            fail("k4's Unschedulable message does not name the claims: %r" % msg)
        self.check_sums(node)
        # Freeing a share lets the refused pod in.
        self.api.delete("/api/v1/namespaces/%s/pods/k2" % NS, gracePeriodSeconds=0)
        self.wait_bound(["k4"], 60)
        self.check_sums(node)
        self.delete_all()
        self.retire(node)

    def planner_counts(self, pods):
        """gpufrac plan, live as deploy/planner-rbac.yaml's ServiceAccount,
        lists the ResourceClaims too and counts the DRA pods' GPUs (none is
        named in a 'not in the snapshot' warning)."""
        kc = self.c.sa_kubeconfig("planner", self.c.token("gpufrac-planner"))
        r = subprocess.run([self.c.gpufrac, "plan", "--kubeconfig", kc, "--format",
                            "json", "--no-whatif"],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            fail("gpufrac plan (live, planner RBAC): exit %d: %s" %
                 (r.returncode, r.stderr.strip()[:300]))
        out = json.loads(r.stdout)
        got = {w["name"]: w for w in out["workloads"] if w["namespace"] == NS}
        missing = [n for n in pods if n not in got or not got[n]["gpus_held"] > 0]
        if missing:
            fail("the planner counts no GPU for DRA pods %s (workloads %s)" %
                 (missing, sorted(got)))
        if any("is not in the snapshot" in w for w in out["warnings"]):
            fail("the planner missed claims: %s" % out["warnings"])
        log("planner: DRA pods %s hold %s GPUs" %
            (sorted(pods), [round(got[n]["gpus_held"], 3) for n in sorted(pods)]))

    def share(self, name, mem, cores, gated, pclass=None, grace=0):
        self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                        template("t-" + name, mem, cores))
        self.api.create("/api/v1/namespaces/%s/pods" % NS,
                        pod(name, "t-" + name, gated, pclass, grace))

    def stays_gated(self, name, secs=4):
        """Pod name keeps its gate and its claim stays unallocated for secs."""
        t = time.monotonic()
        while time.monotonic() - t < secs:
            p = self.pods()[name]
            gates = [g["name"] for g in p["spec"].get("schedulingGates", [])]
            if GATE not in gates or p["spec"].get("nodeName"):
                fail("%s: the gate was lifted (gates %s, node %s); it must not fit" %
                     (name, gates, p["spec"].get("nodeName")))
            cl = self.claim_of(p)
            if cl and cl.get("status", {}).get("allocation"):
                fail("%s: its claim was allocated: %s" % (name, cl["status"]))
            time.sleep(0.5)

    def s_gpufrac_allocates(self):
        self.start_extender()
        node = "dra2"
        self.new_node(node, "2", "gpufrac")
        asks = {"g1": ("20Gi", 30), "g2": ("30Gi", 30), "g3": ("20Gi", 30)}
        for n, (m, c) in asks.items():
            self.share(n, m, c, True)
        self.wait_bound(list(asks))
        al = self.allocations()
        for n, (m, c) in asks.items():
            self.check_result(n, al[n][0], al[n][1], node, quantity(m), c)
            if al[n][0]["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0] \
                    ["matchFields"][0]["values"] != [node]:
                fail("%s: nodeSelector %s" % (n, al[n][0]["status"]["allocation"]))
            # The toleration gpufrac used for its own allocator taint, kept
            # by the API server (devices[].taints and results[].tolerations
            # are GA in 1.37).
            tol = al[n][1].get("tolerations")
            if tol != [{"key": "gpu.gpufrac.io/allocator", "operator": "Equal",
                        "value": "gpufrac", "effect": "NoSchedule"}]:
                fail("%s: result tolerations %s" % (n, tol))
        log("gpufrac allocated %s: %s" % (node, self.check_sums(node)))
        self.share("g4", "20Gi", 10, True)
        self.stays_gated("g4")
        self.api.delete("/api/v1/namespaces/%s/pods/g2" % NS, gracePeriodSeconds=0)
        self.wait_bound(["g4"], 60)
        self.check_sums(node)
        self.delete_all()
        self.retire(node)

    def prioritize(self, p, nodes):
        """The extender's /prioritize for pod p over nodes, as
        kube-scheduler calls it (nodeCacheCapable: names only)."""
        body = json.dumps({"Pod": p, "NodeNames": nodes}).encode()
        req = urllib.request.Request("http://127.0.0.1:%d/gpufrac/prioritize" %
                                     self.c.ext_port, data=body, method="POST")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=5) as r:
            return {h["Host"]: h["Score"] for h in json.loads(r.read())}

    def s_extender_scores(self):
        """Mode 1: kube-scheduler allocates, the extender scores nodes for
        pods with gpufrac's claims with the engine's node score: a second
        share goes where it leaves the least fragment (the gpufrac policy),
        here beside the first (kube-scheduler's own scores do not look at
        devices)."""
        self.start_extender()
        a, b = "dra5a", "dra5b"
        self.new_node(a, "5")
        self.new_node(b, "6")
        # 60 cores used leave 40, which a 20-core share splits into two
        # halves that the workload's shares (60 and 20) cannot both use:
        # placing it beside s1 leaves less fragment than on an empty GPU.
        self.share("s1", "40Gi", 60, False)
        first = self.wait_bound(["s1"])["s1"]["spec"]["nodeName"]
        other = b if first == a else a
        # s2 waits behind a gate of the test's own until the extender
        # knows its claim, so kube-scheduler's call sees what we see.
        self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                        template("t-s2", "20Gi", 20))
        p2 = pod("s2", "t-s2")
        p2["spec"]["schedulingGates"] = [{"name": "e2e.gpufrac.io/hold"}]
        self.api.create("/api/v1/namespaces/%s/pods" % NS, p2)

        last = {}

        def scored():
            got = self.pods()["s2"]
            last["claim"] = bool(self.claim_of(got))
            if not last["claim"]:
                return None
            sc = last["scores"] = self.prioritize(got, [a, b])
            return sc if sc[first] != sc[other] else None
        try:
            sc = wait_for("the extender scoring s2", scored, 30)
        except Failure:
            fail("the extender did not score s2 (s1 on %s): %s" % (first, last))
        log("extender scores for s2: %s (s1 on %s)" % (sc, first))
        if sc[first] <= sc[other]:
            fail("s2: the extender prefers %s, not %s beside s1: %s" % (other, first, sc))
        self.api.merge_patch("/api/v1/namespaces/%s/pods/s2" % NS,
                             {"spec": {"schedulingGates": None}})
        got = self.wait_bound(["s2"])["s2"]["spec"]["nodeName"]
        if got != first:
            fail("s2 bound to %s, the extender scored %s higher: %s" % (got, first, sc))
        mgr = [m["manager"] for m in self.claim_of(self.pods()["s2"])["metadata"]
               ["managedFields"] if m.get("subresource") == "status"]
        if mgr != ["kube-scheduler"]:
            fail("s2's claim allocated by %s, not kube-scheduler" % mgr)
        self.check_sums(first)
        self.delete_all()
        self.retire(a)
        self.retire(b)

    def s_defaults(self):
        """What kube-scheduler consumes for a request that names no
        capacity: each requestPolicy's default, which the agent sets to the
        whole GPU (memory 80Gi, cores 100: nothing shares a GPU by
        accident); a request naming only memory gets the cores default."""
        node, node2 = "dra6", "dra6b"  # d1 fills a GPU: d2 gets its own
        self.new_node(node, "7")
        self.new_node(node2, "9")
        for n, caps in (("d1", {}), ("d2", {"memory": "1Gi"})):
            t = template("t-" + n, "0", 0)
            t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = \
                {"requests": caps}
            self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS), t)
        self.api.create("/api/v1/namespaces/%s/pods" % NS, pod("d1", "t-d1"))
        self.wait_bound(["d1"])
        self.api.create("/api/v1/namespaces/%s/pods" % NS, pod("d2", "t-d2"))
        self.wait_bound(["d2"])
        want = {"d1": (80 * GiB, 100), "d2": (GiB, 100)}
        for n in ("d1", "d2"):
            cc = self.allocations()[n][1].get("consumedCapacity", {})
            log("%s consumed %s" % (n, cc))
            got = (quantity(cc.get("memory", -1)), quantity(cc.get("cores", -1)))
            if got != want[n]:
                fail("%s consumed %s, expected memory %d, cores %d (the agent's "
                     "defaults for what it does not name)" % ((n, cc) + want[n]))
        self.check_sums(node)
        self.check_sums(node2)
        self.delete_all()
        self.retire(node)
        self.retire(node2)

    def s_whole(self):
        """deploy/dra's whole-GPU templates on exclusive devices:
        kube-scheduler gives 'a whole A100 80GB' one device and 'two GPUs
        on one NVLink island' two with the same nvlinkIsland; gpufrac (mode
        2) places a gated whole-GPU claim on a device nobody holds."""
        node = "dra7"
        self.add_node(node)
        devs = []
        # gpu-4 and gpu-5 are gpufrac's (the allocator taint): mode 2's
        # whole GPU goes there, kube-scheduler's never do.
        for i in range(6):
            devs.append({"name": "gpu-%d" % i, "attributes": {
                "uuid": {"string": "GPU-00000000-0000-4000-8000-00000000070%d" % i},
                "productName": {"string": "NVIDIA A100-SXM4-80GB"},
                "type": {"string": "gpu"}, "mode": {"string": "exclusive"},
                "nvlinkIsland": {"string": str(i // 2)}},
                "capacity": {"memory": {"value": "80Gi"}, "cores": {"value": "100"}}})
            if i >= 4:
                devs[-1]["taints"] = [{"key": "gpu.gpufrac.io/allocator",
                                       "value": "gpufrac", "effect": "NoSchedule"}]
        self.api.create(RES + "/resourceslices", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "%s-%s-0" % (node, DRIVER)},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": devs}})
        ns = "default"
        # gpu-1 first, so 'whole' cannot take it by chance: the island pair
        # must be gpu-2 and gpu-3.
        specs = [("w1", "a100-80gb-whole", False), ("w2", "two-gpus-one-nvlink-island", False)]
        for n, t, g in specs:
            p = pod(n, t, g)
            p["metadata"]["namespace"] = ns
            if t.startswith("two"):
                p["spec"]["resourceClaims"][0]["name"] = "gpu"
            self.api.create("/api/v1/namespaces/%s/pods" % ns, p)
            wait_for("%s bound" % n, lambda: self.api.get(
                "/api/v1/namespaces/%s/pods/%s" % (ns, n))["spec"].get("nodeName"), 60)
        got = {}
        for n, _, _ in specs:
            p = self.api.get("/api/v1/namespaces/%s/pods/%s" % (ns, n))
            cname = p["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
            cl = self.api.get("%s/namespaces/%s/resourceclaims/%s" % (RES, ns, cname))
            got[n] = [r["device"] for r in cl["status"]["allocation"]["devices"]["results"]]
        log("whole GPUs: %s" % got)
        if len(got["w1"]) != 1 or len(got["w2"]) != 2:
            fail("whole: %s" % got)
        isl = {int(d.split("-")[1]) // 2 for d in got["w2"]}
        if len(isl) != 1:
            fail("two-gpus-one-nvlink-island got GPUs of islands %s" % isl)
        if set(got["w1"]) & set(got["w2"]):
            fail("a whole GPU given twice: %s" % got)
        if set(got["w1"] + got["w2"]) & {"gpu-4", "gpu-5"}:
            fail("kube-scheduler allocated gpufrac's GPU: %s" % got)
        # Mode 2: a gated whole-GPU claim without selectors is gpufrac's.
        self.start_extender()
        self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS), {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t-w3", "namespace": NS},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "whole.gpu.gpufrac.io"}}]}}}})
        self.api.create("/api/v1/namespaces/%s/pods" % NS, pod("w3", "t-w3", True))
        self.wait_bound(["w3"])
        cl = self.claim_of(self.pods()["w3"])
        r = cl["status"]["allocation"]["devices"]["results"]
        mgr = [m["manager"] for m in cl["metadata"]["managedFields"]
               if m.get("subresource") == "status"]
        if len(r) != 1 or r[0]["device"] not in ("gpu-4", "gpu-5") or r[0].get("shareID"):
            fail("w3 got %s beside %s" % (r, got))
        if "gpufrac" not in mgr:
            fail("w3's claim was allocated by %s, not gpufrac" % mgr)
        for n, _, _ in specs:
            self.api.delete("/api/v1/namespaces/%s/pods/%s" % (ns, n), gracePeriodSeconds=0)
        self.delete_all()
        self.retire(node)

    def s_extended(self):
        """DRA-backed extended resources: deploy/dra's whole-GPU class is
        also the extended resource gpu.gpufrac.io/gpu, so a pod asking for
        it in resources.limits, with no ResourceClaim, is bound by the real
        kube-scheduler, which makes and allocates the claim itself on an
        exclusive gpufrac GPU; a third pod on a node of two does not fit."""
        node = "dra8"
        self.add_node(node)
        devs = [{"name": "gpu-%d" % i, "attributes": {
            "uuid": {"string": "GPU-00000000-0000-4000-8000-00000000080%d" % i},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "type": {"string": "gpu"}, "mode": {"string": "exclusive"}},
            "capacity": {"memory": {"value": "80Gi"}, "cores": {"value": "100"}}}
            for i in range(2)]
        self.api.create(RES + "/resourceslices", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "%s-%s-0" % (node, DRIVER)},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": devs}})
        names = ["x1", "x2", "x3"]
        for n in names:
            p = pod(n, "unused")
            del p["spec"]["resourceClaims"]
            r = p["spec"]["containers"][0]["resources"]
            del r["claims"]
            r["limits"] = {"gpu.gpufrac.io/gpu": "1"}
            r["requests"]["gpu.gpufrac.io/gpu"] = "1"
            self.api.create("/api/v1/namespaces/%s/pods" % NS, p)
        ps = {}

        def two():
            ps.update(self.pods())
            b = [n for n in names if ps[n]["spec"].get("nodeName")]
            return len(b) >= 2 and b
        bound = wait_for("two of three bound", two, 60)
        got = []
        for n in bound:
            st = ps[n]["status"].get("extendedResourceClaimStatus") or \
                fail("%s: no extendedResourceClaimStatus: %s" % (n, ps[n]["status"]))
            cl = self.api.get("%s/namespaces/%s/resourceclaims/%s" %
                              (RES, NS, st["resourceClaimName"]))
            res = cl["status"]["allocation"]["devices"]["results"]
            if len(res) != 1 or res[0]["driver"] != DRIVER or res[0]["pool"] != node:
                fail("%s's claim: %s" % (n, res))
            got.append(res[0]["device"])
        if sorted(got) != ["gpu-0", "gpu-1"]:
            fail("extended resource pods got %s" % got)
        left = [n for n in names if n not in bound][0]
        msg = self.wait_unschedulable(left)
        log("extended: %s got %s; %s Pending (%s)" % (bound, got, left, msg[:100]))
        self.delete_all()
        self.retire(node)

    def s_nvidia_claims(self):
        """Claims written for NVIDIA's DRA driver against gpufrac's slices
        (docs/dra.md, "Coming from NVIDIA's DRA driver"): class
        gpu.nvidia.com does not exist here; a selector on NVIDIA's
        attribute domain fails to evaluate on gpufrac's devices; the same
        selector on gpufrac's domain (same attribute name, productName)
        allocates."""
        node = "dra9"
        self.new_node(node, "9")
        sel = 'device.attributes["%s"].productName.contains("H100")'
        cases = [("nv1", "gpu.nvidia.com", None), ("nv2", DRIVER, sel % "gpu.nvidia.com"),
                 ("nv3", DRIVER, sel % DRIVER)]
        for n, cls, cel in cases:
            t = template("t-" + n, "8Gi", 10)
            ex = t["spec"]["spec"]["devices"]["requests"][0]["exactly"]
            ex["deviceClassName"] = cls
            if cel:
                ex["selectors"] = [{"cel": {"expression": cel}}]
            self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS), t)
            self.api.create("/api/v1/namespaces/%s/pods" % NS, pod(n, "t-" + n))
        self.wait_bound(["nv3"])
        for n, want in (("nv1", "device class gpu.nvidia.com does not exist"),
                        ("nv2", "FailedScheduling")):
            def said():
                ev = [e for e in self.events(n) if want in e]
                return ev and ev[-1]
            msg = wait_for("%s's event naming %s" % (n, want), said, 60)
            if self.pods()[n]["spec"].get("nodeName"):
                fail("%s was bound" % n)
            log("%s: %s" % (n, msg[:300]))
        self.delete_all()
        self.retire(node)

    def s_mixed(self):
        """One allocator per device: a node of kube-scheduler's and one of
        gpufrac's (the agent with dra_allocator = gpufrac: every device
        tainted gpu.gpufrac.io/allocator=gpufrac:NoSchedule).  Mode-1 pods
        only ever land on the first, mode-2 pods only on the second."""
        self.start_extender()
        k, g = "dra3k", "dra3g"
        self.new_node(k, "3")
        self.new_node(g, "8", "gpufrac")
        seq = [("m1", "20Gi", 20, False), ("m2", "20Gi", 20, True),
               ("m3", "20Gi", 20, False), ("m4", "10Gi", 20, True)]
        for n, m, c, gated in seq:
            self.share(n, m, c, gated)
            self.wait_bound([n])
        al = self.allocations()
        for n, m, c, gated in seq:
            self.check_result(n, al[n][0], al[n][1], g if gated else k, quantity(m), c)
        if self.check_sums(k) != (40 * GiB, 40, 2) or self.check_sums(g) != (30 * GiB, 40, 2):
            fail("mixed: %s %s" % (self.check_sums(k), self.check_sums(g)))
        self.delete_all()
        self.retire(k)
        self.retire(g)

    def s_mixed_burst(self):
        """Both allocators at once, as kube-scheduler's client limits allow
        (deploy/dra/kube-scheduler-config.yaml: qps 50; the bench runs 10
        and 3): 8 mode-1 and 8 mode-2 pods of 10Gi created together on a
        node of each (80Gi each: 8 fit each).  Every pod binds, neither GPU
        is over-filled, and gpufrac gives nothing back (no DRAOverfilled
        event): kube-scheduler never allocates gpufrac's devices."""
        self.start_extender()
        self.bursts = getattr(self, "bursts", 0) + 1
        k, g = "dra4k-%d" % self.bursts, "dra4g-%d" % self.bursts
        self.new_node(k, "4")
        self.new_node(g, "5", "gpufrac")
        names = []
        for i in range(8):
            for gated in (False, True):
                n = "b%d%s" % (i, "g" if gated else "k")
                self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                                template("t-" + n, "10Gi", 10))
                names.append((n, gated))
        for n, gated in names:
            self.api.create("/api/v1/namespaces/%s/pods" % NS, pod(n, "t-" + n, gated))
        try:
            self.wait_bound([n for n, _ in names], 120)
        except Failure:
            stuck = self.requeue_gap(names, k)
            if not stuck:
                # The failure stands; its pods, templates and nodes go, so
                # the next burst and the scenarios after it start clean
                # instead of failing on what this one left (HTTP 409,
                # claims, pods landing on this burst's GPUs).
                log("mixed_burst failed: usage %s %s" % (self.check_sums(k),
                                                         self.check_sums(g)))
                self.delete_all()
                self.retire(k)
                self.retire(g)
                raise
            names = [(n, gated) for n, gated in names if n not in stuck]
        time.sleep(2)
        uk, ug = self.check_sums(k), self.check_sums(g)
        al = self.allocations()
        wrong = [n for n, gated in names if al[n][1]["pool"] != (g if gated else k)]
        if wrong:
            fail("burst: pods on the other allocator's GPU: %s" % wrong)
        over = [e for e in self.api.items("/api/v1/namespaces/%s/events" % NS)
                if e.get("reason") == "DRAOverfilled"]
        log("burst: %s %d GiB %d shares, %s %d GiB %d shares, %d give-backs" %
            (k, uk[0] // GiB, uk[2], g, ug[0] // GiB, ug[2], len(over)))
        if over:
            fail("burst: gpufrac gave claims back: %s" % over[0].get("message"))
        # The alarm's counter on /metrics, and what gpufrac placed.
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.c.ext_port,
                                    timeout=10) as r:
            m = dict(ln.rsplit(" ", 1) for ln in r.read().decode().splitlines()
                     if ln.startswith("gpufrac_dra_"))
        if m.get("gpufrac_dra_overfilled_total") != "0" or \
                int(m.get("gpufrac_dra_placed_total", "0")) < 8:
            fail("burst: /metrics %s" % m)
        self.delete_all()
        self.retire(k)
        self.retire(g)


    def s_taint_rule(self):
        """A DeviceTaintRule (resource.k8s.io/v1) NoSchedule on one of
        two mode-2 GPUs: gpufrac honours it as kube-scheduler does.  Pods
        whose claims do not tolerate it land only on the other GPU, and
        wait gated once that is full; a claim tolerating it lands on the
        tainted GPU and its result records the toleration it used beside
        the allocator's.  Deleting the rule frees the GPU again."""
        self.start_extender()
        a, b = "dra11a", "dra11b"
        self.new_node(a, "b", "gpufrac")
        self.new_node(b, "c", "gpufrac")
        rule = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
                "metadata": {"name": "e2e-maintenance"},
                "spec": {"deviceSelector": {"driver": DRIVER, "pool": a, "device": "gpu-0"},
                         "taint": {"key": "example.com/maintenance", "value": "fw",
                                   "effect": "NoSchedule"}}}
        self.api.create(RES + "/devicetaintrules", rule)
        time.sleep(1)  # the extender's informer sees it
        # 40Gi each: two fill b; were a admitted, the engine could pick it.
        for n in ("r1", "r2", "r3"):
            self.share(n, "40Gi", 10, True)
        deadline, bound = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            bound = {n: p["spec"]["nodeName"] for n, p in self.pods().items()
                     if p["spec"].get("nodeName")}
            if len(bound) >= 2:
                break
            time.sleep(0.5)
        if any(v == a for v in bound.values()):
            fail("taint_rule: a pod without a toleration landed on the tainted "
                 "device: %s" % bound)
        if len(bound) != 2:
            fail("taint_rule: expected two pods on %s, bound %s" % (b, bound))
        left = [n for n in ("r1", "r2", "r3") if n not in bound][0]
        self.stays_gated(left)
        # A claim that tolerates the rule's taint lands on a, and records it.
        t = template("t-tol", "10Gi", 10)
        tol = {"key": "example.com/maintenance", "operator": "Equal", "value": "fw",
               "effect": "NoSchedule"}
        t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [tol]
        self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS), t)
        self.api.create("/api/v1/namespaces/%s/pods" % NS, pod("tol", "t-tol", True))
        self.wait_bound(["tol"], 60)
        al = self.allocations()
        r = al["tol"][1]
        if r["pool"] != a:
            fail("taint_rule: the tolerating claim went to %s, not %s" % (r["pool"], a))
        own = {"key": "gpu.gpufrac.io/allocator", "operator": "Equal",
               "value": "gpufrac", "effect": "NoSchedule"}
        if sorted(map(json.dumps, r.get("tolerations", []))) != \
                sorted(map(json.dumps, [own, tol])):
            fail("taint_rule: recorded tolerations %s, want %s" %
                 (r.get("tolerations"), [own, tol]))
        log("taint_rule: %s on %s, tol on %s with tolerations %s" %
            (sorted(bound), b, a, r["tolerations"]))
        # The rule gone, the waiting pod fits on a again.
        self.api.delete(RES + "/devicetaintrules/e2e-maintenance")
        self.wait_bound([left], 60)
        self.delete_all()
        self.retire(a)
        self.retire(b)

    def requeue_gap(self, names, k):
        """kube-scheduler's own gap, not gpufrac's (docs/dra.md, "One
        allocator per device"): a mode-1 pod tried while another pod's
        claim on the same GPU was between Reserve and the end of its
        PreBind can be found not to fit, and is then parked as
        unschedulable; the claim updates after it cannot free capacity,
        so nothing requeues it before kube-scheduler's periodic flush of
        unschedulable pods (5 min), though its GPU has room.  Returns the
        pending pods when that is all that went wrong: every pod not bound
        is a mode-1 pod, Pending with "cannot allocate all claims", and
        kube-scheduler's GPU has room for it (they are deleted, logged);
        else None (a real failure)."""
        ps = self.pods()
        left = [n for n, gated in names if not ps.get(n, {}).get("spec", {}).get("nodeName")]
        mem, _, shares = self.check_sums(k)
        why = [e for n in left for e in self.events(n) if "cannot allocate all claims" in e]
        if not left or any(g for n, g in names if n in left) or \
                mem + 10 * GiB * len(left) > 80 * GiB or len(why) < len(left):
            return None
        log("mixed_burst: kube-scheduler did not retry %s (Pending \"cannot allocate "
            "all claims\" beside %d GiB free on %s, %d shares): its requeue gap, "
            "not an allocation of gpufrac's" % (left, (80 * GiB - mem) // GiB, k, shares))
        for n in left:
            self.api.delete("/api/v1/namespaces/%s/pods/%s" % (NS, n), gracePeriodSeconds=0)
        return left

    PREEMPT_ASKS = {"a": ("30Gi", 30, "e2e-dra-p10"), "b": ("20Gi", 20, "e2e-dra-p10"),
                    "c": ("10Gi", 10, "e2e-dra-p1"), "d": ("20Gi", 20, "e2e-dra-p20")}

    def full_gpu(self, node, tail):
        """s_preempt's scene: node's one gpufrac GPU full of a, b, c, d
        (grace period 30 s); returns their UIDs."""
        self.start_extender()
        self.new_node(node, tail, "gpufrac")
        for name, value in (("e2e-dra-p1", 1), ("e2e-dra-p10", 10),
                            ("e2e-dra-p20", 20), ("e2e-dra-p1000", 1000)):
            try:
                self.api.create("/apis/scheduling.k8s.io/v1/priorityclasses", {
                    "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": name}, "value": value})
            except ApiError as e:
                if e.code != 409:
                    raise
        for n, (m, c, pc) in self.PREEMPT_ASKS.items():
            self.share(n, m, c, True, pc, grace=30)
        self.wait_bound(list(self.PREEMPT_ASKS))
        # Running and Ready, as kubelet would report them once loaded: mode
        # 2's guard holds a bound pod that is not Ready (loading its
        # weights) against any preemptor less than 1,000,000 above it
        for n in self.PREEMPT_ASKS:
            self.ready(n)
        used = self.check_sums(node)
        if used[0] != 80 * GiB or used[1] != 80:
            fail("preempt: the four shares hold %s of %s/gpu-0, expected 80Gi, 80 cores"
                 % (used, node))
        return {n: p["metadata"]["uid"] for n, p in self.pods().items()}

    def ready(self, name):
        """Marks pod name Running and Ready (no kubelet runs here)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.api.request("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (NS, name),
                         {"status": {"phase": "Running", "conditions": [
                             {"type": "Ready", "status": "True",
                              "lastTransitionTime": now}]}},
                         "application/merge-patch+json")

    def evicted(self, uids):
        """The scene's pods evicted (being deleted, gone or replaced)."""
        now = self.pods()
        return sorted(n for n in self.PREEMPT_ASKS if n not in now or
                      now[n]["metadata"]["uid"] != uids[n] or
                      now[n]["metadata"].get("deletionTimestamp"))

    def ext_metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.c.ext_port,
                                    timeout=10) as r:
            return dict(ln.rsplit(" ", 1) for ln in r.read().decode().splitlines()
                        if ln.startswith("gpufrac_"))

    def s_preempt_budget(self):
        """s_preempt's GPU with a PodDisruptionBudget over a (minAvailable
        1; a is never Ready, so the disruption controller allows none): {a}
        would break it, so gpufrac evicts b and c (two victims, no budget
        broken, 30Gi and 30 cores together; b, c beat c, d on priority: 10
        against 20)."""
        path = "/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % NS
        node = "dra-q"
        self.start_extender()
        self.api.create(path, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-a", "namespace": NS},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"e2e-pod": "a"}}}})
        wait_for("the extender knowing the budget",
                 lambda: self.ext_metrics().get("gpufrac_extender_pdbs") == "1", 30)
        uids = self.full_gpu(node, "8")
        wait_for("the budget allowing no disruption", lambda: self.api.get(
            path + "/keep-a").get("status", {}).get("expectedPods") == 1, 30)
        self.share("hi", "30Gi", 30, True, "e2e-dra-p1000")
        wait_for("victims evicted", lambda: self.evicted(uids), 30, 0.5)
        time.sleep(3)
        gone = self.evicted(uids)
        pdb = self.api.get(path + "/keep-a")
        log("preempt_budget: disruptionsAllowed %s; evicted %s; events of hi %s" %
            (pdb.get("status", {}).get("disruptionsAllowed"), gone, self.events("hi")[-1:]))
        if gone != ["b", "c"]:
            fail("preempt_budget: evicted %s, expected b and c (a's budget allows none)" % gone)
        for n in gone:
            self.api.delete("/api/v1/namespaces/%s/pods/%s" % (NS, n), gracePeriodSeconds=0)
        self.wait_bound(["hi"], 60)
        al = self.allocations()
        self.check_result("hi", al["hi"][0], al["hi"][1], node, 30 * GiB, 30)
        self.api.delete(path + "/keep-a")
        self.delete_all()
        self.retire(node)

    def s_preempt(self):
        """One gpufrac GPU (80Gi, 100 cores) full of lower-priority shares:

            a 30Gi 30 cores (priority 10)   b 20Gi 20 (priority 10)
            c 10Gi 10 (priority 1)          d 20Gi 20 (priority 20)

        lo (30Gi, 30 cores, priority 1) waits gated: nothing is below it.
        Then hi (30Gi, 30 cores, priority 1000), gated: it fits nowhere.  One
        victim frees it, a (b, c or d alone free too little; kube-
        scheduler's way, least important first, would take c, then b, and
        still not fit).  The victims have a grace period and no kubelet
        runs, so an evicted pod stays Terminating, its claim allocated,
        until the harness removes it (as kubelet would once its containers
        stopped).  The freed share is held for hi meanwhile: lo, looked at
        first on every pass, must not take it once a's claim is gone."""
        node = "dra-p"
        uids = self.full_gpu(node, "7")
        self.share("lo", "30Gi", 30, True, "e2e-dra-p1")
        self.stays_gated("lo", 3)
        self.share("hi", "30Gi", 30, True, "e2e-dra-p1000")

        wait_for("a victim evicted", lambda: self.evicted(uids), 30, 0.5)
        time.sleep(3)  # no second eviction, and hi waits for a's claim
        gone = self.evicted(uids)
        log("preempt: evicted %s; events of hi %s" % (gone, self.events("hi")[-1:]))
        if gone != ["a"]:
            fail("preempt: evicted %s, expected exactly a" % gone)
        if self.pods()["hi"]["spec"].get("nodeName"):
            fail("preempt: hi bound while a's claim was still allocated")
        self.api.delete("/api/v1/namespaces/%s/pods/a" % NS, gracePeriodSeconds=0)
        try:
            self.wait_bound(["hi"], 60)
        except Failure:
            lo = self.pods().get("lo", {})
            fail("preempt: hi not bound; lo bound to %r; events of hi %s" %
                 (lo.get("spec", {}).get("nodeName"), self.events("hi")[-3:]))
        if "lo" not in self.pods():
            fail("preempt: lo is gone: it took the share freed for hi, which "
                 "then preempted it in turn (events of lo %s)" % self.events("lo")[-3:])
        self.stays_gated("lo", 3)
        now = self.pods()
        for n in ("b", "c", "d"):
            if now[n]["metadata"]["uid"] != uids[n] or now[n]["metadata"].get("deletionTimestamp"):
                fail("preempt: %s was evicted too" % n)
        al = self.allocations()
        self.check_result("hi", al["hi"][0], al["hi"][1], node, 30 * GiB, 30)
        if now["hi"]["spec"]["nodeName"] != node:
            fail("preempt: hi bound to %s, not %s" % (now["hi"]["spec"]["nodeName"], node))
        used = self.check_sums(node)
        if used[0] != 80 * GiB or used[1] != 80:
            fail("preempt: after it %s/gpu-0 holds %s, expected 80Gi, 80 cores" % (node, used))
        ev_a = [e for e in self.events("a") if e.startswith("GpufracPreempted")]
        ev_hi = [e for e in self.events("hi") if e.startswith("GpufracPreempting")]
        if not ev_a or not ev_hi:
            fail("preempt: events on a %s, on hi %s" % (self.events("a"), self.events("hi")))
        log("preempt: hi bound to %s; a's event %r" % (node, ev_a[0]))
        m = self.ext_metrics()
        if m.get("gpufrac_dra_preempt_evictions_total") != "1" or \
                m.get("gpufrac_dra_preemptions_total") != "1" or \
                m.get("gpufrac_dra_preempt_holds") != "0":
            fail("preempt: /metrics %s" % m)
        self.delete_all()
        self.retire(node)

    def s_preempt_slow(self):
        """s_preempt's GPU, and a victim that takes long to terminate (no
        kubelet runs: an evicted pod stays Terminating until the harness
        removes it).  hi (priority 1000) evicts a alone; while a is still
        Terminating nothing else is evicted, past the hold's old fixed 2
        minutes and past its bound (a's 30 s grace + 2 minutes), as
        kube-scheduler never preempts again for a nominated pod whose
        victims are still terminating.  Then a goes and hi is bound there.
        Before 2026-12-05 (a tester's finding) the hold ended after 2
        minutes and a second set of victims was evicted."""
        node = "dra-s"
        uids = self.full_gpu(node, "6")
        self.share("hi", "30Gi", 30, True, "e2e-dra-p1000")
        wait_for("a victim evicted", lambda: self.evicted(uids), 30, 0.5)
        t0 = time.time()
        while time.time() < t0 + 30 + 120 + 15:
            gone = self.evicted(uids)
            if gone != ["a"]:
                fail("preempt_slow: evicted %s %.0f s after the first eviction, "
                     "while a was still terminating; expected a alone" %
                     (gone, time.time() - t0))
            if self.pods()["hi"]["spec"].get("nodeName"):
                fail("preempt_slow: hi bound while a's claim was still allocated")
            time.sleep(2)
        log("preempt_slow: %.0f s on, evicted %s alone; events of hi %s" %
            (time.time() - t0, self.evicted(uids), self.events("hi")[-1:]))
        self.api.delete("/api/v1/namespaces/%s/pods/a" % NS, gracePeriodSeconds=0)
        self.wait_bound(["hi"], 60)
        al = self.allocations()
        self.check_result("hi", al["hi"][0], al["hi"][1], node, 30 * GiB, 30)
        self.delete_all()
        self.retire(node)

    def s_named_claim(self):
        """A claim named by its pod (resourceClaimName, not a template),
        allocated by gpufrac: it carries kube-scheduler's delete-protection
        finalizer, so when its pod goes kube-controller-manager deallocates
        it and its share is free again (a tester's finding: without the
        finalizer the allocation stayed until the claim was deleted)."""
        self.start_extender()
        node = "dra13"
        self.new_node(node, "d", "gpufrac")
        claim = template("na", "40Gi", 40)
        claim["kind"] = "ResourceClaim"
        claim["spec"] = claim["spec"]["spec"]
        self.api.create("%s/namespaces/%s/resourceclaims" % (RES, NS), claim)
        p = pod("na-pod", "unused", True)
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "na"}]
        self.api.create("/api/v1/namespaces/%s/pods" % NS, p)
        self.wait_bound(["na-pod"], 60)
        path = "%s/namespaces/%s/resourceclaims/na" % (RES, NS)
        cl = self.api.get(path)
        fin = cl["metadata"].get("finalizers", [])
        if "resource.kubernetes.io/delete-protection" not in fin or \
                not cl.get("status", {}).get("allocation"):
            fail("named claim na: finalizers %s, status %s" % (fin, cl.get("status")))
        self.api.delete("/api/v1/namespaces/%s/pods/na-pod" % NS, gracePeriodSeconds=0)
        try:
            wait_for("named claim na deallocated after its pod went", lambda: not self.api.get(
                path).get("status", {}).get("allocation"), 60)
        except Failure:
            fail("named claim na still allocated 60 s after its pod went: %s" %
                 self.api.get(path).get("status"))
        log("named claim na: allocated by gpufrac with the delete-protection finalizer, "
            "deallocated by kube-controller-manager when its pod went")
        self.api.delete(path)
        wait_for("named claim na gone", lambda: not any(
            c["metadata"]["name"] == "na" for c in self.api.items(
                "%s/namespaces/%s/resourceclaims" % (RES, NS))), 60)
        self.delete_all()
        self.retire(node)

    def named(self, name, mem, cores):
        """ResourceClaim name (not a template) asking one share."""
        claim = template(name, mem, cores)
        claim["kind"] = "ResourceClaim"
        claim["spec"] = claim["spec"]["spec"]
        return self.api.create("%s/namespaces/%s/resourceclaims" % (RES, NS), claim)

    def claim_pod(self, name, claims, host=None):
        """A gated pod whose claims are {pod claim name: ResourceClaim name,
        or ("template", t) for one made from template t}; host: a
        nodeSelector on kubernetes.io/hostname."""
        p = pod(name, "unused", True)
        p["spec"]["resourceClaims"] = [
            {"name": k, "resourceClaimTemplateName": v[1]} if isinstance(v, tuple)
            else {"name": k, "resourceClaimName": v} for k, v in claims.items()]
        p["spec"]["containers"][0]["resources"]["claims"] = [{"name": k} for k in claims]
        if host:
            p["spec"]["nodeSelector"] = {"kubernetes.io/hostname": host}
        return self.api.create("/api/v1/namespaces/%s/pods" % NS, p)

    def reserved(self, claim):
        """The uids claim is reserved for, its allocation (None when not
        allocated)."""
        cl = self.api.get("%s/namespaces/%s/resourceclaims/%s" % (RES, NS, claim))
        st = cl.get("status", {})
        return sorted(r.get("uid") for r in st.get("reservedFor", [])), st.get("allocation")

    def s_pass_max(self):
        """One pass writes at most --dra-pass-max pods' claims before it
        checks them and lifts their gates: with 20 pods waiting and a cap
        of 4, kube-scheduler gets the first pods while the rest are still
        to be written (before the cap, every gated pod was written first)."""
        if self.ext:
            self.c.stop_gpufrac(self.ext)
            self.ext = None
        node = "dra-pass"
        self.new_node(node, "7", "gpufrac")
        names = ["p%02d" % i for i in range(20)]
        for n in names:
            self.share(n, "4Gi", 5, True)

        def claims():
            return self.api.items("%s/namespaces/%s/resourceclaims" % (RES, NS))
        wait_for("20 claims made", lambda: len(claims()) == 20, 60, 0.2)
        kc = self.c.sa_kubeconfig("extender", self.c.token("gpufrac-scheduler"))
        ext = self.c.spawn("extender-pass", [
            self.c.gpufrac, "scheduler", "--listen", "127.0.0.1:%d" % self.c.ext_port,
            "--kubeconfig", kc, "--dra", "allocate", "--dra-pass-max", "4"])

        def first_lift():
            ps = self.pods()
            lifted = [n for n in names if GATE not in
                      [g["name"] for g in ps[n]["spec"].get("schedulingGates", [])]]
            if not lifted:
                return None
            done = sum(1 for c in claims() if c.get("status", {}).get("allocation"))
            return lifted, done
        lifted, done = wait_for("a gate lifted", first_lift, 120, 0.05)
        log("first gates lifted (%s) with %d of 20 claims allocated" % (lifted, done))
        # A pass of 4, its check (1 s) and the next pass's 4 at most: before
        # the cap all 20 were allocated before the first lift.
        if done > 12:
            fail("the first gate was lifted with %d of 20 claims allocated: "
                 "the pass wrote more than --dra-pass-max 4" % done)
        self.wait_bound(names, 120)
        used = self.check_sums(node)
        if used[2] != 20:
            fail("%s: %d shares allocated, want 20" % (node, used[2]))
        self.delete_all()
        self.retire(node)
        self.c.stop_gpufrac(ext)

    def s_shared_claim(self):
        """One ResourceClaim (sh, 40Gi 40 cores) named by several gated pods
        in mode 2.  sa gets it allocated by gpufrac; sb, naming it too, is a
        consumer of that allocation: bound to the same node, added to
        reservedFor beside sa, the allocation not written again, the share
        booked once (a 40Gi pod still fits beside it on the 80Gi GPU; the
        extender's gpufrac_dra_booked_memory_bytes says 80Gi, not 120Gi).
        sa deleted: reservedFor holds sb alone, the claim stays allocated.
        sx names sh and a claim of its own (30Gi) while sh's node is full
        and another gpufrac node empty: its pod can only run where sh is,
        so it waits gated with a reason naming sh and its node (not placed
        on the other node, not handed to kube-scheduler), and lands on sh's
        node once room is freed there.  sy names sh with a nodeSelector on
        the other node: kube-scheduler refuses it (the claim is not
        available there) and sh is never reserved for it.  (A tester's
        finding: sb stayed Pending, kube-scheduler's PreBind failing with
        "status.allocation: field cannot be modified once set".)"""
        self.start_extender()
        node, other = "dra14", "dra14b"
        self.new_node(node, "e", "gpufrac")
        self.named("sh", "40Gi", 40)
        uid = {}
        uid["sa"] = self.claim_pod("sa", {"gpu": "sh"})["metadata"]["uid"]
        self.wait_bound(["sa"], 60)
        got, alloc0 = self.reserved("sh")
        if got != [uid["sa"]] or not alloc0:
            fail("shared_claim: sh reserved for %s, allocation %s" % (got, alloc0))
        uid["sb"] = self.claim_pod("sb", {"gpu": "sh"})["metadata"]["uid"]
        self.wait_bound(["sb"], 60)
        ps = self.pods()
        where = {n: ps[n]["spec"].get("nodeName") for n in ("sa", "sb")}
        if where != {"sa": node, "sb": node}:
            fail("shared_claim: bound to %s, expected both on %s" % (where, node))
        got, alloc = self.reserved("sh")
        if got != sorted([uid["sa"], uid["sb"]]):
            fail("shared_claim: sh reserved for %s, expected sa and sb %s" %
                 (got, sorted(uid.values())))
        if alloc != alloc0:
            fail("shared_claim: sh's allocation changed: %s, was %s" % (alloc, alloc0))
        used = self.check_sums(node)
        if used != (40 * GiB, 40, 1):
            fail("shared_claim: %s/gpu-0 holds %s, expected one share of 40Gi 40 cores" %
                 (node, used))
        # Booked once in gpufrac's model: a 40Gi share still fits there.
        self.share("sfill", "40Gi", 40, True)
        self.wait_bound(["sfill"], 60)
        used = self.check_sums(node)
        m = self.ext_metrics()
        if used != (80 * GiB, 80, 2) or m.get("gpufrac_dra_conflicts") != "0" or \
                m.get("gpufrac_dra_booked_memory_bytes") != str(80 * GiB):
            fail("shared_claim: %s/gpu-0 holds %s; extender: conflicts %s, booked %s bytes "
                 "(expected 80Gi)" % (node, used, m.get("gpufrac_dra_conflicts"),
                                      m.get("gpufrac_dra_booked_memory_bytes")))
        # The first consumer goes: the claim stays allocated for the second.
        self.api.delete("/api/v1/namespaces/%s/pods/sa" % NS, gracePeriodSeconds=0)
        wait_for("sh reserved for sb alone", lambda: self.reserved("sh")[0] == [uid["sb"]],
                 60, 0.5)
        time.sleep(2)
        got, alloc = self.reserved("sh")
        if got != [uid["sb"]] or alloc != alloc0:
            fail("shared_claim: after sa went sh is reserved for %s, allocation %s" %
                 (got, alloc))
        # sx: sh pins it to dra14, which is full; dra14b is empty.
        self.new_node(other, "f", "gpufrac")
        self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                        template("t-sx", "30Gi", 30))
        uid["sx"] = self.claim_pod("sx", {"gpu": "sh", "own": ("template", "t-sx")})[
            "metadata"]["uid"]
        self.stays_gated("sx", 5)
        why = [e for e in self.events("sx") if e.startswith("GpufracWaiting")]
        if not why or "sh" not in why[-1] or node not in why[-1]:
            fail("shared_claim: sx's events %s: expected one naming claim sh and node %s" %
                 (self.events("sx"), node))
        log("shared_claim: sx waits: %s" % why[-1])
        # sy: pinned to the other node by its nodeSelector.
        uid["sy"] = self.claim_pod("sy", {"gpu": "sh"}, host=other)["metadata"]["uid"]
        msg = self.wait_unschedulable("sy", 60)
        log("shared_claim: sy refused by kube-scheduler: %s" % msg)
        if "resourceclaim not available on the node" not in msg:
            fail("shared_claim: sy's reason %r does not say the claim is not "
                 "available on %s" % (msg, other))
        self.api.delete("/api/v1/namespaces/%s/pods/sfill" % NS, gracePeriodSeconds=0)
        self.wait_bound(["sx"], 60)
        ps = self.pods()
        if ps["sx"]["spec"]["nodeName"] != node:
            fail("shared_claim: sx bound to %s, not %s" % (ps["sx"]["spec"]["nodeName"], node))
        got, alloc = self.reserved("sh")
        if got != sorted([uid["sb"], uid["sx"]]) or alloc != alloc0:
            fail("shared_claim: sh reserved for %s (sb %s, sx %s), allocation %s" %
                 (got, uid["sb"], uid["sx"], alloc))
        used = self.check_sums(node)
        if used != (70 * GiB, 70, 2):
            fail("shared_claim: %s/gpu-0 holds %s, expected sh and sx's own: 70Gi 70 cores" %
                 (node, used))
        self.api.delete("%s/namespaces/%s/resourceclaims/sh" % (RES, NS))
        self.delete_all()
        self.retire(node)
        self.retire(other)

    def multi_claim(self, name, nreq, mem="1Gi", cores=1):
        """ResourceClaim name asking nreq shares (requests r0..)."""
        reqs = [{"name": "r%d" % i, "exactly": {
            "deviceClassName": DRIVER,
            "capacity": {"requests": {"memory": mem, "cores": str(cores)}}}}
            for i in range(nreq)]
        return self.api.create("%s/namespaces/%s/resourceclaims" % (RES, NS), {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"devices": {"requests": reqs}}})

    def warnings(self, name, reason):
        return [e for e in self.events(name) if e.startswith(reason + ":")]

    def s_limits(self):
        """Issue 27: a pod still gated by another controller holds no GPU;
        a pod over a limit is said once (log, Warning Event, counter) and
        does not spin; 36 shares in one pod are placed; a pod that fits
        nowhere says why on itself."""
        self.start_extender()
        node = "dra-lim"
        self.new_node(node, "e", "gpufrac")
        # Another controller's gate beside gpufrac's: not placed.
        p = pod("og", "t-og", True)
        p["spec"]["schedulingGates"].append({"name": "example.com/other"})
        self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                        template("t-og", "10Gi", 10))
        self.api.create("/api/v1/namespaces/%s/pods" % NS, p)
        wait_for("og's claim made", lambda: self.claim_of(self.pods()["og"]), 60, 0.2)
        self.stays_gated("og", 5)
        self.api.merge_patch("/api/v1/namespaces/%s/pods/og" % NS,
                             {"spec": {"schedulingGates": [{"name": GATE}]}})
        self.wait_bound(["og"], 60)
        # 17 claims: more than gpufrac places for one pod.
        ref0 = int(self.ext_metrics().get("gpufrac_dra_refused_total", "0"))
        for i in range(17):
            self.named("lc%d" % i, "1Gi", 1)
        self.claim_pod("many", {"c%d" % i: "lc%d" % i for i in range(17)})
        wait_for("many: a GpufracRefused event",
                 lambda: self.warnings("many", "GpufracRefused"), 30, 0.5)
        err0 = int(self.ext_metrics().get("gpufrac_dra_errors_total", "0"))
        self.stays_gated("many", 4)
        m = self.ext_metrics()
        ev = self.warnings("many", "GpufracRefused")
        if len(ev) != 1 or "16" not in ev[0]:
            fail("many: events %s" % self.events("many"))
        if int(m.get("gpufrac_dra_refused_total", "0")) != ref0 + 1 or \
                int(m.get("gpufrac_dra_errors_total", "0")) != err0:
            fail("many: refused %s -> %s, errors %s -> %s (it must be counted once)" % (
                ref0, m.get("gpufrac_dra_refused_total"), err0,
                m.get("gpufrac_dra_errors_total")))
        # 36 shares in 3 claims of 12 requests: placed (share IDs for all).
        for i in range(3):
            self.multi_claim("sh%d" % i, 12)
        self.claim_pod("shares", {"s%d" % i: "sh%d" % i for i in range(3)})
        self.wait_bound(["shares"], 60)
        used = self.check_sums(node)
        if used[2] != 37:
            fail("%s: %d shares allocated, want 37 (og's and 36)" % (node, used[2]))
        # A claim it names does not exist: says so on itself.
        self.claim_pod("nocl", {"gpu": "no-such-claim"})
        wait_for("nocl: a GpufracWaiting event", lambda: [
            e for e in self.warnings("nocl", "GpufracWaiting") if "no-such-claim" in e],
            30, 0.5)
        # Fits nowhere: stays gated, says why on itself.
        self.share("big", "79Gi", 10, True)
        wait_for("big: a GpufracWaiting event",
                 lambda: self.warnings("big", "GpufracWaiting"), 30, 0.5)
        self.stays_gated("big", 2)
        log("limits: %s; %s" % (ev[0], self.warnings("big", "GpufracWaiting")[0]))
        # The named claims go once their pods have (delete-protection).
        for c in ["lc%d" % i for i in range(17)] + ["sh%d" % i for i in range(3)]:
            self.api.delete("%s/namespaces/%s/resourceclaims/%s" % (RES, NS, c))
        self.delete_all()
        self.retire(node)

    def s_class_selector(self):
        """Issue 27: a DeviceClass selector gpufrac cannot evaluate is never
        ignored: the class's mode-2 pods stay gated and say why."""
        self.start_extender()
        node = "dra-cls"
        self.new_node(node, "f", "gpufrac")
        path = RES + "/deviceclasses/" + DRIVER
        orig = self.api.get(path)["spec"]["selectors"]
        narrowed = orig[0]["cel"]["expression"] + \
            ' && device.attributes["gpu.gpufrac.io"].productName.contains("A100")'
        self.api.merge_patch(path, {"spec": {"selectors": [{"cel": {"expression": narrowed}}]}})
        try:
            time.sleep(1)  # the feed's informer sees the class
            self.share("cs", "10Gi", 10, True)
            wait_for("cs: a GpufracRefused event",
                     lambda: self.warnings("cs", "GpufracRefused"), 30, 0.5)
            self.stays_gated("cs", 3)
            ev = self.warnings("cs", "GpufracRefused")
            if "productName" not in ev[0]:
                fail("cs: event %s does not name the selector" % ev)
        finally:
            self.api.merge_patch(path, {"spec": {"selectors": orig}})
        self.wait_bound(["cs"], 60)
        log("class_selector: %s; placed once the class was restored" % ev[0])
        self.delete_all()
        self.retire(node)

    def s_example(self):
        """examples/dra-claim-share.yaml applied as written (kubectl apply):
        kube-scheduler allocates its claim 8Gi and 30 cores of the shared
        GPU and binds the pod (no kubelet here: test_dra_kubelet.py
        prepares such claims)."""
        node = "dra10"
        self.new_node(node, "a")
        ex = os.path.join(os.path.dirname(os.path.dirname(DRA_DEPLOY)), "examples",
                          "dra-claim-share.yaml")
        r = self.c.kubectl("apply", "-n", NS, "-f", ex)
        log("kubectl apply -f examples/dra-claim-share.yaml: %s" % " ".join(r.stdout.split()))

        def bound():
            p = self.api.get("/api/v1/namespaces/%s/pods/dra-share" % NS)
            return p if p["spec"].get("nodeName") else None
        try:
            p = wait_for("dra-share bound", bound, 90, 0.5)
        except Failure:
            fail("dra-share not bound: %s" % self.events("dra-share")[-3:])
        cl = self.claim_of(p)
        res = (cl or {}).get("status", {}).get("allocation", {}).get(
            "devices", {}).get("results", [])
        if len(res) != 1:
            fail("dra-share's claim: %s" % (cl and cl.get("status")))
        self.check_result("dra-share", cl, res[0], node, 8 * GiB, 30)
        log("examples/dra-claim-share.yaml: dra-share bound to %s, its claim %s "
            "allocated %s of %s/%s" % (node, cl["metadata"]["name"],
                                       res[0]["consumedCapacity"], node, res[0]["device"]))
        self.api.delete("/api/v1/namespaces/%s/pods/dra-share" % NS, gracePeriodSeconds=0)
        wait_for("dra-share's claim gone", lambda: not self.api.items(
            "%s/namespaces/%s/resourceclaims" % (RES, NS)), 60)
        self.api.delete("%s/namespaces/%s/resourceclaimtemplates/gpu-8gi-30pct" % (RES, NS))
        self.retire(node)

    # ---- node constraints and stranded pods (mode 2) --------------------
    def labelled_node(self, name, tail, labels):
        """A node of gpufrac's (allocator taint) with extra labels."""
        lab = {"nvidia.com/gpu.count": "1",
               "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
               "nvidia.com/gpu.memory": "81920"}
        lab.update(labels)
        self.c.add_node(name, lab)
        self.c.node_status(name, {"cpu": "32", "memory": "256Gi", "pods": "110"})
        self.api.create(RES + "/resourceslices",
                        load_slice(self.c.gpufrac, name, tail, "gpufrac"))

    def constrained(self, name, mem, cores, extra):
        """A gated share pod whose spec gets `extra` (nodeSelector, affinity)."""
        self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                        template("t-" + name, mem, cores))
        p = pod(name, "t-" + name, True)
        p["spec"].update(extra)
        self.api.create("/api/v1/namespaces/%s/pods" % NS, p)

    def on_node(self, name, node):
        """Pod name is bound to node and its claim allocated there."""
        p = self.pods()[name]
        cl = self.claim_of(p)
        res = cl["status"]["allocation"]["devices"]["results"]
        if p["spec"]["nodeName"] != node or res[0]["pool"] != node:
            fail("%s: bound to %s, claim on %s; its constraints allow only %s" %
                 (name, p["spec"]["nodeName"], res[0]["pool"], node))

    def s_node_select(self):
        """Mode 2 places a pod only on nodes its nodeSelector, required node
        affinity and tolerations allow, and not on a cordoned node: a pod
        no node allows stays gated with a GpufracWaiting Event."""
        self.start_extender()
        self.labelled_node("sel-a", "a", {"grp": "ga"})
        self.labelled_node("sel-b", "b", {"grp": "gb"})
        # p0 goes anywhere; the placer then prefers its node (x) for shares
        self.share("p0", "20Gi", 10, True)
        x = self.wait_bound(["p0"])["p0"]["spec"]["nodeName"]
        y = "sel-b" if x == "sel-a" else "sel-a"
        gy = {"sel-a": "ga", "sel-b": "gb"}[y]
        self.constrained("s1", "20Gi", 10, {"nodeSelector": {"grp": gy}})
        self.constrained("s2", "20Gi", 10, {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "grp", "operator": "NotIn",
                                       "values": ["ga" if gy == "gb" else "gb"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In",
                                  "values": ["nowhere"]}]}]}}}})
        self.wait_bound(["s1", "s2"], 60)
        self.on_node("s1", y)
        self.on_node("s2", y)
        # no node has grp=none: it stays gated, and says why
        self.constrained("s3", "1Gi", 1, {"nodeSelector": {"grp": "none"}})
        self.stays_gated("s3")
        wait_for("s3's GpufracWaiting Event", lambda: any(
            e.startswith("GpufracWaiting") and "refused" in e
            for e in self.events("s3")), 30)
        # y tainted NoSchedule: a pod selecting y waits until it tolerates
        self.api.merge_patch("/api/v1/nodes/" + y, {"spec": {"taints": [
            {"key": "e2e/maint", "value": "1", "effect": "NoSchedule"}]}})
        self.constrained("s4", "1Gi", 1, {"nodeSelector": {"grp": gy}})
        self.stays_gated("s4")
        self.api.merge_patch("/api/v1/nodes/" + y, {"spec": {"taints": None,
                                                             "unschedulable": True}})
        self.stays_gated("s4", 3)  # cordoned
        self.api.merge_patch("/api/v1/nodes/" + y, {"spec": {"unschedulable": None}})
        self.wait_bound(["s4"], 60)
        self.on_node("s4", y)
        log("node_select: p0 on %s; s1, s2, s4 on %s; s3 gated: %s" %
            (x, y, self.events("s3")[-1:]))
        self.delete_all()
        self.retire("sel-a")
        self.retire("sel-b")

    def s_stranded(self):
        """A mode-2 pod (labelled gpufrac.io/placement=gpufrac, or seen
        gated by gpufrac) whose gate went before gpufrac placed it (lifted by
        hand here; kube-scheduler's PostFilter deallocating gpufrac's claim
        does the same) is Unschedulable with an unallocated claim that
        kube-scheduler cannot allocate (gpufrac's devices carry the
        allocator taint): the placer allocates it, and kube-scheduler binds
        it to the allocation's node."""
        if self.ext:  # the gate goes while gpufrac is not running
            self.c.stop_gpufrac(self.ext)
            self.ext = None
        node = "strand"
        self.labelled_node(node, "c", {})
        # st1 is mode 2's by the admission policy's label; st2 carries the
        # gate but not the label, and gpufrac never saw it gated: it may be
        # a mode-1 pod, left to kube-scheduler
        for n in ("st1", "st2"):
            self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                            template("t-" + n, "20Gi", 10))
            p = pod(n, "t-" + n, True)
            if n == "st1":
                p["metadata"]["labels"][GATE] = "gpufrac"
            self.api.create("/api/v1/namespaces/%s/pods" % NS, p)
            wait_for("%s's claim made" % n, lambda: self.claim_of(self.pods()[n]), 30)
            self.api.merge_patch("/api/v1/namespaces/%s/pods/%s" % (NS, n),
                                 {"spec": {"schedulingGates": None}})
            self.wait_unschedulable(n, 60)
        t0 = time.monotonic()
        self.start_extender()
        p = self.wait_bound(["st1"], 90)["st1"]
        took = time.monotonic() - t0
        time.sleep(3)
        p2 = self.pods()["st2"]
        c2 = self.claim_of(p2)
        if p2["spec"].get("nodeName") or c2.get("status", {}).get("allocation"):
            fail("st2 (not mode 2's) was placed: node %s, claim %s" %
                 (p2["spec"].get("nodeName"), c2.get("status")))
        self.on_node("st1", node)
        cl = self.claim_of(p)
        r = cl["status"]["allocation"]["devices"]["results"][0]
        self.check_result("st1", cl, r, node, 20 * GiB, 10)
        if r.get("tolerations") != [{"key": "gpu.gpufrac.io/allocator", "operator": "Equal",
                                     "value": "gpufrac", "effect": "NoSchedule"}]:
            fail("st1: not gpufrac's allocation: %s" % r)
        log("stranded: st1 bound on %s %.1f s after the extender started" % (node, took))
        self.delete_all()
        self.retire(node)


# Run by default, in this order; --only picks any.
SCENARIOS = ["accepted", "gate", "kube_allocates", "gpufrac_allocates",
             "extender_scores", "defaults", "whole", "extended", "nvidia_claims",
             "mixed", "mixed_burst",
             "mixed_burst", "mixed_burst", "taint_rule", "named_claim", "example",
             "preempt", "preempt_budget", "preempt_slow", "shared_claim", "pass_max",
             "limits", "class_selector", "node_select", "stranded"]


def main():
    def begin(c):
        c.start(scheduler=False)
        # kube-scheduler with deploy/dra's configuration: the extender
        # scores pods with claims (mode 1); until it runs (ignorable), and
        # for kube_allocates, kube-scheduler works alone.
        with open(os.path.join(DRA_DEPLOY, "kube-scheduler-config.yaml")) as f:
            c.start_scheduler(config=f.read())
        t = DRA(c)
        t.setup()
        return t
    return run_scenarios(
        __doc__, "e2e dra", SCENARIOS,
        lambda k8s, gf, keep: Cluster(k8s, gf, keep, feature_gates=GATES),
        begin, width=18)


if __name__ == "__main__":
    sys.exit(main())
