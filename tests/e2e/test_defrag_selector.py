#!/usr/bin/env python3
"""Defragmentation plans only where the pending pod may run; a hold says so
in the refusal and its refused pods are tried again when it ends (issue 32,
F3), against the real kube-scheduler.

Usage: test_defrag_selector.py K8S_BIN GPUFRAC [--keep]

Two nodes with one 80Gi GPU each: Deployment x (30Gi) pinned to n1 by
nodeSelector, Deployment y (30Gi, no constraint) on n2.  n2 is labelled
pool=b and has one example.com/foo.

A: pending w2 asks a whole GPU with nodeSelector n1: kube-scheduler offers
/filter n1 alone, where x cannot move.  Before, the plan evicted y to free
n2's GPU for w2, which can never run there; now nothing is evicted.

B: w asks a whole GPU on pool=b and one example.com/foo.  Once /filter has
seen it (n2 offered, refused: y), a bound pod takes the foo (kube-scheduler
refuses n2 for w from then on, the extender cannot know), and y, protected
meanwhile (gpufrac.io/protect), is let go: the plan moves y and holds n2's
GPU for w.  Then w3 asks a whole GPU: its refusal on n2 must name the hold
("GPU 0 held for default/w by defragmentation until ..."), not only "node
has 0 free".  w is deleted (its hold ends): the extender annotates w3
(gpufrac.io/defrag-retry), kube-scheduler tries it again, and it binds to
n2.

F7: a pod bound with an unreadable grant is logged without its name twice.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as C  # noqa: E402
from test_defrag_pinned import deployment, placed, pod_spec, release  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"


def add_node(c, name, labels=None, extra=None):
    c.add_node(name, labels)
    c.patch_inventory(name, 1)
    res = {"cpu": "8", "memory": "32Gi", "pods": "110", "gpufrac.io/gpu": "6"}
    res.update(extra or {})
    c.node_status(name, res)


def pod_of(c, app):
    """The live pod of Deployment app (name, uid), or None."""
    for p in c.admin.items(PODS):
        md = p["metadata"]
        if md["name"].split("-")[0] == app and not md.get("deletionTimestamp"):
            return md["name"], md["uid"]
    return None


def events(c, name):
    return [e.get("reason", "") + ": " + e.get("message", "")
            for e in c.admin.items("/api/v1/namespaces/default/events")
            if e["involvedObject"].get("name") == name]


def refused(c, name):
    return [e for e in events(c, name) if e.startswith("FailedScheduling")]


def whole(c, name, sel=None, extra=None):
    spec = pod_spec(name, None, sel)
    if extra:
        spec["containers"][0]["resources"]["limits"].update(extra)
    c.admin.create(PODS, {"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": name}, "spec": spec})


def protect(c, name, on):
    c.admin.merge_patch(PODS + "/" + name, {"metadata": {"annotations": {
        "gpufrac.io/protect": "always" if on else None}}})


def grant_log_once(c):
    """F7: a pod bound with a grant that cannot be read is logged once by
    name, not "pod default/g: pod default/g: its grant cannot be read"."""
    c.admin.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "g", "annotations": {"gpufrac.io/grant": "not a grant"}},
        "spec": dict(pod_spec("g", "1Gi"), nodeName="n1")})
    log = c.path("scheduler.log")
    C.wait_for("the extender logging g's grant",
               lambda: "pod default/g: " in open(log).read(), 30)
    lines = [x for x in open(log).read().splitlines() if "pod default/g: " in x]
    C.log("log: %s" % lines[0])
    if "pod default/g: pod default/g:" in lines[0]:
        raise C.Failure("prefix repeated: %s" % lines[0])
    c.admin.delete(PODS + "/g", gracePeriodSeconds=0)


def phase_a(c):
    y = pod_of(c, "y")
    whole(c, "w2", {"kubernetes.io/hostname": "n1"})
    C.wait_for("w2 refused by the extender", lambda: refused(c, "w2"), 60)
    time.sleep(25)  # two defragmentation passes (every 10 s)
    if pod_of(c, "y") != y:
        raise C.Failure("y was moved for w2, which may run on n1 only: y %s -> "
                        "%s; events %s" % (y, pod_of(c, "y"), events(c, "w2")))
    c.admin.delete(PODS + "/w2", gracePeriodSeconds=0)


def phase_b(c):
    yname = pod_of(c, "y")[0]
    protect(c, yname, True)
    whole(c, "w", {"pool": "b"}, {"example.com/foo": "1"})
    C.wait_for("w refused by the extender on n2",
               lambda: any("n2" in e or "0 free" in e for e in refused(c, "w")), 60)
    c.admin.create(PODS, {"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": "filler"},
                          "spec": {"nodeName": "n2", "terminationGracePeriodSeconds": 0,
                                   "containers": [{"name": "c", "image": "x", "resources": {
                                       "limits": {"example.com/foo": "1"},
                                       "requests": {"cpu": "10m"}}}]}})
    protect(c, yname, False)
    # the guard may have taken its release back while y was protected:
    # given again, as the node agent would for a Ready pod
    def y_moved():
        # pod_of read once: y can go between two reads (an ASan run did)
        y = pod_of(c, "y")
        return y is None or y[0] != yname
    C.wait_for("y moved off n2 for w", lambda: release(c) or y_moved(), 60)
    C.wait_for("y's replacement bound to n1",
               lambda: release(c) or placed(c).get("y") == "n1", 60)
    whole(c, "w3")

    def held():
        return [e for e in refused(c, "w3") if "held for default/w by defragmentation until" in e]
    try:
        C.wait_for("w3's refusal naming the hold", held, 60)
    except C.Failure:
        C.log("w3: %s" % events(c, "w3"))
        raise
    C.log("w3 refused: %s" % held()[0])
    c.admin.delete(PODS + "/w", gracePeriodSeconds=0)

    def bound():
        p = c.admin.get(PODS + "/w3")
        return p["spec"].get("nodeName") and p
    try:
        p = C.wait_for("w3 bound once the hold ended", bound, 60)
    except C.Failure:
        C.log("w3: %s" % events(c, "w3"))
        raise
    ann = p["metadata"].get("annotations", {})
    if p["spec"]["nodeName"] != "n2" or "gpufrac.io/defrag-retry" not in ann:
        raise C.Failure("w3 on %s, annotations %s" % (p["spec"]["nodeName"], ann))


def body(c, gpufrac):
    c.start()
    c.namespace("gpufrac-system")
    C.wait_for("ServiceAccount default/default", lambda: c.admin.get(
        "/api/v1/namespaces/default/serviceaccounts/default"), 60)
    c.spawn("scheduler", [gpufrac, "scheduler", "--listen",
                          "127.0.0.1:%d" % c.ext_port, "--kubeconfig", c.admin_kc,
                          "--defrag", "on"])
    add_node(c, "n1")
    grant_log_once(c)
    deployment(c, "x", "30Gi", {"kubernetes.io/hostname": "n1"})
    C.wait_for("x bound to n1", lambda: placed(c).get("x") == "n1", 60)
    add_node(c, "n2", {"pool": "b"}, {"example.com/foo": "1"})
    c.kubectl("cordon", "n1")
    deployment(c, "y", "30Gi")
    C.wait_for("y bound to n2", lambda: placed(c).get("y") == "n2", 60)
    c.kubectl("uncordon", "n1")
    release(c)
    phase_a(c)
    phase_b(c)


def main():
    a = C.e2e_args(__doc__, 2)
    if a is None:
        return 2
    (k8s_bin, gpufrac), keep = a
    return C.run_once("test_defrag_selector",
                      lambda: C.Cluster(k8s_bin, gpufrac, keep=keep),
                      lambda c: body(c, gpufrac), lambda c: c.log_dead())


if __name__ == "__main__":
    sys.exit(main())
