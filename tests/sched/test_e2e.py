#!/usr/bin/python3
"""End-to-end test of `gpufrac scheduler` (CTest label sched).

The real binary runs against apiserver_double.py (a stateful API-server TEST
DOUBLE on 127.0.0.1, not an API server) through a kubeconfig.  This script
plays kube-scheduler: for a stream of pods it calls /filter, /prioritize and
/bind over HTTP, with someone else touching some pods between filter and
bind (the grant rides in the Binding, so that must not matter), pods
finishing, a node deleted
and re-added, and the extender killed with SIGKILL in the middle of a bind
and restarted (it must wait for its old Lease to expire before binding).
The disruption guard (settle 1 s here) marks bound pods that are not Ready
do-not-disrupt and takes the marks off once they have been Ready 1 s.
At the end it checks from the double's state that no GPU share is lost or
double-booked: per GPU the granted shares fit, every bound pod has a grant
that agrees with its binding, the extender's model agrees with the double,
and once every pod is gone every GPU is free again.

usage: test_e2e.py PATH/TO/gpufrac
"""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import apiserver_double as ad  # noqa: E402

GiB = 1 << 30
NS = "e2e"
NODES = {  # name -> [(model, GiB)] per GPU
    "a100-0": [("A100-SXM4-80GB", 80)] * 4,
    "a100-1": [("A100-SXM4-80GB", 80)] * 4,
    "a100-2": [("A100-SXM4-80GB", 80)] * 2,
    "t4-0": [("T4", 16)] * 2,
    "t4-1": [("T4", 16)] * 1,
}


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Extender:
    def __init__(self, binary, kubeconfig, workdir):
        self.binary, self.kc, self.dir = binary, kubeconfig, workdir
        self.proc = None
        self.gen = 0

    def start(self):
        self.port = free_port()
        self.gen += 1
        self.log = open(os.path.join(self.dir, "extender-%d.log" % self.gen),
                        "w")
        self.proc = subprocess.Popen(
            [self.binary, "scheduler", "--listen", "127.0.0.1:%d" % self.port,
             "--kubeconfig", self.kc, "--lease", "gpufrac-system/e2e",
             "--threads", "4", "--guard-settle", "1s"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.url = "http://127.0.0.1:%d" % self.port

    def call(self, verb, body, timeout=10):
        req = urllib.request.Request(
            self.url + "/gpufrac/" + verb, data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            if r.status != 200:
                fail("%s: HTTP %d" % (verb, r.status))
            return json.loads(r.read())

    def get(self, path):
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""
        except OSError:
            return 0, ""

    def metric(self, name):
        st, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def wait_leading(self, timeout=40):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                fail("extender exited with %d" % self.proc.returncode)
            if self.get("/readyz")[0] == 200 and \
                    self.metric("gpufrac_extender_leader") == 1:
                return time.time() - t0
            time.sleep(0.2)
        fail("extender not ready and leading after %ds" % timeout)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.log.close()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=30)
        self.log.close()
        return rc


class KubeScheduler:
    """What kube-scheduler does for each pod, through the extender."""

    def __init__(self, double, ext):
        self.d, self.ext = double, ext
        self.stats = {"bound": 0, "bind_errors": 0, "unschedulable": 0,
                      "touched": 0}

    def schedule(self, name, touch=False):
        pod = self.d.state.get("pods", ad.pod_key(NS, name))
        if pod is None or pod["spec"].get("nodeName"):
            return True
        names = sorted(n["metadata"]["name"] for n in self.d.nodes())
        args = {"Pod": pod, "Nodes": None, "NodeNames": names}
        f = self.ext.call("filter", args)
        if f.get("Error"):
            fail("filter Error: %s" % f["Error"])
        ok = f.get("NodeNames") or []
        for n in names:
            why = (f.get("FailedNodes") or {}).get(n) or \
                (f.get("FailedAndUnresolvableNodes") or {}).get(n)
            if (n in ok) == bool(why):
                fail("filter: node %s both passed and failed (%r)" % (n, why))
        if not ok:
            self.stats["unschedulable"] += 1
            return False
        args["NodeNames"] = ok
        pr = self.ext.call("prioritize", args)
        scores = {h["Host"]: h["Score"] for h in pr}
        if set(scores) != set(ok) or \
                not all(0 <= s <= 10 for s in scores.values()):
            fail("prioritize answered %r for %r" % (scores, ok))
        best = max(ok, key=lambda n: (scores[n], n))
        if touch:  # someone else changes the pod before the grant is written
            self.d.touch_pod(NS, name)
            self.stats["touched"] += 1
        r = self.ext.call("bind", {"PodName": name, "PodNamespace": NS,
                                   "PodUID": pod["metadata"]["uid"],
                                   "Node": best})
        if r.get("Error"):
            self.stats["bind_errors"] += 1
            return False
        self.stats["bound"] += 1
        got = self.d.state.get("pods", ad.pod_key(NS, name))
        if got["spec"].get("nodeName") != best:
            fail("bind said ok but %s is on %r" % (name,
                                                   got["spec"].get("nodeName")))
        return True


def shape(rng):
    k = rng.random()
    if k < 0.45:
        return dict(gpu=1, mem="%dGi" % rng.choice([4, 8, 10, 20, 30]),
                    compute=rng.choice([10, 20, 25, 30, 50]))
    if k < 0.65:
        return dict(gpu=1, mem="%dGi" % rng.choice([2, 6, 12]))
    if k < 0.85:
        return dict(gpu=1, compute=rng.choice([20, 40, 60]))
    if k < 0.95:
        return dict(gpu=1)
    return dict(gpu=2)


def share_of(pod):
    """(milli, mem bytes) one GPU of the pod takes, as the model books it."""
    res = pod["spec"]["containers"][0]["resources"]["requests"]
    n = int(res.get("gpufrac.io/gpu", "0"))
    mem = res.get("gpufrac.io/gpu-memory")
    comp = res.get("gpufrac.io/gpu-compute")
    memb = int(mem[:-2]) * GiB if mem else 0
    if n > 1 or (not mem and not comp):
        return n, 1000, memb
    return n, int(comp) * 10 if comp else 0, memb


def check_state(d):
    """No share double-booked, every bound pod granted, grants = bindings.
    Returns the number of bound pods."""
    gpus = {}
    for node in d.nodes():
        inv = json.loads(node["metadata"]["annotations"][ad.INVENTORY])
        for g in inv["gpus"]:
            gpus[(node["metadata"]["name"], g["uuid"])] = \
                [g["index"], int(g["memory"][:-2]) * GiB, 0, 0, []]
    bound = 0
    for p in d.pods():
        node = p["spec"].get("nodeName")
        name = p["metadata"]["name"]
        if not node:
            continue
        bound += 1
        n, milli, mem = share_of(p)
        g = p["metadata"].get("annotations", {}).get(ad.GRANT)
        if not g:
            fail("bound pod %s has no grant" % name)
        g = json.loads(g)
        if g["node"] != node:
            fail("pod %s: grant names %s, bound to %s" % (name, g["node"],
                                                          node))
        used = g["containers"][0]["gpus"]
        if g["containers"][0]["name"] != "main" or len(used) != n:
            fail("pod %s: grant %r for %d GPUs" % (name, g, n))
        for u in used:
            k = (node, u["uuid"])
            if k not in gpus:
                if any(nn == node for nn, _ in gpus):
                    fail("pod %s: grant names GPU %s not on %s" %
                         (name, u["uuid"], node))
                continue  # its node was deleted: it holds nothing
            if gpus[k][0] != u["index"]:
                fail("pod %s: GPU %s index %d, inventory %d" %
                     (name, u["uuid"], u["index"], gpus[k][0]))
            gpus[k][2] += milli
            gpus[k][3] += mem
            gpus[k][4].append(name)
    for (node, uuid), (idx, cap, milli, mem, who) in gpus.items():
        if milli > 1000 or mem > cap:
            fail("GPU %s on %s double-booked: %d milli, %d GiB of %d GiB: %s"
                 % (uuid, node, milli, mem // GiB, cap // GiB, who))
    return bound


def main():
    if len(sys.argv) != 2:
        fail(__doc__.strip().splitlines()[-1])
    rng = random.Random(7)
    work = tempfile.mkdtemp(prefix="gpufrac-e2e-")
    d = ad.Double().start()
    kc = os.path.join(work, "kubeconfig.json")
    d.kubeconfig(kc)
    for name, gpus in NODES.items():
        d.add_node(name, gpus)
    ext = Extender(sys.argv[1], kc, work)
    ext.start()
    print("extender 1 leading after %.1fs" % ext.wait_leading())
    ks = KubeScheduler(d, ext)
    queue, done, created = [], set(), 0
    bound_before_kill = 0
    for step in range(160):
        name = "p-%03d" % created
        created += 1
        # every tenth pod's user wants it evictable: the guard must keep
        # the user's value (and take only safe-to-evict)
        user = {ad.DND: "false"} if created % 10 == 1 else None
        if user:
            USER_DND.add(name)
        d.add_pod(NS, name, annotations=user, **shape(rng))
        queue.append(name)
        for q in list(queue):
            if ks.schedule(q, touch=rng.random() < 0.15):
                queue.remove(q)
                done.add(q)
        if step % 6 == 5:  # pods finish
            running = [p["metadata"]["name"] for p in d.pods()
                       if p["spec"].get("nodeName")]
            for p in rng.sample(running, min(3, len(running))):
                d.delete_pod(NS, p)
        if step == 50:  # a node goes away with its pods, and comes back
            for p in d.pods():
                if p["spec"].get("nodeName") == "t4-1":
                    d.delete_pod(NS, p["metadata"]["name"])
            d.delete_node("t4-1")
        if step == 70:
            d.add_node("t4-1", NODES["t4-1"])
        if step == 90:  # SIGKILL in the middle of a bind
            bound_before_kill = ks.stats["bound"]
            name = "p-%03d" % created
            created += 1
            d.add_pod(NS, name, gpu=1, mem="8Gi", compute=10)
            pod = d.state.get("pods", ad.pod_key(NS, name))
            ext.call("filter", {"Pod": pod, "Nodes": None,
                                "NodeNames": sorted(NODES)})
            t = threading.Thread(target=lambda: _quiet_bind(ext, name, pod))
            t.start()
            time.sleep(0.002)
            ext.kill9()
            t.join()
            queue.append(name)
            check_state(d)
            ext.start()
            waited = ext.wait_leading(60)
            print("extender 2 leading after %.1fs (the killed one's Lease "
                  "had to expire)" % waited)
    for _ in range(3):  # drain what can still be placed
        for q in list(queue):
            if ks.schedule(q):
                queue.remove(q)
    bound = check_state(d)
    check_guard(d)
    if ks.stats["bound"] <= bound_before_kill or bound_before_kill == 0:
        fail("binds must succeed before and after the restart: %r" % ks.stats)
    if ks.stats["touched"] == 0:
        fail("no pod was touched between filter and bind")
    # the extender's model agrees with the double: every bound pod booked
    t0 = time.time()
    while ext.metric("gpufrac_extender_pods") != bound and \
            time.time() - t0 < 10:
        time.sleep(0.1)
    if ext.metric("gpufrac_extender_pods") != bound:
        fail("extender books %r pods, the double has %d bound" %
             (ext.metric("gpufrac_extender_pods"), bound))
    # nothing leaks: with every pod gone, every node takes all its GPUs
    for p in d.pods():
        d.delete_pod(NS, p["metadata"]["name"])
    t0 = time.time()
    while ext.metric("gpufrac_extender_pods") != 0 and time.time() - t0 < 10:
        time.sleep(0.1)
    for node, gpus in NODES.items():
        d.add_pod(NS, "all-" + node, gpu=len(gpus), cpu="1")
        pod = d.state.get("pods", ad.pod_key(NS, "all-" + node))
        f = ext.call("filter", {"Pod": pod, "Nodes": None,
                                "NodeNames": [node]})
        if f.get("NodeNames") != [node]:
            fail("after every pod left, %s does not take %d whole GPUs: %r"
                 % (node, len(gpus), f))
    rc = ext.stop()
    d.stop()
    if rc != 0:
        fail("extender exited %d on SIGTERM" % rc)
    if d.state.errors:
        fail("strict double: " + "; ".join(d.state.errors[:5]))
    shutil.rmtree(work)  # kept (with the extenders' logs) when a check fails
    print("ok: %d pods created, %d bound at the end, stats %r, %d 409s on "
          "guard PATCHes, %d guard PATCHes, %d API requests" %
          (created, bound, ks.stats, d.state.conflicts, d.state.guard_patches,
           d.state.requests))


def guarded(p):
    a = p["metadata"].get("annotations", {})
    if p["metadata"]["name"] in USER_DND:  # the user's "false" stays
        return a.get(ad.DND) == "false" and a.get(ad.STE) == "false" and \
            a.get("gpufrac.io/guard-owns") == "safe-to-evict"
    return a.get(ad.DND) == "true" and a.get(ad.STE) == "false" and \
        a.get("gpufrac.io/guard-owns") == "do-not-disrupt,safe-to-evict"


USER_DND = set()  # pods created with the user's do-not-disrupt "false"


def check_guard(d):
    """Every bound pod (none is Ready) is protected within a few seconds;
    three made Ready lose the marks after the 1 s settle, the rest keep
    them."""
    t0 = time.time()
    while time.time() - t0 < 15:
        bound = [p for p in d.pods() if p["spec"].get("nodeName")]
        if all(guarded(p) for p in bound):
            break
        time.sleep(0.2)
    bad = [p["metadata"]["name"] for p in bound if not guarded(p)]
    if bad or not bound:
        fail("bound pods without the guard's marks: %r" % bad[:5])
    # two pods the guard fully owns and one with the user's own value
    names = [p["metadata"]["name"] for p in bound]
    ready = [n for n in names if n not in USER_DND][:2] + \
        [n for n in names if n in USER_DND][:1]
    for name in ready:
        d.set_ready(NS, name)
    t0 = time.time()
    while time.time() - t0 < 15:
        now = {p["metadata"]["name"]: p for p in d.pods()}
        if all("gpufrac.io/guard-released" in now[n]["metadata"]["annotations"]
               for n in ready):
            break
        time.sleep(0.2)
    for n in ready:
        a = now[n]["metadata"]["annotations"]
        # the user's own do-not-disrupt stays; only the guard's marks go
        kept = a.get(ad.DND) != "false" if n in USER_DND else ad.DND in a
        if kept or ad.STE in a or "gpufrac.io/guard-released" not in a:
            fail("pod %s Ready for the settle time keeps its marks: %r" % (n, a))
    for p in bound:
        if p["metadata"]["name"] in ready:
            continue
        if not guarded(now[p["metadata"]["name"]]):
            fail("pod %s lost its marks while not Ready" % p["metadata"]["name"])
    # the restarted extender adopted what the killed one had set: no pod
    # was protected twice
    twice = [k for k, n in d.state.guard_protects.items() if n > 1]
    if twice:
        fail("pods protected more than once (across the restart): %r" %
             twice[:5])
    # the protection rides in the Binding that binds the pod: no second
    # write per pod (a PATCH costs the API server as much as the bind)
    if d.state.protect_patches:
        fail("%d of %d protections were PATCHes after the bind, not part "
             "of the Binding" % (d.state.protect_patches,
                                 len(d.state.guard_protects)))
    if not [p for p in bound if p["metadata"]["name"] in USER_DND]:
        fail("no pod with the user's own do-not-disrupt was bound")


def _quiet_bind(ext, name, pod):
    try:
        ext.call("bind", {"PodName": name, "PodNamespace": NS,
                          "PodUID": pod["metadata"]["uid"],
                          "Node": "a100-0"}, timeout=5)
    except OSError:
        pass


if __name__ == "__main__":
    main()
