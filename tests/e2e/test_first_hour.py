#!/usr/bin/env python3
"""The first hour, as docs/install.md tells it (CTest label e2e; issue 30,
"The test that proves the first hour").

Usage: test_first_hour.py K8S_BIN HELM GPUFRAC BUILD_DIR [--keep] [--runs N]

docs/install.md's shell blocks and commands are read from the file and run
as written, with the chart's default values, on the real control plane
(tests/e2e/cluster.py: its own kube-scheduler knows nothing of gpufrac, as
on a managed cluster) and the real kubelet on the fake CRI runtime (node
kl1, test_kubelet.py's).  Only what the doc tells the reader to put in is
substituted: the registry (`registry.example`: a loopback registry this
test serves, plain HTTP, which skopeo's registries.conf marks insecure in
the test's mount namespace),
the node (`GPU-NODE`: kl1), the cluster (KUBECONFIG) and, where CTest's
build directory is not the doc's `build`, that directory.

The test runs in a network namespace of its own (unshare --net, root, as
the kubelet tests are) whose loopback also carries 192.168.192.168, the
address the fake CRI runtime gives every pod, and 10.96.0.88, the
extender's Service address (no kube-proxy here): kubelet's probes reach the
chart's processes at their pods' address and ports, as the chart says.
No kubelet runs containers here, so the harness runs each chart pod's
program (the agent, one extender, one kube-scheduler: test_helm.py's and
test_helm_scheduler.py's way, a token bound to the pod) changing only the
host directories (the test's) and NVML (--fake-gpus 4xA100-80GB).

1. "Install": the block, run in the repository: the images built, pushed by
   skopeo, helm install, the node labelled.  Every gpufrac image the
   release's pods and NOTES.txt name is in the registry under that tag: an
   image index of amd64 and arm64, both images pushed whole.
2. "Check the install": `gpufrac doctor` re-run until every check is
   PASS or SKIP (exit 0; the pods start, kubelet probes them, the
   extender's endpoint turns ready), and kubelet advertising
   gpufrac.io/gpu.
3. "First pods": examples/memory-share.yaml applied with the doc's
   command; the time from `helm install` to its pod Running is printed
   (docs/benchmarks.md).
4. Every device-plugin manifest of examples/ (dra-claim-share.yaml needs a
   DRA pool: test_dra.py) bound to kl1, its container created by kubelet
   with its GPU and limits (test_examples.py's checks), and `kubectl
   gpufrac describe pod memory-share` shows the grant.  The LLM server
   is deleted again before step 6: this node's CPUs are the machine's,
   and the upgrade's system-cluster-critical pods would preempt its 1 CPU.
5. A pod no GPU can hold (100Gi): `kubectl gpufrac why-pending` gives
   kube-scheduler's reason, with --extender the extender's per-node `never`.
6. The doc's `helm upgrade ... --set extender.accept='{hami}'`: the new
   extender and kube-scheduler pods run, doctor green again, the running
   pods keep their grants, and examples/hami-pod.yaml is bound and given
   its GPU.
7. The doc's `helm uninstall`, its Uninstall block, then its "if you will
   not install again" commands: nothing of gpufrac is left on the API
   server (annotations, labels, the namespace, cluster-scoped objects).
--runs N repeats the whole scenario on a fresh cluster N times and prints
the median of step 2's time.
"""

import hashlib
import http.server
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
POD_IP = "192.168.192.168"  # k8s.io/cri-api's fake runtime: every sandbox
SVC_IP = "10.96.0.88"  # extender.service.clusterIP's default
NODE_IP = "192.0.2.2"  # kubelet's, from the default route
REGISTRY = "127.0.0.1:5000"
NETNS_ENV = "GF_FIRST_HOUR_NETNS"


