#!/usr/bin/env python3
"""Scheduling throughput of pods with ResourceClaims against the real
kube-scheduler v1.37 (issue 27, "Measure"): kube-scheduler's own DRA
allocation alone, gpufrac's mode 1 (kube-scheduler allocates, the extender
scores) and mode 2 (the extender allocates).

Usage: bench/k8s_dra.py K8S_BIN GPUFRAC [--mode alone|score|allocate]
                        [--nodes 1000] [--pods 5000] [--qps N]
                        [--kcm-qps N]

A real control plane (etcd, kube-apiserver, kube-controller-manager with
DRAConsumableCapacity on) and deploy/dra applied.  NODES fake Nodes (Ready,
no kubelet), each with one ResourceSlice of 8 shared H100-80GB as the node
agent publishes it (`gpufrac node --mode dra --once --print slices
--fake-gpus 8xH100-80GB`, made once and renamed per node; in mode allocate
with `dra_allocator = gpufrac`, so the devices carry the allocator taint
and are the extender's alone).  One ResourceClaimTemplate of 8Gi and 10
cores; PODS pods naming it (in mode allocate with the gpufrac.io/placement
scheduling gate), created while kube-scheduler is down; the run starts
once kube-controller-manager has made every pod's claim (--kcm-qps N: its
client at N requests a second, burst 2N, instead of its default 20, at
which 5000 claims take about 8 minutes to make; only the setup is faster).

  alone     kube-scheduler with deploy/dra/kube-scheduler-config.yaml less
            its extenders: upstream's first-fit allocator, no extender.
  score     the same file as it is, and `gpufrac scheduler --dra score`
            (mode 1: kube-scheduler allocates, calls the extender's
            /prioritize for every pod).
  allocate  kube-scheduler as in alone (mode 2 needs no kube-scheduler
            change) and `gpufrac scheduler --dra allocate`: the extender
            writes each claim's allocation and lifts the gate, then
            kube-scheduler binds the pod to the allocation's node.

The extender (score, allocate) starts after kube-scheduler.  Two rates,
both PODS over a time to the last pod bound (read from the API server):
from kube-scheduler's first scheduled pod (its own
scheduler_schedule_attempts_total), as bench/k8s_sched.py, and from the
moment the last component started (in allocate the extender's work before
kube-scheduler's first attempt counts only here).  CPU milliseconds per
pod of each process over the second span.  Prints one line of JSON.
"""

import json
import os
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "e2e"))
from cluster import Cluster, log, wait_for  # noqa: E402
import k8s_sched  # noqa: E402
from k8s_sched import Conn, cpu_all, rss_kib  # noqa: E402
import test_dra  # noqa: E402
from test_dra import DRA, GATES, NS, RES  # noqa: E402

MODES = ("alone", "score", "allocate")


def parse_args(a):
    opt = {"--mode": "alone", "--nodes": 1000, "--pods": 5000, "--qps": 0, "--kcm-qps": 0}
    pos = []
    i = 0
    while i < len(a):
        if a[i] in opt and i + 1 < len(a):
            opt[a[i]] = a[i + 1] if a[i] == "--mode" else int(a[i + 1])
            i += 2
        else:
            pos.append(a[i])
            i += 1
    ok = len(pos) == 2 and opt["--mode"] in MODES and opt["--nodes"] > 0 and \
        opt["--pods"] > 0 and opt["--qps"] >= 0 and opt["--kcm-qps"] >= 0
    return (opt, pos) if ok else (None, None)


def slice_text(gpufrac, allocator):
    """The agent's own slice for a node of 8 H100s, as JSON text with the
    node's name as NODENAME (one run of the agent for every node)."""
    import subprocess
    argv = [gpufrac, "node", "--mode", "dra", "--once", "--print", "slices",
            "--fake-gpus", "8xH100-80GB", "--node-name", "nodename"]
    cfg = None
    if allocator:
        cfg = "/tmp/gpufrac-bench-dra-%d.conf" % os.getpid()
        with open(cfg, "w") as f:
            f.write("dra_allocator = %s\n" % allocator)
        argv += ["--config", cfg]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    if cfg:
        os.unlink(cfg)
    slices = json.loads(out.stdout)
    if len(slices) != 1 or len(slices[0]["spec"]["devices"]) != 8:
        raise RuntimeError("expected one slice of 8 devices: %s" % out.stdout[:300])
    return json.dumps(slices[0]).replace("nodename", "NODENAME")


def make_node(api, k, text):
    name = "node-%04d" % k
    api.req("POST", "/api/v1/nodes", {"metadata": {
        "name": name, "labels": {"kubernetes.io/hostname": name}}})
    api.req("PATCH", "/api/v1/nodes/" + name, {"spec": {"taints": None}},
            "application/merge-patch+json")
    res = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    api.req("PATCH", "/api/v1/nodes/%s/status" % name, {"status": {
        "capacity": res, "allocatable": res,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Bench",
                        "message": "no kubelet"}]}},
        "application/strategic-merge-patch+json")
    # unique UUIDs per node: the uuid attribute's last 12 hex digits
    s = json.loads(text.replace("NODENAME", name))
    for d in s["spec"]["devices"]:
        u = d["attributes"]["uuid"]["string"]
        d["attributes"]["uuid"]["string"] = u[:-12] + "%08x%04x" % (k, int(u[-4:], 16))
    api.req("POST", RES + "/resourceslices", s)


