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
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (ApiError, Cluster, Failure, Proc, e2e_args, free_port,  # noqa: E402
                     kubeconfig, log, run_once, wait_for)
from test_k8s import E2E, GRANT, INVENTORY, NS, SLOTS, Extender, pod  # noqa: E402

NODE = "kl1"
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


class Kubelet:
    """fakecri and kubelet for node NODE, under c's directory."""

    def __init__(self, c):
        self.c = c
        for p in ("kubelet", "fakecri"):
            if not os.access(os.path.join(c.bin, p), os.X_OK):
                fail("no %s in %s: run scripts/install-k8s (scripts/install-deps "
                     "does)" % (p, c.bin))
        if os.geteuid() != 0:
            fail("the kubelet test needs root: kubelet runs in a mount namespace "
                 "of its own (unshare --mount), with /var/lib/kubelet bound to "
                 "the test's directory")
        self.root = c.path("kubelet")  # /var/lib/kubelet in its namespace
        self.plugins = os.path.join(self.root, "device-plugins")
        self.sock = c.path("cri.sock")
        self.dump = c.path("cri-created.jsonl")
        self.procs = []

    def certs(self):
        o = self.c.openssl
        o("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key",
          "-out", "node.csr", "-subj", "/O=system:nodes/CN=system:node:" + NODE)
        with open(self.c.path("node.ext"), "w") as f:
            f.write("extendedKeyUsage=clientAuth\n")
        o("x509", "-req", "-in", "node.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
          "-CAcreateserial", "-out", "node.crt", "-days", "2", "-extfile", "node.ext")
        return kubeconfig(self.c.path("kubelet.kubeconfig"), self.c.server, self.c.ca,
                          self.c.path("node.crt"), self.c.path("node.key"))

    def config(self):
        cfg = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1", "port": free_port(), "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": free_port(),
            # Nothing calls kubelet's API here.
            "authentication": {"anonymous": {"enabled": False},
                               "webhook": {"enabled": False},
                               "x509": {"clientCAFile": self.c.ca}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": "unix://" + self.sock,
            "imageServiceEndpoint": "unix://" + self.sock,
            # No cgroups of kubelet's own (the machine's cgroup v1 is shared).
            "cgroupDriver": "cgroupfs", "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [], "failSwapOn": False,
            "failCgroupV1": False,
            # The fake runtime reports no image filesystem: no eviction.
            "evictionHard": {}, "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "podLogsDir": self.c.path("pod-logs"), "resolvConf": "",
            "nodeStatusUpdateFrequency": "2s",
        }
        path = self.c.path("kubelet-config.json")
        with open(path, "w") as f:
            json.dump(cfg, f, indent=1)
        return path

    def start(self):
        kc = self.certs()
        cfg = self.config()
        os.makedirs(self.root)
        self.procs.append(Proc("fakecri", [
            os.path.join(self.c.bin, "fakecri"), "--listen", self.sock,
            "--dump", self.dump], self.c.path("fakecri.log")))
        wait_for("fakecri's socket", lambda: os.path.exists(self.sock), 20)
        kubelet = [os.path.join(self.c.bin, "kubelet"), "--config", cfg,
                   "--kubeconfig", kc, "--root-dir", "/var/lib/kubelet",
                   "--hostname-override", NODE,
                   "--node-labels", "gpufrac.io/enabled=true", "--v=2"]
        # A private mount namespace: kubelet's fixed paths land in the
        # test's directory or in tmpfs that dies with it.
        script = ("set -e; for d in /var/lib /run /var/log; do "
                  "mount -n -t tmpfs -o mode=0755 gpufrac-e2e $d; done; "
                  "mkdir /var/lib/kubelet; mount -n --bind %s /var/lib/kubelet; exec %s"
                  % (shlex.quote(self.root), " ".join(shlex.quote(a) for a in kubelet)))
        self.kubelet = Proc("kubelet", ["unshare", "--mount", "--propagation",
                                        "private", "sh", "-c", script],
                            self.c.path("kubelet.log"))
        self.procs.append(self.kubelet)
        return self

    def alive(self):
        for p in self.procs:
            if not p.alive():
                fail("%s exited (%s); its log ends:\n%s" % (p.name, p.p.returncode,
                                                           p.tail()))
        return True

    def stop(self):
        for p in reversed(self.procs):
            p.stop(15)

    def created(self):
        """The CreateContainer requests fakecri recorded."""
        try:
            with open(self.dump) as f:
                return [json.loads(ln) for ln in f if ln.strip()]
        except FileNotFoundError:
            return []


