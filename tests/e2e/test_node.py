#!/usr/bin/env python3
"""A real node: kubelet, containerd and runc with a CNI pod network (label e2e).

Usage: test_node.py K8S_BIN CONTAINERD_BIN CNI_BIN GPUFRAC INTERPOSER
                    FAKE_LIBCUDA FAKE_LIBNVML [--keep]
                    [--bench N]   (then N plain and N share pods' start latency)

K8S_BIN holds cluster.py's control plane and kubelet; CONTAINERD_BIN
containerd, containerd-shim-runc-v2 and ctr; CNI_BIN the CNI plugins
loopback, bridge and host-local (all built by scripts/install-k8s from their
Go modules).  runc and busybox are Debian's (scripts/install-deps), found on
PATH (GF_TEST_RUNC names another runc, e.g. a wrapper adding --debug); the C
compiler is `cc` (or $CC).  Anything missing fails the test.

Needs root.  Nothing of the machine's is used or left behind:
  - a mount namespace of the test's own (a holder process made by unshare;
    containerd, kubelet and everything they start enter it with nsenter)
    where tmpfs hides /var/lib, /run and /var/log, /var/lib/kubelet is the
    test's directory (the device-plugin socket's fixed path), and
    containerd's root, state, socket, runc's state and the pod network
    namespaces are all under the test's directory;
  - no registry: the sandbox ("pause") image is tests/e2e/node/pause.c
    compiled statically, the workload image Debian's static busybox, each
    written by this file as an OCI archive and loaded with `ctr images
    import`; the pause image is containerd's pinned sandbox image;
  - the pod network is a bridge of the test's own name (with host-local
    addresses from a /24 of 10.250.0.0/16, state in the test's directory),
    deleted at the end; pods get their own network namespaces.

  1. containerd runs (CRI plugin, CDI spec dir, runc as the runtime through
     its v2 shim, cgroupfs) and the two images are imported;
  2. kubelet (client certificate system:node:<node>) registers its Node with
     containerd as its CRI runtime; the Node is Ready, its runtime
     containerd://<version>, once the CNI config is loaded;
  3. a busybox pod: its sandbox gets an address of the bridge's subnet, its
     container is created by runc (runc's own state lists it, running) and
     writes a line carrying its hostname and address into a hostPath file;
     the test reads that file, reads the same line in the container's log
     (containerd writes it where kubelet's podLogsDir says), and fetches a
     file over HTTP from busybox httpd at the pod's IP through the bridge;
  4. deleted, the pod is stopped by kubelet and runc (runc lists no
     container), its address released by host-local;
  5. gpufrac's node image, built by scripts/build-images (INTERPOSER is the
     interposer it packs), imported into containerd under deploy/'s image
     name; deploy/namespace.yaml and node-agent.yaml applied (the DaemonSet
     selects gpufrac.io/enabled=true, which this Node lacks) and one agent
     pod of the test's run from that image by kubelet and runc: the
     DaemonSet's hostPath mounts, securityContext and ServiceAccount, a
     ConfigMap node.conf (slots = 16), `--fake-gpus 2xA100-80GB`,
     hostNetwork with KUBERNETES_SERVICE_HOST/PORT = kube-apiserver's
     loopback address (no kube-proxy runs).  Its device plugin registers
     on the real kubelet's socket: the Node's capacity and allocatable
     gpufrac.io/gpu = 32, its inventory annotation lists 2 GPUs;
  6. gpufrac's extender (a process, deploy/scheduler-rbac.yaml's account)
     and a share pod (gpufrac.io/gpu 1, gpu-memory 20Gi, gpu-compute 30,
     the busybox image) bound by kube-scheduler through it; kubelet calls
     the containerised agent's Allocate and containerd/runc create the
     container with the answer: it prints CUDA_VISIBLE_DEVICES = the
     granted GPU, the shim config (memory.<uuid> = 20 GiB, compute = 30)
     mounted at $GPUFRAC_CONFIG, and its /dev holding nvidiactl,
     nvidia-uvm and nvidia<index>.  The fake GPUs' device nodes are char
     1:3 nodes in a /dev of the namespace's own (a tmpfs holding copies of
     the machine's nodes, its pts, shm and mqueue bound); the interposer
     and its preload file sit in the namespace's /var/lib (node.conf
     shim_lib, preload).
  7. the GPU side (before the agent starts): the node's "driver" (the
     tests' fake libcuda.so.1 and libnvidia-ml.so.1, FAKE_LIBCUDA and
     FAKE_LIBNVML, as libcuda.so.550.54.15 and libnvidia-ml.so.550.54.15 in
     the namespace's /var/lib) described by a CDI spec of kind
     nvidia.com/gpu as `nvidia-ctk cdi generate` writes one (devices by
     index, by UUID and "all"; the device nodes, the libraries bind-mounted
     read-only into /usr/lib/x86_64-linux-gnu, a createContainer hook
     updating the loader cache: tests/e2e/node/cdi_hook.py for
     nvidia-cdi-hook update-ldcache), in containerd's CDI directory; the
     agent's node.conf says driver_cdi = nvidia.com/gpu, so its Allocate
     answers name nvidia.com/gpu=<uuid> of each granted GPU and containerd
     applies that spec.  A probe image (tests/e2e/node/probe.c, dynamic,
     with the glibc libraries it and the interposer load; no driver);
  8. probe pods 4Gi/30%, 2Gi/10% (on one GPU), a whole GPU (the other) and
     a memory-only 3Gi share: each process, preloaded with the interposer
     by the container's own loader, dlopens libcuda.so.1 from the driver's
     spec, sees one device (its granted UUID), cuMemGetInfo total = its
     share (the whole GPU's memory for the whole pod) and free = that less
     its context's 300 MiB charge, allocates exactly that much and is
     refused (CUDA_ERROR_OUT_OF_MEMORY); the agent's metrics report the
     container's usage (allocated + context charge) from its region;
  9. faults: the agent's container SIGKILLed (kubelet restarts it; the
     probes' processes and the agent's per-container series unchanged; a
     new 1Gi share admitted and refused at exactly it), then containerd
     stopped and started (the same; the shims kept the containers), then
     kubelet (the same once the agent registered again); then the whole
     node stopped (kubelet, every container, the shims, containerd) and
     started: kubelet fails the GPU pods it admits before the agent has
     registered (UnexpectedAdmissionError), and their files, series and
     extender entries must go; a pod it runs again must print what it
     printed before; the failed pods made again (as a controller would)
     get the same shares;
 10. every GPU pod deleted: the agent's /run/gpufrac/pods (which held
     exactly their uids) and /var/run/cdi (but its node spec) empty, no
     per-container series, no GPU memory granted.
"""

import hashlib
import io
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (Cluster, Failure, Proc, free_port, log,  # noqa: E402
                     run_once, wait_for)
from kubelet_node import (check_procs, delete_through_kubelet,  # noqa: E402
                          kubelet_config, node_kubeconfig, node_obj, pod_gone,
                          wait_node_ready, wait_pod_running)
from test_k8s import E2E, GRANT, Extender, pod  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NODE = "rn1"
NS = "node-e2e"
PAUSE = "gpufrac.test/pause:1"
BUSYBOX = "gpufrac.test/busybox:1"
K8S_NS = "k8s.io"  # containerd's namespace for CRI
AGENT_NS = "gpufrac-system"
SPEC = "2xA100-80GB"
NGPUS = 2
SLOTS = 16
RESOURCE = "gpufrac.io/gpu"
REPO = os.path.dirname(os.path.dirname(HERE))
SHIM = "/var/lib/gpufrac-e2e/libgpufrac-cuda.so"
PRELOAD = "/var/lib/gpufrac-e2e/ld.so.preload"


def fail(msg):
    raise Failure(msg)


# ---- OCI archives, written here (no registry, no container engine) -------
def _blob(blobs, data, media):
    d = hashlib.sha256(data).hexdigest()
    blobs["blobs/sha256/" + d] = data
    return {"mediaType": media, "digest": "sha256:" + d, "size": len(data)}


