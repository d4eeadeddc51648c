#!/usr/bin/python3
"""A real Prometheus scrapes the real agent (CTest test_prometheus, label
node).

`gpufrac node --fake-gpus 2xA100-40GB --no-kube` serves /metrics on a free
loopback port, with a state directory holding two prepared containers
(node_prep: the agent's files and a region with usage, as a running
container leaves them).  /usr/bin/prometheus scrapes it every second
(generated config, its own free port, TSDB in a temporary directory).  The
test then asks Prometheus's HTTP API: the target is "up", and the values of
gpufrac_gpu_memory_total_bytes, the per-container and per-GPU usage and
gpufrac_node_memory_wasted_bytes equal both what the agent serves and the
numbers the containers were prepared with.  `promtool check metrics` must
accept the agent's text when promtool is present.

    test_prometheus.py --gpufrac PATH --node-prep PATH --prometheus PATH
                       [--promtool PATH]
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

GiB = 1 << 30
GPUS = "2xA100-40GB"
MODEL = "A100-40GB"  # the fake GPUs' model name
HOST = "prom-node"  # the agent's --node-name: the Hostname label
# pod uid, container, fake GPU, limit, used, compute
CONTAINERS = [("pod-p", "main", 0, 4 * GiB, 1 * GiB, 25),
              ("pod-q", "train", 1, 10 * GiB, 7 * GiB, 0)]


def fake_uuid(i):
    return "GPU-fa4e0000-0000-4000-8000-%012x" % i


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_for(fn, timeout, what):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            v = fn()
            if v:
                return v
        except (OSError, ValueError) as e:
            last = e
        time.sleep(0.2)
    fail("%s: not within %.0f s (%r)" % (what, timeout, last))


def samples(text):
    """name{labels} -> value from the exposition text."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, val = line.rpartition(" ")
        out[key] = float(val)
    return out


