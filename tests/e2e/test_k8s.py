#!/usr/bin/env python3
"""gpufrac against a real Kubernetes control plane (CTest label e2e).

Usage: test_k8s.py K8S_BIN GPUFRAC [--keep] [--only NAME[,NAME...]]

K8S_BIN holds etcd, kube-apiserver, kube-controller-manager, kube-scheduler
and kubectl (scripts/install-k8s); a missing one fails the test.  Every
manifest in deploy/ is applied with `kubectl apply --server-side`; the node
agents and the extender run as deploy/'s ServiceAccounts with TokenRequest
tokens, so a permission deploy/ lacks fails a scenario.  Each scenario
asserts on what the API server holds afterwards.  Exit 0 only when every
scenario passed.
"""

import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (DEPLOY, ApiError, Cluster, Failure, free_port, log,  # noqa: E402
                     run_scenarios, wait_for)

GiB = 1 << 30
NS = "e2e"
INVENTORY = "gpufrac.io/inventory"
GRANT = "gpufrac.io/grant"
# Device-plugin slots per shared GPU (docs/node.md, "slots"; 4 by
# default): kube-scheduler counts them, so they cap the pods per GPU.
SLOTS = 16
A100 = "A100-80GB"
T4 = "T4-16GB"

# name -> fake GPUs; capacity gpufrac.io/gpu = GPUs x SLOTS, as kubelet
# reports what the device plugin advertises.
NODES = {"n1": "4xA100-80GB", "n2": "4xT4-16GB", "n3": "2xH100-80GB"}


def fail(msg):
    raise Failure(msg)


def gpus_of(spec):
    return sum(int(g.split("x")[0]) for g in spec.split(","))


def pod(name, gpu=None, mem=None, compute=None, model=None, ns=NS):
    """A pod whose container "main" asks for gpu GPUs (gpufrac.io/gpu), mem
    and compute of each.  A share (mem or compute) without gpu asks for
    gpufrac.io/gpu: 1, the device-plugin slot every share needs (the
    extender refuses a share without it); gpu=False leaves it out."""
    lim = {}
    if gpu is None and (mem is not None or compute is not None):
        gpu = 1
    if gpu is not None and gpu is not False:
        lim["gpufrac.io/gpu"] = str(gpu)
    if mem is not None:
        lim["gpufrac.io/gpu-memory"] = mem
    if compute is not None:
        lim["gpufrac.io/gpu-compute"] = str(compute)
    meta = {"name": name, "namespace": ns, "labels": {"e2e": "gpu"}}
    if model:
        meta["annotations"] = {"gpufrac.io/gpu-model": model}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{
                "name": "main", "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": lim,
                              "requests": {"cpu": "100m", "memory": "64Mi"}}}],
                "terminationGracePeriodSeconds": 0}}


def quantity_bytes(q):
    for suf, mul in (("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", GiB)):
        if q.endswith(suf):
            return int(q[:-2]) * mul
    return int(q)


class Extender:
    def __init__(self, c, name, port, kc, args=()):
        self.c, self.name, self.port, self.kc = c, name, port, kc
        self.args = list(args)
        self.proc = None

    def start(self):
        self.proc = self.c.spawn(self.name, [
            self.c.gpufrac, "scheduler", "--listen", "127.0.0.1:%d" % self.port,
            "--kubeconfig", self.kc] + self.args)
        return self

    def get(self, path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path),
                                    timeout=5) as r:
            return r.status, r.read().decode()

    def metric(self, name):
        for line in self.get("/metrics")[1].splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def identity_pid(self):
        return self.proc.p.pid

    def ready_leader(self, timeout=60):
        def ok():
            if not self.proc.alive():
                fail("%s exited:\n%s" % (self.name, self.proc.tail()))
            return self.get("/readyz")[0] == 200 and \
                self.metric("gpufrac_extender_leader") == 1
        wait_for("%s ready and leading" % self.name, ok, timeout)


