#!/usr/bin/env python3
"""The Helm chart's own scheduler on a real control plane (CTest label e2e;
issue 30, items 1, 2 and 6).

Usage: test_helm_scheduler.py K8S_BIN HELM GPUFRAC [--keep]

The control plane's kube-scheduler runs without any gpufrac configuration
(no extender, profile default-scheduler only), as on a managed cluster.
`helm install` of deploy/helm/gpufrac with its default values (the path to
gpufrac's own kube-scheduler; tests/e2e/helm-scheduler-values.yaml changes
only the node pool's slots).  Then, on the real API server and with the
real binaries:

1. The MutatingAdmissionPolicy is in the release (the API server serves
   admissionregistration.k8s.io/v1 MutatingAdmissionPolicy by default) and
   mutates: a pod asking only gpufrac.io/gpu-memory is stored with
   gpufrac.io/gpu: 1 in limits and requests and schedulerName gpufrac; a
   pod without GPUs, and a GPU pod naming another scheduler, keep theirs.
2. Two kube-scheduler processes run exactly as the rendered Deployment's
   pods say (their command, the ConfigMap their volume mounts, a token of
   their ServiceAccount bound to the pod for what the pod's in-cluster
   configuration would give), with the extender run as its Deployment's
   pod (test_helm.py's way).  Only the kube-scheduler's listen address and
   port, the config file's directory and the extender's URL (no kube-proxy
   here: loopback) are changed.  One takes the Lease; the share pods are
   bound with grants by profile gpufrac.  The leader is killed (SIGKILL);
   the other takes the Lease and binds the next share pod.
3. With the admission policy's binding deleted, a share pod sent to
   gpufrac without gpufrac.io/gpu is refused by the extender with the fix
   in its FailedScheduling event.
4. `helm upgrade` with extender.accept={hami,kai} and an extra managed
   resource: the binding is back, the extender's Deployment runs --accept
   hami,kai, the scheduler's configuration manages HAMi's names and its
   pods are rolled, and a HAMi pod (nvidia.com/gpumem) and a KAI pod
   (gpu-fraction, no resources) are mutated and bound by the upgraded
   scheduler and extender (run from the new pods).
Exit 0 only when every step passed.
"""

import json
import os
import signal
import sys

import yaml  # Debian's python3-yaml: run with /usr/bin/python3

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (ApiError, Cluster, Failure, Proc, e2e_args, free_port,  # noqa: E402
                     log, run_once, wait_for)
from test_helm import CHART, RELEASE, RNS, HelmE2E  # noqa: E402
from test_k8s import GRANT, NS, pod  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
VALUES = os.path.join(HERE, "helm-scheduler-values.yaml")
PROFILE = "gpufrac"
LEASE = "gpufrac-kube-scheduler"
A100 = "A100-80GB"


def fail(msg):
    raise Failure(msg)


def flag_map(cmd):
    """--name=value arguments as {name: value}; anything else fails."""
    out = {}
    for a in cmd[1:]:
        if not a.startswith("--") or "=" not in a:
            fail("kube-scheduler argument %r is not --name=value" % a)
        k, v = a[2:].split("=", 1)
        out[k] = v
    return out


