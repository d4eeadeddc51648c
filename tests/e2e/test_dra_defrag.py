#!/usr/bin/env python3
"""test_dra_defrag.py K8S_BIN GPUFRAC [--keep]

DRA mode 2 defragmentation (docs/dra.md, "Defragmentation") on the real
control plane: nodes n1 and n2 have one 80Gi GPU each, each half full with
the one 40Gi pod of a Deployment (web-a on n1, web-b on n2), Running and
Ready.  A gated pod asking 80Gi (big, the same priority: no preemption)
fits neither GPU although 80Gi is free in all.

- `--defrag off` (the default): big waits, nobody is evicted.
- `--defrag dry-run` (the extender restarted): the plan is said (log line, gpufrac_dra_defrag_plans_total
  1), nobody is evicted, big stays gated.
- `--defrag on` (the extender restarted): exactly one of the two pods is
  evicted, an Event GpufracDefragMoved on it and GpufracDefragFor on big;
  its replacement (made by its ReplicaSet, gated, placed by gpufrac) lands
  on the other GPU, beside the pod that stayed, not on the GPU freed for
  big; big is bound to the freed GPU's node with the whole 80Gi.

Before mode 2 had defragmentation big stayed gated for good (the extender's
defragmentation knows only gpufrac.io/gpu pods).
"""
import json
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as C  # noqa: E402

NS = "df"
GATE = "gpufrac.io/placement"


def slices(c, gpufrac, node):
    c.add_node(node)
    c.node_status(node, {"cpu": "64", "memory": "256Gi", "pods": "110"})
    conf = c.path("node.conf")
    with open(conf, "w") as f:
        f.write("dra_allocator = gpufrac\n")
    out = subprocess.run([gpufrac, "node", "--mode", "dra", "--once", "--print", "slices",
                          "--node-name", node, "--fake-gpus", "1xH100-80GB",
                          "--config", conf], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    for s in json.loads(out):
        c.admin.create("/apis/resource.k8s.io/v1/resourceslices", s)


def pod_spec(tmpl):
    return {"schedulingGates": [{"name": GATE}],
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "x", "resources": {
                "claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": tmpl}]}


class Scene:
    def __init__(self, c, gpufrac):
        self.c = c
        self.gpufrac = gpufrac
        self.ext = None

    def extender(self, mode):
        if self.ext:  # kept in c.extra: its log is shown on a failure
            self.c.stop_gpufrac(self.ext)
        self.ext = self.c.spawn("extender-" + mode, [
            self.gpufrac, "scheduler", "--dra", "allocate", "--defrag", mode,
            "--listen", "127.0.0.1:%d" % self.c.ext_port,
            "--kubeconfig", self.c.admin_kc, "--guard", "off"])

    def metrics(self):
        def get():
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" %
                                            self.c.ext_port, timeout=5) as r:
                    return r.read().decode()
            except OSError:
                return None
        text = C.wait_for("the extender's /metrics", get, 30)
        m = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                m[k] = v
        return m

    def pods(self):
        return {p["metadata"]["name"]: p for p in
                self.c.admin.items("/api/v1/namespaces/%s/pods" % NS)}

    def events(self, name):
        return [e.get("reason", "") + ": " + e.get("message", "")
                for e in self.c.admin.items("/api/v1/namespaces/%s/events" % NS)
                if e["involvedObject"].get("name") == name]

    def deployment(self, name):
        self.c.admin.create("/apis/apps/v1/namespaces/%s/deployments" % NS, {
            "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": pod_spec("g40")}}})

    def of(self, app):
        """app's live pods (not being deleted): {name: pod}."""
        return {n: p for n, p in self.pods().items()
                if (p["metadata"].get("labels") or {}).get("app") == app and
                not p["metadata"].get("deletionTimestamp")}

    def bound_one(self, app, timeout=60):
        def one():
            ps = self.of(app)
            got = [p for p in ps.values() if p["spec"].get("nodeName")]
            return got[0] if len(got) == 1 else None
        return C.wait_for("%s's pod bound" % app, one, timeout)

    def ready(self, name):
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.c.admin.request("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (NS, name),
                             {"status": {"phase": "Running", "conditions": [
                                 {"type": "Ready", "status": "True",
                                  "lastTransitionTime": now}]}},
                             "application/merge-patch+json")

    def gone(self, name):
        """No kubelet: a pod being deleted is confirmed gone as it would."""
        try:
            self.c.admin.delete("/api/v1/namespaces/%s/pods/%s" % (NS, name),
                                gracePeriodSeconds="0")
        except C.ApiError as e:
            if e.code != 404:
                raise


