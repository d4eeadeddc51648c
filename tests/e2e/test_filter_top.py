#!/usr/bin/env python3
"""`gpufrac scheduler --filter-top 1` (issue 13, docs/scheduler.md) with
the real kube-scheduler (CTest label e2e).

Usage: test_filter_top.py K8S_BIN GPUFRAC [--keep]

deploy/ applied as in test_k8s.py, four Nodes of 2 A100 each with their
inventories (no node agents), the extender run as its ServiceAccount with
--filter-top 1, kube-scheduler with deploy/'s configuration calling it:

  1. eight share pods are bound, with grants and no GPU over capacity,
     and kube-scheduler never called /prioritize (a filter reply with one
     node leaves it nothing to score), while the extender counted the
     fitting nodes it left out;
  2. a pod that fits nowhere stays Pending with a FailedScheduling event
     carrying the extender's reason: leaving nodes out of a reply never
     hides why a pod cannot be placed;
  3. a pod without gpufrac GPUs is kube-scheduler's alone: bound too.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, Failure, e2e_args, log, run_once, wait_for  # noqa: E402
from test_k8s import E2E, Extender, INVENTORY, NS, pod  # noqa: E402

NODES = ("n1", "n2", "n3", "n4")


def fail(msg):
    raise Failure(msg)


class TopExtender(Extender):
    def start(self):
        self.proc = self.c.spawn(self.name, [
            self.c.gpufrac, "scheduler", "--listen", "127.0.0.1:%d" % self.port,
            "--kubeconfig", self.kc, "--filter-top", "1"])
        return self

    def requests(self, verb):
        n = 0.0
        for line in self.get("/metrics")[1].splitlines():
            if line.startswith("gpufrac_extender_request_duration_seconds_count") \
                    and 'verb="%s"' % verb in line:
                n += float(line.split()[-1])
        return n


def run(c):
    t = E2E(c)
    t.apply_deploy()
    c.namespace(NS)
    for n in NODES:
        t.add_node(n, "2xA100-80GB")
        inv = {"version": 1, "gpus": [
            {"index": i, "uuid": "GPU-%s-%d" % (n, i), "model": "A100-80GB",
             "memory": 80 << 30, "mode": "shared"} for i in range(2)]}
        c.admin.merge_patch("/api/v1/nodes/" + n, {
            "metadata": {"annotations": {INVENTORY: json.dumps(inv)}}})
    kc = c.sa_kubeconfig("extender", c.token("gpufrac-scheduler"))
    ext = TopExtender(c, "extender", c.ext_port, kc).start()
    ext.ready_leader()
    wait_for("the extender holding the four nodes",
             lambda: ext.metric("gpufrac_extender_nodes") == len(NODES), 30)
    t.ext = ext

    # 1. shares bound through a one-node filter reply
    names = t.create(*[pod("share-%d" % i, 1, "20Gi", 30) for i in range(8)])
    got = t.wait_bound(names)
    t.check_state()
    prio = ext.requests("prioritize")
    filt = ext.requests("filter")
    cut = ext.metric("gpufrac_extender_filter_cut_nodes_total")
    if prio != 0:
        fail("kube-scheduler called /prioritize %d times; with --filter-top 1 "
             "it has one feasible node and must not" % prio)
    if filt < len(names):
        fail("only %d filter calls for %d pods" % (filt, len(names)))
    if not cut:
        fail("no fitting node was left out of a filter reply (cut %r)" % cut)
    used = sorted({p["spec"]["nodeName"] for p in got.values()})
    log("filter-top: %d pods bound on %s; %d filter calls, 0 prioritize, "
        "%d fitting nodes left out" % (len(names), used, filt, cut))

    # 2. fits nowhere: Pending, with the extender's reason
    t.create(pod("too-big", 1, "100Gi"))

    def reason():
        for e in t.events("too-big"):
            if e.startswith("FailedScheduling") and \
                    "gpu-memory 100Gi: the largest GPU on n" in e:
                return e
    e = wait_for("a FailedScheduling event carrying the extender's reason",
                 reason, 60)
    p = c.admin.get("/api/v1/namespaces/%s/pods/too-big" % NS)
    if p["spec"].get("nodeName"):
        fail("too-big was bound to %s" % p["spec"]["nodeName"])
    log("filter-top: too-big Pending, event %r" % e[:160])

    # 3. no gpufrac GPUs: kube-scheduler's own choice among all nodes
    t.create(pod("cpu-only"))
    t.wait_bound(["cpu-only"])
    log("filter-top: cpu-only bound")
    if ext.requests("prioritize") != 0:
        fail("/prioritize called for a pod")
    c.check_alive()


def main():
    a = e2e_args(__doc__, 2)
    if not a:
        return 2
    (k8s_bin, gpufrac), keep = a

    def body(c):
        c.start()
        run(c)

    def tails(c):
        for p in c.extra:
            log("%s log ends:\n%s" % (p.name, p.tail(15)))
    return run_once("e2e filter top",
                    lambda: Cluster(k8s_bin, gpufrac, keep),
                    body, tails)


if __name__ == "__main__":
    sys.exit(main())