class SchedulerE2E(HelmE2E):
    def __init__(self, c, helm_path):
        super().__init__(c, helm_path)
        self.ks = {}  # pod name -> Proc, the kube-schedulers running now
        self.ks_all = []  # every kube-scheduler started (stopped at the end)

    # ---- the chart's kube-scheduler, as kubelet would run its pod ----------
    def ks_pods(self, want_hash=None):
        ps = self.api.items("/api/v1/namespaces/%s/pods" % RNS,
                            labelSelector="app.kubernetes.io/name=gpufrac-kube-scheduler")
        if want_hash:
            ps = [p for p in ps if p["metadata"].get("annotations", {})
                  .get("gpufrac.io/config-hash") == want_hash]
        return sorted(ps, key=lambda p: p["metadata"]["name"])

    def run_kube_scheduler(self, p):
        name = p["metadata"]["name"]
        spec = p["spec"]
        c = spec["containers"][0]
        cmd = c["command"]
        if cmd[0] != "kube-scheduler" or c.get("args"):
            fail("the chart's kube-scheduler pod runs %s %s" % (cmd, c.get("args")))
        if not c["image"].startswith("registry.k8s.io/kube-scheduler:v1.37."):
            fail("image %s is not the cluster's kube-scheduler v1.37" % c["image"])
        flags = flag_map(cmd)
        mount = [m for m in c["volumeMounts"] if m["name"] == "config"][0]["mountPath"]
        cm_name = [v for v in spec["volumes"] if v["name"] == "config"][0]["configMap"]["name"]
        rel = os.path.relpath(flags["config"], mount)
        if rel.startswith(".."):
            fail("--config %s is not under the config mount %s" % (flags["config"], mount))
        cm = self.api.get("/api/v1/namespaces/%s/configmaps/%s" % (RNS, cm_name))
        cfg = yaml.safe_load(cm["data"][rel])
        if "clientConnection" in cfg:
            fail("the chart's configuration names a kubeconfig: %s" % cfg["clientConnection"])
        # The pod's in-cluster configuration: its ServiceAccount's token
        # bound to the pod, as kubelet projects it.
        kc = self.c.pod_kubeconfig("ks-" + name, spec["serviceAccountName"], p, RNS)
        cfg["clientConnection"] = {"kubeconfig": kc}
        svc = self.api.get("/api/v1/namespaces/%s/services/gpufrac-scheduler" % RNS)
        want = "http://%s:%d/gpufrac" % (svc["spec"]["clusterIP"],
                                         svc["spec"]["ports"][0]["port"])
        ext = cfg["extenders"][0]
        if ext["urlPrefix"] != want:
            fail("the scheduler calls %s, the Service is %s" % (ext["urlPrefix"], want))
        ext["urlPrefix"] = "http://127.0.0.1:%d/gpufrac" % self.c.ext_port
        d = self.c.path("ks-" + name)
        os.makedirs(d, exist_ok=True)
        local = os.path.join(d, rel)
        with open(local, "w") as f:
            yaml.safe_dump(cfg, f)
        flags.update({"config": local, "bind-address": "127.0.0.1",
                      "secure-port": str(free_port()),
                      # what in-cluster configuration gives the delegated
                      # authentication and authorization of its HTTPS port
                      "authentication-kubeconfig": kc,
                      "authorization-kubeconfig": kc})
        argv = [os.path.join(self.c.bin, "kube-scheduler")] + \
            ["--%s=%s" % kv for kv in flags.items()]
        log("kube-scheduler as pod %s: %s" % (name, " ".join(cmd)))
        # Not a gpufrac process (Cluster.spawn's exit-0 rule is gpufrac's).
        self.ks[name] = Proc("ks-" + name, argv, self.c.path("ks-%s.log" % name))
        self.ks_all.append(self.ks[name])
        return self.ks[name]

    def stop_all(self):
        for p in self.ks_all:
            p.stop(10)
        for p in list(self.c.extra):
            self.c.stop_gpufrac(p, 10)
        self.c.extra = []
        self.ks = {}

    def leader(self, procs, timeout=90):
        """The one of procs that logged taking the Lease."""
        def who():
            for n, p in procs.items():
                if not p.alive():
                    continue
                try:
                    with open(p.logpath, "rb") as f:
                        text = f.read().decode("utf-8", "replace")
                except OSError:
                    continue
                # client-go's leaderelection: "Successfully acquired lease"
                # lock="NS/NAME"
                if any("Successfully acquired lease" in ln and
                       "%s/%s" % (RNS, LEASE) in ln for ln in text.splitlines()):
                    return n
            dead = [n for n, p in procs.items() if not p.alive() and p.p.returncode != -9]
            if dead:
                fail("kube-scheduler %s exited:\n%s" % (dead[0], procs[dead[0]].tail()))
            return None
        return wait_for("a kube-scheduler leading (Lease %s/%s)" % (RNS, LEASE), who, timeout)

    def stored(self, name, ns=NS):
        return self.api.get("/api/v1/namespaces/%s/pods/%s" % (ns, name))

    def dry_run_mutated(self):
        """A server-side dry run of a memory-only pod: mutated yet?"""
        p = pod("probe", gpu=False, mem="1Gi")
        r = self.api.request("POST", "/api/v1/namespaces/%s/pods" % NS, p,
                             query={"dryRun": "All"})
        return "gpufrac.io/gpu" in r["spec"]["containers"][0]["resources"].get("limits", {})

    def scheduled_by(self, name, ns=NS):
        """The reporting component of pod name's Scheduled event."""
        for e in self.api.items("/api/v1/namespaces/%s/events" % ns):
            if e["involvedObject"].get("name") == name and e.get("reason") == "Scheduled":
                return e.get("reportingComponent") or e.get("source", {}).get("component")
        return None

    def bound_by_gpufrac(self, names, shares=True):
        got = self.wait_bound(names, 90)
        for n, p in got.items():
            if GRANT not in p["metadata"].get("annotations", {}):
                fail("pod %s bound without a grant: the extender did not bind it" % n)
            if p["spec"]["schedulerName"] != PROFILE:
                fail("pod %s has schedulerName %s" % (n, p["spec"]["schedulerName"]))
        for n in names:
            by = wait_for("pod %s's Scheduled event" % n, lambda: self.scheduled_by(n), 30)
            if by != PROFILE:
                fail("pod %s was scheduled by %s, not profile %s" % (n, by, PROFILE))
        if shares:  # gpufrac's names: every GPU within its capacity
            self.check_state()
        return got

    # ---- the scenario -------------------------------------------------------
    def run(self):
        try:
            self.scenario()
        finally:
            self.stop_all()

    def scenario(self):
        self.c.namespace(NS)
        r = self.helm("install", RELEASE, CHART, "-n", RNS, "--create-namespace",
                      "-f", VALUES)
        log("helm install: %s" % " ".join(r.stdout.split()[:12]))
        man = [d for d in yaml.safe_load_all(
            self.helm("get", "manifest", RELEASE, "-n", RNS).stdout) if d]
        kinds = {(o["apiVersion"], o["kind"]) for o in man}
        for k in (("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"),
                  ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"),
                  ("apps/v1", "Deployment")):
            if k not in kinds:
                fail("the release has no %s %s (kinds: %s)" % (k[0], k[1], sorted(kinds)))
        if any(o["kind"] == "ConfigMap" and o["metadata"]["name"] ==
               "gpufrac-kube-scheduler-config" for o in man):
            fail("the default release has the control-plane ConfigMap")
        log("release: gpufrac's kube-scheduler and MutatingAdmissionPolicy v1 installed")

        self.add_node("n1", "4x" + A100)
        self.c.patch_inventory("n1", 4, gpu_model=A100)

        # 1. The admission policy, on the real API server.
        wait_for("the admission policy mutating pods", self.dry_run_mutated, 30)
        self.create(pod("mem-only", gpu=False, mem="20Gi", model=A100))
        other = pod("other-sched", gpu=False, mem="1Gi")
        other["spec"]["schedulerName"] = "someone-else"
        cpu = pod("cpu-only")
        cpu["metadata"]["labels"] = {"e2e": "cpu"}
        self.create(other, cpu)
        p = self.stored("mem-only")
        res = p["spec"]["containers"][0]["resources"]
        if res["limits"].get("gpufrac.io/gpu") != "1" or \
                res["requests"].get("gpufrac.io/gpu") != "1" or \
                p["spec"]["schedulerName"] != PROFILE:
            fail("mem-only stored as %s, schedulerName %s" % (res, p["spec"]["schedulerName"]))
        o = self.stored("other-sched")
        if o["spec"]["schedulerName"] != "someone-else" or \
                o["spec"]["containers"][0]["resources"]["limits"].get("gpufrac.io/gpu") != "1":
            fail("other-sched stored as %s" % o["spec"])
        if self.stored("cpu-only")["spec"]["schedulerName"] != "default-scheduler":
            fail("a pod without GPUs was sent to gpufrac")
        log("admission: mem-only got gpufrac.io/gpu: 1 (limits and requests) and "
            "schedulerName gpufrac; other-sched kept its scheduler; cpu-only untouched")
        wait_for("cpu-only bound by the cluster's own scheduler", lambda: self.stored(
            "cpu-only")["spec"].get("nodeName") == "n1", 60)

        # 2. The chart's kube-scheduler, two replicas, and the extender.
        self.run_extender()
        ps = wait_for("the two kube-scheduler pods of the chart's Deployment",
                      lambda: len(self.ks_pods()) == 2 and self.ks_pods(), 60)
        for p in ps:
            self.run_kube_scheduler(p)
        first = self.leader(self.ks)
        log("kube-scheduler %s leads" % first)
        got = self.bound_by_gpufrac(["mem-only"])
        log("mem-only bound to %s by profile gpufrac through the extender: grant %s" %
            (got["mem-only"]["spec"]["nodeName"],
             got["mem-only"]["metadata"]["annotations"][GRANT][:120]))
        self.create(pod("share-1", mem="10Gi", compute=20, model=A100))
        self.bound_by_gpufrac(["share-1"])
        if self.stored("other-sched")["spec"].get("nodeName"):
            fail("other-sched (schedulerName someone-else) was bound")

        self.ks[first].kill9()
        log("killed the leader %s (SIGKILL)" % first)
        self.create(pod("after-failover", mem="8Gi", model=A100))
        rest = {n: p for n, p in self.ks.items() if n != first}
        second = self.leader(rest)
        self.bound_by_gpufrac(["after-failover"])
        log("kube-scheduler %s took the Lease and bound after-failover" % second)

        # 3. Without the policy, the extender refuses a share pod that lacks
        #    gpufrac.io/gpu, with the fix in its events.
        self.api.delete("/apis/admissionregistration.k8s.io/v1/"
                        "mutatingadmissionpolicybindings/gpufrac-gpu-pods")
        wait_for("the admission policy no longer mutating",
                 lambda: not self.dry_run_mutated(), 30)
        bare = pod("no-slot", gpu=False, mem="4Gi")
        bare["spec"]["schedulerName"] = PROFILE
        self.create(bare)

        def refused():
            for e in self.events("no-slot"):
                if e.startswith("FailedScheduling") and \
                        "asks for a GPU share without gpufrac.io/gpu" in e and \
                        "add gpufrac.io/gpu: 1" in e:
                    return e
        e = wait_for("no-slot's FailedScheduling event with the extender's reason",
                     refused, 60)
        if self.stored("no-slot")["spec"].get("nodeName"):
            fail("no-slot was bound")
        log("no-slot refused: %s" % e[:240])
        self.delete_pod("no-slot")

        # 4. helm upgrade with --accept hami and an extra managed resource.
        hami = pod("hami-1", gpu=False)
        hami["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpumem": "4096"}
        hami["metadata"]["name"] = "hami-before"
        self.create(hami)
        if self.stored("hami-before")["spec"]["schedulerName"] != "default-scheduler":
            fail("a HAMi pod was mutated before extender.accept named hami")
        self.delete_pod("hami-before")
        old_hash = self.api.get("/apis/apps/v1/namespaces/%s/deployments/%s" % (RNS, LEASE))[
            "spec"]["template"]["metadata"]["annotations"]["gpufrac.io/config-hash"]
        self.helm("upgrade", RELEASE, CHART, "-n", RNS, "-f", VALUES,
                  "--set", "extender.accept={hami,kai}",
                  "--set", "extender.extraManagedResources={nvidia.com/gpu}")
        st = json.loads(self.helm("status", RELEASE, "-n", RNS, "-o", "json").stdout)
        if st["info"]["status"] != "deployed" or st["version"] != 2:
            fail("after helm upgrade: %s, revision %s" % (st["info"]["status"], st["version"]))
        dep = self.api.get("/apis/apps/v1/namespaces/%s/deployments/gpufrac-scheduler" % RNS)
        a = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        if "--accept" not in a or a[a.index("--accept") + 1] != "hami,kai":
            fail("the extender's Deployment after the upgrade: %s" % a)
        ksd = self.api.get("/apis/apps/v1/namespaces/%s/deployments/%s" % (RNS, LEASE))
        new_hash = ksd["spec"]["template"]["metadata"]["annotations"]["gpufrac.io/config-hash"]
        if new_hash == old_hash:
            fail("the kube-scheduler's pod template did not change with its configuration")
        cfg = yaml.safe_load(self.api.get("/api/v1/namespaces/%s/configmaps/%s" % (RNS, LEASE))
                             ["data"]["config.yaml"])
        managed = {m["name"] for m in cfg["extenders"][0]["managedResources"]}
        if not {"nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpu"} <= managed:
            fail("managedResources after the upgrade: %s" % sorted(managed))
        self.api.get("/apis/admissionregistration.k8s.io/v1/"
                     "mutatingadmissionpolicybindings/gpufrac-gpu-pods")
        log("helm upgrade: revision 2, --accept hami,kai, HAMi's names managed, "
            "the policy's binding back")
        wait_for("the upgraded policy mutating HAMi pods", lambda: "gpufrac.io/gpu" in
                 self.api.request("POST", "/api/v1/namespaces/%s/pods" % NS, hami,
                                  query={"dryRun": "All"})["spec"]["containers"][0]
                 ["resources"]["limits"], 30)
        # The upgraded pods: the old processes go, the new pods' run (first:
        # the old scheduler and extender would place the new pods by the
        # old configuration, as they do until a real rollout replaces them).
        self.stop_all()
        self.run_extender(pick=lambda x: "--accept" in x["spec"]["containers"][0]["args"])
        newp = wait_for("a kube-scheduler pod of the upgraded template",
                        lambda: self.ks_pods(new_hash), 60)
        self.run_kube_scheduler(newp[0])
        self.leader(self.ks)
        hami["metadata"]["name"] = "hami-1"
        self.create(hami)
        h = self.stored("hami-1")
        if h["spec"]["schedulerName"] != PROFILE or \
                h["spec"]["containers"][0]["resources"]["requests"].get("gpufrac.io/gpu") != "1":
            fail("hami-1 stored as %s" % h["spec"])
        # A KAI pod: annotations only, no resources at all (the policy
        # writes the container's limits and requests whole).
        kai = pod("kai-1", gpu=False)
        kai["spec"]["containers"][0]["resources"] = {}
        kai["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
        self.create(kai)
        k = self.stored("kai-1")
        kr = k["spec"]["containers"][0]["resources"]
        if k["spec"]["schedulerName"] != PROFILE or kr.get("limits") != {"gpufrac.io/gpu": "1"} \
                or kr.get("requests") != {"gpufrac.io/gpu": "1"}:
            fail("kai-1 stored as %s, schedulerName %s" % (kr, k["spec"]["schedulerName"]))
        log("admission after the upgrade: hami-1 and kai-1 (gpu-fraction, no resources) "
            "got gpufrac.io/gpu: 1 and schedulerName gpufrac")
        got = self.bound_by_gpufrac(["hami-1", "kai-1"], shares=False)
        g = json.loads(got["hami-1"]["metadata"]["annotations"][GRANT])
        if g["containers"][0]["gpus"][0]["memory"] != 4096 << 20:
            fail("hami-1's grant %s: want 4096 MiB" % g)
        k = json.loads(got["kai-1"]["metadata"]["annotations"][GRANT])
        if k["containers"][0]["gpus"][0].get("compute") != 50:
            fail("kai-1's grant %s: want a 50%% share" % k)
        log("hami-1 (nvidia.com/gpumem 4096) and kai-1 (gpu-fraction 0.5) bound by the "
            "upgraded scheduler and extender: 4096 MiB and 50% grants")


def main():
    a = e2e_args(__doc__, 3)
    if not a:
        return 2
    (k8s_bin, helm_path, gpufrac), keep = a
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if not os.access(helm_path, os.X_OK):
        print("no helm at %s: run scripts/install-k8s" % helm_path)
        print("helm scheduler e2e: FAILED")
        return 1

    def body(c):
        c.start(scheduler=False)
        # The cluster's own kube-scheduler: no extender, default-scheduler only.
        c.start_scheduler(extender=False)
        SchedulerE2E(c, helm_path).run()
        c.check_alive()

    def on_error(c):
        c.log_dead()
        for p in c.extra:
            log("%s log ends:\n%s" % (p.name, p.tail(15)))
        for f in sorted(os.listdir(c.dir)):
            if f.startswith("ks-") and f.endswith(".log"):
                with open(c.path(f), "rb") as fh:
                    lines = fh.read().decode("utf-8", "replace").splitlines()
                log("%s ends:\n%s" % (f, "\n".join(lines[-15:])))
    return run_once("helm scheduler e2e", lambda: Cluster(k8s_bin, gpufrac, keep), body,
                    on_error)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ApiError as e:
        print(e)
        sys.exit(1)
