#!/usr/bin/env python3
"""The churn replay's harness against the real Karpenter
(bench/karpenter_replay.py; issue 33 item 5; CTest label e2e).

Usage: test_karpenter_replay.py K8S_BIN HELM GPUFRAC KARPENTER_DIR KWOK_DIR [--keep]

A hand-written arrivals file, in the form `gpufrac simulate --churn
--arrivals` writes, replayed 10 times faster (600 trace seconds in 60),
as whole-GPU requests and as gpufrac shares, by the bench's Replay on the
cluster of tests/e2e/test_karpenter.py (Karpenter, KWOK, the bridge):

  at 0 s    six 0.3-GPU pods (300 s each) and one whole-GPU pod (200 s)
  at 30 s   one more 0.3-GPU pod (300 s)
  at 60 s   a pod whose gpu_spec names a V100: left out

Checked, per mode: the six plus two pods created when their time came (to
within 2 s of real time), every one bound and deleted its lifetime after
it was bound (to within 2 s), the V100 pod left out; GPU-hours asked as
the arrivals say (GPUs x share x lifetime, to 10%); every NodeClaim's
instance type read, and the GPUs bought at least what ran at once (7
whole, 3 packed) and at least the GPU-hours asked.  Between the modes:
shares bought fewer GPUs than whole GPUs (3 packed GPUs at first against
7).  After each mode the pool goes back to zero.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bench"))
from cluster import Cluster, Failure, e2e_args, log, run_once  # noqa: E402
import karpenter_replay as kr  # noqa: E402

SPEED = 10.0
DURATION = 600.0
HEADER = "t_s,row,name,num_gpu,gpu_milli,cpu_milli,memory_mib,gpu_spec,lifetime_s\n"
ROWS = ["0.000,%d,share-%d,1,300,1000,1024,,300.000" % (i, i) for i in range(6)] + [
    "0.000,6,whole-0,1,1000,2000,2048,,200.000",
    "30.000,7,share-6,1,300,1000,1024,,300.000",
    "60.000,8,v100-0,1,1000,1000,1024,V100M16,300.000"]


def fail(msg):
    raise Failure(msg)


def check(mode, res, rp, arrivals):
    pods = rp.pods_seen
    if res["arrivals"] != 8 or len(arrivals) - res["arrivals"] != 1:
        fail("%s: %d arrivals replayed of %d, want 8 (the V100 pod left out)" %
             (mode, res["arrivals"], len(arrivals)))
    if res["created"] != 8 or res["bound"] != 8 or res["deleted"] != 8:
        fail("%s: created %d, bound %d, deleted %d, want 8 each" %
             (mode, res["created"], res["bound"], res["deleted"]))
    for name, st in pods.items():
        a = st["a"]
        if abs(st["made"] - a["t"] / SPEED) > 2:
            fail("%s: %s created %.1f s into the replay, its arrival is at %.1f s" %
                 (mode, name, st["made"], a["t"] / SPEED))
        life = st["gone"] - st["bound"]
        if abs(life - a["life"] / SPEED) > 2:
            fail("%s: %s deleted %.1f s after it was bound, its lifetime is %.1f s" %
                 (mode, name, life, a["life"] / SPEED))
    want = (7 * 0.3 * 300 + 1 * 200) / 3600
    if abs(res["gpu_hours_asked"] - want) > 0.1 * want:
        fail("%s: %.3f GPU-hours asked, the arrivals say %.3f" %
             (mode, res["gpu_hours_asked"], want))
    if res["unknown_type"]:
        fail("%s: %d NodeClaims without an instance type" % (mode, res["unknown_type"]))
    need = 7 if mode == "whole" else 3
    if sum(res["nodeclaim_gpus"]) < need or res["gpu_hours_bought"] < res["gpu_hours_asked"]:
        fail("%s: bought %s GPUs, %.3f GPU-hours, for %d GPUs at once and %.3f GPU-hours "
             "asked" % (mode, res["nodeclaim_gpus"], res["gpu_hours_bought"], need,
                        res["gpu_hours_asked"]))


def main():
    a = e2e_args(__doc__, 5)
    if not a:
        return 2
    (k8s_bin, helm, gpufrac, kdir, wdir), keep = a
    for what, path in (("helm", helm), ("Karpenter", os.path.join(kdir, "bin", "karpenter-kwok")),
                       ("KWOK", os.path.join(wdir, "bin", "kwok"))):
        if not os.access(path, os.X_OK):
            print("%s is not at %s: run scripts/install-autoscalers" % (what, path),
                  file=sys.stderr)
            print("e2e karpenter replay: FAILED")
            return 1
    state = {}

    def body(c):
        c.start()
        path = c.path("arrivals.csv")
        with open(path, "w") as f:
            f.write(HEADER + "\n".join(ROWS) + "\n")
        arrivals = kr.read_arrivals(path)
        rp = state["r"] = kr.Replay(c, helm, kdir, wdir, SPEED, 600)
        res = rp.run_modes(arrivals, DURATION, ("whole", "shares"),
                           lambda mode, r: check(mode, r, rp, arrivals))
        w, s = sum(res["whole"]["nodeclaim_gpus"]), sum(res["shares"]["nodeclaim_gpus"])
        log("bought: whole %s GPUs (%.3f GPU-h), shares %s GPUs (%.3f GPU-h)" %
            (res["whole"]["nodeclaim_gpus"], res["whole"]["gpu_hours_bought"],
             res["shares"]["nodeclaim_gpus"], res["shares"]["gpu_hours_bought"]))
        if s >= w:
            fail("shares bought %d GPUs, whole GPUs %d" % (s, w))

    def on_error(c):
        r = state.get("r")
        for p in (r.own if r else []) + c.extra:
            log("%s log ends:\n%s" % (p.name, p.tail(25)))
    return run_once("e2e karpenter replay", lambda: Cluster(k8s_bin, gpufrac, keep), body,
                    on_error)


if __name__ == "__main__":
    sys.exit(main())