def oci_archive(path, tag, files, entrypoint, cmd=None):
    """An OCI image archive (oci-layout, index.json, blobs) at path with one
    uncompressed layer: files is a list of (image path, host file or None
    for a directory, mode, symlink target or None).  The index names it by
    org.opencontainers.image.ref.name = tag (ctr import --base-name adds
    the repository)."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, src, mode, link in files:
            ti = tarfile.TarInfo(name)
            ti.mtime = 0
            ti.mode = mode
            if link is not None:
                ti.type = tarfile.SYMTYPE
                ti.linkname = link
                t.addfile(ti)
            elif src is None:
                ti.type = tarfile.DIRTYPE
                t.addfile(ti)
            else:
                with open(src, "rb") as f:
                    data = f.read()
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    blobs = {}
    ldesc = _blob(blobs, layer.getvalue(), "application/vnd.oci.image.layer.v1.tar")
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Entrypoint": entrypoint, "Cmd": cmd or [],
                         "Env": ["PATH=/bin"], "WorkingDir": "/"},
              "rootfs": {"type": "layers", "diff_ids": [ldesc["digest"]]}}
    cdesc = _blob(blobs, json.dumps(config).encode(),
                  "application/vnd.oci.image.config.v1+json")
    manifest = {"schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": cdesc, "layers": [ldesc]}
    mdesc = _blob(blobs, json.dumps(manifest).encode(),
                  "application/vnd.oci.image.manifest.v1+json")
    mdesc["annotations"] = {"org.opencontainers.image.ref.name": tag}
    index = {"schemaVersion": 2,
             "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [mdesc]}
    with tarfile.open(path, "w") as t:
        for name, data in [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
                           ("index.json", json.dumps(index).encode())] + \
                sorted(blobs.items()):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            t.addfile(ti, io.BytesIO(data))
    return path


def tool(name):
    p = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if not p:
        fail("%s not found on PATH: scripts/install-deps installs it" % name)
    return p


class Node:
    """containerd and kubelet for node NODE in a mount namespace of their own,
    everything under the cluster's directory."""

    def __init__(self, c, ctrd_bin, cni_bin):
        self.c = c
        need = [(c.bin, "kubelet"), (ctrd_bin, "containerd"),
                (ctrd_bin, "containerd-shim-runc-v2"), (ctrd_bin, "ctr"),
                (cni_bin, "loopback"), (cni_bin, "bridge"), (cni_bin, "host-local")]
        missing = [os.path.join(d, p) for d, p in need
                   if not os.access(os.path.join(d, p), os.X_OK)]
        if missing:
            fail("not built: %s: run scripts/install-k8s (scripts/install-deps does)"
                 % ", ".join(missing))
        if os.geteuid() != 0:
            fail("the node test needs root: containerd, runc and kubelet run in a "
                 "mount namespace of their own")
        self.ctrd_bin = ctrd_bin
        self.cni_bin = cni_bin
        self.runc = os.environ.get("GF_TEST_RUNC") or tool("runc")
        self.busybox = tool("busybox")
        self.cc = os.environ.get("CC") or tool("cc")
        for t in ("unshare", "nsenter", "ip"):
            tool(t)
        self.d = c.path("node")
        self.kroot = os.path.join(self.d, "kubelet")  # /var/lib/kubelet inside
        self.sock = os.path.join(self.d, "containerd.sock")
        self.runc_root = os.path.join(self.d, "runc")
        self.bridge = "gfe2e%d" % (os.getpid() % 100000)
        self.subnet = random.randrange(1, 255)
        self.cgroup = "/" + self.bridge
        self.made_cgroups = False
        self.procs = []
        self.holder = None

    # -- the mount namespace --
    def enter(self):
        return ["nsenter", "--mount=/proc/%d/ns/mnt" % self.holder.p.pid, "--"]

    def ns(self, argv, **kw):
        """Runs argv in the namespace; its CompletedProcess (check: Failure
        on a non-zero exit)."""
        r = subprocess.run(self.enter() + argv, capture_output=True, text=True,
                           timeout=kw.get("timeout", 120))
        if kw.get("check", True) and r.returncode != 0:
            fail("%s: exit %d: %s" % (" ".join(argv), r.returncode,
                                      (r.stderr or r.stdout).strip()))
        return r

    def ctr(self, *args, **kw):
        return self.ns([os.path.join(self.ctrd_bin, "ctr"), "--address", self.sock,
                        "--namespace", K8S_NS] + list(args), **kw)

    def start_namespace(self):
        os.makedirs(self.kroot)
        script = ("set -e; for d in /var/lib /run /var/log; do "
                  "mount -n -t tmpfs -o mode=0755 gpufrac-e2e $d; done; "
                  "mkdir /var/lib/kubelet; mount -n --bind %s /var/lib/kubelet; "
                  # The fake GPUs' device nodes (char 1:3, like /dev/null),
                  # where gpufrac's Allocate answer points: a /dev of the
                  # namespace's own holding the machine's nodes and these.
                  "mkdir /run/hostdev; mount -n --rbind /dev /run/hostdev; "
                  "mount -n -t tmpfs -o mode=0755 gpufrac-e2e-dev /dev; "
                  "cp -a /run/hostdev/. /dev/; "
                  "for m in pts shm mqueue; do [ ! -d /run/hostdev/$m ] || "
                  "mount -n --rbind /run/hostdev/$m /dev/$m; done; "
                  "for d in nvidiactl nvidia-uvm nvidia-uvm-tools %s; do "
                  "mknod -m 0666 /dev/$d c 1 3; done; "
                  "touch %s/ns-ready; exec sleep 86400"
                  % (shlex.quote(self.kroot),
                     " ".join("nvidia%d" % i for i in range(NGPUS)),
                     shlex.quote(self.d)))
        self.holder = Proc("mountns", ["unshare", "--mount", "--propagation",
                                       "private", "sh", "-c", script],
                           os.path.join(self.d, "mountns.log"))
        self.procs.append(self.holder)
        wait_for("the node's mount namespace", lambda: self.alive() and
                 os.path.exists(os.path.join(self.d, "ns-ready")), 20)

    # -- images --
    def images(self):
        img = os.path.join(self.d, "images")
        os.makedirs(img)
        pause = os.path.join(img, "pause")
        r = subprocess.run([self.cc, "-std=c11", "-O2", "-Wall", "-Werror", "-static",
                            "-o", pause, os.path.join(HERE, "node", "pause.c")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            fail("compiling tests/e2e/node/pause.c statically: %s" % r.stderr)
        pa = oci_archive(os.path.join(img, "pause.tar"), "1",
                         [("pause", pause, 0o755, None)], ["/pause"])
        bb = [("bin", None, 0o755, None), ("bin/busybox", self.busybox, 0o755, None)]
        bb += [("bin/" + a, None, 0o777, "busybox")
               for a in ("sh", "echo", "cat", "sleep", "hostname", "ip", "httpd",
                         "mkdir", "ls")]
        bb += [("tmp", None, 0o1777, None), ("etc", None, 0o755, None)]
        ba = oci_archive(os.path.join(img, "busybox.tar"), "1", bb, ["/bin/sh"])
        for archive, ref in ((pa, PAUSE), (ba, BUSYBOX)):
            self.ctr("images", "import", "--base-name", ref.rsplit(":", 1)[0],
                     archive)
        have = self.ctr("images", "list", "-q").stdout.split()
        for ref in (PAUSE, BUSYBOX):
            if ref not in have:
                fail("ctr images import did not make %s: containerd has %s" %
                     (ref, have))
        log("images %s (tests/e2e/node/pause.c, static) and %s (%s) imported "
            "into containerd from OCI archives" % (PAUSE, BUSYBOX, self.busybox))

    # -- containerd --
    def containerd_config(self):
        cdi = os.path.join(self.d, "cdi")
        cni = os.path.join(self.d, "cni")
        for p in (cdi, cni, self.runc_root):
            os.makedirs(p, exist_ok=True)
        net = {"cniVersion": "1.0.0", "name": "gpufrac-e2e", "plugins": [{
            "type": "bridge", "bridge": self.bridge, "isGateway": True,
            "ipMasq": False, "hairpinMode": True,
            "ipam": {"type": "host-local",
                     "dataDir": os.path.join(self.d, "cni-ipam"),
                     "ranges": [[{"subnet": "10.250.%d.0/24" % self.subnet}]],
                     "routes": [{"dst": "0.0.0.0/0"}]}}]}
        with open(os.path.join(cni, "10-gpufrac-e2e.conflist"), "w") as f:
            json.dump(net, f, indent=1)
        q = json.dumps  # a TOML basic string is a JSON string
        toml = "\n".join([
            # Version 3 (containerd 2.0-2.3's; 2.4 migrates it, with a warning):
            # with version = 4, 2.4.2 ignored [grpc] address.
            "version = 3",
            "root = %s" % q(os.path.join(self.d, "containerd-root")),
            "state = %s" % q(os.path.join(self.d, "containerd-state")),
            "[grpc]", "  address = %s" % q(self.sock),
            "[ttrpc]", "  address = %s" % q(self.sock + ".ttrpc"),
            "[plugins.'io.containerd.cri.v1.images']",
            "  snapshotter = 'overlayfs'",
            "  [plugins.'io.containerd.cri.v1.images'.pinned_images]",
            "    sandbox = %s" % q(PAUSE),
            "[plugins.'io.containerd.cri.v1.runtime']",
            # The driver's spec (as nvidia-ctk writes to /etc/cdi) and
            # gpufrac's (the agent's cdi_dir, /var/run/cdi: the namespace's).
            "  cdi_spec_dirs = [%s, '/var/run/cdi']" % q(cdi),
            "  netns_mounts_under_state_dir = true",
            "  enable_selinux = false",
            "  disable_apparmor = true",
            # runc writes the OOM score kubelet asks for (-998 for a
            # sandbox) in its init; lowering it needs CAP_SYS_RESOURCE,
            # which root lacks here: at most containerd's own (0) instead.
            "  restrict_oom_score_adj = true",
            "  [plugins.'io.containerd.cri.v1.runtime'.cni]",
            "    bin_dirs = [%s]" % q(self.cni_bin),
            "    conf_dir = %s" % q(cni),
            "  [plugins.'io.containerd.cri.v1.runtime'.containerd]",
            "    default_runtime_name = 'runc'",
            "    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]",
            "      runtime_type = 'io.containerd.runc.v2'",
            "      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc"
            ".options]",
            "        BinaryName = %s" % q(self.runc),
            "        Root = %s" % q(self.runc_root),
            "        SystemdCgroup = false",
            "[plugins.'io.containerd.grpc.v1.cri']",
            "  stream_server_address = '127.0.0.1'",
            "  stream_server_port = '%d'" % free_port(),
            ""])
        path = os.path.join(self.d, "containerd.toml")
        with open(path, "w") as f:
            f.write(toml)
        return path

    def start_containerd(self):
        cfg = self.containerd_config()
        env = dict(os.environ)
        # The shim and ctr are found next to containerd.
        env["PATH"] = self.ctrd_bin + ":" + env.get("PATH", "")
        self.containerd = Proc("containerd", self.enter() + [
            os.path.join(self.ctrd_bin, "containerd"), "--config", cfg,
            "--log-level", "info"], os.path.join(self.d, "containerd.log"), env=env)
        self.procs.append(self.containerd)
        wait_for("containerd's socket", lambda: self.alive() and
                 self.ctr("version", check=False).returncode == 0, 60)
        self.version = self.ctr("version").stdout
        log("containerd running: %s" % " ".join(self.version.split()))

    # -- kubelet --
    def certs(self):
        return node_kubeconfig(self.c, NODE, "rnode")

    def kubelet_config(self):
        # Pod cgroups (kubepods, its QoS classes, one per pod) under a
        # cgroup of the test's own in every v1 hierarchy, removed at the end.
        return kubelet_config(self.c, os.path.join(self.d, "kubelet-config.json"),
                              self.sock, os.path.join(self.d, "pod-logs"),
                              cgroupsPerQOS=True, cgroupRoot=self.cgroup)

    def start_kubelet(self):
        kc = self.certs()
        cfg = self.kubelet_config()
        self.kubelet = Proc("kubelet", self.enter() + [
            os.path.join(self.c.bin, "kubelet"), "--config", cfg,
            "--kubeconfig", kc, "--root-dir", "/var/lib/kubelet",
            "--hostname-override", NODE, "--v=2"],
            os.path.join(self.d, "kubelet.log"))
        self.procs.append(self.kubelet)

    def cgroup_dirs(self):
        """The test's cgroup in each hierarchy mounted under /sys/fs/cgroup."""
        base = "/sys/fs/cgroup"
        return [os.path.join(base, h, self.cgroup.lstrip("/"))
                for h in sorted(os.listdir(base))
                if os.path.exists(os.path.join(base, h, "cgroup.procs"))]

    def make_cgroups(self):
        # kubelet wants its cgroupRoot present in every hierarchy; a new
        # cpuset cgroup has no CPUs or memory nodes until given its
        # parent's.
        for d in self.cgroup_dirs():
            os.mkdir(d)
            for f in ("cpuset.cpus", "cpuset.mems"):
                if os.path.exists(os.path.join(d, f)):
                    with open(os.path.join(os.path.dirname(d), f)) as src:
                        v = src.read().strip()
                    with open(os.path.join(d, f), "w") as dst:
                        dst.write(v)
        self.made_cgroups = True

    def remove_cgroups(self):
        left = []
        for d in self.cgroup_dirs():
            for sub, _, _ in sorted(os.walk(d), key=lambda w: -len(w[0])):
                try:
                    os.rmdir(sub)
                except OSError as e:
                    left.append("%s: %s" % (sub, e))
        return left

    def start(self):
        os.makedirs(self.d)
        self.make_cgroups()
        self.start_namespace()
        self.start_containerd()
        self.images()
        self.start_kubelet()
        return self

    def alive(self):
        return check_procs(self.procs)

    def runc_list(self):
        r = subprocess.run([self.runc, "--root", os.path.join(self.runc_root, K8S_NS),
                            "list", "--format", "json"], capture_output=True, text=True)
        if r.returncode != 0:
            fail("runc list: %s" % r.stderr.strip())
        return json.loads(r.stdout or "[]") or []

    def stop(self):
        if self.holder and self.holder.alive():
            # Containers first (kubelet would restart them: it goes first),
            # then their tasks deleted, so that each shim exits.
            if hasattr(self, "kubelet"):
                self.kubelet.stop(15)
            tasks = self.ctr("tasks", "list", "-q", check=False).stdout.split()
            for t in tasks:
                self.ctr("tasks", "kill", "-s", "SIGKILL", t, check=False)
            for t in tasks:
                self.ctr("tasks", "delete", "--force", t, check=False)
        for p in reversed(self.procs):
            if p is not self.holder:
                p.stop(15)
        for c in self.runc_list_quiet():
            subprocess.run([self.runc, "--root", os.path.join(self.runc_root, K8S_NS),
                            "delete", "--force", c["id"]], capture_output=True)
        if self.holder:
            # Whatever still runs in the namespace (a shim outlives
            # containerd by design) goes with it.
            self.kill_namespace_procs(quiet=False)
            self.holder.stop(5)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        if self.made_cgroups:
            for e in self.remove_cgroups():
                log("left behind: cgroup %s" % e)

    def power_cycle(self, c, down=None):
        """The whole node stopped: kubelet, every container (SIGKILL), the
        shims and containerd, as a power loss leaves them (the node's
        files stay: /run, /var/lib/kubelet, containerd's root); down()
        runs while it is down; then containerd and kubelet started again.
        Returns the seconds until the restarted kubelet's first Ready
        heartbeat."""
        t0 = time.monotonic()
        beat = [x["lastHeartbeatTime"] for x in node_obj(c, NODE)["status"][
            "conditions"] if x["type"] == "Ready"][0]
        for p in (self.kubelet, self.containerd):
            self.procs.remove(p)
        self.kubelet.stop(15)
        tasks = self.ctr("tasks", "list", "-q", check=False).stdout.split()
        for t in tasks:
            self.ctr("tasks", "kill", "-s", "SIGKILL", t, check=False)
        self.containerd.stop(15)
        killed = self.kill_namespace_procs()
        left = [x["id"][:12] for x in self.runc_list() if x["status"] == "running"]
        if left:
            fail("containers still running with the node down: %s" % left)
        log("node stopped: kubelet, %d containers, containerd and %d leftover "
            "processes (the shims) gone" % (len(tasks), killed))
        if down:
            down()
        self.start_containerd()
        self.start_kubelet()

        def heartbeat():
            self.alive()
            cond = [x for x in node_obj(c, NODE)["status"].get("conditions", [])
                    if x["type"] == "Ready"]
            return cond and cond[0]["status"] == "True" and \
                cond[0]["lastHeartbeatTime"] != beat
        wait_for("the restarted kubelet's Ready heartbeat on Node %s" % NODE,
                 heartbeat, 120)
        return time.monotonic() - t0

    def kill_namespace_procs(self, quiet=True):
        """SIGKILLs every process of the node's mount namespace but its
        holder (and waits until they are gone); how many."""
        if not self.holder.alive():
            return 0
        ns = os.readlink("/proc/%d/ns/mnt" % self.holder.p.pid)
        killed = []
        for pid in (int(x) for x in os.listdir("/proc") if x.isdigit()):
            if pid != self.holder.p.pid:
                try:
                    if os.readlink("/proc/%d/ns/mnt" % pid) == ns:
                        if not quiet:
                            log("left in the node's namespace: pid %d (%s); killed" % (
                                pid, open("/proc/%d/comm" % pid).read().strip()))
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                except OSError:
                    pass
        def gone(pid):
            try:
                with open("/proc/%d/stat" % pid) as f:
                    return f.read().rsplit(") ", 1)[1][0] == "Z"
            except OSError:
                return True
        wait_for("the node's processes to exit",
                 lambda: all(gone(p) for p in killed), 30)
        return len(killed)

    def runc_list_quiet(self):
        try:
            return self.runc_list()
        except (Failure, ValueError):
            return []


def run(c, n):
    n.start()
    no = wait_node_ready(c, NODE, n.alive, 180)
    info = no["status"]["nodeInfo"]
    if not info["containerRuntimeVersion"].startswith("containerd://"):
        fail("Node %s runtime %r, not containerd" % (NODE, info["containerRuntimeVersion"]))
    log("Node %s Ready: kubelet %s, runtime %s" % (
        NODE, info["kubeletVersion"], info["containerRuntimeVersion"]))

    c.namespace(NS)
    out = os.path.join(n.d, "out")
    os.makedirs(out)
    script = ("set -e; mkdir -p /www; echo served-$(hostname) > /www/index.html; "
              "line=\"ran-in $(hostname) at $(ip -4 -o addr show eth0)\"; "
              "echo \"$line\" > /out/proof; echo \"$line\"; "
              "exec httpd -f -p 8080 -h /www")
    name = "bb"
    c.admin.create("/api/v1/namespaces/%s/pods" % NS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 5,
                 "containers": [{
                     "name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                     "command": ["/bin/sh", "-c", script],
                     "volumeMounts": [{"name": "out", "mountPath": "/out"}]}],
                 "volumes": [{"name": "out", "hostPath": {"path": out,
                                                          "type": "Directory"}}]}})
    path = "/api/v1/namespaces/%s/pods/%s" % (NS, name)

    o = wait_pod_running(c, path, n.alive)
    ip = o["status"].get("podIP", "")
    if not ip.startswith("10.250.%d." % n.subnet):
        fail("pod %s IP %r, not from the bridge's subnet 10.250.%d.0/24" %
             (name, ip, n.subnet))
    cid = o["status"]["containerStatuses"][0]["containerID"]
    if not cid.startswith("containerd://"):
        fail("pod %s container %r" % (name, cid))
    cid = cid[len("containerd://"):]
    runs = {x["id"]: x for x in n.runc_list()}
    if cid not in runs or runs[cid]["status"] != "running":
        fail("runc (root %s) does not list container %s running: %s" % (
            n.runc_root, cid, sorted((k, v["status"]) for k, v in runs.items())))
    # kubelet's pod cgroup (cgroupfs driver, BestEffort QoS) under the
    # test's cgroupRoot, as runc placed the process.
    with open("/proc/%d/cgroup" % runs[cid]["pid"]) as f:
        cg = dict(ln.split(":", 2)[1:] for ln in f.read().split("\n") if ln)
    want = "%s/kubepods/besteffort/pod%s/%s" % (n.cgroup, o["metadata"]["uid"], cid)
    if cg.get("memory") != want or cg.get("pids") != want:
        fail("container %s (pid %d) in cgroups %s, not %s" % (
            cid[:12], runs[cid]["pid"], cg, want))
    log("pod %s Running at %s; runc lists its container %s (pid %d, bundle %s), "
        "in memory and pids cgroup %s" % (name, ip, cid[:12], runs[cid]["pid"],
                                          runs[cid]["bundle"], want))

    proof = os.path.join(out, "proof")
    line = wait_for("the container's line in %s" % proof,
                    lambda: open(proof).read().strip(), 30)
    if not line.startswith("ran-in %s at " % name) or (" %s/24 " % ip) not in line + " ":
        fail("the container wrote %r (pod %s at %s)" % (line, name, ip))
    # Its stdout, as containerd wrote it where kubelet asked (CRI log
    # format: time, stream, P/F tag, text), what `kubectl logs` would serve.
    clog = os.path.join(n.d, "pod-logs", "%s_%s_%s" % (NS, name, o["metadata"]["uid"]),
                        "main", "0.log")
    logs = wait_for("the container's log %s" % clog, lambda: open(clog).read(), 30)
    got = [ln.split(" ", 3) for ln in logs.splitlines()]
    if [g[1:] for g in got] != [["stdout", "F", line]]:
        fail("the container's log %s: %r, it wrote %r" % (clog, logs, line))
    log("the container wrote %r to its hostPath and to stdout (%s)" % (line, clog))

    def fetch():
        with urllib.request.urlopen("http://%s:8080/index.html" % ip, timeout=2) as r:
            return r.read().decode().strip()
    body = wait_for("busybox httpd at %s:8080 through bridge %s" % (ip, n.bridge),
                    fetch, 30)
    if body != "served-" + name:
        fail("http://%s:8080/ served %r" % (ip, body))
    log("http://%s:8080/ through bridge %s: %r" % (ip, n.bridge, body))

    delete_through_kubelet(c, path, n.alive, 5)
    left = [x for x in n.runc_list() if x["id"] == cid]
    if left:
        fail("runc still lists %s after the pod's deletion: %s" % (cid, left))
    ipam = os.path.join(n.d, "cni-ipam", "gpufrac-e2e")
    wait_for("host-local to release %s" % ip, lambda: not os.path.exists(
        os.path.join(ipam, ip)), 30)
    log("pod %s deleted: runc's container gone, %s released by host-local" % (name, ip))
    c.check_alive()
    n.alive()


