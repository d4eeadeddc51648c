#!/usr/bin/python3
"""End-to-end test of the real node agent (CTest test_agent_e2e, label node).

Three real pieces talk to each other:
  - tests/sched/apiserver_double.py, a stateful API-server TEST DOUBLE (not
    an API server) on 127.0.0.1, holding node n1 and the pods;
  - a fake kubelet (tests/node/fake_kubelet.py's Kubelet and Plugin: real
    gRPC from python3-grpcio) serving Registration on a temporary
    kubelet.sock and dialing the plugin's socket as kubelet does;
  - `gpufrac node --fake-gpus 2xA100-40GB --node-name n1 --kubeconfig KC
    --config CONF --listen 127.0.0.1:0`, with kubelet_dir, state_dir and
    cdi_dir in a temporary directory.

Scenarios, in order, each with exact values: registration; ListAndWatch's
2x4 slots; the inventory annotation; Allocate from a pod's grant (env,
mounts, device nodes, annotation, the files written); a refusal with no
waiting pod (status, sentence, time); a malformed grant named, others
unaffected; two Allocates at once; a deleted pod's files removed; kubelet
restart; agent restart (answered containers stay answered); CDI answers.
Xid health needs NVML and is tested by test_health.

    agent_e2e.py --gpufrac PATH --pb DIR                 # the scenarios
    agent_e2e.py --gpufrac PATH --pb DIR --bench N       # Allocate latency
    agent_e2e.py ... --bench-rss 64 --node-prep PATH     # RSS under scrapes

Exit status 0 only when every scenario passed.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "sched"))
import apiserver_double as ad  # noqa: E402
import fake_kubelet as fk  # noqa: E402
from fake_kubelet import check, eq, rpc_error  # noqa: E402

import grpc  # noqa: E402

GiB = 1 << 30
NODE = "n1"
NS = "e2e"
GPUS = "2xA100-40GB"
SLOTS = 4
WAIT_MS = 500  # alloc_wait_ms: how long Allocate waits for its pod
ENDPOINT = "gpufrac.sock"
FAKE_NVML_DIR = ""  # --fake-nvml-dir: the Xid scenario runs on the fake NVML


def fake_uuid(i):
    """gf_node_discover_fake's made-up uuids (src/node/discover.c)."""
    return "GPU-fa4e0000-0000-4000-8000-%012x" % i


def grant(gpu, mem, compute, ctr="main"):
    return json.dumps({"version": 1, "node": NODE, "containers": [
        {"name": ctr, "gpus": [{"uuid": fake_uuid(gpu), "index": gpu,
                                "memory": mem, "compute": compute}]}]},
        separators=(",", ":"))


def pod_obj(name, grant_text, node=NODE, ngpus=1):
    """A pod as it is once the extender has bound it: the grant annotation,
    spec.nodeName, PodScheduled, no container started yet."""
    res = {"gpufrac.io/gpu": str(ngpus)}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS,
                         "uid": "uid-%s-%s" % (NS, name),
                         "creationTimestamp": now,
                         "annotations": {ad.GRANT: grant_text}},
            "spec": {"nodeName": node, "containers": [
                {"name": "main", "image": "x",
                 "resources": {"requests": res, "limits": dict(res)}}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "True",
                 "lastTransitionTime": now}]}}


def wait_for(fn, timeout, what):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise fk.Failure("%s: not within %.1f s" % (what, timeout))
        time.sleep(0.02)


class Agent:
    """`gpufrac node` as a child process; its output goes to a log file."""

    def __init__(self, binary, work, kubeconfig, gpus=GPUS):
        self.binary, self.work, self.kc, self.gpus = binary, work, kubeconfig, \
            gpus
        self.p = None
        self.gen = 0
        self.port = None

    def start(self, conf, nvml_env=None):
        """nvml_env: run on the fake NVML (its environment) instead of
        --fake-gpus."""
        self.gen += 1
        self.log_path = os.path.join(self.work, "agent-%d.log" % self.gen)
        self.log = open(self.log_path, "w")
        gpus = [] if nvml_env else ["--fake-gpus", self.gpus]
        env = dict(os.environ, **nvml_env) if nvml_env else None
        # The API double serves no Node GET and no nodes/status: the share
        # capacity is tested by test_capacity and test_e2e_capacity.
        self.p = subprocess.Popen(
            [self.binary, "node"] + gpus + ["--node-name",
             NODE, "--kubeconfig", self.kc, "--config", conf, "--listen",
             "127.0.0.1:0", "--advertise-capacity=false"], stdout=self.log,
            stderr=subprocess.STDOUT, env=env)

        def port():
            if self.p.poll() is not None:
                raise fk.Failure("agent exited %d: %s" % (self.p.returncode,
                                                          self.text()))
            m = re.search(r"metrics on port (\d+)", self.text())
            return int(m.group(1)) if m else None
        self.port = wait_for(port, 15, "the agent serving")

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout=20)
        self.log.close()
        return rc

    def kill(self):
        if self.p and self.p.poll() is None:
            self.p.kill()
            self.p.wait()

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.port,
                                    timeout=10) as r:
            return r.read().decode()


