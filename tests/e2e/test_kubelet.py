#!/usr/bin/env python3
"""The real kubelet with gpufrac's device plugin (CTest label e2e).

Usage: test_kubelet.py K8S_BIN GPUFRAC [--keep]

K8S_BIN holds the control plane of cluster.py and also kubelet and fakecri
(tests/k8s/fakecri: k8s.io/cri-client's fake CRI runtime, recording every
CreateContainer request), all built by scripts/install-k8s.  Needs root: the
kubelet runs in a mount namespace of its own (unshare) where an empty tmpfs
hides /var/lib, /run and /var/log and /var/lib/kubelet is the test's
directory, because kubelet's device-plugin socket is fixed at
/var/lib/kubelet/device-plugins/kubelet.sock and its log links at
/var/log/containers: nothing of the machine's is touched.

  1. kubelet (client certificate system:node:kl1, group system:nodes)
     registers its Node; the DaemonSet's agent pod is bound to it, and
     `gpufrac node --fake-gpus 2xA100-80GB` (a token bound to that pod)
     registers its device plugin with kubelet, which then reports
     gpufrac.io/gpu = GPUs x slots in the Node's capacity;
  2. a pod asking gpufrac.io/gpu-memory is bound by kube-scheduler through
     the extender, kubelet calls the plugin's Allocate, the container the
     fake runtime was asked to create carries gpufrac's answer for that pod
     (CUDA_VISIBLE_DEVICES = the granted GPU, GPUFRAC_CONFIG and its mount
     from the agent's state dir, the device nodes, the allocated-for
     annotation), kubelet's device checkpoint holds the pod's devices, and
     the pod reaches Running and Ready on the API server;
  3. Ready, the pod is released by the disruption guard (extender run with
     --guard-settle 1s): its do-not-disrupt annotation removed and
     gpufrac.io/guard-released set;
  4. deleted, the pod is gone from the API server once kubelet has stopped
     its container (a graceful deletion only a kubelet completes).
"""

import base64
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Failure, log, wait_for  # noqa: E402
from kubelet_node import (NODE, delete_through_kubelet, kubelet_main,  # noqa: E402
                          node_obj, pod_state, start_agent, wait_node_ready,
                          wait_pod_running)
from test_k8s import E2E, GRANT, INVENTORY, NS, SLOTS, Extender, pod  # noqa: E402

SPEC = "2xA100-80GB"
NGPUS = 2
DNG = "karpenter.sh/do-not-disrupt"
RELEASED = "gpufrac.io/guard-released"
RESOURCE = "gpufrac.io/gpu"


def fail(msg):
    raise Failure(msg)


class GuardExtender(Extender):
    def start(self):
        self.proc = self.c.spawn(self.name, [
            self.c.gpufrac, "scheduler", "--listen", "127.0.0.1:%d" % self.port,
            "--kubeconfig", self.kc, "--guard-settle", "1s"])
        return self


