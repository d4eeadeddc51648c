#!/usr/bin/env python3
"""The node agent's DRA kubelet plugin under the real kubelet v1.37.2
(CTest label e2e; docs/dra-node.md, "Under the real kubelet").

Usage: test_dra_kubelet.py K8S_BIN GPUFRAC [--keep]

The control plane of cluster.py with deploy/dra applied, kube-scheduler
with deploy/dra/kube-scheduler-config.yaml, and kubelet on the fake CRI
runtime test_kubelet.py uses (tests/k8s/fakecri, recording every
CreateContainer request), in a mount namespace of its own (needs root).
`gpufrac node --mode dra --fake-gpus 1xH100-80GB` serves the kubelet
plugin in the directories kubelet watches.

  1. registration through kubelet's plugin watcher (kubelet calls GetInfo
     and NotifyRegistrationStatus on the agent's registration socket);
  2. mode 1: a pod whose claim the real kube-scheduler allocated runs: the
     CDI device the agent answered reaches CreateContainer;
  3. firstAvailable: a claim whose result is "gpu/h100"; its container
     names request "gpu" and gets the CDI device (kubelet matches the
     container's request name against the names the plugin answers);
  4. the agent restarted with claims prepared, now dra_allocator = gpufrac
     (its device carries the allocator taint): its checkpoint answers the
     same, nothing prepared twice; mode 2: a gated pod that `gpufrac
     scheduler --dra allocate` allocated runs with its CDI device;
  5. kubelet restarted with claims prepared: the pods keep running, the
     agent's checkpoint and CDI specs unchanged (nothing lost, nothing
     prepared twice);
  6. the pods deleted: kubelet calls NodeUnprepareResources, the CDI specs
     and per-claim state go, the checkpoint empties.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Failure, Proc, free_port, log, wait_for  # noqa: E402
from kubelet_node import NODE, Kubelet, kubelet_main, node_obj, ready  # noqa: E402
import test_dra  # noqa: E402
from test_dra import DRA, GATES, NS, RES, DRIVER, pod  # noqa: E402


def fail(msg):
    raise Failure(msg)


class DRAKubelet(Kubelet):
    def restart(self):
        """kubelet alone stopped and started again (same root, config,
        certificates): what a kubelet upgrade or crash does."""
        self.kubelet.stop(15)
        self.procs.remove(self.kubelet)
        argv = self.kubelet.argv
        self.kubelet = Proc("kubelet", argv, self.c.path("kubelet-2.log"))
        self.procs.append(self.kubelet)


class Agent:
    def __init__(self, c, kl):
        self.c, self.kl, self.n = c, kl, 0
        self.dir = c.path("agent")
        for sub in ("state", "cdi"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        self.p = None

    def start(self, allocator=None):
        self.n += 1
        conf = os.path.join(self.dir, "node-%d.conf" % self.n)
        with open(conf, "w") as f:
            f.write("state_dir = %s/state\ncdi_dir = %s/cdi\n"
                    "shim_lib = /usr/lib/gpufrac/libgpufrac-cuda.so\n"
                    # kubelet's /var/lib/kubelet is kl.root: the watcher's
                    # directory and the plugins directory below it.
                    "dra_registry_dir = %s/plugins_registry\n"
                    "dra_plugin_dir = %s/plugins/%s\n" %
                    (self.dir, self.dir, self.kl.root, self.kl.root, DRIVER))
            if allocator:
                f.write("dra_allocator = %s\n" % allocator)
            f.write(self.config_extra())
        self.log = "agent-%d" % self.n
        # The admin's kubeconfig: the agent's RBAC is test_dra_node's and
        # test_deploy's subject; this test is about kubelet.
        self.p = self.c.spawn(self.log, [
            self.c.gpufrac, "node", "--mode", "dra", "--fake-gpus", "1xH100-80GB",
            "--node-name", NODE, "--kubeconfig", self.c.admin_kc, "--config", conf,
            "--listen", "127.0.0.1:%d" % free_port(), "--interval", "1"])

    def config_extra(self):
        """More node config lines (test_dra_kubelet_models' cache)."""
        return ""

    def text(self):
        with open(self.c.path(self.log + ".log")) as f:
            return f.read()

    def checkpoint(self):
        try:
            with open(os.path.join(self.dir, "state", "dra", "checkpoint.json")) as f:
                return json.load(f)["claims"]
        except FileNotFoundError:
            return []

    def cdi(self):
        """The claims' CDI specs (gpufrac.io-<uid>_claim.json; the node's
        own spec, gpufrac.io-gpu.json, stays)."""
        return sorted(f for f in os.listdir(os.path.join(self.dir, "cdi"))
                      if f.endswith("_claim.json"))


class Test:
    def __init__(self, c, kl):
        self.c, self.kl = c, kl
        self.t = DRA(c)
        self.api = c.admin
        self.agent = Agent(c, kl)

    def created(self, name):
        out = [r["config"] for r in self.kl.created()
               if r["sandboxConfig"]["metadata"]["name"] == name]
        return out

    def cdi_of(self, ctr):
        """The CDI device names kubelet asked the runtime for: the CRI
        field and, for older runtimes, the cdi.k8s.io annotations."""
        names = [d.get("name") for d in ctr.get("CDIDevices", ctr.get("CDI_devices", []))]
        if not names:
            for k, v in ctr.get("annotations", {}).items():
                if k.startswith("cdi.k8s.io/"):
                    names += v.split(",")
        return sorted(set(names))

    def running(self, name, timeout=120):
        path = "/api/v1/namespaces/%s/pods/%s" % (NS, name)

        def ok():
            self.kl.alive()
            o = self.api.get(path)
            return o if o["status"].get("phase") == "Running" and ready(o) else None
        try:
            return wait_for("pod %s Running" % name, ok, timeout)
        except Failure:
            o = self.api.get(path)
            fail("pod %s: phase %s, node %r, conditions %s; events %s" % (
                name, o["status"].get("phase"), o["spec"].get("nodeName"),
                o["status"].get("conditions"), self.t.events(name)[-4:]))

    def expect_cdi(self, name, claim):
        ctrs = self.created(name)
        if not ctrs:
            fail("no CreateContainer for %s" % name)
        got = self.cdi_of(ctrs[-1])
        want = ["gpufrac.io/gpu=%s_claim" % claim["metadata"]["uid"]]
        if got != want:
            fail("container %s/main: CDI devices %s, the agent answered %s; "
                 "annotations %s" % (name, got, want, ctrs[-1].get("annotations")))
        log("%s/main: CDI devices %s" % (name, got))

    def run(self):
        t = self.t
        t.setup()
        self.kl.start()
        n = wait_for("kubelet to register Node %s Ready" % NODE,
                     lambda: self.kl.alive() and (lambda o: o if o and ready(o) else None)(
                         node_obj(self.c)), 120)
        if n["spec"].get("taints"):
            self.api.merge_patch("/api/v1/nodes/" + NODE, {"spec": {"taints": None}})
        log("Node %s registered by kubelet %s" % (NODE, n["status"]["nodeInfo"]["kubeletVersion"]))

        # 1. registration through the plugin watcher
        self.agent.start()
        wait_for("kubelet registering the DRA driver", lambda: self.agent.p.alive() and
                 "kubelet registered DRA driver" in self.agent.text(), 60)
        wait_for("the agent's slice", lambda: self.api.items(
            RES + "/resourceslices", fieldSelector="spec.nodeName=" + NODE), 30)
        log("1. kubelet registered %s through its plugin watcher" % DRIVER)

        # 2. mode 1: kube-scheduler allocates, kubelet prepares
        self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                        test_dra.template("t-k", "10Gi", 10))
        self.api.create("/api/v1/namespaces/%s/pods" % NS, pod("k1", "t-k"))
        self.running("k1")
        ck = t.claim_of(t.pods()["k1"])
        self.expect_cdi("k1", ck)
        log("2. mode 1: k1 Running with its claim prepared")

        # 3. firstAvailable: result "gpu/h100", container request "gpu"
        fa = test_dra.template("t-fa", "8Gi", 10)
        ex = fa["spec"]["spec"]["devices"]["requests"][0].pop("exactly")
        ex["name"] = "h100"
        fa["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"] = [ex]
        self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS), fa)
        p = pod("fa1", "t-fa")
        p["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu", "request": "gpu"}]
        self.api.create("/api/v1/namespaces/%s/pods" % NS, p)
        self.running("fa1")
        cf = t.claim_of(t.pods()["fa1"])
        reqs = [r["request"] for r in cf["status"]["allocation"]["devices"]["results"]]
        if reqs != ["gpu/h100"]:
            fail("fa1's claim: results for %s, expected gpu/h100" % reqs)
        self.expect_cdi("fa1", cf)
        log("3. firstAvailable: result gpu/h100, container request gpu got its CDI device")

        # 4. the agent restarted with claims prepared, now gpufrac's node
        before = self.agent.checkpoint()
        cdi_before = self.agent.cdi()
        self.c.stop_gpufrac(self.agent.p)
        self.agent.start("gpufrac")
        wait_for("kubelet registering the restarted agent", lambda: self.agent.p.alive() and
                 "kubelet registered DRA driver" in self.agent.text(), 60)
        if self.agent.checkpoint() != before or self.agent.cdi() != cdi_before:
            fail("the agent's restart changed its checkpoint or CDI specs: %s -> %s" %
                 (cdi_before, self.agent.cdi()))

        def tainted():
            s = self.api.items(RES + "/resourceslices", fieldSelector="spec.nodeName=" + NODE)
            return s and s[0]["spec"]["devices"][0].get("taints")
        wait_for("the allocator taint on the agent's device", tainted, 30)
        t.start_extender()
        self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                        test_dra.template("t-g", "10Gi", 10))
        self.api.create("/api/v1/namespaces/%s/pods" % NS, pod("g1", "t-g", gated=True))
        self.running("g1")
        cg = t.claim_of(t.pods()["g1"])
        mgr = [m["manager"] for m in cg["metadata"]["managedFields"]
               if m.get("subresource") == "status"]
        if "gpufrac" not in mgr:
            fail("g1's claim allocated by %s, not gpufrac" % mgr)
        self.expect_cdi("g1", cg)
        uids = sorted(x["uid"] for x in self.agent.checkpoint())
        want = sorted(x["metadata"]["uid"] for x in (ck, cf, cg))
        if uids != want:
            fail("the checkpoint holds %s, expected %s" % (uids, want))
        log("4. agent restarted (checkpoint kept); mode 2: g1 Running on gpufrac's allocation")

        # 5. kubelet restarted with three claims prepared
        before, cdi_before = self.agent.checkpoint(), self.agent.cdi()
        created_before = len(self.kl.created())
        self.kl.restart()
        time.sleep(10)  # kubelet syncs its pods again
        for name in ("k1", "fa1", "g1"):
            self.running(name, 60)
        if self.agent.checkpoint() != before or self.agent.cdi() != cdi_before:
            fail("kubelet's restart changed the agent's checkpoint or CDI specs")
        # kubelet deletes the driver's slices when it restarts (a stranger saw
        # them gone for good: the agent published only when its GPUs changed);
        # the agent (--interval 1) must publish them again
        wait_for("the agent's slice again after kubelet's restart", lambda: self.api.items(
            RES + "/resourceslices", fieldSelector="spec.nodeName=" + NODE), 30)
        self.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                        test_dra.template("t-r", "4Gi", 5))
        self.api.create("/api/v1/namespaces/%s/pods" % NS, pod("r1", "t-r", gated=True))
        self.running("r1", 120)
        log("5. kubelet restarted: pods Running, checkpoint and CDI specs unchanged "
            "(%d more CreateContainer calls); the slice published again, r1 Running" %
            (len(self.kl.created()) - created_before))

        # 6. deleted: unprepared
        for name in ("k1", "fa1", "g1", "r1"):
            self.api.delete("/api/v1/namespaces/%s/pods/%s" % (NS, name), gracePeriodSeconds=30)

        def gone():
            self.kl.alive()
            return not self.agent.checkpoint() and not self.agent.cdi() and not t.pods()
        wait_for("kubelet unpreparing the claims (checkpoint and CDI specs empty, pods gone)",
                 gone, 120)
        log("6. pods deleted: every claim unprepared")
        self.c.check_alive()


def start(c):
    c.start(scheduler=False)
    with open(os.path.join(test_dra.DRA_DEPLOY, "kube-scheduler-config.yaml")) as f:
        c.start_scheduler(config=f.read())


def main():
    return kubelet_main(__doc__, "e2e dra kubelet", lambda c, kl: Test(c, kl).run(),
                        kubelet=DRAKubelet, start=start, feature_gates=GATES)


if __name__ == "__main__":
    sys.exit(main())
