#!/usr/bin/env python3
"""The chart installed with helm on the real node (label e2e; issue 31).

Usage: test_node_chart.py K8S_BIN CONTAINERD_BIN CNI_BIN KUBE_PROXY_BIN HELM
                          GPUFRAC INTERPOSER FAKE_LIBCUDA FAKE_LIBNVML [--keep]

test_node.py's node (kubelet, containerd, runc, the bridge pod network, the
fake driver through its CDI spec) with the in-cluster network a real
cluster has, so that the chart's pods, off the host network, reach
kube-apiserver and each other through Services:
  - the node's bridge is made before the control plane, holding its
    gateway address 10.250.N.1/24 (the address the CNI bridge plugin would
    give it); kube-apiserver binds and advertises that address (not
    loopback, and on no other interface), its lease reconciler keeps the
    kubernetes Service's endpoints, its certificate names 10.96.0.1;
  - kube-proxy (built by scripts/install-k8s from the same k8s.io/kubernetes,
    KUBE_PROXY_BIN), iptables mode, a ServiceAccount bound to
    system:node-proxier as kubeadm does, health and metrics on loopback,
    no localhost NodePorts (route_localnet untouched), conntrack sysctls
    left alone; its rules removed (kube-proxy --cleanup) at the end;
  - gpufrac-node and gpufrac-scheduler from scripts/build-images and
    kube-scheduler (K8S_BIN's, the chart's registry.k8s.io/kube-scheduler
    image name) imported into containerd from OCI layouts (no registry);
  - `helm install` of deploy/helm/gpufrac: pullPolicy Never, the agent's
    pool config (16 slots, the interposer and preload in the node's
    /var/lib, driver_cdi = nvidia.com/gpu) and nodeAgent.extraArgs
    --fake-gpus 2xA100-80GB (the GPUs the driver's CDI spec describes).
Checked: the agent DaemonSet's pod Running in a runc container on the pod
network with its hostPath mounts (/var/run/cdi, /run/gpufrac,
/var/lib/kubelet/device-plugins in its mountinfo), its device plugin
registered on the real kubelet socket (allocatable gpufrac.io/gpu = 32) and
its inventory written through 10.96.0.1; the extender and kube-scheduler
Deployments' pods Running and Ready; a probe pod (schedulerName gpufrac,
gpu-memory 4Gi, compute 30) scheduled by gpufrac's kube-scheduler (its
Scheduled event) through the extender's Service (the grant) and held to
its share (cuMemGetInfo total 4Gi, refused past it).
"""

import json
import os
import shlex
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, Failure, Proc, free_port, log, run_once, wait_for  # noqa: E402
from kubelet_node import node_obj, wait_node_ready  # noqa: E402
from test_k8s import E2E, GRANT  # noqa: E402
import test_node as tn  # noqa: E402

REPO = tn.REPO
CHART = os.path.join(REPO, "deploy", "helm", "gpufrac")
RNS = "gpufrac-system"
SVC_IP = "10.96.0.1"  # the kubernetes Service in 10.96.0.0/12


def fail(msg):
    raise Failure(msg)


def make_bridge(n):
    """The node's bridge with its gateway address, before the CNI plugin
    (which keeps an existing bridge and an address equal to its gateway)."""
    gw = "10.250.%d.1" % n.subnet
    for argv in (["ip", "link", "add", n.bridge, "type", "bridge"],
                 ["ip", "addr", "add", gw + "/24", "dev", n.bridge],
                 ["ip", "link", "set", n.bridge, "up"]):
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            fail("%s: %s" % (" ".join(argv), r.stderr.strip()))
    return gw


