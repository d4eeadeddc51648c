#!/usr/bin/env python3
"""DRA on a real node: kubelet, containerd v2 and runc (labels e2e, realnode).

Usage: test_node_dra.py K8S_BIN CONTAINERD_BIN CNI_BIN GPUFRAC INTERPOSER
                        FAKE_LIBCUDA FAKE_LIBNVML [--keep]

The node of test_node.py (its Node class: containerd with the CRI plugin,
CDI on, cdi_spec_dirs = the driver's directory and /var/run/cdi; runc; a
bridge pod network; kubelet with containerd as its runtime; the fake
driver described by a CDI spec of kind nvidia.com/gpu as nvidia-ctk writes
one; the probe image), the control plane with kube-scheduler allocating
claims (mode 1, docs/dra.md) and deploy/dra applied.  Needs root.

  1. gpufrac's node image imported into containerd and the agent run from
     it by kubelet and runc in DRA mode (`gpufrac node --mode dra`,
     deploy/dra/node-agent-dra.yaml's hostPath mounts: the CDI directory,
     its state, kubelet's plugins_registry and the driver's plugin
     directory; node.conf driver_cdi = nvidia.com/gpu): kubelet's plugin
     watcher registers gpu.gpufrac.io, the agent publishes its slice;
  2. probe pods with a ResourceClaim (4Gi/30 cores and 2Gi/10 cores, from
     templates) allocated by kube-scheduler, prepared by the agent in its
     container (the claim's CDI spec in /var/run/cdi), the CDI devices
     applied by containerd: in the container (read through /proc of its
     process) the spec's env, its mounts and its device nodes; the probe
     (preloaded with the interposer by the container's loader, libcuda
     from the driver's CDI device) sees one GPU, total = its claim's
     memory, is refused at exactly that less its context's charge; the
     agent's metrics count it under the claim's uid;
  3. the whole node stopped and started: kubelet, every container (the
     agent's too), the shims and containerd killed, one pod deleted while
     the node is down; containerd and kubelet started again: the agent
     comes back and registers, the surviving probe is run again in a new
     sandbox (at kubelet's next periodic sync of it: its first try, before
     the driver registered, failed) with the same claim, limits and CDI
     spec, held to its share again, its metrics as before; the pod deleted meanwhile is
     unprepared (its CDI spec, state and checkpoint entry gone);
  4. the last pod deleted: kubelet calls NodeUnprepareResources: no claim
     CDI spec, no per-claim state, an empty checkpoint, no series.
"""

import json
import os
import signal
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, Failure, free_port, log, run_once, wait_for  # noqa: E402
from kubelet_node import (delete_through_kubelet, pod_gone,  # noqa: E402
                          wait_node_ready)
import test_node as tn  # noqa: E402
from test_node import (AGENT_NS, CONTEXT_OVERHEAD, GiB, NODE, NS, PROBE,  # noqa: E402
                       PRELOAD, REPO, SHIM, SPEC, Node)

DRIVER = "gpu.gpufrac.io"
RES = "/apis/resource.k8s.io/v1"
GATES = {"DRAConsumableCapacity": True}
CDI_DIR = "/var/run/cdi"
STATE = "/run/gpufrac"


def fail(msg):
    raise Failure(msg)


def template(name, mem, cores):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"spec": {"devices": {"requests": [{
                "name": "gpu", "exactly": {
                    "deviceClassName": DRIVER,
                    "capacity": {"requests": {"memory": mem, "cores": str(cores)}}}}]}}}}


def claim_pod(c, name, tmpl):
    c.admin.create("/api/v1/namespaces/%s/pods" % NS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "main", "image": PROBE,
                                 "imagePullPolicy": "Never",
                                 "resources": {"claims": [{"name": "gpu"}]}}],
                 "resourceClaims": [{"name": "gpu",
                                     "resourceClaimTemplateName": tmpl}]}})
    return "/api/v1/namespaces/%s/pods/%s" % (NS, name)