class Setup:
    """The double with node n1, a kubelet, the agent's directories."""

    def __init__(self, binary, gpus=GPUS, quiet=False):
        self.dir = tempfile.mkdtemp(prefix="gfag")
        self.kdir = os.path.join(self.dir, "kubelet")
        os.mkdir(self.kdir)
        self.state = os.path.join(self.dir, "state")
        self.cdi = os.path.join(self.dir, "cdi")
        self.ksock = os.path.join(self.kdir, "kubelet.sock")
        self.psock = os.path.join(self.kdir, ENDPOINT)
        self.shim = os.path.join(self.dir, "lib", "libgpufrac-cuda.so")
        self.preload = os.path.join(self.dir, "lib", "ld.so.preload")
        self.double = ad.Double().start()
        # The node as kubelet registers it: no inventory until the agent.
        self.double.state.put("nodes", NODE, {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE, "uid": "uid-node-" + NODE},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}}})
        self.kc = os.path.join(self.dir, "kubeconfig.json")
        self.double.kubeconfig(self.kc)
        self.kubelet = fk.Kubelet(self.ksock)
        self.kubelet.start()
        self.agent = Agent(binary, self.dir, self.kc, gpus)
        self.plugin = None

    def conf(self, name="node.conf", **extra):
        path = os.path.join(self.dir, name)
        kv = {"state_dir": self.state, "cdi_dir": self.cdi,
              "kubelet_dir": self.kdir, "alloc_wait_ms": str(WAIT_MS),
              "shim_lib": self.shim, "preload": self.preload,
              "slots": str(SLOTS)}
        kv.update(extra)
        with open(path, "w") as f:
            for k, v in kv.items():
                f.write("%s = %s\n" % (k, v))
        return path

    def ctr_dir(self, name):
        return os.path.join(self.state, "pods", "uid-%s-%s" % (NS, name),
                            "main")

    def add(self, name, grant_text, node=NODE):
        return self.double.state.put("pods", ad.pod_key(NS, name),
                                     pod_obj(name, grant_text, node))

    def close(self):
        if self.plugin:
            self.plugin.close()
        self.agent.kill()
        if self.kubelet.server:
            self.kubelet.stop()
        self.double.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def alloc(plugin, ids):
    r = plugin.allocate([ids])
    eq(len(r.container_responses), 1, "container responses")
    return r.container_responses[0]