def bench_start(c, n, count):
    """--bench N (not run by CTest): create -> Running latency of N pods with
    no GPU and N share pods (gpufrac.io/gpu 1, 1Gi, compute 5) on this node,
    alternating, one at a time (each deleted, and gone, before the next);
    prints p50 and p99 of each (docs/benchmarks.md)."""
    times = {"plain": [], "share": []}
    for i in range(count):
        for kind in ("plain", "share"):
            name = "%s-%d" % (kind, i)
            obj = pod(name, 1, "1Gi", 5, ns=NS) if kind == "share" else \
                pod(name, ns=NS)
            ctr = obj["spec"]["containers"][0]
            ctr.update({"image": BUSYBOX, "imagePullPolicy": "Never",
                        "command": ["/bin/sleep", "3600"]})
            path = "/api/v1/namespaces/%s/pods/%s" % (NS, name)
            t0 = time.monotonic()
            c.admin.create("/api/v1/namespaces/%s/pods" % NS, obj)
            wait_for("%s Running" % name, lambda: c.admin.get(path)["status"].get(
                "phase") == "Running", 60, interval=0.02)
            times[kind].append(time.monotonic() - t0)
            c.admin.delete(path, gracePeriodSeconds=0)
            wait_for("%s gone" % name, lambda: pod_gone(c, path), 60)
    for kind, ts in times.items():
        ts.sort()
        p = lambda q: ts[min(len(ts) - 1, int(q * len(ts)))]  # noqa: E731
        print("pod start (create -> Running), %s: n=%d p50 %.3f s p99 %.3f s "
              "min %.3f s max %.3f s" % (kind, len(ts), p(0.5), p(0.99), ts[0],
                                         ts[-1]), flush=True)


