#!/usr/bin/env python3
"""Karpenter, the real autoscaler, on simulated nodes against the real
control plane of tests/e2e (issue 33; CTest label e2e).

Usage: test_karpenter.py K8S_BIN HELM GPUFRAC KARPENTER_DIR KWOK_DIR [--keep]

KARPENTER_DIR and KWOK_DIR are what scripts/install-autoscalers built from
the pinned Go modules (tests/k8s/karpenter, tests/k8s/kwok): Karpenter with
its KWOK cloud provider, its CRDs and the provider's Helm chart; KWOK with
its RBAC and stages.  A missing one fails the test.

Setup: the cluster of tests/e2e/cluster.py with deploy/ and
deploy/autoscale/autoscale.yaml applied, the extender (as its
ServiceAccount) with the autoscaler bridge on.  Karpenter's CRDs applied,
the RBAC its chart renders (helm template) applied, Karpenter run with a
token of the chart's ServiceAccount; KWOK's RBAC applied and KWOK run with
its ServiceAccount's token, managing the nodes Karpenter makes (its own
stages, with one more: a pod annotated e2e.gpufrac.io/loading stays Running
and not Ready until the test says it has loaded).  kube-controller-manager's
node lifecycle controller runs too (the cluster leaves it out): it lifts the
not-ready taint off the Ready KWOK nodes.  A KWOKNodeClass and a GPU
NodePool of three instance types, g-2x-a100, g-4x-a100 and g-8x-a100, each
GPU advertised as nvidia.com/gpu (what placeholders ask for) and not as
gpufrac.io/gpu, as no cloud's instance type does (Karpenter then buys
nothing for a pod asking gpufrac.io/gpu: only the bridge buys for gpufrac's
pods; with it declared, Karpenter bought a node for a whole-GPU pod the
bridge had packed too, and the replay bought 8 GPUs for shares, as many as
whole GPUs, in one CI run); the nodes are
labelled gpufrac.io/enabled so that deploy/'s node-agent DaemonSet runs
there.  Whenever that DaemonSet's pod appears on a new node, the test
starts `gpufrac node --fake-gpus NxA100-80GB` (N: the instance type's)
with a token bound to that pod, as kubelet would run it: it publishes the
node's inventory; and the test adds gpufrac.io/gpu, SLOTS a GPU, to the
Node's capacity when the node appears, as kubelet does once gpufrac's
device plugin registers.

  scaleup  28 0.3-GPU shares, no GPU node: the bridge (given the pool's
           types, --autoscale-node-types) packs them 3 a GPU, 10 GPUs: one
           8-GPU node (24 shares) and one 2-GPU node (4); one placeholder
           a node asking its whole GPUs, pinned to its instance type (8 and
           2); Karpenter buys exactly an 8-GPU and a 2-GPU node (10 GPUs;
           whole GPUs would be 28; placeholders of one size, 8, bought 16),
           the agents publish them, the placeholders go, every share binds.
           Karpenter buys nothing for the share pods themselves (they ask
           gpufrac.io/gpu-compute, which no instance type has): NodeClaims
           made = placeholders' nodes.
  dra      a claim-only (DRA) pod no ResourceSlice can serve: Karpenter
           buys nothing ("skipping pod with Dynamic Resource Allocation
           requirements, not yet supported by Karpenter", its default
           IGNORE_DRA_REQUESTS=true) and the bridge, here without --dra
           (no DRA feed to size claims with), makes no placeholder; with
           --dra it does: test_karpenter_dra.py.
  consolidate  the shares deleted; eight whole-GPU pods the user protects
           (karpenter.sh/do-not-disrupt) keep the 8-GPU node full (its
           nvidia.com/gpu looks free: the bridge's placeholders keep off
           it); consolidation (WhenEmptyOrUnderutilized, consolidateAfter
           5s) removes the empty 2-GPU one.  Then, with the extender's guard off and then on: a pod
           loading its weights (KWOK leaves it Running, not Ready) gets a
           new node (a 2-GPU one); one protected pod leaves the full node, so Karpenter
           could move the loading pod there and free the new node.  Without
           the guard it evicts the loading pod; with it, not while it
           loads, and the node is freed once it has loaded (Ready for
           --guard-settle 5s).
  zero     every pod gone: Karpenter takes the pool to zero nodes; one
           share then waits for a node: its time from creation to Running.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time
import traceback

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (DEPLOY, Cluster, Failure, Proc, e2e_args, free_port, log,  # noqa: E402
                     run_once, wait_for)
from test_k8s import E2E, SLOTS, Extender, NS, pod  # noqa: E402

PH_NS = "gpufrac-system"
PH_LABEL = "gpufrac.io/placeholder"
KNS = "karpenter"
POOL = "gpu"
GPU_TYPES = (2, 4, 8)
# 0.3 GPU each, 3 a GPU: 10 GPUs (28 as whole GPUs), which the pool's types
# hold as one 8-GPU node (24 shares) and one 2-GPU node (4): what Karpenter
# must buy.  Placeholders of one size, 8 (the bridge without node types),
# made it buy two 8-GPU nodes, 16 GPUs.
SHARES = 28
PACKED_GPUS = [2, 8]
LOADING = "e2e.gpufrac.io/loading"
KEEP = "e2e.gpufrac.io/keep"
# The bridge's --autoscale-after (default 1m).  2 s: the first of two nodes
# bought together ends only the placeholders bound there, not the other
# node's (docs/autoscaling.md, "Karpenter, measured", defect 3).
AFTER = "2s"
DOC = __doc__


def fail(msg):
    raise Failure(msg)


def instance_types():
    """The NodePool's instance types for Karpenter's KWOK provider (its
    instance-types file): g-2x-a100, g-4x-a100 and g-8x-a100, each GPU
    advertised as nvidia.com/gpu (what placeholders ask for; NVIDIA's device
    plugin), never as gpufrac.io/gpu (a device plugin's resource, which
    kubelet adds to the Node: plugin_registered); priced by the GPU plus a
    little for the node."""
    out = []
    for n in GPU_TYPES:
        out.append({
            "name": "g-%dx-a100" % n, "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": {"cpu": str(8 * n), "memory": "%dGi" % (64 * n), "pods": "110",
                          "nvidia.com/gpu": str(n)},
            "offerings": [{"Price": 1.0 * n + 0.1, "Available": True, "Requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In",
                 "values": ["on-demand"]},
                {"key": "topology.kubernetes.io/zone", "operator": "In",
                 "values": ["test-zone-a"]}]}]})
    return out


def node_types():
    """The pool's instance types as the bridge's --autoscale-node-types:
    NAME:GPUS:GPU_MEM:CPU:MEMORY (the agents' fake A100s have 80Gi)."""
    return ",".join("%s:%s:80Gi:%s:%s" % (t["name"], t["resources"]["nvidia.com/gpu"],
                                         t["resources"]["cpu"], t["resources"]["memory"])
                    for t in instance_types())


class GuardedExtender(Extender):
    """The extender with the bridge on (placeholders after AFTER) and the
    guard as given."""

    def __init__(self, c, name, port, kc, extra=(), types=True):
        super().__init__(c, name, port, kc)
        self.extra = list(extra)
        self.types = types  # --autoscale-node-types: the pool's types

    def start(self):
        self.proc = self.c.spawn(self.name, [
            self.c.gpufrac, "scheduler", "--listen", "127.0.0.1:%d" % self.port,
            "--kubeconfig", self.kc, "--autoscale-placeholders", "on",
            "--autoscale-after", AFTER] +
            (["--autoscale-node-types", node_types()] if self.types else []) +
            self.extra)
        return self


class Scenario:
    def __init__(self, c, helm, kdir, wdir):
        self.c, self.helm, self.kdir, self.wdir = c, helm, kdir, wdir
        self.api = c.admin
        self.t = E2E(c)
        self.own = []  # Karpenter and KWOK: stopped by the test, not as gpufrac
        self.agents = {}  # node -> the agent started for it
        self.registered = set()  # nodes given gpufrac.io/gpu (plugin_registered)
        self.placeholders_seen = {}  # uid -> nvidia.com/gpu asked
        self.stop_watch = threading.Event()
        # The agents are this thread's children: PR_SET_PDEATHSIG (cluster.py)
        # kills them when the thread that started them ends, so they are
        # stopped before it ends, and none is started after that.
        self.agents_mu = threading.Lock()
        self.stopping = False
        self.watch_error = None

    # ---- the autoscaler and the simulated nodes -------------------------
    def apply_docs(self, docs, what):
        text = yaml.safe_dump_all(docs)
        r = self.c.kubectl("apply", "--server-side", "--field-manager=e2e",
                           "-f", "-", input=text)
        log("applied %s: %d objects" % (what, len(r.stdout.splitlines())))

    def start_node_lifecycle(self):
        """kube-controller-manager's node lifecycle controller, which the
        cluster leaves out (its static Nodes have no heartbeat): KWOK renews
        the heartbeats of the nodes Karpenter buys, and the controller takes
        the not-ready taint (TaintNodesByCondition) off them once they are
        Ready, as on a real cluster."""
        c = self.c
        kc = c.path("controller-manager.kubeconfig")
        p = Proc("node-lifecycle", [
            os.path.join(c.bin, "kube-controller-manager"), "--kubeconfig", kc,
            "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
            "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
            "--use-service-account-credentials=true",
            "--controllers", "node-lifecycle-controller", "--leader-elect=false",
            "--v=1"], c.path("node-lifecycle.log"))
        self.own.append(p)

    def start_kwok(self):
        w = self.wdir
        docs = []
        for f in sorted(os.listdir(os.path.join(w, "rbac"))):
            with open(os.path.join(w, "rbac", f)) as fh:
                docs += [d for d in yaml.safe_load_all(fh) if d]
        self.apply_docs(docs, "KWOK's RBAC")
        sa = [d for d in docs if d["kind"] == "ServiceAccount"][0]["metadata"]
        kc = self.c.sa_kubeconfig("kwok", self.c.token(sa["name"], sa["namespace"]))
        # KWOK's own stages, but a pod annotated e2e.gpufrac.io/loading is
        # left Running and not Ready (a model server loading its weights):
        # the test says when it is loaded (status Ready, as kubelet would
        # after its readiness probe).
        cfgs = []
        for f in sorted(os.listdir(os.path.join(w, "stages"))):
            with open(os.path.join(w, "stages", f)) as fh:
                st = yaml.safe_load(fh)
            if st["metadata"]["name"] == "node-heartbeat":
                # every 5 s (KWOK's 20-45 s is within the node lifecycle
                # controller's grace period too, but leaves less margin)
                st["spec"]["delay"] = {"durationMilliseconds": 5000}
            if st["metadata"]["name"] == "pod-ready":
                st["spec"]["selector"]["matchExpressions"].append({
                    "key": '.metadata.annotations["%s"]' % LOADING,
                    "operator": "DoesNotExist"})
                loading = json.loads(json.dumps(st))
                loading["metadata"]["name"] = "pod-loading"
                exprs = loading["spec"]["selector"]["matchExpressions"]
                exprs[-1] = {"key": '.metadata.annotations["%s"]' % LOADING,
                             "operator": "Exists"}
                tpl, n = re.subn(r'status: "True"(\s+)type: (Ready|ContainersReady)\b',
                                 r'status: "False"\1type: \2',
                                 loading["spec"]["next"]["statusTemplate"])
                tpl, m = re.subn(r"ready: true", "ready: false", tpl, count=1)
                if n != 2 or m != 1:
                    fail("KWOK's pod-ready stage is not as expected: cannot derive "
                         "the loading stage from it")
                loading["spec"]["next"]["statusTemplate"] = tpl
                p = self.c.path("stage-pod-loading.yaml")
                with open(p, "w") as fh:
                    yaml.safe_dump(loading, fh)
                cfgs.append(p)
            p = self.c.path("stage-" + f)
            with open(p, "w") as fh:
                yaml.safe_dump(st, fh)
            cfgs.append(p)
        argv = [os.path.join(w, "bin", "kwok"), "--kubeconfig", kc,
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--node-ip", "127.0.0.1",
                "--server-address", "127.0.0.1:%d" % free_port()]
        for p in cfgs:
            argv += ["--config", p]
        self.kwok = Proc("kwok", argv, self.c.path("kwok.log"))
        self.own.append(self.kwok)

    def start_karpenter(self):
        k = self.kdir
        crds = sorted(os.path.join(k, "crds", f) for f in os.listdir(os.path.join(k, "crds")))
        for f in crds:
            self.c.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", f)
        for f in crds:
            with open(f) as fh:
                name = yaml.safe_load(fh)["metadata"]["name"]
            self.c.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                           "crd/" + name)
        log("Karpenter's CRDs established: %s" % ", ".join(os.path.basename(f) for f in crds))
        self.c.namespace(KNS)
        r = subprocess.run([self.helm, "template", "karpenter", os.path.join(k, "chart"),
                            "--namespace", KNS], capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            fail("helm template of Karpenter's KWOK chart: %s" % r.stderr.strip())
        rbac = [d for d in yaml.safe_load_all(r.stdout) if d and d.get("kind") in (
            "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
        self.apply_docs(rbac, "the RBAC of Karpenter's chart")
        sa = [d for d in rbac if d["kind"] == "ServiceAccount"][0]["metadata"]["name"]
        kc = self.c.sa_kubeconfig("karpenter", self.c.token(sa, KNS))
        itf = self.c.path("instance-types.json")
        with open(itf, "w") as fh:
            json.dump(instance_types(), fh)
        env = dict(os.environ)
        env.update({
            "KUBECONFIG": kc, "SYSTEM_NAMESPACE": KNS,
            "INSTANCE_TYPES_FILE_PATH": itf,
            "METRICS_PORT": str(free_port()), "HEALTH_PROBE_PORT": str(free_port()),
            "DISABLE_LEADER_ELECTION": "true", "LOG_LEVEL": "debug",
            # Short batching windows: the scenario is seconds long.
            "BATCH_IDLE_DURATION": "1s", "BATCH_MAX_DURATION": "3s"})
        self.karpenter = Proc("karpenter", [os.path.join(k, "bin", "karpenter-kwok")],
                              self.c.path("karpenter.log"), env)
        self.own.append(self.karpenter)
        self.c.kubectl("apply", "--server-side", "--field-manager=e2e", "-f", "-",
                       input=json.dumps({
                           "apiVersion": "karpenter.kwok.sh/v1alpha1",
                           "kind": "KWOKNodeClass", "metadata": {"name": "default"}}))
        self.nodepool({"consolidationPolicy": "WhenEmptyOrUnderutilized",
                       "consolidateAfter": "Never"})

    def nodepool(self, disruption):
        self.c.kubectl("apply", "--server-side", "--force-conflicts",
                       "--field-manager=e2e", "-f", "-", input=json.dumps({
                           "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                           "metadata": {"name": POOL},
                           "spec": {"template": {
                               "metadata": {"labels": {"gpufrac.io/enabled": "true"}},
                               "spec": {"nodeClassRef": {
                                   "group": "karpenter.kwok.sh", "kind": "KWOKNodeClass",
                                   "name": "default"},
                                   "requirements": [{
                                       "key": "node.kubernetes.io/instance-type",
                                       "operator": "In",
                                       "values": [t["name"] for t in instance_types()]}],
                                   "expireAfter": "Never"}},
                               "disruption": disruption}}))

    def pool_nodes(self):
        return [n for n in self.api.items("/api/v1/nodes",
                                          labelSelector="karpenter.sh/nodepool=" + POOL)]

    def nodeclaims(self):
        return self.api.items("/apis/karpenter.sh/v1/nodeclaims")

    def watch(self):
        """Every half second: an agent for each pool node whose node-agent
        DaemonSet pod exists, and the placeholders seen (by uid)."""
        while not self.stop_watch.is_set():
            try:
                live = set()
                for n in self.pool_nodes():
                    name = n["metadata"]["name"]
                    live.add(name)
                    if name not in self.registered:
                        self.plugin_registered(name, self.gpus_of(name))
                        self.registered.add(name)
                    if name not in self.agents:
                        p = self.t.agent_pod(name)
                        with self.agents_mu:
                            if p and not self.stopping:
                                self.start_agent(name, p)
                # A node Karpenter took back: its agent goes with it.
                for name, a in list(self.agents.items()):
                    if a and name not in live:
                        self.c.stop_gpufrac(a, 5)
                        self.agents[name] = None
                        log("node %s gone: its agent stopped" % name)
                for p in self.api.items("/api/v1/namespaces/%s/pods" % PH_NS,
                                        labelSelector=PH_LABEL + "=true"):
                    r = p["spec"]["containers"][0]["resources"]["requests"]
                    self.placeholders_seen.setdefault(p["metadata"]["uid"],
                                                      r.get("nvidia.com/gpu"))
            except Exception as e:  # reported by check_watch
                self.watch_error = "%s\n%s" % (e, traceback.format_exc())
                return
            self.stop_watch.wait(0.5)

    def check_watch(self):
        if self.watch_error:
            fail("the node watcher failed: %s" % self.watch_error)
        for p in self.own:
            if not p.alive():
                fail("%s exited (%s); its log ends:\n%s" % (p.name, p.p.returncode,
                                                            p.tail(20)))

    def gpus_of(self, node):
        it = self.api.get("/api/v1/nodes/" + node)["metadata"]["labels"].get(
            "node.kubernetes.io/instance-type", "")
        for n in GPU_TYPES:
            if it == "g-%dx-a100" % n:
                return n
        fail("node %s is a %r, not one of the pool's instance types" % (node, it))

    def start_agent(self, node, p):
        """What kubelet would run for the DaemonSet's pod on node: the agent
        with the instance type's A100s (fake) and a token bound to that
        pod."""
        n = self.gpus_of(node)
        kc = self.c.pod_kubeconfig("agent-" + node, "gpufrac-node", p)
        cfg = self.c.node_conf(node, SLOTS)
        self.agents[node] = self.c.spawn("agent-" + node, [
            self.c.gpufrac, "node", "--fake-gpus", "%dxA100-80GB" % n,
            "--node-name", node, "--kubeconfig", kc, "--config", cfg,
            "--listen", "127.0.0.1:%d" % free_port(), "--interval", "2"])
        log("node %s (%d GPUs): agent started (its DaemonSet pod %s)" %
            (node, n, p["metadata"]["name"]))

    def plugin_registered(self, node, n):
        """What kubelet does once the agent's device plugin registers (KWOK's
        nodes have no kubelet): gpufrac.io/gpu, SLOTS a GPU, in the Node's
        capacity and allocatable.  Done when the node is first seen, while
        it still carries the not-ready taint: added after pods were found
        unschedulable for its lack, kube-scheduler tried them again only
        20 s later (v1.37.2, in a run of the replay), which the bridge
        (--autoscale-after 2s, 10 s after capacity) took as pods still
        waiting, and bought again."""
        res = {"gpufrac.io/gpu": str(n * SLOTS)}
        self.api.request("PATCH", "/api/v1/nodes/%s/status" % node,
                         {"status": {"capacity": res, "allocatable": res}},
                         "application/strategic-merge-patch+json")

    def wait(self, what, fn, timeout, interval=0.5):
        def ok():
            self.check_watch()
            return fn()
        return wait_for(what, ok, timeout, interval)

    # ---- setup -----------------------------------------------------------
    def setup(self):
        t, c = self.t, self.c
        t.apply_deploy()
        c.kubectl("apply", "--server-side", "--field-manager=e2e", "-f",
                  os.path.join(DEPLOY, "autoscale", "autoscale.yaml"))
        c.namespace(NS)
        # The extender runs as the test's process: deploy/'s Deployment of it
        # would be two pending pods Karpenter buys nodes for.
        c.kubectl("scale", "-n", "gpufrac-system", "deployment/gpufrac-scheduler",
                  "--replicas=0")
        self.start_node_lifecycle()
        self.ext_kc = c.sa_kubeconfig("extender", c.token("gpufrac-scheduler"))
        self.start_extender("extender", ["--guard-settle", "5s"])
        self.start_kwok()
        self.start_karpenter()
        self.watcher.start()
        self.wait("Karpenter's NodePool ready", lambda: any(
            cd.get("type") == "Ready" and cd.get("status") == "True"
            for cd in self.api.get("/apis/karpenter.sh/v1/nodepools/" + POOL)
            .get("status", {}).get("conditions", [])), 60)
        log("Karpenter and KWOK running; NodePool %s ready" % POOL)

    def start_extender(self, name, extra, types=True):
        if getattr(self.t, "ext", None):
            self.c.stop_gpufrac(self.t.ext.proc)
        ext = GuardedExtender(self.c, name, self.c.ext_port, self.ext_kc, extra,
                              types).start()
        ext.ready_leader()
        self.t.ext = ext

    # ---- scenarios -------------------------------------------------------
    def shares(self, names):
        return [pod(n, compute=30) for n in names]

    def s_scaleup(self):
        t = self.t
        t0 = time.monotonic()
        names = ["s-%d" % i for i in range(SHARES)]
        t.create(*self.shares(names))
        got = t.wait_bound(names, timeout=240)
        took = time.monotonic() - t0
        where = {}
        for n in names:
            where.setdefault(got[n]["spec"]["nodeName"], []).append(n)
        nodes = self.pool_nodes()
        gpus = sorted(self.gpus_of(n["metadata"]["name"]) for n in nodes)
        asked = sorted(int(v) for v in self.placeholders_seen.values())
        claims = self.nodeclaims()
        log("scaleup: %d 0.3-GPU shares bound in %.1f s on %s; placeholders asked %s "
            "GPUs; Karpenter bought %d nodes (%s GPUs), %d NodeClaims" %
            (SHARES, took, {k: len(v) for k, v in where.items()}, asked, len(nodes),
             gpus, len(claims)))
        # 3 shares a GPU: 10 GPUs, an 8-GPU node (24 shares) and a 2-GPU one
        # (4) of the pool's types.
        if gpus != PACKED_GPUS or len(claims) != len(PACKED_GPUS):
            fail("Karpenter bought %s GPUs (%d NodeClaims; placeholders asked %s); "
                 "the packing of %d 0.3 shares onto the pool's types needs %s" %
                 (gpus, len(claims), asked, SHARES, PACKED_GPUS))
        if asked != PACKED_GPUS:
            fail("placeholders asked %s GPUs, want %s (one a node, its whole GPUs)" %
                 (asked, PACKED_GPUS))
        t.check_state()
        self.wait("no placeholder left", lambda: not self.api.items(
            "/api/v1/namespaces/%s/pods" % PH_NS, labelSelector=PH_LABEL + "=true"), 30)
        self.report["scaleup"] = {"shares": SHARES, "nodes": len(nodes), "gpus": gpus,
                                  "whole_gpu_would_ask": SHARES,
                                  "placeholders": asked, "seconds": round(took, 1)}

    def s_dra(self):
        """A claim-only pod (DRA, no extended resource): what Karpenter and
        the bridge do with it when no device is free."""
        self.c.kubectl("apply", "--server-side", "--field-manager=e2e", "-f",
                       os.path.join(DEPLOY, "dra", "deviceclasses.yaml"))
        self.api.create("/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates" % NS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": NS},
            "spec": {"spec": {"devices": {"requests": [{
                "name": "gpu", "exactly": {"deviceClassName": "gpu.gpufrac.io"}}]}}}})
        claims0 = len(self.nodeclaims())
        self.api.create("/api/v1/namespaces/%s/pods" % NS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "dra-0", "namespace": NS},
            "spec": {"containers": [{
                "name": "main", "image": "registry.k8s.io/pause:3.10",
                "resources": {"claims": [{"name": "gpu"}],
                              "requests": {"cpu": "100m", "memory": "64Mi"}}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                "terminationGracePeriodSeconds": 0}})

        def unschedulable():
            p = self.api.get("/api/v1/namespaces/%s/pods/dra-0" % NS)
            return any(cd.get("type") == "PodScheduled" and cd.get("reason") == "Unschedulable"
                       for cd in p.get("status", {}).get("conditions", []))
        self.wait("dra-0 unschedulable (no ResourceSlice has a device)", unschedulable, 60)
        said = "skipping pod with Dynamic Resource Allocation requirements"

        def verdict():
            with open(self.karpenter.logpath, errors="replace") as fh:
                return any(said in ln and '"dra-0"' in ln for ln in fh)
        self.wait("Karpenter's verdict on dra-0", verdict, 60)
        time.sleep(5)  # batches past the verdict: still nothing bought
        claims = len(self.nodeclaims())
        ph = self.api.items("/api/v1/namespaces/%s/pods" % PH_NS,
                            labelSelector=PH_LABEL + "=true")
        log("dra: claim-only pod unschedulable; Karpenter: '%s'; NodeClaims %d -> %d; "
            "placeholders %d" % (said, claims0, claims, len(ph)))
        if claims != claims0 or ph:
            fail("a claim-only pod made %d NodeClaims and %d placeholders" %
                 (claims - claims0, len(ph)))
        self.api.delete("/api/v1/namespaces/%s/pods/dra-0" % NS, gracePeriodSeconds=0)
        self.report["dra"] = {"nodeclaims": claims - claims0, "placeholders": len(ph)}

    def pin(self, node):
        """A node selector for node, labelled KEEP by the test (KWOK's nodes
        have no kubernetes.io/hostname label: kubelet sets that, and
        Karpenter refuses it in a pod's selector)."""
        labels = self.api.get("/api/v1/nodes/" + node)["metadata"]["labels"]
        if labels.get(KEEP) != "true":
            fail("node %s is not labelled %s" % (node, KEEP))
        return {KEEP: "true"}

    def whole(self, name, node=None, loading=False, user_protect=False):
        """A pod asking one whole GPU (gpufrac.io/gpu: 1): pinned to node
        when given, annotated as loading its weights when loading, and
        carrying the user's own karpenter.sh/do-not-disrupt when
        user_protect."""
        p = pod(name, gpu=1)
        ann = p["metadata"].setdefault("annotations", {})
        if loading:
            ann[LOADING] = "true"
        if user_protect:
            ann["karpenter.sh/do-not-disrupt"] = "true"
        if node:
            p["spec"]["nodeSelector"] = self.pin(node)
        return p

    def ready(self, name):
        """The pod has loaded: Ready, as kubelet writes it once its
        readiness probe passes."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        conds = [{"type": t, "status": "True", "lastTransitionTime": now}
                 for t in ("Ready", "ContainersReady")]
        self.api.request("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (NS, name),
                         {"status": {"conditions": conds}},
                         "application/strategic-merge-patch+json")

    def pod_state(self, name):
        """(exists, deleting, Ready)"""
        try:
            p = self.api.get("/api/v1/namespaces/%s/pods/%s" % (NS, name))
        except Exception:
            return False, True, False
        ready = any(cd.get("type") == "Ready" and cd.get("status") == "True"
                    for cd in p.get("status", {}).get("conditions", []))
        return True, bool(p["metadata"].get("deletionTimestamp")), ready

    def s_consolidate(self):
        """Karpenter's consolidation (WhenEmptyOrUnderutilized) against a pod
        loading its weights, with and without the disruption guard."""
        t = self.t
        for p in t.gpu_pods(NS):
            t.delete_pod(p["metadata"]["name"])
        self.wait("the shares gone", lambda: not t.gpu_pods(NS), 60)
        big = sorted(n["metadata"]["name"] for n in self.pool_nodes()
                     if self.gpus_of(n["metadata"]["name"]) == 8)
        if len(big) != 1:
            fail("want one 8-GPU node from scaleup, have %s" % big)
        a = big[0]
        self.api.merge_patch("/api/v1/nodes/" + a, {"metadata": {"labels": {KEEP: "true"}}})
        # Node a (labelled KEEP) kept full by whole-GPU pods the user
        # protects; the other node, empty, is consolidated away.
        keep = ["keep-%d" % i for i in range(8)]
        t.create(*[self.whole(k, a, user_protect=True) for k in keep])
        t.wait_bound(keep, timeout=60)
        t0 = time.monotonic()
        self.nodepool({"consolidationPolicy": "WhenEmptyOrUnderutilized",
                       "consolidateAfter": "5s"})
        self.wait("the empty node consolidated away",
                  lambda: [n["metadata"]["name"] for n in self.pool_nodes()] == [a], 120)
        empty_s = round(time.monotonic() - t0, 1)
        log("consolidate: the empty node removed %.1f s after consolidation was on" % empty_s)
        out = {"empty_node_removed_s": empty_s}
        for guard in ("off", "on"):
            self.start_extender("extender-guard-" + guard,
                                ["--guard", guard, "--guard-settle", "5s"])
            out["guard_" + guard] = self.loading_run(a, guard == "on")
            if not self.pod_state("keep-7")[0]:  # node a full again
                t.create(self.whole("keep-7", a, user_protect=True))
                t.wait_bound(["keep-7"], timeout=60)
        log("consolidate: %s" % out)
        self.report["consolidate"] = out
        if out["guard_off"]["loading_evictions"] != 1:
            fail("without the guard Karpenter evicted the loading pod %d times, want 1" %
                 out["guard_off"]["loading_evictions"])
        if out["guard_on"]["loading_evictions"] != 0:
            fail("with the guard Karpenter evicted the loading pod %d times" %
                 out["guard_on"]["loading_evictions"])

    def loading_run(self, a, guarded, load_s=60):
        """llm (one whole GPU, loading) finds no room on a: its placeholder
        buys node y; keep-7 then leaves a, so consolidation could move llm
        to a and free y.  Counts evictions of llm while it loads (load_s);
        then it is loaded (Ready) and y must go all the same."""
        t = self.t
        name = "llm-guard-" + ("on" if guarded else "off")
        t.create(self.whole(name, loading=True))
        got = t.wait_bound([name], timeout=120)
        y = got[name]["spec"]["nodeName"]
        if y == a:
            fail("%s bound on the full node %s" % (name, a))
        if guarded:
            self.wait("the guard's do-not-disrupt on %s" % name, lambda: self.api.get(
                "/api/v1/namespaces/%s/pods/%s" % (NS, name))["metadata"].get(
                "annotations", {}).get("karpenter.sh/do-not-disrupt") == "true", 30)
        log("consolidate (guard %s): %s loading on new node %s" %
            ("on" if guarded else "off", name, y))
        t.delete_pod("keep-7")
        t0 = time.monotonic()
        evicted = 0
        while time.monotonic() - t0 < load_s:
            self.check_watch()
            exists, deleting, ready = self.pod_state(name)
            if not exists or deleting:
                evicted = 1
                break
            time.sleep(0.5)
        res = {"loading_evictions": evicted}
        if evicted:
            res["evicted_after_s"] = round(time.monotonic() - t0, 1)
            # by Karpenter's consolidation, not anything else
            def by_karpenter():
                with open(self.karpenter.logpath, errors="replace") as fh:
                    return any('"disrupting node(s)"' in ln and "Underutilized/" in ln and
                               y in ln for ln in fh)
            self.wait("Karpenter's Underutilized disruption of %s in its log" % y,
                      by_karpenter, 30)
            log("consolidate (guard %s): %s evicted while loading, %.1f s after room "
                "appeared" % ("on" if guarded else "off", name, res["evicted_after_s"]))
        else:
            self.ready(name)
            t1 = time.monotonic()
            self.wait("node %s consolidated once %s loaded" % (y, name),
                      lambda: y not in [n["metadata"]["name"] for n in self.pool_nodes()],
                      120)
            res["node_freed_after_loaded_s"] = round(time.monotonic() - t1, 1)
            log("consolidate (guard %s): %s not evicted while loading (%d s); node %s "
                "freed %.1f s after it loaded" % ("on" if guarded else "off", name, load_s,
                                                 y, res["node_freed_after_loaded_s"]))
        self.wait("node %s gone" % y, lambda: y not in [
            n["metadata"]["name"] for n in self.pool_nodes()], 120)
        if self.pod_state(name)[0] and not self.pod_state(name)[1]:
            t.delete_pod(name)
        self.wait("%s gone" % name, lambda: not self.pod_state(name)[0], 60)
        return res

    def s_zero(self):
        """The pool scaled to zero when idle, then one share arrives: the
        time from its creation to Running on the node bought for it."""
        t = self.t
        for p in t.gpu_pods(NS):
            t.delete_pod(p["metadata"]["name"])
        t0 = time.monotonic()
        self.wait("the pool at zero nodes", lambda: not self.pool_nodes(), 120)
        to_zero = round(time.monotonic() - t0, 1)
        t1 = time.monotonic()
        t.create(*self.shares(["first"]))

        def running():
            p = self.api.get("/api/v1/namespaces/%s/pods/first" % NS)
            return p["spec"].get("nodeName") and p.get("status", {}).get("phase") == "Running"
        self.wait("the share Running on a new node", running, 120)
        back = round(time.monotonic() - t1, 1)
        log("zero: idle pool at zero nodes %.1f s after its last pods went; one share "
            "Running %.1f s after it was created (--autoscale-after %s)" % (to_zero, back, AFTER))
        self.report["zero"] = {"to_zero_s": to_zero, "share_running_s": back,
                               "autoscale_after": AFTER}

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
                    if not a.alive():  # it had exited by itself: a failure
                        self.c.bad_exits.append(
                            "the agent of %s exited by itself (%s); its log ends:\n%s" %
                            (name, a.p.returncode, a.tail(15)))
                    self.c.stop_gpufrac(a, 15)
            self.stop_watch.set()
            if self.watcher.is_alive():
                self.watcher.join(10)
            for p in self.own:
                p.stop(10)


# E2E_KARPENTER_SCENARIOS=scaleup,... runs those only (a quicker look at one).
SCENARIOS = [s for s in os.environ.get("E2E_KARPENTER_SCENARIOS",
                                       "scaleup,dra,consolidate,zero").split(",") if s]


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
            print("e2e karpenter: FAILED")
            return 1
    state = {}

    def body(c):
        c.start()
        s = state["s"] = Scenario(c, helm, kdir, wdir)
        s.run()

    def on_error(c):
        s = state.get("s")
        for p in (s.own if s else []) + c.extra:
            log("%s log ends:\n%s" % (p.name, p.tail(25)))
    return run_once("e2e karpenter", lambda: Cluster(k8s_bin, gpufrac, keep), body,
                    on_error)


if __name__ == "__main__":
    sys.exit(main())
