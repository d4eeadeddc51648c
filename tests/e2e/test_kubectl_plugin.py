#!/usr/bin/env python3
"""`kubectl gpufrac` (the plugin) against a real control plane (label e2e).

Usage: test_kubectl_plugin.py K8S_BIN GPUFRAC [--keep]

The real kubectl runs the plugin: GPUFRAC's directory holds the
kubectl-gpufrac symlink the build makes and goes first on PATH, and every
command is `kubectl gpufrac ...` with KUBECONFIG set.  Two nodes run agents
(processes here, no kubelet) whose Pods the harness creates and gives this
machine's address as their pod IP, so the API server's pod proxy reaches
the agents' /metrics the way it reaches a real pod; a third node has no
agent.  Checks top (columns, -o json, -o yaml), describe pod, why-pending
(kube-scheduler's FailedScheduling reasons, and the extender's per node with
--extender), --context and -n.  Then pods written for HAMi and KAI
(docs/migrating.md): the extender runs with --accept hami,kai and
kube-scheduler with HAMi's names in its managedResources, as that page says
to configure them; they are bound with grants that say what their words
meant, and one gpufrac cannot honour stays Pending with the reason.
"""

import json
import os
import socket
import subprocess
import sys
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (Failure, e2e_main, free_port, kubeconfig, log,  # noqa: E402
                     wait_for)
from test_k8s import A100, E2E, NS, SLOTS, T4, Extender, gpus_of, pod  # noqa: E402

GiB = 1 << 30
NODES = {"p1": "2xA100-80GB", "p2": "1xT4-16GB", "p3": "1xT4-16GB"}
AGENTS = ("p1", "p2")  # p3's agent never ran: top says so


def fail(msg):
    raise Failure(msg)