def layout_archive(layout, path):
    """A tar of an OCI image layout directory (what ctr images import reads)."""
    with tarfile.open(path, "w") as t:
        for f in sorted(os.listdir(layout)):
            t.add(os.path.join(layout, f), arcname=f)
    return path


def import_node_image(c, n, interposer):
    """gpufrac's node image (scripts/build-images, packing interposer)
    imported into containerd under deploy/node-agent.yaml's name; the name."""
    out = os.path.join(n.d, "gpufrac-images")
    # This node's own architecture only: no cross build needed here.
    r = subprocess.run([os.path.join(REPO, "scripts", "build-images"), "--only",
                        "gpufrac-node", "--arch", subprocess.run(
                            ["dpkg", "--print-architecture"], capture_output=True,
                            text=True).stdout.strip(), "--gpufrac", c.gpufrac,
                        "--interposer", interposer, "--out", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("scripts/build-images --only gpufrac-node: %s" % (r.stderr or r.stdout))
    image = None
    with open(os.path.join(REPO, "deploy", "node-agent.yaml")) as f:
        for ln in f:
            if ln.strip().startswith("image: ") and "gpufrac-node" in ln:
                image = ln.split()[1]
    if not image:
        fail("deploy/node-agent.yaml names no gpufrac-node image")
    repo, tag = image.rsplit(":", 1)
    arch = layout_archive(os.path.join(out, "gpufrac-node"),
                          os.path.join(n.d, "gpufrac-node.tar"))
    n.ctr("images", "import", "--base-name", repo, arch)
    if image not in n.ctr("images", "list", "-q").stdout.split():
        fail("ctr images import did not make %s" % image)
    log("%s (scripts/build-images) imported into containerd" % image)
    return image


def install_interposer(n, interposer):
    """The interposer and its preload file where the agent's answers mount
    them from: inside the namespace (its /var/lib is a tmpfs)."""
    n.ns(["sh", "-c", "mkdir -p %s && cp %s %s && echo %s > %s" % (
        os.path.dirname(SHIM), shlex.quote(interposer), SHIM, SHIM, PRELOAD)])


def run_agent(c, n, interposer):
    """gpufrac's node image (scripts/build-images) imported into containerd,
    the agent run from it by kubelet as a real container (hostNetwork, the
    DaemonSet's hostPath mounts, its ConfigMap) registering its device
    plugin on the real kubelet's socket."""
    image = import_node_image(c, n, interposer)

    for f in ("namespace.yaml", "node-agent.yaml"):
        c.kubectl("apply", "-f", os.path.join(REPO, "deploy", f))
    # The DaemonSet selects gpufrac.io/enabled=true, which this Node lacks:
    # the test runs one agent pod of its own (below) instead.
    c.kubectl("-n", AGENT_NS, "create", "configmap", "gpufrac-node-config",
              "--from-literal=node.conf=slots = %d\nshim_lib = %s\npreload = %s\n"
              "driver_cdi = nvidia.com/gpu\n" % (SLOTS, SHIM, PRELOAD))
    install_interposer(n, interposer)
    wait_for("ServiceAccount gpufrac-node", lambda: c.admin.get(
        "/api/v1/namespaces/%s/serviceaccounts/gpufrac-node" % AGENT_NS), 30)
    port = c.server.rsplit(":", 1)[1]
    mounts = [("cdi", "/var/run/cdi", "DirectoryOrCreate"),
              ("state", "/run/gpufrac", "DirectoryOrCreate"),
              ("device-plugins", "/var/lib/kubelet/device-plugins", "Directory")]
    name = "agent"
    n.metrics_port = free_port()
    c.admin.create("/api/v1/namespaces/%s/pods" % AGENT_NS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "nodeName": NODE, "serviceAccountName": "gpufrac-node",
            # No kube-proxy here: the kubernetes Service's ClusterIP leads
            # nowhere, so the agent shares the host's network and is told
            # kube-apiserver's loopback address.
            "hostNetwork": True, "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "agent", "image": image, "imagePullPolicy": "Never",
                "command": ["gpufrac", "node", "--fake-gpus", SPEC,
                            "--config", "/etc/gpufrac/node.conf",
                            "--listen", "127.0.0.1:%d" % n.metrics_port],
                "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                        {"name": "KUBERNETES_SERVICE_PORT", "value": port},
                        {"name": "NODE_NAME",
                         "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": v, "mountPath": p} for v, p, _ in mounts] +
                [{"name": "config", "mountPath": "/etc/gpufrac", "readOnly": True}]}],
            "volumes": [{"name": v, "hostPath": {"path": p, "type": t}}
                        for v, p, t in mounts] +
            [{"name": "config", "configMap": {"name": "gpufrac-node-config"}}]}})
    path = "/api/v1/namespaces/%s/pods/%s" % (AGENT_NS, name)
    want = str(NGPUS * SLOTS)

    def capacity():
        n.alive()
        st = node_obj(c, NODE)["status"]
        return st.get("capacity", {}).get(RESOURCE) == want and \
            st.get("allocatable", {}).get(RESOURCE) == want
    try:
        wait_for("kubelet reporting %s = %s from the agent's device plugin" %
                 (RESOURCE, want), capacity, 90)
    except Failure:
        o = c.admin.get(path)
        fail("pod %s: phase %s, container statuses %s; Node capacity %s" % (
            name, o["status"].get("phase"), o["status"].get("containerStatuses"),
            node_obj(c, NODE)["status"].get("capacity")))
    o = c.admin.get(path)
    cid = o["status"]["containerStatuses"][0]["containerID"][len("containerd://"):]
    runs = {x["id"]: x for x in n.runc_list()}
    if runs.get(cid, {}).get("status") != "running":
        fail("runc does not list the agent's container %s running" % cid[:12])
    # Its inventory on the Node, written through the in-cluster config
    # (the ServiceAccount token kubelet projected into the container).
    E2E(c).wait_inventory(NODE, NGPUS)
    # The agent's socket next to kubelet's, in the directory both share.
    socks = sorted(os.listdir(os.path.join(n.kroot, "device-plugins")))
    if "kubelet.sock" not in socks or not [x for x in socks if x.startswith("gpufrac")]:
        fail("device-plugins holds %s" % socks)
    with open("/proc/%d/status" % runs[cid]["pid"]) as f:
        rss = [ln.split(":")[1].strip() for ln in f if ln.startswith("VmRSS:")]
    log("agent pod %s (image %s) run by runc (pid %d, VmRSS %s): %s = %s on Node "
        "%s; device-plugins holds %s" % (name, image, runs[cid]["pid"], rss[0],
                                         RESOURCE, want, NODE, socks))
    run_share(c, n, interposer)
    c.check_alive()
    n.alive()


