#!/usr/bin/env python3
"""gpufrac doctor against a real control plane (CTest label e2e; issue 30,
item 9).

Usage: test_doctor.py K8S_BIN HELM GPUFRAC [--keep]

`helm install` of deploy/helm/gpufrac as test_helm_scheduler.py does (its
values: the default pool, gpufrac's own kube-scheduler).  The harness plays
kubelet for the chart's pods it runs (the agent, the extender, one
kube-scheduler, started as test_helm_scheduler.py starts them) and writes
their pod status as kubelet would (Running, Ready, a pod IP), so the
EndpointSlice controller gives the extender's Service its endpoint.  A
share pod is bound through the chart's scheduler.  Then:

1. `gpufrac doctor` and `kubectl gpufrac doctor` (the real kubectl running
   the plugin) exit 0 with every check PASS or SKIP.
2. Each failure is induced, doctor exits 1 and names the check with what
   it saw, and the cluster is put back: a labelled node without its agent;
   an agent that read no driver; the profile without its extender; the
   extender's address outside the service range; the extender not Ready;
   a NetworkPolicy that does not admit the kube-scheduler pods; a pod
   holding a grant in a container without gpufrac.io/gpu; a stuck
   placeholder.  After all that, doctor is green again.
3. `helm upgrade` with extender.dra=score (DRA without a dra pool: no
   DeviceClasses): the dra check fails naming gpu.gpufrac.io; with
   deploy/dra/deviceclasses.yaml applied it passes.
4. `helm upgrade` to scheduler.mode=controlPlane with schedulerCIDRs: the
   doctor reads the control-plane ConfigMap and admits the control-plane
   node by its InternalIP; with the node's address outside the CIDRs the
   networkpolicy check fails naming it.
5. `helm uninstall` leaves the nodes' inventories and the pods' grants and
   guard annotations (checked); docs/install.md's Uninstall block, run as
   written, removes them all.
Exit 0 only when every step passed.
"""

import copy
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (Cluster, Failure, e2e_args, free_port, log,  # noqa: E402
                     run_once, wait_for)
from test_helm import CHART, RELEASE, RNS  # noqa: E402
from test_helm_scheduler import VALUES, SchedulerE2E  # noqa: E402
from test_k8s import GRANT, NS, pod  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
A100 = "A100-80GB"


def fail(msg):
    raise Failure(msg)


