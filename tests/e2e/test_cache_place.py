#!/usr/bin/env python3
"""Cache-aware placement (issue 15 §3, docs/placement.md) against a real
control plane (CTest label e2e).

Usage: test_cache_place.py K8S_BIN GPUFRAC [--keep]

deploy/ applied as in test_k8s.py, the extender run as its ServiceAccount,
kube-scheduler calling it. Two Nodes alike (2 A100 each); their
inventories, with the optional "models" list the node agent's weight cache
writes, are patched on by the test (no node agents):

  1. n2 holds llama ready: a 50%-compute pod annotated gpufrac.io/model
     llama@sha256:... is bound to n2.
  2. n2's cache drops llama and n1 gets it: the next llama pod is bound to
     n1, although n2's half-used GPU would take it exactly (with only 50%
     shares in the workload both are free of fragmentation, so the hit
     costs nothing: the term decides).
  3. A pod whose gpufrac.io/model is malformed is bound all the same (the
     annotation is ignored, never a refusal) and the extender logs it.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Failure, e2e_main, log, start_and_run, wait_for  # noqa: E402
from test_k8s import E2E, Extender, NS, pod  # noqa: E402

MODEL = "gpufrac.io/model"
HEX = "0123456789abcdef" * 4
LLAMA = {"name": "llama", "digest": "sha256:" + HEX, "bytes": 16 << 30,
         "state": "ready"}


def fail(msg):
    raise Failure(msg)


class Scenario:
    def __init__(self, c):
        self.c = c
        self.api = c.admin
        self.t = E2E(c)

    def inventory(self, name, models):
        self.c.patch_inventory(name, 2, models)

    def model_pod(self, name, ref):
        p = pod(name, compute=50)
        p["metadata"]["annotations"] = {MODEL: ref}
        return p

    def bound_to(self, name, want, what):
        got = self.t.wait_bound([name])[name]["spec"]["nodeName"]
        if got != want:
            fail("%s: %s bound to %s, want %s" % (what, name, got, want))
        log("cache: %s -> %s (%s)" % (name, got, what))

    def run(self):
        t = self.t
        t.apply_deploy()
        self.c.namespace(NS)
        for n in ("n1", "n2"):
            t.add_node(n, "2xA100-80GB")
        self.inventory("n1", [])
        self.inventory("n2", [LLAMA])
        kc = self.c.sa_kubeconfig("extender", self.c.token("gpufrac-scheduler"))
        ext = Extender(self.c, "extender", self.c.ext_port, kc).start()
        ext.ready_leader()
        t.ext = ext
        ref = "llama@sha256:" + HEX

        # 1. the node holding the model
        t.create(self.model_pod("llama-0", ref))
        self.bound_to("llama-0", "n2", "n2 holds llama")

        # 2. the cache moves: n2 evicts llama, n1 fetched it
        self.inventory("n2", [])
        self.inventory("n1", [LLAMA])
        time.sleep(2)  # the extender's watch applies both patches
        t.create(self.model_pod("llama-1", ref))
        self.bound_to("llama-1", "n1", "n1 holds llama now")

        # 3. a malformed reference: placed anyway, one log line
        t.create(self.model_pod("bad-ref", "llama@sha256:NOT-HEX"))
        t.wait_bound(["bad-ref"])
        wait_for("the extender's log line for bad-ref",
                 lambda: "bad-ref: annotation gpufrac.io/model ignored" in
                 ext.proc.tail(200), 20, 0.5)
        log("cache: bad-ref bound, its annotation ignored and logged")
        t.check_state()
        self.c.check_alive()


def main():
    return e2e_main(__doc__, "e2e cache placement", start_and_run(Scenario),
                    tail=15)


if __name__ == "__main__":
    sys.exit(main())