def agent_conf(c, kl):
    d = c.path("node-" + NODE)
    for sub in ("state", "cdi"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    cfg = os.path.join(d, "node.conf")
    with open(cfg, "w") as f:
        f.write("state_dir = %s/state\ncdi_dir = %s/cdi\nkubelet_dir = %s\n"
                "slots = %d\n" % (d, d, kl.plugins, SLOTS))
    return cfg, d + "/state"


def run(c, kl):
    t = E2E(c)
    t.apply_deploy()
    c.namespace(NS)
    kl.start()

    # 1. the Node, registered by kubelet; the device plugin in its capacity
    n = wait_node_ready(c, NODE, kl.alive)
    log("Node %s registered by kubelet %s, Ready; taints %s (lifted)" % (
        NODE, n["status"]["nodeInfo"]["kubeletVersion"],
        n["spec"].get("taints") or []))
    cfg, state = agent_conf(c, kl)
    start_agent(c, t, NODE, SPEC, cfg)
    t.wait_inventory(NODE, NGPUS)
    want = str(NGPUS * SLOTS)

    def capacity():
        kl.alive()
        st = node_obj(c)["status"]
        return st.get("capacity", {}).get(RESOURCE) == want and \
            st.get("allocatable", {}).get(RESOURCE) == want
    wait_for("kubelet reporting %s = %s from the device plugin" % (RESOURCE, want),
             capacity, 60)
    log("kubelet: %s capacity %s (the plugin registered on %s/kubelet.sock)" % (
        RESOURCE, want, kl.plugins))

    kc = c.sa_kubeconfig("extender", c.token("gpufrac-scheduler"))
    ext = GuardExtender(c, "extender", c.ext_port, kc).start()
    ext.ready_leader()
    wait_for("the extender holding Node %s" % NODE,
             lambda: ext.metric("gpufrac_extender_nodes") == 1, 30)

    # 2. a share pod through kube-scheduler, the extender and kubelet
    name = "share"
    t.create(pod(name, 1, "20Gi", 30))
    path = "/api/v1/namespaces/%s/pods/%s" % (NS, name)

    o = wait_pod_running(c, path, kl.alive, detail=lambda o: "%s; events %s" % (
        pod_state(o), t.events(name)[-4:]))
    grant = json.loads(o["metadata"]["annotations"][GRANT])
    if o["spec"]["nodeName"] != NODE or grant["node"] != NODE:
        fail("pod %s on %s with grant %s" % (name, o["spec"]["nodeName"], grant))
    t.check_state()
    uuids = [g["uuid"] for g in grant["containers"][0]["gpus"]]
    inv = {g["uuid"]: g for g in t.inventory(NODE)["gpus"]}
    log("pod %s Running on %s, granted %s" % (name, NODE, uuids))

    # What kubelet asked the runtime for: gpufrac's Allocate answer.
    mine = kl.created_for(name, "main")
    if len(mine) != 1:
        fail("fakecri recorded %d CreateContainer requests for %s/main (of %d)" %
             (len(mine), name, len(kl.created())))
    ctr = mine[0]["config"]
    # KeyValue.value is bytes in CRI v1: base64 in protojson.
    env = {e["key"]: base64.b64decode(e.get("value", "")).decode()
           for e in ctr.get("envs", [])}
    want_env = {"CUDA_VISIBLE_DEVICES": ",".join(uuids),
                "NVIDIA_VISIBLE_DEVICES": ",".join(uuids),
                "GPUFRAC_CONFIG": "/etc/gpufrac/shim.conf"}
    for k, v in want_env.items():
        if env.get(k) != v:
            fail("container %s/main: %s=%r, gpufrac's Allocate answers %r; env %s" %
                 (name, k, env.get(k), v, sorted(env)))
    mounts = {m["containerPath"]: m for m in ctr.get("mounts", [])}
    conf = mounts.get("/etc/gpufrac/shim.conf")
    if not conf or not conf.get("readonly") or \
            not conf["hostPath"].startswith(state + "/"):
        fail("container %s/main: no read-only shim config mount from the agent's "
             "state dir %s: %s" % (name, state, sorted(mounts)))
    with open(conf["hostPath"]) as f:
        text = f.read().splitlines()
    for line in ("memory.%s = %d" % (uuids[0], 20 << 30), "compute = 30"):
        if line not in text:
            fail("the shim config kubelet mounted (%s) lacks %r:\n%s" %
                 (conf["hostPath"], line, "\n".join(text)))
    if "/run/gpufrac" not in mounts:
        fail("container %s/main: no region dir mount: %s" % (name, sorted(mounts)))
    devs = sorted(d["containerPath"] for d in ctr.get("devices", []))
    # --fake-gpus: a GPU's minor number is its index.
    for d in ("/dev/nvidiactl", "/dev/nvidia-uvm",
              "/dev/nvidia%d" % inv[uuids[0]]["index"]):
        if d not in devs:
            fail("container %s/main: device %s missing from %s" % (name, d, devs))
    who = ctr.get("annotations", {}).get("gpufrac.io/allocated-for")
    if who != "%s/%s/main" % (NS, name):
        fail("container %s/main: gpufrac.io/allocated-for %r" % (name, who))
    # kubelet's own record of the Allocate call (its device checkpoint).
    with open(os.path.join(kl.plugins, "kubelet_internal_checkpoint")) as f:
        ck = json.load(f)
    entries = [e for e in ck["Data"]["PodDeviceEntries"]
               if e["PodUID"] == o["metadata"]["uid"] and e["ResourceName"] == RESOURCE]
    if len(entries) != 1 or not base64.b64decode(entries[0]["AllocResp"]):
        fail("kubelet's device checkpoint has %d entries for %s: %s" %
             (len(entries), name, ck["Data"]["PodDeviceEntries"]))
    log("kubelet: Allocate answered for %s/main: CUDA_VISIBLE_DEVICES=%s, mounts %s, "
        "devices %s, checkpoint devices %s" % (name, env["CUDA_VISIBLE_DEVICES"],
                                               sorted(mounts), devs,
                                               entries[0]["DeviceIDs"]))

    # 3. Ready: the guard lets go
    def released():
        a = c.admin.get(path)["metadata"].get("annotations", {})
        return a if RELEASED in a and DNG not in a else None
    a = wait_for("the guard to release %s once Ready" % name, released, 60)
    if "gpufrac.io/guard-since" not in a:
        fail("pod %s released without ever being protected: %s" % (name, sorted(a)))
    log("guard: %s released at %s" % (name, a[RELEASED]))

    # 4. deleted: kubelet stops it and the API server lets the pod go
    delete_through_kubelet(c, path, kl.alive, 30)
    log("pod %s deleted through kubelet" % name)
    c.check_alive()
    kl.alive()


def main():
    return kubelet_main(__doc__, "e2e kubelet", run)


if __name__ == "__main__":
    sys.exit(main())