def run_share(c, n, interposer):
    """A share pod bound by kube-scheduler through gpufrac's extender,
    admitted by the real kubelet, which calls the containerised agent's
    Allocate; containerd and runc create its container with that answer."""
    c.kubectl("apply", "-f", os.path.join(REPO, "deploy", "scheduler-rbac.yaml"))
    kc = c.sa_kubeconfig("extender", c.token("gpufrac-scheduler"))
    ext = n.ext = Extender(c, "extender", c.ext_port, kc).start()
    ext.ready_leader()
    wait_for("the extender holding Node %s" % NODE,
             lambda: ext.metric("gpufrac_extender_nodes") == 1, 30)
    name = "share"
    obj = pod(name, 1, "20Gi", 30, ns=NS)
    ctr = obj["spec"]["containers"][0]
    ctr.update({"image": BUSYBOX, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c",
                            "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; "
                            "cat $GPUFRAC_CONFIG; ls /dev; exec sleep 3600"]})
    c.admin.create("/api/v1/namespaces/%s/pods" % NS, obj)
    path = "/api/v1/namespaces/%s/pods/%s" % (NS, name)

    o = wait_pod_running(c, path, n.alive, 90, and_ready=False)
    grant = json.loads(o["metadata"]["annotations"][GRANT])
    uuids = [g["uuid"] for g in grant["containers"][0]["gpus"]]
    clog = os.path.join(n.d, "pod-logs", "%s_%s_%s" % (NS, name, o["metadata"]["uid"]),
                        "main", "0.log")

    def lines():
        with open(clog) as f:
            got = [ln.split(" ", 3)[3] for ln in f.read().splitlines()]
        return got if "sleep" not in got and any(x == "nvidia-uvm" for x in got) \
            else None
    got = wait_for("the share container's output in %s" % clog, lines, 30)
    index = {g["uuid"]: g["index"] for g in E2E(c).inventory(NODE)["gpus"]}
    # The env, the shim config kubelet mounted from the agent's state dir,
    # and the device nodes in the container's /dev (--fake-gpus: a GPU's
    # minor number is its index).
    want = ["CUDA_VISIBLE_DEVICES=" + ",".join(uuids),
            "memory.%s = %d" % (uuids[0], 20 << 30), "compute = 30",
            "nvidiactl", "nvidia-uvm", "nvidia%d" % index[uuids[0]]]
    miss = [w for w in want if w not in got]
    if miss:
        fail("the share container printed %s, lacking %s" % (got, miss))
    log("share pod %s Running on %s, granted %s; in its container (runc): %s" % (
        name, o["spec"]["nodeName"], uuids, want))


# ---- the GPU side: the driver as NVIDIA's container toolkit brings it ----
MULTIARCH = "/usr/lib/x86_64-linux-gnu"
DRIVER_DIR = "/var/lib/gpufrac-e2e/driver"  # the "host's" driver files
PROBE = "gpufrac.test/probe:1"
DRIVER_VERSION = "550.54.15"
CONTEXT_OVERHEAD = 300 << 20  # the interposer's default context_overhead
GiB = 1 << 30


def ldd(path):
    """The shared libraries path loads, as ldd resolves them here."""
    r = subprocess.run(["ldd", path], capture_output=True, text=True)
    if r.returncode != 0:
        fail("ldd %s: %s" % (path, r.stderr.strip()))
    out = []
    for ln in r.stdout.splitlines():
        f = ln.split()
        if len(f) >= 3 and f[1] == "=>" and f[2].startswith("/"):
            out.append(f[2])
        elif f and f[0].startswith("/"):
            out.append(f[0])
    return out


