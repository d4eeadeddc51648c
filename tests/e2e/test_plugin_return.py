#!/usr/bin/env python3
"""A share pod created while the device plugin is away (CTest label e2e).

Usage: test_plugin_return.py K8S_BIN GPUFRAC [--keep]

The real kubelet on the fake CRI (kubelet_node.py), gpufrac's node agent as
its device plugin, kube-scheduler (deploy/'s configuration) with the
extender.  The agent is SIGKILLed: kubelet marks the plugin's devices
unhealthy and reports allocatable gpufrac.io/gpu = 0.  Two pods are created
then, a whole GPU ("whole", gpufrac.io/gpu only) and a share ("share",
gpufrac.io/gpu and gpufrac.io/gpu-memory); kube-scheduler's
NodeResourcesFit refuses both (Insufficient gpufrac.io/gpu).  The agent
starts again and registers; kubelet reports allocatable gpufrac.io/gpu back.

  1. "whole" is bound within BIND_S seconds of that (kube-scheduler's
     NodeResourcesFit hint requeues it on kubelet's Node update);
  2. "share" is bound within BIND_S seconds of that too: the agent
     advertises gpufrac.io/gpu-memory and gpufrac.io/gpu-compute in the
     Node's status capacity (kubelet copies them to allocatable), so the
     same hint, which asks whether the pod fits the Node's allocatable
     without the extender's ignoredByScheduler names, finds that it does
     (docs/kube.md, "A share created while the device plugin is away" and
     "Share capacity on the Node").  Without that advertisement
     (--advertise-capacity=false, or before it) the share waits for a
     scheduled pod's deletion or kube-scheduler's 5-minute flush.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Failure, log, wait_for  # noqa: E402
from kubelet_node import (NODE, kubelet_main, node_obj, pod_state,  # noqa: E402
                          start_agent, wait_node_ready)
from test_k8s import E2E, NS, SLOTS, Extender, pod  # noqa: E402
from test_kubelet import agent_conf  # noqa: E402

SPEC = "2xA100-80GB"
NGPUS = 2
RESOURCE = "gpufrac.io/gpu"
MEMORY = "gpufrac.io/gpu-memory"
COMPUTE = "gpufrac.io/gpu-compute"
BIND_S = 30


def fail(msg):
    raise Failure(msg)


def allocatable(c, name=RESOURCE):
    st = node_obj(c)["status"]
    return st.get("allocatable", {}).get(name)


def run(c, kl):
    t = E2E(c)
    t.apply_deploy()
    c.namespace(NS)
    kl.start()
    wait_node_ready(c, NODE, kl.alive)
    cfg, _ = agent_conf(c, kl)
    start_agent(c, t, NODE, SPEC, cfg)
    agent = c.extra[-1]
    t.wait_inventory(NODE, NGPUS)
    want = str(NGPUS * SLOTS)
    wait_for("allocatable %s = %s" % (RESOURCE, want),
             lambda: kl.alive() and allocatable(c) == want, 60)
    # The agent's share capacity, copied to allocatable by kubelet.
    mem = wait_for("allocatable %s from the agent" % MEMORY,
                   lambda: kl.alive() and allocatable(c, MEMORY), 60)
    log("allocatable %s = %s, %s = %s" % (
        MEMORY, mem, COMPUTE, allocatable(c, COMPUTE)))
    kc = c.sa_kubeconfig("extender", c.token("gpufrac-scheduler"))
    ext = Extender(c, "extender", c.ext_port, kc).start()
    ext.ready_leader()
    wait_for("the extender holding Node %s" % NODE,
             lambda: ext.metric("gpufrac_extender_nodes") == 1, 30)

    # The agent goes away: kubelet reports its devices unhealthy.
    agent.kill9()
    wait_for("allocatable %s = 0 with the plugin gone" % RESOURCE,
             lambda: kl.alive() and allocatable(c) == "0", 60)
    log("agent killed; kubelet reports allocatable %s = 0" % RESOURCE)

    # Two pods in the window: a whole GPU (gpufrac.io/gpu only) and a share
    # (gpufrac.io/gpu and gpufrac.io/gpu-memory, which the extender manages
    # and kube-scheduler ignores).
    pods = {"whole": pod("whole", 1), "share": pod("share", None, "20Gi")}
    t.create(*pods.values())
    path = "/api/v1/namespaces/%s/pods/" % NS

    def unschedulable(name):
        for cond in c.admin.get(path + name)["status"].get("conditions", []):
            if cond["type"] == "PodScheduled" and cond["status"] == "False":
                return cond
        return None
    for name in pods:
        cond = wait_for("pod %s found unschedulable" % name,
                        lambda: unschedulable(name), 60)
        log("pod %s: %s: %s" % (name, cond.get("reason"), cond.get("message")))

    start_agent(c, t, NODE, SPEC, cfg)
    wait_for("allocatable %s = %s again" % (RESOURCE, want),
             lambda: kl.alive() and allocatable(c) == want, 60)
    back = time.monotonic()
    log("agent registered again; allocatable %s = %s" % (RESOURCE, want))

    def bound(name):
        return c.admin.get(path + name)["spec"].get("nodeName")

    # 1. the whole GPU: requeued by kubelet's Node update
    try:
        wait_for("pod whole bound within %d s of the plugin's return" % BIND_S,
                 lambda: bound("whole"), BIND_S)
    except Failure:
        fail("pod whole not bound %d s after allocatable %s came back: %s" % (
            BIND_S, RESOURCE, pod_state(c.admin.get(path + "whole"))))
    log("pod whole bound %.1f s after allocatable came back" % (
        time.monotonic() - back))

    # 2. the share: the hint finds it fits the Node's allocatable, which
    # carries the agent's gpufrac.io/gpu-memory and gpu-compute
    try:
        wait_for("pod share bound within %d s of the plugin's return" % BIND_S,
                 lambda: bound("share"), BIND_S)
    except Failure:
        fail("pod share not bound %d s after allocatable %s came back (the "
             "agent advertises %s = %s in the Node's allocatable): %s" % (
                 BIND_S, RESOURCE, MEMORY, allocatable(c, MEMORY),
                 pod_state(c.admin.get(path + "share"))))
    log("pod share bound %.1f s after allocatable came back" % (
        time.monotonic() - back))


def main():
    return kubelet_main(__doc__, "e2e plugin return", run)


if __name__ == "__main__":
    sys.exit(main())
