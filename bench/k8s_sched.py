#!/usr/bin/env python3
"""Scheduling throughput of the real kube-scheduler, alone and through the
gpufrac extender, against the real control plane of tests/e2e.

Usage: bench/k8s_sched.py K8S_BIN GPUFRAC [--nodes 1000] [--pods 5000]
                          [--mode alone|alone-shares|extender] [--agents 4]
                          [--qps N]
                          [--pprof FILE] [--pprof-api FILE]
                          [--guard on|off] [--filter-top N] [--live]
                          [--bind-qps N] [--node-shares]
                          [--scenario burst|fill|churn] [--rate R]
                          [--lifetime S] [--settle-cap S] [--seed N]

NODES fake Nodes, each with 8 H100-80GB in its gpufrac.io/inventory
annotation (the node agent's document, written here by the admin) and
gpufrac.io/gpu capacity 32 (8 GPUs x 4 slots); PODS pending pods, created
while kube-scheduler is down.  Then the extender (mode extender) and
kube-scheduler start, with deploy/kube-scheduler-config.yaml as it is
(without its extenders stanza in mode alone), and the clock runs from
kube-scheduler's first scheduled pod to its last, read from its own /metrics
(scheduler_schedule_attempts_total), so the bench's polling does not load
the API server.  Pods: gpufrac.io/gpu 1 (alone); gpufrac.io/gpu 1 with
gpu-memory 8Gi and gpu-compute 10 (extender; and alone-shares, where the
nodes advertise gpu-memory 640Gi and gpu-compute 800 so that kube-scheduler
alone places the same pod shape: what three extended resources cost
kube-scheduler without any extender).  AGENTS real `gpufrac node
--fake-gpus 8xH100-80GB` run on the first nodes (their inventory replaces
the written one: same GPUs) for their RSS.  --qps N sets kube-scheduler's
clientConnection qps (burst 2N) instead of deploy/'s default (50, burst
100), which caps the binds kube-scheduler makes itself.  Prints one line of
figures (JSON), with each process's CPU milliseconds per pod over the run
(user + system from /proc, first scheduled pod to all bound): on a shared
machine throughput is noisy, CPU per pod much less so.  --pprof FILE saves
kube-scheduler's CPU profile of 20 s from the first scheduled pod (read it
with `go tool pprof -top KUBE_SCHEDULER FILE`); --pprof-api FILE the same
of kube-apiserver (started with --profiling=true for it).  --guard off runs
the extender without its disruption guard (default on, as deployed).
--filter-top N runs the extender with --filter-top N (default 0: off): its
/filter keeps only the N best nodes (1: kube-scheduler skips /prioritize).
--live creates the pods after kube-scheduler (and the extender) started, as
fast as 8 client threads can, instead of before: a burst the informers see
only moments before the binds (the extender's GETs at bind on an informer
miss, gpufrac_guard_bind_reads_total, are counted in the output).

Like for like (issue 29; bench/k8s_fair.sh runs the alternation):
--bind-qps N gives the extender `--bind-qps N` (burst 2N): its Binding
writes held to the client limit --qps gives kube-scheduler (0: none, the
extender's default).  --node-shares makes the nodes advertise gpu-memory
and gpu-compute in every mode (as alone-shares does), so that
alone-shares and extender runs see identical Nodes as well as identical
Pods.  --scenario picks the pods (default burst: the modes' pods above):
  burst  PODS identical share pods (gpu 1, 8Gi, 10%), created before
         kube-scheduler starts (or --live), into an empty cluster;
  fill   PODS share pods of four sizes (8Gi/10%, 20Gi/25%, 40Gi/50%,
         80Gi/100%, 4:3:2:1, shuffled with --seed), more than the NODES
         hold: some filters fail and the GPUs fragment.  The run ends when
         kube-scheduler has no pod left in its active and backoff queues
         and the count scheduled has not moved for 5 s, or --settle-cap S
         (default 300) after the first bind: pods that do not fit are
         counted (scheduled, unschedulable), not waited for;
  churn  PODS of the fill sizes created at --rate R a second (default 30)
         by one thread while kube-scheduler runs, each deleted (grace 0)
         --lifetime S (default 20) after its creation, bound or not.  The
         figures are kube-scheduler's own pod scheduling latency
         (scheduler_pod_scheduling_sli_duration_seconds: queue entry to
         bound, retries included) p50/p99, and how many were bound.
fill and churn use the share pods in every mode: run them with --mode
alone-shares or extender.
"""

import http.client
import json
import os
import re
import ssl
import urllib.request
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "e2e"))
from cluster import DEPLOY, Cluster, free_port, log, wait_for  # noqa: E402

