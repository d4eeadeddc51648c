#!/usr/bin/env python3
"""A slice of the churn trace, time-compressed, against the real Karpenter
(issue 33 item 5; docs/autoscaling.md, "The churn replay against
Karpenter").

Usage: karpenter_replay.py K8S_BIN HELM GPUFRAC KARPENTER_DIR KWOK_DIR
           [--trace T] [--seed S] [--duration D] [--load L] [--speed X]
           [--provision D] [--scale-down-delay D] [--keep]

1. `gpufrac simulate --churn --trace T --seeds S --duration D --load L
   --node-types TYPES --policy whole,gpufrac --arrivals DIR --format json`
   (defaults: gpushare100, 42, 150m, 60%): the simulator's prediction, and
   the arrivals it replayed (time, pod, lifetime).  TYPES are the
   NodePool's instance types below, 4 of the 8-GPU type as the reference
   cluster (32 GPUs) that sets the arrival rate.
2. The cluster of tests/e2e/test_karpenter.py (Karpenter v1.15.0 and KWOK,
   the bridge with --autoscale-after 2s) with a NodePool of g-2x-a100,
   g-4x-a100 and g-8x-a100 (12 CPUs and 48Gi a GPU: the trace's most
   common node shape, 8 GPUs, 96 CPUs, 384Gi; priced n + 0.1 an hour),
   consolidation WhenEmpty after the scale-down delay / X (the simulator's
   autoscaler removes empty nodes only).
3. The same arrivals replayed X times faster (default 30: 150 minutes in 5),
   twice, the pool at zero before each:
     whole   each GPU pod asks nvidia.com/gpu: its GPU count (a share
             rounded up to one GPU), what it asks without gpufrac;
     shares  each share asks gpufrac.io/gpu: 1 and gpufrac.io/gpu-compute:
             its share in percent (whole-GPU pods gpufrac.io/gpu: N); the
             bridge's placeholders make Karpenter buy.
   Each pod asks its CPU and memory; one whose gpu_spec names a model is
   left out (the simulator counts it unschedulable: its types are A100).
   A pod is deleted its lifetime after it was bound (the simulator's
   lifetime is useful run time from placement).
   Every 0.5 s: the NodeClaims (GPU-hours bought: each claim's GPUs, from
   its instance type, x the time it existed, from creation to deletion or
   the end) and the pods (GPU-hours asked: GPUs x share x the time from
   bound to deleted or the end), in trace time (real seconds x X).
4. Prints, per mode, bought, asked and bought/asked beside the simulator's
   (whole <-> whole, shares <-> gpufrac), and the JSON (last line).
"""

import csv
import json
import math
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
from cluster import Cluster, Failure, log, run_once  # noqa: E402
import test_karpenter as tk  # noqa: E402
from test_k8s import NS  # noqa: E402

GPUS = (2, 4, 8)
CPU_PER_GPU = 12
MEM_GI_PER_GPU = 48


def instance_types():
    """The replay's NodePool: the test's instance types (nvidia.com/gpu only,
    never gpufrac.io/gpu) at 12 CPUs and 48Gi a GPU."""
    out = []
    for n in GPUS:
        out.append({
            "name": "g-%dx-a100" % n, "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": {"cpu": str(CPU_PER_GPU * n), "memory": "%dGi" % (MEM_GI_PER_GPU * n),
                          "pods": "110", "nvidia.com/gpu": str(n)},
            "offerings": [{"Price": 1.0 * n + 0.1, "Available": True, "Requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In",
                 "values": ["on-demand"]},
                {"key": "topology.kubernetes.io/zone", "operator": "In",
                 "values": ["test-zone-a"]}]}]})
    return out


def node_types_csv(path, ref8=4):
    """The instance types for the simulator: the same shapes and prices
    (per GPU: (n + 0.1) / n), ref8 of the 8-GPU type as the reference."""
    with open(path, "w") as f:
        f.write("type,model,gpus,cpu_milli,memory_mib,gpu_hour_price,count\n")
        for n in GPUS:
            f.write("g-%dx-a100,A100,%d,%d,%d,%.6f,%d\n" % (
                n, n, CPU_PER_GPU * 1000 * n, MEM_GI_PER_GPU * 1024 * n, (n + 0.1) / n,
                ref8 if n == 8 else 0))