def claim_of(c, o):
    for st in o.get("status", {}).get("resourceClaimStatuses", []):
        if st.get("name") == "gpu" and st.get("resourceClaimName"):
            return c.admin.get("%s/namespaces/%s/resourceclaims/%s" % (
                RES, NS, st["resourceClaimName"]))
    fail("pod %s has no generated claim: %s" % (o["metadata"]["name"],
                                                o["status"].get("resourceClaimStatuses")))


class DRANode:
    """The agent in DRA mode as a container on Node n, and what it keeps in
    the node's namespace."""

    def __init__(self, c, n):
        self.c, self.n = c, n

    def ls(self, d):
        r = self.n.ns(["ls", "-A", d], check=False)
        return sorted(r.stdout.split()) if r.returncode == 0 else []

    def claim_specs(self):
        return [x for x in self.ls(CDI_DIR) if x.endswith("_claim.json")]

    def pods_state(self):
        return self.ls(STATE + "/pods")

    def checkpoint(self):
        r = self.n.ns(["cat", STATE + "/dra/checkpoint.json"], check=False)
        if r.returncode != 0:
            return []
        return sorted(x["uid"] for x in json.loads(r.stdout)["claims"])

    def spec(self, uid):
        return json.loads(self.n.ns(["cat", "%s/gpufrac.io-%s_claim.json" % (
            CDI_DIR, uid)]).stdout)

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.port,
                                    timeout=5) as r:
            return r.read().decode()

    def agent_log(self):
        o = self.c.admin.get(self.path)
        d = os.path.join(self.n.d, "pod-logs", "%s_agent_%s" % (
            AGENT_NS, o["metadata"]["uid"]), "agent")
        try:
            return "".join(open(os.path.join(d, f)).read()
                           for f in sorted(os.listdir(d)))
        except OSError:
            return ""

    def start(self, interposer):
        c, n = self.c, self.n
        image = tn.import_node_image(c, n, interposer)
        for f in ("namespace.yaml", "node-agent.yaml"):
            c.kubectl("apply", "-f", os.path.join(REPO, "deploy", f))
        dra = os.path.join(REPO, "deploy", "dra")
        for f in ("deviceclasses.yaml", "node-rbac.yaml"):
            c.kubectl("apply", "-f", os.path.join(dra, f))
        c.kubectl("-n", AGENT_NS, "create", "configmap", "gpufrac-node-config-dra",
                  "--from-literal=node.conf=shim_lib = %s\npreload = %s\n"
                  "driver_cdi = nvidia.com/gpu\n" % (SHIM, PRELOAD))
        tn.install_interposer(n, interposer)
        wait_for("ServiceAccount gpufrac-node", lambda: c.admin.get(
            "/api/v1/namespaces/%s/serviceaccounts/gpufrac-node" % AGENT_NS), 30)
        port = c.server.rsplit(":", 1)[1]
        # deploy/dra/node-agent-dra.yaml's mounts.
        mounts = [("cdi", CDI_DIR, "DirectoryOrCreate"),
                  ("state", STATE, "DirectoryOrCreate"),
                  ("plugins-registry", "/var/lib/kubelet/plugins_registry",
                   "Directory"),
                  ("plugin", "/var/lib/kubelet/plugins/" + DRIVER,
                   "DirectoryOrCreate")]
        self.port = free_port()
        c.admin.create("/api/v1/namespaces/%s/pods" % AGENT_NS, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent"},
            "spec": {
                "nodeName": NODE, "serviceAccountName": "gpufrac-node",
                "hostNetwork": True, "terminationGracePeriodSeconds": 5,
                "containers": [{
                    "name": "agent", "image": image, "imagePullPolicy": "Never",
                    "command": ["gpufrac", "node", "--mode", "dra", "--fake-gpus",
                                SPEC, "--config", "/etc/gpufrac/node.conf",
                                "--listen", "127.0.0.1:%d" % self.port,
                                "--interval", "2"],
                    "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                            {"name": "KUBERNETES_SERVICE_PORT", "value": port},
                            {"name": "NODE_NAME", "valueFrom": {
                                "fieldRef": {"fieldPath": "spec.nodeName"}}}],
                    "securityContext": {"allowPrivilegeEscalation": False,
                                        "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": v, "mountPath": p}
                                     for v, p, _ in mounts] +
                    [{"name": "config", "mountPath": "/etc/gpufrac",
                      "readOnly": True}]}],
                "volumes": [{"name": v, "hostPath": {"path": p, "type": t}}
                            for v, p, t in mounts] +
                [{"name": "config", "configMap": {"name": "gpufrac-node-config-dra"}}]}})
        self.path = "/api/v1/namespaces/%s/pods/agent" % AGENT_NS
        self.wait_registered(0)
        log("1. agent (image %s) in DRA mode run by runc; kubelet registered %s; "
            "its slice published" % (image, DRIVER))

    def registrations(self):
        return self.agent_log().count("kubelet registered DRA driver")

    def wait_registered(self, before, timeout=90):
        def ok():
            self.n.alive()
            return self.registrations() > before and self.c.admin.items(
                RES + "/resourceslices", fieldSelector="spec.nodeName=" + NODE)
        try:
            wait_for("kubelet registering %s (the agent's log)" % DRIVER, ok, timeout)
        except Failure:
            o = self.c.admin.get(self.path)
            fail("agent pod: phase %s, statuses %s; its log: %s" % (
                o["status"].get("phase"), o["status"].get("containerStatuses"),
                self.agent_log()[-2000:]))