class KubeProxy:
    def __init__(self, c, n, proxy_bin):
        self.c, self.n = c, n
        self.bin = os.path.join(proxy_bin, "kube-proxy")
        if not os.access(self.bin, os.X_OK):
            fail("no kube-proxy in %s: run scripts/install-k8s" % proxy_bin)
        self.proc = None

    def start(self):
        c = self.c
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "kube-proxy", "namespace": "kube-system"}},
                {"apiVersion": "rbac.authorization.k8s.io/v1",
                 "kind": "ClusterRoleBinding",
                 "metadata": {"name": "gpufrac-e2e-kube-proxy"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                             "kind": "ClusterRole", "name": "system:node-proxier"},
                 "subjects": [{"kind": "ServiceAccount", "name": "kube-proxy",
                               "namespace": "kube-system"}]}]}))
        kc = c.sa_kubeconfig("kube-proxy", c.token("kube-proxy", "kube-system"))
        cfg = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": kc},
            "hostnameOverride": tn.NODE, "mode": "iptables",
            "clusterCIDR": "10.250.%d.0/24" % self.n.subnet,
            "detectLocalMode": "ClusterCIDR",
            "healthzBindAddress": "127.0.0.1:%d" % free_port(),
            "metricsBindAddress": "127.0.0.1:%d" % free_port(),
            "nodePortAddresses": [c.api_address + "/32"],
            "iptables": {"localhostNodePorts": False},
            "conntrack": {"maxPerCore": 0, "min": 0,
                          "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"}}
        path = c.path("kube-proxy.json")
        with open(path, "w") as f:
            json.dump(cfg, f, indent=1)
        self.proc = Proc("kube-proxy", [self.bin, "--config", path, "--v=2"],
                         c.path("kube-proxy.log"))
        # The kubernetes Service's rule, DNAT to kube-apiserver's address.
        want = "%s:%d" % (c.api_address, c.api_port)

        def rules():
            if not self.proc.alive():
                fail("kube-proxy exited:\n%s" % self.proc.tail(20))
            r = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True,
                               text=True)
            return [ln for ln in r.stdout.splitlines()
                    if "DNAT" in ln and want in ln] or None
        got = wait_for("kube-proxy's DNAT for %s -> %s" % (SVC_IP, want), rules, 60)
        log("kube-proxy (iptables mode) running: %s" % got[0])
        return self

    def stop(self):
        if self.proc:
            self.proc.stop(10)
            r = subprocess.run([self.bin, "--cleanup"], capture_output=True, text=True)
            if r.returncode != 0:
                log("kube-proxy --cleanup: exit %d: %s" % (r.returncode, r.stderr[-500:]))


def import_images(c, n, interposer, version):
    """gpufrac-node and gpufrac-scheduler (scripts/build-images) and
    kube-scheduler, each from an OCI layout, under the chart's names."""
    out = os.path.join(n.d, "gpufrac-images")
    refs = []
    for name in ("gpufrac-node", "gpufrac-scheduler"):
        r = subprocess.run([os.path.join(REPO, "scripts", "build-images"), "--only",
                            name, "--gpufrac", c.gpufrac, "--interposer", interposer,
                            "--version", version, "--out", out],
                           capture_output=True, text=True)
        if r.returncode != 0:
            fail("scripts/build-images --only %s: %s" % (name, r.stderr or r.stdout))
        repo = "ghcr.io/gpufrac/" + name
        arch = tn.layout_archive(os.path.join(out, name),
                                 os.path.join(n.d, name + ".tar"))
        n.ctr("images", "import", "--base-name", repo, arch)
        refs.append("%s:%s" % (repo, version))
    ks = "registry.k8s.io/kube-scheduler"
    arch = tn.oci_archive(os.path.join(n.d, "kube-scheduler.tar"), "v1.37.2",
                          [("bin", None, 0o755, None),
                           ("bin/kube-scheduler", os.path.join(c.bin, "kube-scheduler"),
                            0o755, None),
                           ("tmp", None, 0o1777, None)], ["/bin/kube-scheduler"])
    n.ctr("images", "import", "--base-name", ks, arch)
    refs.append(ks + ":v1.37.2")
    have = n.ctr("images", "list", "-q").stdout.split()
    miss = [r for r in refs if r not in have]
    if miss:
        fail("ctr images import did not make %s (containerd has %s)" % (miss, have))
    log("imported into containerd from OCI layouts: %s" % ", ".join(refs))


def helm(c, helm_path, *args):
    env = dict(os.environ)
    for k in ("CACHE", "CONFIG", "DATA"):
        env["HELM_%s_HOME" % k] = c.path("helm", k.lower())
    r = subprocess.run([helm_path, "--kubeconfig", c.admin_kc] + list(args),
                       capture_output=True, text=True, timeout=300, env=env)
    if r.returncode != 0:
        fail("helm %s: exit %d: %s" % (" ".join(args), r.returncode,
                                       (r.stderr or r.stdout).strip()))
    return r.stdout


def pods(c, label):
    return c.admin.items("/api/v1/namespaces/%s/pods" % RNS, labelSelector=label)


def ready(p):
    return p["status"].get("phase") == "Running" and all(
        s.get("ready") for s in p["status"].get("containerStatuses", []))


