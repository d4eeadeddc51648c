#!/usr/bin/env python3
"""DRA-mode pods (claims only, no gpufrac.io/gpu) and the real Karpenter on
simulated nodes, against the real control plane of tests/e2e (issue 33;
CTest label e2e; docs/autoscaling.md, "DRA-mode pods").

Usage: test_karpenter_dra.py K8S_BIN HELM GPUFRAC KARPENTER_DIR KWOK_DIR [--keep]

The setup of test_karpenter.py (Karpenter v1.15.0 with its KWOK provider,
KWOK v0.8.0, a GPU NodePool of g-2x-a100, g-4x-a100 and g-8x-a100, each GPU
advertised as nvidia.com/gpu), with deploy/dra applied (DeviceClasses, the
agent's and the extender's DRA RBAC) and the extender run as
`gpufrac scheduler --dra allocate` (mode 2: gpufrac's placer allocates the
claims of pods gated gpufrac.io/placement).  The NodePool labels its nodes
gpufrac.io/enabled=dra; for each new node the test starts `gpufrac node
--mode dra --fake-gpus NxA100-80GB` (N: its instance type's) with
dra_allocator = gpufrac, which publishes the node's ResourceSlices (KWOK's
nodes have no kubelet: the slices are what matters to the placer).

Ten pods, each one claim from a template asking a share of 24Gi and 30
cores (0.3 of an 80Gi GPU), created gated, no GPU node in the cluster:

  off  the bridge off (--autoscale-placeholders off): the placer finds no
       device, the pods stay gated (kube-scheduler never sees them, no
       Unschedulable condition), and Karpenter buys nothing in 30 s.
  on   the bridge on: it counts the placer's "fits no device" pods as
       demand, packs them 3 a GPU (72Gi, 90 cores), 4 GPUs, and asks one
       g-4x-a100 by a placeholder; Karpenter buys exactly that node; its
       agent publishes its slices; the placeholder goes; the placer
       allocates every claim there and the pods bind.
  score  mode 1 (`--dra score`, kube-scheduler allocates; new nodes' agents
       without the allocator taint): ten more such pods, not gated, found
       Unschedulable by kube-scheduler's DRA plugin (the mode 2 node's
       devices are gpufrac's to allocate); Karpenter skips them by itself
       ("Dynamic Resource Allocation requirements, not yet supported");
       the bridge asks one more g-4x-a100, Karpenter buys it, kube-scheduler
       allocates there and binds them.
"""

import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import DEPLOY, Cluster, Failure, e2e_args, free_port, log, run_once  # noqa: E402
from test_k8s import NS, SLOTS, Extender  # noqa: E402
import test_karpenter as tk  # noqa: E402

GATES = {"DRAConsumableCapacity": True}
GATE = "gpufrac.io/placement"
PODS = 10
MEM, CORES = "24Gi", "30"
# 3 a GPU (3 x 24Gi = 72Gi of 80Gi, 3 x 30 = 90 cores of 100): 4 GPUs, the
# pool's 4-GPU type.
PACKED_GPUS = [4]
DOC = __doc__


def fail(msg):
    raise Failure(msg)


class DraExtender(Extender):
    """gpufrac scheduler --dra allocate, the bridge on or off, with the
    pool's types (--autoscale-node-types) and --autoscale-after as
    test_karpenter.py."""

    def __init__(self, c, name, port, kc, bridge, mode):
        super().__init__(c, name, port, kc)
        self.bridge, self.mode = bridge, mode

    def start(self):
        self.proc = self.c.spawn(self.name, [
            self.c.gpufrac, "scheduler", "--listen", "127.0.0.1:%d" % self.port,
            "--kubeconfig", self.kc, "--dra", self.mode,
            "--autoscale-placeholders", "on" if self.bridge else "off",
            "--autoscale-after", tk.AFTER, "--autoscale-node-types", tk.node_types()])
        return self


