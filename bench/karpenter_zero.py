#!/usr/bin/env python3
"""Scale from zero with the real Karpenter, with and without the model
prefetched to new nodes (issue 33 item 4; docs/autoscaling.md).

Usage: karpenter_zero.py K8S_BIN HELM GPUFRAC KARPENTER_DIR KWOK_DIR
           [--runs N] [--mib M] [--rate BYTES_PER_S] [--keep]

The cluster, Karpenter, KWOK and the bridge of tests/e2e/test_karpenter.py
(its Scenario: `--autoscale-after 2s`, the 2/4/8-A100 NodePool), with each
new node's agent given the weight cache (model_cache_dir, model_pod_sources
naming the model server, model_prefetch_namespace gpufrac-system).  The
model: one file of M MiB (default 256) and its gpufrac.manifest, served by
bench/modelcache_serve.py on loopback at RATE bytes/s (default 100e6).

N runs (default 3) of each mode, interleaved (without, with, without, ...);
before each the pool is at zero nodes (its NodeClaims deleted, every node
and agent gone).  Then one 0.3-GPU share naming the model and its source
(gpufrac.io/model, gpufrac.io/model-source) is created, and the times from
its creation are taken (polled every 0.1 s): bound, Running (KWOK's), and
the agent's marker <model_cache_dir>/pods/<uid>/.ready (its model loader:
the model in the node's cache, verified and linked into the pod's view;
what GPUFRAC_MODEL_READY names for the container).  The pod's
gpufrac.io/model-ready condition cannot be used on KWOK's nodes: KWOK's
pod-ready stage sets every readiness gate's condition True itself.

  without  no prefetch ConfigMap: the new node's agent fetches the model
           when the share is bound there.
  with     a prefetch ConfigMap (`gpufrac cache prefetch ... --node-selector
           karpenter.sh/nodepool=gpu`) in place before the share is
           created: the new node's agent starts fetching as soon as it
           runs; the share's fetch joins it.

Prints one line per run and the medians as JSON (last line).
"""

import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
from cluster import Cluster, Failure, free_port, log, run_once  # noqa: E402
import test_karpenter as tk  # noqa: E402
from test_k8s import NS, SLOTS, pod  # noqa: E402

PH_NS = "gpufrac-system"
MODEL = "bench-llm"


def opt(name, default, conv):
    if name in sys.argv:
        i = sys.argv.index(name)
        v = sys.argv[i + 1]
        del sys.argv[i:i + 2]
        return conv(v)
    return default


