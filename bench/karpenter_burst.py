#!/usr/bin/env python3
"""GPUs the real Karpenter buys for a burst of GPU shares, against the GPUs
the packing of those shares onto the NodePool's types needs, with the
bridge given the node types (--autoscale-node-types) and without (issue 33;
docs/autoscaling.md, "Karpenter, measured").

Usage: karpenter_burst.py K8S_BIN HELM GPUFRAC KARPENTER_DIR KWOK_DIR
           [--runs N] [--bursts N1xC1,N2xC2,...] [--keep]

The cluster, Karpenter, KWOK, the bridge and the 2/4/8-A100 NodePool of
tests/e2e/test_karpenter.py (its Scenario, `--autoscale-after 2s`).  A
burst NxC is N pods each asking gpufrac.io/gpu-compute C (percent of a
GPU), created at once with no GPU node in the pool (default bursts
28x30,10x30,52x30,20x45; runs N, default 2, of each burst in each mode,
interleaved: types, none, types, ...).  Before each run the pool is taken
to zero (the pods and the NodeClaims deleted, every node and agent gone).
A run ends when every pod is bound; then the pool's nodes (GPUs each, from
the instance type), the NodeClaims and the GPUs the placeholders asked
are read.

The packing's need: floor(100 / C) shares a GPU, so ceil(N / that) GPUs,
on 8-GPU nodes, the last node the smallest type that holds the rest (what
the bridge's packing onto the types gives for equal shares).

  types  the extender with --autoscale-node-types (the pool's types);
  none   without: placeholders of one size, the largest packed node's, on
         the fallback 8-GPU shape (no GPU node in the pool).

Prints one line per run and the JSON of every run (last line).
"""

import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
from cluster import Cluster, Failure, log, run_once  # noqa: E402
import test_karpenter as tk  # noqa: E402
from test_k8s import NS, pod  # noqa: E402


def opt(name, default, conv):
    if name in sys.argv:
        i = sys.argv.index(name)
        v = sys.argv[i + 1]
        del sys.argv[i:i + 2]
        return conv(v)
    return default


def bursts_of(text):
    out = []
    for b in text.split(","):
        n, c = b.split("x")
        if int(n) < 1 or not 1 <= int(c) <= 100:
            raise ValueError("burst %r: want NxC, N >= 1, C in 1..100" % b)
        out.append((int(n), int(c)))
    return out


def need(n, c):
    """The packing's nodes (GPUs each) for n shares of c percent."""
    gpus = math.ceil(n / (100 // c))
    big = max(tk.GPU_TYPES)
    nodes = [big] * (gpus // big)
    if gpus % big:
        nodes.append(min(t for t in tk.GPU_TYPES if t >= gpus % big))
    return sorted(nodes)


class Burst(tk.Scenario):
    def to_zero(self):
        for p in self.t.gpu_pods(NS):
            self.t.delete_pod(p["metadata"]["name"])
        self.wait("the pods gone", lambda: not self.t.gpu_pods(NS), 60)
        for nc in self.nodeclaims():
            self.api.delete("/apis/karpenter.sh/v1/nodeclaims/" + nc["metadata"]["name"])
        self.wait("the pool at zero nodes, agents stopped", lambda: not self.pool_nodes() and
                  not [a for a in self.agents.values() if a], 180)
        self.wait("no placeholder left", lambda: not self.api.items(
            "/api/v1/namespaces/%s/pods" % tk.PH_NS, labelSelector=tk.PH_LABEL + "=true"), 60)

    def one(self, i, n, c, mode):
        self.to_zero()
        self.start_extender("extender-%d-%s" % (i, mode), ["--guard-settle", "5s"],
                            types=mode == "types")
        self.placeholders_seen.clear()
        names = ["b%d-%d" % (i, k) for k in range(n)]
        t0 = time.monotonic()
        self.t.create(*[pod(x, compute=c) for x in names])
        self.t.wait_bound(names, timeout=240)
        took = round(time.monotonic() - t0, 1)
        time.sleep(3)  # a NodeClaim launched late still shows
        gpus = sorted(self.gpus_of(x["metadata"]["name"]) for x in self.pool_nodes())
        claims = self.nodeclaims()
        asked = sorted(int(v) for v in self.placeholders_seen.values())
        r = {"burst": "%dx%d" % (n, c), "mode": mode, "need": need(n, c),
             "bought": gpus, "nodeclaims": len(claims), "placeholders": asked,
             "bound_s": took}
        log("run %d: %s" % (i, json.dumps(r)))
        return r

    def bench(self, bursts, runs):
        self.report = {}
        self.watcher = __import__("threading").Thread(target=self.watch, daemon=True)
        out = []
        try:
            self.setup()
            i = 0
            for _ in range(runs):
                for n, c in bursts:
                    for mode in ("types", "none"):
                        out.append(self.one(i, n, c, mode))
                        i += 1
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
        return out


def main():
    runs = opt("--runs", 2, int)
    bursts = bursts_of(opt("--bursts", "28x30,10x30,52x30,20x45", str))
    keep = "--keep" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--keep"]
    if len(args) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    k8s_bin, helm, gpufrac, kdir, wdir = args
    state = {}

    def body(c):
        c.start()
        b = state["b"] = Burst(c, helm, kdir, wdir)
        res = b.bench(bursts, runs)
        for mode in ("types", "none"):
            rs = [r for r in res if r["mode"] == mode]
            log("%s: GPUs bought %d, the packing's need %d, runs buying more than "
                "the need %d of %d" % (mode, sum(sum(r["bought"]) for r in rs),
                                       sum(sum(r["need"]) for r in rs),
                                       sum(sum(r["bought"]) > sum(r["need"]) for r in rs),
                                       len(rs)))
        print(json.dumps(res))

    def on_error(c):
        b = state.get("b")
        for p in (b.own if b else []) + c.extra:
            log("%s log ends:\n%s" % (p.name, p.tail(25)))
    return run_once("bench karpenter_burst", lambda: Cluster(k8s_bin, gpufrac, keep), body,
                    on_error)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, Failure) as e:
        print("karpenter_burst: %s" % e, file=sys.stderr)
        sys.exit(2)