def node_obj(c):
    try:
        return c.admin.get("/api/v1/nodes/" + NODE)
    except ApiError as e:
        if e.code == 404:
            return None
        raise


def ready(obj):
    for cond in obj.get("status", {}).get("conditions", []):
        if cond["type"] == "Ready":
            return cond["status"] == "True"
    return False


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
    n = wait_for("kubelet to register Node %s and report it Ready" % NODE,
                 lambda: kl.alive() and (lambda o: o if o and ready(o) else None)(
                     node_obj(c)), 120)
    taints = n["spec"].get("taints") or []
    log("Node %s registered by kubelet %s, Ready; taints %s" % (
        NODE, n["status"]["nodeInfo"]["kubeletVersion"], taints))
    # TaintNodesByCondition admission tainted the new Node not-ready; the
    # node lifecycle controller, which would lift it, does not run here
    # (cluster.py: the other fake nodes renew no heartbeats).
    if taints:
        c.admin.merge_patch("/api/v1/nodes/" + NODE, {"spec": {"taints": None}})
    p = wait_for("the gpufrac-node DaemonSet pod on %s" % NODE,
                 lambda: t.agent_pod(NODE), 90)
    akc = c.pod_kubeconfig("agent-" + NODE, "gpufrac-node", p)
    cfg, state = agent_conf(c, kl)
    c.spawn("agent-" + NODE, [
        c.gpufrac, "node", "--fake-gpus", SPEC, "--node-name", NODE,
        "--kubeconfig", akc, "--config", cfg,
        "--listen", "127.0.0.1:%d" % free_port(), "--interval", "2"])
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

    def running():
        kl.alive()
        o = c.admin.get(path)
        return o if o["status"].get("phase") == "Running" and ready(o) else None
    try:
        o = wait_for("pod %s Running and Ready" % name, running, 120)
    except Failure:
        o = c.admin.get(path)
        fail("pod %s: phase %s, node %r, conditions %s; events %s" % (
            name, o["status"].get("phase"), o["spec"].get("nodeName"),
            o["status"].get("conditions"), t.events(name)[-4:]))
    grant = json.loads(o["metadata"]["annotations"][GRANT])
    if o["spec"]["nodeName"] != NODE or grant["node"] != NODE:
        fail("pod %s on %s with grant %s" % (name, o["spec"]["nodeName"], grant))
    t.check_state()
    uuids = [g["uuid"] for g in grant["containers"][0]["gpus"]]
    inv = {g["uuid"]: g for g in t.inventory(NODE)["gpus"]}
    log("pod %s Running on %s, granted %s" % (name, NODE, uuids))

    # What kubelet asked the runtime for: gpufrac's Allocate answer.
    mine = [r for r in kl.created()
            if r["sandboxConfig"]["metadata"]["name"] == name and
            r["config"]["metadata"]["name"] == "main"]
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
    # A graceful deletion: the API server keeps the pod (deletionTimestamp
    # set) until its node's kubelet, having stopped the containers,
    # deletes it for good; nothing else here would.
    d = c.admin.delete(path, gracePeriodSeconds=30)
    if not d.get("metadata", {}).get("deletionTimestamp"):
        fail("DELETE %s was not graceful: %s" % (name, d.get("metadata")))

    def gone():
        kl.alive()
        try:
            c.admin.get(path)
        except ApiError as e:
            return e.code == 404
        return False
    wait_for("kubelet to finish deleting %s" % name, gone, 90)
    log("pod %s deleted through kubelet" % name)
    c.check_alive()
    kl.alive()


def main():
    a = e2e_args(__doc__, 2)
    if not a:
        return 2
    (k8s_bin, gpufrac), keep = a
    state = {}

    def body(c):
        kl = state["kl"] = Kubelet(c)
        c.start()
        try:
            run(c, kl)
        finally:
            kl.stop()

    def tails(c):
        kl = state.get("kl")
        for p in c.extra + (kl.procs if kl else []):
            log("%s log ends:\n%s" % (p.name, p.tail(20)))
    return run_once("e2e kubelet", lambda: Cluster(k8s_bin, gpufrac, keep),
                    body, tails)


if __name__ == "__main__":
    sys.exit(main())
