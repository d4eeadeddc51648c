#!/usr/bin/env python3
"""kube-scheduler's preemption with and without the extender's preempt
verb (issue 32, items 1 and 5), against the real control plane (CTest
label e2e).

Usage: test_preempt.py K8S_BIN GPUFRAC [--keep]

deploy/ applied as in test_k8s.py, one Node n1 with two 80Gi GPUs and 4
gpufrac.io/gpu slots, four pods bound there with grants (as an earlier
bind left them), by PriorityClass:

    GPU0: a (priority 10, 40Gi), b (priority 10, 20Gi)    20Gi free
    GPU1: c (priority 1, 10Gi),  d (priority 20, 60Gi)    10Gi free

then hi (priority 1000, 40Gi).  Every slot is taken and no GPU has 40Gi,
so kube-scheduler preempts.

  1. Without preemptVerb (deploy/'s configuration with that line left
     out): kube-scheduler counts slots and evicts its least important pod,
     c, which frees 10Gi of GPU1; hi still fits no GPU, and with a slot
     free now kube-scheduler finds no more victims: hi stays Pending and c
     was evicted for nothing.
  2. With deploy/'s configuration (preemptVerb: preempt): the extender
     answers b (one victim, priority 10 below d's 20, GPU0 left exactly
     full where a would leave 20Gi); kube-scheduler evicts b alone and hi
     is bound to n1 on GPU0.

  3. The same with a PodDisruptionBudget over b (minAvailable 1; b is
     never Ready, so the disruption controller allows no disruption): b
     would break it, so the extender answers a (one victim, priority 10,
     breaks nothing; d's 20 is higher); kube-scheduler evicts a alone and
     hi is bound to GPU0.

The extender runs with --preempt-evict off (its own preemption for GPU
memory is test_preempt_memory.py's) and --guard off: no kubelet runs these pods, so they
never become Ready and the guard would hold every one of them (the guard's
rule is tests/sched/test_sched_preempt.c's).
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import DEPLOY, Cluster, Failure, e2e_args, log, run_once, wait_for  # noqa: E402
from test_k8s import E2E, Extender, GiB, INVENTORY, NS, pod  # noqa: E402

GRANT = "gpufrac.io/grant"
CLASSES = {"e2e-p1": 1, "e2e-p10": 10, "e2e-p20": 20, "e2e-p1000": 1000}
# name: (GPU, GiB, PriorityClass)
VICTIMS = {"a": (0, 40, "e2e-p10"), "b": (0, 20, "e2e-p10"),
           "c": (1, 10, "e2e-p1"), "d": (1, 60, "e2e-p20")}


def fail(msg):
    raise Failure(msg)


class GuardOffExtender(Extender):
    args = ()

    def start(self):
        self.proc = self.c.spawn(self.name, [
            self.c.gpufrac, "scheduler", "--listen", "127.0.0.1:%d" % self.port,
            "--kubeconfig", self.kc, "--guard", "off"] + list(self.args))
        return self


def bound_pod(name, gpu, gib, pclass):
    p = pod(name, 1, "%dGi" % gib)
    p["spec"]["nodeName"] = "n1"
    p["spec"]["priorityClassName"] = pclass
    p["metadata"]["labels"]["e2e-pod"] = name
    p["metadata"]["annotations"] = {GRANT: json.dumps({
        "version": 1, "node": "n1", "containers": [{"name": "main", "gpus": [
            {"uuid": "GPU-n1-%d" % gpu, "index": gpu, "memory": gib * GiB,
             "compute": 0}]}]})}
    return p


def config(with_verb):
    with open(os.path.join(DEPLOY, "kube-scheduler-config.yaml")) as f:
        lines = f.read().split("\n")
    verb = [ln for ln in lines if ln.strip() == "preemptVerb: preempt"]
    if len(verb) != 1:
        fail("deploy/kube-scheduler-config.yaml: no 'preemptVerb: preempt' line")
    return "\n".join(ln for ln in lines if with_verb or ln not in verb)


class Run:
    # kube-scheduler's preemption alone against the verb: the extender's own
    # preemption for GPU memory (test_preempt_memory.py) is off here, or it
    # would rescue scene 1 after kube-scheduler's wrong eviction.
    ext_args = ("--preempt-evict", "off")

    def __init__(self, c):
        self.c = c
        self.t = E2E(c)
        self.api = c.admin

    def model_synced(self):
        """The extender books every bound pod (deploy/'s own too, for
        their CPU and memory): its count is the API server's."""
        bound = [p for p in self.api.items("/api/v1/pods")
                 if p["spec"].get("nodeName") and
                 not p["metadata"].get("deletionTimestamp")]
        return self.ext.metric("gpufrac_extender_pods") == len(bound)

    def pods(self):
        return {p["metadata"]["name"]: p for p in self.t.gpu_pods()}

    def setup(self):
        self.t.apply_deploy()
        self.c.namespace(NS)
        for name, value in CLASSES.items():
            self.api.create("/apis/scheduling.k8s.io/v1/priorityclasses", {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value})
        self.c.add_node("n1", {"gpufrac.io/enabled": "true"})
        self.c.node_status("n1", {"cpu": "32", "memory": "256Gi", "pods": "110",
                                  "gpufrac.io/gpu": "4"})
        inv = {"version": 1, "gpus": [
            {"index": i, "uuid": "GPU-n1-%d" % i, "model": "A100-80GB",
             "memory": 80 << 30, "mode": "shared"} for i in range(2)]}
        self.api.merge_patch("/api/v1/nodes/n1", {
            "metadata": {"annotations": {INVENTORY: json.dumps(inv)}}})
        kc = self.c.sa_kubeconfig("extender", self.c.token("gpufrac-scheduler"))
        ext = GuardOffExtender(self.c, "extender", self.c.ext_port, kc)
        ext.args = self.ext_args
        self.ext = ext.start()
        self.ext.ready_leader()

    def scene(self, with_verb):
        """The four pods bound, kube-scheduler (re)started, then hi."""
        left = list(self.pods())
        for n in left:
            self.t.delete_pod(n)
        wait_for("the namespace's GPU pods gone", lambda: not self.pods(), 60)
        wait_for("the extender's model without them", self.model_synced, 30)
        ks = self.c.procs.get("kube-scheduler")
        if ks:
            ks.stop()
        self.c.start_scheduler(config=config(with_verb))
        self.t.create(*[bound_pod(n, *v) for n, v in VICTIMS.items()])
        try:
            wait_for("the four pods booked in the extender's model",
                     self.model_synced, 30)
        except Failure:
            log("extender metrics:\n" + "\n".join(
                ln for ln in self.ext.get("/metrics")[1].splitlines()
                if not ln.startswith("#") and "bucket" not in ln))
            log("pods: %s" % json.dumps(list(self.pods().values())[:1])[:3000])
            raise
        uids = {n: p["metadata"]["uid"] for n, p in self.pods().items()}
        hi = pod("hi", 1, "40Gi")
        hi["spec"]["priorityClassName"] = "e2e-p1000"
        self.t.create(hi)
        return uids

    def without_verb(self):
        uids = self.scene(False)
        wait_for("kube-scheduler evicting a pod",
                 lambda: set(self.pods()) != set(VICTIMS) | {"hi"}, 60)
        # Give it every chance: kube-scheduler retries hi with back-off
        # (at most 10 s) and would preempt again if it found victims.
        time.sleep(25)
        now = self.pods()
        gone = sorted(set(VICTIMS) - set(now))
        hi = now.get("hi", {})
        log("without preemptVerb: evicted %s; hi nominated %r, bound %r; "
            "events %s" % (gone, hi.get("status", {}).get("nominatedNodeName"),
                           hi.get("spec", {}).get("nodeName"),
                           self.t.events("hi")[-3:]))
        if gone != ["c"]:
            fail("kube-scheduler alone evicted %s, expected c (its least "
                 "important pod, on GPU1)" % gone)
        if hi.get("spec", {}).get("nodeName"):
            fail("hi was bound to %s after c's eviction, where no GPU has 40Gi"
                 % hi["spec"]["nodeName"])
        if self.ext_preempts():
            fail("the extender's preempt verb was called without preemptVerb")
        return uids

    def with_verb(self):
        before = self.ext_preempts()
        uids = self.scene(True)
        got = self.t.wait_bound(["hi"], timeout=90)["hi"]
        now = self.pods()
        gone = sorted(set(VICTIMS) - set(now))
        grant = json.loads(got["metadata"]["annotations"][GRANT])
        gpus = [g["index"] for g in grant["containers"][0]["gpus"]]
        log("with preemptVerb: evicted %s; hi bound to %s on GPU %s; "
            "the extender answered %d preempt calls" %
            (gone, got["spec"]["nodeName"], gpus, self.ext_preempts() - before))
        if gone != ["b"]:
            fail("evicted %s, expected exactly b" % gone)
        for n in ("a", "c", "d"):
            if now[n]["metadata"]["uid"] != uids[n]:
                fail("%s was replaced" % n)
        if got["spec"]["nodeName"] != "n1" or gpus != [0]:
            fail("hi bound to %s GPUs %s, expected n1 GPU 0" %
                 (got["spec"]["nodeName"], gpus))
        if self.ext_preempts() <= before:
            fail("kube-scheduler did not call the extender's preempt verb")
        self.t.check_state()

    def with_budget(self):
        """Scene 3: a PodDisruptionBudget over b steers the verb to a."""
        path = "/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % NS
        self.api.create(path, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-b", "namespace": NS},
            "spec": {"minAvailable": 1,
                     "selector": {"matchLabels": {"e2e-pod": "b"}}}})
        wait_for("the extender knowing the budget",
                 lambda: self.ext.metric("gpufrac_extender_pdbs") == 1, 30)
        before = self.ext_preempts()
        uids = self.scene(True)
        got = self.t.wait_bound(["hi"], timeout=90)["hi"]
        now = self.pods()
        gone = sorted(set(VICTIMS) - set(now))
        grant = json.loads(got["metadata"]["annotations"][GRANT])
        gpus = [g["index"] for g in grant["containers"][0]["gpus"]]
        pdb = self.api.get(path + "/keep-b")
        log("with a budget over b (disruptionsAllowed %s): evicted %s; hi "
            "bound to %s on GPU %s" %
            (pdb.get("status", {}).get("disruptionsAllowed"), gone,
             got["spec"]["nodeName"], gpus))
        if gone != ["a"]:
            fail("evicted %s, expected exactly a (b's budget allows none)"
                 % gone)
        for n in ("b", "c", "d"):
            if now[n]["metadata"]["uid"] != uids[n]:
                fail("%s was replaced" % n)
        if got["spec"]["nodeName"] != "n1" or gpus != [0]:
            fail("hi bound to %s GPUs %s, expected n1 GPU 0" %
                 (got["spec"]["nodeName"], gpus))
        if self.ext_preempts() <= before:
            fail("kube-scheduler did not call the extender's preempt verb")
        self.api.delete(path + "/keep-b")

    def ext_preempts(self):
        n = 0.0
        for line in self.ext.get("/metrics")[1].splitlines():
            if line.startswith("gpufrac_extender_requests_total") and \
                    'verb="preempt"' in line and 'code="200"' in line:
                n += float(line.split()[-1])
        return n


def main():
    a = e2e_args(__doc__, 2)
    if not a:
        return 2
    (k8s_bin, gpufrac), keep = a

    def body(c):
        c.start(scheduler=False)
        r = Run(c)
        r.setup()
        r.without_verb()
        r.with_verb()
        r.with_budget()
        c.check_alive()

    def tails(c):
        for p in c.extra:
            log("%s log ends:\n%s" % (p.name, p.tail(20)))
        ks = c.procs.get("kube-scheduler")
        if ks:
            log("kube-scheduler log ends:\n%s" % ks.tail(30))
    return run_once("e2e preempt", lambda: Cluster(k8s_bin, gpufrac, keep),
                    body, tails)


if __name__ == "__main__":
    sys.exit(main())
