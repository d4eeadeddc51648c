#!/usr/bin/env python3
"""Every device-plugin manifest of examples/, applied as written, on the real
kubelet (CTest label e2e; issue 30 item 10).

Usage: test_examples.py K8S_BIN GPUFRAC [--keep]

The real kubelet with the fake CRI runtime, as in test_kubelet.py (root, a
mount namespace of its own); deploy/ applied (the control-plane path:
kube-scheduler calls the extender, HAMi's names among its
managedResources, the extender run with --accept hami, as
docs/migrating.md sets it up); the agent on node kl1 with 4 fake A100s and
a weight cache holding the fixture model examples/llm-server.yaml names.

Each of examples/memory-share.yaml, memory-compute.yaml, whole-gpu.yaml,
hami-pod.yaml and llm-server.yaml goes through `kubectl apply -f` unchanged
(examples/dra-claim-share.yaml is test_dra.py's), then its pod must be:
bound to kl1 with a grant of what the manifest asks (memory, compute, a
whole GPU), Running, and its container created by kubelet with gpufrac's
Allocate answer: CUDA_VISIBLE_DEVICES the granted GPU, the shim config
mounted with the grant's memory limit and compute share, the GPU's device
node; the LLM server's pod also the model's view at /gpufrac/models, its
GPUFRAC_MODEL_DIR, and its readiness gate gpufrac.io/model-ready True.
A whole GPU: no memory limit in the shim config, compute 100 or none.
The fake node runs no process: what the container would see is what
kubelet was told to give it.
"""

import base64
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (Cluster, Failure, e2e_args, free_port, log, run_once,  # noqa: E402
                     wait_for)
from test_k8s import E2E, GRANT, NS, SLOTS, Extender  # noqa: E402
from kubelet_node import NODE, Kubelet, node_obj, ready  # noqa: E402
from test_model_admission import make_model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")
SPEC, NGPUS, GPU_BYTES = "4xA100-80GB", 4, 80 << 30
HAMI = ("nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores")
MODEL_FILES = {"config.json": 1000, "model.safetensors": 4 << 20}
Gi, Mi = 1 << 30, 1 << 20
# example -> (the pod's name prefix, its container, memory bytes granted
# (None: whole GPU), compute percent granted)
WANT = {
    "memory-share.yaml": ("memory-share", "main", 8 * Gi, 0),
    "memory-compute.yaml": ("memory-compute", "main", 10 * Gi, 30),
    "whole-gpu.yaml": ("whole-gpu", "main", None, None),
    "hami-pod.yaml": ("hami-pod", "main", 8000 * Mi, 30),
    "llm-server.yaml": ("llm-server-", "server", 20 * Gi, 50),
}


def fail(msg):
    raise Failure(msg)


class HamiExtender(Extender):
    def start(self):
        self.proc = self.c.spawn(self.name, [
            self.c.gpufrac, "scheduler", "--listen", "127.0.0.1:%d" % self.port,
            "--kubeconfig", self.kc, "--accept", "hami"])
        return self


def env_of(ctr):
    # KeyValue.value is bytes in CRI v1: base64 in protojson.
    return {e["key"]: base64.b64decode(e.get("value", "")).decode()
            for e in ctr.get("envs", [])}