def probe_image(n, interposer, fake_cuda):
    """tests/e2e/node/probe.c, linked dynamically, in an OCI image with the
    glibc libraries it, the interposer and the driver load (a CUDA image's
    base), at their Debian multiarch paths, and /etc/ld.so.conf naming
    that directory; no libcuda, no NVML: the driver's CDI spec brings them."""
    img = os.path.join(n.d, "images")
    probe = os.path.join(img, "probe")
    r = subprocess.run([n.cc, "-std=c11", "-O2", "-Wall", "-Werror", "-o", probe,
                        os.path.join(HERE, "node", "probe.c"), "-ldl"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("compiling tests/e2e/node/probe.c: %s" % r.stderr)
    libs = set()
    for elf in (probe, interposer, fake_cuda):
        libs.update(os.path.realpath(x) for x in ldd(elf))
    libs = sorted(x for x in libs if "libcuda" not in x)
    files = [(d, None, 0o755, None) for d in
             ("usr", "usr/bin", "usr/lib", MULTIARCH.lstrip("/"), "usr/lib64",
              "etc", "run")]
    files += [("lib", None, 0o777, "usr/lib"), ("lib64", None, 0o777, "usr/lib64"),
              ("tmp", None, 0o1777, None)]
    interp = None
    for lib in libs:
        if os.path.dirname(lib) != MULTIARCH:
            fail("%s is not in %s: the probe image keeps one library directory"
                 % (lib, MULTIARCH))
        files.append((lib.lstrip("/"), lib, 0o755, None))
        if os.path.basename(lib).startswith("ld-linux"):
            interp = os.path.basename(lib)
    if not interp:
        fail("ldd names no ld-linux for %s" % probe)
    files.append(("usr/lib64/" + interp, None, 0o777, MULTIARCH + "/" + interp))
    conf = os.path.join(img, "ld.so.conf")
    with open(conf, "w") as f:
        f.write(MULTIARCH + "\n")
    files += [("etc/ld.so.conf", conf, 0o644, None),
              ("usr/bin/probe", probe, 0o755, None)]
    arch = oci_archive(os.path.join(img, "probe.tar"), "1", files,
                       ["/usr/bin/probe"])
    n.ctr("images", "import", "--base-name", PROBE.rsplit(":", 1)[0], arch)
    if PROBE not in n.ctr("images", "list", "-q").stdout.split():
        fail("ctr images import did not make %s" % PROBE)
    log("image %s (tests/e2e/node/probe.c and %d glibc libraries: %s) imported"
        % (PROBE, len(libs), ", ".join(os.path.basename(x) for x in libs)))


def driver_cdi(c, n, fake_cuda, fake_nvml):
    """The driver on this node as NVIDIA's toolkit presents it to a CDI
    runtime (what `nvidia-ctk cdi generate` writes): kind nvidia.com/gpu,
    a device per GPU named by index and by UUID plus "all", each with its
    /dev/nvidia<minor>; common edits: the control and UVM device nodes,
    libcuda.so.<driver> and libnvidia-ml.so.<driver> bind-mounted read-only
    into the multiarch directory, NVIDIA_VISIBLE_DEVICES=void, and a
    createContainer hook updating the loader cache (tests/e2e/node/
    cdi_hook.py for nvidia-cdi-hook update-ldcache).  The fake driver's
    own knobs (its GPUs' UUIDs and memory, FAKE_CUDA_*) are its "hardware",
    set as env by the same spec.  Written where containerd reads specs."""
    # The GPUs as the agent's --fake-gpus SPEC will find them.
    r = subprocess.run([c.gpufrac, "node", "--fake-gpus", SPEC, "--once", "--print",
                        "inventory"], capture_output=True, text=True)
    if r.returncode != 0:
        fail("gpufrac node --fake-gpus %s --once --print inventory: %s" % (
            SPEC, r.stderr.strip()))
    inv = json.loads(r.stdout)
    ver = DRIVER_VERSION  # the stand-in's (--fake-gpus says "fake")
    gpus = sorted(inv["gpus"], key=lambda g: g["index"])
    n.ns(["mkdir", "-p", DRIVER_DIR])
    mounts = []
    for src, name in ((fake_cuda, "libcuda.so"), (fake_nvml, "libnvidia-ml.so")):
        host = "%s/%s.%s" % (DRIVER_DIR, name, ver)
        n.ns(["cp", src, host])
        mounts.append({"hostPath": host, "containerPath": "%s/%s.%s" % (
            MULTIARCH, name, ver), "options": ["ro", "nosuid", "nodev", "bind"]})
    devices = []
    for g in gpus:
        node = {"deviceNodes": [{"path": "/dev/nvidia%d" % g["index"]}]}
        devices += [{"name": str(g["index"]), "containerEdits": node},
                    {"name": g["uuid"], "containerEdits": node}]
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [
        {"path": "/dev/nvidia%d" % g["index"]} for g in gpus]}})
    spec = {
        "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices,
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void",
                    "FAKE_CUDA_DEVICES=%d" % len(gpus),
                    "FAKE_CUDA_UUIDS=" + ",".join(g["uuid"] for g in gpus),
                    "FAKE_CUDA_TOTAL=%d" % gpus[0]["memory"]],
            "deviceNodes": [{"path": "/dev/" + d} for d in
                            ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")],
            "mounts": mounts,
            "hooks": [{"hookName": "createContainer", "path": sys.executable,
                       "args": ["python3", os.path.join(HERE, "node", "cdi_hook.py"),
                                "update-ldcache", "--folder", MULTIARCH]}]}}
    path = os.path.join(n.d, "cdi", "nvidia.json")
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    log("driver CDI spec %s: kind nvidia.com/gpu, devices %s, libcuda.so.%s and "
        "libnvidia-ml.so.%s" % (path, [d["name"] for d in devices], ver, ver))
    return gpus


def probe_pod(c, n, name, gpu=None, mem=None, compute=None):
    obj = pod(name, gpu, mem, compute, ns=NS)
    obj["spec"]["terminationGracePeriodSeconds"] = 2
    obj["spec"]["containers"][0].update({"image": PROBE, "imagePullPolicy": "Never"})
    c.admin.create("/api/v1/namespaces/%s/pods" % NS, obj)
    return "/api/v1/namespaces/%s/pods/%s" % (NS, name)


def probe_kv(c, n, path, restart=0, timeout=90):
    """The probe's lines (of its container's run number restart) once it
    holds its memory (or failed), waiting at most timeout (+ 30) s: its
    pod, {key: value} and the lines."""
    o = wait_pod_running(c, path, n.alive, timeout, and_ready=False)
    name = o["metadata"]["name"]
    clog = os.path.join(n.d, "pod-logs", "%s_%s_%s" % (NS, name, o["metadata"]["uid"]),
                        "main", "%d.log" % restart)

    def lines():
        try:
            with open(clog) as f:
                got = [ln.split(" ", 3)[3] for ln in f.read().splitlines()]
        except OSError:
            return None
        done = any(x.startswith(("probe after", "probe error")) for x in got)
        return got if done else None
    got = wait_for("probe %s's output in %s" % (name, clog), lines,
                   30 + (timeout - 90 if timeout > 90 else 0))
    kv = {}
    for ln in got:
        if ln.startswith("probe error"):
            fail("probe %s: %s (all it printed: %s)" % (name, ln, got))
        f = ln.split()
        for x in f[2:] if f[1] in ("before", "after") else f[1:]:
            k, v = x.split("=", 1)
            kv[(f[1] + "." + k) if f[1] in ("before", "after") else k] = v
    return o, kv, got


def probe_result(c, n, path):
    """The probe's lines once it holds its memory (or failed), with its
    pod and grant."""
    o, kv, got = probe_kv(c, n, path)
    grant = json.loads(o["metadata"]["annotations"][GRANT])
    return o, grant["containers"][0]["gpus"], kv, got


def run_gpu(c, n, interposer, gpus):
    """The probe in share, whole-GPU and memory-only pods: the driver's CDI
    devices applied by containerd, the interposer mounted by the agent's
    Allocate answer and preloaded by the container's loader, each process
    seeing its own share and refused at exactly it."""
    whole = gpus[0]["memory"]
    # A limited container's context is charged the interposer's
    # context_overhead (docs/shim.md; 300 MiB by default) against its
    # limit: what it may allocate is the rest.  A whole GPU has no limit:
    # the (fake) driver's own count, which charges contexts nothing.
    ctx = CONTEXT_OVERHEAD
    cases = [("p4g", dict(mem="4Gi", compute=30), 4 * GiB, ctx),
             ("p2g", dict(mem="2Gi", compute=10), 2 * GiB, ctx),
             ("whole", dict(gpu=1), whole, 0),
             ("memonly", dict(mem="3Gi"), 3 * GiB, ctx)]
    seen = {}
    for name, kw, limit, charged in cases:
        path = probe_pod(c, n, name, **kw)
        o, granted, kv, got = probe_result(c, n, path)
        uuid = granted[0]["uuid"]
        want = {"devices": "1", "uuid": uuid,
                "before.free": str(limit - charged), "before.total": str(limit),
                "allocated": str(limit - charged), "refused": "2",
                "after.free": "0", "after.total": str(limit)}
        bad = {k: (kv.get(k), v) for k, v in want.items() if kv.get(k) != v}
        if bad:
            fail("probe %s (%s, granted %s): got/want %s; it printed %s" % (
                name, kw, granted, bad, got))
        # What the interposer wrote in the pod's region, as the agent reads
        # it back (its metrics): what it allocated and its context's charge
        # (counted on a whole GPU too, where nothing limits it).
        used = 'gpufrac_container_memory_used_bytes{pod_uid="%s"' % o["metadata"]["uid"]
        held = limit - charged + ctx

        def usage():
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" %
                                        n.metrics_port, timeout=5) as r:
                v = [ln.rsplit(" ", 1)[1] for ln in r.read().decode().splitlines()
                     if ln.startswith(used)]
            return v if v == [str(held)] else None
        try:
            wait_for("the agent's %s... = %d" % (used, held), usage, 15)
        except Failure:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" %
                                        n.metrics_port, timeout=5) as r:
                fail("the agent's metrics: %s" % [
                    ln for ln in r.read().decode().splitlines()
                    if "container_memory" in ln])
        seen[name] = uuid
        log("probe %s (%s) on %s: cuMemGetInfo %s of %s, allocated %s, then "
            "CUDA_ERROR_OUT_OF_MEMORY" % (name, kw, uuid, kv["before.free"],
                                           kv["before.total"], kv["allocated"]))
    if seen["p4g"] != seen["p2g"]:
        fail("the 4Gi and 2Gi shares landed on %s and %s, not one GPU" % (
            seen["p4g"], seen["p2g"]))
    if seen["whole"] == seen["p4g"]:
        fail("the whole GPU %s holds the shares too" % seen["whole"])


