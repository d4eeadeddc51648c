#!/usr/bin/env python3
"""The Helm chart installed into a real Kubernetes control plane (CTest
label e2e).

Usage: test_helm.py K8S_BIN HELM GPUFRAC [--keep]

`helm install` of deploy/helm/gpufrac (values tests/e2e/helm-values.yaml:
two node pools, a PriorityClass) into cluster.py's control plane; every
object of the release must be on the API server.  No kubelet runs, so the
harness plays kubelet for the chart's pods: for each DaemonSet pod and for
one extender pod it runs gpufrac with that pod's own command or args, its
ConfigMap's node.conf and its downward-API environment, and a token bound
to that pod (as kubelet projects it), changing only what a container's
mounts and network would: listen addresses on loopback, host directories
in a temporary directory, --fake-gpus for NVML.  kube-scheduler runs with
the kube-scheduler configuration from the chart's ConfigMap (its urlPrefix
pointed at the extender's loopback port: no kube-proxy).  Then GPU pods
are bound with grants, and helm uninstall removes the release.  First,
every values file of tests/helm/values is rendered and sent to the API
server as a server-side dry run.  Exit 0 only when every step passed.
"""

import glob
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import yaml  # Debian's python3-yaml: run with /usr/bin/python3

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (Cluster, Failure, e2e_args, free_port, log, run_once,  # noqa: E402
                     wait_for)
from test_k8s import E2E, GRANT, NS, gpus_of, pod  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHART = os.path.join(REPO, "deploy", "helm", "gpufrac")
VALUES = os.path.join(HERE, "helm-values.yaml")
RELEASE, RNS = "gpufrac", "gpufrac-system"
# node -> (fake GPUs, node pool)
NODES = {"n1": ("4xA100-80GB", "a100"), "n2": ("4xT4-16GB", "t4")}


def fail(msg):
    raise Failure(msg)


def arg(argv, flag):
    if flag not in argv:
        fail("%s has no %s" % (argv, flag))
    return argv[argv.index(flag) + 1]


def replace_arg(argv, flag, value):
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