def container_pid(c, n, name):
    o = c.admin.get("/api/v1/namespaces/%s/pods/%s" % (NS, name))
    cid = o["status"]["containerStatuses"][0]["containerID"][len("containerd://"):]
    runs = {x["id"]: x for x in n.runc_list()}
    if runs.get(cid, {}).get("status") != "running":
        fail("pod %s's container %s is not running: %s" % (name, cid[:12], runs.get(cid)))
    return runs[cid]["pid"]


def check_edits(c, n, d, name, uid, gpu):
    """What the CDI devices kubelet was answered promise, as the container's
    process has it: the claim's spec (common and device edits), then the
    driver's (nvidia.com/gpu: common edits and device <gpu>), applied in
    that order (the answer's order: an env key set by both keeps the
    driver's value, NVIDIA_VISIBLE_DEVICES=void as with NVIDIA's own
    specs); every env value, every mount's container path in its
    mountinfo, every device node in its /dev."""
    spec = d.spec(uid)
    with open(os.path.join(n.d, "cdi", "nvidia.json")) as f:
        drv = json.load(f)
    edits = [spec.get("containerEdits") or {}] + [
        x["containerEdits"] for x in spec["devices"]] + [
        drv["containerEdits"]] + [x["containerEdits"] for x in drv["devices"]
                                  if x["name"] == gpu]
    if len(edits) != 2 + len(spec["devices"]) + 1:
        fail("the driver's CDI spec has no device %s" % gpu)
    env = {}
    for e in edits:
        env.update(x.split("=", 1) for x in e.get("env", []))
    pid = container_pid(c, n, name)
    with open("/proc/%d/environ" % pid, "rb") as f:
        have = dict(x.split("=", 1) for x in f.read().decode(
            errors="replace").split("\0") if "=" in x)
    with open("/proc/%d/mountinfo" % pid) as f:
        mnts = set(ln.split()[4] for ln in f)
    miss = ["env %s=%s (has %r)" % (k, v, have.get(k)) for k, v in env.items()
            if have.get(k) != v]
    for e in edits:
        miss += ["mount " + m["containerPath"] for m in e.get("mounts", [])
                 if m["containerPath"] not in mnts]
        miss += ["device " + x["path"] for x in e.get("deviceNodes", [])
                 if not os.path.exists("/proc/%d/root%s" % (pid, x["path"]))]
    if miss:
        fail("pod %s: the CDI devices of its claim (%s) and the driver's %s "
             "promise what its container (pid %d) lacks: %s" % (
                 name, uid, gpu, pid, miss))
    return len(env), sum(len(e.get("mounts", [])) for e in edits), \
        sum(len(e.get("deviceNodes", [])) for e in edits)


