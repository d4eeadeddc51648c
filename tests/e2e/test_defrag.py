#!/usr/bin/env python3
"""Defragmentation (issue 32, items 3 and 5) against the real control plane
(CTest label e2e).

Usage: test_defrag.py K8S_BIN GPUFRAC [--keep]

deploy/ applied as in test_k8s.py, plus deploy/defrag/ (eviction and
events for the extender's account); one Node n1 with two 80Gi GPUs and 4
gpufrac.io/gpu slots.  A ReplicaSet "shares" (2 replicas, 30Gi each)
whose two pods are bound with grants, one per GPU (as an earlier bind left
them): every GPU holds 30Gi, none is whole.  Then w asks a whole GPU (same
priority: no preemption).  It fits no GPU.

The extender runs with --defrag on (and --guard off: no kubelet runs
these pods, so they never become Ready and the guard would hold them):
its plan moves one share pod (its replacement fits beside the other, 50Gi
free), through the real Eviction API; the ReplicaSet controller makes the
replacement; kube-scheduler binds w to the freed GPU and the replacement
beside the other share.  Checked: exactly one eviction, w on a GPU of its
own, the Events GpufracDefragMoved on the moved pod and GpufracDefragFor
on w, gpufrac_defrag_evictions_total 1.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import DEPLOY, Cluster, Failure, e2e_args, log, run_once, wait_for  # noqa: E402
from test_k8s import E2E, Extender, GiB, INVENTORY, NS, pod  # noqa: E402

GRANT = "gpufrac.io/grant"


def fail(msg):
    raise Failure(msg)


class DefragExtender(Extender):
    def start(self):
        self.proc = self.c.spawn(self.name, [
            self.c.gpufrac, "scheduler", "--listen", "127.0.0.1:%d" % self.port,
            "--kubeconfig", self.kc, "--guard", "off", "--defrag", "on"])
        return self


def main():
    a = e2e_args(__doc__, 2)
    if not a:
        return 2
    (k8s_bin, gpufrac), keep = a

    def body(c):
        c.start(scheduler=False)
        t = E2E(c)
        api = c.admin
        t.apply_deploy()
        c.kubectl("apply", "-f", os.path.join(DEPLOY, "defrag",
                                              "scheduler-defrag-rbac.yaml"))
        c.namespace(NS)
        c.add_node("n1", {"gpufrac.io/enabled": "true"})
        c.node_status("n1", {"cpu": "32", "memory": "256Gi", "pods": "110",
                             "gpufrac.io/gpu": "4"})
        inv = {"version": 1, "gpus": [
            {"index": i, "uuid": "GPU-n1-%d" % i, "model": "A100-80GB",
             "memory": 80 << 30, "mode": "shared"} for i in range(2)]}
        api.merge_patch("/api/v1/nodes/n1", {
            "metadata": {"annotations": {INVENTORY: json.dumps(inv)}}})
        kc = c.sa_kubeconfig("extender", c.token("gpufrac-scheduler"))
        ext = DefragExtender(c, "extender", c.ext_port, kc).start()
        ext.ready_leader()
        c.start_scheduler()
        # The two pods bound first, then the ReplicaSet, which adopts them
        # (orphans its selector matches) and so makes none of its own.
        labels = {"e2e": "gpu", "app": "shares"}
        for i in range(2):
            p = pod("shares-%d" % i, 1, "30Gi")
            p["metadata"]["labels"] = labels
            p["spec"]["nodeName"] = "n1"
            p["metadata"]["annotations"] = {GRANT: json.dumps({
                "version": 1, "node": "n1", "containers": [{"name": "main", "gpus": [
                    {"uuid": "GPU-n1-%d" % i, "index": i, "memory": 30 * GiB,
                     "compute": 0}]}]})}
            t.create(p)
        tmpl = pod("tmpl", 1, "30Gi")
        api.create("/apis/apps/v1/namespaces/%s/replicasets" % NS, {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "shares", "namespace": NS},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "shares"}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": tmpl["spec"]}}})

        def adopted():
            ps = [p for p in t.gpu_pods() if p["metadata"]["name"].startswith("shares-")]
            return len(ps) == 2 and all(
                r.get("kind") == "ReplicaSet"
                for p in ps for r in p["metadata"].get("ownerReferences", []))  \
                and all(p["metadata"].get("ownerReferences") for p in ps)
        wait_for("the ReplicaSet adopting both pods", adopted, 30)
        wait_for("the extender booking both shares",
                 lambda: ext.metric("gpufrac_extender_pods") is not None and
                 ext.metric("gpufrac_extender_pods") >= 2, 30)
        t.create(pod("w", 1))  # a whole GPU

        def where():
            out = []
            for p in t.gpu_pods():
                g = p["metadata"].get("annotations", {}).get(GRANT)
                gpus = [x["index"] for x in json.loads(g)["containers"][0]["gpus"]] \
                    if g else None
                out.append("%s@%s%s%s" % (p["metadata"]["name"],
                                          p["spec"].get("nodeName"), gpus,
                                          " (deleting)" if p["metadata"].get(
                                              "deletionTimestamp") else ""))
            return ", ".join(sorted(out))
        try:
            got = t.wait_bound(["w"], timeout=120)["w"]
        except Failure:
            log("pods: %s" % where())
            raise
        log("pods: %s" % where())
        grant = json.loads(got["metadata"]["annotations"][GRANT])
        gw = [g["index"] for g in grant["containers"][0]["gpus"]]
        moved = [p["metadata"]["name"] for p in t.gpu_pods()
                 if p["metadata"]["name"].startswith("shares-") and
                 p["metadata"].get("deletionTimestamp")] or \
            [n for n in ("shares-0", "shares-1")
             if n not in {p["metadata"]["name"] for p in t.gpu_pods()}]
        ev_moved = [e for n in moved for e in t.events(n)
                    if e.startswith("GpufracDefragMoved")]
        ev_for = [e for e in t.events("w") if e.startswith("GpufracDefragFor")]
        evictions = ext.metric("gpufrac_defrag_evictions_total")
        log("defrag: w bound to GPU %s; moved %s; events %s / %s; "
            "evictions %s" % (gw, moved, ev_moved, ev_for, evictions))
        if evictions != 1 or len(moved) != 1:
            fail("expected exactly one pod moved, got %s (metric %s)" %
                 (moved, evictions))
        if gw != [int(moved[0][-1])]:
            fail("w took GPU %s, not the moved pod's GPU %s" % (gw, moved[0][-1]))
        if not ev_moved or not ev_for:
            fail("missing events: moved %s, for %s" % (ev_moved, ev_for))
        c.check_alive()

    def tails(c):
        for p in c.extra:
            log("%s log ends:\n%s" % (p.name, p.tail(20)))
    return run_once("e2e defrag", lambda: Cluster(k8s_bin, gpufrac, keep),
                    body, tails)


if __name__ == "__main__":
    sys.exit(main())
