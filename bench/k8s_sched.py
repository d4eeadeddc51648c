#!/usr/bin/env python3
"""Scheduling throughput of the real kube-scheduler, alone and through the
gpufrac extender, against the real control plane of tests/e2e.

Usage: bench/k8s_sched.py K8S_BIN GPUFRAC [--nodes 1000] [--pods 5000]
                          [--mode alone|alone-shares|extender] [--agents 4]
                          [--qps N]
                          [--pprof FILE] [--pprof-api FILE]
                          [--guard on|off] [--filter-top N] [--live]

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


def make_node(api, name, mode):
    api.req("POST", "/api/v1/nodes", {"metadata": {
        "name": name, "labels": {"kubernetes.io/hostname": name},
        "annotations": {"gpufrac.io/inventory": inventory(name)}}})
    api.req("PATCH", "/api/v1/nodes/" + name, {"spec": {"taints": None}},
            "application/merge-patch+json")
    res = {"cpu": "64", "memory": "512Gi", "pods": "110", "gpufrac.io/gpu": "32"}
    if mode == "alone-shares":
        # kube-scheduler counts the shares itself: the node advertises them
        res.update({"gpufrac.io/gpu-memory": "640Gi", "gpufrac.io/gpu-compute": "800"})
    api.req("PATCH", "/api/v1/nodes/%s/status" % name, {"status": {
        "capacity": res, "allocatable": res,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Bench",
                        "message": "no kubelet"}]}},
        "application/strategic-merge-patch+json")


def make_pod(api, i, mode):
    lim = {"gpufrac.io/gpu": "1"}
    if mode in ("extender", "alone-shares"):
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


def main():
    a = sys.argv[1:]
    opt = {"--nodes": 1000, "--pods": 5000, "--mode": "extender", "--agents": 4, "--qps": 0,
           "--pprof": "", "--pprof-api": "", "--guard": "on", "--filter-top": 0,
           "--live": False}
    pos = []
    i = 0
    while i < len(a):
        if a[i] == "--live":
            opt["--live"] = True
            i += 1
        elif a[i] in opt:
            opt[a[i]] = a[i + 1] if a[i] in ("--mode", "--pprof", "--pprof-api", "--guard") else int(a[i + 1])
            i += 2
        else:
            pos.append(a[i])
            i += 1
    if len(pos) != 2 or opt["--mode"] not in ("alone", "alone-shares", "extender") or \
            opt["--guard"] not in ("on", "off"):
        print(__doc__, file=sys.stderr)
        return 2
    nnodes, npods, mode = opt["--nodes"], opt["--pods"], opt["--mode"]
    c = Cluster(pos[0], pos[1], api_profiling=bool(opt["--pprof-api"]))
    try:
        c.start(scheduler=False)
        for f in ("namespace.yaml", "scheduler-rbac.yaml", "node-agent.yaml"):
            c.kubectl("apply", "--server-side", "-f", os.path.join(DEPLOY, f))
        api = Conn(c)
        api.req("POST", "/api/v1/namespaces", {"metadata": {"name": "bench"}})
        t = time.monotonic()
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda k: make_node(api, "node-%04d" % k, mode), range(nnodes)))
        log("%d nodes in %.1f s" % (nnodes, time.monotonic() - t))
        wait_for("ServiceAccount default in bench", lambda: c.admin.get(
            "/api/v1/namespaces/bench/serviceaccounts/default"), 60)
        def create_pods():
            t = time.monotonic()
            with ThreadPoolExecutor(8) as ex:
                list(ex.map(lambda k: make_pod(api, k, mode), range(npods)))
            log("%d pods in %.1f s" % (npods, time.monotonic() - t))
        if not opt["--live"]:
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
            ext = c.spawn("extender", [c.gpufrac, "scheduler", "--listen",
                                       "127.0.0.1:%d" % c.ext_port, "--kubeconfig", kc,
                                       "--guard", opt["--guard"],
                                       "--filter-top", str(opt["--filter-top"])])

            def ready():
                import urllib.request
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
        first = last = None
        n = 0
        t0 = time.monotonic()
        while n < npods:
            n = scheduled(c)
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
            if now - t0 > 1800:
                raise RuntimeError("only %d of %d pods scheduled after 30 min" % (n, npods))
            c.check_alive()
            time.sleep(0.2)
        last = time.monotonic()
        # Bound on the API server (the extender binds asynchronously).
        def all_bound():
            pods = c.admin.items("/api/v1/namespaces/bench/pods")
            return sum(1 for p in pods if p["spec"].get("nodeName")) == npods
        wait_for("all pods bound on the API server", all_bound, 300, 2)
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
               "live": opt["--live"],
               "nodes": nnodes, "pods": npods,
               "attempts": attempts,
               "qps": opt["--qps"] or "default (50)",
               "pods_per_s_scheduled": round(npods / max(last - first, 1e-9), 1),
               "pods_per_s_bound": round(rate, 1),
               "attempt_p50_ms": round(p50 * 1000, 2), "attempt_p99_ms": round(p99 * 1000, 2)}
        if ext:
            out["extender_rss_kib"] = rss_kib(ext.p.pid)
            import urllib.request
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
        # scheduled pod to all bound): where the work goes on a shared box.
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
