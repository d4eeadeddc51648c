"""A real kubelet for the e2e tests, shared by the files that start one.

Kubelet: fakecri (tests/k8s/fakecri, recording every CreateContainer request)
and kubelet in a mount namespace of its own (test_kubelet.py,
test_model_admission.py, test_tls_kubelet.py, test_dra_kubelet.py,
test_plugin_return.py).
test_node.py's kubelet runs on containerd instead and shares the rest: the
node's client certificate (node_kubeconfig), the kubelet configuration
(kubelet_config), the Node's readiness (node_obj, ready, wait_node_ready).
kubelet_main is the main of a one-scenario file with a Kubelet.
"""

import json
import os
import shlex

from cluster import (ApiError, Cluster, Failure, Proc, e2e_args, free_port,
                     kubeconfig, log, run_once, wait_for)

NODE = "kl1"  # the Kubelet's node


def fail(msg):
    raise Failure(msg)


def node_kubeconfig(c, node, prefix):
    """A client certificate for node (CN system:node:<node>, group
    system:nodes) signed by the cluster's CA, files <prefix>.* in c's
    directory; the path of its kubeconfig."""
    o = c.openssl
    o("req", "-newkey", "rsa:2048", "-nodes", "-keyout", prefix + ".key",
      "-out", prefix + ".csr", "-subj", "/O=system:nodes/CN=system:node:" + node)
    with open(c.path(prefix + ".ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    o("x509", "-req", "-in", prefix + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
      "-CAcreateserial", "-out", prefix + ".crt", "-days", "2", "-extfile",
      prefix + ".ext")
    return kubeconfig(c.path(prefix + ".kubeconfig"), c.server, c.ca,
                      c.path(prefix + ".crt"), c.path(prefix + ".key"))


def kubelet_config(c, path, sock, pod_logs, **extra):
    """Writes a KubeletConfiguration to path and returns path: kubelet's
    API and healthz on loopback ports (nothing calls its API: kube-apiserver
    would reach it at the Node's address, and kubelet refuses a loopback
    node IP), the CRI runtime at unix socket sock, container logs under
    pod_logs, no eviction, status every 2 s; extra adds or replaces keys
    (the cgroup settings differ between the tests)."""
    cfg = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1", "port": free_port(), "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": free_port(),
        "authentication": {"anonymous": {"enabled": False},
                           "webhook": {"enabled": False},
                           "x509": {"clientCAFile": c.ca}},
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": "unix://" + sock,
        "imageServiceEndpoint": "unix://" + sock,
        "cgroupDriver": "cgroupfs", "failSwapOn": False, "failCgroupV1": False,
        # The fake runtime reports no image filesystem: no eviction.
        "evictionHard": {}, "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "podLogsDir": pod_logs, "resolvConf": "",
        "nodeStatusUpdateFrequency": "2s",
    }
    cfg.update(extra)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    return path


def node_obj(c, node=NODE):
    """The Node object, or None while there is none."""
    try:
        return c.admin.get("/api/v1/nodes/" + node)
    except ApiError as e:
        if e.code == 404:
            return None
        raise


def ready(obj):
    """Whether a Node's or a pod's Ready condition is True."""
    for cond in obj.get("status", {}).get("conditions", []):
        if cond["type"] == "Ready":
            return cond["status"] == "True"
    return False


def wait_node_ready(c, node, alive, timeout=120):
    """Waits (alive() checking the node's processes) for kubelet to register
    Node node and report it Ready; lifts the not-ready taint
    TaintNodesByCondition put on the new Node (the node lifecycle controller
    that would lift it does not run: cluster.py's other nodes renew no
    heartbeats).  Returns the Node as first seen Ready."""
    n = wait_for("kubelet to register Node %s and report it Ready" % node,
                 lambda: alive() and (lambda o: o if o and ready(o) else None)(
                     node_obj(c, node)), timeout)
    if n["spec"].get("taints"):
        c.admin.merge_patch("/api/v1/nodes/" + node, {"spec": {"taints": None}})
    return n


def check_procs(procs):
    """True when every Proc of procs runs; else fails naming the one that
    exited, with the end of its log."""
    for p in procs:
        if not p.alive():
            fail("%s exited (%s); its log ends:\n%s" % (p.name, p.p.returncode,
                                                       p.tail()))
    return True