GiB = 1 << 30


class Conn:
    """One persistent HTTPS connection per thread, as the admin."""

    def __init__(self, c):
        self.c = c
        self.local = threading.local()

    def req(self, method, path, body=None, ctype="application/json"):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection("127.0.0.1", self.c.api_port,
                                               context=self.c.admin.ctx, timeout=60)
            self.local.conn = conn
        data = json.dumps(body).encode() if body is not None else None
        try:
            conn.request(method, path, data, {"Content-Type": ctype})
            r = conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionError):
            # the API server closed a connection left idle: once more on a new one
            conn.close()
            conn = http.client.HTTPSConnection("127.0.0.1", self.c.api_port,
                                               context=self.c.admin.ctx, timeout=60)
            self.local.conn = conn
            conn.request(method, path, data, {"Content-Type": ctype})
            r = conn.getresponse()
        text = r.read()
        if r.status >= 300:
            raise RuntimeError("%s %s: %d %s" % (method, path, r.status, text[:300]))
        return json.loads(text)


def inventory(node):
    return json.dumps({"version": 1, "gpus": [
        {"index": i, "uuid": "GPU-%s-%d" % (node, i), "model": "H100-80GB",
         "memory": 80 * GiB, "mode": "shared"} for i in range(8)]})


SHAPES = (("8Gi", "10"), ("20Gi", "25"), ("40Gi", "50"), ("80Gi", "100"))
SHAPE_WEIGHTS = (4, 3, 2, 1)


def shapes_for(npods, scenario, seed):
    """The pod sizes by index: one shape for burst, the mixed ones (the
    same list for a given seed, so every mode gets the same pods)."""
    if scenario == "burst":
        return None
    import random
    rng = random.Random(seed)
    pool = [sh for sh, w in zip(SHAPES, SHAPE_WEIGHTS) for _ in range(w)]
    return [rng.choice(pool) for _ in range(npods)]


def make_node(api, name, mode, shares=False):
    api.req("POST", "/api/v1/nodes", {"metadata": {
        "name": name, "labels": {"kubernetes.io/hostname": name},
        "annotations": {"gpufrac.io/inventory": inventory(name)}}})
    api.req("PATCH", "/api/v1/nodes/" + name, {"spec": {"taints": None}},
            "application/merge-patch+json")
    res = {"cpu": "64", "memory": "512Gi", "pods": "110", "gpufrac.io/gpu": "32"}
    if mode == "alone-shares" or shares:
        # kube-scheduler counts the shares itself: the node advertises them
        res.update({"gpufrac.io/gpu-memory": "640Gi", "gpufrac.io/gpu-compute": "800"})
    api.req("PATCH", "/api/v1/nodes/%s/status" % name, {"status": {
        "capacity": res, "allocatable": res,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Bench",
                        "message": "no kubelet"}]}},
        "application/strategic-merge-patch+json")


def make_pod(api, i, mode, shape=None):
    lim = {"gpufrac.io/gpu": "1"}
    if shape:
        lim.update({"gpufrac.io/gpu-memory": shape[0], "gpufrac.io/gpu-compute": shape[1]})
    elif mode in ("extender", "alone-shares"):
        lim.update({"gpufrac.io/gpu-memory": "8Gi", "gpufrac.io/gpu-compute": "10"})
    api.req("POST", "/api/v1/namespaces/bench/pods", {"metadata": {"name": "p-%d" % i},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                     "resources": {"limits": lim,
                                   "requests": {"cpu": "10m", "memory": "16Mi"}}}]}})


def metric_lines(text, name):
    return [ln for ln in text.splitlines() if ln.startswith(name)]


def scheduled(c):
    for ln in metric_lines(c.scheduler_get("/metrics"), "scheduler_schedule_attempts_total"):
        if 'result="scheduled"' in ln:
            return float(ln.split()[-1])
    return 0.0


def histogram_quantiles(text, name, qs, label='result="scheduled"'):
    """Quantiles of a Prometheus histogram over the series with label,
    linearly interpolated inside the bucket (as histogram_quantile does)."""
    buckets = {}
    for ln in metric_lines(text, name + "_bucket"):
        if label not in ln:
            continue
        le = re.search(r'[{,]le="([^"]+)"', ln).group(1)
        b = float("inf") if le == "+Inf" else float(le)
        buckets[b] = buckets.get(b, 0) + float(ln.split()[-1])
    bs = sorted(buckets.items())
    total = bs[-1][1] if bs else 0
    out = []
    for q in qs:
        rank, prev_b, prev_c = q * total, 0.0, 0.0
        for b, cnt in bs:
            if cnt >= rank:
                if b == float("inf"):
                    out.append(prev_b)
                else:
                    out.append(prev_b + (b - prev_b) * (rank - prev_c) / max(cnt - prev_c, 1e-9))
                break
            prev_b, prev_c = b, cnt
    return out


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    return 0


