#!/usr/bin/python3
"""gpufrac node --mode dra against a real kube-apiserver (CTest label e2e).

Usage: test_dra_node.py K8S_BIN GPUFRAC --pb DIR --fake-nvml-dir DIR
                        --shimconf-dump PATH [--keep]

The agent runs on the tests' fake NVML (two A100-40GB, one A100-80GB in
MIG mode with two MIG devices) as a ServiceAccount bound to exactly the
RBAC rules the DRA path needs (RULES below), publishes its ResourceSlices
to the real kube-apiserver (resource.k8s.io/v1), and a fake kubelet here
(python3-grpcio, message classes from proto/dra/v1 and
proto/pluginregistration/v1 compiled by protoc into DIR) registers it and
calls NodePrepareResources / NodeUnprepareResources for ResourceClaims
created in the API server, whose status.allocation this test writes
(subresource status) as a scheduler would.  The prepared shim config is
read back with the interposer's own parser (tests/node/shimconf_dump).
Exit 0 only when every step passed; a missing tool is a failure.
"""

import importlib.util
import json
import os
import sys
import time
import traceback
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ApiError, Cluster, Failure, log, wait_for  # noqa: E402

import grpc  # noqa: E402
import subprocess  # noqa: E402

NODE = "dra-n1"
DRIVER = "gpu.gpufrac.io"
NS = "e2e-dra"
SA_NS = "gpufrac-system"
SA = "gpufrac-node-dra"
GiB = 1 << 30
MiB = 1 << 20
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % NS
DRA_SVC = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
REG_SVC = "/pluginregistration.Registration/"
# The gates the DRA path uses; both are on by default in v1.37
# (DRAConsumableCapacity beta since 1.36, DRADeviceTaints GA in 1.37) and
# named here so the test says what it relies on.
GATES = {"DRAConsumableCapacity": True, "DRADeviceTaints": True}
# What the agent's ServiceAccount may do on the DRA path, nothing more.
RULES = [
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
     "verbs": ["get", "list", "create", "update", "delete"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"],
     "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
]
# GPU 1's NVML brand is 2 (Tesla) under an "NVIDIA" name (issue 27 item 9:
# the brand is NVML's, not the name's).
FAKE_NVML = ("NVIDIA A100-SXM4-40GB=40960;NVIDIA A100-SXM4-40GB=40960:brand=2;"
             "NVIDIA A100-SXM4-80GB=81920:mig=1g+3g")

dra = reg = None  # the generated message modules


def fail(msg):
    raise Failure(msg)


def eq(got, want, what):
    if got != want:
        fail("%s: got %r, want %r" % (what, got, want))


def load_pb(root, rel, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, rel))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def gpu_uuid(i):
    """The fake NVML's uuid of GPU i (tests/node/fake_nvml.c)."""
    return "GPU-00000000-1111-2222-3333-%012d" % i


