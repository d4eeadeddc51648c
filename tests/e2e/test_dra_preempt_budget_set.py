#!/usr/bin/env python3
"""test_dra_preempt_budget_set.py K8S_BIN GPUFRAC [--keep]

DRA mode 2 preemption (docs/dra.md, "Preemption") on the real control
plane when the only set of victims breaks a PodDisruptionBudget: one 80Gi
GPU holds two 40Gi pods of priority 10, Running and Ready, one of them
under a budget of maxUnavailable 0; a gated 80Gi pod of priority 1000
needs both gone.  The Eviction API refuses the protected pod, so the
preemption cannot succeed: gpufrac must evict neither (before the fix it
evicted the unprotected pod, then was refused on the other, and the first
pod was lost for nothing).  With the budget deleted, both are evicted
and, once they are gone, the preemptor is bound there with the whole GPU.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as C  # noqa: E402

NS = "pb"


def body(c, gpufrac):
    c.start()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    c.namespace("gpufrac-system")
    c.kubectl("apply", "-f", os.path.join(root, "deploy", "dra", "deviceclasses.yaml"))
    c.add_node("n1")
    c.node_status("n1", {"cpu": "64", "memory": "256Gi", "pods": "110"})
    conf = c.path("node.conf")
    with open(conf, "w") as f:
        f.write("dra_allocator = gpufrac\n")
    out = subprocess.run([gpufrac, "node", "--mode", "dra", "--once", "--print", "slices",
                          "--node-name", "n1", "--fake-gpus", "1xH100-80GB",
                          "--config", conf], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    for s in json.loads(out):
        c.admin.create("/apis/resource.k8s.io/v1/resourceslices", s)
    c.spawn("extender", [gpufrac, "scheduler", "--dra", "allocate", "--listen",
                         "127.0.0.1:%d" % c.ext_port, "--kubeconfig", c.admin_kc,
                         "--guard", "off"])
    c.namespace(NS)
    for n, v in (("pb-low", 10), ("pb-high", 1000)):
        c.admin.create("/apis/scheduling.k8s.io/v1/priorityclasses",
                       {"metadata": {"name": n}, "value": v})
    for name, mem, cores in (("g40", "40Gi", "40"), ("g80", "80Gi", "100")):
        c.admin.create("/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates" % NS, {
            "metadata": {"name": name}, "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {
                    "deviceClassName": "gpu.gpufrac.io",
                    "capacity": {"requests": {"memory": mem, "cores": cores}}}}]}}}})

    def pod(name, tmpl, pc, labels=None):
        c.admin.create("/api/v1/namespaces/%s/pods" % NS, {
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"priorityClassName": pc,
                     "schedulingGates": [{"name": "gpufrac.io/placement"}],
                     "containers": [{"name": "c", "image": "x", "resources": {
                         "claims": [{"name": "gpu"}]}}],
                     "resourceClaims": [{"name": "gpu",
                                         "resourceClaimTemplateName": tmpl}]}})

    def get(name):
        try:
            return c.admin.get("/api/v1/namespaces/%s/pods/%s" % (NS, name))
        except C.ApiError as e:
            if e.code == 404:
                return None
            raise

    def evicted(name):
        p = get(name)
        return p is None or bool(p["metadata"].get("deletionTimestamp"))

    # aa-free first: in name order it comes before the protected pod.
    pod("aa-free", "g40", "pb-low")
    pod("zz-prot", "g40", "pb-low", {"prot": "yes"})
    for n in ("aa-free", "zz-prot"):
        C.wait_for("%s bound" % n,
                   lambda: ((get(n) or {}).get("spec") or {}).get("nodeName"), 60)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        c.admin.request("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (NS, n),
                        {"status": {"phase": "Running", "conditions": [
                            {"type": "Ready", "status": "True",
                             "lastTransitionTime": now}]}},
                        "application/merge-patch+json")
    pdb = "/apis/policy/v1/namespaces/%s/poddisruptionbudgets/prot" % NS
    c.admin.create("/apis/policy/v1/namespaces/%s/poddisruptionbudgets" % NS, {
        "metadata": {"name": "prot"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"prot": "yes"}}}})
    C.wait_for("the budget's status", lambda: (c.admin.get(pdb).get("status") or {})
               .get("observedGeneration") == 1, 60)
    time.sleep(2)  # the extender's budget informer sees it

    pod("hp", "g80", "pb-high")
    # Two tries at least (one every 10 s).
    deadline = time.time() + 25
    while time.time() < deadline:
        for n in ("aa-free", "zz-prot"):
            if evicted(n):
                raise C.Failure("%s was evicted for a preemption whose other victim "
                                "a PodDisruptionBudget protects (maxUnavailable 0): "
                                "the Eviction API refuses that one, so nothing "
                                "should go" % n)
        time.sleep(0.5)
    hp = get("hp")
    if hp["spec"].get("nodeName") or not hp["spec"].get("schedulingGates"):
        raise C.Failure("hp left its gate with both 40Gi pods still there: %s" % hp["spec"])
    C.log("the budget holds: neither victim evicted, hp still gated")

    # Without the budget the preemption goes through.
    c.admin.delete(pdb)
    C.wait_for("both victims evicted",
               lambda: evicted("aa-free") and evicted("zz-prot"), 40)
    # No kubelet: confirm the victims' termination as it would.
    for n in ("aa-free", "zz-prot"):
        if get(n):
            c.admin.delete("/api/v1/namespaces/%s/pods/%s" % (NS, n),
                           gracePeriodSeconds="0")
    C.wait_for("hp bound to n1",
               lambda: ((get("hp") or {}).get("spec") or {}).get("nodeName") == "n1", 90)
    C.log("hp bound to n1 once its victims were gone")


def main():
    a = C.e2e_args(__doc__, 2)
    if not a:
        return 2
    (k8s_bin, gpufrac), keep = a
    return C.run_once(
        "test_dra_preempt_budget_set",
        lambda: C.Cluster(k8s_bin, gpufrac, keep,
                          feature_gates={"DRAConsumableCapacity": True}),
        lambda c: body(c, gpufrac),
        lambda c: [C.log("%s log ends:\n%s" % (p.name, p.tail(30))) for p in c.extra])


if __name__ == "__main__":
    sys.exit(main())
