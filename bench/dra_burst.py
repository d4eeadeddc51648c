#!/usr/bin/env python3
"""Mode-1 and mode-2 pods created at once against the real kube-scheduler
(issue 27, defect 1; docs/dra.md "One allocator per device",
docs/benchmarks.md).

Usage: dra_burst.py K8S_BIN GPUFRAC [--qps N] [--bursts N] [--taint] [--one-gpu] [--keep]

A real control plane (v1.37.2: kube-apiserver, kube-controller-manager,
kube-scheduler with deploy/dra/kube-scheduler-config.yaml, its client at
--qps N and burst 2N; without --qps, kube-scheduler's defaults, qps 50 and
burst 100) and `GPUFRAC scheduler --dra allocate` as deploy's
ServiceAccount.  Each burst: two fake nodes with one 80Gi H100 each, their
slices from the agent itself (`GPUFRAC node --mode dra --once --print
slices`); with --taint the second runs with dra_allocator = gpufrac (its
device carries the allocator taint, so it is gpufrac's alone).  Then 8
mode-1 pods and 8 mode-2 pods (gated gpufrac.io/placement) of 10Gi and 10
cores each are created together, 16 x 10Gi on 2 x 80Gi.  After every pod is
bound, or 60 s, and 3 s more: the memory allocated on each GPU (from the
claims' consumedCapacity), the pods bound and the give-backs (the
extender's log lines "given back").  One line per burst and a summary:

  burst 3: GiB 80/80 bound 16/16 give-backs 0 over-filled 0

Without --taint this is the setup before one allocator per device (the
old binary: both allocators may take both GPUs).

--one-gpu: issue 27's setup, one node with one 80Gi GPU (gpufrac's with
--taint) and the same 16 pods, 160Gi asked of 80Gi: a burst ends when no
pod was bound for 8 s (at most 60 s), then 3 s more.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "e2e"))
from cluster import Cluster, log, wait_for, Failure  # noqa: E402
import test_dra  # noqa: E402
from test_dra import DRA, GiB, NS, RES, pod, template, GATES  # noqa: E402


def main():
    args = sys.argv[1:]
    qps = None
    bursts = 10
    taint = "--taint" in args
    one = "--one-gpu" in args
    keep = "--keep" in args
    args = [a for a in args if a not in ("--taint", "--one-gpu", "--keep")]
    if "--qps" in args:
        i = args.index("--qps")
        qps = int(args[i + 1])
        del args[i:i + 2]
    if "--bursts" in args:
        i = args.index("--bursts")
        bursts = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    c = Cluster(args[0], args[1], keep, feature_gates=GATES)
    rows = []
    try:
        c.start(scheduler=False)
        with open(os.path.join(test_dra.DRA_DEPLOY, "kube-scheduler-config.yaml")) as f:
            c.start_scheduler(config=f.read(), qps=qps)
        t = DRA(c)
        t.setup()
        t.start_extender()
        ext_log = c.path("extender.log")
        for b in range(1, bursts + 1):
            k, g = "bk-%d" % b, "bg-%d" % b
            if not one:
                t.new_node(k, "4")
            t.new_node(g, "5", "gpufrac" if taint else None)
            with open(ext_log) as f:
                before = f.read().count("given back")
            names = []
            for i in range(8):
                for gated in (False, True):
                    n = "b%d%s" % (i, "g" if gated else "k")
                    t.api.create("%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
                                 template("t-" + n, "10Gi", 10))
                    names.append(n)
            t0 = time.monotonic()
            for i, n in enumerate(names):
                t.api.create("/api/v1/namespaces/%s/pods" % NS,
                             pod(n, "t-" + n, n.endswith("g")))

            last = [0, time.monotonic()]

            def all_bound():
                ps = t.pods()
                nb = sum(1 for n in names if ps.get(n, {}).get("spec", {}).get("nodeName"))
                if nb != last[0]:
                    last[:] = [nb, time.monotonic()]
                if one:
                    return nb >= 8 and time.monotonic() - last[1] > 8
                return nb == len(names)
            try:
                wait_for("16 bound", all_bound, 60, 0.5)
            except Failure:
                pass
            took = time.monotonic() - t0
            time.sleep(3)
            used = {}
            for cl in t.api.items("%s/namespaces/%s/resourceclaims" % (RES, NS)):
                al = cl.get("status", {}).get("allocation")
                for r in (al or {}).get("devices", {}).get("results", []):
                    cc = r.get("consumedCapacity", {})
                    used[r["pool"]] = used.get(r["pool"], 0) + \
                        test_dra.quantity(cc.get("memory", 0))
            ps = t.pods()
            bound = sum(1 for n in names if ps[n]["spec"].get("nodeName"))
            with open(ext_log) as f:
                gave = f.read().count("given back") - before
            over = sum(1 for n in (k, g) if used.get(n, 0) > 80 * GiB)
            row = (used.get(k, 0) // GiB, used.get(g, 0) // GiB, bound, gave, over, took)
            rows.append(row)
            log("burst %d: GiB %d/%d bound %d/16 give-backs %d over-filled %d (%.1f s)" %
                ((b,) + row))
            t.delete_all()
            if not one:
                t.retire(k)
            t.retire(g)
    finally:
        c.stop()
    print("qps %s taint %s one-gpu %s bursts %d: over-filled GPUs %d (bursts with any: %d), "
          "give-backs %d, pods bound %d of %d, GiB per GPU max %d" %
          (qps or "default(50)", taint, one, len(rows), sum(r[4] for r in rows),
           sum(1 for r in rows if r[4]), sum(r[3] for r in rows),
           sum(r[2] for r in rows), 16 * len(rows),
           max([max(r[0], r[1]) for r in rows] or [0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