class Scenarios:
    def __init__(self, binary):
        self.binary = binary
        self.s = Setup(binary)
        self.ids = [["%s::%d" % (fake_uuid(g), k)] for g in range(2)
                    for k in range(SLOTS)]

    def expect_mounts_answer(self, c, name, gpu, mem, compute):
        """The `allocate = mounts` answer for pod `name`'s container main
        granted `mem` bytes and `compute` percent of fake GPU `gpu`."""
        s, uuid = self.s, fake_uuid(gpu)
        d = s.ctr_dir(name)
        eq(dict(c.envs), {"CUDA_VISIBLE_DEVICES": uuid,
                          "NVIDIA_VISIBLE_DEVICES": uuid,
                          "GPUFRAC_CONFIG": "/etc/gpufrac/shim.conf",
                          # the container's budget (docs/shim.md, "The budget")
                          "GPUFRAC_MEMORY_BUDGET": "%s=%d" % (uuid, mem),
                          "GPUFRAC_BUDGET_FILE": "/run/gpufrac/region.budget"},
           "envs of %s" % name)
        eq([(m.container_path, m.host_path, m.read_only) for m in c.mounts],
           [("/etc/gpufrac/shim.conf", os.path.join(d, "shim.conf"), True),
            ("/run/gpufrac", os.path.join(d, "region"), False),
            (s.shim, s.shim, True),
            ("/etc/ld.so.preload", s.preload, True)], "mounts of %s" % name)
        eq([(x.container_path, x.host_path, x.permissions)
            for x in c.devices],
           [("/dev/nvidiactl", "/dev/nvidiactl", "rw"),
            ("/dev/nvidia-uvm", "/dev/nvidia-uvm", "rw"),
            ("/dev/nvidia-uvm-tools", "/dev/nvidia-uvm-tools", "rw"),
            ("/dev/nvidia%d" % gpu, "/dev/nvidia%d" % gpu, "rw")],
           "device nodes of %s (its GPU only)" % name)
        eq(dict(c.annotations), {"gpufrac.io/allocated-for":
                                 "%s/%s/main" % (NS, name)},
           "annotations of %s" % name)
        eq([x.name for x in c.cdi_devices], [], "CDI devices of %s" % name)
        with open(os.path.join(d, "shim.conf")) as f:
            conf = f.read()
        want = ("# written by the gpufrac node agent for container main\n"
                "version = 1\nregion = /run/gpufrac/region\n"
                "memory.%s = %d\n" % (uuid, mem) +
                ("compute = %d\n" % compute if compute else "") +
                "log = warn\n")
        eq(conf, want, "shim.conf of %s" % name)
        with open(os.path.join(d, "grant.json")) as f:
            g = json.load(f)
        # namespace and name: the metrics' pod and namespace labels
        eq(g, {"version": 1, "pod": "uid-%s-%s" % (NS, name),
               "container": "main", "namespace": NS, "name": name,
               "gpus": [{"uuid": uuid, "index": gpu, "memory": mem,
                         "compute": compute}]}, "grant.json of %s" % name)
        st = os.stat(os.path.join(d, "region"))
        eq(oct(st.st_mode & 0o7777), oct(0o1777), "region dir mode")

    # -- the scenarios --------------------------------------------------

    def registers(self):
        s = self.s
        # A pod on another node first: the agent's watch must not see it.
        s.add("elsewhere", grant(0, GiB, 0), node="n2")
        s.agent.start(s.conf())
        check(s.kubelet.wait_registers(1, 5.0), "no Register within 5 s")
        _, req = s.kubelet.registers[0]
        eq((req.version, req.endpoint, req.resource_name),
           ("v1beta1", ENDPOINT, "gpufrac.io/gpu"), "RegisterRequest")
        eq((req.options.pre_start_required,
            req.options.get_preferred_allocation_available), (False, True),
           "RegisterRequest options")
        s.plugin = fk.Plugin(s.psock)

    def list_and_watch(self):
        w = self.s.plugin.watch()
        first = fk.next_with_timeout(w, 5)
        eq([d.ID for d in first.devices], [i[0] for i in self.ids],
           "ListAndWatch ids")
        eq([d.health for d in first.devices], ["Healthy"] * 8, "health")
        eq([[n.ID for n in d.topology.nodes] for d in first.devices],
           [[0]] * 4 + [[1]] * 4, "NUMA nodes")
        w.cancel()

    def inventory(self):
        s = self.s
        out = subprocess.run([self.binary, "node", "--fake-gpus", GPUS,
                              "--once", "--print", "inventory"],
                             capture_output=True, text=True, check=True)
        node = s.double.state.get("nodes", NODE)
        ann = node["metadata"].get("annotations", {})
        eq(set(ann), {ad.INVENTORY}, "node annotations")
        eq(ann[ad.INVENTORY], out.stdout.strip(), "inventory annotation")
        inv = json.loads(ann[ad.INVENTORY])
        eq([(g["index"], g["uuid"], g["model"], g["memory"], g["mode"])
            for g in inv["gpus"]],
           [(i, fake_uuid(i), "A100-40GB", 40 * GiB, "shared")
            for i in range(2)], "inventory GPUs")
        eq(s.double.state.node_patches, 1, "inventory PATCHes")

    def allocate(self):
        s = self.s
        s.add("a", grant(1, 4 * GiB, 25))
        c = alloc(s.plugin, self.ids[0])  # the slot kubelet picked: any
        self.expect_mounts_answer(c, "a", 1, 4 * GiB, 25)

    def no_waiting_pod(self):
        t = time.monotonic()
        code, msg = rpc_error(lambda: alloc(self.s.plugin, self.ids[1]))
        took = time.monotonic() - t
        eq(code, grpc.StatusCode.NOT_FOUND, "status")
        eq(msg, "no pod on node n1 is waiting for 1 gpufrac.io/gpu (is the "
           "gpufrac extender the pod's binder?); pods here: e2e/a: granted, "
           "1 GPU container(s) not waiting for 1", "message")
        check(WAIT_MS / 1000.0 <= took < WAIT_MS / 1000.0 + 1.0,
              "refused after %.3f s, alloc_wait_ms is %d" % (took, WAIT_MS))

    def malformed_grant(self):
        s = self.s
        s.add("m", "{not json")
        code, msg = rpc_error(lambda: alloc(s.plugin, self.ids[2]))
        eq(code, grpc.StatusCode.NOT_FOUND, "status")
        # Exact up to jansson's own words about the JSON error.
        # Refused pods first, then granted ones.
        want = ("no pod on node n1 is waiting for 1 gpufrac.io/gpu (is the "
                "gpufrac extender the pod's binder?); pods here: e2e/m: "
                "malformed gpufrac.io/grant: grant: line 1 column ")
        check(msg.startswith(want),
              "the message names the malformed pod: %r" % msg)
        check(msg.endswith("; e2e/a: granted, 1 GPU container(s) not "
                           "waiting for 1"), "then pod a: %r" % msg)
        check(not os.path.exists(os.path.dirname(s.ctr_dir("m"))),
              "no files for the malformed pod")
        # A granted pod bound after m is not answered while m waits (the
        # call may be m's: docs/node.md, "Matching"); kubelet fails m after
        # the refusal, then d's call is answered.
        s.add("d", grant(0, 2 * GiB, 10))
        code, msg = rpc_error(lambda: alloc(s.plugin, self.ids[3]))
        eq(code, grpc.StatusCode.NOT_FOUND, "status while m waits")
        check("e2e/m: malformed" in msg, "the refusal names m: %r" % msg)
        failed = pod_obj("m", "{not json")
        failed["status"]["phase"] = "Failed"
        s.double.state.put("pods", ad.pod_key(NS, "m"), failed)
        self.expect_mounts_answer(alloc(s.plugin, self.ids[3]), "d", 0,
                                  2 * GiB, 10)

    def concurrent(self):
        s = self.s
        want = {"b": (0, 6 * GiB, 50), "c": (1, 8 * GiB, 0)}
        for name, (gpu, mem, comp) in want.items():
            s.add(name, grant(gpu, mem, comp))
        got, errors = {}, []
        barrier = threading.Barrier(2)

        def worker(i):
            p = fk.Plugin(s.psock)  # its own connection
            try:
                barrier.wait()
                c = alloc(p, self.ids[4 + i])
                got[c.annotations["gpufrac.io/allocated-for"]] = c
            except Exception as e:  # noqa: BLE001 - collected
                errors.append(e)
            finally:
                p.close()
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        check(not errors, "concurrent Allocate: %r" % errors[:1])
        eq(sorted(got), ["e2e/b/main", "e2e/c/main"], "pods answered")
        for name, (gpu, mem, comp) in want.items():
            self.expect_mounts_answer(got["e2e/%s/main" % name], name, gpu,
                                      mem, comp)

    def pod_deleted(self):
        s = self.s
        d = os.path.dirname(s.ctr_dir("d"))
        check(os.path.isdir(d), "pod d's files exist")
        s.double.delete_pod(NS, "d")
        s.double.delete_pod(NS, "m")
        wait_for(lambda: not os.path.exists(d), 3.0,
                 "pod d's state dir removed after its deletion")
        check(os.path.isdir(os.path.dirname(s.ctr_dir("a"))),
              "other pods' files stay")

    def kubelet_restart(self):
        s = self.s
        s.kubelet.stop()
        os.unlink(s.psock)  # as a real kubelet does when it restarts
        time.sleep(0.3)
        s.kubelet = fk.Kubelet(s.ksock)
        s.kubelet.start()
        check(s.kubelet.wait_registers(1, 2.0),
              "no Register within 2 s of kubelet.sock coming back")
        wait_for(lambda: os.path.exists(s.psock), 2.0, "plugin socket back")
        s.plugin.close()
        s.plugin = fk.Plugin(s.psock)
        s.add("e", grant(0, GiB, 5))
        self.expect_mounts_answer(alloc(s.plugin, self.ids[6]), "e", 0, GiB,
                                  5)

    def agent_restart(self):
        s = self.s
        eq(s.agent.stop(), 0, "agent exit status on SIGTERM")
        check(not os.path.exists(s.psock), "plugin socket removed at stop")
        s.plugin.close()
        s.plugin = None
        n = len(s.kubelet.registers)
        s.agent.start(s.conf())
        check(s.kubelet.wait_registers(n + 1, 5.0),
              "no Register from the restarted agent")
        check("4 containers answered before this start" in s.agent.text(),
              "the agent counts what is on disk:\n" + s.agent.text())
        s.plugin = fk.Plugin(s.psock)
        # a, b, c, e are in the API, not started, answered before: none is
        # handed out again.
        code, msg = rpc_error(lambda: alloc(s.plugin, self.ids[0]))
        eq(code, grpc.StatusCode.NOT_FOUND, "status after restart")
        check("is waiting for 1" in msg, "message: %r" % msg)
        s.add("f", grant(1, 3 * GiB, 20))
        self.expect_mounts_answer(alloc(s.plugin, self.ids[1]), "f", 1,
                                  3 * GiB, 20)

    def preferred_from_grant(self):
        """GetPreferredAllocation answers from the grant of the pod the
        next Allocate is for, so kubelet records a slot on the granted GPU
        (not the first GPU's, which the plugin's own rule would pick among
        equally free GPUs); then Allocate of those ids answers that pod.
        With no pod waiting, the plugin's own rule answers."""
        s = self.s
        C = fk.pb.ContainerPreferredAllocationRequest
        offered = [i[0] for i in self.ids]

        def prefer():
            r = s.plugin.call("GetPreferredAllocation",
                              fk.pb.PreferredAllocationRequest(
                                  container_requests=[C(
                                      available_deviceIDs=offered,
                                      allocation_size=1)]),
                              fk.pb.PreferredAllocationResponse)
            return [list(c.deviceIDs) for c in r.container_responses]
        eq(prefer(), [["%s::0" % fake_uuid(0)]], "no pod waiting: own rule")
        s.add("p", grant(1, 2 * GiB, 15))
        wait_for(lambda: prefer() == [["%s::0" % fake_uuid(1)]], 3.0,
                 "a slot on GPU 1, the granted one (got %r)" % prefer())
        ids = prefer()[0]
        self.expect_mounts_answer(alloc(s.plugin, ids), "p", 1, 2 * GiB, 15)
        eq(prefer(), [["%s::0" % fake_uuid(0)]], "answered: own rule again")
        s.double.delete_pod(NS, "p")

    def grant_for_another_node(self):
        """A pod bound to n1 whose grant says n2 (the issue's forged
        grant) is never answered: the refusal names it and why."""
        s = self.s
        forged = json.loads(grant(0, GiB, 10))
        forged["node"] = "n2"
        s.add("forged", json.dumps(forged))
        code, msg = rpc_error(lambda: alloc(s.plugin, self.ids[0]))
        eq(code, grpc.StatusCode.NOT_FOUND, "status")
        check("e2e/forged: its grant is for node 'n2', this is node n1: "
              "refused" in msg, "the refusal names the pod: %r" % msg)
        check(not os.path.exists(os.path.dirname(s.ctr_dir("forged"))),
              "no files for the forged pod")
        s.double.delete_pod(NS, "forged")

    def cdi(self):
        s = self.s
        eq(s.agent.stop(), 0, "agent exit status")
        s.plugin.close()
        s.agent.start(s.conf("cdi.conf", allocate="cdi"))
        wait_for(lambda: os.path.exists(s.psock), 5.0, "plugin socket")
        s.plugin = fk.Plugin(s.psock)
        s.add("g", grant(0, 5 * GiB, 30))
        c = alloc(s.plugin, self.ids[2])
        uid = "uid-e2e-g"
        eq([x.name for x in c.cdi_devices], ["gpufrac.io/gpu=%s_main" % uid],
           "CDI devices")
        eq((len(c.envs), len(c.mounts), len(c.devices)), (0, 0, 0),
           "no other edits")
        eq(dict(c.annotations), {"gpufrac.io/allocated-for": "e2e/g/main"},
           "annotations")
        path = os.path.join(s.cdi, "gpufrac.io-%s_main.json" % uid)
        with open(path) as f:
            spec = json.load(f)
        eq((spec["kind"], [d["name"] for d in spec["devices"]]),
           ("gpufrac.io/gpu", [uid + "_main"]), "CDI spec")
        edits = spec["devices"][0]["containerEdits"]
        check("CUDA_VISIBLE_DEVICES=%s" % fake_uuid(0) in edits["env"],
              "CDI env: %r" % edits["env"])
        eq(sorted(n["path"] for n in edits["deviceNodes"]),
           ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0",
            "/dev/nvidiactl"], "CDI device nodes")
        s.double.delete_pod(NS, "g")
        wait_for(lambda: not os.path.exists(path), 3.0,
                 "the pod's CDI spec removed after its deletion")

    def xid_unhealthy(self):
        """On (fake) NVML: a critical Xid on GPU 1 reaches kubelet as its
        slots turning Unhealthy, leaves the inventory, and a grant on it is
        refused with the reason; GPU 0 stays usable."""
        s = self.s
        if not FAKE_NVML_DIR:
            raise fk.Failure("xid_unhealthy needs --fake-nvml-dir (the "
                             "fake NVML's directory); not skipped")
        eq(s.agent.stop(), 0, "agent exit status on SIGTERM")
        s.plugin.close()
        s.plugin = None
        xids = os.path.join(s.dir, "xids")
        env = {"LD_LIBRARY_PATH": FAKE_NVML_DIR,
               "GF_FAKE_NVML": "NVIDIA A100-SXM4-40GB=40960;"
                               "NVIDIA A100-SXM4-40GB=40960",
               "GF_FAKE_NVML_XID_FILE": xids}
        n = len(s.kubelet.registers)
        s.agent.start(s.conf("nvml.conf"), nvml_env=env)
        check(s.kubelet.wait_registers(n + 1, 5.0),
              "no Register from the agent on NVML")
        s.plugin = fk.Plugin(s.psock)
        w = s.plugin.watch()
        first = fk.next_with_timeout(w, 5)
        uuid = ["GPU-00000000-1111-2222-3333-%012d" % i for i in range(2)]
        eq([d.ID for d in first.devices],
           ["%s::%d" % (u, k) for u in uuid for k in range(SLOTS)],
           "ListAndWatch ids on NVML")
        with open(xids, "w") as f:
            f.write("1 79\n")
        second = fk.next_with_timeout(w, 5)
        eq([d.health for d in second.devices],
           ["Healthy"] * SLOTS + ["Unhealthy"] * SLOTS,
           "health after Xid 79 on GPU 1")
        w.cancel()

        def inv_without_gpu1():
            ann = s.double.state.get("nodes", NODE)["metadata"].get(
                "annotations", {})
            inv = json.loads(ann.get(ad.INVENTORY, "{}"))
            return [g["uuid"] for g in inv.get("gpus", [])] == [uuid[0]]
        wait_for(inv_without_gpu1, 5.0, "GPU 1 gone from the inventory")
        bad = json.dumps({"version": 1, "node": NODE, "containers": [
            {"name": "main", "gpus": [{"uuid": uuid[1], "index": 1,
                                       "memory": GiB, "compute": 10}]}]})
        s.add("x1", bad)
        code, msg = rpc_error(lambda: alloc(s.plugin, ["%s::0" % uuid[0]]))
        check("unhealthy (Xid 79)" in msg, "message: %r" % msg)

    def sigterm_while_allocate_waits(self):
        """alloc_wait_ms of 30 s (the most allowed) and an Allocate no pod
        is waiting for: a call beside it is answered, and SIGTERM ends the
        agent (exit 0, within Agent.stop's 20 s) and the waiting call
        (UNAVAILABLE) without waiting out the 30 s.
        Last: it leaves the agent stopped."""
        s = self.s
        if s.agent.p.poll() is None:
            eq(s.agent.stop(), 0, "agent exit status")
        if s.plugin:
            s.plugin.close()
        # No pod may be waiting for a 1-GPU call: x1 (xid_unhealthy) goes.
        if s.double.state.get("pods", ad.pod_key(NS, "x1")):
            s.double.delete_pod(NS, "x1")
        s.agent.start(s.conf("long-wait.conf", alloc_wait_ms="30000",
                             grpc_preface_ms="300"))
        wait_for(lambda: os.path.exists(s.psock), 5.0, "plugin socket")
        # grpc_preface_ms reaches the plugin: a connection that says
        # nothing is closed (EOF after the server's SETTINGS).
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.settimeout(10)
        raw.connect(s.psock)
        try:
            while raw.recv(4096):
                pass
        except socket.timeout:
            raise fk.Failure("a silent connection is still open 10 s on; "
                             "grpc_preface_ms is 300")
        finally:
            raw.close()
        s.plugin = fk.Plugin(s.psock)
        box = {}

        def waiting():
            try:
                box["resp"] = alloc(s.plugin, self.ids[5])
            except grpc.RpcError as e:
                box["err"] = e
        t = threading.Thread(target=waiting, daemon=True)
        t.start()
        time.sleep(0.3)
        # On the same connection, after the waiting call: answered while
        # that one waits.
        o = s.plugin.call("GetDevicePluginOptions", fk.pb.Empty(),
                          fk.pb.DevicePluginOptions, timeout=10)
        eq(o.get_preferred_allocation_available, True, "options")
        check(t.is_alive(), "the Allocate is still waiting: %r" % box)
        try:
            eq(s.agent.stop(), 0, "agent exit status on SIGTERM")
        except subprocess.TimeoutExpired:
            raise fk.Failure("the agent did not stop on SIGTERM within 20 s "
                             "while an Allocate waited (alloc_wait_ms 30 s)")
        t.join(10)
        check("err" in box, "the waiting Allocate failed: %r" % box)
        eq(box["err"].code(), grpc.StatusCode.UNAVAILABLE,
           "status of the waiting Allocate")

    def run(self):
        order = [self.registers, self.list_and_watch, self.inventory,
                 self.allocate, self.no_waiting_pod, self.malformed_grant,
                 self.concurrent, self.pod_deleted, self.kubelet_restart,
                 self.agent_restart, self.preferred_from_grant,
                 self.grant_for_another_node, self.cdi,
                 self.xid_unhealthy,
                 self.sigterm_while_allocate_waits]
        failed = 0
        try:
            for sc in order:
                t = time.monotonic()
                try:
                    sc()
                    print("ok   %-22s %.2f s" % (sc.__name__,
                                                 time.monotonic() - t))
                except Exception:  # noqa: BLE001 - reported
                    failed += 1
                    print("FAIL %s" % sc.__name__)
                    traceback.print_exc(file=sys.stdout)
                    if self.s.agent.p is None or \
                            self.s.agent.p.poll() is not None:
                        break
                sys.stdout.flush()
            if self.s.agent.p.poll() is None:
                rc = self.s.agent.stop()
                if rc != 0:
                    failed += 1
                    print("FAIL agent exited %d" % rc)
            if self.s.double.state.errors:
                failed += 1
                print("FAIL strict double: %s" %
                      "; ".join(self.s.double.state.errors[:5]))
            if failed:
                print("---- agent log ----\n" + self.s.agent.text())
        finally:
            self.s.close()
        print("%d scenario(s) failed" % failed if failed else "all passed")
        return 1 if failed else 0