def read_arrivals(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.append({"t": float(r["t_s"]), "name": r["name"],
                         "gpus": int(r["num_gpu"]), "milli": int(r["gpu_milli"]),
                         "cpu": int(r["cpu_milli"]), "mem": int(r["memory_mib"]),
                         "spec": r["gpu_spec"], "life": float(r["lifetime_s"])})
    return rows


def demand(a):
    return a["gpus"] * a["milli"] / 1000.0 if a["gpus"] else 0.0


def pod_for(name, a, mode):
    """The replayed pod for arrival a."""
    req = {"cpu": "%dm" % max(a["cpu"], 1), "memory": "%dMi" % max(a["mem"], 1)}
    lim = {}
    if a["gpus"]:
        if mode == "whole":
            lim["nvidia.com/gpu"] = str(a["gpus"])
        elif a["gpus"] == 1 and a["milli"] < 1000:
            lim["gpufrac.io/gpu"] = "1"
            lim["gpufrac.io/gpu-compute"] = str(max(1, math.ceil(a["milli"] / 10)))
        else:
            lim["gpufrac.io/gpu"] = str(a["gpus"])
    req.update(lim)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"e2e": "replay"}},
            "spec": {"containers": [{
                "name": "main", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": req, "limits": lim}}],
                "terminationGracePeriodSeconds": 0}}


class Replay(tk.Scenario):
    """The test's Scenario with the replay's NodePool."""

    def __init__(self, c, helm, kdir, wdir, speed, empty_s):
        super().__init__(c, helm, kdir, wdir)
        self.speed = speed
        self.empty_s = empty_s

    def setup(self):
        tk.instance_types = instance_types  # the NodePool's types
        tk.GPU_TYPES = GPUS
        super().setup()
        self.nodepool({"consolidationPolicy": "WhenEmpty",
                       "consolidateAfter": "%ds" % max(1, round(self.empty_s / self.speed))})

    def pods(self):
        return self.api.items("/api/v1/namespaces/%s/pods" % NS, labelSelector="e2e=replay")

    def to_zero(self):
        for p in self.pods():
            self.api.delete("/api/v1/namespaces/%s/pods/%s" % (NS, p["metadata"]["name"]),
                            gracePeriodSeconds=0)
        self.wait("the replay's pods gone", lambda: not self.pods(), 120)
        for nc in self.nodeclaims():
            self.api.delete("/apis/karpenter.sh/v1/nodeclaims/" + nc["metadata"]["name"])
        self.wait("the pool at zero nodes, agents stopped", lambda: not self.pool_nodes() and
                  not self.nodeclaims() and not [a for a in self.agents.values() if a], 300)

    def replay(self, arrivals, mode, duration_s):
        """Replays arrivals (trace seconds) speed times faster; returns the
        GPU-hours bought and asked (trace time) and what it saw."""
        self.to_zero()
        sp = self.speed
        todo = [a for a in arrivals if not a["spec"] and a["t"] <= duration_s]
        skipped = len(arrivals) - len(todo)
        claims = {}  # name -> {"first", "last", "gpus"}
        pods = {}  # name -> {"a", "bound", "gone"}
        t0 = time.monotonic()
        end = duration_s / sp
        nxt = 0
        log("replay %s: %d arrivals over %.0f trace s, %.1f real s (x%g); %d left out "
            "(gpu_spec)" % (mode, len(todo), duration_s, end, sp, skipped))
        while True:
            self.check_watch()
            now = time.monotonic() - t0
            if now >= end:
                break
            while nxt < len(todo) and todo[nxt]["t"] / sp <= now:
                name = "r-%d" % nxt
                self.api.create("/api/v1/namespaces/%s/pods" % NS, pod_for(name, todo[nxt], mode))
                pods[name] = {"a": todo[nxt], "bound": None, "gone": None, "made": now}
                nxt += 1
            seen = time.monotonic() - t0
            for p in self.pods():
                name = p["metadata"]["name"]
                st = pods.get(name)
                if st and st["bound"] is None and p["spec"].get("nodeName"):
                    st["bound"] = seen
            for name, st in pods.items():
                if st["bound"] is not None and st["gone"] is None and \
                        st["bound"] + st["a"]["life"] / sp <= seen:
                    self.api.delete("/api/v1/namespaces/%s/pods/%s" % (NS, name),
                                    gracePeriodSeconds=0)
                    st["gone"] = seen
            live = set()
            for nc in self.nodeclaims():
                name = nc["metadata"]["name"]
                live.add(name)
                c = claims.setdefault(name, {"first": seen, "last": seen, "gpus": None})
                c["last"] = seen
                it = nc["metadata"].get("labels", {}).get("node.kubernetes.io/instance-type")
                if it and c["gpus"] is None:
                    c["gpus"] = int(it.split("-")[1][:-1])
            time.sleep(0.5)
        for c in claims.values():
            c["last"] = min(c["last"] + 0.5, end)  # seen until the poll that missed it
        bought = sum((c["last"] - c["first"]) * (c["gpus"] or 0) for c in claims.values())
        asked = sum(demand(st["a"]) * ((st["gone"] if st["gone"] is not None else end) -
                                       st["bound"])
                    for st in pods.values() if st["bound"] is not None)
        nominal = sum(demand(a) * min(a["life"], duration_s - a["t"]) for a in todo)
        waits = sorted(((st["bound"] if st["bound"] is not None else end) - st["made"]) * sp
                       for st in pods.values())
        res = {"mode": mode, "arrivals": len(todo), "created": nxt,
               "bound": sum(1 for st in pods.values() if st["bound"] is not None),
               "deleted": sum(1 for st in pods.values() if st["gone"] is not None),
               "nodeclaims": len(claims),
               "nodeclaim_gpus": sorted(c["gpus"] or 0 for c in claims.values()),
               "unknown_type": sum(1 for c in claims.values() if c["gpus"] is None),
               "gpu_hours_bought": round(bought * sp / 3600, 3),
               "gpu_hours_asked": round(asked * sp / 3600, 3),
               "gpu_hours_asked_nominal": round(nominal / 3600, 3),
               "wait_p50_s": round(waits[len(waits) // 2], 1) if waits else 0}
        res["ratio"] = round(res["gpu_hours_bought"] / res["gpu_hours_asked"], 3) \
            if res["gpu_hours_asked"] else None
        self.claims_seen = claims
        self.pods_seen = pods
        log("replay %s: %s" % (mode, json.dumps(res)))
        return res

    def run_modes(self, arrivals, duration_s, modes, after=None):
        """Setup, then each mode's replay (after(mode, result) once each
        is done), the pool at zero at the end; everything stopped."""
        self.report = {}
        self.watcher = threading.Thread(target=self.watch, daemon=True)
        out = {}
        try:
            self.setup()
            for m in modes:
                out[m] = self.replay(arrivals, m, duration_s)
                if after:
                    after(m, out[m])
            self.to_zero()
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


def opt(name, default):
    if name in sys.argv:
        i = sys.argv.index(name)
        v = sys.argv[i + 1]
        del sys.argv[i:i + 2]
        return v
    return default


def duration(v):
    mul = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return float(v[:-1]) * mul[v[-1]] if v[-1] in mul else float(v)


def main():
    trace = opt("--trace", "gpushare100")
    seed = opt("--seed", "42")
    dur = opt("--duration", "150m")
    load = opt("--load", "60%")
    speed = float(opt("--speed", "30"))
    prov = opt("--provision", "3m")
    down = opt("--scale-down-delay", "10m")
    keep = "--keep" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--keep"]
    if len(args) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    k8s_bin, helm, gpufrac, kdir, wdir = args
    state = {}

    def body(c):
        os.makedirs(c.path("replay"))
        types = c.path("replay", "types.csv")
        node_types_csv(types)
        cmd = [gpufrac, "simulate", "--churn", "--trace", trace, "--seeds", seed,
               "--duration", dur, "--load", load, "--node-types", types,
               "--policy", "whole,gpufrac", "--provision", prov, "--scale-down-delay", down,
               "--arrivals", c.path("replay"), "--format", "json", "--jobs", "1"]
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        sim = {s["policy"]: s for s in json.loads(r.stdout)["summary"]}
        log("simulate: %s" % " ".join(cmd[1:]))
        arrivals = read_arrivals(c.path("replay", "churn-arrivals-%s-%s.csv" % (trace, seed)))
        c.start()
        rp = state["r"] = Replay(c, helm, kdir, wdir, speed, duration(down))
        got = rp.run_modes(arrivals, duration(dur), ["whole", "shares"])
        rows = []
        for mode, pol in (("whole", "whole"), ("shares", "gpufrac")):
            s, g = sim[pol], got[mode]
            rows.append({"mode": mode, "policy": pol,
                         "karpenter": {k: g[k] for k in (
                             "gpu_hours_bought", "gpu_hours_asked", "ratio", "nodeclaims",
                             "nodeclaim_gpus", "bound", "arrivals", "wait_p50_s")},
                         "simulate": {"gpu_hours_bought": round(s["gpu_hours_bought"], 3),
                                      "gpu_hours_asked": round(s["gpu_hours_asked"], 3),
                                      "ratio": round(s["gpu_hours_bought"] /
                                                     s["gpu_hours_asked"], 3),
                                      "nodes_added": s.get("nodes_added"),
                                      "peak_nodes": s.get("peak_nodes")}})
            log("%s: Karpenter bought %.2f GPU-h for %.2f asked (%.3f); simulate --churn "
                "(%s) %.2f for %.2f (%.3f)" % (
                    mode, g["gpu_hours_bought"], g["gpu_hours_asked"], g["ratio"] or 0, pol,
                    s["gpu_hours_bought"], s["gpu_hours_asked"],
                    s["gpu_hours_bought"] / s["gpu_hours_asked"]))
        print(json.dumps({"trace": trace, "seed": seed, "duration": dur, "load": load,
                          "speed": speed, "provision": prov, "scale_down_delay": down,
                          "rows": rows, "runs": got}))

    def on_error(c):
        r = state.get("r")
        for p in (r.own if r else []) + c.extra:
            log("%s log ends:\n%s" % (p.name, p.tail(25)))
    return run_once("bench karpenter_replay", lambda: Cluster(k8s_bin, gpufrac, keep), body,
                    on_error)


if __name__ == "__main__":
    sys.exit(main())