def make_pod(api, i, gated):
    p = test_dra.pod("p-%d" % i, "t8", gated)
    p["metadata"]["labels"] = {"bench": "dra"}
    api.req("POST", "/api/v1/namespaces/%s/pods" % NS, p)


def count(api, path, pred, label="bench=dra"):
    n = 0
    cont = ""
    while True:
        q = "?limit=2000&labelSelector=%s%s" % (label, "&continue=" + cont if cont else "")
        r = api.req("GET", path + q)
        n += sum(1 for o in r["items"] if pred(o))
        cont = r["metadata"].get("continue", "")
        if not cont:
            return n


def run(c, opt):
    mode, nnodes, npods = opt["--mode"], opt["--nodes"], opt["--pods"]
    api = Conn(c)
    t = DRA(c)
    t.setup()
    text = slice_text(c.gpufrac, "gpufrac" if mode == "allocate" else None)
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda k: make_node(api, k, text), range(nnodes)))
    log("%d nodes and slices in %.1f s" % (nnodes, time.monotonic() - t0))
    api.req("POST", "%s/namespaces/%s/resourceclaimtemplates" % (RES, NS),
            test_dra.template("t8", "8Gi", 10))
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda k: make_pod(api, k, mode == "allocate"), range(npods)))
    log("%d pods in %.1f s" % (npods, time.monotonic() - t0))
    # kube-controller-manager makes each pod's claim (no label: all of NS)
    wait_for("every pod's claim", lambda: count(
        api, "%s/namespaces/%s/resourceclaims" % (RES, NS), lambda o: True, "") >= npods,
        1800, 2)
    with open(os.path.join(test_dra.DRA_DEPLOY, "kube-scheduler-config.yaml")) as f:
        cfg = f.read()
    c.start_scheduler(config=cfg, extender=(mode == "score"), qps=opt["--qps"] or None)
    ext = None
    if mode != "alone":
        kc = c.sa_kubeconfig("extender", c.token("gpufrac-scheduler"))
        ext = c.spawn("extender", [c.gpufrac, "scheduler", "--listen",
                                   "127.0.0.1:%d" % c.ext_port, "--kubeconfig", kc,
                                   "--dra", mode])
    started = time.monotonic()
    cpu0 = cpu_all(c, ext, [])
    # Progress from kube-scheduler's own counter (it binds in every mode,
    # and counts a pod scheduled once bound), so the polling does not load
    # the API server; the API server's count confirms it at the end.
    first = None
    n = 0
    while n < npods:
        n = k8s_sched.scheduled(c)
        if first is None and n > 0:
            first = time.monotonic()
        if time.monotonic() - started > 3600:
            raise RuntimeError("only %d of %d pods scheduled after 60 min" % (n, npods))
        c.check_alive()
        time.sleep(0.2)
    done = time.monotonic()
    bound = count(api, "/api/v1/namespaces/%s/pods" % NS,
                  lambda o: bool(o["spec"].get("nodeName")))
    if bound != npods:
        raise RuntimeError("kube-scheduler counts %d scheduled, the API server %d bound"
                           % (n, bound))
    cpu1 = cpu_all(c, ext, [])
    first = first or done
    out = {"mode": mode, "nodes": nnodes, "pods": npods,
           "qps": opt["--qps"] or "default (50)",
           "pods_per_s_from_first_scheduled": round(npods / max(done - first, 1e-9), 1),
           "pods_per_s_from_start": round(npods / max(done - started, 1e-9), 1),
           "seconds_from_start": round(done - started, 1),
           "cpu_ms_per_pod": {k: round((cpu1[k] - cpu0.get(k, 0.0)) * 1000 / npods, 2)
                              for k in sorted(cpu1)}}
    if ext:
        out["extender_rss_kib"] = rss_kib(ext.p.pid)
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % c.ext_port,
                                    timeout=5) as r:
            m = r.read().decode()
        for name in ("placed", "model_rebuilds"):
            out["dra_" + name] = sum(int(float(ln.split()[-1])) for ln in m.splitlines()
                                     if ln.startswith("gpufrac_dra_%s_total" % name))
    return out


def main():
    opt, pos = parse_args(sys.argv[1:])
    if opt is None:
        print(__doc__, file=sys.stderr)
        return 2
    load0 = os.getloadavg()
    c = Cluster(pos[0], pos[1], feature_gates=GATES, kcm_qps=opt["--kcm-qps"])
    try:
        c.start(scheduler=False)
        out = run(c, opt)
    finally:
        c.stop()
    out["load_start"] = [round(x, 2) for x in load0]
    out["load_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    threading.stack_size(1 << 20)
    sys.exit(main())