class Examples:
    def __init__(self, c, kl):
        self.c, self.kl = c, kl
        self.t = E2E(c)
        self.api = c.admin

    def setup(self):
        t, c, kl = self.t, self.c, self.kl
        t.apply_deploy()
        c.namespace(NS)
        kl.start()
        n = wait_for("kubelet to register Node %s Ready" % NODE,
                     lambda: kl.alive() and (lambda o: o if o and ready(o) else None)(
                         node_obj(c)), 120)
        if n["spec"].get("taints"):
            c.admin.merge_patch("/api/v1/nodes/" + NODE, {"spec": {"taints": None}})
        p = wait_for("the gpufrac-node DaemonSet pod on %s" % NODE,
                     lambda: t.agent_pod(NODE), 90)
        akc = c.pod_kubeconfig("agent-" + NODE, "gpufrac-node", p)
        d = c.path("node-" + NODE)
        for sub in ("state", "cdi", "models"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        self.cache = os.path.join(d, "models")
        self.state = os.path.join(d, "state")
        # the operator's prefetch, done here with `gpufrac cache fetch`
        src = c.path("model-src")
        digest = make_model(src, MODEL_FILES)
        subprocess.run([c.gpufrac, "cache", "--dir", self.cache, "--budget", "1Gi",
                        "fetch", "tiny-llm@" + digest, "--source", "file://" + src],
                       check=True, capture_output=True, timeout=60)
        cfg = os.path.join(d, "node.conf")
        with open(cfg, "w") as f:
            f.write("state_dir = %s/state\ncdi_dir = %s/cdi\nkubelet_dir = %s\n"
                    "slots = %d\nmodel_cache_dir = %s\nmodel_cache_budget = 1Gi\n"
                    % (d, d, kl.plugins, SLOTS, self.cache))
        c.spawn("agent-" + NODE, [
            c.gpufrac, "node", "--fake-gpus", SPEC, "--node-name", NODE,
            "--kubeconfig", akc, "--config", cfg,
            "--listen", "127.0.0.1:%d" % free_port(), "--interval", "2"])
        t.wait_inventory(NODE, NGPUS)
        want = str(NGPUS * SLOTS)
        wait_for("kubelet reporting gpufrac.io/gpu = %s" % want,
                 lambda: kl.alive() and node_obj(c)["status"].get(
                     "allocatable", {}).get("gpufrac.io/gpu") == want, 60)
        kc = c.sa_kubeconfig("extender", c.token("gpufrac-scheduler"))
        ext = HamiExtender(c, "extender", c.ext_port, kc).start()
        ext.ready_leader()
        wait_for("the extender holding Node %s" % NODE,
                 lambda: ext.metric("gpufrac_extender_nodes") == 1, 30)

    def pod_of(self, prefix):
        for p in self.api.items("/api/v1/namespaces/%s/pods" % NS):
            n = p["metadata"]["name"]
            if n == prefix or (prefix.endswith("-") and n.startswith(prefix)):
                return p
        return None

    def check(self, example):
        prefix, cname, mem, compute = WANT[example]
        r = self.c.kubectl("apply", "-n", NS, "-f", os.path.join(EXAMPLES, example))
        log("kubectl apply -f examples/%s: %s" % (example, " ".join(r.stdout.split())))

        def running():
            self.kl.alive()
            p = self.pod_of(prefix)
            return p if p and p["status"].get("phase") == "Running" else None
        try:
            p = wait_for("the pod of examples/%s Running" % example, running, 120)
        except Failure:
            p = self.pod_of(prefix)
            fail("examples/%s: pod %s" % (example, json.dumps(
                p and {"node": p["spec"].get("nodeName"), "status": p["status"],
                       "events": self.t.events(p["metadata"]["name"])[-4:]})))
        name = p["metadata"]["name"]
        if p["spec"]["nodeName"] != NODE:
            fail("%s bound to %s" % (name, p["spec"]["nodeName"]))
        grant = json.loads(p["metadata"]["annotations"][GRANT])
        gpus = [g for c in grant["containers"] if c["name"] == cname for g in c["gpus"]]
        if len(gpus) != 1:
            fail("%s: grant %s, expected one GPU for container %s" % (name, grant, cname))
        g = gpus[0]
        if mem is None:  # a whole GPU: no share, nothing else on it
            if g["memory"] != 0 or g["compute"] != 100:
                fail("%s: a whole GPU granted as %s" % (name, g))
            others = [q["metadata"]["name"] for q in self.t.gpu_pods()
                      if q["metadata"]["name"] != name and g["uuid"] in
                      q["metadata"].get("annotations", {}).get(GRANT, "")]
            if others:
                fail("%s's whole GPU %s is shared with %s" % (name, g["uuid"], others))
        elif g["memory"] != mem or g["compute"] != compute:
            fail("%s granted memory %d compute %d; the manifest asks %d and %d" %
                 (name, g["memory"], g["compute"], mem, compute))
        self.t.check_state()
        ctr = self.created(name, cname)
        env = env_of(ctr)
        if env.get("CUDA_VISIBLE_DEVICES") != g["uuid"]:
            fail("%s/%s: CUDA_VISIBLE_DEVICES=%r, granted %s" % (
                name, cname, env.get("CUDA_VISIBLE_DEVICES"), g["uuid"]))
        mounts = {m["containerPath"]: m for m in ctr.get("mounts", [])}
        conf = mounts.get("/etc/gpufrac/shim.conf")
        if not conf or not conf["hostPath"].startswith(self.state + "/"):
            fail("%s/%s: no shim config mount: %s" % (name, cname, sorted(mounts)))
        with open(conf["hostPath"]) as f:
            text = f.read().splitlines()
        want = []
        if mem:
            want.append("memory.%s = %d" % (g["uuid"], mem))
        if compute:
            want.append("compute = %d" % compute)
        for line in want:
            if line not in text:
                fail("%s/%s: the shim config lacks %r:\n%s" % (name, cname, line,
                                                              "\n".join(text)))
        if mem is None and (any(ln.startswith("memory.") for ln in text) or any(
                ln.startswith("compute =") and ln != "compute = 100" for ln in text)):
            fail("%s/%s: a whole GPU with a limit:\n%s" % (name, cname, "\n".join(text)))
        inv = {x["uuid"]: x for x in self.t.inventory(NODE)["gpus"]}
        dev = "/dev/nvidia%d" % inv[g["uuid"]]["index"]
        if dev not in [x["containerPath"] for x in ctr.get("devices", [])]:
            fail("%s/%s: no %s" % (name, cname, dev))
        extra = ""
        if example == "llm-server.yaml":
            extra = self.check_model(p, name, cname, env, mounts)
        log("examples/%s: %s Running on %s, granted %s (memory %s, compute %s), "
            "CUDA_VISIBLE_DEVICES=%s, shim config %s%s" % (
                example, name, NODE, g["uuid"], g["memory"], g["compute"],
                env["CUDA_VISIBLE_DEVICES"], want or "without limits", extra))

    def check_model(self, p, name, cname, env, mounts):
        view = mounts.get("/gpufrac/models")
        if not view or not view.get("readonly"):
            fail("%s/%s: no read-only model view: %s" % (name, cname, sorted(mounts)))
        if env.get("GPUFRAC_MODEL_DIR") != "/gpufrac/models/tiny-llm":
            fail("%s/%s: GPUFRAC_MODEL_DIR=%r" % (name, cname, env.get("GPUFRAC_MODEL_DIR")))

        def model_ready():
            o = self.api.get("/api/v1/namespaces/%s/pods/%s" % (NS, name))
            return any(c["type"] == "gpufrac.io/model-ready" and c["status"] == "True"
                       for c in o["status"].get("conditions", [])) and ready(o)
        wait_for("%s's gpufrac.io/model-ready True and the pod Ready" % name,
                 model_ready, 60)
        files = sorted(os.listdir(os.path.join(view["hostPath"], "tiny-llm")))
        if files != sorted(MODEL_FILES):
            fail("%s: the model view holds %s" % (name, files))
        return "; model view %s, Ready by gpufrac.io/model-ready" % files

    def created(self, pod_name, cname):
        mine = [r for r in self.kl.created()
                if r["sandboxConfig"]["metadata"]["name"] == pod_name and
                r["config"]["metadata"]["name"] == cname]
        if len(mine) != 1:
            fail("fakecri recorded %d CreateContainer requests for %s/%s" %
                 (len(mine), pod_name, cname))
        return mine[0]["config"]

    def run(self):
        self.setup()
        have = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".yaml"))
        mine = sorted(WANT) + ["dra-claim-share.yaml"]
        if have != sorted(mine):
            fail("examples/ holds %s; this test and test_dra.py apply %s" % (have, mine))
        for ex in WANT:
            self.check(ex)
        self.c.check_alive()
        self.kl.alive()


def main():
    a = e2e_args(__doc__, 2)
    if not a:
        return 2
    (k8s_bin, gpufrac), keep = a
    state = {}

    def body(c):
        kl = state["kl"] = Kubelet(c)
        c.start(scheduler=False)
        c.start_scheduler(managed=HAMI)
        try:
            Examples(c, kl).run()
        finally:
            kl.stop()

    def tails(c):
        kl = state.get("kl")
        for p in c.extra + (kl.procs if kl else []):
            log("%s log ends:\n%s" % (p.name, p.tail(20)))
    return run_once("e2e examples", lambda: Cluster(k8s_bin, gpufrac, keep),
                    body, tails)


if __name__ == "__main__":
    sys.exit(main())
