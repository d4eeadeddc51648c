#!/usr/bin/env python3
"""The extender's HTTPS with its Secret mounted by the real kubelet (CTest
label e2e; issue 29 §3).

Usage: test_tls_kubelet.py K8S_BIN GPUFRAC [--keep]

The control plane of cluster.py and a real kubelet with the fake CRI
runtime (kubelet_node.py's, in its own mount namespace; needs root).  The
Secret gpufrac-scheduler-tls is made with kubectl as docs/scheduler.md
says; a pod is made from the extender Deployment's pod template in
deploy/scheduler.yaml with its TLS lines uncommented as its comments say
(securityContext, volume, mount and arguments as written; only the pod's
labels and priority class are left out, so the Deployment does not adopt
it, and it is put on the kubelet's node).  The kubelet mounts the Secret
volume (tmpfs, its own modes and fsGroup ownership) and asks the runtime
to create the container; from that CreateContainer request (user, group,
supplementary groups, mounts, arguments) the real `gpufrac scheduler` is
started inside the kubelet's mount namespace with exactly that identity
and those files (setpriv), its addresses on loopback and --no-kube.  Then
curl as kube-scheduler (a clientAuth certificate of the Secret's CA) must
get 200 from /filter and a certificate marked for server use only 403.
Before deploy/ set fsGroup the extender exited 1 here: "TLS certificate
.../tls.crt: Permission denied".
"""

import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Failure, free_port, log, wait_for  # noqa: E402
from kubelet_node import NODE, kubelet_main, wait_node_ready  # noqa: E402
from test_k8s import E2E  # noqa: E402
import test_tls_secret as ts  # noqa: E402

NSYS = "gpufrac-system"
POD = "tls-extender"


def fail(msg):
    raise Failure(msg)


def int_of(v):
    """A CRI Int64Value in protojson: {"value": "65532"}."""
    return int(v["value"]) if isinstance(v, dict) else int(v)


def run(c, kl):
    t = E2E(c)
    t.apply_deploy()
    kl.start()
    wait_node_ready(c, NODE, kl.alive)

    certs = c.path("extender-tls")
    os.makedirs(certs)
    ts.make_certs(certs)
    c.kubectl("-n", NSYS, "create", "secret", "generic", "gpufrac-scheduler-tls",
              "--from-file=tls.crt=" + os.path.join(certs, "tls.crt"),
              "--from-file=tls.key=" + os.path.join(certs, "tls.key"),
              "--from-file=client-ca.crt=" + os.path.join(certs, "ca.crt"))

    dep = ts.from_manifest()
    spec = dep["spec"]["template"]["spec"]
    spec["nodeName"] = NODE
    spec.pop("priorityClassName", None)
    c.admin.create("/api/v1/namespaces/%s/pods" % NSYS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": POD, "namespace": NSYS, "labels": {"e2e": "tls"}},
        "spec": spec})

    def created():
        kl.alive()
        mine = kl.created_for(POD, "extender")
        return mine[0]["config"] if mine else None
    ctr = wait_for("kubelet to mount the Secret and create the extender's "
                   "container", created, 120)
    sc = ctr.get("linux", {}).get("securityContext", {})
    uid = int_of(sc["runAsUser"])
    gid = int_of(sc["runAsGroup"]) if "runAsGroup" in sc else uid
    groups = [int(g) for g in sc.get("supplementalGroups", [])]
    mounts = {m["containerPath"]: m for m in ctr.get("mounts", [])}
    tls = mounts.get("/etc/gpufrac/tls")
    if not tls or not tls.get("readonly"):
        fail("no read-only /etc/gpufrac/tls mount in the CreateContainer "
             "request: %s" % sorted(mounts))
    host = tls["hostPath"]
    kpid = kl.kubelet.p.pid  # unshare, exec'd into sh, exec'd into kubelet
    ns = ["nsenter", "-t", str(kpid), "-m", "--"]
    st = subprocess.run(ns + ["stat", "-L", "-c", "%a %u:%g %n",
                              host + "/tls.crt", host + "/tls.key",
                              host + "/client-ca.crt"],
                        capture_output=True, text=True)
    log("kubelet mounted the Secret at %s: %s; the runtime is asked for "
        "user %d group %d supplementary groups %s" % (
            host, st.stdout.strip().replace("\n", "; "), uid, gid, groups))
    if uid == 0:
        fail("the extender's container runs as root")

    # As the runtime would: the volume bound at the mount path in a mount
    # namespace of the container's own (here under a 0755 directory of
    # /tmp: the kubelet's pods directory above the volume is root's only,
    # which a container never sees either).
    root = tempfile.mkdtemp(prefix="gpufrac-e2e-ctr-")
    mnt = root + "/etc/gpufrac/tls"
    os.makedirs(mnt)
    for d in (root, root + "/etc", root + "/etc/gpufrac", mnt):
        os.chmod(d, 0o755)
    port, hport = free_port(), free_port()
    args = []
    for a in ctr.get("args", []):
        if a.startswith("/etc/gpufrac/tls/"):
            a = mnt + a[len("/etc/gpufrac/tls"):]
        elif a == "0.0.0.0:8888":
            a = "127.0.0.1:%d" % port
        elif a == "0.0.0.0:8889":
            a = "127.0.0.1:%d" % hport
        args.append(a)
    if "--tls-cert" not in args or args[0] != "scheduler":
        fail("the container's arguments lack the TLS flags: %s" % args)
    who = ["setpriv", "--reuid", str(uid), "--regid", str(gid)] + (
        ["--groups", ",".join(map(str, groups))] if groups
        else ["--clear-groups"])
    bind = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount -n --bind -o ro "$0" "$1" && shift && exec "$@"',
            host, mnt]
    try:
        serve(c, ns + bind + who + [c.gpufrac] + args + ["--no-kube"], certs,
              port, uid)
    finally:
        shutil.rmtree(root)


def serve(c, argv, certs, port, uid):
    ext = c.spawn("extender-tls", argv)
    body = b'{"Pod":{"metadata":{"name":"p","namespace":"n"}},"NodeNames":[]}'

    def curl(who):
        return subprocess.run(
            ["curl", "-sS", "--max-time", "3", "--cacert",
             os.path.join(certs, "ca.crt"), "--cert",
             os.path.join(certs, who + ".crt"), "--key",
             os.path.join(certs, who + ".key"), "-w", "\n%{http_code}",
             "-H", "Content-Type: application/json", "--data-binary", "@-",
             "https://127.0.0.1:%d/filter" % port],
            input=body, capture_output=True).stdout

    def served():
        if not ext.alive():
            fail("the extender exited %s as the kubelet would run it:\n%s" % (
                ext.p.returncode, ext.tail()))
        return curl("client").endswith(b"200")
    wait_for("the extender serving HTTPS as user %d" % uid, served, 20)
    out = curl("serveronly")
    if not out.endswith(b"403") or b"clientAuth" not in out:
        fail("a certificate for server use only got %r" % out)
    log("the extender, run as the kubelet asked with the Secret it mounted, "
        "serves HTTPS: kube-scheduler's certificate 200, a server-only one 403")
    c.stop_gpufrac(ext)


def main():
    return kubelet_main(__doc__, "e2e TLS through kubelet", run)


if __name__ == "__main__":
    sys.exit(main())