def metrics(n):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % n.metrics_port,
                                timeout=5) as r:
        return r.read().decode()


def container_series(text):
    """The agent's per-container memory series, {(name, pod): value}."""
    out = {}
    for ln in text.splitlines():
        for name in ("gpufrac_container_memory_limit_bytes",
                     "gpufrac_container_memory_used_bytes"):
            if ln.startswith(name + "{"):
                pod = ln.split(',pod="', 1)[1].split('"', 1)[0]
                out[(name, pod)] = int(ln.rsplit(" ", 1)[1])
    return out


def running_pids(c, n, names):
    """The runc pid of each pod's container (fails unless running)."""
    runs = {x["id"]: x for x in n.runc_list()}
    out = {}
    for name in names:
        o = c.admin.get("/api/v1/namespaces/%s/pods/%s" % (NS, name))
        cid = o["status"]["containerStatuses"][0]["containerID"][len("containerd://"):]
        if runs.get(cid, {}).get("status") != "running":
            fail("pod %s's container %s is not running: %s" % (
                name, cid[:12], runs.get(cid)))
        out[name] = runs[cid]["pid"]
    return out


def run_faults(c, n):
    """The agent's container killed (kubelet restarts it), then containerd
    restarted: the running probes keep their processes and the agent's
    books (limits and usage, as before); after each, a new share pod is
    admitted (the plugin registered again, Allocate answered) and held to
    its share; at the end every probe deleted leaves no per-container
    files, CDI spec or series behind."""
    probes = ["p4g", "p2g", "whole", "memonly"]
    before = container_series(metrics(n))
    pids = running_pids(c, n, probes)
    apath = "/api/v1/namespaces/%s/pods/agent" % AGENT_NS

    def agent_cid():
        st = c.admin.get(apath)["status"].get("containerStatuses") or [{}]
        return st[0].get("containerID", ""), st[0].get("restartCount", 0)
    old, _ = agent_cid()
    runs = {x["id"]: x for x in n.runc_list()}
    os.kill(runs[old[len("containerd://"):]]["pid"], signal.SIGKILL)
    t0 = time.monotonic()

    def restarted():
        n.alive()
        cid, count = agent_cid()
        if cid == old or count < 1:
            return None
        try:
            return container_series(metrics(n)) == before
        except OSError:
            return None
    wait_for("kubelet to restart the agent's container, its metrics as before",
             restarted, 90)
    log("agent container SIGKILLed: kubelet restarted it (%.1f s); the probes' "
        "limits and usage on its metrics unchanged" % (time.monotonic() - t0))
    if running_pids(c, n, probes) != pids:
        fail("the probes' processes changed across the agent's restart")
    admit(c, n, "after-agent", 1 * GiB)

    # containerd stopped and started again: the shims keep the containers.
    mid = container_series(metrics(n))
    n.procs.remove(n.containerd)
    n.containerd.stop(15)
    t0 = time.monotonic()
    n.start_containerd()
    wait_node_ready(c, NODE, n.alive, 60)
    log("containerd restarted (%.1f s to answering); Node %s Ready" % (
        time.monotonic() - t0, NODE))
    if running_pids(c, n, probes) != pids:
        fail("the probes' processes changed across containerd's restart")
    if container_series(metrics(n)) != mid:
        fail("the agent's books changed across containerd's restart: %s, "
             "before %s" % (container_series(metrics(n)), mid))
    admit(c, n, "after-containerd", 1 * GiB)

    # kubelet stopped and started: the agent registers again (a pod created
    # before that would be refused admission, as on any node), the probes
    # and the books stay.
    o = c.admin.get(apath)
    alog = os.path.join(n.d, "pod-logs", "%s_agent_%s" % (AGENT_NS, o["metadata"]["uid"]),
                        "agent", "%d.log" % o["status"]["containerStatuses"][0][
                            "restartCount"])

    def registrations():
        with open(alog) as f:
            return sum("registered gpufrac.io/gpu with kubelet" in ln for ln in f)
    regs = registrations()
    mid = container_series(metrics(n))
    n.procs.remove(n.kubelet)
    n.kubelet.stop(15)
    t0 = time.monotonic()
    n.start_kubelet()
    wait_for("the agent to register with the restarted kubelet (%s)" % alog,
             lambda: n.alive() and registrations() > regs, 60)
    log("kubelet restarted: the agent registered again %.1f s later" % (
        time.monotonic() - t0))
    if running_pids(c, n, probes) != pids:
        fail("the probes' processes changed across kubelet's restart")
    if container_series(metrics(n)) != mid:
        fail("the agent's books changed across kubelet's restart: %s, before %s"
             % (container_series(metrics(n)), mid))
    admit(c, n, "after-kubelet", 1 * GiB)
    run_power_cycle(c, n, probes + ["after-agent", "after-containerd",
                                    "after-kubelet"])

    # Leaks: every GPU pod deleted, nothing of theirs left.
    gone = probes + ["after-agent", "after-containerd", "after-kubelet",
                     "after-node", "share"]
    have = n.ns(["ls", "-A", "/run/gpufrac/pods"]).stdout.split()
    uids = [c.admin.get("/api/v1/namespaces/%s/pods/%s" % (NS, x))["metadata"]["uid"]
            for x in gone]
    if sorted(have) != sorted(uids):
        fail("the agent's /run/gpufrac/pods holds %s, the GPU pods are %s" % (
            have, uids))
    for name in gone:
        c.admin.delete("/api/v1/namespaces/%s/pods/%s" % (NS, name),
                       gracePeriodSeconds=1)
    for name in gone:
        wait_for("pod %s gone" % name, lambda: n.alive() and pod_gone(
            c, "/api/v1/namespaces/%s/pods/%s" % (NS, name)), 90)

    def clean():
        left = n.ns(["sh", "-c", "ls -A /run/gpufrac/pods /var/run/cdi"],
                    check=False).stdout.split()
        left = [x for x in left if not x.endswith(":") and x != "gpufrac.io-gpu.json"]
        series = [k for k in container_series(metrics(n))]
        return (left, series) if not left and not series else None
    try:
        wait_for("the agent to remove the deleted pods' files and series", clean, 30)
    except Failure:
        fail("left after the GPU pods' deletion: %s; series %s" % (
            n.ns(["sh", "-c", "ls -AR /run/gpufrac/pods /var/run/cdi"],
                 check=False).stdout, list(container_series(metrics(n)))))
    granted = [ln for ln in metrics(n).splitlines()
               if ln.startswith("gpufrac_gpu_memory_granted_bytes{")]
    if not granted or any(not ln.endswith(" 0") for ln in granted):
        fail("GPU memory still granted after every pod left: %s" % granted)
    log("%d GPU pods deleted: no per-container files, CDI specs or series "
        "left, no GPU memory granted" % len(gone))


def granted_lines(n):
    return sorted(ln for ln in metrics(n).splitlines()
                  if ln.startswith("gpufrac_gpu_memory_granted_bytes{"))


def recreate(c, o):
    """What a controller does for a pod that failed: the same pod made
    again (name, labels, its container's image, command and resources)."""
    ctr = {k: v for k, v in o["spec"]["containers"][0].items()
           if k in ("name", "image", "imagePullPolicy", "command", "resources")}
    path = "/api/v1/namespaces/%s/pods/%s" % (NS, o["metadata"]["name"])
    c.admin.delete(path, gracePeriodSeconds=0)
    wait_for("failed pod %s gone" % o["metadata"]["name"],
             lambda: pod_gone(c, path), 60)
    c.admin.create("/api/v1/namespaces/%s/pods" % NS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": o["metadata"]["name"],
                     "labels": o["metadata"].get("labels", {})},
        "spec": {"containers": [ctr], "terminationGracePeriodSeconds":
                 o["spec"].get("terminationGracePeriodSeconds", 2)}})
    return path