def cpu_s(pid):
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def pprof(c, path, seconds=20, port=None, who="kube-scheduler"):
    """kube-scheduler's own CPU profile (its /debug/pprof, on by default;
    or kube-apiserver's at port) over `seconds` of the run, written to path
    for `go tool pprof`."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(c.path("admin.crt"), c.path("admin.key"))
    url = "https://127.0.0.1:%d/debug/pprof/profile?seconds=%d" % (port or c.sched_port,
                                                                   seconds)
    with urllib.request.urlopen(url, context=ctx, timeout=seconds + 30) as r, \
            open(path, "wb") as f:
        f.write(r.read())
    log("%s profile written to %s" % (who, path))


def cpu_all(c, ext, agents):
    procs = {k: v.p.pid for k, v in c.procs.items()}
    if ext:
        procs["extender"] = ext.p.pid
    for k, g in enumerate(agents):
        procs["agent-%d" % k] = g.p.pid
    return {k: cpu_s(pid) for k, pid in procs.items()}


def gauge(text, name, label):
    """The value of a gauge's series with label (0 if absent)."""
    for ln in metric_lines(text, name + "{"):
        if label in ln:
            return float(ln.split()[-1])
    return 0.0


def churn(api, npods, rate, lifetime, shapes, mode, done):
    """Creates pod k at k/rate s and deletes it lifetime s after its
    creation (grace 0), on two threads; sets done when the last is gone."""
    t0 = time.monotonic()
    created = []

    def creator():
        for k in range(npods):
            delay = t0 + k / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            make_pod(api, k, mode, shapes[k])
            created.append((time.monotonic(), k))

    def deleter():
        j = 0
        while j < npods:
            if j >= len(created):
                time.sleep(0.01)
                continue
            at, k = created[j]
            delay = at + lifetime - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            api.req("DELETE", "/api/v1/namespaces/bench/pods/p-%d" % k,
                    {"gracePeriodSeconds": 0})
            j += 1
        done.set()
    threading.Thread(target=creator, daemon=True).start()
    threading.Thread(target=deleter, daemon=True).start()


def parse_args(a):
    opt = {"--nodes": 1000, "--pods": 5000, "--mode": "extender", "--agents": 4, "--qps": 0,
           "--pprof": "", "--pprof-api": "", "--guard": "on", "--filter-top": 0,
           "--live": False, "--bind-qps": 0, "--node-shares": False, "--scenario": "burst",
           "--rate": 30, "--lifetime": 20, "--settle-cap": 300, "--seed": 29}
    strs = ("--mode", "--pprof", "--pprof-api", "--guard", "--scenario")
    pos = []
    i = 0
    while i < len(a):
        if a[i] in ("--live", "--node-shares"):
            opt[a[i]] = True
            i += 1
        elif a[i] in opt and i + 1 < len(a):
            opt[a[i]] = a[i + 1] if a[i] in strs else int(a[i + 1])
            i += 2
        else:
            pos.append(a[i])
            i += 1
    ok = len(pos) == 2 and opt["--mode"] in ("alone", "alone-shares", "extender") and \
        opt["--guard"] in ("on", "off") and \
        opt["--scenario"] in ("burst", "fill", "churn") and \
        not (opt["--scenario"] != "burst" and opt["--mode"] == "alone") and \
        not (opt["--scenario"] != "burst" and opt["--live"]) and opt["--rate"] > 0
    return (opt, pos) if ok else (None, None)