# ---- benchmarks ----------------------------------------------------------

def vm_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def bench(binary, n):
    """Allocate latency through the real agent: n pods bound to n1 with
    grants are in the API first (in the agent's cache), then n Allocates,
    each matched, its files written, answered over gRPC."""
    s = Setup(binary, gpus="8xH100-80GB")
    try:
        s.agent.start(s.conf(slots="64"))
        check(s.kubelet.wait_registers(1, 5.0), "no Register")
        s.plugin = fk.Plugin(s.psock)
        for i in range(n):
            s.add("p%05d" % i, grant(i % 8, GiB, 5))
        time.sleep(1.0)
        lat = []
        for i in range(n):
            ids = ["%s::%d" % (fake_uuid(i % 8), i % 64)]
            t = time.perf_counter_ns()
            c = alloc(s.plugin, ids)
            lat.append((time.perf_counter_ns() - t) / 1000.0)
            check(c.annotations["gpufrac.io/allocated-for"].startswith(NS),
                  "answer")
        lat.sort()
        base = []
        for _ in range(n):
            t = time.perf_counter_ns()
            s.plugin.call("GetDevicePluginOptions", fk.pb.Empty(),
                          fk.pb.DevicePluginOptions)
            base.append((time.perf_counter_ns() - t) / 1000.0)
        base.sort()
        print("agent: 8 fake GPUs, %d pods bound with grants, %d Allocates "
              "(files written each)" % (n, n))
        print("Allocate latency us: median %.1f  p99 %.1f  min %.1f  max %.1f"
              % (statistics.median(lat), lat[int(0.99 * (n - 1))], lat[0],
                 lat[-1]))
        print("GetDevicePluginOptions latency us (client + transport): "
              "median %.1f  p99 %.1f" % (statistics.median(base),
                                         base[int(0.99 * (n - 1))]))
        pid = s.agent.p.pid
        print("agent VmRSS %d KiB, VmHWM %d KiB (RssAnon %d KiB)" %
              (vm_kib(pid, "VmRSS"), vm_kib(pid, "VmHWM"),
               vm_kib(pid, "RssAnon")))
        eq(s.agent.stop(), 0, "agent exit status")
    finally:
        s.close()
    return 0