class HelmE2E(E2E):
    def __init__(self, c, helm_path):
        super().__init__(c)
        self.helm_path = helm_path
        self.manifest = []

    def helm(self, *args, check=True):
        env = dict(os.environ)
        for k in ("CACHE", "CONFIG", "DATA"):
            env["HELM_%s_HOME" % k] = self.c.path("helm", k.lower())
        r = subprocess.run([self.helm_path, "--kubeconfig", self.c.admin_kc] + list(args),
                           capture_output=True, text=True, timeout=300, env=env)
        if check and r.returncode != 0:
            fail("helm %s: exit %d: %s" % (" ".join(args), r.returncode,
                                           (r.stderr or r.stdout).strip()))
        return r

    # ---- what kubelet would do for the chart's pods -------------------------
    def downward_env(self, p, container):
        env = {}
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
                continue
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            obj = p
            for part in path.split("."):
                obj = obj[part]
            env[e["name"]] = obj
        return env

    def pod_token_kc(self, sa, p, name):
        return self.c.pod_kubeconfig(name, sa, p, RNS)

    def run_agent(self, node, fake):
        p = wait_for("the chart's DaemonSet pod on %s" % node, lambda: self.agent_pod(node), 90)
        owner = p["metadata"]["ownerReferences"][0]
        want = "gpufrac-node-" + NODES[node][1]
        if owner["kind"] != "DaemonSet" or owner["name"] != want:
            fail("the agent pod on %s belongs to %s %s, expected DaemonSet %s" %
                 (node, owner["kind"], owner["name"], want))
        spec = p["spec"]
        c = spec["containers"][0]
        if spec["serviceAccountName"] != "gpufrac-node":
            fail("agent pod runs as %s" % spec["serviceAccountName"])
        cmd = c["command"]
        if cmd[:2] != ["gpufrac", "node"]:
            fail("agent pod command %s" % cmd)
        # The pod's config volume: its ConfigMap's node.conf, mounted at
        # /etc/gpufrac (the chart's --config path).
        vol = [v for v in spec["volumes"] if v["name"] == "config"][0]["configMap"]["name"]
        mount = [m for m in c["volumeMounts"] if m["name"] == "config"][0]["mountPath"]
        conf_path = arg(cmd, "--config")
        if os.path.dirname(conf_path) != mount:
            fail("--config %s is not in the config mount %s" % (conf_path, mount))
        cm = self.api.get("/api/v1/namespaces/%s/configmaps/%s" % (RNS, vol))
        conf = cm["data"][os.path.basename(conf_path)]
        # The host directories the pod mounts, here under the cluster dir.
        d = self.c.path("node-" + node)
        for sub in ("state", "cdi", "plugins"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        local = os.path.join(d, "node.conf")
        with open(local, "w") as f:
            f.write(conf + "\n# the pod's hostPath mounts, here\nstate_dir = %s/state\n"
                    "cdi_dir = %s/cdi\nkubelet_dir = %s/plugins\n" % (d, d, d))
        env = dict(os.environ, **self.downward_env(p, c))
        if env.get("NODE_NAME") != node:
            fail("NODE_NAME from the downward API is %s" % env.get("NODE_NAME"))
        kc = self.pod_token_kc("gpufrac-node", p, "agent-" + node)
        argv = [self.c.gpufrac] + cmd[1:]
        argv = replace_arg(argv, "--listen", "127.0.0.1:%d" % free_port())
        argv = replace_arg(argv, "--config", local)
        argv += ["--fake-gpus", fake, "--kubeconfig", kc, "--interval", "2"]
        log("agent %s: %s (node.conf from ConfigMap %s: %s)" %
            (node, " ".join(cmd), vol, " ".join(conf.split())))
        self.agents[node] = self.c.spawn("agent-" + node, argv, env)
        return conf

    def run_extender(self, pick=None):
        """gpufrac scheduler as an extender pod of the chart's Deployment:
        the first by name, or the first for which pick(pod) is true."""
        def first_pod():
            ps = self.api.items("/api/v1/namespaces/%s/pods" % RNS,
                                labelSelector="app.kubernetes.io/name=gpufrac-scheduler")
            ps = [x for x in ps if not pick or pick(x)]
            return sorted(ps, key=lambda x: x["metadata"]["name"])[0] if ps else None
        p = wait_for("an extender pod of the chart's Deployment", first_pod, 60)
        c = p["spec"]["containers"][0]
        a = c["args"]
        if a[0] != "scheduler" or p["spec"]["serviceAccountName"] != "gpufrac-scheduler":
            fail("extender pod args %s, service account %s" %
                 (a, p["spec"]["serviceAccountName"]))
        self.health = free_port()
        argv = [self.c.gpufrac] + replace_arg(
            replace_arg(a, "--listen", "127.0.0.1:%d" % self.c.ext_port),
            "--health-listen", "127.0.0.1:%d" % self.health)
        argv += ["--kubeconfig", self.pod_token_kc("gpufrac-scheduler", p,
                                                      "extender-" + p["metadata"]["name"])]
        env = dict(os.environ, **self.downward_env(p, c))
        log("extender as pod %s: %s" % (p["metadata"]["name"], " ".join(a)))
        self.ext_proc = self.c.spawn("extender-" + p["metadata"]["name"], argv, env)
        self.ext_pod = p["metadata"]["name"]

        def leading():
            if not self.ext_proc.alive():
                fail("the extender exited:\n%s" % self.ext_proc.tail())
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.health,
                                        timeout=5) as r:
                return any(ln.startswith("gpufrac_extender_leader ") and
                           float(ln.split()[1]) == 1
                           for ln in r.read().decode().splitlines())
        wait_for("the extender leading", leading, 60)

    # ---- the scenario ---------------------------------------------------------
    def dry_runs(self):
        """Every rendering tests/helm checks, accepted by the real API server
        (server-side dry run: its schemas, defaulting and validation), each
        in a namespace of its own.  The ServiceMonitor is left out: the
        Prometheus Operator's CRD is not installed here."""
        files = [None] + sorted(glob.glob(os.path.join(REPO, "tests", "helm", "values",
                                                        "*.yaml")))
        for vf in files:
            name = os.path.basename(vf)[:-5] if vf else "default"
            ns = "dry-" + name
            # This API server's version and its MutatingAdmissionPolicy v1,
            # as helm install would learn them.
            args = ["template", RELEASE, CHART, "-n", ns, "--kube-version",
                    self.api.get("/version")["gitVersion"], "--api-versions",
                    "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"] + \
                (["-f", vf] if vf else [])
            objs = [d for d in yaml.safe_load_all(self.helm(*args).stdout) if d]
            left = [o["kind"] for o in objs if o["kind"] == "ServiceMonitor"]
            objs = [o for o in objs if o["kind"] != "ServiceMonitor"]
            self.api.create("/api/v1/namespaces", {"metadata": {"name": ns}})
            path = self.c.path("dry-%s.yaml" % name)
            with open(path, "w") as f:
                yaml.safe_dump_all(objs, f)
            r = self.c.kubectl("apply", "--server-side", "--dry-run=server",
                               "--field-manager=e2e", "-f", path, check=False)
            if r.returncode != 0:
                fail("values %s: the API server refuses the rendering: %s" %
                     (name, (r.stderr or r.stdout).strip()))
            log("values %s: %d objects accepted by the API server (dry run)%s" %
                (name, len(objs), " (left out: %s)" % ", ".join(left) if left else ""))

    def run(self):
        self.dry_runs()
        r = self.helm("install", RELEASE, CHART, "-n", RNS, "--create-namespace",
                      "-f", VALUES)
        log("helm install: %s" % " ".join(r.stdout.split()[:12]))
        st = json.loads(self.helm("status", RELEASE, "-n", RNS, "-o", "json").stdout)
        if st["info"]["status"] != "deployed":
            fail("helm status: %s" % st["info"]["status"])
        if "urlPrefix: http://10.96.0.88:8888/gpufrac" not in st["info"].get("notes", ""):
            fail("NOTES.txt does not show the kube-scheduler configuration: %s" %
                 st["info"].get("notes"))
        man = self.helm("get", "manifest", RELEASE, "-n", RNS).stdout
        self.manifest = [d for d in yaml.safe_load_all(man) if d]
        with open(self.c.path("release.yaml"), "w") as f:
            f.write(man)
        got = json.loads(self.c.kubectl("get", "-f", self.c.path("release.yaml"),
                                        "-o", "json").stdout)["items"]
        want = sorted((o["kind"], o["metadata"]["name"]) for o in self.manifest)
        have = sorted((o["kind"], o["metadata"]["name"]) for o in got)
        if want != have:
            fail("the release's objects %s, the API server has %s" % (want, have))
        kinds = {k for k, _ in want}
        for k in ("DaemonSet", "Deployment", "Service", "ConfigMap", "ClusterRole",
                  "ValidatingAdmissionPolicy", "NetworkPolicy", "PriorityClass"):
            if k not in kinds:
                fail("the release has no %s" % k)
        svc = self.api.get("/api/v1/namespaces/%s/services/gpufrac-scheduler" % RNS)
        if svc["spec"]["clusterIP"] != "10.96.0.88":
            fail("the extender's Service got ClusterIP %s" % svc["spec"]["clusterIP"])
        log("helm: release %s deployed, its %d objects on the API server" %
            (RELEASE, len(want)))

        cm = self.api.get("/api/v1/namespaces/%s/configmaps/gpufrac-kube-scheduler-config"
                          % RNS)
        self.c.start_scheduler(config=cm["data"]["kube-scheduler-config.yaml"])
        log("kube-scheduler running with the chart's configuration")

        self.c.namespace(NS)
        for n, (fake, pool) in NODES.items():
            self.add_node(n, fake)
            self.api.merge_patch("/api/v1/nodes/" + n,
                                 {"metadata": {"labels": {"gpufrac.io/pool": pool}}})
        confs = {n: self.run_agent(n, fake) for n, (fake, _) in NODES.items()}
        if "log = info" not in confs["n2"] or "log" in confs["n1"]:
            fail("the pools' node.conf files: %s" % confs)
        for n, (fake, _) in NODES.items():
            self.wait_inventory(n, gpus_of(fake))
        log("the chart's agents published n1's and n2's inventories")

        self.run_extender()
        wait_for("the leader's role label on its pod", lambda: self.api.get(
            "/api/v1/namespaces/%s/pods/%s" % (RNS, self.ext_pod))["metadata"]
            .get("labels", {}).get("gpufrac.io/scheduler-role") == "leader", 30)
        log("extender leading, pod %s labelled leader (the Service's selector)" % self.ext_pod)

        share = pod("share", 1, "20Gi", 30, model="A100-80GB")
        share["spec"]["priorityClassName"] = "gpufrac-serving"
        got = self.wait_bound(self.create(share, pod("on-t4", mem="8Gi", model="T4-16GB")))
        grants = self.check_state()
        if got["share"]["spec"]["nodeName"] != "n1" or got["on-t4"]["spec"]["nodeName"] != "n2":
            fail("bound to %s and %s" % (got["share"]["spec"]["nodeName"],
                                         got["on-t4"]["spec"]["nodeName"]))
        g = grants[NS + "/share"]["containers"][0]["gpus"][0]
        if g["memory"] != 20 << 30 or g["compute"] != 30:
            fail("share's grant %s" % g)
        if got["share"]["spec"].get("priority") != 100000:
            fail("share's priority %s: the chart's PriorityClass gpufrac-serving is 100000" %
                 got["share"]["spec"].get("priority"))
        log("pods bound with grants: share on n1 (%s), on-t4 on n2" %
            json.dumps(grants[NS + "/share"]["containers"][0]["gpus"][0]))
        if not all(GRANT in p["metadata"].get("annotations", {}) for p in got.values()):
            fail("a bound pod without a grant")

        # Uninstall: the gpufrac processes first (they would lose their
        # ServiceAccounts), then the release's objects go.
        for p in list(self.c.extra):
            self.c.stop_gpufrac(p, 5)
        self.c.extra = []
        self.helm("uninstall", RELEASE, "-n", RNS)

        def gone():
            r = self.c.kubectl("get", "-f", self.c.path("release.yaml"), "-o", "json",
                               "--ignore-not-found", check=False)
            items = json.loads(r.stdout)["items"] if r.stdout.strip() else []
            return not [o for o in items if not o["metadata"].get("deletionTimestamp")]
        wait_for("the release's objects removed", gone, 60)
        log("helm uninstall removed the release's objects")


def main():
    a = e2e_args(__doc__, 3)
    if not a:
        return 2
    (k8s_bin, helm_path, gpufrac), keep = a
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if not os.access(helm_path, os.X_OK):
        print("no helm at %s: run scripts/install-k8s" % helm_path)
        print("helm e2e: FAILED")
        return 1

    def body(c):
        c.start(scheduler=False)
        HelmE2E(c, helm_path).run()
        c.check_alive()
    return run_once("helm e2e", lambda: Cluster(k8s_bin, gpufrac, keep), body,
                    lambda c: c.log_dead())


if __name__ == "__main__":
    sys.exit(main())