def main():
    opt, pos = parse_args(sys.argv[1:])
    if opt is None:
        print(__doc__, file=sys.stderr)
        return 2
    nnodes, npods, mode = opt["--nodes"], opt["--pods"], opt["--mode"]
    scenario = opt["--scenario"]
    shapes = shapes_for(npods, scenario, opt["--seed"])
    load0 = os.getloadavg()
    c = Cluster(pos[0], pos[1], api_profiling=bool(opt["--pprof-api"]))
    try:
        c.start(scheduler=False)
        for f in ("namespace.yaml", "scheduler-rbac.yaml", "node-agent.yaml"):
            c.kubectl("apply", "--server-side", "-f", os.path.join(DEPLOY, f))
        api = Conn(c)
        api.req("POST", "/api/v1/namespaces", {"metadata": {"name": "bench"}})
        t = time.monotonic()
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda k: make_node(api, "node-%04d" % k, mode, opt["--node-shares"]),
                        range(nnodes)))
        log("%d nodes in %.1f s" % (nnodes, time.monotonic() - t))
        wait_for("ServiceAccount default in bench", lambda: c.admin.get(
            "/api/v1/namespaces/bench/serviceaccounts/default"), 60)
        def create_pods():
            t = time.monotonic()
            with ThreadPoolExecutor(8) as ex:
                list(ex.map(lambda k: make_pod(api, k, mode, shapes[k] if shapes else None),
                            range(npods)))
            log("%d pods in %.1f s" % (npods, time.monotonic() - t))
        if not opt["--live"] and scenario != "churn":
            create_pods()
        agents = []
        if opt["--agents"]:
            kc = c.sa_kubeconfig("agent", c.token("gpufrac-node"))
            for k in range(opt["--agents"]):
                d = c.path("agent-%d" % k)
                os.makedirs(d + "/s")
                with open(d + "/node.conf", "w") as f:
                    f.write("state_dir = %s/s\ncdi_dir = %s/s\nkubelet_dir = %s/s\n" % (d, d, d))
                agents.append(c.spawn("agent-%d" % k, [
                    c.gpufrac, "node", "--fake-gpus", "8xH100-80GB",
                    "--node-name", "node-%04d" % k, "--kubeconfig", kc,
                    "--config", d + "/node.conf", "--listen", "127.0.0.1:%d" % free_port()]))
        ext = None
        if mode == "extender":
            kc = c.sa_kubeconfig("extender", c.token("gpufrac-scheduler"))
            limit = []
            if opt["--bind-qps"]:
                limit = ["--bind-qps", str(opt["--bind-qps"]),
                         "--bind-burst", str(2 * opt["--bind-qps"])]
            ext = c.spawn("extender", [c.gpufrac, "scheduler", "--listen",
                                       "127.0.0.1:%d" % c.ext_port, "--kubeconfig", kc,
                                       "--guard", opt["--guard"],
                                       "--filter-top", str(opt["--filter-top"])] + limit)

            def ready():
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % c.ext_port,
                                            timeout=5) as r:
                    m = r.read().decode()
                return "gpufrac_extender_leader 1" in m and \
                    "gpufrac_extender_nodes %d" % nnodes in m
            t = time.monotonic()
            wait_for("the extender synced and leading", ready, 120, 0.5)
            log("extender synced and leading in %.1f s" % (time.monotonic() - t))
        c.start_scheduler(extender=(mode == "extender"), qps=opt["--qps"])
        if opt["--live"]:
            threading.Thread(target=create_pods, daemon=True).start()
        churned = threading.Event()
        if scenario == "churn":
            churn(api, npods, opt["--rate"], opt["--lifetime"], shapes, mode, churned)
        first = last = None
        n = changed_n = 0
        changed = None
        settled = False
        t0 = time.monotonic()
        while True:
            text = c.scheduler_get("/metrics")
            n = 0
            for ln in metric_lines(text, "scheduler_schedule_attempts_total"):
                if 'result="scheduled"' in ln:
                    n = float(ln.split()[-1])
            now = time.monotonic()
            if n > 0 and first is None:
                first = now
                cpu0 = cpu_all(c, ext, agents)
                if opt["--pprof"]:
                    threading.Thread(target=pprof, args=(c, opt["--pprof"]),
                                     daemon=True).start()
                if opt["--pprof-api"]:
                    threading.Thread(target=pprof, args=(c, opt["--pprof-api"]),
                                     kwargs={"port": c.api_port, "who": "kube-apiserver"},
                                     daemon=True).start()
            if n != changed_n:
                changed_n, changed = n, now
            if scenario == "burst" and n >= npods:
                break
            if scenario == "churn" and churned.is_set():
                break
            if scenario == "fill" and first is not None:
                busy = gauge(text, "scheduler_pending_pods", 'queue="active"') + \
                    gauge(text, "scheduler_pending_pods", 'queue="backoff"')
                if busy == 0 and now - changed >= 5:
                    settled = True
                    break
                if now - first > opt["--settle-cap"]:
                    break
            if now - t0 > 1800:
                raise RuntimeError("only %d of %d pods scheduled after 30 min" % (n, npods))
            c.check_alive()
            time.sleep(0.2)
        last = changed if scenario == "fill" else time.monotonic()
        nsched = int(n)
        # Bound on the API server (the extender binds asynchronously).
        def all_bound():
            pods = c.admin.items("/api/v1/namespaces/bench/pods")
            return sum(1 for p in pods if p["spec"].get("nodeName")) >= min(nsched, npods)
        if scenario != "churn":
            wait_for("all pods bound on the API server", all_bound, 300, 0.5)
        bound_at = time.monotonic()
        cpu1 = cpu_all(c, ext, agents)
        text = c.scheduler_get("/metrics")
        p50, p99 = histogram_quantiles(text, "scheduler_scheduling_attempt_duration_seconds",
                                       (0.5, 0.99))
        rate = npods / max(bound_at - first, 1e-9)
        attempts = {}
        for ln in metric_lines(text, "scheduler_schedule_attempts_total"):
            r = re.search(r'result="([a-z]+)"', ln)
            if r:
                attempts[r.group(1)] = attempts.get(r.group(1), 0) + int(float(ln.split()[-1]))
        out = {"mode": mode, "guard": opt["--guard"], "filter_top": opt["--filter-top"],
               "live": opt["--live"], "scenario": scenario,
               "nodes": nnodes, "pods": npods,
               "attempts": attempts,
               "qps": opt["--qps"] or "default (50)",
               "bind_qps": opt["--bind-qps"] if mode == "extender" else None,
               "node_shares": opt["--node-shares"] or mode == "alone-shares",
               "attempt_p50_ms": round(p50 * 1000, 2), "attempt_p99_ms": round(p99 * 1000, 2),
               "load_start": [round(x, 2) for x in load0],
               "load_end": [round(x, 2) for x in os.getloadavg()]}
        if scenario == "burst":
            out["pods_per_s_scheduled"] = round(npods / max(last - first, 1e-9), 1)
            out["pods_per_s_bound"] = round(rate, 1)
        elif scenario == "fill":
            out["scheduled"] = nsched
            out["unschedulable"] = int(gauge(text, "scheduler_pending_pods",
                                             'queue="unschedulable"'))
            out["settled"] = settled
            out["settle_s"] = round(last - first, 1)
            out["pods_per_s_scheduled"] = round(nsched / max(last - first, 1e-9), 1)
            out["pods_per_s_bound"] = round(nsched / max(bound_at - first, 1e-9), 1)
        else:
            sli = histogram_quantiles(text, "scheduler_pod_scheduling_sli_duration_seconds",
                                      (0.5, 0.99), "")
            out["rate"] = opt["--rate"]
            out["lifetime_s"] = opt["--lifetime"]
            out["scheduled"] = nsched
            out["sli_p50_ms"], out["sli_p99_ms"] = [round(x * 1000, 1) for x in sli]
        if ext:
            out["extender_rss_kib"] = rss_kib(ext.p.pid)
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % c.ext_port,
                                        timeout=5) as r:
                m = r.read().decode()
            out["extender_binds"] = {
                r: int(float(ln.split()[-1]))
                for ln in metric_lines(m, "gpufrac_extender_binds_total")
                for r in re.findall(r'result="([a-z]+)"', ln)}
            for name in ("gpufrac_guard_bind_reads_total",
                         "gpufrac_guard_bind_protections_total",
                         "gpufrac_guard_patches_total"):
                for ln in metric_lines(m, name + " "):
                    out[name] = int(float(ln.split()[-1]))
            out["extender_requests"] = {
                verb: sum(int(float(ln.split()[-1])) for ln in metric_lines(
                    m, "gpufrac_extender_request_duration_seconds_count")
                    if 'verb="%s"' % verb in ln)
                for verb in ("filter", "prioritize", "bind")}
            for verb in ("filter", "prioritize", "bind"):
                q = histogram_quantiles(m, "gpufrac_extender_request_duration_seconds",
                                        (0.5, 0.99), 'verb="%s"' % verb)
                out["extender_%s_p50_p99_ms" % verb] = [round(x * 1000, 2) for x in q]
        # CPU milliseconds per pod of each process over the run (first
        # scheduled pod to all bound; pods created, scheduled or not): where
        # the work goes on a shared box.
        per = {k: round((cpu1[k] - cpu0.get(k, 0.0)) * 1000 / npods, 2) for k in cpu1}
        agents_ms = sum(v for k, v in per.items() if k.startswith("agent-"))
        out["cpu_ms_per_pod"] = dict({k: v for k, v in sorted(per.items())
                                      if not k.startswith("agent-")},
                                     agents=round(agents_ms, 2))
        if agents:
            out["agent_rss_kib"] = sorted(rss_kib(g.p.pid) for g in agents)
        print(json.dumps(out))
        return 0
    finally:
        c.stop()


if __name__ == "__main__":
    sys.exit(main())