def check_probe(c, n, d, name, limit, restart=0, timeout=90):
    """pod name's probe: Running, one GPU, total = limit, refused at limit
    less its context's charge, the agent's used series = limit; returns
    its claim."""
    path = "/api/v1/namespaces/%s/pods/%s" % (NS, name)
    o, kv, got = tn.probe_kv(c, n, path, restart, timeout)
    cl = claim_of(c, o)
    uid = cl["metadata"]["uid"]
    dev = cl["status"]["allocation"]["devices"]["results"][0]["device"]
    want = {"devices": "1", "before.total": str(limit),
            "before.free": str(limit - CONTEXT_OVERHEAD),
            "allocated": str(limit - CONTEXT_OVERHEAD), "refused": "2",
            "after.free": "0", "after.total": str(limit)}
    bad = {k: (kv.get(k), v) for k, v in want.items() if kv.get(k) != v}
    if bad:
        fail("probe %s (claim %s on %s): got/want %s; it printed %s" % (
            name, uid, dev, bad, got))
    used = 'gpufrac_container_memory_used_bytes{pod_uid="%s"' % uid

    def usage():
        v = [ln.rsplit(" ", 1)[1] for ln in d.metrics().splitlines()
             if ln.startswith(used)]
        return v if v == [str(limit)] else None
    try:
        wait_for("the agent's %s... = %d" % (used, limit), usage, 15)
    except Failure:
        fail("the agent's metrics: %s" % [ln for ln in d.metrics().splitlines()
                                           if "container_memory" in ln])
    ne, nm, nd = check_edits(c, n, d, name, uid, kv.get("uuid"))
    log("probe %s (claim %s, %s, uuid %s): cuMemGetInfo %s of %s, allocated %s, "
        "refused; its container has the %d env, %d mounts and %d device nodes "
        "of the claim's and the driver's CDI specs" % (name, uid[:8], dev, kv.get("uuid"), kv["before.free"],
                   kv["before.total"], kv["allocated"], ne, nm, nd))
    return cl