def pod_state(o):
    """A pod's node, conditions and container statuses, for a failure."""
    return "node %r, conditions %s, container statuses %s" % (
        o["spec"].get("nodeName"), o["status"].get("conditions"),
        o["status"].get("containerStatuses"))


def wait_pod_running(c, path, alive, timeout=120, and_ready=True,
                     detail=pod_state):
    """Waits (alive() checking the node's processes) for the pod at API path
    to be Running (and Ready, with and_ready); returns it.  On the timeout,
    fails with its phase and detail(pod)."""
    name = path.rsplit("/", 1)[1]

    def running():
        alive()
        o = c.admin.get(path)
        return o if o["status"].get("phase") == "Running" and (
            ready(o) or not and_ready) else None
    try:
        return wait_for("pod %s Running%s" % (name, " and Ready" if and_ready else ""),
                        running, timeout)
    except Failure:
        o = c.admin.get(path)
        fail("pod %s: phase %s, %s" % (name, o["status"].get("phase"), detail(o)))


def pod_gone(c, path):
    """Whether the API server no longer has the pod at path."""
    try:
        c.admin.get(path)
    except ApiError as e:
        return e.code == 404
    return False


def delete_through_kubelet(c, path, alive, grace, timeout=90):
    """A graceful DELETE of the pod at path: the API server keeps the pod
    (deletionTimestamp set) until its node's kubelet, having stopped the
    containers, deletes it for good (nothing else here would); waits for
    that, alive() checking the node's processes."""
    name = path.rsplit("/", 1)[1]
    d = c.admin.delete(path, gracePeriodSeconds=grace)
    if not d.get("metadata", {}).get("deletionTimestamp"):
        fail("DELETE %s was not graceful: %s" % (name, d.get("metadata")))
    wait_for("kubelet to finish deleting %s" % name,
             lambda: alive() and pod_gone(c, path), timeout)


def start_agent(c, t, node, spec, cfg):
    """gpufrac's node agent for node, as its DaemonSet pod (once scheduled:
    t is test_k8s's E2E) would run it: that pod's token, --fake-gpus spec,
    --config cfg; returns the pod."""
    p = wait_for("the gpufrac-node DaemonSet pod on %s" % node,
                 lambda: t.agent_pod(node), 90)
    akc = c.pod_kubeconfig("agent-" + node, "gpufrac-node", p)
    c.spawn("agent-" + node, [
        c.gpufrac, "node", "--fake-gpus", spec, "--node-name", node,
        "--kubeconfig", akc, "--config", cfg,
        "--listen", "127.0.0.1:%d" % free_port(), "--interval", "2"])
    return p


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
        return node_kubeconfig(self.c, NODE, "node")

    def config(self):
        # No cgroups of kubelet's own (the machine's cgroup v1 is shared).
        return kubelet_config(self.c, self.c.path("kubelet-config.json"),
                              self.sock, self.c.path("pod-logs"),
                              cgroupsPerQOS=False, enforceNodeAllocatable=[])

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
        return check_procs(self.procs)

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

    def created_for(self, pod, container=None):
        """The CreateContainer requests for pod's containers (only those
        named container, when given)."""
        return [r for r in self.created()
                if r["sandboxConfig"]["metadata"]["name"] == pod and
                (container is None or r["config"]["metadata"]["name"] == container)]


def kubelet_main(doc, title, run, tail=20, kubelet=Kubelet, start=None,
                 **cluster_kw):
    """The main of a one-scenario file with a Kubelet, its argv K8S_BIN
    GPUFRAC [--keep]: a Cluster (cluster_kw: its other arguments), kl =
    kubelet(c), the cluster started (start(c) when given, else c.start()),
    run(c, kl), the Kubelet stopped in any case; a failure logs the last
    `tail` lines of every process.  Returns the exit status (2: bad
    arguments, doc printed)."""
    a = e2e_args(doc, 2)
    if not a:
        return 2
    (k8s_bin, gpufrac), keep = a
    state = {}

    def body(c):
        kl = state["kl"] = kubelet(c)
        if start:
            start(c)
        else:
            c.start()
        try:
            run(c, kl)
        finally:
            kl.stop()

    def tails(c):
        kl = state.get("kl")
        for p in c.extra + (kl.procs if kl else []):
            log("%s log ends:\n%s" % (p.name, p.tail(tail)))
    return run_once(title, lambda: Cluster(k8s_bin, gpufrac, keep, **cluster_kw),
                    body, tails)