def wait_pods(c, n, label, count, what):
    def got():
        n.alive()
        ps = pods(c, label)
        return ps if len(ps) == count and all(ready(p) for p in ps) else None
    try:
        return wait_for("%d %s pod(s) Running and Ready" % (count, what), got, 150)
    except Failure:
        fail("%s pods: %s" % (what, [(p["metadata"]["name"], p["status"].get("phase"),
                                      p["status"].get("containerStatuses"),
                                      p["status"].get("conditions"))
                                     for p in pods(c, label)]))


def check_agent(c, n):
    ps = wait_pods(c, n, "app.kubernetes.io/name=gpufrac-node", 1, "gpufrac-node")
    o = ps[0]
    want = str(tn.NGPUS * tn.SLOTS)

    def capacity():
        n.alive()
        return node_obj(c, tn.NODE)["status"].get("allocatable", {}).get(
            tn.RESOURCE) == want
    wait_for("allocatable %s = %s from the chart's agent" % (tn.RESOURCE, want),
             capacity, 90)
    cid = o["status"]["containerStatuses"][0]["containerID"][len("containerd://"):]
    runs = {x["id"]: x for x in n.runc_list()}
    if runs.get(cid, {}).get("status") != "running":
        fail("runc does not list the agent's container %s running" % cid[:12])
    pid = runs[cid]["pid"]
    with open("/proc/%d/mountinfo" % pid) as f:
        points = {ln.split()[4] for ln in f}
    need = ["/var/run/cdi", "/run/gpufrac", "/var/lib/kubelet/device-plugins",
            "/etc/gpufrac"]
    if [p for p in need if p not in points]:
        fail("the agent's container (pid %d) mounts %s, lacking %s" % (
            pid, sorted(points), [p for p in need if p not in points]))
    if o["spec"].get("hostNetwork") or not o["status"].get("podIP", "").startswith(
            "10.250.%d." % n.subnet):
        fail("the agent pod is not on the pod network: hostNetwork %s, IP %s" % (
            o["spec"].get("hostNetwork"), o["status"].get("podIP")))
    E2E(c).wait_inventory(tn.NODE, tn.NGPUS)
    socks = sorted(os.listdir(os.path.join(n.kroot, "device-plugins")))
    if "kubelet.sock" not in socks or not [x for x in socks if x.startswith("gpufrac")]:
        fail("device-plugins holds %s" % socks)
    log("DaemonSet pod %s Running (runc pid %d, pod IP %s), hostPaths %s mounted; "
        "allocatable %s = %s; device-plugins holds %s; inventory written through %s"
        % (o["metadata"]["name"], pid, o["status"]["podIP"], need[:3], tn.RESOURCE,
           want, socks, SVC_IP))


def scheduled_by(c, name):
    for e in c.admin.items("/api/v1/namespaces/%s/events" % tn.NS):
        if e["involvedObject"].get("name") == name and e.get("reason") == "Scheduled":
            return e.get("reportingComponent") or e.get("source", {}).get("component")
    return None


def run_share(c, n):
    name = "p4g"
    obj = tn.pod(name, None, "4Gi", 30, ns=tn.NS)
    obj["spec"]["schedulerName"] = "gpufrac"
    obj["spec"]["terminationGracePeriodSeconds"] = 2
    obj["spec"]["containers"][0].update({"image": tn.PROBE, "imagePullPolicy": "Never"})
    c.admin.create("/api/v1/namespaces/%s/pods" % tn.NS, obj)
    path = "/api/v1/namespaces/%s/pods/%s" % (tn.NS, name)
    try:
        o, granted, kv, got = tn.probe_result(c, n, path)
    except Failure as e:
        p = c.admin.get(path)
        fail("%s; pod %s: %s %s" % (e, name, p["status"].get("phase"),
                                    p["status"].get("conditions")))
    by = wait_for("pod %s's Scheduled event" % name, lambda: scheduled_by(c, name), 30)
    if by != "gpufrac" or o["spec"]["schedulerName"] != "gpufrac":
        fail("pod %s: schedulerName %s, scheduled by %s" % (
            name, o["spec"]["schedulerName"], by))
    if GRANT not in o["metadata"].get("annotations", {}):
        fail("pod %s bound without a grant: the extender did not place it" % name)
    limit = 4 * tn.GiB
    want = {"devices": "1", "uuid": granted[0]["uuid"], "before.total": str(limit),
            "allocated": str(limit - tn.CONTEXT_OVERHEAD), "refused": "2",
            "after.free": "0"}
    bad = {k: (kv.get(k), v) for k, v in want.items() if kv.get(k) != v}
    if bad:
        fail("probe %s: got/want %s; it printed %s" % (name, bad, got))
    log("probe %s scheduled by %s through the extender's Service (granted %s), "
        "cuMemGetInfo total %s, allocated %s, then CUDA_ERROR_OUT_OF_MEMORY" % (
            name, by, granted[0]["uuid"], kv["before.total"], kv["allocated"]))


