#!/usr/bin/env python3
"""Share capacity on the Node, with the real kubelet (CTest label e2e).

Usage: test_capacity.py K8S_BIN GPUFRAC [--keep]

The real kubelet on the fake CRI (kubelet_node.py), gpufrac's node agent
(--fake-gpus 2xA100-80GB) as its device plugin, kube-scheduler with the
extender (docs/kube.md, "Share capacity on the Node").

  1. the agent writes gpufrac.io/gpu-memory (2 x 80Gi) and
     gpufrac.io/gpu-compute (200) in the Node's status capacity, and
     kubelet copies them to allocatable;
  2. deploy/node-admission.yaml's policy: the agent's token (bound to its
     pod) may not change another capacity entry, an unbound token of the
     same ServiceAccount may not write the Node's status at all;
  3. kubelet admits share pods up to the node's memory: four 40Gi shares
     placed by the extender all run; a pod bound to the node by hand asking
     1Gi more is refused by kubelet's admission (OutOfgpufrac.io/gpu-memory),
     so kubelet counts the shares against the advertised capacity;
  4. the agent stopped (SIGTERM, as an upgrade does): the entries stay;
  5. the documented cleanup (docs/kube.md, kubectl patch --subresource=status
     with a merge patch of nulls) removes them from capacity, and kubelet
     then from allocatable.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ApiError, Client, Failure, log, wait_for  # noqa: E402
from kubelet_node import (NODE, kubelet_main, node_obj, pod_gone,  # noqa: E402
                          pod_state, start_agent, wait_node_ready, wait_pod_running)
from test_k8s import E2E, NS, Extender, pod, quantity_bytes  # noqa: E402
from test_kubelet import agent_conf  # noqa: E402

SPEC = "2xA100-80GB"
NGPUS = 2
GiB = 1 << 30
MEMORY = "gpufrac.io/gpu-memory"
COMPUTE = "gpufrac.io/gpu-compute"
CLEANUP = ('{"status":{"capacity":{"gpufrac.io/gpu-memory":null,'
           '"gpufrac.io/gpu-compute":null}}}')


def fail(msg):
    raise Failure(msg)


def entries(c, field):
    """The Node's status.<field> gpufrac.io/gpu-memory (bytes) and
    gpu-compute, None for an entry that is not there."""
    m = node_obj(c)["status"].get(field, {})
    return (quantity_bytes(m[MEMORY]) if MEMORY in m else None,
            int(m[COMPUTE]) if COMPUTE in m else None)


def refused(fn, want):
    try:
        fn()
    except ApiError as e:
        if e.code != 403 or want not in str(e):
            fail("expected HTTP 403 saying %r, got %s" % (want, e))
        return str(e)
    fail("expected HTTP 403 saying %r: the request was allowed" % want)


def run(c, kl):
    t = E2E(c)
    t.apply_deploy()
    c.namespace(NS)
    kl.start()
    wait_node_ready(c, NODE, kl.alive)
    cfg, _ = agent_conf(c, kl)
    agent_pod = start_agent(c, t, NODE, SPEC, cfg)
    agent = c.extra[-1]
    t.wait_inventory(NODE, NGPUS)
    want = (NGPUS * 80 * GiB, NGPUS * 100)

    # 1. capacity from the agent, allocatable from kubelet
    for field in ("capacity", "allocatable"):
        wait_for("status.%s %s = %d, %s = %d" % (field, MEMORY, want[0],
                                                  COMPUTE, want[1]),
                 lambda: kl.alive() and entries(c, field) == want, 60)
    st = node_obj(c)["status"]
    log("Node %s: capacity %s = %s, %s = %s; allocatable the same" % (
        NODE, MEMORY, st["capacity"][MEMORY], COMPUTE, st["capacity"][COMPUTE]))

    # 2. the admission policy on nodes/status
    status = "/api/v1/nodes/%s/status" % NODE
    akc_tok = c.token("gpufrac-node", "gpufrac-system", "--bound-object-kind",
                      "Pod", "--bound-object-name",
                      agent_pod["metadata"]["name"], "--bound-object-uid",
                      agent_pod["metadata"]["uid"])
    bound = Client(c.server, c.ca, token=akc_tok)
    bound.merge_patch(status, {"status": {"capacity": {COMPUTE: str(want[1])}}})
    msg = refused(lambda: bound.merge_patch(
        status, {"status": {"capacity": {"cpu": "1000"}}}),
        "may change only the gpufrac.io/gpu-memory and gpufrac.io/gpu-compute")
    log("agent's token, another capacity entry: %s" % msg)
    unbound = Client(c.server, c.ca, token=c.token("gpufrac-node"))
    msg = refused(lambda: unbound.merge_patch(
        status, {"status": {"capacity": {MEMORY: "1Ti"}}}),
        "not bound to a pod on a node")
    log("unbound token: %s" % msg)
    if entries(c, "capacity") != want:
        fail("the refused patches changed the Node: %s" % (
            entries(c, "capacity"),))

    # 3. kubelet admits shares up to the node's memory, and no more
    ext = Extender(c, "extender", c.ext_port,
                   c.sa_kubeconfig("extender", c.token("gpufrac-scheduler")))
    ext.start().ready_leader()
    wait_for("the extender holding Node %s" % NODE,
             lambda: ext.metric("gpufrac_extender_nodes") == 1, 30)
    path = "/api/v1/namespaces/%s/pods/" % NS
    shares = ["s%d" % i for i in range(4)]
    t.create(*[pod(n, None, "40Gi") for n in shares])
    for n in shares:
        wait_pod_running(c, path + n, kl.alive, and_ready=False)
    log("4 shares of 40Gi (the node's %dGi) Running: kubelet admitted them"
        % (want[0] // GiB))
    # Past the scheduler and the extender: bound by hand, the 1Gi in an
    # init container (kubelet counts it; deploy/'s admission policy, which
    # looks at containers only, adds no gpufrac.io/gpu, so the device
    # plugin's Allocate, which kubelet calls first, is not involved).
    def by_hand(name):
        o = pod(name, False)
        o["spec"]["nodeName"] = NODE
        o["spec"]["initContainers"] = [{
            "name": "init", "image": "registry.k8s.io/pause:3.10",
            "resources": {"limits": {MEMORY: "1Gi"}}}]
        return o
    c.admin.create("/api/v1/namespaces/%s/pods" % NS, by_hand("over"))

    def rejected():
        kl.alive()
        st = c.admin.get(path + "over")["status"]
        return st if st.get("phase") == "Failed" else None
    st = wait_for("kubelet refusing pod over", rejected, 60)
    if st.get("reason") != "OutOf" + MEMORY:
        fail("pod over: expected reason OutOf%s, got %s" % (
            MEMORY, pod_state(c.admin.get(path + "over"))))
    log("pod over (1Gi more, bound by hand): %s: %s" % (st.get("reason"),
                                                        st.get("message")))
    # The same pod once a share is gone: admitted (the refusal was the count)
    c.admin.delete(path + "s0", gracePeriodSeconds=0)
    wait_for("pod s0 gone", lambda: pod_gone(c, path + "s0"), 60)
    c.admin.create("/api/v1/namespaces/%s/pods" % NS, by_hand("fits"))
    wait_for("kubelet admitting pod fits (its init container created)",
             lambda: kl.alive() and kl.created_for("fits"), 60)
    st = c.admin.get(path + "fits")["status"]
    if st.get("phase") == "Failed":
        fail("pod fits refused with 40Gi free: %s" % pod_state(
            c.admin.get(path + "fits")))
    if kl.created_for("over"):
        fail("kubelet created a container of pod over, which it refused")
    log("pod fits (the same, after s0's deletion): admitted, its init "
        "container created")

    # 4. an upgrade: the agent stopped, the entries stay
    rc = agent.stop(10)
    if rc not in (0, None):
        fail("the agent exited %s on SIGTERM" % rc)
    c.extra.remove(agent)
    wait_for("allocatable gpufrac.io/gpu = 0 with the plugin gone",
             lambda: kl.alive() and
             node_obj(c)["status"]["allocatable"].get("gpufrac.io/gpu") == "0",
             60)
    for field in ("capacity", "allocatable"):
        if entries(c, field) != want:
            fail("agent stopped: status.%s lost the share capacity: %s" % (
                field, entries(c, field)))
    log("agent stopped: capacity and allocatable keep %s and %s" % (MEMORY,
                                                                   COMPUTE))

    # 5. the uninstall cleanup of docs/kube.md
    c.kubectl("patch", "node", NODE, "--subresource=status", "--type=merge",
              "-p", CLEANUP)
    for field in ("capacity", "allocatable"):
        wait_for("status.%s without %s and %s" % (field, MEMORY, COMPUTE),
                 lambda: kl.alive() and entries(c, field) == (None, None), 60)
    log("cleanup: neither capacity nor allocatable has them (kubelet dropped "
        "the allocatable entries)")


def main():
    return kubelet_main(__doc__, "e2e capacity", run)


if __name__ == "__main__":
    sys.exit(main())
