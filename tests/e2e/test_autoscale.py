#!/usr/bin/env python3
"""The autoscaler bridge (issue 16) against a real control plane (CTest
label e2e).

Usage: test_autoscale.py K8S_BIN GPUFRAC [--keep]

One short scenario on the cluster of tests/e2e/cluster.py, deploy/ applied
as in test_k8s.py (deploy/autoscale/autoscale.yaml included), the extender run as its
ServiceAccount with --autoscale-placeholders on --autoscale-after 2s:

  1. n1 (2 GPUs) is filled by two pods; five 30%-compute pods then wait,
     unschedulable: exactly one placeholder appears in gpufrac-system asking
     nvidia.com/gpu: 2 (not 5), labelled, standing for the five, at the
     PriorityClass gpufrac-placeholder, and stays Pending (no node here
     advertises nvidia.com/gpu: what an autoscaler reacts to).
  2. The extender is restarted: the new leader adopts the placeholder (same
     uid, no second one).
  3. A Node with a 2-GPU inventory is added (what the autoscaler and the
     node agent would do): the placeholder is deleted and the five pods are
     bound there with grants; no placeholder comes back.
  4. A pod that fits nowhere gets a 1-GPU placeholder; the pod is deleted:
     the placeholder goes with it.

Nodes are API objects (no kubelet); the inventories are written directly,
without node agents, to keep the scenario cheap.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Failure, e2e_main, log, start_and_run, wait_for  # noqa: E402
from test_k8s import E2E, Extender, NS, pod  # noqa: E402

PH_NS = "gpufrac-system"
PH_LABEL = "gpufrac.io/placeholder"
PH_FOR = "gpufrac.io/placeholder-for"
GRANT = "gpufrac.io/grant"


def fail(msg):
    raise Failure(msg)


class ScalingExtender(Extender):
    def start(self):
        self.proc = self.c.spawn(self.name, [
            self.c.gpufrac, "scheduler", "--listen", "127.0.0.1:%d" % self.port,
            "--kubeconfig", self.kc, "--autoscale-placeholders", "on",
            "--autoscale-after", "2s"])
        return self


class Scenario:
    def __init__(self, c):
        self.c = c
        self.api = c.admin
        self.t = E2E(c)

    def inventory_node(self, name, ngpus):
        """A Node with an inventory of ngpus A100-80GB, as the node agent
        would publish it."""
        self.t.add_node(name, "%dxA100-80GB" % ngpus)
        self.c.patch_inventory(name, ngpus)

    def placeholders(self):
        return self.api.items("/api/v1/namespaces/%s/pods" % PH_NS,
                              labelSelector=PH_LABEL + "=true")

    def one_placeholder(self, gpus, stands_for, what):
        def ok():
            ps = self.placeholders()
            return ps if len(ps) == 1 and \
                ps[0]["metadata"]["annotations"].get(PH_FOR) == stands_for else None
        try:
            ps = wait_for(what, ok, 40, 0.5)
        except Failure:
            fail("%s: placeholders now %s" % (what, [
                (p["metadata"]["name"], p["metadata"].get("annotations"))
                for p in self.placeholders()]))
        p = ps[0]
        c = p["spec"]["containers"][0]["resources"]
        if c["requests"].get("nvidia.com/gpu") != str(gpus) or \
                c["limits"].get("nvidia.com/gpu") != str(gpus):
            fail("placeholder %s asks %s, want nvidia.com/gpu: %d" %
                 (p["metadata"]["name"], c, gpus))
        if p["spec"].get("priorityClassName") != "gpufrac-placeholder" or \
                p["spec"].get("priority") != -10:
            fail("placeholder %s: priority class %s (%s), want "
                 "gpufrac-placeholder (-10)" % (p["metadata"]["name"],
                                                p["spec"].get("priorityClassName"),
                                                p["spec"].get("priority")))
        if GRANT in p["metadata"].get("annotations", {}):
            fail("placeholder %s carries a gpufrac grant" % p["metadata"]["name"])
        return p

    def uids(self, names):
        return ",".join(sorted(self.api.get("/api/v1/namespaces/%s/pods/%s" %
                                            (NS, n))["metadata"]["uid"] for n in names))

    def no_placeholder(self, what, timeout=30):
        wait_for(what, lambda: not self.placeholders(), timeout, 0.5)

    def run(self):
        t = self.t
        t.apply_deploy()
        # The bridge's own objects (the placeholders' PriorityClass, the
        # Role to make and delete them): optional, beside deploy/.
        r = self.c.kubectl("apply", "--server-side", "--field-manager=e2e", "-f",
                           os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
                               os.path.abspath(__file__)))), "deploy", "autoscale",
                               "autoscale.yaml"))
        log("applied autoscale.yaml: %s" % " ".join(r.stdout.split()))
        self.c.namespace(NS)
        self.inventory_node("n1", 2)
        kc = self.c.sa_kubeconfig("extender", self.c.token("gpufrac-scheduler"))
        ext = ScalingExtender(self.c, "extender", self.c.ext_port, kc).start()
        ext.ready_leader()
        t.ext = ext

        # 1. demand no node has room for -> one placeholder of 2 GPUs
        t.wait_bound(t.create(pod("fill-0", compute=100), pod("fill-1", compute=100)))
        shares = ["share-%d" % i for i in range(5)]
        t.create(*[pod(n, compute=30) for n in shares])
        p = self.one_placeholder(2, self.uids(shares),
                                 "one placeholder for the five 30% shares")
        ph_uid = p["metadata"]["uid"]
        time.sleep(3)  # past --autoscale-after again: still one, still Pending
        p = self.one_placeholder(2, self.uids(shares), "still one placeholder")
        if p["metadata"]["uid"] != ph_uid or p["spec"].get("nodeName"):
            fail("the placeholder was replaced or bound: %s" % p["metadata"])
        for n in shares:
            got = self.api.get("/api/v1/namespaces/%s/pods/%s" % (NS, n))
            if got["spec"].get("nodeName"):
                fail("%s bound to %s with no room anywhere" % (n, got["spec"]["nodeName"]))
        log("autoscale: five 30%% shares waiting ask for 2 GPUs (%s)" % p["metadata"]["name"])

        # 2. a restarted extender adopts it
        self.c.stop_gpufrac(ext.proc)
        ext = ScalingExtender(self.c, "extender-2", self.c.ext_port, kc).start()
        ext.ready_leader()
        t.ext = ext
        time.sleep(4)  # two waits of --autoscale-after, a pass every second
        p = self.one_placeholder(2, self.uids(shares), "the placeholder adopted")
        if p["metadata"]["uid"] != ph_uid:
            fail("the restarted extender made the placeholder again (uid %s, was %s)" %
                 (p["metadata"]["uid"], ph_uid))
        # Adopted, not re-created under the same name (an AlreadyExists):
        # the new extender never tried to make one.
        if "autoscale: placeholder" in ext.proc.tail(200):
            fail("the restarted extender tried to make a placeholder:\n%s" %
                 ext.proc.tail(10))
        log("autoscale: the restarted extender adopted %s" % p["metadata"]["name"])

        # 3. capacity arrives -> the placeholder goes, the shares bind there
        self.inventory_node("n2", 2)
        self.no_placeholder("the placeholder deleted once n2 came")
        got = t.wait_bound(shares, timeout=90)
        where = {got[n]["spec"]["nodeName"] for n in shares}
        if where != {"n2"}:
            fail("the shares went to %s, want n2" % where)
        t.check_state()
        time.sleep(3)
        if self.placeholders():
            fail("a placeholder came back with nothing waiting: %s" %
                 [q["metadata"]["name"] for q in self.placeholders()])
        log("autoscale: n2 added, placeholder deleted, the five shares bound there")

        # 4. no placeholder outlives its reason
        t.create(pod("too-big-now", compute=90))
        self.one_placeholder(1, self.uids(["too-big-now"]),
                             "a 1-GPU placeholder for a 90% share")
        t.delete_pod("too-big-now")
        self.no_placeholder("the placeholder deleted with its pod")
        log("autoscale: a placeholder went with the pod it stood for")
        self.c.check_alive()


def main():
    return e2e_main(__doc__, "e2e autoscale", start_and_run(Scenario), tail=15)


if __name__ == "__main__":
    sys.exit(main())