class DraScenario(tk.Scenario):
    def nodepool(self, disruption):
        self.c.kubectl("apply", "--server-side", "--force-conflicts",
                       "--field-manager=e2e", "-f", "-", input=json.dumps({
                           "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                           "metadata": {"name": tk.POOL},
                           "spec": {"template": {
                               "metadata": {"labels": {"gpufrac.io/enabled": "dra"}},
                               "spec": {"nodeClassRef": {
                                   "group": "karpenter.kwok.sh", "kind": "KWOKNodeClass",
                                   "name": "default"},
                                   "requirements": [{
                                       "key": "node.kubernetes.io/instance-type",
                                       "operator": "In",
                                       "values": [t["name"] for t in tk.instance_types()]}],
                                   "expireAfter": "Never"}},
                               "disruption": disruption}}))

    def plugin_registered(self, node, n):
        """A DRA node advertises no gpufrac.io/gpu: nothing to add."""

    def start_agent(self, node, p):
        """The DRA agent for node with its instance type's A100s (fake),
        the allocator taint on its devices (mode 2), as gpufrac-node."""
        n = self.gpus_of(node)
        cfg = self.c.node_conf(node, SLOTS)
        d = os.path.dirname(cfg)
        with open(cfg, "a") as f:
            f.write("dra_registry_dir = %s/plugins_registry\n"
                    "dra_plugin_dir = %s/plugins/gpu.gpufrac.io\n"
                    "dra_allocator = %s\n" % (d, d, self.allocator))
        self.agents[node] = self.c.spawn("agent-" + node, [
            self.c.gpufrac, "node", "--mode", "dra", "--fake-gpus", "%dxA100-80GB" % n,
            "--node-name", node, "--kubeconfig", self.agent_kc, "--config", cfg,
            "--listen", "127.0.0.1:%d" % free_port(), "--interval", "1"])
        log("node %s (%d GPUs): DRA agent started (allocator %s)" %
            (node, n, self.allocator))

    def setup(self):
        t, c = self.t, self.c
        t.apply_deploy()
        c.kubectl("apply", "--server-side", "--field-manager=e2e", "-f",
                  os.path.join(DEPLOY, "autoscale", "autoscale.yaml"))
        for f in ("deviceclasses.yaml", "node-rbac.yaml", "scheduler-rbac.yaml"):
            c.kubectl("apply", "--server-side", "--field-manager=e2e", "-f",
                      os.path.join(DEPLOY, "dra", f))
        c.namespace(NS)
        c.kubectl("scale", "-n", "gpufrac-system", "deployment/gpufrac-scheduler",
                  "--replicas=0")
        # no DaemonSet pod on DRA nodes: the test starts the agent itself
        t.agent_pod = lambda node: {"node": node}
        self.allocator = "gpufrac"  # mode 2; mode 1: kube-scheduler
        self.agent_kc = c.sa_kubeconfig("agent-dra", c.token("gpufrac-node"))
        self.start_node_lifecycle()
        self.ext_kc = c.sa_kubeconfig("extender", c.token("gpufrac-scheduler"))
        self.start_dra_extender(False)
        self.start_kwok()
        self.start_karpenter()
        self.watcher.start()
        self.wait("Karpenter's NodePool ready", lambda: any(
            cd.get("type") == "Ready" and cd.get("status") == "True"
            for cd in self.api.get("/apis/karpenter.sh/v1/nodepools/" + tk.POOL)
            .get("status", {}).get("conditions", [])), 60)
        self.api.create("/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates" % NS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "share-24gi", "namespace": NS},
            "spec": {"spec": {"devices": {"requests": [{
                "name": "gpu", "exactly": {
                    "deviceClassName": "gpu.gpufrac.io",
                    "capacity": {"requests": {"memory": MEM, "cores": CORES}}}}]}}}})
        log("Karpenter and KWOK running; NodePool %s ready" % tk.POOL)

    def start_dra_extender(self, bridge, mode="allocate"):
        if getattr(self.t, "ext", None):
            self.c.stop_gpufrac(self.t.ext.proc)
        ext = DraExtender(self.c, "extender-%s-bridge-%s" % (mode, "on" if bridge else "off"),
                          self.c.ext_port, self.ext_kc, bridge, mode).start()
        ext.ready_leader()
        self.t.ext = ext

    def claim_pod(self, name, gated=True):
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"schedulingGates": [{"name": GATE}] if gated else [],
                         "containers": [{
                             "name": "main", "image": "registry.k8s.io/pause:3.10",
                             "resources": {"claims": [{"name": "gpu"}],
                                           "requests": {"cpu": "100m",
                                                        "memory": "64Mi"}}}],
                         "resourceClaims": [{"name": "gpu",
                                             "resourceClaimTemplateName": "share-24gi"}],
                         "terminationGracePeriodSeconds": 0}}

    def pods(self, prefix="dra-"):
        return {p["metadata"]["name"]: p for p in
                self.api.items("/api/v1/namespaces/%s/pods" % NS)
                if p["metadata"]["name"].startswith(prefix)}

    def s_off(self):
        """The bridge off: nothing buys a node for gated claim-only pods."""
        names = ["dra-%d" % i for i in range(PODS)]
        for n in names:
            self.api.create("/api/v1/namespaces/%s/pods" % NS, self.claim_pod(n))
        self.t0 = time.monotonic()
        ext_log = self.t.ext.proc.logpath

        def said():
            with open(ext_log, errors="replace") as fh:
                text = fh.read()
            return all("pod %s/%s stays gated" % (NS, n) in text for n in names)
        self.wait("the placer: no device for any of the %d pods" % PODS, said, 60)
        time.sleep(30)
        claims = self.nodeclaims()
        ph = self.api.items("/api/v1/namespaces/%s/pods" % tk.PH_NS,
                            labelSelector=tk.PH_LABEL + "=true")
        pods = self.pods()
        gated = sorted(n for n, p in pods.items()
                       if GATE in [g["name"] for g in p["spec"].get("schedulingGates", [])])
        unsched = [n for n, p in pods.items() if any(
            cd.get("type") == "PodScheduled" and cd.get("reason") == "Unschedulable"
            for cd in p.get("status", {}).get("conditions", []))]
        log("off: %d pods gated, %d Unschedulable; after 30 s: %d NodeClaims, %d "
            "placeholders" % (len(gated), len(unsched), len(claims), len(ph)))
        if len(gated) != PODS or unsched or claims or ph:
            fail("with the bridge off: %d gated, Unschedulable %s, %d NodeClaims, %d "
                 "placeholders (want %d gated, none of the others)" %
                 (len(gated), unsched, len(claims), len(ph), PODS))
        self.report["off"] = {"gated": len(gated), "unschedulable": len(unsched),
                              "nodeclaims": len(claims), "placeholders": len(ph),
                              "waited_s": 30}

    def s_on(self):
        """The bridge on: the packing's nodes bought, the pods placed and
        bound there (the pods of off, or made now when run alone)."""
        self.start_dra_extender(True)
        t0 = time.monotonic()
        have = self.pods()
        for i in range(PODS):
            if "dra-%d" % i not in have:
                self.api.create("/api/v1/namespaces/%s/pods" % NS,
                                self.claim_pod("dra-%d" % i))
        self.report["on"] = self.bought("dra-", [], "mode 2", t0,
                                        "after the bridge came on")

    def s_score(self):
        """Mode 1: kube-scheduler allocates; the pods are Unschedulable,
        Karpenter skips them, the bridge buys."""
        for n in self.pods():
            self.api.delete("/api/v1/namespaces/%s/pods/%s" % (NS, n), gracePeriodSeconds=0)
        self.wait("the mode 2 pods gone", lambda: not self.pods(), 60)
        # The pool to zero: an empty node of the same type (its devices
        # gpufrac's to allocate, not kube-scheduler's) would take the
        # placeholder and be taken as its capacity.
        for c in self.nodeclaims():
            self.api.delete("/apis/karpenter.sh/v1/nodeclaims/" + c["metadata"]["name"])
        self.wait("the pool at zero nodes", lambda: not self.pool_nodes(), 120)
        before = []
        self.allocator = "kube-scheduler"
        self.start_dra_extender(True, "score")
        self.placeholders_seen.clear()
        t0 = time.monotonic()
        for i in range(PODS):
            self.api.create("/api/v1/namespaces/%s/pods" % NS,
                            self.claim_pod("m1-%d" % i, gated=False))
        said = "skipping pod with Dynamic Resource Allocation requirements"

        def verdict():
            with open(self.karpenter.logpath, errors="replace") as fh:
                return any(said in ln and '"m1-' in ln for ln in fh)
        self.wait("Karpenter's verdict on the mode 1 pods", verdict, 60)
        self.report["score"] = self.bought("m1-", before, "mode 1", t0,
                                           "after they were created")
        self.report["score"]["karpenter_alone"] = said

    def bought(self, prefix, before, what, t1, since):
        """Waits for the PODS pods named prefix<i> to bind; checks that
        Karpenter bought the packing's nodes (beyond those in before) and
        that every claim is allocated; returns the figures."""
        names = ["%s%d" % (prefix, i) for i in range(PODS)]

        def bound():
            pods = self.pods(prefix)
            return all(pods.get(n, {}).get("spec", {}).get("nodeName") for n in names)
        try:
            self.wait("the %d claim-only pods bound" % PODS, bound, 240)
        except Failure:
            fail("the pods were not bound in 240 s: %d NodeClaims (%s), placeholders "
                 "asked %s" % (len(self.nodeclaims()),
                               [c["metadata"]["name"] for c in self.nodeclaims()],
                               sorted(self.placeholders_seen.values())))
        took = time.monotonic() - t1
        pods = self.pods(prefix)
        where = {}
        for n in names:
            where.setdefault(pods[n]["spec"]["nodeName"], []).append(n)
        nodes = [n for n in self.pool_nodes() if n["metadata"]["name"] not in before]
        gpus = sorted(self.gpus_of(n["metadata"]["name"]) for n in nodes)
        claims = [c for c in self.nodeclaims()
                  if c.get("status", {}).get("nodeName") not in before]
        asked = sorted(int(v) for v in self.placeholders_seen.values())
        log(("%s: %d claim-only pods bound %.1f s " + since + ", on %s; "
             "placeholders asked %s GPUs; Karpenter bought %d nodes (%s GPUs), %d "
             "NodeClaims") % (what, PODS, took, {k: len(v) for k, v in where.items()},
                              asked, len(nodes), gpus, len(claims)))
        if set(where) & set(before):
            fail("%s pods bound on nodes there before: %s" % (what, where))
        if gpus != PACKED_GPUS or len(claims) != len(PACKED_GPUS):
            fail("Karpenter bought %s GPUs (%d NodeClaims; placeholders asked %s); the "
                 "packing of %d shares of %s and %s cores needs %s" %
                 (gpus, len(claims), asked, PODS, MEM, CORES, PACKED_GPUS))
        if asked != PACKED_GPUS:
            fail("placeholders asked %s GPUs, want %s" % (asked, PACKED_GPUS))
        for n in names:
            for st in pods[n].get("status", {}).get("resourceClaimStatuses", []):
                cl = self.api.get("/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s"
                                  % (NS, st["resourceClaimName"]))
                alloc = cl.get("status", {}).get("allocation")
                if not alloc:
                    fail("pod %s bound, its claim %s not allocated" %
                         (n, st["resourceClaimName"]))
        self.wait("no placeholder left", lambda: not self.api.items(
            "/api/v1/namespaces/%s/pods" % tk.PH_NS,
            labelSelector=tk.PH_LABEL + "=true"), 30)
        return {"pods": PODS, "nodes": len(nodes), "gpus": gpus,
                "packing": PACKED_GPUS, "placeholders": asked,
                "bound_s": round(took, 1), "bound_since": since, "whole_gpu_would_ask": PODS}

    def run(self):
        self.report = {}
        self.watcher = threading.Thread(target=self.watch, daemon=True)
        try:
            self.setup()
            for s in SCENARIOS:
                log("== %s" % s)
                getattr(self, "s_" + s)()
                self.check_watch()
            self.c.check_alive()
            log("result: %s" % json.dumps(self.report))
        finally:
            with self.agents_mu:
                self.stopping = True
            for name, a in self.agents.items():
                if a:
                    self.c.stop_gpufrac(a, 15)
            self.stop_watch.set()
            if self.watcher.is_alive():
                self.watcher.join(10)
            for p in self.own:
                p.stop(10)


SCENARIOS = [s for s in os.environ.get("E2E_KARPENTER_DRA_SCENARIOS",
                                            "off,on,score").split(",")
             if s]


def main():
    a = e2e_args(DOC, 5)
    if not a:
        return 2
    (k8s_bin, helm, gpufrac, kdir, wdir), keep = a
    for what, path in (("helm", helm), ("Karpenter", os.path.join(kdir, "bin", "karpenter-kwok")),
                       ("KWOK", os.path.join(wdir, "bin", "kwok"))):
        if not os.access(path, os.X_OK):
            print("%s is not at %s: run scripts/install-autoscalers (scripts/install-deps "
                  "does)" % (what, path), file=sys.stderr)
            print("e2e karpenter dra: FAILED")
            return 1
    state = {}

    def body(c):
        c.start()
        s = state["s"] = DraScenario(c, helm, kdir, wdir)
        s.run()

    def on_error(c):
        s = state.get("s")
        for p in (s.own if s else []) + c.extra:
            log("%s log ends:\n%s" % (p.name, p.tail(25)))
    return run_once("e2e karpenter dra",
                    lambda: Cluster(k8s_bin, gpufrac, keep, feature_gates=GATES), body,
                    on_error)


if __name__ == "__main__":
    sys.exit(main())
