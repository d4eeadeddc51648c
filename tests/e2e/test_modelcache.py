#!/usr/bin/env python3
"""The node agent's weight cache (issue 15 section 2, docs/modelcache.md)
against a real control plane (CTest label e2e).

Usage: test_modelcache.py K8S_BIN GPUFRAC [--keep]

deploy/namespace.yaml and deploy/node-agent.yaml applied (the agent's
ClusterRole and its prefetch Role); one Node, mc1 (label pool=gpu); the
agent run as the gpufrac-node ServiceAccount with model_cache_dir set:

  1. A model fetched into the agent's cache before it starts (gpufrac cache
     fetch, file:// source) is published in the inventory's models, ready.
  2. `gpufrac cache prefetch B --nodes 1` picks mc1 (the one node with an
     inventory) and writes the ConfigMap; a second declaration for model C
     selects pool=cpu.  The agent fetches B (inventory: B ready, metrics:
     one fetch ok) and never C.
  3. The agent's ServiceAccount can read ConfigMaps in gpufrac-system only
     (the Role), not in another namespace.
"""

import json
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (DEPLOY, Failure, e2e_main, free_port, log,  # noqa: E402
                     start_and_run, wait_for)

NODE = "mc1"
INVENTORY = "gpufrac.io/inventory"


def fail(msg):
    raise Failure(msg)


def make_model(gpufrac, d, tag):
    os.makedirs(os.path.join(d, "sub"))
    for i, n in enumerate(("a.bin", "sub/b.bin")):
        with open(os.path.join(d, n), "wb") as f:
            f.write((tag * 1000 + str(i)).encode() * 100)
    r = subprocess.run([gpufrac, "cache", "manifest", d], capture_output=True,
                       text=True, check=True)
    with open(os.path.join(d, "gpufrac.manifest"), "w") as f:
        f.write(r.stdout)
    return r.stderr.strip()  # sha256:<hex>


class Scenario:
    def __init__(self, c):
        self.c = c
        self.api = c.admin

    def models(self):
        n = self.api.get("/api/v1/nodes/" + NODE)
        a = n["metadata"].get("annotations", {}).get(INVENTORY)
        return {m["name"]: m for m in json.loads(a).get("models", [])} if a else {}

    def metric(self, line_start):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.port,
                                    timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(line_start + " "):
                    return float(line.split()[1])
        return None

    def run(self):
        c = self.c
        for f in ("namespace.yaml", "node-agent.yaml"):
            c.kubectl("apply", "--server-side", "--field-manager=e2e", "-f",
                      os.path.join(DEPLOY, f))
        c.add_node(NODE, {"pool": "gpu"})
        work = c.path("mc")
        os.makedirs(work)
        ga = make_model(c.gpufrac, os.path.join(work, "src-a"), "a")
        gb = make_model(c.gpufrac, os.path.join(work, "src-b"), "b")
        gc = make_model(c.gpufrac, os.path.join(work, "src-c"), "c")
        cache = os.path.join(work, "models")
        subprocess.run([c.gpufrac, "cache", "--dir", cache, "fetch",
                        "model-a@" + ga, "--source",
                        "file://" + os.path.join(work, "src-a")],
                       check=True, capture_output=True)
        cfg = c.node_conf(NODE, 4)
        with open(cfg, "a") as f:
            f.write("model_cache_dir = %s\nmodel_cache_budget = 1Gi\n"
                    "model_prefetch_namespace = gpufrac-system\n" % cache)
        kc = c.sa_kubeconfig("agent", c.token("gpufrac-node"))
        self.port = free_port()
        agent = c.spawn("agent", [
            c.gpufrac, "node", "--fake-gpus", "1xA100-80GB", "--node-name",
            NODE, "--kubeconfig", kc, "--config", cfg,
            "--listen", "127.0.0.1:%d" % self.port, "--interval", "1"])

        # 1. The model already cached is in the inventory.
        wait_for("model-a ready in %s's inventory" % NODE,
                 lambda: self.models().get("model-a", {}).get("state") == "ready", 60)
        m = self.models()["model-a"]
        if m["digest"] != ga or m["bytes"] <= 0:
            fail("model-a in the inventory: %s (digest %s)" % (m, ga))
        log("model-a published: %s" % m)

        # 2. Prefetch: C by a selector no node matches, then B by count.
        r = subprocess.run([c.gpufrac, "cache", "prefetch", "model-c@" + gc,
                            "--source", "file://" + os.path.join(work, "src-c"),
                            "--node-selector", "pool=cpu", "--kubeconfig",
                            c.admin_kc], capture_output=True, text=True)
        if r.returncode != 0:
            fail("prefetch C: %s" % r.stderr)
        r = subprocess.run([c.gpufrac, "cache", "prefetch", "model-b@" + gb,
                            "--source", "file://" + os.path.join(work, "src-b"),
                            "--nodes", "1", "--kubeconfig", c.admin_kc],
                           capture_output=True, text=True)
        if r.returncode != 0 or NODE not in r.stdout:
            fail("prefetch B: rc %d: %s %s" % (r.returncode, r.stdout, r.stderr))
        log(r.stdout.strip())
        cms = self.api.items("/api/v1/namespaces/gpufrac-system/configmaps",
                             labelSelector="gpufrac.io/model-prefetch")
        data = {cm["data"]["model"]: cm["data"] for cm in cms}
        if data.get("model-b@" + gb, {}).get("nodeNames") != NODE:
            fail("the prefetch ConfigMaps: %s" % data)
        wait_for("model-b ready in %s's inventory" % NODE,
                 lambda: self.models().get("model-b", {}).get("state") == "ready", 60)
        if "model-c" in self.models():
            fail("model-c, selected for pool=cpu, was fetched on a pool=gpu node")
        ok = self.metric('gpufrac_model_cache_fetches_total{result="ok"}')
        ready = self.metric('gpufrac_model_cache_models{state="ready"}')
        if ok != 1 or ready != 2:
            fail("metrics: fetches ok %s, ready models %s (want 1, 2)" % (ok, ready))
        log("model-b prefetched; model-c left alone; metrics agree")
        if not os.path.isfile(os.path.join(cache, "sha256", gb[7:], "files", "sub", "b.bin")):
            fail("model-b's files are not in the cache")

        # 3. The Role reaches gpufrac-system's ConfigMaps only.
        c.namespace("other")
        for ns, want in (("gpufrac-system", "yes"), ("other", "no")):
            r = c.kubectl("auth", "can-i", "list", "configmaps", "-n", ns,
                          as_kc=kc, check=False)
            if r.stdout.strip() != want:
                fail("the agent may list configmaps in %s: %s (want %s)" %
                     (ns, r.stdout.strip(), want))
        if not agent.alive():
            fail("the agent exited:\n%s" % agent.tail())
        c.stop_gpufrac(agent, 10)
        log("RBAC as declared; the agent stopped cleanly")


def main():
    return e2e_main(__doc__, "e2e modelcache", start_and_run(Scenario), tail=20)


if __name__ == "__main__":
    sys.exit(main())