def run_dra(c, n, interposer):
    d = DRANode(c, n)
    d.start(interposer)
    for name, mem, cores in (("t4", "4Gi", 30), ("t2", "2Gi", 10)):
        c.admin.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                       template(name, mem, cores))
    claim_pod(c, "d4", "t4")
    claim_pod(c, "d2", "t2")
    c4 = check_probe(c, n, d, "d4", 4 * GiB)
    c2 = check_probe(c, n, d, "d2", 2 * GiB)
    uids = sorted(x["metadata"]["uid"] for x in (c4, c2))
    specs = sorted("gpufrac.io-%s_claim.json" % u for u in uids)
    if d.checkpoint() != uids or d.claim_specs() != specs or d.pods_state() != uids:
        fail("the agent holds checkpoint %s, CDI specs %s, state %s; the claims "
             "are %s" % (d.checkpoint(), d.claim_specs(), d.pods_state(), uids))
    log("2. two claims prepared by the containerised agent, applied by containerd")

    # 3. the whole node stopped and started; d2 deleted while it is down
    regs = d.registrations()
    p4 = "/api/v1/namespaces/%s/pods/d4" % NS
    p2 = "/api/v1/namespaces/%s/pods/d2" % NS
    r4 = c.admin.get(p4)["status"]["containerStatuses"][0]["restartCount"]

    def down():
        c.admin.delete(p2, gracePeriodSeconds=2)
    t0 = time.monotonic()
    took = n.power_cycle(c, down)
    d.wait_registered(regs, 120)
    log("node started again: Node Ready %.1f s, %s registered %.1f s after "
        "the stop" % (took, DRIVER, time.monotonic() - t0))
    wait_for("kubelet to finish deleting d2", lambda: n.alive() and pod_gone(c, p2), 120)
    # kubelet syncs d4 before the agent (a pod of the same node) has
    # registered again: NodePrepareResources fails ("DRA driver
    # gpu.gpufrac.io is not registered"), and kubelet v1.37.2 counts that
    # sync as done (no backoff retry): d4 is tried again at its next
    # periodic sync (syncFrequency, 1 min, with up to 50 % jitter).
    c4b = check_probe(c, n, d, "d4", 4 * GiB, r4 + 1, 240)
    log("d4 running again %.1f s after the stop" % (time.monotonic() - t0))
    if c4b["metadata"]["uid"] != c4["metadata"]["uid"]:
        fail("d4's claim changed across the node's restart")
    u4 = c4["metadata"]["uid"]

    def consistent():
        return (d.checkpoint(), d.claim_specs(), d.pods_state()) == (
            [u4], ["gpufrac.io-%s_claim.json" % u4], [u4])
    try:
        wait_for("the agent to hold d4's claim alone", consistent, 60)
    except Failure:
        fail("after the node's restart the agent holds checkpoint %s, CDI specs %s, "
             "state %s; only %s is left" % (d.checkpoint(), d.claim_specs(),
                                             d.pods_state(), u4))
    series = sorted(set(ln.split('pod_uid="', 1)[1].split('"', 1)[0]
                        for ln in d.metrics().splitlines()
                        if ln.startswith("gpufrac_container_memory_")))
    if series != [u4]:
        fail("per-claim series after the restart: %s, want %s" % (series, [u4]))
    log("3. whole node stopped and started (%.1f s): d4 back on its claim and "
        "limits, d2 (deleted while down) unprepared, nothing else left" % took)

    # 4. deleted: unprepared
    delete_through_kubelet(c, p4, n.alive, 2)

    def clean():
        n.alive()
        left = (d.checkpoint(), d.claim_specs(), d.pods_state(),
                [ln for ln in d.metrics().splitlines()
                 if ln.startswith("gpufrac_container_memory_")])
        return left if left == ([], [], [], []) else None
    try:
        wait_for("NodeUnprepareResources to remove every claim's files", clean, 60)
    except Failure:
        fail("after the pods' deletion the agent holds checkpoint %s, CDI specs "
             "%s, state %s" % (d.checkpoint(), d.claim_specs(), d.pods_state()))
    log("4. d4 deleted: its claim unprepared (no CDI spec, state, checkpoint "
        "entry or series)")


def main():
    args = [a for a in sys.argv[1:] if a != "--keep"]
    if len(args) != 7:
        print(__doc__, file=sys.stderr)
        return 2
    k8s_bin, ctrd_bin, cni_bin, gpufrac, interposer, fake_cuda, fake_nvml = args
    interposer, fake_cuda, fake_nvml = (os.path.abspath(x) for x in (
        interposer, fake_cuda, fake_nvml))
    keep = "--keep" in sys.argv[1:]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    state = {}

    def body(c):
        n = state["n"] = Node(c, ctrd_bin, cni_bin)
        c.start(scheduler=False)
        c.start_scheduler(extender=False)
        try:
            n.start()
            wait_node_ready(c, NODE, n.alive, 180)
            c.namespace(NS)
            tn.driver_cdi(c, n, fake_cuda, fake_nvml)
            tn.probe_image(n, interposer, fake_cuda)
            run_dra(c, n, interposer)
            c.check_alive()
        finally:
            n.stop()

    def tails(c):
        n = state.get("n")
        for p in (n.procs if n else []):
            log("%s log ends:\n%s" % (p.name, p.tail(25)))
    return run_once("e2e node dra", lambda: Cluster(k8s_bin, gpufrac, keep,
                                                    feature_gates=GATES), body, tails)


if __name__ == "__main__":
    sys.exit(main())