class Agent:
    def __init__(self, c, work, kc):
        self.c, self.work, self.kc = c, work, kc
        self.p = None
        self.n = 0
        self.xids = os.path.join(work, "xids")
        open(self.xids, "w").close()
        self.conf = os.path.join(work, "node.conf")
        with open(self.conf, "w") as f:
            f.write("mode = shared\nmode.1 = exclusive\nmode.2 = mig\n"
                    "state_dir = %s/state\ncdi_dir = %s/cdi\n"
                    "shim_lib = /usr/lib/gpufrac/libgpufrac-cuda.so\n"
                    "preload = /usr/lib/gpufrac/ld.so.preload\n"
                    "dra_registry_dir = %s/plugins_registry\n"
                    "dra_plugin_dir = %s/plugins/%s\n"
                    "proc_dir = %s/proc\n"
                    "sys_dir = %s/sys\n"
                    # Xid 79 (the bus class) evicts: the option, not the
                    # default (NoSchedule; test_dra's unit tests).
                    "dra_xid_noexecute = bus\n" %
                    (work, work, work, work, DRIVER, work, work))
        # A sysfs tree as the kernel's: the fake NVML's GPUs 0 and 2 (bus
        # 0x18 and 0x1a) under root complexes pci0000:17 and pci0000:40;
        # GPU 1 (0x19) has no link (its pcieRoot unknown, left out).
        for addr, root in (("0000:18:00.0", "pci0000:17"),
                           ("0000:1a:00.0", "pci0000:40")):
            real = os.path.join(work, "sys/devices", root, root[3:] + ":00.0", addr)
            os.makedirs(real, exist_ok=True)
            link = os.path.join(work, "sys/bus/pci/devices", addr)
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(os.path.relpath(real, os.path.dirname(link)), link)
        # The driver's capability files for GPU 2's first MIG device
        # (GPU instance 1, compute instance 0; the fake NVML gives GPU i
        # minor 10 + i), as the driver makes them.
        for rel, minor in (("gi1/access", 30), ("gi1/ci0/access", 31)):
            p = os.path.join(work, "proc/driver/nvidia/capabilities/gpu12/mig",
                             rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write("DeviceFileMinor: %d\nDeviceFileMode: 292\n" % minor)
        self.reg_sock = os.path.join(work, "plugins_registry",
                                     DRIVER + "-reg.sock")
        self.dra_sock = os.path.join(work, "plugins", DRIVER, "dra.sock")

    def start(self):
        self.n += 1
        env = dict(os.environ, LD_LIBRARY_PATH=ARGS.fake_nvml_dir,
                   GF_FAKE_NVML=FAKE_NVML, GF_FAKE_NVML_XID_FILE=self.xids,
                   # GPUs 0 and 1 on one NVLink island (nvlinkIsland "0")
                   GF_FAKE_NVML_NVLINK="0-1x12")
        self.p = self.c.spawn("agent-dra-%d" % self.n, [
            self.c.gpufrac, "node", "--mode", "dra", "--node-name", NODE,
            "--kubeconfig", self.kc, "--config", self.conf, "--listen",
            "127.0.0.1:0", "--interval", "1"], env=env)
        wait_for("the agent's DRA sockets",
                 lambda: self.alive() and os.path.exists(self.reg_sock) and
                 os.path.exists(self.dra_sock) and
                 "DRA driver" in self.log_text(), 20)

    def alive(self):
        if self.p.p.poll() is not None:
            fail("the agent exited %s: %s" % (self.p.p.returncode, self.p.tail()))
        return True

    def log_text(self):
        with open(self.c.path("agent-dra-%d.log" % self.n)) as f:
            return f.read()

    def stop(self):
        eq(self.c.stop_gpufrac(self.p), 0, "agent exit status on SIGTERM")
        if os.path.exists(self.reg_sock) or os.path.exists(self.dra_sock):
            fail("the agent left its sockets behind")


def call(sock, method, req, resp_cls, timeout=20):
    with grpc.insecure_channel("unix://" + sock) as ch:
        f = ch.unary_unary(method, request_serializer=type(req).SerializeToString,
                           response_deserializer=resp_cls.FromString)
        return f(req, timeout=timeout)


class Test:
    def __init__(self, c):
        self.c = c
        self.work = c.path("dra")
        os.makedirs(self.work)

    # ---- setup ------------------------------------------------------------
    def setup(self):
        a = self.c.admin
        for ns in (NS, SA_NS):
            a.create("/api/v1/namespaces", {"metadata": {"name": ns}})
        a.create("/api/v1/namespaces/%s/serviceaccounts" % SA_NS,
                 {"metadata": {"name": SA}})
        a.create("/apis/rbac.authorization.k8s.io/v1/clusterroles",
                 {"metadata": {"name": SA}, "rules": RULES})
        a.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "metadata": {"name": SA},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole", "name": SA},
            "subjects": [{"kind": "ServiceAccount", "name": SA,
                          "namespace": SA_NS}]})
        self.node_uid = a.create("/api/v1/nodes",
                                 {"metadata": {"name": NODE}})["metadata"]["uid"]
        a.create("/apis/resource.k8s.io/v1/deviceclasses", {
            "metadata": {"name": "e2e-" + DRIVER},
            "spec": {"selectors": [{"cel": {
                "expression": "device.driver == '%s'" % DRIVER}}]}})
        kc = self.c.sa_kubeconfig(SA, self.c.token(SA, SA_NS))
        self.agent = Agent(self.c, self.work, kc)
        self.agent.start()

    def slices(self):
        return sorted(self.c.admin.items(SLICES, fieldSelector="spec.nodeName=" + NODE),
                      key=lambda s: s["metadata"]["name"])

    def wait_slices(self, pred, what):
        out = []

        def ok():
            self.agent.alive()
            out[:] = self.slices()
            return bool(out) and pred(out)
        wait_for(what, ok, 20)
        return out

    # ---- steps ------------------------------------------------------------
    def s_slices(self):
        """The slices the agent publishes are accepted by the real API
        server and say what the agreed format says."""
        sl = self.wait_slices(lambda s: len(s) == 1, "one ResourceSlice")[0]
        eq(sl["metadata"]["name"], "%s-%s-0" % (NODE, DRIVER), "slice name")
        eq([(o["kind"], o["name"], o["uid"], o.get("controller"))
            for o in sl["metadata"].get("ownerReferences", [])],
           [("Node", NODE, self.node_uid, True)], "owner")
        sp = sl["spec"]
        self.gen = sp["pool"]["generation"]
        eq(sp["driver"], DRIVER, "driver")
        eq(sp["nodeName"], NODE, "nodeName")
        eq(sp["pool"], {"name": NODE, "generation": 1,
                        "resourceSliceCount": 1}, "pool")
        names = [d["name"] for d in sp["devices"]]
        eq(names, ["gpu-0", "gpu-1", "gpu-2-mig-1-0", "gpu-2-mig-2-0"],
           "devices")
        g0 = sp["devices"][0]
        eq(g0["attributes"], {
            "type": {"string": "gpu"}, "uuid": {"string": gpu_uuid(0)},
            "productName": {"string": "NVIDIA A100-SXM4-40GB"},
            # The fake NVML says compute capability 9.0 for every GPU.
            "brand": {"string": "Nvidia"}, "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "550.54.15"},
            "cudaDriverVersion": {"version": "12.4.0"},
            "pciBusID": {"string": g0["attributes"]["pciBusID"]["string"]},
            # the API's standard attribute: the same address with NVML's
            # 8-digit domain cut to the usual 4 (issue 27 item 9)
            "resource.kubernetes.io/pciBusID": {
                "string": g0["attributes"]["pciBusID"]["string"][4:]},
            # the standard PCIe root, from sys_dir's tree
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:17"},
            "numaNode": {"int": 0}, "mode": {"string": "shared"},
            "nvlinkIsland": {"string": "0"}},
            "gpu-0 attributes")
        eq(g0["capacity"], {
            "memory": {"value": "40Gi", "requestPolicy": {
                "default": "40Gi", "validRange": {
                    "min": "256Mi", "max": "40Gi", "step": "1Mi"}}},
            "cores": {"value": "100", "requestPolicy": {
                "default": "100", "validRange": {
                    "min": "1", "max": "100", "step": "1"}}}},
            "gpu-0 capacity")
        eq(g0.get("allowMultipleAllocations"), True, "gpu-0 shared")
        g1 = sp["devices"][1]
        eq(g1["attributes"]["mode"], {"string": "exclusive"}, "gpu-1 mode")
        eq(g1["attributes"]["brand"], {"string": "Tesla"}, "gpu-1's NVML brand")
        eq("resource.kubernetes.io/pcieRoot" in g1["attributes"], False,
           "gpu-1: no PCIe root known, none published")
        eq(g1["attributes"].get("nvlinkIsland"), {"string": "0"},
           "gpu-1 on gpu-0's NVLink island")
        eq("nvlinkIsland" in sp["devices"][2]["attributes"], False,
           "a MIG instance names no NVLink island")
        eq("allowMultipleAllocations" in g1, False, "gpu-1 is single-allocation")
        eq(g1["capacity"], {"memory": {"value": "40Gi"},
                            "cores": {"value": "100"}}, "gpu-1 capacity")
        m = sp["devices"][3]
        eq(m["attributes"]["type"], {"string": "mig"}, "MIG type")
        eq(m["attributes"]["parentUUID"], {"string": gpu_uuid(2)}, "parentUUID")
        eq(m["attributes"]["profile"], {"string": "3g.40gb"}, "MIG profile")
        eq(sorted(m["capacity"]), ["memory", "multiprocessors"], "MIG capacity")
        eq(m["capacity"]["multiprocessors"], {"value": "42"}, "MIG SMs")
        eq(m["attributes"].get("resource.kubernetes.io/pcieRoot"),
           {"string": "pci0000:40"}, "a MIG device's PCIe root (its GPU's)")

    def s_register(self):
        """kubelet's plugin watcher: GetInfo, NotifyRegistrationStatus."""
        info = call(self.agent.reg_sock, REG_SVC + "GetInfo", reg.InfoRequest(),
                    reg.PluginInfo)
        eq((info.type, info.name, info.endpoint, list(info.supported_versions)),
           ("DRAPlugin", DRIVER, self.agent.dra_sock, ["v1.DRAPlugin"]),
           "PluginInfo")
        call(self.agent.reg_sock, REG_SVC + "NotifyRegistrationStatus",
             reg.RegistrationStatus(plugin_registered=True),
             reg.RegistrationStatusResponse)
        wait_for("the agent logging its registration",
                 lambda: "kubelet registered DRA driver" in self.agent.log_text(), 5)

    def claim(self, name, results):
        """A ResourceClaim whose status.allocation has `results` (device,
        memory, cores, pool, shareID), written through the status
        subresource as a scheduler writes it."""
        reqs = [{"name": "r%d" % i, "exactly": {
            "deviceClassName": "e2e-" + DRIVER, "allocationMode": "ExactCount",
            "count": 1}} for i in range(len(results))]
        obj = self.c.admin.create(CLAIMS, {"metadata": {"name": name},
                                           "spec": {"devices": {"requests": reqs}}})
        res = []
        for i, r in enumerate(results):
            x = {"request": "r%d" % i, "driver": DRIVER,
                 "pool": r.get("pool", NODE), "device": r["device"]}
            if r.get("share", True):
                x["shareID"] = str(uuid.uuid4())
            cc = {}
            if "memory" in r:
                cc["memory"] = r["memory"]
            if "cores" in r:
                cc["cores"] = str(r["cores"])
            if cc:
                x["consumedCapacity"] = cc
            res.append(x)
        obj["status"] = {"allocation": {"devices": {"results": res},
                         "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                             {"key": "metadata.name", "operator": "In",
                              "values": [NODE]}]}]}}}
        obj = self.c.admin.request("PUT", "%s/%s/status" % (CLAIMS, name), obj)
        return obj

    def prepare(self, *objs, uid=None):
        q = dra.NodePrepareResourcesRequest(claims=[
            dra.Claim(namespace=NS, name=o["metadata"]["name"],
                      uid=uid or o["metadata"]["uid"]) for o in objs])
        return call(self.agent.dra_sock, DRA_SVC + "NodePrepareResources", q,
                    dra.NodePrepareResourcesResponse).claims

    def unprepare(self, *objs):
        q = dra.NodeUnprepareResourcesRequest(claims=[
            dra.Claim(namespace=NS, name=o["metadata"]["name"],
                      uid=o["metadata"]["uid"]) for o in objs])
        return call(self.agent.dra_sock, DRA_SVC + "NodeUnprepareResources", q,
                    dra.NodeUnprepareResourcesResponse).claims

    def cdi_path(self, uid):
        return os.path.join(self.work, "cdi", "gpufrac.io-%s_claim.json" % uid)

    def limits(self, uid):
        conf = os.path.join(self.work, "state", "pods", uid, "claim", "shim.conf")
        r = subprocess.run([ARGS.shimconf_dump, conf], capture_output=True,
                           text=True)
        if r.returncode != 0:
            fail("the interposer's parser refused %s: %s" % (conf, r.stderr))
        out = dict(line.split(" ", 1) for line in r.stdout.splitlines())
        # Memory by uuid (what the agent writes): "uuid.K <uuid> <bytes>".
        mem = {}
        for k, v in out.items():
            if k.startswith("uuid."):
                u, b = v.split()
                mem[u.upper()] = int(b)
        out["mem"] = mem
        return out

    def check_spec(self, o, gpus):
        uid = o["metadata"]["uid"]
        with open(self.cdi_path(uid)) as f:
            spec = json.load(f)
        eq(spec["kind"], "gpufrac.io/gpu", "CDI kind")
        eq([d["name"] for d in spec["devices"]], [uid + "_claim"], "CDI device")
        ed = spec["devices"][0]["containerEdits"]
        env = dict(e.split("=", 1) for e in ed["env"])
        ids = ",".join(gpu_uuid(g) for g in gpus)
        eq((env["CUDA_VISIBLE_DEVICES"], env["NVIDIA_VISIBLE_DEVICES"],
            env["GPUFRAC_CONFIG"]), (ids, ids, "/etc/gpufrac/shim.conf"), "env")
        mounts = {m["containerPath"]: m for m in ed["mounts"]}
        conf = os.path.join(self.work, "state", "pods", uid, "claim", "shim.conf")
        eq(mounts["/etc/gpufrac/shim.conf"]["hostPath"], conf, "config mount")
        eq("ro" in mounts["/etc/gpufrac/shim.conf"]["options"], True,
           "config read-only")
        eq(mounts["/etc/ld.so.preload"]["hostPath"],
           "/usr/lib/gpufrac/ld.so.preload", "preload mount")
        eq(mounts["/usr/lib/gpufrac/libgpufrac-cuda.so"]["hostPath"],
           "/usr/lib/gpufrac/libgpufrac-cuda.so", "interposer mount")

    def s_prepare(self):
        """A share on gpu-0: the answer, the CDI spec, the limits the
        interposer reads, and the same answer again."""
        a = self.claim("share-a", [{"device": "gpu-0", "memory": "8Gi",
                                    "cores": 30}])
        self.a = a
        got = self.prepare(a)
        r = got[a["metadata"]["uid"]]
        eq(r.error, "", "prepare error")
        eq(len(r.devices), 1, "devices")
        d = r.devices[0]
        share = a["status"]["allocation"]["devices"]["results"][0]["shareID"]
        eq((list(d.request_names), d.pool_name, d.device_name,
            list(d.cdi_device_ids), d.share_id),
           (["r0"], NODE, "gpu-0",
            ["gpufrac.io/gpu=%s_claim" % a["metadata"]["uid"]], share),
           "prepared device")
        self.check_spec(a, [0])
        lim = self.limits(a["metadata"]["uid"])
        eq((lim["mem"], lim["compute"]), ({gpu_uuid(0).upper(): 8 * GiB}, "30"),
           "limits the interposer reads")
        again = self.prepare(a)[a["metadata"]["uid"]]
        eq(again, r, "a repeated prepare's answer")

    def s_two_shares(self):
        """A second claim on the same GPU, and a refused third that does
        not fit beside them; a claim with two GPUs."""
        b = self.claim("share-b", [{"device": "gpu-0", "memory": "16Gi",
                                    "cores": 50}])
        self.b = b
        r = self.prepare(b)[b["metadata"]["uid"]]
        eq(r.error, "", "second share")
        lim = self.limits(b["metadata"]["uid"])
        eq((lim["mem"], lim["compute"]), ({gpu_uuid(0).upper(): 16 * GiB}, "50"),
           "second share's limits")
        c = self.claim("share-c", [{"device": "gpu-0", "memory": "8Gi",
                                    "cores": 30}])
        self.c_obj = c
        r = self.prepare(c)[c["metadata"]["uid"]]
        if "would hold" not in r.error or "110 cores" not in r.error:
            fail("a third share over 100 cores: error %r" % r.error)
        if os.path.exists(self.cdi_path(c["metadata"]["uid"])):
            fail("a refused claim left a CDI spec")

    def s_forged(self):
        """Allocations the device cannot hold, each refused by name."""
        cases = [
            ("forged-mem", [{"device": "gpu-0", "memory": "41Gi", "cores": 1}],
             "consumed memory"),
            ("forged-dev", [{"device": "gpu-7", "memory": "1Gi", "cores": 1}],
             "device 'gpu-7' is not a device of pool"),
            ("forged-pool", [{"device": "gpu-0", "pool": "other-node",
                              "memory": "1Gi", "cores": 1}],
             "allocated from pool 'other-node'"),
            ("forged-excl", [{"device": "gpu-1", "memory": "1Gi", "cores": 1}],
             "is exclusive"),
            ("forged-mig-share", [{"device": "gpu-2-mig-2-0", "memory": "1Gi",
                                   "cores": 1}], "is a MIG device"),
        ]
        for name, res, want in cases:
            o = self.claim(name, res)
            r = self.prepare(o)[o["metadata"]["uid"]]
            if want not in r.error:
                fail("%s: error %r does not say %r" % (name, r.error, want))
        o = self.claim("wrong-uid", [{"device": "gpu-0", "memory": "1Gi",
                                      "cores": 1}])
        bad = str(uuid.uuid4())
        r = self.prepare(o, uid=bad)[bad]
        if "kubelet asked for uid" not in r.error:
            fail("a uid mismatch: error %r" % r.error)

    def s_exclusive(self):
        """A whole exclusive GPU: no share, no capacity."""
        e = self.claim("whole", [{"device": "gpu-1", "share": False}])
        r = self.prepare(e)[e["metadata"]["uid"]]
        eq((r.error, r.devices[0].device_name, r.devices[0].share_id),
           ("", "gpu-1", ""), "exclusive prepare")
        self.check_spec(e, [1])
        e2 = self.claim("whole-2", [{"device": "gpu-1", "share": False}])
        r = self.prepare(e2)[e2["metadata"]["uid"]]
        if "would hold" not in r.error:
            fail("a second claim on an exclusive GPU: %r" % r.error)
        self.e = e

    def s_mig(self):
        """A MIG device: its uuid and capability nodes, no interposer; the
        same instance for a second claim refused; no capability file for
        the other instance (this machine has no driver): refused naming
        the file."""
        m = self.claim("mig-a", [{"device": "gpu-2-mig-1-0", "share": False}])
        r = self.prepare(m)[m["metadata"]["uid"]]
        eq((r.error, r.devices[0].device_name), ("", "gpu-2-mig-1-0"),
           "MIG prepare")
        with open(self.cdi_path(m["metadata"]["uid"])) as f:
            ed = json.load(f)["devices"][0]["containerEdits"]
        eq(ed["env"], ["NVIDIA_VISIBLE_DEVICES=MIG-00000002-aaaa-4bbb-8ccc-"
                       "000000000000", "CUDA_VISIBLE_DEVICES=MIG-00000002-aaaa-"
                       "4bbb-8ccc-000000000000"], "MIG env")
        eq([n["path"] for n in ed["deviceNodes"]],
           ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
            "/dev/nvidia12", "/dev/nvidia-caps/nvidia-cap30",
            "/dev/nvidia-caps/nvidia-cap31"], "MIG device nodes")
        eq("mounts" in ed, False, "no interposer for MIG")
        m2 = self.claim("mig-b", [{"device": "gpu-2-mig-1-0", "share": False}])
        r = self.prepare(m2)[m2["metadata"]["uid"]]
        if "is held by claim mig-a" not in r.error:
            fail("a MIG device for two claims: %r" % r.error)
        m3 = self.claim("mig-c", [{"device": "gpu-2-mig-2-0", "share": False}])
        r = self.prepare(m3)[m3["metadata"]["uid"]]
        if "capabilities/gpu12/mig/gi2/access" not in r.error:
            fail("a MIG device without capability files: %r" % r.error)

    def s_restart(self):
        """The agent is killed (SIGKILL) and starts again: prepared claims
        survive (the same answer,
        and a share that does not fit beside them is still refused), and
        the slices keep their generation."""
        before = self.prepare(self.a)[self.a["metadata"]["uid"]]
        self.agent.p.kill9()  # a crash: no chance to tidy up
        self.c.extra.remove(self.agent.p)
        self.agent.start()
        wait_for("the restarted agent", lambda: "claims prepared before this "
                 "start" in self.agent.log_text(), 10)
        after = self.prepare(self.a)[self.a["metadata"]["uid"]]
        eq(after, before, "prepare after the restart")
        r = self.prepare(self.c_obj)[self.c_obj["metadata"]["uid"]]
        if "would hold" not in r.error:
            fail("after the restart the third share fits: %r" % r.error)
        time.sleep(2)
        eq(self.slices()[0]["spec"]["pool"]["generation"], self.gen,
           "generation after a restart with nothing changed")

    def s_unprepare(self):
        """Unprepare removes exactly that claim's files; again is fine; the
        share it freed fits now."""
        ua = self.a["metadata"]["uid"]
        ub = self.b["metadata"]["uid"]
        r = self.unprepare(self.a)
        eq(r[ua].error, "", "unprepare")
        if os.path.exists(self.cdi_path(ua)) or \
                os.path.exists(os.path.join(self.work, "state", "pods", ua)):
            fail("unprepare left files of the claim")
        if not os.path.exists(self.cdi_path(ub)):
            fail("unprepare of one claim removed another's spec")
        eq(self.unprepare(self.a)[ua].error, "", "a repeated unprepare")
        r = self.prepare(self.c_obj)[self.c_obj["metadata"]["uid"]]
        eq(r.error, "", "the third share after the first went")

    def s_taint(self):
        """An Xid on gpu-0 (79, class bus, which this agent's config makes
        NoExecute): a NoExecute taint at the next generation, the device
        still listed; a new claim on it refused."""
        with open(self.agent.xids, "a") as f:
            f.write("0 79\n")
        sl = self.wait_slices(
            lambda s: s[0]["spec"]["pool"]["generation"] > self.gen,
            "a new generation after the Xid")[0]
        g0 = sl["spec"]["devices"][0]
        eq(g0["name"], "gpu-0", "the tainted device is still listed")
        t = g0.get("taints") or fail("no taint on gpu-0")
        eq([(x["key"], x["value"], x["effect"]) for x in t],
           [(DRIVER + "/xid", "79", "NoExecute")], "gpu-0 taints")
        eq("taints" in sl["spec"]["devices"][1], False, "gpu-1 untainted")
        o = self.claim("after-xid", [{"device": "gpu-0", "memory": "1Gi",
                                      "cores": 1}])
        r = self.prepare(o)[o["metadata"]["uid"]]
        if "unhealthy (Xid 79)" not in r.error:
            fail("a claim on the tainted GPU: %r" % r.error)

    def s_split(self):
        """More devices than a slice may hold: with dra_slice_devices = 3
        the pool is two slices, both accepted, resourceSliceCount 2."""
        self.agent.stop()
        with open(self.agent.conf, "a") as f:
            f.write("dra_slice_devices = 3\n")
        open(self.agent.xids, "w").close()
        self.agent.start()
        s = self.wait_slices(lambda s: len(s) == 2, "two slices")
        eq([len(x["spec"]["devices"]) for x in s], [3, 1], "devices per slice")
        eq({x["spec"]["pool"]["resourceSliceCount"] for x in s}, {2},
           "resourceSliceCount")
        eq(len({x["spec"]["pool"]["generation"] for x in s}), 1,
           "one generation")