class DoctorE2E(SchedulerE2E):
    def __init__(self, c, helm_path):
        super().__init__(c, helm_path)
        self.ips = 0

    def mark(self, name, ready=True):
        """What kubelet writes for a running pod of the release."""
        p = self.api.get("/api/v1/namespaces/%s/pods/%s" % (RNS, name))
        ip = p["status"].get("podIP")
        if not ip:
            self.ips += 1
            ip = "10.244.0.%d" % self.ips
        st = "True" if ready else "False"
        self.api.request("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (RNS, name), {
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                       "conditions": [{"type": "Ready", "status": st},
                                      {"type": "ContainersReady", "status": st}]}},
            ctype="application/merge-patch+json")

    def doctor(self, *extra, want_rc, plugin=False):
        if plugin:
            # kubectl passes its environment: the plugin reads KUBECONFIG
            env = dict(os.environ, KUBECONFIG=self.c.admin_kc,
                       PATH="%s:%s" % (os.path.dirname(self.c.gpufrac),
                                       os.environ.get("PATH", "")))
            argv = [os.path.join(self.c.bin, "kubectl"), "gpufrac", "doctor"] + list(extra)
        else:
            env = None
            argv = [self.c.gpufrac, "doctor", "--kubeconfig", self.c.admin_kc] + list(extra)
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        if want_rc is not None and r.returncode != want_rc:
            fail("%s: exit %d, expected %d:\n%s%s" % (" ".join(argv[-3:]), r.returncode,
                                                       want_rc, r.stdout, r.stderr))
        return r.stdout

    def checks(self, *extra, want_rc):
        out = self.doctor("-o", "json", *extra, want_rc=want_rc)
        return {c["check"]: c for c in json.loads(out)}

    def green(self, what):
        cs = self.checks(want_rc=0)
        bad = [c for c in cs.values() if c["status"] == "fail"]
        if bad:
            fail("%s: doctor failed %s" % (what, bad))
        for name in ("agents", "driver", "scheduler", "networkpolicy", "grants",
                     "placeholders"):
            if cs[name]["status"] != "pass":
                fail("%s: check %s is %s: %s" % (what, name, cs[name]["status"],
                                                 cs[name]["message"]))
        return cs

    def failing(self, name, want, *extra):
        """doctor exits 1, check name failed saying want, with a fix."""
        cs = self.checks(*extra, want_rc=1)
        c = cs.get(name)
        if not c or c["status"] != "fail" or want not in c["message"] or not c.get("fix"):
            fail("check %s should fail saying %r: %s" % (name, want, c))
        others = [x["check"] for x in cs.values() if x["status"] == "fail" and x is not c]
        if others:
            fail("inducing %s also failed %s" % (name, others))
        log("doctor: FAIL %s: %s (fix: %s)" % (name, c["message"][:160], c["fix"][:120]))

    def scenario(self):
        self.c.namespace(NS)
        self.helm("install", RELEASE, CHART, "-n", RNS, "--create-namespace", "-f", VALUES)
        self.add_node("n1", "4x" + A100)
        self.start_agent("n1", "4x" + A100)
        self.wait_inventory("n1", 4)
        self.mark(self.agent_pod("n1")["metadata"]["name"])
        self.run_extender()
        self.mark(self.ext_pod)
        ks = wait_for("the chart's kube-scheduler pods", lambda: self.ks_pods(), 60)
        self.run_kube_scheduler(ks[0])
        self.mark(ks[0]["metadata"]["name"])
        self.leader(self.ks)
        self.create(pod("share-1", mem="10Gi", compute=20, model=A100))
        got = self.bound_by_gpufrac(["share-1"])
        wait_for("the extender's Service with a ready endpoint", lambda: any(
            e.get("conditions", {}).get("ready") for s in self.api.items(
                "/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices" % RNS,
                labelSelector="kubernetes.io/service-name=gpufrac-scheduler")
            for e in s.get("endpoints") or []), 60)

        # 1. green, from gpufrac and from kubectl's plugin
        cs = self.green("a correct install")
        out = self.doctor(want_rc=0, plugin=True)
        if "All checks passed." not in out or "PASS  scheduler" not in out:
            fail("kubectl gpufrac doctor printed:\n%s" % out)
        log("doctor green (gpufrac and kubectl gpufrac): %s" %
            "; ".join("%s %s" % (n, c["status"]) for n, c in cs.items()))

        # -n goes into API paths: a DNS-1123 label, or a usage error
        # (issue 30 follow-up, item 5)
        r = subprocess.run([self.c.gpufrac, "doctor", "--kubeconfig", self.c.admin_kc,
                            "-n", "x/../../../api/v1/nodes?"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 2 or "DNS-1123" not in r.stderr:
            fail("doctor -n 'x/../..': exit %d %r" % (r.returncode, r.stderr))
        # an API server that does not answer: that one failure, nothing else
        with open(self.c.admin_kc) as f:
            kc = json.load(f)
        dead = "https://127.0.0.1:%d" % free_port()
        for cl in kc["clusters"]:
            cl["cluster"]["server"] = dead
        dead_kc = self.c.path("dead.kubeconfig")
        with open(dead_kc, "w") as f:
            json.dump(kc, f)
        r = subprocess.run([self.c.gpufrac, "doctor", "--kubeconfig", dead_kc],
                           capture_output=True, text=True, timeout=60)
        lines = [ln for ln in r.stdout.splitlines()
                 if ln[:4] in ("PASS", "FAIL", "SKIP")]
        if r.returncode != 1 or len(lines) != 1 or \
                not lines[0].startswith("FAIL  api-server") or dead not in lines[0]:
            fail("doctor, API server unreachable: exit %d\n%s" % (r.returncode, r.stdout))
        log("doctor, API server unreachable: %s" % lines[0])

        # 2. each failure, induced and put back
        # two labelled nodes with no agent running: the failure and its fix
        # name the same (first) node's pod
        self.add_node("n2", "4x" + A100)
        self.add_node("n3", "4x" + A100)
        wait_for("the DaemonSet's pods on n2 and n3",
                 lambda: self.agent_pod("n2") and self.agent_pod("n3"), 60)
        self.failing("agents", "node n2")
        c = self.checks(want_rc=1)["agents"]
        p2 = self.agent_pod("n2")["metadata"]["name"]
        p3 = self.agent_pod("n3")["metadata"]["name"]
        if p2 not in c["message"] or p2 not in c["fix"] or p3 in c["fix"]:
            fail("agents: the failure and its fix name different pods: %s" % c)
        for n in ("n2", "n3"):
            self.api.merge_patch("/api/v1/nodes/" + n, {"metadata": {"labels": {
                "gpufrac.io/enabled": None}}})
            # the DaemonSet controller deletes its pod; no kubelet confirms it
            self.api.delete("/api/v1/namespaces/%s/pods/%s" % (
                RNS, self.agent_pod(n)["metadata"]["name"]), gracePeriodSeconds="0")

        inv = self.inventory("n1")
        self.c.stop_gpufrac(self.agents.pop("n1"), 5)
        self.c.extra = [p for p in self.c.extra if p.alive()]
        inv.pop("driver", None)
        self.api.merge_patch("/api/v1/nodes/n1", {"metadata": {"annotations": {
            "gpufrac.io/inventory": json.dumps(inv)}}})
        self.failing("driver", "node n1: the agent read no NVIDIA driver")
        self.start_agent("n1", "4x" + A100)
        wait_for("n1's inventory with its driver again",
                 lambda: "driver" in (self.inventory("n1") or {}), 30)

        cm_path = "/api/v1/namespaces/%s/configmaps/gpufrac-kube-scheduler" % RNS
        cm = self.api.get(cm_path)
        key, text = next(iter(cm["data"].items()))

        def set_config(t):
            self.api.merge_patch(cm_path, {"data": {key: t}})
        set_config("\n".join(ln for ln in text.splitlines() if "urlPrefix" not in ln))
        self.failing("scheduler", "calls no extender")
        set_config(text.replace("10.96.0.88", "10.200.0.88"))
        self.failing("scheduler", "10.200.0.88 is outside the service range (10.96.0.0/12)")
        set_config(text)

        self.mark(self.ext_pod, ready=False)
        wait_for("the endpoint not ready", lambda: not any(
            e.get("conditions", {}).get("ready") for s in self.api.items(
                "/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices" % RNS,
                labelSelector="kubernetes.io/service-name=gpufrac-scheduler")
            for e in s.get("endpoints") or []), 60)
        self.failing("scheduler", "no ready endpoint")
        self.mark(self.ext_pod)

        np_path = ("/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies/"
                   "gpufrac-scheduler" % RNS)
        spec = self.api.get(np_path)["spec"]
        bad = copy.deepcopy(spec)
        for rule in bad["ingress"]:
            for f in rule.get("from", []):
                if "podSelector" in f:
                    f["podSelector"] = {"matchLabels": {"component": "kube-scheduler"}}
        self.api.merge_patch(np_path, {"spec": bad})
        self.failing("networkpolicy", "does not admit gpufrac's kube-scheduler pods")
        self.api.merge_patch(np_path, {"spec": spec})
        # helm's again: the hand edit's field manager dropped, or a later
        # helm upgrade that changes the policy would conflict with it
        mf = self.api.get(np_path)["metadata"]["managedFields"]
        self.api.merge_patch(np_path, {"metadata": {"managedFields": [
            m for m in mf if m["manager"] != "Python-urllib"]}})

        # A pod granted while the admission policy was off (the extender
        # refuses such pods now): bound with a grant, no gpufrac.io/gpu.
        bpath = ("/apis/admissionregistration.k8s.io/v1/"
                 "mutatingadmissionpolicybindings/gpufrac-gpu-pods")
        binding = self.api.get(bpath)
        self.api.delete(bpath)
        wait_for("the admission policy no longer mutating",
                 lambda: not self.dry_run_mutated(), 30)
        g = json.loads(got["share-1"]["metadata"]["annotations"][GRANT])
        g["containers"][0]["name"] = "main"
        old = pod("granted-no-slot", gpu=False, mem="10Gi")
        old["spec"]["nodeName"] = "n1"
        old["spec"]["schedulerName"] = "someone-else"
        old["metadata"]["annotations"] = {GRANT: json.dumps(g)}
        self.create(old)
        binding["metadata"] = {"name": binding["metadata"]["name"],
                               "labels": binding["metadata"].get("labels", {}),
                               "annotations": binding["metadata"].get("annotations", {})}
        self.api.create("/apis/admissionregistration.k8s.io/v1/"
                        "mutatingadmissionpolicybindings", binding)
        self.failing("grants", "pod %s/granted-no-slot: container main" % NS)
        self.delete_pod("granted-no-slot")

        ph = pod("placeholder-x", gpu=1)
        ph["metadata"]["labels"] = {"gpufrac.io/placeholder": "true"}
        ph["spec"]["schedulerName"] = "nobody"
        self.create(ph)
        self.checks(want_rc=0)  # Pending, but not yet for 10 minutes
        self.failing("placeholders", "placeholder %s/placeholder-x" % NS,
                     "--stuck-after", "0s")
        self.delete_pod("placeholder-x")
        wait_for("granted-no-slot and placeholder-x gone", lambda: not [
            p for p in self.api.items("/api/v1/namespaces/%s/pods" % NS)
            if p["metadata"]["name"] in ("granted-no-slot", "placeholder-x")], 60)

        self.green("the install put back")
        log("doctor green again after every induced failure was put back")

        # 3. DRA without its DeviceClasses
        self.helm("upgrade", RELEASE, CHART, "-n", RNS, "-f", VALUES,
                  "--set", "extender.dra=score")
        cs = self.checks(want_rc=1)
        if cs["dra"]["status"] != "fail" or "DeviceClass gpu.gpufrac.io" not in \
                cs["dra"]["message"]:
            fail("dra with extender.dra=score and no DeviceClasses: %s" % cs["dra"])
        log("doctor: FAIL dra: %s" % cs["dra"]["message"])
        self.c.kubectl("apply", "-f", os.path.join(REPO, "deploy", "dra",
                                                   "deviceclasses.yaml"))
        cs = self.checks(want_rc=cs["scheduler"]["status"] == "fail" and 1 or 0)
        if cs["dra"]["status"] != "pass":
            fail("dra with the DeviceClasses applied: %s" % cs["dra"])
        log("doctor: PASS dra: %s" % cs["dra"]["message"])
        self.control_plane_path()
        self.uninstall()

    def control_plane_path(self):
        """scheduler.mode controlPlane: the doctor reads the ConfigMap for the
        cluster's kube-scheduler and judges the NetworkPolicy by the
        control-plane nodes' addresses."""
        self.c.add_node("cp1", {"node-role.kubernetes.io/control-plane": ""})
        self.api.request("PATCH", "/api/v1/nodes/cp1/status", {"status": {
            "addresses": [{"type": "InternalIP", "address": "192.0.2.10"}]}},
            "application/merge-patch+json")
        self.helm("upgrade", RELEASE, CHART, "-n", RNS, "-f", VALUES, "--set",
                  "extender.dra=score", "--set", "scheduler.mode=controlPlane",
                  "--set", "extender.networkPolicy.schedulerCIDRs={192.0.2.10/32}")
        cs = self.checks(want_rc=cs_rc(self))
        if cs["networkpolicy"]["status"] != "pass" or \
                "1 control-plane address" not in cs["networkpolicy"]["message"] or \
                "no kube-scheduler configuration" in cs["scheduler"]["message"] or \
                "gpufrac-kube-scheduler" not in json.dumps(cs["scheduler"]):
            fail("the control-plane path: %s / %s" % (cs["networkpolicy"], cs["scheduler"]))
        log("controlPlane: PASS networkpolicy: %s; scheduler %s: %s" % (
            cs["networkpolicy"]["message"], cs["scheduler"]["status"],
            cs["scheduler"]["message"][:160]))
        self.api.request("PATCH", "/api/v1/nodes/cp1/status", {"status": {
            "addresses": [{"type": "InternalIP", "address": "192.0.2.99"}]}},
            "application/merge-patch+json")
        cs = self.checks(want_rc=1)
        c = cs["networkpolicy"]
        if c["status"] != "fail" or "192.0.2.99 (cp1)" not in c["message"] or \
                "schedulerCIDRs" not in c.get("fix", ""):
            fail("a control-plane node outside schedulerCIDRs: %s" % c)
        log("doctor: FAIL networkpolicy: %s (fix: %s)" % (c["message"], c["fix"]))

    def leftovers(self):
        """What gpufrac wrote on objects outside the release."""
        out = []
        for n in self.api.items("/api/v1/nodes"):
            if "gpufrac.io/inventory" in n["metadata"].get("annotations", {}):
                out.append("node %s: gpufrac.io/inventory" % n["metadata"]["name"])
        for p in self.api.items("/api/v1/pods"):
            a = p["metadata"].get("annotations", {})
            keys = [k for k in a if k.startswith("gpufrac.io/grant") or
                    k.startswith("gpufrac.io/guard-") or
                    (k == "karpenter.sh/do-not-disrupt" and "gpufrac.io/guard-owns" in a)]
            if keys:
                out.append("pod %s/%s: %s" % (p["metadata"]["namespace"],
                                              p["metadata"]["name"], ", ".join(sorted(keys))))
        return out

    def uninstall(self):
        """helm uninstall, then docs/install.md's Uninstall block as written."""
        self.stop_all()  # the harness's gpufrac processes, as kubelet would
        self.helm("uninstall", RELEASE, "-n", RNS)
        left = self.leftovers()
        if not any("gpufrac.io/grant" in x for x in left) or \
                not any("inventory" in x for x in left):
            fail("after helm uninstall, expected grants and inventories left: %s" % left)
        log("after helm uninstall: %s" % "; ".join(left))
        with open(os.path.join(REPO, "docs", "install.md")) as f:
            doc = f.read()
        sec = doc[doc.index("### Uninstall"):]
        block = sec[sec.index("```sh\n") + 6:]
        block = block[:block.index("```")]
        env = dict(os.environ, KUBECONFIG=self.c.admin_kc,
                   PATH="%s:%s" % (self.c.bin, os.environ.get("PATH", "")))
        r = subprocess.run(["sh", "-ec", block], capture_output=True, text=True,
                           timeout=120, env=env)
        if r.returncode != 0:
            fail("docs/install.md's uninstall block: exit %d: %s" %
                 (r.returncode, (r.stderr or r.stdout).strip()))
        left = self.leftovers()
        if left:
            fail("after docs/install.md's uninstall block: %s" % left)
        log("docs/install.md's uninstall block removed them: %s" %
            " ".join(r.stdout.split())[:300])


def cs_rc(t):
    """doctor's exit status now: 1 if any check fails (the extender's pods
    rolled by the upgrade are not run here, so its endpoint may be gone)."""
    out = t.doctor("-o", "json", want_rc=None)
    return 1 if any(c["status"] == "fail" for c in json.loads(out)) else 0


def main():
    a = e2e_args(__doc__, 3)
    if not a:
        return 2
    (k8s_bin, helm_path, gpufrac), keep = a
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

    def body(c):
        c.start(scheduler=False)
        # The cluster's own kube-scheduler: no extender (binds the agents).
        c.start_scheduler(extender=False)
        DoctorE2E(c, helm_path).run()
    return run_once("doctor e2e", lambda: Cluster(k8s_bin, gpufrac, keep), body,
                    lambda c: c.log_dead())


if __name__ == "__main__":
    sys.exit(main())
