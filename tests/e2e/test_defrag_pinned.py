#!/usr/bin/env python3
"""Defragmentation must not move a pod pinned to its node.

Usage: test_defrag_pinned.py K8S_BIN GPUFRAC [--keep]

Two nodes with one 80Gi GPU each: Deployment x (30Gi) pinned to n1 by
spec.nodeSelector, Deployment y (30Gi, no constraint) on n2, and a pending
pod asking a whole GPU.  With `gpufrac scheduler --defrag on` the plan must
move y (its replacement fits beside x on n1), not x: x's replacement could
only run on n1, where the whole-GPU pod now is, and stayed Pending
(before, the slim pod copy dropped nodeSelector and the plan evicted x).

Then the same with x pinned by its volume instead (issue 32, F4): a
PersistentVolumeClaim bound to a `local` PersistentVolume whose node
affinity names n1, no nodeSelector; kube-scheduler's volume binding keeps
x's pods on n1.  Before, the extender did not read volumes and the plan
evicted x.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as C  # noqa: E402


def pod_spec(name, mem, sel=None):
    res = {"gpufrac.io/gpu": "1"}
    if mem:
        res["gpufrac.io/gpu-memory"] = mem
    spec = {"terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "x", "resources": {
                "limits": res, "requests": {"cpu": "10m"}}}]}
    if sel:
        spec["nodeSelector"] = sel
    return spec


def deployment(c, name, mem, sel=None, claim=None):
    spec = pod_spec(name, mem, sel)
    if claim:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {
            "claimName": claim}}]
    c.admin.create("/apis/apps/v1/namespaces/default/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": spec}}})


def local_claim(c, name, node):
    """A PVC bound to a `local` PV that only node can reach."""
    c.admin.create("/api/v1/persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": "local-e2e", "local": {"path": "/mnt/" + name},
                 "persistentVolumeReclaimPolicy": "Retain",
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{
                     "matchExpressions": [{"key": "kubernetes.io/hostname",
                                           "operator": "In", "values": [node]}]}]}}}})
    c.admin.create("/api/v1/namespaces/default/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-e2e",
                 "volumeName": name, "resources": {"requests": {"storage": "1Gi"}}}})
    C.wait_for("PVC %s bound" % name, lambda: c.admin.get(
        "/api/v1/namespaces/default/persistentvolumeclaims/" + name)
        .get("status", {}).get("phase") == "Bound", 60)


def release(c):
    """What the node agent does once a pod is Ready: the guard lets go."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for p in c.admin.items("/api/v1/namespaces/default/pods"):
        ann = p["metadata"].get("annotations", {})
        if p["spec"].get("nodeName") and "gpufrac.io/guard-released" not in ann:
            c.admin.merge_patch("/api/v1/namespaces/default/pods/" +
                                p["metadata"]["name"], {"metadata": {"annotations": {
                                    "gpufrac.io/guard-released": now}}})


def placed(c):
    """{deployment or pod name: node} for pods not being deleted."""
    out = {}
    for p in c.admin.items("/api/v1/namespaces/default/pods"):
        if not p["metadata"].get("deletionTimestamp"):
            out[p["metadata"]["name"].split("-")[0]] = p["spec"].get("nodeName")
    return out


def add_node(c, name):
    c.add_node(name)
    c.patch_inventory(name, 1)
    c.node_status(name, {"cpu": "8", "memory": "32Gi", "pods": "110",
                         "gpufrac.io/gpu": "6"})


def body(c, gpufrac, by_volume=False):
    c.start()
    c.namespace("gpufrac-system")
    C.wait_for("ServiceAccount default/default", lambda: c.admin.get(
        "/api/v1/namespaces/default/serviceaccounts/default"), 60)
    c.spawn("scheduler", [gpufrac, "scheduler", "--listen",
                          "127.0.0.1:%d" % c.ext_port, "--kubeconfig", c.admin_kc,
                          "--defrag", "on"])
    add_node(c, "n1")
    if by_volume:
        local_claim(c, "x-data", "n1")
        deployment(c, "x", "30Gi", claim="x-data")
    else:
        deployment(c, "x", "30Gi", {"kubernetes.io/hostname": "n1"})
    C.wait_for("x bound to n1", lambda: placed(c).get("x") == "n1", 60)
    add_node(c, "n2")
    c.kubectl("cordon", "n1")
    deployment(c, "y", "30Gi")
    C.wait_for("y bound to n2", lambda: placed(c).get("y") == "n2", 60)
    c.kubectl("uncordon", "n1")
    release(c)
    c.admin.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "whole"},
        "spec": pod_spec("whole", None)})

    def settled():
        release(c)
        p = placed(c)
        if p.get("whole") is None:
            return False
        C.log("placed: %s" % p)
        return True
    C.wait_for("the whole-GPU pod bound", settled, 90)
    time.sleep(3)  # x's replacement, if x was moved, is created by now
    p = placed(c)
    if p.get("x") != "n1":
        raise C.Failure("pinned x was moved: its pods are now %s (all: %s)" %
                        (p.get("x"), p))
    C.wait_for("y's replacement bound to n1",
               lambda: release(c) or placed(c).get("y") == "n1", 60)
    if placed(c).get("whole") != "n2":
        raise C.Failure("whole-GPU pod not on n2: %s" % placed(c))


def main():
    a = C.e2e_args(__doc__, 2)
    if a is None:
        return 2
    (k8s_bin, gpufrac), keep = a
    rc = C.run_once("test_defrag_pinned (nodeSelector)",
                    lambda: C.Cluster(k8s_bin, gpufrac, keep=keep),
                    lambda c: body(c, gpufrac), lambda c: c.log_dead())
    return rc or C.run_once("test_defrag_pinned (local PersistentVolume)",
                            lambda: C.Cluster(k8s_bin, gpufrac, keep=keep),
                            lambda c: body(c, gpufrac, True),
                            lambda c: c.log_dead())


if __name__ == "__main__":
    sys.exit(main())