class E2E:
    def __init__(self, c):
        self.c = c
        self.api = c.admin
        self.agents = {}

    # ---- setup ---------------------------------------------------------
    def apply_deploy(self):
        files = sorted(f for f in os.listdir(DEPLOY) if f.endswith(".yaml"))
        # kube-scheduler-config.yaml is kube-scheduler's --config file, not
        # an API object: it is what kube-scheduler runs with (cluster.py).
        # This harness runs the control-plane path: the cluster's
        # kube-scheduler calls the extender.  kube-scheduler.yaml is the
        # other path (gpufrac's own kube-scheduler, test_helm_scheduler.py),
        # and scheduler-admission.yaml's mutation sending pods to it is left
        # out, as its comment says for this path.
        objs = [os.path.join(DEPLOY, f) for f in files
                if f not in ("kube-scheduler-config.yaml", "kube-scheduler.yaml")]
        # The namespace first: the others live in it.
        objs.sort(key=lambda p: not p.endswith("namespace.yaml"))
        for p in objs:
            if p.endswith("scheduler-admission.yaml"):
                # mutation 3 (schedulerName): from its comment to the end
                # of the policy (standard library only: no YAML parser)
                with open(p) as f:
                    lines = f.read().split("\n")
                at = [i for i, ln in enumerate(lines) if ln.strip().startswith("# 3. ")]
                end = lines.index("---")
                if len(at) != 1 or at[0] > end or \
                        "/spec/schedulerName" not in "\n".join(lines[at[0]:end]):
                    fail("deploy/scheduler-admission.yaml: no mutation 3 (schedulerName) "
                         "before its binding")
                p = self.c.path("scheduler-admission.yaml")
                with open(p, "w") as f:
                    f.write("\n".join(lines[:at[0]] + lines[end:]))
            r = self.c.kubectl("apply", "--server-side", "--field-manager=e2e",
                               "-f", p)
            log("applied %s: %s" % (os.path.basename(p),
                                    " ".join(r.stdout.split())))

    def add_node(self, name, spec, gpus=True):
        self.c.add_node(name, {"gpufrac.io/enabled": "true"})
        self.set_capacity(name, gpus_of(spec) * SLOTS if gpus else 0)

    def set_capacity(self, name, slots):
        self.c.node_status(name, {"cpu": "32", "memory": "256Gi", "pods": "110",
                                  "gpufrac.io/gpu": str(slots)})

    def agent_pod(self, node):
        """The DaemonSet's pod on node (created by the DaemonSet controller,
        bound by kube-scheduler)."""
        for p in self.api.items("/api/v1/namespaces/gpufrac-system/pods",
                                labelSelector="app.kubernetes.io/name=gpufrac-node"):
            if p["spec"].get("nodeName") == node:
                return p
        return None

    def start_agent(self, node, spec):
        p = wait_for("the gpufrac-node DaemonSet pod on %s" % node,
                     lambda: self.agent_pod(node), 90)
        # What kubelet projects into the agent's pod: a token bound to that
        # pod, which carries the node's name.
        kc = self.c.pod_kubeconfig("agent-" + node, "gpufrac-node", p)
        cfg = self.c.node_conf(node, SLOTS)
        old = self.agents.get(node)
        if old:
            self.c.stop_gpufrac(old, 5)
        self.agents[node] = self.c.spawn("agent-%s-%d" % (node, len(self.c.extra)), [
            self.c.gpufrac, "node", "--fake-gpus", spec, "--node-name", node,
            "--kubeconfig", kc, "--config", cfg,
            "--listen", "127.0.0.1:%d" % free_port(), "--interval", "2"])
        return kc

    def inventory(self, node):
        n = self.api.get("/api/v1/nodes/" + node)
        a = n["metadata"].get("annotations", {}).get(INVENTORY)
        return json.loads(a) if a else None

    def wait_inventory(self, node, ngpus, model=None):
        def ok():
            inv = self.inventory(node)
            return inv and len(inv["gpus"]) == ngpus and \
                (model is None or all(g["model"] == model for g in inv["gpus"]))
        wait_for("node %s's inventory with %d GPUs" % (node, ngpus), ok, 60)

    def setup(self):
        self.apply_deploy()
        self.c.namespace(NS)
        for n, spec in NODES.items():
            self.add_node(n, spec)
        for n, spec in NODES.items():
            self.start_agent(n, spec)
        for n, spec in NODES.items():
            self.wait_inventory(n, gpus_of(spec))
        log("nodes %s published their inventories" % ", ".join(NODES))
        tok = self.c.token("gpufrac-scheduler")
        self.ext_kc = self.c.sa_kubeconfig("extender", tok)
        self.ext = Extender(self.c, "extender", self.c.ext_port, self.ext_kc).start()
        self.ext.ready_leader()
        log("extender ready and leading")

    # ---- the API server's state ---------------------------------------
    def gpu_pods(self, ns=NS):
        return self.api.items("/api/v1/namespaces/%s/pods" % ns, labelSelector="e2e=gpu")

    def check_state(self):
        """Every bound GPU pod has a grant for its node's GPUs; no GPU holds
        more than its memory or 100% compute, and a whole GPU holds nothing
        else.  Returns {pod name: grant}."""
        gpus = {}
        for n in self.api.items("/api/v1/nodes"):
            ann = n["metadata"].get("annotations", {})
            if INVENTORY in ann:
                for g in json.loads(ann[INVENTORY])["gpus"]:
                    gpus[(n["metadata"]["name"], g["uuid"])] = {
                        "index": g["index"], "memory": int(g["memory"]),
                        "mem": 0, "pct": 0, "whole": 0, "who": []}
        grants = {}
        for p in self.api.items("/api/v1/pods", labelSelector="e2e=gpu"):
            name = p["metadata"]["namespace"] + "/" + p["metadata"]["name"]
            node = p["spec"].get("nodeName")
            if not node:
                continue
            lim = p["spec"]["containers"][0]["resources"]["limits"]
            n = int(lim.get("gpufrac.io/gpu", "1"))
            mem = quantity_bytes(lim.get("gpufrac.io/gpu-memory", "0"))
            pct = int(lim.get("gpufrac.io/gpu-compute", "0"))
            whole = n > 1 or (not mem and not pct)
            g = p["metadata"].get("annotations", {}).get(GRANT)
            if not g:
                fail("bound pod %s has no %s" % (name, GRANT))
            g = json.loads(g)
            grants[name] = g
            if g["node"] != node:
                fail("pod %s: grant names node %s, bound to %s" % (name, g["node"], node))
            cs = g["containers"]
            if len(cs) != 1 or cs[0]["name"] != "main" or len(cs[0]["gpus"]) != n:
                fail("pod %s: grant %s for %d GPUs of container main" % (name, g, n))
            for u in cs[0]["gpus"]:
                k = (node, u["uuid"])
                if k not in gpus:
                    fail("pod %s: granted GPU %s is not in %s's inventory" %
                         (name, u["uuid"], node))
                x = gpus[k]
                if x["index"] != u["index"]:
                    fail("pod %s: GPU %s index %d, inventory says %d" %
                         (name, u["uuid"], u["index"], x["index"]))
                # the grant's memory: what was asked, or for a compute-only
                # share its part of the GPU's (docs/scheduler.md)
                gm = int(u.get("memory", 0))
                if mem and gm != mem:
                    fail("pod %s: asked %d bytes of GPU memory, granted %d" %
                         (name, mem, gm))
                if not whole and 0 < pct < 100 and not mem and \
                        gm != x["memory"] * pct // 100:
                    fail("pod %s: a %d%% compute-only share granted %d bytes "
                         "of a %d-byte GPU" % (name, pct, gm, x["memory"]))
                x["mem"] += gm
                x["pct"] += 100 if whole else pct
                x["whole"] += whole
                x["who"].append(name)
        for (node, uuid), x in gpus.items():
            if x["mem"] > x["memory"] or x["pct"] > 100 or \
                    (x["whole"] and len(x["who"]) > 1):
                fail("GPU %s on %s over capacity: %d GiB of %d GiB, %d%% compute, "
                     "held by %s" % (uuid, node, x["mem"] // GiB, x["memory"] // GiB,
                                     x["pct"], x["who"]))
        return grants

    def wait_bound(self, names, timeout=120, ns=NS):
        def ok():
            pods = {p["metadata"]["name"]: p for p in self.gpu_pods(ns)}
            left = [n for n in names if not pods.get(n, {}).get("spec", {}).get("nodeName")]
            return not left
        try:
            wait_for("%d pods bound" % len(names), ok, timeout, 0.5)
        except Failure:
            pods = {p["metadata"]["name"]: p for p in self.gpu_pods(ns)}
            left = [n for n in names if not pods.get(n, {}).get("spec", {}).get("nodeName")]
            fail("pods not bound after %d s: %s; last events: %s" %
                 (timeout, left[:10], self.events(left[0], ns)[-3:] if left else ""))
        return {n: self.api.get("/api/v1/namespaces/%s/pods/%s" % (ns, n)) for n in names}

    def events(self, pod_name, ns=NS):
        return [e.get("reason", "") + ": " + e.get("message", "")
                for e in self.api.items("/api/v1/namespaces/%s/events" % ns)
                if e["involvedObject"].get("name") == pod_name]

    def create(self, *pods):
        for p in pods:
            self.api.create("/api/v1/namespaces/%s/pods" % p["metadata"]["namespace"], p)
        return [p["metadata"]["name"] for p in pods]

    def delete_pod(self, name, ns=NS):
        self.api.delete("/api/v1/namespaces/%s/pods/%s" % (ns, name), gracePeriodSeconds=0)

    def booked(self):
        """Bound GPU pods the API server holds with a grant."""
        return len(self.check_state())

    def wait_model(self, what, fn, timeout=30):
        wait_for("the extender's model: " + what, fn, timeout)

    # ---- scenarios -----------------------------------------------------
    def s_bind(self):
        """Shares, memory-only, compute-only, whole and 2-GPU pods, and a
        gpu-model pin, bound by kube-scheduler through the extender."""
        # n1's A100s take the shares, n2's T4s the whole GPUs and one share;
        # n3 is kept for s_model_follows.
        ps = [pod("share-%d" % i, 1, "20Gi", 30, model=A100) for i in range(4)]
        ps += [pod("memonly-%d" % i, mem="12Gi", model=A100) for i in range(3)]
        # compute-only: each also holds its part of the GPU's memory (20%
        # of 80 GiB, docs/scheduler.md), which the later scenarios' pods on
        # n1 must leave room for
        ps += [pod("compute-%d" % i, compute=20, model=A100) for i in range(2)]
        ps += [pod("whole-0", 1, model=T4), pod("two-gpus", 2, model=T4),
               pod("on-t4", mem="8Gi", compute=10, model=T4)]
        got = self.wait_bound(self.create(*ps))
        grants = self.check_state()
        if got["on-t4"]["spec"]["nodeName"] != "n2":
            fail("on-t4 (gpu-model T4-16GB) bound to %s, only n2 has T4s" %
                 got["on-t4"]["spec"]["nodeName"])
        for n in ("share-0", "memonly-0"):
            g = grants[NS + "/" + n]["containers"][0]["gpus"][0]
            if n == "share-0" and (g["memory"] != 20 * GiB or g["compute"] != 30):
                fail("share-0's grant %s: want 20Gi and 30%%" % g)
            if n == "memonly-0" and (g["memory"] != 12 * GiB or g["compute"] != 0):
                fail("memonly-0's grant %s: want 12Gi, no compute" % g)
        binds = self.ext.metric('gpufrac_extender_binds_total{result="ok"}')
        if not binds or binds < len(ps):
            fail("extender counts %s successful binds, %d pods were bound" % (binds, len(ps)))
        # No kubelet runs, so no pod gets Ready: the disruption guard
        # protects each from its bind, in the Binding itself (its log says
        # which write carried it; a PATCH after the bind would be a second
        # write per pod).
        with open(self.c.path(self.ext.name + ".log")) as f:
            logtext = f.read()
        for p in ps:
            n = p["metadata"]["name"]
            a = self.c.admin.get("/api/v1/namespaces/%s/pods/%s" % (NS, n))[
                "metadata"].get("annotations", {})
            if a.get("karpenter.sh/do-not-disrupt") != "true" or \
                    a.get("gpufrac.io/guard-owns") != "do-not-disrupt,safe-to-evict":
                fail("bound pod %s is not protected by the guard: %r" % (n, a))
            if ("guard: pod %s/%s: protecting (bound, not Ready yet), in its "
                    "Binding\n" % (NS, n)) not in logtext:
                fail("pod %s: the guard's protection did not ride in its "
                     "Binding; the extender's log:\n%s" % (n, logtext[-3000:]))
        log("bind: %d pods bound with grants, per GPU within capacity" % len(ps))

        # Cannot fit anywhere: the largest GPU has 80Gi.
        self.create(pod("too-big", 1, "100Gi"))

        def reason():
            for e in self.events("too-big"):
                if e.startswith("FailedScheduling") and \
                        "gpu-memory 100Gi: the largest GPU on n" in e:
                    return e
        e = wait_for("a FailedScheduling event carrying the extender's reason",
                     reason, 60)
        p = self.api.get("/api/v1/namespaces/%s/pods/too-big" % NS)
        if p["spec"].get("nodeName") or p["status"].get("phase") != "Pending":
            fail("too-big left Pending: %s" % p["status"])
        log("unfittable: Pending, event %r" % e[:200])
        self.delete_pod("too-big")

    def s_whole_memonly(self):
        """A whole GPU (gpufrac.io/gpu: 1) and a memory-only share
        (gpufrac.io/gpu-memory: 8Gi) are never granted one GPU.  This test
        found them granted the same GPU: the whole GPU booked 1000 milli and
        no memory, the memory-only share 0 milli and 8Gi, and the model
        added them up, though the whole-GPU pod's grant has no memory limit.
        A whole GPU now books all its memory (src/core/model.c)."""
        self.create(pod("wm-whole", 1, model="H100-80GB"),
                    pod("wm-whole-2", 1, model="H100-80GB"))
        self.wait_bound(["wm-whole", "wm-whole-2"], 60)
        self.create(pod("wm-mem", mem="8Gi", model="H100-80GB"))
        time.sleep(5)
        self.check_state()
        log("whole_memonly: no GPU held whole shares it with the 8Gi share")
        for n in ("wm-mem", "wm-whole", "wm-whole-2"):
            self.delete_pod(n)

    def s_kill9(self):
        """kill -9 the extender while kube-scheduler streams pods through
        it, start it again: every pod bound once, nothing double-booked."""
        before = self.booked()
        burst = [pod("burst-%d" % i, 1, "%dGi" % (2 + i % 3), 5, model=A100)
                 for i in range(30)]
        # Killed right after the first 8 are created: kube-scheduler is
        # filtering and binding them at that moment.
        names = self.create(*burst[:8])
        self.ext.proc.kill9()
        at_kill = sum(1 for p in self.gpu_pods() if p["metadata"]["name"] in names
                      and p["spec"].get("nodeName"))
        # The rest of the stream arrives while no extender answers:
        # kube-scheduler's attempts fail (the extender is not ignorable).
        names += self.create(*burst[8:])

        def refused():
            for e in self.events(names[-1]):
                if e.startswith("FailedScheduling") and "/gpufrac/filter" in e:
                    return e
        e = wait_for("kube-scheduler failing to reach the killed extender", refused, 30)
        log("kill9: extender killed with %d of the first 8 burst pods bound; then %r" %
            (at_kill, e[:160]))
        self.c.check_alive()
        self.ext = Extender(self.c, "extender-2", self.c.ext_port, self.ext_kc).start()
        # The killed replica's Lease runs out (15 s) before the new one binds.
        self.ext.ready_leader(60)
        self.wait_bound(names, 180)
        grants = self.check_state()
        if len(grants) != before + len(names):
            fail("%d pods hold grants, expected %d" % (len(grants), before + len(names)))
        self.wait_model("books every bound GPU pod after the restart",
                        lambda: self.model_pods() == self.bound_pods())
        log("kill9: %d burst pods bound after the restart, no GPU over capacity" % len(names))

    def bound_pods(self):
        return sum(1 for p in self.api.items("/api/v1/pods") if p["spec"].get("nodeName")
                   and p["status"].get("phase") not in ("Succeeded", "Failed"))

    def model_pods(self):
        return self.ext.metric("gpufrac_extender_pods")

    def fill_check(self, name, node, model, want_bound):
        """A pod pinned to one model of GPU that fits only if node has a
        whole free GPU."""
        self.create(pod(name, 1, model=model))
        if want_bound:
            got = self.wait_bound([name], 60)[name]
            if got["spec"]["nodeName"] != node:
                fail("%s bound to %s, expected %s" % (name, got["spec"]["nodeName"], node))
            return got

    def s_model_follows(self):
        """A pod deleted, a node's inventory changed by its agent, a node
        deleted: the extender's model follows the API server."""
        # n3 has 2 H100s; fill both with whole GPUs.
        for i in range(2):
            self.fill_check("h100-%d" % i, "n3", "H100-80GB", True)
        self.create(pod("h100-wait", 1, model="H100-80GB"))

        def waiting():
            return any(e.startswith("FailedScheduling") and "needs 1 whole GPU" in e
                       for e in self.events("h100-wait"))
        wait_for("h100-wait refused while n3 is full", waiting, 60)
        # Pod deleted: once the extender's model has it gone, a new pod gets
        # its GPU.  (h100-wait itself is not waited for: kube-scheduler
        # retries it on the delete, and when that retry reaches the extender
        # before its watch has the delete, the pod waits for the next event
        # or kube-scheduler's 5-minute flush.)
        self.delete_pod("h100-wait")
        self.delete_pod("h100-0")
        self.wait_model("h100-0 gone", lambda: self.model_pods() == self.bound_pods())
        self.create(pod("h100-freed", 1, model="H100-80GB"))
        got = self.wait_bound(["h100-freed"], 60)["h100-freed"]
        if got["spec"]["nodeName"] != "n3":
            fail("h100-freed bound to %s" % got["spec"]["nodeName"])
        self.check_state()
        log("model: a deleted pod's GPU went to a new pod")

        # Inventory changed by the agent: n2's four T4s become two L4s.
        t4_pods = [p["metadata"]["name"] for p in self.gpu_pods()
                   if p["spec"].get("nodeName") == "n2"]
        for n in t4_pods:
            self.delete_pod(n)
        wait_for("n2's pods gone", lambda: not any(
            p["spec"].get("nodeName") == "n2" for p in self.gpu_pods()), 60)
        self.start_agent("n2", "2xL4-24GB")
        self.set_capacity("n2", 2 * SLOTS)
        self.wait_inventory("n2", 2, "L4-24GB")
        self.create(pod("on-l4", mem="20Gi", model="L4-24GB"), pod("on-t4-again", mem="8Gi",
                                                                 model="T4-16GB"))
        got = self.wait_bound(["on-l4"], 60)["on-l4"]
        if got["spec"]["nodeName"] != "n2":
            fail("on-l4 bound to %s" % got["spec"]["nodeName"])

        def t4_refused():
            return any(e.startswith("FailedScheduling") and
                       "gpu-model: node has L4-24GB, not an allowed model" in e
                       for e in self.events("on-t4-again"))
        wait_for("a pod asking for T4s refused once n2 has none", t4_refused, 60)
        p = self.api.get("/api/v1/namespaces/%s/pods/on-t4-again" % NS)
        if p["spec"].get("nodeName"):
            fail("on-t4-again bound to %s though no node has T4s" % p["spec"]["nodeName"])
        self.delete_pod("on-t4-again")
        self.check_state()
        log("model: n2's new inventory (2xL4-24GB) placed on, T4 refused")

        # Node deleted: its pods go (pod GC), the model drops it.
        nnodes = self.ext.metric("gpufrac_extender_nodes")
        self.c.stop_gpufrac(self.agents.pop("n3"), 5)
        self.api.delete("/api/v1/nodes/n3")
        self.wait_model("n3 removed",
                        lambda: self.ext.metric("gpufrac_extender_nodes") == nnodes - 1)
        self.create(pod("h100-after", 1, model="H100-80GB"))

        def orphaned_gone():
            return not any(p["spec"].get("nodeName") == "n3"
                           for p in self.api.items("/api/v1/pods"))
        wait_for("the pod GC deleting n3's pods", orphaned_gone, 120, 1)
        self.wait_model("books the bound pods that remain",
                        lambda: self.model_pods() == self.bound_pods())
        p = self.api.get("/api/v1/namespaces/%s/pods/h100-after" % NS)
        if p["spec"].get("nodeName"):
            fail("h100-after bound to %s with n3 deleted" % p["spec"]["nodeName"])
        # The node comes back (a kubelet registering again): the agent
        # publishes its inventory on it and the waiting pod lands.
        # As on a real node: kubelet reports the gpufrac.io/gpu slots only
        # once the agent's device plugin has registered, after the agent
        # published the inventory.  (The other order leaves a pod the
        # extender refused for lack of an inventory unretried for up to 5
        # minutes: an annotation change is no event that requeues it.)
        self.add_node("n3", NODES["n3"], gpus=False)
        self.start_agent("n3", NODES["n3"])
        self.wait_inventory("n3", 2)
        time.sleep(2)  # the extender's node watch has it by then (milliseconds)
        self.set_capacity("n3", gpus_of(NODES["n3"]) * SLOTS)
        got = self.wait_bound(["h100-after"], 120)["h100-after"]
        if got["spec"]["nodeName"] != "n3":
            fail("h100-after bound to %s" % got["spec"]["nodeName"])
        self.check_state()
        log("model: n3 deleted (pods collected, model dropped it) and added again")

    def s_quota(self):
        """A namespace ResourceQuota on requests.gpufrac.io/gpu-memory,
        enforced by the API server's admission chain."""
        q = "e2e-quota"
        self.api.create("/api/v1/namespaces", {"metadata": {"name": q}})
        self.api.create("/api/v1/namespaces/%s/resourcequotas" % q, {
            "metadata": {"name": "gpu"},
            "spec": {"hard": {"requests.gpufrac.io/gpu-memory": "40Gi"}}})
        wait_for("the quota controller filling in the quota's status", lambda: self.api.get(
            "/api/v1/namespaces/%s/resourcequotas/gpu" % q)["status"].get("hard"), 60)
        wait_for("ServiceAccount default in %s" % q, lambda: self.api.get(
            "/api/v1/namespaces/%s/serviceaccounts/default" % q), 60)
        self.create(pod("q-30", mem="30Gi", model=A100, ns=q))
        try:
            self.create(pod("q-20", mem="20Gi", model=A100, ns=q))
            fail("a second pod taking 50Gi of a 40Gi quota was admitted")
        except ApiError as e:
            msg = e.status.get("message", "")
            if e.code != 403 or "exceeded quota" not in msg or \
                    "requests.gpufrac.io/gpu-memory" not in msg:
                fail("quota refusal: HTTP %d %s" % (e.code, msg))
            log("quota: refused: %s" % msg)
        self.create(pod("q-10", mem="10Gi", model=A100, ns=q))
        self.wait_bound(["q-30", "q-10"], 60, q)
        used = wait_for("the quota's used", lambda: self.api.get(
            "/api/v1/namespaces/%s/resourcequotas/gpu" % q)["status"].get("used", {}).get(
            "requests.gpufrac.io/gpu-memory") == "40Gi", 60)
        self.check_state()
        log("quota: 40Gi used of 40Gi (%s), third pod admitted and bound" % used)

    def s_rbac(self):
        """What deploy/'s RBAC and deploy/node-admission.yaml let the
        agent's and the extender's tokens do."""
        from cluster import Client
        kc_tok = {}
        for name in ("n1", "n2"):
            with open(self.c.path("agent-%s.kubeconfig" % name)) as f:
                kc_tok[name] = json.load(f)["users"][0]["user"]["token"]
        a1 = Client(self.c.server, self.c.ca, token=kc_tok["n1"])
        inv = json.dumps({"version": 1, "gpus": []})
        expect = []

        def denied(what, fn, code=403, contains=""):
            try:
                fn()
            except ApiError as e:
                msg = e.status.get("message", "")
                if e.code == code and contains in msg:
                    expect.append(what)
                    return msg
                fail("%s: HTTP %d %s; expected %d%s" % (what, e.code, msg, code,
                                                         " with " + contains if contains else ""))
            fail("%s was allowed" % what)

        patch = lambda node, p: a1.merge_patch("/api/v1/nodes/" + node, p)
        m = denied("agent n1 writing n2's inventory",
                   lambda: patch("n2", {"metadata": {"annotations": {INVENTORY: inv}}}),
                   contains="gpufrac-node")
        log("rbac: %s" % m)
        denied("agent n1 labelling its own node",
               lambda: patch("n1", {"metadata": {"labels": {"x": "y"}}}),
               contains="gpufrac-node")
        denied("agent n1 tainting its own node",
               lambda: patch("n1", {"spec": {"unschedulable": True}}),
               contains="gpufrac-node")
        denied("agent n1 writing another annotation",
               lambda: patch("n1", {"metadata": {"annotations": {"other": "x"}}}),
               contains="gpufrac-node")
        # nodes/status: RBAC allows the patch (the share capacity,
        # docs/kube.md); deploy/node-admission.yaml's policy allows only
        # gpufrac.io/gpu-memory and gpu-compute, on the agent's own Node.
        denied("agent n1 writing its node's gpufrac.io/gpu capacity",
               lambda: a1.merge_patch("/api/v1/nodes/n1/status",
                                      {"status": {"capacity": {"gpufrac.io/gpu": "1000"}}}),
               contains="gpufrac-node")
        denied("agent n1 writing n2's share capacity",
               lambda: a1.merge_patch("/api/v1/nodes/n2/status", {"status": {
                   "capacity": {"gpufrac.io/gpu-memory": "1Ti"}}}),
               contains="gpufrac-node")
        denied("agent n1 writing a grant on a pod",
               lambda: a1.merge_patch("/api/v1/namespaces/%s/pods/share-0" % NS,
                                      {"metadata": {"annotations": {GRANT: "{}"}}}))
        denied("agent n1 deleting a node", lambda: a1.delete("/api/v1/nodes/n2"))
        # pods/status (the model loader's gpufrac.io/model-ready condition):
        # only pods on the agent's own Node, only that condition.
        for nm, node in (("st-n1", "n1"), ("st-n2", "n2")):
            self.api.create("/api/v1/namespaces/%s/pods" % NS, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": nm, "namespace": NS},
                "spec": {"nodeName": node, "containers": [
                    {"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})

        def cond(nm, t, st, client=a1):
            return client.request(
                "PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (NS, nm),
                {"status": {"conditions": [{"type": t, "status": st,
                                            "reason": "E2E", "message": "e2e"}]}},
                "application/strategic-merge-patch+json")
        denied("agent n1 writing the status of a pod on n2",
               lambda: cond("st-n2", "gpufrac.io/model-ready", "True"),
               contains="gpufrac-node")
        denied("agent n1 writing a pod's Ready condition",
               lambda: cond("st-n1", "Ready", "True"), contains="gpufrac-node")
        denied("agent n1 writing a pod's phase", lambda: a1.merge_patch(
            "/api/v1/namespaces/%s/pods/st-n1/status" % NS,
            {"status": {"phase": "Failed"}}), contains="gpufrac-node")
        denied("an unbound gpufrac-node token writing a pod's status",
               lambda: cond("st-n1", "gpufrac.io/model-ready", "True",
                            Client(self.c.server, self.c.ca,
                                   token=self.c.token("gpufrac-node"))),
               contains="gpufrac-node")
        cond("st-n1", "gpufrac.io/model-ready", "True")  # its own: allowed
        got = [c for c in self.api.get("/api/v1/namespaces/%s/pods/st-n1" % NS)[
            "status"].get("conditions", []) if c["type"] == "gpufrac.io/model-ready"]
        if [c["status"] for c in got] != ["True"]:
            fail("agent n1's model-ready condition on its own pod: %s" % got)
        for nm in ("st-n1", "st-n2"):
            self.api.delete("/api/v1/namespaces/%s/pods/%s" % (NS, nm),
                            gracePeriodSeconds=0)
        # The same annotation on its own node is allowed (the agent writes it).
        mine = self.inventory("n1")
        patch("n1", {"metadata": {"annotations": {INVENTORY: json.dumps(mine)}}})
        # A token of the agent's ServiceAccount not bound to a pod on a node.
        loose = Client(self.c.server, self.c.ca, token=self.c.token("gpufrac-node"))
        denied("an unbound gpufrac-node token writing an inventory",
               lambda: loose.merge_patch("/api/v1/nodes/n1", {"metadata": {
                   "annotations": {INVENTORY: json.dumps(mine)}}}), contains="gpufrac-node")
        with open(self.ext_kc) as f:
            ext = Client(self.c.server, self.c.ca,
                         token=json.load(f)["users"][0]["user"]["token"])
        denied("extender patching a node",
               lambda: ext.merge_patch("/api/v1/nodes/n1", {"metadata": {"labels": {"x": "y"}}}))
        denied("extender deleting a pod",
               lambda: ext.delete("/api/v1/namespaces/%s/pods/share-0" % NS))
        denied("extender taking another Lease", lambda: ext.create(
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
            {"metadata": {"name": "x"}, "spec": {}}))
        if self.inventory("n2") is None or self.inventory("n2")["gpus"] == []:
            fail("n2's inventory was overwritten")
        log("rbac: %d refusals as intended; the agent's own inventory write allowed" %
            len(expect))

    def s_model_gate(self):
        """deploy/model-admission.yaml: a pod naming a model gets the
        readiness gate gpufrac.io/model-ready at creation (kept once, after
        the pod's own gates); a pod that declares it, or names no model, is
        left as written."""
        def mk(nm, ann, gates):
            p = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": nm, "namespace": NS},
                 "spec": {"nodeName": "n1", "containers": [
                     {"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
            if ann:
                p["metadata"]["annotations"] = {"gpufrac.io/model": ann}
            if gates is not None:
                p["spec"]["readinessGates"] = [{"conditionType": g} for g in gates]
            o = self.api.create("/api/v1/namespaces/%s/pods" % NS, p)
            return [g["conditionType"] for g in o["spec"].get("readinessGates", [])]
        ref = "lm@sha256:" + "ab" * 32
        cases = [("mg-plain", ref, None, ["gpufrac.io/model-ready"]),
                 ("mg-other", ref, ["example.com/x"],
                  ["example.com/x", "gpufrac.io/model-ready"]),
                 ("mg-own", ref, ["gpufrac.io/model-ready"], ["gpufrac.io/model-ready"]),
                 ("mg-none", None, None, [])]
        for nm, ann, gates, want in cases:
            got = mk(nm, ann, gates)
            if got != want:
                fail("pod %s: readiness gates %s, expected %s" % (nm, got, want))
            self.api.delete("/api/v1/namespaces/%s/pods/%s" % (NS, nm),
                            gracePeriodSeconds=0)
        log("model_gate: the readiness gate added to the pods naming a model, "
            "once, and to no other")

    def s_replicas(self):
        """Two extender replicas and the real Lease: one leads; SIGTERM
        hands the Lease over at once, SIGKILL after it expires."""
        lease_path = "/apis/coordination.k8s.io/v1/namespaces/gpufrac-system/leases/gpufrac-scheduler"
        b = Extender(self.c, "extender-b", free_port(), self.ext_kc).start()
        wait_for("replica b ready", lambda: b.get("/readyz")[0] == 200, 60)
        time.sleep(3)
        if b.metric("gpufrac_extender_leader") != 0 or self.ext.metric(
                "gpufrac_extender_leader") != 1:
            fail("two replicas: a leads %s, b leads %s" % (
                self.ext.metric("gpufrac_extender_leader"), b.metric("gpufrac_extender_leader")))
        lease = self.api.get(lease_path)
        holder = lease["spec"]["holderIdentity"]
        if not holder.endswith("_%d" % self.ext.identity_pid()):
            fail("Lease held by %s, the leading replica is pid %d" %
                 (holder, self.ext.identity_pid()))
        t0 = lease["spec"].get("leaseTransitions", 0)
        # SIGTERM releases the Lease: b takes over within a retry period.
        self.c.stop_gpufrac(self.ext.proc, 10)
        t = time.monotonic()
        wait_for("replica b leading", lambda: b.metric("gpufrac_extender_leader") == 1, 10)
        log("replicas: b leads %.1f s after a's SIGTERM" % (time.monotonic() - t))
        lease = self.api.get(lease_path)
        if not lease["spec"]["holderIdentity"].endswith("_%d" % b.identity_pid()) or \
                lease["spec"].get("leaseTransitions", 0) != t0 + 1:
            fail("after the hand-over the Lease is %s" % lease["spec"])
        # a comes back as a follower; b killed: a takes over after expiry.
        self.ext = Extender(self.c, "extender-3", self.c.ext_port, self.ext_kc).start()
        wait_for("replica a ready", lambda: self.ext.get("/readyz")[0] == 200, 60)
        if self.ext.metric("gpufrac_extender_leader") != 0:
            fail("a restarted replica leads while b holds the Lease")
        b.proc.kill9()
        t = time.monotonic()
        self.ext.ready_leader(40)
        log("replicas: a leads %.1f s after b's SIGKILL" % (time.monotonic() - t))
        self.create(pod("after-takeover", 1, "4Gi", 10))
        self.wait_bound(["after-takeover"], 90)
        self.check_state()

    def s_rebook(self):
        """A restarted extender books a bound pod from its grant, never from
        its request as read now (issue 30, a tester's double grant).  On a
        node of 3 A10s: rb-kai-half (gpu-fraction 0.5, gpufrac.io/gpu: 1)
        bound by the extender without --accept kai holds a whole GPU;
        rb-whole's request is made unreadable (kubectl annotate
        gpu-fraction=bogus).  The extender restarted with --accept kai (what
        `helm upgrade --set extender.accept='{kai}'` rolls out) gives
        neither GPU to the 6Gi pods that follow: 4 fill the third GPU, the
        other 2 wait."""
        A10 = "A10-24GB"  # no other node has this model (n2 gets L4s)
        self.add_node("n4", "3x" + A10)
        self.start_agent("n4", "3x" + A10)
        self.wait_inventory("n4", 3)
        half = pod("rb-kai-half", 1, model=A10)
        half["metadata"]["annotations"]["gpu-fraction"] = "0.5"
        self.wait_bound(self.create(half, pod("rb-whole", 1, model=A10)), 60)
        grants = self.check_state()
        for n in ("rb-kai-half", "rb-whole"):
            g = grants[NS + "/" + n]["containers"][0]["gpus"][0]
            if g["memory"] != 0 or g["compute"] != 100:
                fail("%s's grant %s: want a whole GPU (memory 0, compute 100)" % (n, g))
        self.c.kubectl("annotate", "-n", NS, "pod", "rb-whole", "gpu-fraction=bogus")
        self.c.stop_gpufrac(self.ext.proc, 10)
        self.ext = Extender(self.c, "extender-kai", self.c.ext_port, self.ext_kc,
                            ["--accept", "kai"]).start()
        self.ext.ready_leader(60)
        names = self.create(*[pod("rb-six-%d" % i, mem="6Gi", model=A10) for i in range(6)])

        def settled():
            pods = {p["metadata"]["name"]: p for p in self.gpu_pods()}
            bound = [n for n in names if pods[n]["spec"].get("nodeName")]
            waiting = [n for n in names if n not in bound and
                       any(e.startswith("FailedScheduling") for e in self.events(n))]
            return len(bound) + len(waiting) == len(names) and (bound, waiting)
        bound, waiting = wait_for("the 6Gi pods bound or refused", settled, 90)
        time.sleep(3)  # a late bind would show here
        self.check_state()
        bound = [p["metadata"]["name"] for p in self.gpu_pods()
                 if p["metadata"]["name"] in names and p["spec"].get("nodeName")]
        if len(bound) != 4:
            fail("%d of the 6Gi pods bound on 3 A10s of which 2 are held whole, "
                 "want 4: %s" % (len(bound), bound))
        self.wait_model("books every bound pod after the restart",
                        lambda: self.model_pods() == self.bound_pods())
        with open(self.c.path(self.ext.name + ".log")) as f:
            logtext = f.read()
        if "rb-whole: " not in logtext or "booked from its grant" not in logtext:
            fail("the restarted extender did not log rb-whole's unreadable request:\n%s"
                 % logtext[-2000:])
        log("rebook: after the restart 4 of 6 pods of 6Gi bound, %s waiting; "
            "the whole GPUs stayed held" % ", ".join(waiting))


# Run by default, in this order; --only picks any.  rebook last: it leaves
# the extender running with --accept kai.
SCENARIOS = ["bind", "whole_memonly", "rbac", "quota", "kill9", "model_follows",
             "model_gate", "replicas", "rebook"]


def main():
    def begin(c):
        c.start()
        t = E2E(c)
        t.setup()
        return t
    return run_scenarios(__doc__, "e2e", SCENARIOS, Cluster, begin,
                         before_stop=lambda c: c.log_dead((0, -9, -15)))


if __name__ == "__main__":
    sys.exit(main())
