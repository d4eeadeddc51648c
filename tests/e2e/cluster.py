"""A real Kubernetes control plane on loopback for gpufrac's end-to-end tests.

etcd, kube-apiserver (client certificates and service-account tokens,
--authorization-mode=Node,RBAC), kube-controller-manager and kube-scheduler
(with deploy/kube-scheduler-config.yaml), all built from their Go modules by
scripts/install-k8s, run from a temporary directory that is removed when the
cluster stops.  No kubelet runs: Nodes are API objects whose status the
harness writes, as kubelet and the device plugin would.

Python standard library only (run with /usr/bin/python3 or any python3).
"""

import base64
import ctypes
import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(REPO, "deploy")
PROGRAMS = ("etcd", "kube-apiserver", "kube-controller-manager",
            "kube-scheduler", "kubectl")
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


class Failure(Exception):
    pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def log(msg):
    print("[%7.2f] %s" % (time.monotonic() - _T0, msg), flush=True)


_T0 = time.monotonic()


class ApiError(Exception):
    def __init__(self, code, body, what):
        self.code = code
        self.body = body
        try:
            self.status = json.loads(body)
        except ValueError:
            self.status = {}
        super().__init__("%s: HTTP %d: %s" % (what, code,
                                              self.status.get("message", body[:300])))


class Client:
    """JSON over HTTPS to the API server as one user: a client certificate
    or a bearer token."""

    def __init__(self, server, ca, cert=None, key=None, token=None):
        self.server = server
        self.token = token
        self.ctx = ssl.create_default_context(cafile=ca)
        if cert:
            self.ctx.load_cert_chain(cert, key)

    def request(self, method, path, body=None, ctype="application/json",
                query=None, timeout=30):
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", ctype)
        req.add_header("Accept", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as r:
                text = r.read()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read().decode("utf-8", "replace"),
                           "%s %s" % (method, path)) from None
        return json.loads(text) if text else None

    def get(self, path, **q):
        return self.request("GET", path, query=q or None)

    def items(self, path, **q):
        return self.get(path, **q)["items"]

    def create(self, path, obj):
        return self.request("POST", path, obj)

    def merge_patch(self, path, patch):
        return self.request("PATCH", path, patch, "application/merge-patch+json")

    def delete(self, path, **q):
        return self.request("DELETE", path, query=q or None)

    def text(self, path):
        req = urllib.request.Request(self.server + path)
        with urllib.request.urlopen(req, context=self.ctx, timeout=30) as r:
            return r.read().decode()


def wait_for(what, fn, timeout, interval=0.25):
    """Calls fn until it returns something true; Failure after timeout."""
    t0 = time.monotonic()
    last = None
    while True:
        try:
            v = fn()
            if v:
                return v
        except (ApiError, OSError) as e:
            last = e
        if time.monotonic() - t0 > timeout:
            raise Failure("timed out after %.0f s waiting for %s%s" %
                          (timeout, what, " (last error: %s)" % last if last else ""))
        time.sleep(interval)


def kubeconfig(path, server, ca, cert=None, key=None, token=None):
    """A kubeconfig in its JSON form (YAML is a superset of JSON)."""
    user = {}
    if cert:
        user = {"client-certificate": cert, "client-key": key}
    if token:
        user = {"token": token}
    kc = {"apiVersion": "v1", "kind": "Config",
          "clusters": [{"name": "e2e", "cluster": {"server": server,
                                                   "certificate-authority": ca}}],
          "users": [{"name": "u", "user": user}],
          "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "u"}}],
          "current-context": "e2e"}
    with open(path, "w") as f:
        json.dump(kc, f, indent=1)
    return path


def _die_with_parent():
    # A harness killed with SIGKILL (a CTest timeout) takes its servers
    # with it: PR_SET_PDEATHSIG (1) = SIGKILL.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