def host_ip():
    """A non-loopback IPv4 address of this machine: the API server refuses
    to proxy to loopback, as it would to a pod's."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout
    for a in out.split():
        if "." in a and not a.startswith("127."):
            return a
    for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
        if not info[4][0].startswith("127."):
            return info[4][0]
    fail("this machine has no non-loopback IPv4 address for the agents' pod IPs")


class PluginTest(E2E):
    def add_plain_node(self, name, spec):
        # Not labelled gpufrac.io/enabled: the DaemonSet makes no pod here;
        # the harness makes the agent's Pod itself (agent_pod below).
        self.c.add_node(name)
        self.set_capacity(name, gpus_of(spec) * SLOTS)

    def run_agent(self, node, spec, ip):
        port = free_port()
        p = self.api.create("/api/v1/namespaces/gpufrac-system/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "gpufrac-node-" + node,
                         "labels": {"app.kubernetes.io/name": "gpufrac-node"}},
            "spec": {"nodeName": node, "serviceAccountName": "gpufrac-node",
                     "containers": [{"name": "agent", "image": "gpufrac",
                                     "ports": [{"name": "metrics",
                                                "containerPort": port}]}]}})
        self.api.request("PATCH", "/api/v1/namespaces/gpufrac-system/pods/%s/status"
                         % p["metadata"]["name"],
                         {"status": {"phase": "Running", "podIP": ip,
                                     "podIPs": [{"ip": ip}]}},
                         "application/merge-patch+json")
        kc = self.c.pod_kubeconfig("agent-" + node, "gpufrac-node", p)
        cfg = self.c.node_conf(node, SLOTS)
        self.agents[node] = self.c.spawn("agent-" + node, [
            self.c.gpufrac, "node", "--fake-gpus", spec, "--node-name", node,
            "--kubeconfig", kc, "--config", cfg,
            "--listen", "%s:%d" % (ip, port), "--interval", "2"])

    def setup_plugin(self):
        self.apply_deploy()
        self.c.namespace(NS)
        ip = host_ip()
        for n, spec in NODES.items():
            self.add_plain_node(n, spec)
        for n in AGENTS:
            self.run_agent(n, NODES[n], ip)
        for n in AGENTS:
            self.wait_inventory(n, gpus_of(NODES[n]))
        # p3 has GPUs in its inventory but no agent: written as an agent
        # that ran once would have left it.
        self.api.merge_patch("/api/v1/nodes/p3", {"metadata": {"annotations": {
            "gpufrac.io/inventory": json.dumps({"version": 1, "gpus": [
                {"index": 0, "uuid": "GPU-p3-0", "model": T4, "memory": 16 * GiB}]})}}})
        tok = self.c.token("gpufrac-scheduler")
        self.ext = Extender(self.c, "extender", self.c.ext_port,
                            self.c.sa_kubeconfig("extender", tok))
        self.ext.proc = self.c.spawn("extender", [
            self.c.gpufrac, "scheduler", "--listen", "127.0.0.1:%d" % self.c.ext_port,
            "--kubeconfig", self.ext.kc, "--accept", "hami,kai"])
        self.ext.ready_leader()
        # The plugin on PATH, kubectl finds it; KUBECONFIG names the
        # cluster (current context "broken": --context picks the good one).
        self.env = dict(os.environ)
        self.env["PATH"] = os.path.dirname(os.path.abspath(self.c.gpufrac)) + \
            os.pathsep + self.env.get("PATH", "")
        kc = json.load(open(self.c.admin_kc))
        kc["clusters"].append({"name": "dead", "cluster": {
            "server": "https://127.0.0.1:%d" % free_port(),
            "certificate-authority": self.c.ca}})
        kc["contexts"].append({"name": "broken", "context": {"cluster": "dead",
                                                              "user": "u"}})
        kc["contexts"][0]["context"]["namespace"] = NS
        kc["current-context"] = "broken"
        self.kc = self.c.path("plugin.kubeconfig")
        with open(self.kc, "w") as f:
            json.dump(kc, f)
        self.env["KUBECONFIG"] = self.kc

    def plugin(self, *args, ok=True):
        r = subprocess.run([os.path.join(self.c.bin, "kubectl"), "gpufrac"] +
                           list(args), env=self.env, capture_output=True,
                           text=True, timeout=60)
        if ok and r.returncode != 0:
            fail("kubectl gpufrac %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                      r.stderr.strip()))
        return r

    def run(self):
        ps = [pod("infer", 1, "20Gi", 30, model=A100),
              pod("small", mem="4Gi", model=A100),
              pod("whole-t4", 1, model=T4)]
        got = self.wait_bound(self.create(*ps))
        grants = self.check_state()
        infer_gpu = grants[NS + "/infer"]["containers"][0]["gpus"][0]

        # --context: the kubeconfig's current context is dead.
        r = self.plugin("top", ok=False)
        if r.returncode == 0:
            fail("top against the dead current context succeeded: %s" % r.stdout)
        r = self.plugin("top", "--context", "e2e")
        lines = r.stdout.splitlines()
        head = lines[0].split()
        if head != ["NODE", "GPU", "MODEL", "SHARES", "COMPUTE", "MEM-USED",
                    "MEM-GRANTED", "MEM-TOTAL", "HOLDERS"]:
            fail("top's header: %r" % lines[0])
        # columns line up: every cell starts where its header does
        starts = [lines[0].index(h) for h in head]
        for ln in lines[1:]:
            for s in starts[1:]:
                if ln[s - 1] != " " or ln[s] == " ":
                    fail("top's columns do not line up:\n%s" % r.stdout)
        rows = {(ln.split()[0], ln.split()[1]): ln.split() for ln in lines[1:]}
        if len(rows) != sum(gpus_of(s) for s in NODES.values()):
            fail("top shows %d GPUs:\n%s" % (len(rows), r.stdout))
        n1 = got["infer"]["spec"]["nodeName"]
        row = rows[(n1, str(infer_gpu["index"]))]
        if "%s/infer" % NS not in row[8].split(",") or row[4] != "30%":
            fail("infer's GPU row: %s" % row)
        # The agents' metrics came through the pod proxy (no container
        # ran, so 0 used); p3 has no agent: unknown, and said on stderr.
        if row[5] != "0":
            fail("infer's GPU: memory used %r, want 0 from its agent" % row[5])
        if rows[("p3", "0")][5] != "<unknown>" or "p3" not in r.stderr:
            fail("p3 (no agent): %s / stderr %r" % (rows[("p3", "0")], r.stderr))
        # An agent pod that is not running (Pending, no IP): said so, not
        # the API server's proxy error (issue 30 item 12).
        self.api.create("/api/v1/namespaces/gpufrac-system/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "gpufrac-node-p3",
                         "labels": {"app.kubernetes.io/name": "gpufrac-node"}},
            "spec": {"nodeName": "p3", "containers": [{"name": "agent",
                                                       "image": "gpufrac"}]}})
        r3 = self.plugin("top", "--context", "e2e")
        want = "node p3: agent pod gpufrac-node-p3 is Pending, not running"
        if want not in r3.stderr or "HTTP 4" in r3.stderr or \
                "<unknown>" not in [ln.split()[5] for ln in r3.stdout.splitlines()
                                    if ln.startswith("p3 ")]:
            fail("top with p3's agent Pending: stderr %r, want %r" % (r3.stderr, want))
        self.api.delete("/api/v1/namespaces/gpufrac-system/pods/gpufrac-node-p3",
                        gracePeriodSeconds="0")
        log("top: %s" % r3.stderr.strip().splitlines()[0])
        v = self.plugin("--version")
        if v.stdout.strip() != "kubectl gpufrac " + \
                subprocess.run([self.c.gpufrac, "version"], capture_output=True,
                               text=True).stdout.split()[1]:
            fail("kubectl gpufrac --version printed %r" % v.stdout)
        wt = got["whole-t4"]["spec"]["nodeName"]
        wrow = [v for k, v in rows.items() if k[0] == wt and NS + "/whole-t4" in v[8]]
        if not wrow or wrow[0][6] != "all" or wrow[0][4] != "100%":
            fail("whole-t4's GPU row: %s" % wrow)
        log("top:\n" + r.stdout)

        j = json.loads(self.plugin("top", "--context=e2e", "-o", "json").stdout)
        y = yaml.safe_load(self.plugin("top", "--context", "e2e", "-oyaml").stdout)
        if j != y:
            fail("top -o json and -o yaml differ:\n%s\n%s" % (j, y))
        mine = [g for g in j if g["UUID"] == infer_gpu["uuid"] and g["node"] == n1]
        if len(mine) != 1 or mine[0]["memoryGrantedBytes"] < 20 * GiB or \
                mine[0]["memoryUsedBytes"] != 0 or \
                "%s/infer" % NS not in mine[0]["holders"]:
            fail("top -o json, infer's GPU: %s" % mine)
        if [g["memoryUsedBytes"] for g in j if g["node"] == "p3"] != [None]:
            fail("top -o json: p3's memory used should be null: %s" % j)

        # describe pod: -n, and the context's namespace (e2e) by default
        r = self.plugin("describe", "pod", "infer", "--context", "e2e")
        if "Node:       %s" % n1 not in r.stdout or infer_gpu["uuid"] not in r.stdout \
                or "20Gi" not in r.stdout or "30%" not in r.stdout:
            fail("describe pod infer:\n%s" % r.stdout)
        log("describe:\n" + r.stdout)
        d = json.loads(self.plugin("describe", "pod", "infer", "-n", NS,
                                   "--context", "e2e", "-o", "json").stdout)
        if d["node"] != n1 or d["grant"][0]["UUID"] != infer_gpu["uuid"] or \
                d["grant"][0]["memoryBytes"] != 20 * GiB or \
                not any(e["reason"] == "Scheduled" for e in d["events"]):
            fail("describe -o json: %s" % d)
        r = self.plugin("describe", "pod", "infer", "-n", "default", "--context",
                        "e2e", ok=False)
        if r.returncode == 0 or "not found" not in r.stderr.lower():
            fail("describe in the wrong namespace: %d %r" % (r.returncode, r.stderr))

        # why-pending: kube-scheduler's reasons, then the extender's per node
        self.create(pod("too-big", 1, "100Gi"))

        def failed():
            return any(e.startswith("FailedScheduling") for e in self.events("too-big"))
        wait_for("too-big's FailedScheduling event", failed, 60)
        r = self.plugin("why-pending", "too-big", "--context", "e2e")
        if "gpu-memory 100Gi" not in r.stdout or not r.stdout.startswith("NODES"):
            fail("why-pending too-big:\n%s" % r.stdout)
        r = self.plugin("why-pending", "too-big", "--context", "e2e", "--extender",
                        "http://127.0.0.1:%d/gpufrac" % self.c.ext_port)
        per = {ln.split()[0]: ln for ln in r.stdout.split("\n\n")[1].splitlines()[1:]}
        if set(per) != set(NODES) or any(" never " not in v for v in per.values()) \
                or "largest GPU on p1 has 80Gi" not in per["p1"]:
            fail("why-pending --extender, per node:\n%s" % r.stdout)
        log("why-pending:\n" + r.stdout)
        j = json.loads(self.plugin("why-pending", "too-big", "--context", "e2e",
                                   "-o", "json").stdout)
        if not j["reasons"] or not all(g["nodes"] >= 1 for g in j["reasons"]) or \
                sum(g["nodes"] for g in j["reasons"]) < len(NODES):
            fail("why-pending -o json reasons: %s" % j)
        r = self.plugin("why-pending", "infer", "--context", "e2e")
        if "not pending" not in r.stdout:
            fail("why-pending on a bound pod: %r" % r.stdout)
        r = self.plugin("top", "-o", "wide", "--context", "e2e", ok=False)
        if r.returncode != 2 or "json and yaml" not in r.stderr:
            fail("-o wide: exit %d %r" % (r.returncode, r.stderr))
        self.delete_pod("too-big")

    def run_migrate(self):
        """HAMi's and KAI's words, read by the extender (--accept)."""
        hami = pod("hami-t4", 1)  # gpufrac.io/gpu: 1, the device plugin's slot
        lim = hami["spec"]["containers"][0]["resources"]["limits"]
        lim.update({"nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "20"})
        hami["metadata"]["annotations"] = {"nvidia.com/use-gputype": "t4"}
        kai = pod("kai-quarter", 1)
        kai["metadata"]["annotations"] = {"gpu-fraction": "0.25",
                                          "gpufrac.io/gpu-model": A100}
        pinned = pod("hami-pinned", 1)
        pinned["spec"]["containers"][0]["resources"]["limits"][
            "nvidia.com/gpumem"] = "1024"
        pinned["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": "GPU-x"}
        got = self.wait_bound(self.create(hami, kai))
        # (check_state reads gpufrac's own names only: the grants here)
        grants = {NS + "/" + n: json.loads(got[n]["metadata"]["annotations"][
            "gpufrac.io/grant"]) for n in got}
        g = grants[NS + "/hami-t4"]["containers"][0]["gpus"][0]
        if got["hami-t4"]["spec"]["nodeName"] not in ("p2", "p3") or \
                g["memory"] != 4096 << 20 or g["compute"] != 20:
            fail("hami-t4 (T4 only, 4096 MiB, 20%% cores) bound to %s with %s" %
                 (got["hami-t4"]["spec"]["nodeName"], g))
        g = grants[NS + "/kai-quarter"]["containers"][0]["gpus"][0]
        # a compute-only share gets the same part of the GPU's memory
        # (docs/scheduler.md, "Compute-only shares"): a quarter of 80 GiB
        if got["kai-quarter"]["spec"]["nodeName"] != "p1" or \
                g["memory"] != 20 * GiB or g["compute"] != 25:
            fail("kai-quarter (a quarter of an A100) bound to %s with %s" %
                 (got["kai-quarter"]["spec"]["nodeName"], g))
        self.create(pinned)

        def refused():
            return any(e.startswith("FailedScheduling") and
                       "nvidia.com/use-gpuuuid" in e
                       for e in self.events("hami-pinned"))
        wait_for("hami-pinned's FailedScheduling naming use-gpuuuid", refused, 60)
        r = self.plugin("why-pending", "hami-pinned", "--context", "e2e")
        if "does not pin a pod to GPU UUIDs" not in r.stdout:
            fail("why-pending hami-pinned:\n%s" % r.stdout)
        top = json.loads(self.plugin("top", "--context", "e2e", "-o", "json").stdout)
        held = [g for g in top if NS + "/kai-quarter" in g["holders"]]
        if len(held) != 1 or held[0]["node"] != "p1":
            fail("top: kai-quarter's GPU: %s" % held)
        # describe reads the request as the extender does (gpufrac/podreq.h)
        r = self.plugin("describe", "pod", "hami-t4", "--context", "e2e")
        if "Request:    a share of 1 GPU: 4Gi memory, 20.0 percent compute " \
                "(HAMi's names)" not in r.stdout:
            fail("describe hami-t4, its request:\n%s" % r.stdout)
        log("migrate: HAMi and KAI pods bound with their grants; a UUID pin "
            "refused:\n" + r.stdout)
        # An annotation edited after the bind (issue 30): the pod still
        # holds its grant, which describe shows as what it holds; the
        # request as read now is labelled as such, after it.
        self.c.kubectl("annotate", "--overwrite", "-n", NS, "pod", "kai-quarter",
                       "gpu-fraction=0.5")
        r = self.plugin("describe", "pod", "kai-quarter", "--context", "e2e")
        out = r.stdout
        g, q = out.find("Grant:      node p1: what the pod holds"), out.find("Request:")
        if g < 0 or q < g or "50.0 percent compute (KAI's" not in out[q:] \
                or "as the extender would read it now" not in out[q:] \
                or "20Gi" not in out[g:q] or "25%" not in out[g:q]:
            fail("describe kai-quarter (granted a quarter, annotated 0.5 since): "
                 "want the grant as what it holds, then the request labelled as "
                 "read now:\n%s" % out)
        d = json.loads(self.plugin("describe", "pod", "kai-quarter", "--context", "e2e",
                                   "-o", "json").stdout)
        if d.get("bookedFrom") != "grant" or \
                "read it now" not in d.get("requestRead", ""):
            fail("describe kai-quarter -o json: %s" % d)
        self.c.kubectl("annotate", "--overwrite", "-n", NS, "pod", "kai-quarter",
                       "gpu-fraction=0.25")
        log("describe, request edited after the bind:\n" + out)

    def run_slots(self):
        """Issue 30 item 5 on the real kube-scheduler: node p4, 4 x T4 with
        4 device-plugin slots a GPU (16 gpufrac.io/gpu, as `slots = 4`
        makes it), and 17 pods of 512Mi / 5 percent pinned to it: 16 bind
        (packed on the first GPUs), the 17th pends on "Insufficient
        gpufrac.io/gpu" with GPUs idle.  why-pending names the slots, and
        the extender's /filter (--extender) says they, not the GPUs, are
        full."""
        self.c.add_node("p4", {"e2e-slots": "p4"})
        self.set_capacity("p4", 16)
        self.api.merge_patch("/api/v1/nodes/p4", {"metadata": {"annotations": {
            "gpufrac.io/inventory": json.dumps({"version": 1, "gpus": [
                {"index": g, "uuid": "GPU-p4-%d" % g, "model": T4,
                 "memory": 16 * GiB} for g in range(4)]})}}})
        pods = []
        for i in range(17):
            p = pod("slot-%02d" % i, 1, "512Mi", 5)
            p["spec"]["nodeSelector"] = {"e2e-slots": "p4"}
            pods.append(p)
        self.create(*pods[:16])
        got = self.wait_bound(["slot-%02d" % i for i in range(16)])
        used = {json.loads(p["metadata"]["annotations"]["gpufrac.io/grant"])[
            "containers"][0]["gpus"][0]["index"] for p in got.values()}
        if len(used) == 4:
            fail("16 small shares spread over all four GPUs: %s" % sorted(used))
        self.create(pods[16])

        def failed():
            return any(e.startswith("FailedScheduling") and
                       "Insufficient gpufrac.io/gpu" in e
                       for e in self.events("slot-16"))
        wait_for("slot-16's FailedScheduling event", failed, 60)
        r = self.plugin("why-pending", "slot-16", "--context", "e2e", "--extender",
                        "http://127.0.0.1:%d/gpufrac" % self.c.ext_port)
        per = {ln.split()[0]: ln for ln in r.stdout.split("\n\n")[1].splitlines()[1:]}
        if "16 of the 16 device-plugin slots of node p4 are held, while its " \
                "GPUs have room" not in per.get("p4", "") or \
                "hint: kube-scheduler found no free gpufrac.io/gpu slot" \
                not in r.stdout:
            fail("why-pending slot-16:\n%s" % r.stdout)
        log("why-pending, the slots held:\n" + r.stdout)
        for p in pods:
            self.delete_pod(p["metadata"]["name"])

    def run_followup(self):
        """Issue 30 follow-up, items 4 and 6, on the real control plane: a
        DRA pod whose claim names a DeviceClass nobody made pends with a
        message not in the "N nodes are available" form, printed as it is;
        --extender not a URL is a usage error before any request, an
        extender that does not answer a failure."""
        self.api.create("/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % NS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "noclass"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.gpufrac.io"}}]}}})
        p = pod("dra-noclass")
        p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "noclass"}]
        self.create(p)

        def failed():
            return any(e.startswith("FailedScheduling") for e in self.events("dra-noclass"))
        wait_for("dra-noclass's FailedScheduling event", failed, 60)
        j = json.loads(self.plugin("why-pending", "dra-noclass", "--context", "e2e",
                                   "-o", "json").stdout)
        msg = j["schedulerMessage"]
        r = self.plugin("why-pending", "dra-noclass", "--context", "e2e")
        if "gpu.gpufrac.io" not in msg or "gpu.gpufrac.io" not in r.stdout or \
                (not j["reasons"] and msg not in r.stdout):
            fail("why-pending dra-noclass (message %r):\n%s" % (msg, r.stdout))
        log("why-pending, a DRA claim without its DeviceClass:\n" + r.stdout)
        r = self.plugin("why-pending", "dra-noclass", "--context", "e2e",
                        "--extender", "not a url", ok=False)
        if r.returncode != 2 or "not a url" not in r.stderr:
            fail("--extender 'not a url': exit %d %r" % (r.returncode, r.stderr))
        dead = "http://127.0.0.1:%d/gpufrac" % free_port()
        r = self.plugin("why-pending", "dra-noclass", "--context", "e2e",
                        "--extender", dead, ok=False)
        if r.returncode != 1 or dead not in r.stderr or \
                "gpu.gpufrac.io" not in r.stdout:
            fail("--extender unreachable: exit %d\n%s%s" % (r.returncode, r.stdout,
                                                            r.stderr))
        self.delete_pod("dra-noclass")

    def run_overlap(self):
        """top flags a GPU whose grants overlap beyond it (issue 30: the
        double grant a restarted extender made): node p5, one T4, with
        two pods created bound to it, one granted the whole GPU and one
        6Gi of it, as the tester found them."""
        self.c.add_node("p5", {"e2e-overlap": "p5"})
        self.set_capacity("p5", 4)
        uuid = "GPU-p5-0"
        self.api.merge_patch("/api/v1/nodes/p5", {"metadata": {"annotations": {
            "gpufrac.io/inventory": json.dumps({"version": 1, "gpus": [
                {"index": 0, "uuid": uuid, "model": T4, "memory": 16 * GiB}]})}}})
        for n, mem, pct in (("ov-whole", 0, 100), ("ov-six", 6 * GiB, 0)):
            p = pod(n, 1, "6Gi" if mem else None)
            p["spec"]["nodeName"] = "p5"
            p["metadata"]["annotations"] = {"gpufrac.io/grant": json.dumps({
                "version": 1, "node": "p5", "containers": [{"name": "main", "gpus": [
                    {"uuid": uuid, "index": 0, "memory": mem, "compute": pct}]}]})}
            self.create(p)
        r = self.plugin("top", "--context", "e2e", "-o", "json")
        rows = json.loads(r.stdout)
        over = [(g["node"], g["gpu"]) for g in rows if g.get("overcommitted")]
        if over != [("p5", 0)] or any("overcommitted" not in g for g in rows):
            fail("top -o json: overcommitted GPUs %s, want only p5's GPU 0:\n%s" %
                 (over, r.stdout))
        r = self.plugin("top", "--context", "e2e")
        want = ("node p5 GPU 0: grants overlap beyond the GPU (100% compute, all "
                "memory granted of 16Gi, one of them the whole GPU), held by ")
        line = [ln for ln in r.stderr.splitlines() if want in ln]
        if len(line) != 1 or NS + "/ov-whole" not in line[0] or \
                NS + "/ov-six" not in line[0]:
            fail("top, overlapping grants: want %r on stderr:\n%s" % (want, r.stderr))
        log("top, two grants of one GPU:\n" + r.stderr)
        for n in ("ov-whole", "ov-six"):
            self.delete_pod(n)

    def run_not_asked(self):
        """kube-scheduler without gpufrac's extender (the scheduler step
        forgotten, issue 30 item 8): a memory share pends on "Insufficient
        gpufrac.io/gpu-memory", and why-pending says the extender was never
        asked and where the configuration is."""
        self.c.procs["kube-scheduler"].stop()
        self.c.start_scheduler(extender=False)
        self.create(pod("forgot", 1, "1Gi"))

        def failed():
            return any(e.startswith("FailedScheduling") and
                       "gpufrac.io/gpu-memory" in e for e in self.events("forgot"))
        wait_for("forgot's FailedScheduling event", failed, 60)
        r = self.plugin("why-pending", "forgot", "--context", "e2e")
        if "hint: the gpufrac extender was never asked" not in r.stdout or \
                "docs/install.md" not in r.stdout:
            fail("why-pending forgot:\n%s" % r.stdout)
        log("why-pending, kube-scheduler without the extender:\n" + r.stdout)
        self.delete_pod("forgot")


def main():
    def body(c):
        c.start(scheduler=False)
        c.start_scheduler(managed=["nvidia.com/gpumem",
                                   "nvidia.com/gpumem-percentage",
                                   "nvidia.com/gpucores"])
        t = PluginTest(c)
        t0 = time.monotonic()
        t.setup_plugin()
        t.run()
        t.run_migrate()
        t.run_slots()
        t.run_followup()
        t.run_overlap()
        t.run_not_asked()
        c.check_alive()
        log("kubectl plugin: passed in %.1f s" % (time.monotonic() - t0))
    return e2e_main(__doc__, "e2e kubectl plugin", body)


if __name__ == "__main__":
    sys.exit(main())