def bench_rss(binary, node_prep, n, scrapes):
    """The agent's memory with 8 GPUs and n containers it answered, each
    with a region holding usage, while /metrics is scraped."""
    s = Setup(binary, gpus="8xH100-80GB")
    try:
        s.agent.start(s.conf(slots="64"))
        check(s.kubelet.wait_registers(1, 5.0), "no Register")
        s.plugin = fk.Plugin(s.psock)
        for i in range(n):
            s.add("r%03d" % i, grant(i % 8, 8 * GiB, 10))
        time.sleep(1.0)
        for i in range(n):
            alloc(s.plugin, ["%s::%d" % (fake_uuid(i % 8), i % 64)])
            subprocess.run([node_prep, "region",
                            os.path.join(s.ctr_dir("r%03d" % i), "region"),
                            str(8 * GiB), str((i % 8 + 1) * GiB)], check=True)
        pid = s.agent.p.pid
        before = vm_kib(pid, "VmRSS")
        lat = []
        for _ in range(scrapes):
            t = time.perf_counter_ns()
            text = s.agent.metrics()
            lat.append((time.perf_counter_ns() - t) / 1000.0)
        m = re.search(r"^gpufrac_node_containers (\d+)$", text, re.M)
        eq(m and int(m.group(1)), n, "gpufrac_node_containers")
        lat.sort()
        print("agent: 8 fake GPUs, %d containers answered with regions, "
              "%d scrapes of %d bytes" % (n, scrapes, len(text)))
        print("scrape latency us: median %.1f  p99 %.1f" %
              (statistics.median(lat), lat[int(0.99 * (scrapes - 1))]))
        print("agent VmRSS before scrapes %d KiB, after %d KiB, VmHWM %d KiB"
              " (RssAnon %d KiB, RssFile %d KiB)"
              % (before, vm_kib(pid, "VmRSS"), vm_kib(pid, "VmHWM"),
                 vm_kib(pid, "RssAnon"), vm_kib(pid, "RssFile")))
        eq(s.agent.stop(), 0, "agent exit status")
    finally:
        s.close()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpufrac", required=True)
    ap.add_argument("--pb", required=True)
    ap.add_argument("--bench", type=int, default=0)
    ap.add_argument("--bench-rss", type=int, default=0)
    ap.add_argument("--scrapes", type=int, default=500)
    ap.add_argument("--node-prep")
    ap.add_argument("--fake-nvml-dir", default="")
    a = ap.parse_args()
    global FAKE_NVML_DIR
    FAKE_NVML_DIR = a.fake_nvml_dir
    sys.path.insert(0, a.pb)
    from deviceplugin.v1beta1 import api_pb2
    fk.pb = api_pb2
    if a.bench:
        return bench(a.gpufrac, a.bench)
    if a.bench_rss:
        if not a.node_prep:
            ap.error("--bench-rss needs --node-prep")
        return bench_rss(a.gpufrac, a.node_prep, a.bench_rss, a.scrapes)
    return Scenarios(a.gpufrac).run()


if __name__ == "__main__":
    sys.exit(main())