STEPS = ["slices", "register", "prepare", "two_shares", "forged", "exclusive",
         "mig", "restart", "unprepare", "taint", "split"]


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("k8s_bin")
    ap.add_argument("gpufrac")
    ap.add_argument("--pb", required=True)
    ap.add_argument("--fake-nvml-dir", required=True)
    ap.add_argument("--shimconf-dump", required=True)
    ap.add_argument("--keep", action="store_true")
    global ARGS, dra, reg
    ARGS = ap.parse_args()
    dra = load_pb(ARGS.pb, "dra/v1/api_pb2.py", "dra_v1_pb2")
    reg = load_pb(ARGS.pb, "pluginregistration/v1/api_pb2.py", "reg_v1_pb2")
    c = None
    failed = []
    try:
        c = Cluster(ARGS.k8s_bin, ARGS.gpufrac, ARGS.keep)
        c.start(scheduler=False, feature_gates=GATES)
        t = Test(c)
        t.setup()
        for s in STEPS:
            log("== %s" % s)
            try:
                getattr(t, "s_" + s)()
            except (Failure, ApiError, grpc.RpcError) as e:
                traceback.print_exc()
                failed.append("%s: %s" % (s, e))
                if "exited" in str(e):
                    break
    except Exception as e:
        traceback.print_exc()
        failed.append("setup: %s" % e)
    finally:
        if c:
            c.stop()
            failed += c.bad_exits
    for f in failed:
        log("FAILED %s" % f)
    log("%d of %d steps failed" % (len(failed), len(STEPS)) if failed else
        "all %d steps passed" % len(STEPS))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