def reexec_in_netns():
    """Runs this file again in new network and mount namespaces: loopback
    up with the node's, the pods' and the Service's addresses on it, and
    skopeo's registries.conf (the machine's, seen only here) marking the
    loopback registry insecure (plain HTTP).  Returns its exit status."""
    import tempfile
    conf = tempfile.NamedTemporaryFile("w", prefix="gpufrac-registries-",
                                       suffix=".conf", delete=False)
    conf.write('[[registry]]\nlocation = "%s"\ninsecure = true\n' % REGISTRY)
    conf.close()
    # kubelet looks its node's name up for the node's address: /etc/hosts
    # answers, no DNS is asked (there is none in the namespace)
    hosts = tempfile.NamedTemporaryFile("w", prefix="gpufrac-hosts-", delete=False)
    with open("/etc/hosts") as f:
        hosts.write(f.read() + "\n%s kl1\n" % NODE_IP)
    hosts.close()
    script = ("mount --make-rprivate / && { test -f /etc/containers/registries.conf || "
              "{ echo 'no /etc/containers/registries.conf (skopeo installs it)' >&2; "
              "exit 1; }; } && "
              "mount --bind %s /etc/containers/registries.conf && "
              "mount --bind %s /etc/hosts && "
              "ip link set lo up && ip addr add %s/32 dev lo && "
              "ip addr add %s/32 dev lo && ip addr add %s/32 dev lo && "
              "ip route add default dev lo src %s && exec \"$@\"" % (
                  conf.name, hosts.name, NODE_IP, POD_IP, SVC_IP, NODE_IP))
    env = dict(os.environ, **{NETNS_ENV: "1"})
    try:
        return subprocess.call(["unshare", "--net", "--mount", "--", "sh", "-ec", script,
                                "sh", sys.executable] + sys.argv, env=env)
    finally:
        os.unlink(conf.name)
        os.unlink(hosts.name)


if __name__ == "__main__" and os.environ.get(NETNS_ENV) != "1":
    sys.exit(reexec_in_netns())

sys.path.insert(0, HERE)
import test_examples  # noqa: E402
from cluster import Cluster, Failure, e2e_args, log, run_once, wait_for  # noqa: E402
from test_examples import Examples, make_model, MODEL_FILES  # noqa: E402
from test_helm import CHART, RELEASE, RNS  # noqa: E402
from test_helm_scheduler import SchedulerE2E  # noqa: E402
from test_k8s import GRANT  # noqa: E402

try:  # issue 26 moves the kubelet helpers into kubelet_node.py
    from kubelet_node import NODE, Kubelet, node_obj, ready  # noqa: E402
except ImportError:
    from test_kubelet import NODE, Kubelet, node_obj, ready  # noqa: E402

SPEC, NGPUS = "4xA100-80GB", 4
SHARE_NS = "default"  # the examples carry no namespace: the kubeconfig's
DOC = os.path.join(REPO, "docs", "install.md")


def fail(msg):
    raise Failure(msg)


# ---- a loopback OCI registry (the distribution API's push and pull) --------
class Registry(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 5000), RegistryHandler)
        self.blobs, self.manifests, self.uploads = {}, {}, {}
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def image(self, name, tag):
        """(media type, manifest) pushed as name:tag, or None."""
        with self.lock:
            m = self.manifests.get((name, tag))
        return m and (m[0], json.loads(m[1]))


class RegistryHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, code, body=b"", headers=None):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def route(self):
        path, _, q = self.path.partition("?")
        query = dict(kv.partition("=")[::2] for kv in q.split("&") if kv)
        if path in ("/v2/", "/v2"):
            return self.reply(200, b"{}", {"Content-Type": "application/json"})
        r = self.server
        m = re.match(r"^/v2/(.+)/blobs/uploads/([^/]*)$", path)
        if m:
            name, up = m.groups()
            data = self.body()
            with r.lock:
                if not up:
                    up = uuid.uuid4().hex
                    r.uploads[up] = b""
                if up not in r.uploads:
                    return self.reply(404)
                r.uploads[up] += data
                size = len(r.uploads[up])
                if self.command == "PUT" or "digest" in query:
                    dg = query.get("digest", "").replace("%3A", ":")
                    blob = r.uploads.pop(up)
                    if dg != "sha256:" + hashlib.sha256(blob).hexdigest():
                        return self.reply(400, b'{"errors":[{"code":"DIGEST_INVALID"}]}')
                    r.blobs[dg] = blob
                    return self.reply(201, b"", {"Location": "/v2/%s/blobs/%s" % (name, dg),
                                                 "Docker-Content-Digest": dg})
            return self.reply(202, b"", {"Location": "/v2/%s/blobs/uploads/%s" % (name, up),
                                         "Range": "0-%d" % max(size - 1, 0),
                                         "Docker-Upload-UUID": up})
        m = re.match(r"^/v2/(.+)/(blobs|manifests)/([^/]+)$", path)
        if not m:
            return self.reply(404)
        name, kind, ref = m.groups()
        with r.lock:
            if kind == "blobs":
                blob = r.blobs.get(ref)
                if blob is None:
                    return self.reply(404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}')
                return self.reply(200, blob, {"Docker-Content-Digest": ref,
                                              "Content-Type": "application/octet-stream"})
            if self.command == "PUT":
                data = self.body()
                dg = "sha256:" + hashlib.sha256(data).hexdigest()
                ct = self.headers.get("Content-Type", "")
                r.manifests[(name, ref)] = r.manifests[(name, dg)] = (ct, data)
                return self.reply(201, b"", {"Docker-Content-Digest": dg,
                                             "Location": "/v2/%s/manifests/%s" % (name, dg)})
            got = r.manifests.get((name, ref))
            if not got:
                return self.reply(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
            return self.reply(200, got[1], {
                "Content-Type": got[0],
                "Docker-Content-Digest": "sha256:" + hashlib.sha256(got[1]).hexdigest()})

    do_GET = do_HEAD = do_POST = do_PATCH = do_PUT = route


# ---- docs/install.md ---------------------------------------------------------
def doc_text():
    with open(DOC) as f:
        return f.read()


def section(doc, title):
    """From the heading line title to the next heading (code blocks'
    comments are not headings)."""
    lines = doc.split("\n")
    i = lines.index(title)
    fence = False
    for j in range(i + 1, len(lines)):
        if lines[j].startswith("```"):
            fence = not fence
        elif not fence and lines[j].startswith("#"):
            return "\n".join(lines[i:j])
    return "\n".join(lines[i:])


def first_block(sec):
    b = sec[sec.index("```sh\n") + 6:]
    return b[:b.index("```")]


def inline_command(sec, prefix):
    """The inline `...` command of sec that starts with prefix, its line
    breaks read as spaces."""
    for m in re.finditer(r"`([^`]+)`", sec, re.S):
        cmd = " ".join(m.group(1).split())
        if cmd.startswith(prefix):
            return cmd
    fail("docs/install.md: no `%s...` command in:\n%s" % (prefix, sec[:600]))


class FirstHour(SchedulerE2E):
    def __init__(self, c, helm_path, kl, build):
        super().__init__(c, helm_path)
        self.kl, self.build = kl, build
        self.registry = None
        self.elapsed = None

    # ---- running what the doc says ------------------------------------------
    def env(self):
        env = dict(os.environ, KUBECONFIG=self.c.admin_kc,
                   PATH="%s:%s:%s:%s" % (os.path.dirname(self.helm_path), self.c.bin,
                                         os.path.dirname(self.c.gpufrac),
                                         os.environ.get("PATH", "")))
        for k in ("CACHE", "CONFIG", "DATA"):
            env["HELM_%s_HOME" % k] = self.c.path("helm", k.lower())
        return env

    def substitute(self, text):
        text = text.replace("registry.example", REGISTRY).replace("GPU-NODE", NODE)
        if os.path.realpath(self.build) != os.path.realpath(os.path.join(REPO, "build")):
            text = re.sub(r"(?<![\w/.-])build(?=[\s/]|$)", self.build, text)
        return text

    def sh(self, what, script, timeout=600):
        script = self.substitute(script)
        t = time.monotonic()
        r = subprocess.run(["sh", "-ec", script], cwd=REPO, env=self.env(),
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            fail("docs/install.md's %s, run as written, exit %d:\n%s\n%s%s" % (
                what, r.returncode, script, r.stdout[-2000:], r.stderr[-3000:]))
        log("docs/install.md's %s (%.1f s): %s" % (what, time.monotonic() - t,
                                                  " ".join(script.split())[:240]))
        return r.stdout

    # ---- the chart's pods, as kubelet would run them ------------------------
    def run_agent_pod(self):
        p = wait_for("the chart's DaemonSet pod on %s" % NODE, lambda: self.agent_pod(NODE), 90)
        c = p["spec"]["containers"][0]
        cmd = c["command"]
        if cmd[:2] != ["gpufrac", "node"] or "--config" in cmd:
            fail("the default pool's agent runs %s" % cmd)
        d = self.c.path("node-" + NODE)
        for sub in ("state", "cdi", "models"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        self.state = os.path.join(d, "state")
        self.cache = os.path.join(d, "models")
        # the operator's prefetch of examples/llm-server.yaml's model
        # (docs/modelcache.md), with `gpufrac cache fetch`
        src = self.c.path("model-src")
        digest = make_model(src, MODEL_FILES)
        subprocess.run([self.c.gpufrac, "cache", "--dir", self.cache, "fetch",
                        "tiny-llm@" + digest, "--source", "file://" + src],
                       check=True, capture_output=True, timeout=60)
        # the pod's host directories, here the test's (kubelet's plugin
        # directory is the real kubelet's)
        conf = os.path.join(d, "node.conf")
        with open(conf, "w") as f:
            f.write("state_dir = %s\ncdi_dir = %s/cdi\nkubelet_dir = %s\n"
                    "model_cache_dir = %s\n" % (self.state, d, self.kl.plugins, self.cache))
        env = dict(os.environ, **self.downward_env(p, c))
        kc = self.pod_token_kc("gpufrac-node", p, "agent-" + NODE)
        argv = [self.c.gpufrac] + cmd[1:] + ["--config", conf, "--fake-gpus", SPEC,
                                             "--kubeconfig", kc, "--interval", "2"]
        log("agent as pod %s: %s" % (p["metadata"]["name"], " ".join(cmd)))
        self.agents[NODE] = self.c.spawn("agent-" + NODE, argv, env)

    def run_extender_pod(self, pick=None):
        def first():
            ps = [x for x in self.api.items(
                "/api/v1/namespaces/%s/pods" % RNS,
                labelSelector="app.kubernetes.io/name=gpufrac-scheduler")
                if x["spec"].get("nodeName") and (not pick or pick(x))]
            return sorted(ps, key=lambda x: x["metadata"]["name"])[0] if ps else None
        p = wait_for("an extender pod bound", first, 60)
        c = p["spec"]["containers"][0]
        name = p["metadata"]["name"]
        # its args as they are: it listens where the Service and the probes
        # call it (0.0.0.0:8888, :8889), here on this namespace's loopback
        argv = [self.c.gpufrac] + c["args"] + [
            "--kubeconfig", self.pod_token_kc("gpufrac-scheduler", p, "extender-" + name)]
        log("extender as pod %s: %s" % (name, " ".join(c["args"])))
        self.ext_proc = self.c.spawn("extender-" + name, argv,
                                     dict(os.environ, **self.downward_env(p, c)))
        self.ext_pod = name

        def leading():
            if not self.ext_proc.alive():
                fail("the extender exited:\n%s" % self.ext_proc.tail())
            try:
                with urllib.request.urlopen("http://%s:8889/metrics" % POD_IP,
                                            timeout=5) as r:
                    return any(ln.startswith("gpufrac_extender_leader ") and
                               float(ln.split()[1]) == 1
                               for ln in r.read().decode().splitlines())
            except OSError:
                return False
        wait_for("the extender leading", leading, 60)

    def run_scheduler_pod(self, want_hash=None):
        ks = wait_for("the chart's kube-scheduler pods bound", lambda: [
            p for p in self.ks_pods(want_hash) if p["spec"].get("nodeName")], 60)
        self.c.ext_port = 8888  # the extender's port, the Service's
        self.run_kube_scheduler(ks[0])
        self.leader({ks[0]["metadata"]["name"]: self.ks[ks[0]["metadata"]["name"]]})

    def stop_rolled(self):
        for p in self.ks_all:
            p.stop(10)
        self.c.stopped = getattr(self.c, "stopped", []) + self.ks_all
        self.ks, self.ks_all = {}, []
        for p in [p for p in self.c.extra if p.name.startswith("extender-")]:
            self.c.stop_gpufrac(p, 10)
            self.c.extra.remove(p)
            self.c.stopped.append(p)

    def stop_release_procs(self):
        self.c.stopped = getattr(self.c, "stopped", []) + self.ks_all + self.c.extra
        for p in self.ks_all:
            p.stop(10)
        self.ks, self.ks_all = {}, []
        for p in list(self.c.extra):
            self.c.stop_gpufrac(p, 10)
        self.c.extra = []

    # ---- checks --------------------------------------------------------------
    def doctor_green(self, what, quiet=False):
        """gpufrac doctor (the doc's, with KUBECONFIG) exits 0 with every
        check passed or skipped; quiet: False instead of failing."""
        r = subprocess.run(["gpufrac", "doctor", "-o", "json"], env=self.env(),
                           capture_output=True, text=True, timeout=60)
        cs = {c["check"]: c for c in json.loads(r.stdout or "[]")}
        bad = {n: c["message"] for n, c in cs.items() if c["status"] not in ("pass", "skip")}
        bad.update({n: "%s: %s" % (cs[n]["status"], cs[n]["message"]) for n in (
            "agents", "driver", "scheduler", "networkpolicy", "grants")
            if n in cs and cs[n]["status"] != "pass"})
        if r.returncode != 0 or bad or not cs:
            if quiet:
                return False
            fail("%s: gpufrac doctor exit %d: %s%s" % (what, r.returncode, bad, r.stderr))
        if quiet:
            return True
        log("%s: gpufrac doctor green: %s" % (what, "; ".join(
            "%s %s" % (n, c["status"]) for n, c in cs.items())))

    def pushed_images(self, notes):
        """Every gpufrac image the release's pods and NOTES.txt name is in
        the registry, pushed under that tag."""
        names = {c["image"] for p in self.api.items("/api/v1/namespaces/%s/pods" % RNS)
                 for c in p["spec"]["containers"]}
        names |= set(re.findall(r"--image=(\S+)", notes))
        ours = sorted(n for n in names if "gpufrac" in n.split("/")[-1])
        want = {"gpufrac-node", "gpufrac-scheduler", "gpufrac-plan"}
        if {n.split("/")[-1].split(":")[0] for n in ours} != want:
            fail("the release and NOTES.txt name %s; expected %s" % (sorted(names), want))
        for n in ours:
            if not n.startswith(REGISTRY + "/"):
                fail("%s is not in the registry the doc pushed to" % n)
            repo, tag = n[len(REGISTRY) + 1:].rsplit(":", 1)
            got = self.registry.image(repo, tag)
            if not got:
                fail("%s named by the release but not pushed" % n)
            # The tag: the image index of scripts/build-images, each
            # platform's image pushed with it (skopeo copy --all).
            plats = {m.get("platform", {}).get("architecture"): m["digest"]
                     for m in got[1].get("manifests", [])}
            if got[0] != "application/vnd.oci.image.index.v1+json" or \
                    sorted(plats) != ["amd64", "arm64"]:
                fail("%s: pushed as %s naming %s, not an image index of amd64 and arm64"
                     % (n, got[0], sorted(plats)))
            for arch, dg in sorted(plats.items()):
                m = self.registry.image(repo, dg)
                blobs = [m[1]["config"]] + m[1].get("layers", []) if m else []
                if not m or not m[1].get("layers") or not all(
                        b["digest"] in self.registry.blobs for b in blobs):
                    fail("%s: its %s image %s not pushed whole" % (n, arch, dg))
        log("the release and NOTES.txt name %s: each pushed to the registry, "
            "an image index of amd64 and arm64" % ours)

    def running_pod(self, name, timeout=120):
        def ok():
            self.kl.alive()
            try:
                p = self.api.get("/api/v1/namespaces/%s/pods/%s" % (SHARE_NS, name))
            except Exception:
                return None
            return p if p["status"].get("phase") == "Running" else None
        try:
            return wait_for("pod %s Running" % name, ok, timeout)
        except Failure:
            p = self.api.get("/api/v1/namespaces/%s/pods/%s" % (SHARE_NS, name))
            fail("pod %s: node %s, status %s, events %s" % (
                name, p["spec"].get("nodeName"), json.dumps(p["status"]),
                self.events(name, SHARE_NS)[-5:]))

    def leftovers(self):
        out = []
        for n in self.api.items("/api/v1/nodes"):
            m = n["metadata"]
            out += ["node %s: annotation %s" % (m["name"], k)
                    for k in m.get("annotations", {}) if k.startswith("gpufrac.io/")]
            out += ["node %s: label %s" % (m["name"], k)
                    for k in m.get("labels", {}) if k.startswith("gpufrac.io/")]
        for p in self.api.items("/api/v1/pods"):
            a = p["metadata"].get("annotations", {})
            keys = [k for k in a if k.startswith("gpufrac.io/grant") or
                    k.startswith("gpufrac.io/guard-") or
                    (k == "karpenter.sh/do-not-disrupt" and "gpufrac.io/guard-owns" in a)]
            if keys:
                out.append("pod %s/%s: %s" % (p["metadata"]["namespace"],
                                              p["metadata"]["name"], sorted(keys)))
        for path in ("/apis/rbac.authorization.k8s.io/v1/clusterroles",
                     "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                     "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
                     "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
                     "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
                     "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
                     "/apis/scheduling.k8s.io/v1/priorityclasses",
                     "/apis/resource.k8s.io/v1/deviceclasses"):
            out += ["%s %s" % (path.rsplit("/", 1)[1], o["metadata"]["name"])
                    for o in self.api.items(path) if "gpufrac" in o["metadata"]["name"]]
        if any(n["metadata"]["name"] == RNS for n in self.api.items("/api/v1/namespaces")):
            out.append("namespace %s" % RNS)
        return out

    # ---- the scenario ----------------------------------------------------------
    def scenario(self):
        doc = doc_text()
        c, kl = self.c, self.kl
        self.registry = Registry()
        kl.start()
        n = wait_for("kubelet to register Node %s Ready" % NODE,
                     lambda: kl.alive() and (lambda o: o if o and ready(o) else None)(
                         node_obj(c)), 120)
        if n["spec"].get("taints"):
            self.api.merge_patch("/api/v1/nodes/" + NODE, {"spec": {"taints": None}})

        # 1. Install
        block = first_block(section(doc, "## Install"))
        cut = block.index("\nhelm install ") + 1
        self.sh("Install block (build and push)", block[:cut])
        t0 = time.monotonic()
        out = self.sh("Install block (helm install, label)", block[cut:])
        self.pushed_images(out)
        self.run_agent_pod()
        self.run_extender_pod()
        self.run_scheduler_pod()
        # 2. "Check the install": gpufrac doctor, re-run until green as a
        # reader would while the pods start (kubelet's probes, the
        # endpoint), and kubelet advertising the agent's gpufrac.io/gpu
        wait_for("gpufrac doctor green", lambda: self.doctor_green(
            "after the install", quiet=True), 120, 1)
        wait_for("kubelet reporting gpufrac.io/gpu", lambda: int(node_obj(c)["status"].get(
            "allocatable", {}).get("gpufrac.io/gpu", "0")) > 0, 60)
        self.doctor_green("after the install")
        # 3. the first share pod, as "First pods" says
        first = section(doc, "### First pods")
        apply1 = inline_command(first, "kubectl apply -f examples/")
        self.sh("First pods: %s" % apply1, apply1)
        self.running_pod("memory-share")
        self.elapsed = time.monotonic() - t0
        log("helm install to the first share pod Running: %.2f s" % self.elapsed)

        # 4. examples/ (test_examples.py's checks; the doc's namespace)
        test_examples.NS = SHARE_NS
        ex = Examples(c, kl)
        ex.cache, ex.state = self.cache, self.state
        for f in ("memory-share.yaml", "memory-compute.yaml", "whole-gpu.yaml",
                  "llm-server.yaml"):
            ex.check(f)
        # This node's CPUs are the machine's (2 here): the LLM server asks
        # 1 CPU, and the upgrade's new pods (system-cluster-critical) would
        # preempt it for room.  It goes before the upgrade.
        self.sh("(the harness) kubectl delete -f examples/llm-server.yaml",
                "kubectl delete -f examples/llm-server.yaml --wait=false")
        wait_for("the LLM server's pod gone (kubelet)", lambda: not [
            p for p in self.api.items("/api/v1/namespaces/%s/pods" % SHARE_NS)
            if p["metadata"]["name"].startswith("llm-server-")], 60)
        g = json.loads(self.api.get("/api/v1/namespaces/%s/pods/memory-share" % SHARE_NS)[
            "metadata"]["annotations"][GRANT])
        describe = inline_command(first, "kubectl gpufrac describe pod")
        out = self.sh("First pods: %s" % describe, describe)
        if g["containers"][0]["gpus"][0]["uuid"] not in out:
            fail("%s does not show the grant %s:\n%s" % (describe, g, out))

        # 5. why-pending on a pod that fits no GPU
        big = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "too-big", "namespace": SHARE_NS},
               "spec": {"containers": [{"name": "main", "image": "busybox",
                                        "resources": {"limits": {
                                            "gpufrac.io/gpu-memory": "100Gi"}}}]}}
        self.api.create("/api/v1/namespaces/%s/pods" % SHARE_NS, big)
        wait_for("too-big's FailedScheduling event", lambda: any(
            e.startswith("FailedScheduling") for e in self.events("too-big", SHARE_NS)), 60)
        out = self.sh("why-pending", "kubectl gpufrac why-pending too-big")
        if "gpu-memory 100Gi" not in out or not out.startswith("NODES"):
            fail("why-pending too-big:\n%s" % out)
        out = self.sh("why-pending --extender", "kubectl gpufrac why-pending too-big "
                      "--extender http://%s:8888/gpufrac" % SVC_IP)
        per = [ln for ln in out.splitlines() if ln.startswith(NODE + " ")]
        if len(per) != 1 or " never " not in per[0] or "80Gi" not in per[0]:
            fail("why-pending --extender, per node:\n%s" % out)
        log("why-pending too-big:\n%s" % out)
        self.api.delete("/api/v1/namespaces/%s/pods/too-big" % SHARE_NS,
                        gracePeriodSeconds="0")

        # 6. helm upgrade with changed values (the doc's HAMi line)
        grants = {p["metadata"]["name"]: p["metadata"]["annotations"][GRANT]
                  for p in self.api.items("/api/v1/namespaces/%s/pods" % SHARE_NS)
                  if GRANT in p["metadata"].get("annotations", {})}
        cm = self.api.get("/api/v1/namespaces/%s/configmaps/gpufrac-kube-scheduler" % RNS)
        old_hash = hashlib.sha256(json.dumps(cm["data"], sort_keys=True).encode()).hexdigest()
        upgrade = inline_command(section(doc, "### HAMi's and KAI's names"), "helm upgrade ")
        self.sh("helm upgrade", upgrade)
        # kubelet stops the rolled pods' containers: the extender's and
        # kube-scheduler's (their Deployments changed), not the agent's
        agent_pod = self.agent_pod(NODE)["metadata"]["name"]
        self.stop_rolled()
        if self.agent_pod(NODE)["metadata"]["name"] != agent_pod:
            fail("helm upgrade with extender.accept rolled the agent's pod")
        self.run_extender_pod(pick=lambda p: "--accept" in p["spec"]["containers"][0]["args"])
        cm = self.api.get("/api/v1/namespaces/%s/configmaps/gpufrac-kube-scheduler" % RNS)
        if hashlib.sha256(json.dumps(cm["data"], sort_keys=True).encode()).hexdigest() \
                == old_hash:
            fail("helm upgrade with extender.accept left the scheduler's configuration")
        self.run_scheduler_pod(want_hash=self.config_hash())
        for name, gr in grants.items():
            try:
                now = self.api.get("/api/v1/namespaces/%s/pods/%s" % (SHARE_NS, name))
            except Exception:
                fail("pod %s gone after the upgrade: %s" % (name, [
                    "%s %s %s: %s" % (e["involvedObject"]["kind"], e["involvedObject"]["name"],
                                      e.get("reason"), e.get("message"))
                    for e in self.api.items("/api/v1/namespaces/%s/events" % SHARE_NS)
                    if "llm" in e["involvedObject"]["name"] or
                    e["involvedObject"]["name"] == name]))
            if now["metadata"]["annotations"].get(GRANT) != gr or \
                    now["status"].get("phase") != "Running":
                fail("pod %s after the upgrade: %s, grant %s" % (
                    name, now["status"].get("phase"), now["metadata"]["annotations"].get(GRANT)))
        wait_for("the upgraded extender's Service endpoint ready", lambda: any(
            e.get("conditions", {}).get("ready") and e.get("targetRef", {}).get("name") ==
            self.ext_pod for s in self.api.items(
                "/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices" % RNS,
                labelSelector="kubernetes.io/service-name=gpufrac-scheduler")
            for e in s.get("endpoints") or []), 90)
        wait_for("gpufrac doctor green after the upgrade", lambda: self.doctor_green(
            "after helm upgrade", quiet=True), 120, 1)
        self.doctor_green("after helm upgrade")
        ex.check("hami-pod.yaml")

        # 7. helm uninstall and the doc's cleanup
        sec = section(doc, "### Uninstall")
        self.sh("helm uninstall", inline_command(sec, "helm uninstall "))
        wait_for("the release's pods gone (kubelet)", lambda: not self.api.items(
            "/api/v1/namespaces/%s/pods" % RNS), 120)
        self.stop_release_procs()
        self.sh("Uninstall block", first_block(sec), timeout=120)
        then = sec[sec.index("Then, if you will not install again"):]
        for prefix in ("kubectl label nodes", "kubectl delete namespace"):
            self.sh("Uninstall: %s" % prefix, inline_command(then, prefix))
        wait_for("nothing of gpufrac left on the API server",
                 lambda: not self.leftovers(), 120)
        log("after the doc's uninstall: nothing of gpufrac on the API server")

    def config_hash(self):
        ks = self.api.get("/apis/apps/v1/namespaces/%s/deployments/gpufrac-kube-scheduler" % RNS)
        return ks["spec"]["template"]["metadata"]["annotations"]["gpufrac.io/config-hash"]

    def run(self):
        try:
            self.scenario()
        finally:
            self.stop_release_procs()
            if self.registry:
                self.registry.shutdown()
                self.registry.server_close()


def main():
    argv = [a for a in sys.argv[1:]]
    runs = 1
    if "--runs" in argv:
        i = argv.index("--runs")
        runs = int(argv[i + 1])
        del argv[i:i + 2]
    sys.argv[1:] = argv
    a = e2e_args(__doc__, 4)
    if not a:
        return 2
    (k8s_bin, helm_path, gpufrac, build), keep = a
    times = []
    for i in range(runs):
        state = {}

        def body(c):
            kl = state["kl"] = Kubelet(c)
            c.start(scheduler=False)
            c.start_scheduler(extender=False)  # the cluster's: no gpufrac
            t = FirstHour(c, helm_path, kl, build)
            try:
                t.run()
            finally:
                kl.stop()
            times.append(t.elapsed)

        def tails(c):
            kl = state.get("kl")
            for p in getattr(c, "stopped", []) + c.extra + (kl.procs if kl else []):
                log("%s log ends:\n%s" % (p.name, p.tail(20)))
        rc = run_once("first hour (run %d of %d)" % (i + 1, runs),
                      lambda: Cluster(k8s_bin, gpufrac, keep), body, tails)
        if rc != 0:
            return rc
    if runs > 1:
        log("helm install to the first share pod Running: %s; median %.2f s" % (
            ", ".join("%.2f" % t for t in times), statistics.median(times)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
