#!/usr/bin/env python3
"""Preemption for GPU memory alone, with plenty of gpufrac.io/gpu slots
(issue 32, F1), against the real control plane (CTest label e2e).

Usage: test_preempt_memory.py K8S_BIN GPUFRAC [--keep]

test_preempt.py's scene, but n1 advertises 32 gpufrac.io/gpu slots, as a
node agent with `slots auto` (the default) does, so the four pods leave
28 free:

    GPU0: a (priority 10, 40Gi), b (priority 10, 20Gi)    20Gi free
    GPU1: c (priority 1, 10Gi),  d (priority 20, 60Gi)    10Gi free

then hi (priority 1000, 40Gi), with deploy/'s configuration (preemptVerb
set).  kube-scheduler's own filters pass n1 (slots, CPU and memory are
plentiful), the extender's /filter refuses it (no GPU has 40Gi), and
kube-scheduler's preemption dry run needs no victim on n1 for its own
filters, so it finds no candidate and never calls the preempt verb.  The
extender preempts for such a pod itself (docs/scheduler.md, "Preemption
for GPU memory"): it evicts b alone (the verb's choice) through the
Eviction API and holds GPU0 for hi, which is bound to n1's GPU0.  a, c
and d stay.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, Failure, e2e_args, log, run_once  # noqa: E402
from test_preempt import GRANT, VICTIMS, Run  # noqa: E402


def fail(msg):
    raise Failure(msg)


class MemoryRun(Run):
    ext_args = ()  # --preempt-evict on, the default

    def setup(self):
        super().setup()
        # slots auto: far more slots than pods (test_preempt.py has 4)
        self.c.node_status("n1", {"cpu": "32", "memory": "256Gi", "pods": "110",
                                  "gpufrac.io/gpu": "32"})

    def memory_only(self):
        uids = self.scene(True)
        got = self.t.wait_bound(["hi"], timeout=120)["hi"]
        now = self.pods()
        gone = sorted(n for n in VICTIMS if n not in now or
                      now[n]["metadata"].get("deletionTimestamp"))
        grant = json.loads(got["metadata"]["annotations"][GRANT])
        gpus = [g["index"] for g in grant["containers"][0]["gpus"]]
        log("memory alone short: evicted %s; hi bound to %s on GPU %s; "
            "kube-scheduler called the preempt verb %d times; events on hi %s"
            % (gone, got["spec"]["nodeName"], gpus, self.ext_preempts(),
               self.t.events("hi")[-3:]))
        if gone != ["b"]:
            fail("evicted %s, expected exactly b" % gone)
        for n in ("a", "c", "d"):
            if now[n]["metadata"]["uid"] != uids[n]:
                fail("%s was replaced" % n)
        if got["spec"]["nodeName"] != "n1" or gpus != [0]:
            fail("hi bound to %s GPUs %s, expected n1 GPU 0" %
                 (got["spec"]["nodeName"], gpus))
        self.t.check_state()


def main():
    a = e2e_args(__doc__, 2)
    if not a:
        return 2
    (k8s_bin, gpufrac), keep = a

    def body(c):
        c.start(scheduler=False)
        r = MemoryRun(c)
        r.setup()
        r.memory_only()
        c.check_alive()

    def tails(c):
        for p in c.extra:
            log("%s log ends:\n%s" % (p.name, p.tail(20)))
        ks = c.procs.get("kube-scheduler")
        if ks:
            log("kube-scheduler log ends:\n%s" % ks.tail(30))
    return run_once("e2e preempt memory", lambda: Cluster(k8s_bin, gpufrac, keep),
                    body, tails)


if __name__ == "__main__":
    sys.exit(main())