def labels_key(name, metric):
    """The sample key the agent writes, for a Prometheus result's labels
    (instance and job removed; label order as the agent writes it)."""
    order = ["pod_uid", "container", "gpu", "index", "uuid", "model", "mode",
             "UUID", "modelName", "pod", "namespace", "Hostname"]
    ls = [(k, v) for k, v in metric.items()
          if k not in ("__name__", "instance", "job")]
    ls.sort(key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)
    if not ls:
        return name
    return name + "{" + ",".join('%s="%s"' % kv for kv in ls) + "}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpufrac", required=True)
    ap.add_argument("--node-prep", required=True)
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--promtool", default="")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gfprom")
    state = os.path.join(work, "state")
    agent = prom = None
    try:
        for uid, ctr, gpu, limit, used, comp in CONTAINERS:
            subprocess.run([a.node_prep, "container", state, uid, ctr,
                            fake_uuid(gpu), str(limit), str(used), str(comp)],
                           check=True)
        alog = open(os.path.join(work, "agent.log"), "w")
        agent = subprocess.Popen(
            [a.gpufrac, "node", "--fake-gpus", GPUS, "--no-kube",
             "--state-dir", state, "--cdi-dir", os.path.join(work, "cdi"),
             "--listen", "127.0.0.1:0", "--node-name", HOST], stdout=alog, stderr=subprocess.STDOUT)

        def agent_port():
            if agent.poll() is not None:
                fail("agent exited %d" % agent.returncode)
            with open(alog.name) as f:
                m = re.search(r"metrics on port (\d+)", f.read())
            return int(m.group(1)) if m else None
        aport = wait_for(agent_port, 15, "the agent serving")
        target = "127.0.0.1:%d" % aport
        served = get("http://%s/metrics" % target)

        if a.promtool and os.path.exists(a.promtool):
            r = subprocess.run([a.promtool, "check", "metrics"], input=served,
                               capture_output=True, text=True)
            # DCGM exporter's label names (UUID, modelName, Hostname) are
            # camelCase by design, so the two exporters' series join; that
            # one lint is expected, any other problem fails.
            problems = [ln for ln in (r.stdout + r.stderr).splitlines()
                        if ln.strip() and "should be written in 'snake_case' "
                        "not 'camelCase'" not in ln]
            if r.returncode != 0 and problems:
                fail("promtool check metrics: %s%s" % (r.stdout, r.stderr))
            print("ok   promtool check metrics")
        else:
            print("skip promtool check metrics (no promtool)")

        pport = free_port()
        conf = os.path.join(work, "prometheus.yml")
        with open(conf, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: gpufrac-node\n"
                    "    static_configs:\n      - targets: ['%s']\n" % target)
        plog = open(os.path.join(work, "prometheus.log"), "w")
        prom = subprocess.Popen(
            [a.prometheus, "--config.file=" + conf,
             "--storage.tsdb.path=" + os.path.join(work, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % pport],
            stdout=plog, stderr=subprocess.STDOUT)
        api = "http://127.0.0.1:%d" % pport

        def ready():
            if prom.poll() is not None:
                with open(plog.name) as f:
                    fail("prometheus exited %d:\n%s" % (prom.returncode,
                                                        f.read()[-3000:]))
            return get(api + "/-/ready").strip() != ""
        wait_for(ready, 30, "prometheus ready")

        def target_up():
            t = json.loads(get(api + "/api/v1/targets"))
            act = t["data"]["activeTargets"]
            return act if act and act[0]["health"] == "up" else None
        act = wait_for(target_up, 30, "target health up")
        if len(act) != 1 or act[0]["scrapeUrl"] != \
                "http://%s/metrics" % target:
            fail("targets: %r" % act)
        print("ok   target %s up" % act[0]["scrapeUrl"])

        want = samples(served)
        checks = {
            "gpufrac_gpu_memory_total_bytes": {
                'gpufrac_gpu_memory_total_bytes{gpu="%s",UUID="%s",'
                'modelName="%s",Hostname="%s"}' % (fake_uuid(i), fake_uuid(i),
                                                   MODEL, HOST):
                    40.0 * GiB for i in range(2)},
            "gpufrac_gpu_memory_used_bytes": {
                'gpufrac_gpu_memory_used_bytes{gpu="%s",UUID="%s",'
                'modelName="%s",Hostname="%s"}' % (fake_uuid(g), fake_uuid(g),
                                                   MODEL, HOST):
                    float(u) for _, _, g, _, u, _ in CONTAINERS},
            "gpufrac_container_memory_used_bytes": {
                'gpufrac_container_memory_used_bytes{pod_uid="%s",'
                'container="%s",gpu="%s",UUID="%s",Hostname="%s"}' % (
                    p, c, fake_uuid(g), fake_uuid(g), HOST): float(u)
                for p, c, g, _, u, _ in CONTAINERS},
            "gpufrac_container_memory_limit_bytes": {
                'gpufrac_container_memory_limit_bytes{pod_uid="%s",'
                'container="%s",gpu="%s",UUID="%s",Hostname="%s"}' % (
                    p, c, fake_uuid(g), fake_uuid(g), HOST): float(lim)
                for p, c, g, lim, _, _ in CONTAINERS},
            "gpufrac_node_memory_wasted_bytes": {
                'gpufrac_node_memory_wasted_bytes{Hostname="%s"}' % HOST:
                    float(sum(lim - u for _, _, _, lim, u, _ in CONTAINERS))},
            "gpufrac_node_containers": {
                'gpufrac_node_containers{Hostname="%s"}' % HOST: 2.0},
        }
        for name, expected in checks.items():
            for k, v in expected.items():
                if want.get(k) != v:
                    fail("the agent serves %s = %r, want %r" %
                         (k, want.get(k), v))

            def query():
                q = urllib.parse.urlencode({"query": name})
                r = json.loads(get(api + "/api/v1/query?" + q))
                res = r["data"]["result"]
                return res if len(res) == len(expected) else None
            res = wait_for(query, 20, "query %s" % name)
            got = {labels_key(name, x["metric"]): float(x["value"][1])
                   for x in res}
            if got != expected:
                fail("prometheus has %s = %r, want %r" % (name, got,
                                                         expected))
            for x in res:
                if x["metric"].get("job") != "gpufrac-node" or \
                        x["metric"].get("instance") != target:
                    fail("labels of %s: %r" % (name, x["metric"]))
            print("ok   query %s: %d series, values as served" %
                  (name, len(res)))
        print("all passed")
        return 0
    finally:
        for p in (prom, agent):
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if agent and agent.returncode not in (0, None):
            print("FAIL: agent exited %d" % agent.returncode)
            sys.exit(1)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