class Zero(tk.Scenario):
    def __init__(self, c, helm, kdir, wdir, source):
        super().__init__(c, helm, kdir, wdir)
        self.source = source

    def start_agent(self, node, p):
        """The test's agent, with the weight cache on."""
        n = self.gpus_of(node)
        kc = self.c.pod_kubeconfig("agent-" + node, "gpufrac-node", p)
        cfg = self.c.node_conf(node, SLOTS)
        with open(cfg, "a") as f:
            f.write("model_cache_dir = %s\nmodel_cache_budget = 2Gi\n"
                    "model_pod_sources = %s\nmodel_prefetch_namespace = %s\n" %
                    (self.c.path("cache-" + node), self.source, PH_NS))
        self.agents[node] = self.c.spawn("agent-" + node, [
            self.c.gpufrac, "node", "--fake-gpus", "%dxA100-80GB" % n,
            "--node-name", node, "--kubeconfig", kc, "--config", cfg,
            "--listen", "127.0.0.1:%d" % free_port(), "--interval", "2"])
        self.agent_started[node] = time.monotonic()
        log("node %s (%d GPUs): agent started with the cache" % (node, n))

    def to_zero(self):
        for nc in self.nodeclaims():
            self.api.delete("/apis/karpenter.sh/v1/nodeclaims/" + nc["metadata"]["name"])
        self.wait("the pool at zero nodes, agents stopped", lambda: not self.pool_nodes() and
                  not [a for a in self.agents.values() if a], 180)

    def prefetch(self, on):
        cms = self.api.items("/api/v1/namespaces/%s/configmaps" % PH_NS,
                             labelSelector="gpufrac.io/model-prefetch")
        for cm in cms:
            self.api.delete("/api/v1/namespaces/%s/configmaps/%s" %
                            (PH_NS, cm["metadata"]["name"]))
        if on:
            r = subprocess.run([self.c.gpufrac, "cache", "prefetch", self.ref,
                                "--source", self.source, "--node-selector",
                                "karpenter.sh/nodepool=" + tk.POOL,
                                "--kubeconfig", self.c.admin_kc,
                                "--namespace", PH_NS], capture_output=True, text=True)
            if r.returncode != 0:
                raise Failure("gpufrac cache prefetch: %s" % r.stderr)

    def one(self, i, mode):
        self.to_zero()
        self.prefetch(mode == "with")
        name = "z-%d" % i
        p = pod(name, compute=30)
        p["metadata"]["annotations"] = {"gpufrac.io/model": self.ref,
                                        "gpufrac.io/model-source": self.source}
        self.agent_started = {}
        t0 = time.monotonic()
        self.t.create(p)
        got = {}
        while "ready" not in got:
            self.check_watch()
            now = time.monotonic() - t0
            if now > 180:
                raise Failure("%s: not model-ready after 180 s: %s" % (name, got))
            if "node" not in got and self.pool_nodes():
                got["node"] = now
            q = self.api.get("/api/v1/namespaces/%s/pods/%s" % (NS, name))
            if "bound" not in got and q["spec"].get("nodeName"):
                got["bound"] = now
            if "running" not in got and q.get("status", {}).get("phase") == "Running":
                got["running"] = now
            # The agent's marker in the pod's view (what the container's
            # entrypoint waits for).  Not the gpufrac.io/model-ready
            # condition: KWOK's pod-ready stage sets every readiness gate's
            # condition True itself.
            node = q["spec"].get("nodeName")
            if node and os.path.exists(self.c.path(
                    "cache-" + node, "pods", q["metadata"]["uid"], ".ready")):
                got["ready"] = now
            time.sleep(0.1)
        if self.agent_started:
            got["agent"] = min(self.agent_started.values()) - t0
        got = {k: round(v, 2) for k, v in got.items()}
        log("run %d (%s prefetch): %s" % (i, mode, got))
        self.t.delete_pod(name)
        return got

    def bench(self, runs):
        self.report = {}
        self.watcher = __import__("threading").Thread(target=self.watch, daemon=True)
        out = {"without": [], "with": []}
        try:
            self.setup()
            for i in range(2 * runs):
                mode = ("without", "with")[i % 2]
                out[mode].append(self.one(i, mode))
        finally:
            with self.agents_mu:
                self.stopping = True
            for a in self.agents.values():
                if a:
                    self.c.stop_gpufrac(a, 15)
            self.stop_watch.set()
            if self.watcher.is_alive():
                self.watcher.join(10)
            for p in self.own:
                p.stop(10)
        med = {}
        for mode, rs in out.items():
            med[mode] = {k: round(statistics.median(r[k] for r in rs), 2)
                         for k in ("node", "agent", "bound", "running", "ready")
                         if all(k in r for r in rs)}
        return {"runs": out, "median": med}


def main():
    runs = opt("--runs", 3, int)
    mib = opt("--mib", 256, int)
    rate = opt("--rate", 100e6, float)
    keep = "--keep" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--keep"]
    if len(args) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    k8s_bin, helm, gpufrac, kdir, wdir = args
    state = {}

    def body(c):
        src = c.path("model-src")
        os.makedirs(src)
        with open(os.path.join(src, "weights.bin"), "wb") as f:
            for _ in range(mib):
                f.write(os.urandom(1 << 20))
        r = subprocess.run([gpufrac, "cache", "manifest", src], capture_output=True,
                           text=True, check=True)
        with open(os.path.join(src, "gpufrac.manifest"), "w") as f:
            f.write(r.stdout)
        srv = subprocess.Popen([sys.executable, os.path.join(HERE, "modelcache_serve.py"),
                                src, str(rate)], stdout=subprocess.PIPE, text=True)
        try:
            port = int(srv.stdout.readline())
            c.start()
            z = state["z"] = Zero(c, helm, kdir, wdir, "http://127.0.0.1:%d/" % port)
            z.ref = "%s@%s" % (MODEL, r.stderr.strip())
            z.agent_started = {}
            res = z.bench(runs)
            res.update({"mib": mib, "rate": rate, "autoscale_after": tk.AFTER})
            print(json.dumps(res))
        finally:
            srv.terminate()
            srv.wait(10)

    def on_error(c):
        z = state.get("z")
        for p in (z.own if z else []) + c.extra:
            log("%s log ends:\n%s" % (p.name, p.tail(25)))
    return run_once("bench karpenter_zero", lambda: Cluster(k8s_bin, gpufrac, keep), body,
                    on_error)


if __name__ == "__main__":
    sys.exit(main())