def main():
    args = [a for a in sys.argv[1:] if a != "--keep"]
    if len(args) != 9:
        print(__doc__, file=sys.stderr)
        return 2
    (k8s_bin, ctrd_bin, cni_bin, proxy_bin, helm_path, gpufrac, interposer,
     fake_cuda, fake_nvml) = args
    interposer, fake_cuda, fake_nvml = (os.path.abspath(x) for x in (
        interposer, fake_cuda, fake_nvml))
    keep = "--keep" in sys.argv[1:]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    state = {}
    with open(os.path.join(CHART, "Chart.yaml")) as f:
        version = [ln.split(":", 1)[1].strip().strip('"') for ln in f
                   if ln.startswith("appVersion:")][0]

    def body(c):
        n = state["n"] = tn.Node(c, ctrd_bin, cni_bin)
        kp = state["kp"] = KubeProxy(c, n, proxy_bin)
        try:
            c.api_address = make_bridge(n)
            c.start(scheduler=False)
            c.start_scheduler(extender=False)
            n.start()
            wait_node_ready(c, tn.NODE, n.alive, 180)
            kp.start()
            gpus = tn.driver_cdi(c, n, fake_cuda, fake_nvml)
            if len(gpus) != tn.NGPUS:
                fail("the driver's spec has %d GPUs" % len(gpus))
            tn.probe_image(n, interposer, fake_cuda)
            import_images(c, n, interposer, version)
            n.ns(["sh", "-c", "mkdir -p %s && cp %s %s && echo %s > %s" % (
                os.path.dirname(tn.SHIM), shlex.quote(interposer), tn.SHIM, tn.SHIM,
                tn.PRELOAD)])
            c.kubectl("label", "node", tn.NODE, "gpufrac.io/enabled=true")
            c.namespace(tn.NS)
            values = {
                "nodeAgent": {
                    "image": {"pullPolicy": "Never"},
                    "extraArgs": ["--fake-gpus", tn.SPEC],
                    "pools": [{"name": "default", "mode": "device-plugin",
                               "nodeSelector": {"gpufrac.io/enabled": "true"},
                               "config": {"slots": tn.SLOTS, "shim_lib": tn.SHIM,
                                          "preload": tn.PRELOAD,
                                          "driver_cdi": "nvidia.com/gpu"}}]},
                "extender": {"image": {"pullPolicy": "Never"}},
                "scheduler": {"image": {"pullPolicy": "Never"}}}
            vpath = c.path("values.json")
            with open(vpath, "w") as f:
                json.dump(values, f, indent=1)
            out = helm(c, helm_path, "install", "gpufrac", CHART, "-n", RNS,
                       "--create-namespace", "-f", vpath)
            log("helm install: %s" % " ".join(out.split()[:10]))
            check_agent(c, n)
            ext = wait_pods(c, n, "app.kubernetes.io/name=gpufrac-scheduler", 2,
                            "extender")
            ks = wait_pods(c, n, "app.kubernetes.io/name=gpufrac-kube-scheduler", 2,
                           "kube-scheduler")
            log("extender pods %s and kube-scheduler pods %s Running and Ready on "
                "the pod network" % ([p["status"]["podIP"] for p in ext],
                                     [p["status"]["podIP"] for p in ks]))
            run_share(c, n)
            c.check_alive()
        finally:
            n.stop()
            kp.stop()

    def tails(c):
        n = state.get("n")
        for p in (n.procs if n else []):
            log("%s log ends:\n%s" % (p.name, p.tail(25)))
        kp = state.get("kp")
        if kp and kp.proc:
            log("kube-proxy log ends:\n%s" % kp.proc.tail(25))
    return run_once("e2e node chart", lambda: Cluster(k8s_bin, gpufrac, keep), body,
                    tails)


if __name__ == "__main__":
    sys.exit(main())