class Proc:
    def __init__(self, name, argv, logpath, env=None):
        self.name = name
        self.argv = argv
        self.logpath = logpath
        self.logf = open(logpath, "ab")
        self.p = subprocess.Popen(argv, stdout=self.logf, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env,
                                  start_new_session=True,
                                  preexec_fn=_die_with_parent)

    def alive(self):
        return self.p.poll() is None

    def kill9(self):
        if self.alive():
            self.p.send_signal(signal.SIGKILL)
        self.p.wait()

    def stop(self, timeout=10):
        """SIGTERM; returns the exit status (None: it had already exited,
        so no graceful stop was seen)."""
        if not self.alive():
            self.logf.close()
            return None
        if self.alive():
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.logf.close()
        return self.p.returncode

    def tail(self, n=25):
        try:
            with open(self.logpath, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return ""


class Cluster:
    def __init__(self, k8s_bin, gpufrac, keep=False, feature_gates=None,
                 runtime_config=None, api_profiling=False, api_address=None,
                 kcm_qps=0):
        """feature_gates ({name: bool}) go to kube-apiserver,
        kube-controller-manager and kube-scheduler as --feature-gates;
        runtime_config ({group/version: bool}) to kube-apiserver as
        --runtime-config.  None (the default): neither flag is passed.
        api_profiling: kube-apiserver serves /debug/pprof (to cluster
        admins only: it stays behind authorization) for bench/.
        api_address: kube-apiserver binds and advertises this address (a
        non-loopback address of this host that pods reach, e.g. a dummy
        interface's) instead of 127.0.0.1, and keeps the kubernetes
        Service's endpoints (lease reconciler); clients use it too."""
        self.api_address = api_address
        self.api_profiling = api_profiling
        self.bin = k8s_bin
        self.gates = []
        if feature_gates:
            self.gates = ["--feature-gates", ",".join(
                "%s=%s" % (k, "true" if v else "false")
                for k, v in sorted(feature_gates.items()))]
        self.runtime = []
        if runtime_config:
            self.runtime = ["--runtime-config", ",".join(
                "%s=%s" % (k, "true" if v else "false")
                for k, v in sorted(runtime_config.items()))]
        self.gpufrac = gpufrac
        self.keep = keep
        # bench/: kube-controller-manager's client qps (burst 2x), instead
        # of its default 20 (which makes 5000 template claims take minutes)
        self.kcm_qps = kcm_qps
        missing = [p for p in PROGRAMS
                   if not os.access(os.path.join(k8s_bin, p), os.X_OK)]
        if missing:
            raise Failure("the Kubernetes programs %s are not in %s: run "
                          "scripts/install-k8s (scripts/install-deps does)" %
                          (", ".join(missing), k8s_bin))
        if not os.access(gpufrac, os.X_OK):
            raise Failure("no gpufrac binary at %s" % gpufrac)
        self.dir = tempfile.mkdtemp(prefix="gpufrac-k8s-")
        self.procs = {}
        self.extra = []  # processes started by tests (agents, extenders)
        self.bad_exits = []  # gpufrac processes that did not stop with 0

    # ---- files ----------------------------------------------------------
    def path(self, *p):
        return os.path.join(self.dir, *p)

    def openssl(self, *args):
        subprocess.run(["openssl"] + list(args), check=True, cwd=self.dir,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def make_certs(self):
        o = self.openssl
        o("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
          "-out", "ca.crt", "-days", "2", "-subj", "/CN=gpufrac-e2e-ca")

        def leaf(name, subj, ext):
            o("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key",
              "-out", name + ".csr", "-subj", subj)
            with open(self.path(name + ".ext"), "w") as f:
                f.write(ext)
            o("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey",
              "ca.key", "-CAcreateserial", "-out", name + ".crt", "-days", "2",
              "-extfile", name + ".ext")

        # 10.96.0.1: the kubernetes Service's ClusterIP in
        # --service-cluster-ip-range, what in-cluster clients dial.
        extra = ",IP:%s" % self.api_address if self.api_address else ""
        leaf("apiserver", "/CN=kube-apiserver",
             "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,IP:10.96.0.1,"
             "DNS:kubernetes,DNS:kubernetes.default.svc%s\n" % extra +
             "extendedKeyUsage=serverAuth\n")
        client = "extendedKeyUsage=clientAuth\n"
        leaf("admin", "/O=system:masters/CN=e2e-admin", client)
        leaf("scheduler", "/CN=system:kube-scheduler", client)
        leaf("controller-manager", "/CN=system:kube-controller-manager", client)
        o("genrsa", "-out", "sa.key", "2048")
        o("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")

    # ---- control plane --------------------------------------------------
    def start(self, scheduler=True, feature_gates=None):
        """feature_gates: {"Gate": True, ...} for kube-apiserver's
        --feature-gates (none given: the version's defaults)."""
        log("cluster dir %s" % self.dir)
        self.make_certs()
        ca = self.ca = self.path("ca.crt")
        ec, ep, self.api_port = free_port(), free_port(), free_port()
        host = self.api_address or "127.0.0.1"
        self.server = "https://%s:%d" % (host, self.api_port)
        B = lambda p: os.path.join(self.bin, p)
        self.procs["etcd"] = Proc("etcd", [
            B("etcd"), "--name", "e2e", "--data-dir", self.path("etcd"),
            "--listen-client-urls", "http://127.0.0.1:%d" % ec,
            "--advertise-client-urls", "http://127.0.0.1:%d" % ec,
            "--listen-peer-urls", "http://127.0.0.1:%d" % ep,
            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % ep,
            "--initial-cluster", "e2e=http://127.0.0.1:%d" % ep,
            "--unsafe-no-fsync", "--log-level", "warn"], self.path("etcd.log"))
        self.procs["kube-apiserver"] = Proc("kube-apiserver", [
            B("kube-apiserver"),
            "--etcd-servers", "http://127.0.0.1:%d" % ec,
            "--bind-address", host, "--advertise-address", host,
            "--secure-port", str(self.api_port),
            "--tls-cert-file", self.path("apiserver.crt"),
            "--tls-private-key-file", self.path("apiserver.key"),
            "--client-ca-file", ca,
            "--service-account-issuer", SA_ISSUER,
            "--service-account-key-file", self.path("sa.pub"),
            "--service-account-signing-key-file", self.path("sa.key"),
            "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NodeRestriction",
            # kubeadm's default range: deploy/scheduler.yaml's fixed
            # ClusterIP (10.96.0.88) must be allocatable, as on kubeadm.
            "--service-cluster-ip-range", "10.96.0.0/12",
            # The kubernetes Service cannot point at a loopback address.
            "--endpoint-reconciler-type", "lease" if self.api_address else "none",
            "--profiling=%s" % ("true" if self.api_profiling else "false"),
            "--v=1"] + self.gates + self.runtime,
            self.path("kube-apiserver.log"))
        self.admin = Client(self.server, ca, self.path("admin.crt"),
                            self.path("admin.key"))
        self.admin_kc = kubeconfig(self.path("admin.kubeconfig"), self.server, ca,
                                   self.path("admin.crt"), self.path("admin.key"))
        wait_for("kube-apiserver /readyz",
                 lambda: self._alive("kube-apiserver", "etcd") and
                 self.admin.text("/readyz") == "ok", 120)
        log("kube-apiserver ready on %s" % self.server)

        kcm_kc = kubeconfig(self.path("controller-manager.kubeconfig"), self.server,
                            ca, self.path("controller-manager.crt"),
                            self.path("controller-manager.key"))
        # No kubelet runs, so nothing renews the Nodes' heartbeats: the node
        # lifecycle controller would mark every Node unreachable and taint it.
        # Everything else (garbage collection, pod GC, ResourceQuota,
        # DaemonSet, Deployment, service-account tokens) runs.
        self.procs["kube-controller-manager"] = Proc("kube-controller-manager", [
            B("kube-controller-manager"), "--kubeconfig", kcm_kc,
            "--authentication-kubeconfig", kcm_kc,
            "--authorization-kubeconfig", kcm_kc,
            "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
            "--service-account-private-key-file", self.path("sa.key"),
            "--root-ca-file", ca, "--use-service-account-credentials=true",
            "--controllers", "*,-node-lifecycle-controller",
            "--leader-elect=false", "--v=1"] + self.gates +
            (["--kube-api-qps", str(self.kcm_qps), "--kube-api-burst",
              str(2 * self.kcm_qps)] if self.kcm_qps else []),
            self.path("kube-controller-manager.log"))

        self.ext_port = free_port()
        self.sched_port = free_port()
        if scheduler:
            self.start_scheduler()
        log("kube-controller-manager%s running" %
            (" and kube-scheduler" if scheduler else ""))

    def start_scheduler(self, extender=True, extra_args=(), qps=None, managed=(),
                        config=None):
        """kube-scheduler with deploy/'s configuration (without its
        extenders stanza when extender is false: kube-scheduler alone;
        managed: more managedResources for the extender, each
        ignoredByScheduler, as docs/migrating.md adds HAMi's), or with
        config, the text of another KubeSchedulerConfiguration (the Helm
        chart's), changed the same way.  Its log level is --v=2, or
        $GPUFRAC_E2E_SCHEDULER_V (e.g. 5 to see why a pod did not fit)."""
        sched_kc = kubeconfig(self.path("scheduler.kubeconfig"), self.server, self.ca,
                              self.path("scheduler.crt"), self.path("scheduler.key"))
        cfg = self.scheduler_config(sched_kc, extender, qps, managed, config)
        self.procs["kube-scheduler"] = Proc("kube-scheduler", [
            os.path.join(self.bin, "kube-scheduler"), "--config", cfg,
            "--authentication-kubeconfig", sched_kc,
            "--authorization-kubeconfig", sched_kc, "--client-ca-file", self.ca,
            "--bind-address", "127.0.0.1", "--secure-port", str(self.sched_port),
            "--v=%s" % os.environ.get("GPUFRAC_E2E_SCHEDULER_V", "2")] + self.gates +
            list(extra_args), self.path("kube-scheduler.log"))
        wait_for("kube-scheduler /healthz",
                 lambda: self._alive("kube-scheduler") and
                 self.scheduler_get("/healthz") == "ok", 60)

    def scheduler_config(self, kc, extender=True, qps=None, managed=(), config=None):
        """deploy/kube-scheduler-config.yaml (or the text config) with
        exactly two values changed: the kubeconfig and the extender's
        urlPrefix.  Without the extender, the extenders stanza (the file's
        last) is left out."""
        if config is not None:
            text = config
        else:
            with open(os.path.join(DEPLOY, "kube-scheduler-config.yaml")) as f:
                text = f.read()
        out, seen = [], set()
        for line in text.splitlines():
            s = line.strip()
            if not extender and line.startswith("extenders:"):
                seen.add("urlPrefix")
                break
            if s.startswith("kubeconfig:"):
                ind = line[:line.index("kubeconfig:")]
                line = ind + "kubeconfig: " + kc
                if qps:  # the bench's variant: kube-scheduler's client limits
                    line += "\n%sqps: %d\n%sburst: %d" % (ind, qps, ind, 2 * qps)
                seen.add("kubeconfig")
            elif s.startswith("- urlPrefix:") or s.startswith("urlPrefix:"):
                line = line[:line.index("urlPrefix:")] + \
                    "urlPrefix: http://127.0.0.1:%d/gpufrac" % self.ext_port
                seen.add("urlPrefix")
            out.append(line)
        if managed:  # after the file's last stanza, managedResources
            ind = [ln for ln in out if ln.strip().startswith("- name:")][-1]
            ind = ind[:ind.index("- name:")]
            for name in managed:
                out += ["%s- name: %s" % (ind, name),
                        "%s  ignoredByScheduler: true" % ind]
        if seen != {"kubeconfig", "urlPrefix"}:
            raise Failure("%s: expected a kubeconfig and an extender urlPrefix, "
                          "found %s" % ("the given configuration" if config is not None
                                        else "deploy/kube-scheduler-config.yaml",
                                        sorted(seen)))
        path = self.path("kube-scheduler-config.yaml")
        with open(path, "w") as f:
            f.write("\n".join(out) + "\n")
        return path

    def scheduler_get(self, path):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # its serving cert is self-signed
        ctx.load_cert_chain(self.path("admin.crt"), self.path("admin.key"))
        with urllib.request.urlopen("https://127.0.0.1:%d%s" % (self.sched_port, path),
                                    context=ctx, timeout=10) as r:
            return r.read().decode()

    def _alive(self, *names):
        for n in names:
            if not self.procs[n].alive():
                raise Failure("%s exited (%s); its log ends:\n%s" %
                              (n, self.procs[n].p.returncode, self.procs[n].tail()))
        return True

    def check_alive(self):
        self._alive(*self.procs)

    def kubectl(self, *args, input=None, check=True, as_kc=None):
        r = subprocess.run([os.path.join(self.bin, "kubectl"),
                            "--kubeconfig", as_kc or self.admin_kc] + list(args),
                           input=input, capture_output=True, text=True, timeout=120)
        if check and r.returncode != 0:
            raise Failure("kubectl %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                       (r.stderr or r.stdout).strip()))
        return r

    def token(self, sa, ns="gpufrac-system", *bound):
        """A TokenRequest token for a ServiceAccount (kubectl create token)."""
        return self.kubectl("create", "token", sa, "-n", ns, "--duration", "2h",
                            *bound).stdout.strip()

    def sa_kubeconfig(self, name, token):
        return kubeconfig(self.path(name + ".kubeconfig"), self.server, self.ca,
                          token=token)

    def pod_kubeconfig(self, name, sa, pod, ns="gpufrac-system"):
        """name.kubeconfig with a token of ServiceAccount sa (in ns) bound to
        pod (an object read from the API server), as kubelet projects one
        into the pod's containers: it carries the pod's node."""
        tok = self.token(sa, ns, "--bound-object-kind", "Pod",
                         "--bound-object-name", pod["metadata"]["name"],
                         "--bound-object-uid", pod["metadata"]["uid"])
        return self.sa_kubeconfig(name, tok)

    def add_node(self, name, labels=None):
        """Creates Node name (labels kubernetes.io/hostname and `labels`)
        without the not-ready taint: TaintNodesByCondition admission taints a
        new Node, and kubelet's first status would clear it through the node
        lifecycle controller, which does not run here (no kubelet renews
        heartbeats).  Its status: node_status."""
        lab = {"kubernetes.io/hostname": name}
        lab.update(labels or {})
        self.admin.create("/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": lab}})
        self.admin.merge_patch("/api/v1/nodes/" + name, {"spec": {"taints": None}})

    def patch_inventory(self, name, ngpus, models=None, gpu_model="A100-80GB"):
        """Writes Node name's gpufrac.io/inventory as its node agent would
        publish it: ngpus GPUs of gpu_model (80 GiB each, mode shared, uuids
        GPU-<name>-<i>) and, when models is not None, that "models" list
        (the weight cache's). Returns the document."""
        inv = {"version": 1, "gpus": [
            {"index": i, "uuid": "GPU-%s-%d" % (name, i), "model": gpu_model,
             "memory": 80 << 30, "mode": "shared"} for i in range(ngpus)]}
        if models is not None:
            inv["models"] = models
        self.admin.merge_patch("/api/v1/nodes/" + name, {
            "metadata": {"annotations": {"gpufrac.io/inventory": json.dumps(inv)}}})
        return inv

    def node_status(self, name, res):
        """Writes Node name's status as kubelet would: capacity and
        allocatable `res` (resource name -> quantity) and Ready now."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.admin.request("PATCH", "/api/v1/nodes/%s/status" % name, {"status": {
            "capacity": res, "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True", "reason": "E2E",
                            "message": "no kubelet: status written by the e2e harness",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}]}},
            "application/strategic-merge-patch+json")

    def namespace(self, ns, labels=None, timeout=60):
        """Creates namespace ns (with labels, when given) and waits for its
        ServiceAccount default, which pods in it need (the controller-manager
        makes it)."""
        md = {"name": ns}
        if labels:
            md["labels"] = labels
        self.admin.create("/api/v1/namespaces", {"metadata": md})
        wait_for("ServiceAccount default in %s" % ns, lambda: self.admin.get(
            "/api/v1/namespaces/%s/serviceaccounts/default" % ns), timeout)

    def node_conf(self, node, slots):
        """A node agent's directory node-<node> (state, cdi and plugins
        below it) and its node.conf naming them with `slots` slots a GPU;
        returns node.conf's path.  A node name over 24 characters is cut
        and a hash of it added: the device plugin's socket path must fit
        108 bytes, and KWOK's nodes for Karpenter have names of 50-60 (one
        of them made the agent refuse to start, "the socket path is too
        long", and test_e2e_karpenter time out)."""
        short = node if len(node) <= 24 else "%s-%s" % (
            node[:15], hashlib.sha256(node.encode()).hexdigest()[:8])
        d = self.path("node-" + short)
        for sub in ("state", "cdi", "plugins"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        cfg = os.path.join(d, "node.conf")
        with open(cfg, "w") as f:
            f.write("state_dir = %s/state\ncdi_dir = %s/cdi\nkubelet_dir = %s/plugins\n"
                    "slots = %d\n" % (d, d, d, slots))
        return cfg

    def log_dead(self, expected=()):
        """Logs the end of the log of every process (gpufrac's and the
        control plane's) that has exited, but for an exit status in
        expected."""
        for p in self.extra + list(self.procs.values()):
            if not p.alive() and p.p.returncode not in expected:
                log("%s exited %s; log ends:\n%s" % (p.name, p.p.returncode, p.tail(10)))

    def spawn(self, name, argv, env=None):
        p = Proc(name, argv, self.path(name + ".log"), env)
        self.extra.append(p)
        return p

    def stop_gpufrac(self, p, timeout=10):
        """Stops a gpufrac process with SIGTERM; it must exit 0 (under the
        sanitizers: no leak, no error)."""
        rc = p.stop(timeout)
        if rc not in (0, None):
            self.bad_exits.append("%s exited %s on SIGTERM; its log ends:\n%s" %
                                  (p.name, rc, p.tail(15)))
        return rc

    def stop(self):
        for p in reversed(self.extra):
            self.stop_gpufrac(p, 5)
        for n in ("kube-scheduler", "kube-controller-manager", "kube-apiserver",
                  "etcd"):
            if n in self.procs:
                self.procs[n].stop(10)
        if self.keep:
            log("kept %s" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def b64(s):
    return base64.b64encode(s.encode()).decode()


def e2e_args(doc, n):
    """The n positional arguments of sys.argv and whether --keep is among
    them, as (args, keep); None, with doc printed to stderr, when there are
    not n."""
    args = [a for a in sys.argv[1:] if a != "--keep"]
    if len(args) != n:
        print(doc, file=sys.stderr)
        return None
    return args, "--keep" in sys.argv[1:]


def run_once(title, make, body, on_error=None):
    """A main for a file that is one scenario: c = make() (a Cluster, not
    started yet), then body(c), which starts it and runs the scenario; an
    exception fails it (traceback printed, then on_error(c) when given).
    The cluster is stopped in any case; a gpufrac process that did not exit
    0 on SIGTERM fails it too.  Prints "<title>: passed" or FAILED; returns
    the exit status (0 when passed)."""
    c = None
    ok = False
    try:
        c = make()
        body(c)
        ok = True
    except Exception:
        traceback.print_exc()
        if c and on_error:
            on_error(c)
    finally:
        if c:
            c.stop()
            for b in c.bad_exits:
                print(b)
                ok = False
    print("%s: %s" % (title, "passed" if ok else "FAILED"))
    return 0 if ok else 1


def e2e_main(doc, title, body, tail=0):
    """A main for a file that is one scenario, its argv K8S_BIN GPUFRAC
    [--keep]: run_once(title, a Cluster of them, body); with tail, a
    failure also logs the last `tail` lines of each process the test
    started (Cluster.spawn). Returns the exit status (2: bad arguments,
    doc printed)."""
    a = e2e_args(doc, 2)
    if not a:
        return 2
    (k8s_bin, gpufrac), keep = a

    def tails(c):
        for p in c.extra:
            log("%s log ends:\n%s" % (p.name, p.tail(tail)))
    return run_once(title, lambda: Cluster(k8s_bin, gpufrac, keep), body,
                    tails if tail else None)


def start_and_run(scenario):
    """A body for e2e_main: the cluster started (scheduler and all), then
    scenario(c).run()."""
    def body(c):
        c.start()
        scenario(c).run()
    return body


def run_scenarios(doc, title, scenarios, make, begin, width=14,
                  before_stop=None):
    """A main for a file of scenarios, its argv K8S_BIN GPUFRAC [--keep]
    [--only a,b]: c = make(k8s_bin, gpufrac, keep) (a Cluster, not started
    yet), t = begin(c) (starts it, sets up, returns the object whose
    s_<name> methods are the scenarios), then each of `scenarios` (or those
    --only names) in turn; a scenario's failure is recorded and the next
    still runs, except after a Failure saying a process exited.  Then
    before_stop(c) when given, the cluster stopped, a table of the results
    (names `width` wide) and "<title>: all scenarios passed" or FAILED.
    Returns the exit status: 0 when all passed, 2 for bad arguments (doc
    printed)."""
    args = sys.argv[1:]
    keep = "--keep" in args
    only = None
    if "--only" in args:
        only = args[args.index("--only") + 1].split(",")
        args = [a for a in args if a not in ("--only", ",".join(only))]
    args = [a for a in args if a != "--keep"]
    if len(args) != 2:
        print(doc, file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    c = None
    results = []
    try:
        c = make(args[0], args[1], keep)
        t = begin(c)
        for s in only or scenarios:
            t0 = time.monotonic()
            try:
                log("== %s" % s)
                getattr(t, "s_" + s)()
                c.check_alive()
                results.append((s, "ok", time.monotonic() - t0))
            except Exception as e:  # a scenario's failure; the next still runs
                traceback.print_exc()
                results.append((s, "FAILED: %s" % e, time.monotonic() - t0))
                if isinstance(e, Failure) and "exited" in str(e):
                    break
    except Exception:
        traceback.print_exc()
        results.append(("setup", "FAILED", 0))
    finally:
        if c:
            if before_stop:
                before_stop(c)
            c.stop()
            for b in c.bad_exits:
                print(b)
                results.append(("exits", "FAILED: " + b.splitlines()[0], 0))
    for s, r, dt in results:
        print("%-*s %-6s %5.1f s" % (width, s, r, dt))
    ok = results and all(r == "ok" for _, r, _ in results)
    print("%s: %s" % (title, "all scenarios passed" if ok else "FAILED"))
    return 0 if ok else 1