def run_power_cycle(c, n, probes):
    """The whole node stopped and started with every GPU pod running.
    kubelet admits the node's pods again before the agent (a pod of the
    same node) has registered its device plugin: kubelet v1.37.2 fails each
    GPU pod (UnexpectedAdmissionError, "Allocate failed due to no healthy
    devices present"); a pod it admits is run again and must print what it
    printed before.  A failed pod must leave nothing: no per-pod state,
    series or granted memory at the agent, no pod in the extender's model.
    Then each failed pod is made again (as its controller would) and is
    admitted and held to the same share."""
    names = probes + ["share"]
    pods = {x: c.admin.get("/api/v1/namespaces/%s/pods/%s" % (NS, x))
            for x in names}
    before = {}
    for x in probes:
        path = "/api/v1/namespaces/%s/pods/%s" % (NS, x)
        rc = pods[x]["status"]["containerStatuses"][0]["restartCount"]
        before[x] = (rc, probe_kv(c, n, path, rc)[1])
    series = container_series(metrics(n))
    ext_pods = n.ext.metric("gpufrac_extender_pods")
    took = n.power_cycle(c)
    log("node started again: kubelet's first Ready heartbeat %.1f s after "
        "the stop" % took)
    t0 = time.monotonic()

    def settled():
        n.alive()
        out = {}
        for x in names:
            o = c.admin.get("/api/v1/namespaces/%s/pods/%s" % (NS, x))
            st = o["status"]
            cs = (st.get("containerStatuses") or [{}])[0]
            if st.get("phase") == "Failed":
                out[x] = "failed: %s" % st.get("reason")
            elif st.get("phase") == "Running" and "running" in cs.get("state", {}) \
                    and cs.get("restartCount", 0) > pods[x]["status"][
                        "containerStatuses"][0]["restartCount"]:
                out[x] = "running"
            else:
                return None
        return out
    got = wait_for("every GPU pod run again or failed by kubelet", settled, 150)
    log("after the node's restart (%.1f s): %s" % (time.monotonic() - t0, got))
    failed = [x for x, v in got.items() if v != "running"]
    odd = [(x, v) for x, v in got.items()
           if v not in ("running", "failed: UnexpectedAdmissionError")]
    if odd:
        fail("after the node's restart: %s" % odd)
    for x in probes:
        if x in failed:
            continue
        rc, kv = before[x]
        _, now, lines = probe_kv(c, n, "/api/v1/namespaces/%s/pods/%s" % (NS, x),
                                 rc + 1)
        if now != kv:
            fail("probe %s after the node's restart printed %s; before it %s" % (
                x, lines, kv))
    # The failed pods' share is given back everywhere.
    keep = {pods[x]["metadata"]["uid"] for x in names if x not in failed}

    def released():
        n.alive()
        have = set(n.ns(["ls", "-A", "/run/gpufrac/pods"]).stdout.split())
        now = container_series(metrics(n))
        want = {k: v for k, v in series.items() if k[1] in keep}
        ext = n.ext.metric("gpufrac_extender_pods")
        ok = have == keep and now == want and ext == ext_pods - len(failed)
        return True if ok else None
    try:
        wait_for("the failed pods' state, series and extender entries gone",
                 released, 60)
    except Failure:
        fail("after %s failed: /run/gpufrac/pods %s (want %s), series %s, the "
             "extender's pods %s (want %s)" % (
                 failed, n.ns(["ls", "-A", "/run/gpufrac/pods"]).stdout.split(),
                 sorted(keep), list(container_series(metrics(n))),
                 n.ext.metric("gpufrac_extender_pods"), ext_pods - len(failed)))
    log("%d failed pods released: no per-pod state, series or extender entry "
        "left" % len(failed))
    # Made again, as their controllers would: admitted, the same shares.
    allocatable_back(c, n)
    for x in failed:
        path = recreate(c, pods[x])
        if x not in probes:
            wait_pod_running(c, path, n.alive, 90, and_ready=False)
            continue
        _, now, lines = probe_kv(c, n, path)
        kv = dict(before[x][1])
        now.pop("uuid", None)
        kv.pop("uuid", None)
        if now != kv:
            fail("probe %s made again printed %s; before the restart %s" % (
                x, lines, before[x][1]))
    try:
        wait_for("the extender's model back to %d pods" % ext_pods,
                 lambda: n.ext.metric("gpufrac_extender_pods") == ext_pods, 30)
    except Failure:
        fail("the extender's model holds %s pods, %s before the node's restart" % (
            n.ext.metric("gpufrac_extender_pods"), ext_pods))
    log("the %d failed pods made again: admitted, each probe held to the share "
        "it had, the extender's model back to %d pods (%.1f s after the node "
        "came back)" % (len(failed), ext_pods, time.monotonic() - t0))
    admit(c, n, "after-node", 1 * GiB)


def allocatable_back(c, n):
    """Waits for the Node's allocatable gpufrac.io/gpu to be the agent's
    again; the seconds it took."""
    want = str(NGPUS * SLOTS)
    t0 = time.monotonic()

    def allocatable():
        n.alive()
        return node_obj(c, NODE)["status"].get("allocatable", {}).get(
            RESOURCE) == want
    try:
        wait_for("Node %s's allocatable %s = %s again" % (NODE, RESOURCE, want),
                 allocatable, 60)
    except Failure:
        st = node_obj(c, NODE)["status"]
        fail("Node %s has capacity %s, allocatable %s" % (
            NODE, st.get("capacity", {}).get(RESOURCE),
            st.get("allocatable", {}).get(RESOURCE)))
    return time.monotonic() - t0


def admit(c, n, name, limit):
    """A new 1-GPU share of limit bytes, compute 5: admitted (Allocate
    answered by the agent as it runs now) and refused at exactly it."""
    # kube-scheduler places by the Node's allocatable, which kubelet posts
    # once the (re-)registered plugin's devices arrive: a pod created before
    # that is Unschedulable (Insufficient gpufrac.io/gpu) and was not tried
    # again within 90 s (two runs): kube-scheduler's NodeResourcesFit hint
    # never requeues a share on a Node event (docs/kube.md, "A share
    # created while the device plugin is away";
    # test_plugin_return.py), so wait for it as a user would.
    waited = allocatable_back(c, n)
    path = probe_pod(c, n, name, mem="%dGi" % (limit // GiB), compute=5)
    _, granted, kv, got = probe_result(c, n, path)
    want = str(limit - CONTEXT_OVERHEAD)
    if kv.get("allocated") != want or kv.get("before.total") != str(limit):
        fail("probe %s: allocated %s of %s, want %s of %d: %s" % (
            name, kv.get("allocated"), kv.get("before.total"), want, limit, got))
    log("new pod %s (created once the Node's allocatable was back, %.1f s) "
        "admitted on %s, refused at its %d bytes" % (name, waited,
                                                     granted[0]["uuid"], limit))


def main():
    argv = sys.argv[1:]
    bench = 0
    if "--bench" in argv:
        i = argv.index("--bench")
        bench = int(argv[i + 1])
        del argv[i:i + 2]
    args = [a for a in argv if a != "--keep"]
    if len(args) != 7:
        print(__doc__, file=sys.stderr)
        return 2
    k8s_bin, ctrd_bin, cni_bin, gpufrac, interposer, fake_cuda, fake_nvml = args
    interposer, fake_cuda, fake_nvml = (os.path.abspath(x) for x in (
        interposer, fake_cuda, fake_nvml))
    keep = "--keep" in sys.argv[1:]
    # CTest's timeout: stop the node (bridge, cgroups) on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    state = {}

    def body(c):
        n = state["n"] = Node(c, ctrd_bin, cni_bin)
        c.start()
        try:
            run(c, n)
            # The node's driver as its CDI runtime sees it, before the agent.
            gpus = driver_cdi(c, n, fake_cuda, fake_nvml)
            probe_image(n, interposer, fake_cuda)
            run_agent(c, n, interposer)
            run_gpu(c, n, interposer, gpus)
            run_faults(c, n)
            if bench:
                bench_start(c, n, bench)
        finally:
            n.stop()

    def tails(c):
        n = state.get("n")
        for p in (n.procs if n else []):
            log("%s log ends:\n%s" % (p.name, p.tail(25)))
    return run_once("e2e node", lambda: Cluster(k8s_bin, gpufrac, keep), body, tails)


if __name__ == "__main__":
    sys.exit(main())