def body(c, gpufrac):
    c.start()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    c.namespace("gpufrac-system")
    c.kubectl("apply", "-f", os.path.join(root, "deploy", "dra", "deviceclasses.yaml"))
    s = Scene(c, gpufrac)
    slices(c, gpufrac, "n1")
    s.extender("off")
    c.namespace(NS)
    for name, mem, cores in (("g40", "40Gi", "40"), ("g80", "80Gi", "100")):
        c.admin.create("/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates" % NS, {
            "metadata": {"name": name}, "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {
                    "deviceClassName": "gpu.gpufrac.io",
                    "capacity": {"requests": {"memory": mem, "cores": cores}}}}]}}}})

    # web-a on n1 (the only node), a filler beside it, then web-b on n2
    # (n1 full); the filler goes: 40Gi free on each GPU.
    s.deployment("web-a")
    a = s.bound_one("web-a")
    c.admin.create("/api/v1/namespaces/%s/pods" % NS,
                   {"metadata": {"name": "filler"}, "spec": pod_spec("g40")})
    C.wait_for("filler bound", lambda: (s.pods().get("filler") or {})
               .get("spec", {}).get("nodeName"), 60)
    slices(c, gpufrac, "n2")
    s.deployment("web-b")
    b = s.bound_one("web-b")
    if a["spec"]["nodeName"] != "n1" or b["spec"]["nodeName"] != "n2":
        raise C.Failure("web-a on %s, web-b on %s: expected n1 and n2" %
                        (a["spec"]["nodeName"], b["spec"]["nodeName"]))
    s.gone("filler")
    C.wait_for("the filler's claim released", lambda: not any(
        cl["metadata"]["name"].startswith("filler")
        for cl in c.admin.items("/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims" % NS)),
        60)
    for p in (a, b):  # Running and Ready: not loading its weights
        s.ready(p["metadata"]["name"])
    time.sleep(2)  # the informers see them Ready
    C.log("web-a %s on n1, web-b %s on n2, 40Gi free on each GPU" %
          (a["metadata"]["name"], b["metadata"]["name"]))

    c.admin.create("/api/v1/namespaces/%s/pods" % NS,
                   {"metadata": {"name": "big"}, "spec": pod_spec("g80")})

    def unchanged(phase):
        """Two tries at least (one per 10 s): nobody evicted, big gated."""
        deadline = time.time() + 25
        while time.time() < deadline:
            for p in (a, b):
                app = p["metadata"]["labels"]["app"]
                if list(s.of(app)) != [p["metadata"]["name"]]:
                    raise C.Failure("%s: %s's pods are %s" % (phase, app, list(s.of(app))))
            time.sleep(0.5)
        big = s.pods()["big"]
        if big["spec"].get("nodeName") or not big["spec"].get("schedulingGates"):
            raise C.Failure("%s: big left its gate: %s" % (phase, big["spec"]))

    # off: big waits (80Gi free in all, but on two GPUs)
    unchanged("defrag off")
    C.log("defrag off: big still gated after 25 s, nobody evicted")

    # dry-run: said, nobody evicted
    s.extender("dry-run")
    unchanged("dry run")
    m = s.metrics()
    if m.get("gpufrac_dra_defrag_plans_total") != "1" or \
            m.get("gpufrac_dra_defrag_evictions_total") != "0":
        raise C.Failure("dry run: /metrics %s" % {k: v for k, v in m.items()
                                                  if "defrag" in k})
    said = [ln for ln in s.ext.tail(200).splitlines() if "defrag (dry run)" in ln]
    if not said:
        raise C.Failure("dry run: no plan said in the extender's log")
    C.log("dry run: %s" % said[-1])

    # on: exactly one of them moves, big gets the freed GPU
    s.extender("on")
    names = {a["metadata"]["name"]: "n1", b["metadata"]["name"]: "n2"}

    def evicted():
        ps = s.pods()
        return [n for n in names if n not in ps or ps[n]["metadata"].get("deletionTimestamp")]
    moved = C.wait_for("one pod evicted", evicted, 60)
    for n in moved:
        s.gone(n)
    if len(moved) != 1:
        raise C.Failure("evicted %s, expected exactly one" % moved)
    moved = moved[0]
    freed = names[moved]
    C.log("moved %s off %s" % (moved, freed))
    C.wait_for("big bound", lambda: (s.pods().get("big") or {})
               .get("spec", {}).get("nodeName"), 120)
    big = s.pods()["big"]
    if big["spec"]["nodeName"] != freed:
        raise C.Failure("big bound to %s, expected %s (the GPU freed for it)" %
                        (big["spec"]["nodeName"], freed))
    app = "web-a" if freed == "n1" else "web-b"
    other = "n2" if freed == "n1" else "n1"
    rep = s.bound_one(app, 90)
    if rep["spec"]["nodeName"] != other:
        raise C.Failure("%s's replacement %s bound to %s, expected %s" %
                        (app, rep["metadata"]["name"], rep["spec"]["nodeName"], other))
    time.sleep(12)  # a pass later: nobody else moved
    if len(evicted()) != 1:
        raise C.Failure("evicted %s, expected exactly one" % evicted())
    ev_m = [e for e in s.events(moved) if e.startswith("GpufracDefragMoved")]
    ev_b = [e for e in s.events("big") if e.startswith("GpufracDefragFor")]
    if not ev_m or not ev_b:
        raise C.Failure("events on %s %s, on big %s" % (moved, s.events(moved),
                                                        s.events("big")))
    m = s.metrics()
    if m.get("gpufrac_dra_defrag_evictions_total") != "1" or \
            m.get("gpufrac_dra_defrag_plans_total") != "1":
        raise C.Failure("/metrics %s" % {k: v for k, v in m.items() if "defrag" in k})
    C.log("big bound to %s; %s's replacement %s on %s; events: %r, %r" %
          (freed, app, rep["metadata"]["name"], other, ev_m[0], ev_b[0]))


def main():
    a = C.e2e_args(__doc__, 2)
    if not a:
        return 2
    (k8s_bin, gpufrac), keep = a
    return C.run_once(
        "test_dra_defrag",
        lambda: C.Cluster(k8s_bin, gpufrac, keep,
                          feature_gates={"DRAConsumableCapacity": True}),
        lambda c: body(c, gpufrac),
        lambda c: [C.log("%s log ends:\n%s" % (p.name, p.tail(30))) for p in c.extra])


if __name__ == "__main__":
    sys.exit(main())
