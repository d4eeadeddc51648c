#!/usr/bin/env python3
"""deploy/ manifests: they parse, carry what a cluster admin needs, and agree
with each other (the Service the scheduler config calls exists, RBAC grants
the verbs the extender uses and no more).  Prints 'N passed, N failed'."""
import glob, os, sys
import yaml

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy")
docs = []
for path in sorted(glob.glob(os.path.join(root, "*.yaml"))):
    with open(path) as f:
        docs += [(os.path.basename(path), d) for d in yaml.safe_load_all(f) if d]
passed = failed = 0


def check(cond, what):
    global passed, failed
    print(("ok   " if cond else "FAIL ") + what)
    passed += bool(cond)
    failed += not cond


kinds = {d["kind"]: d for _, d in docs}
for name, d in docs:
    check("apiVersion" in d and "kind" in d, f"{name}: {d.get('kind')} has apiVersion and kind")

cfg = kinds.get("KubeSchedulerConfiguration")
check(cfg is not None and cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1",
      "KubeSchedulerConfiguration v1")
exts = (cfg or {}).get("extenders", [])
check(len(exts) == 1, "one extender entry (kube-scheduler refuses two managing the same resources)")
ext = exts[0] if exts else {}
for key in ("urlPrefix", "filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb", "weight",
            "nodeCacheCapable", "managedResources", "httpTimeout"):
    check(key in ext, f"extender stanza has {key}")
# kube-scheduler's own validation: no resource managed twice, weight > 0.
names = [m["name"] for e in exts for m in e.get("managedResources", [])]
check(len(names) == len(set(names)), "no managed resource named twice across extenders")
check(all(e.get("weight", 0) > 0 for e in exts if e.get("prioritizeVerb")), "prioritize weight > 0")
managed = {m["name"]: m.get("ignoredByScheduler") for m in ext.get("managedResources", [])}
check(managed.get("gpufrac.io/gpu-memory") is True, "gpu-memory is ignoredByScheduler")
check(managed.get("gpufrac.io/gpu-compute") is True, "gpu-compute is ignoredByScheduler")
check(managed.get("gpufrac.io/gpu") is False, "gpu is counted by kube-scheduler")

svcs = [d for _, d in docs if d["kind"] == "Service"]
svc = svcs[0] if len(svcs) == 1 else None
dep = kinds.get("Deployment")
check(svc is not None and dep is not None, "a Deployment and a Service")
if svc and dep:
    host = ext.get("urlPrefix", "").split("//", 1)[-1].split("/", 1)[0]
    ip = svc["spec"].get("clusterIP")
    ports = [p["port"] for p in svc["spec"]["ports"]]
    # kube-scheduler on kubeadm uses host networking: no cluster DNS
    check(ip and any(host == f"{ip}:{p}" for p in ports),
          f"urlPrefix {host} is the Service's fixed ClusterIP and port")
    tmpl = dep["spec"]["template"]
    labels = tmpl["metadata"]["labels"]
    sel = dict(svc["spec"]["selector"])
    # Issue 12: followers refuse /bind, so the Service reaches the leader only.
    check(sel.pop("gpufrac.io/scheduler-role", None) == "leader",
          "the Service selects the leader's role label (GF_SCHED_KUBE_ROLE_LABEL)")
    check(all(labels.get(k) == v for k, v in sel.items()), "the Service selects the Deployment's pods")
    c = tmpl["spec"]["containers"][0]
    args = c.get("command", []) + c.get("args", [])
    check("gpufrac" in " ".join(args) or "gpufrac" in c.get("image", ""), "the container runs gpufrac")
    env = {e["name"]: e.get("valueFrom") for e in c.get("env", [])}
    check(env.get("POD_NAME") == {"fieldRef": {"fieldPath": "metadata.name"}} and
          env.get("POD_NAMESPACE") == {"fieldRef": {"fieldPath": "metadata.namespace"}},
          "POD_NAME and POD_NAMESPACE from the downward API (the leader labels its Pod)")
    check(dep["spec"].get("replicas") == 2, "two replicas (a warm standby)")
    cports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    hl = args[args.index("--health-listen") + 1] if "--health-listen" in args else ""
    check(hl.endswith(f":{cports.get('health')}"), "--health-listen is the health port")
    for probe in ("livenessProbe", "readinessProbe"):
        check(c.get(probe, {}).get("httpGet", {}).get("port") == "health", f"{probe} on the health port")

pols = [d for _, d in docs if d["kind"] == "NetworkPolicy"]
check(len(pols) == 1, "a NetworkPolicy for the extender")
if pols and dep:
    pol = pols[0]
    check(pol["spec"]["podSelector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items(),
          "the NetworkPolicy selects the extender's pods")
    rules8888 = [r for r in pol["spec"].get("ingress", []) if any(p.get("port") == 8888 for p in r.get("ports", []))]
    check(len(rules8888) == 1 and rules8888[0].get("from"), "port 8888 admits only listed sources")

rules = []
for name, d in docs:
    if d["kind"] in ("ClusterRole", "Role"):
        rules += d.get("rules", [])
def allowed(resource, verb):
    return any(resource in r.get("resources", []) and verb in r.get("verbs", []) for r in rules)
for res, verb in (("nodes", "list"), ("nodes", "watch"), ("pods", "list"), ("pods", "watch"),
                  ("pods", "patch"), ("pods/binding", "create"), ("leases", "update")):
    check(allowed(res, verb), f"RBAC allows {verb} {res}")
check(not any("*" in r.get("verbs", []) or "*" in r.get("resources", []) for r in rules),
      "RBAC has no wildcards")
check(not allowed("secrets", "get"), "RBAC does not read secrets")
# The extender's ClusterRole is exactly what it uses: the informers' list
# and watch, a GET after a 409, the PATCH of the grant and of the guard's
# annotations (issue 15: no update, no pods/status), bindings, the
# PodDisruptionBudgets the preempt verb honours (read only), and the
# evictions and Events of its own preemption for GPU memory (issue 32).
sched_rules = {}
for _, d in docs:
    if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gpufrac-scheduler":
        for r in d.get("rules", []):
            for g in r.get("apiGroups", []):
                for res in r.get("resources", []):
                    sched_rules.setdefault((g, res), set()).update(r.get("verbs", []))
check(sched_rules == {("", "nodes"): {"get", "list", "watch"},
                      ("", "pods"): {"get", "list", "watch", "patch"},
                      ("", "pods/binding"): {"create"},
                      ("policy", "poddisruptionbudgets"): {"list", "watch"},
                      # the extender's own preemption for GPU memory
                      ("", "pods/eviction"): {"create"},
                      ("", "events"): {"create"}},
      f"extender ClusterRole is exactly nodes get/list/watch, pods get/list/watch/patch, "
      f"pods/binding create, poddisruptionbudgets list/watch, pods/eviction and events create (got {sched_rules})")
if dep:
    c = dep["spec"]["template"]["spec"]["containers"][0]
    args = c.get("command", []) + c.get("args", [])
    for flag in ("--guard-settle", "--guard-cap"):
        v = args[args.index(flag) + 1] if flag in args else ""
        check(v[:-1].isdigit() and v[-1] in "smh", f"{flag} is a duration ({v!r})")

# The autoscaler bridge (issue 16, deploy/autoscale/autoscale.yaml): a PriorityClass
# below every real pod that preempts nothing, and pods create/delete in the
# extender's namespace only.
with open(os.path.join(root, "autoscale", "autoscale.yaml")) as f:
    docs += [("autoscale/autoscale.yaml", d) for d in yaml.safe_load_all(f) if d]
pcs = [d for _, d in docs if d["kind"] == "PriorityClass" and
       d["metadata"]["name"] == "gpufrac-placeholder"]
pc = pcs[0] if len(pcs) == 1 else {}
check(pc.get("value", 0) < 0 and pc.get("value", 0) >= -10 and pc.get("globalDefault") is False
      and pc.get("preemptionPolicy") == "Never",
      "PriorityClass gpufrac-placeholder: -10..-1 (Cluster Autoscaler's expendable cutoff is "
      "-10), not the default, preempts nothing")
ph_rules = {}
for _, d in docs:
    if d["kind"] == "Role" and d["metadata"]["name"] == "gpufrac-scheduler-placeholders":
        check(d["metadata"].get("namespace") == "gpufrac-system",
              "the placeholder Role is in gpufrac-system")
        for r in d.get("rules", []):
            for g in r.get("apiGroups", []):
                for res in r.get("resources", []):
                    ph_rules.setdefault((g, res), set()).update(r.get("verbs", []))
check(ph_rules == {("", "pods"): {"create", "delete"}},
      f"placeholder Role is exactly pods create/delete (got {ph_rules})")
check(any(d["kind"] == "RoleBinding" and d["roleRef"]["name"] == "gpufrac-scheduler-placeholders"
          and {"kind": "ServiceAccount", "name": "gpufrac-scheduler",
               "namespace": "gpufrac-system"} in d.get("subjects", []) for _, d in docs),
      "the placeholder Role is bound to the extender's ServiceAccount")

ds = kinds.get("DaemonSet")
check(ds is not None, "a node-agent DaemonSet")
if ds:
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    check(c["command"][:2] == ["gpufrac", "node"], "the DaemonSet runs gpufrac node")
    sc = c.get("securityContext", {})
    check(sc.get("privileged") is False and sc.get("allowPrivilegeEscalation") is False,
          "the node agent is not privileged")
    check("ALL" in sc.get("capabilities", {}).get("drop", []), "the node agent drops all capabilities")
    check(sc.get("readOnlyRootFilesystem") is True, "the node agent's root is read-only")
    check(not pod.get("hostNetwork") and not pod.get("hostPID"), "no host network or PID namespace")
    # Host paths: exactly the CDI specs, the per-container state and the
    # device-plugin sockets, each mounted read-write where the agent writes.
    vols = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    host_mounts = {vols[m["name"]]: (m["mountPath"], bool(m.get("readOnly")))
                   for m in c.get("volumeMounts", []) if m["name"] in vols}
    check(host_mounts == {"/var/run/cdi": ("/var/run/cdi", False),
                          "/run/gpufrac": ("/run/gpufrac", False),
                          "/var/lib/kubelet/device-plugins":
                              ("/var/lib/kubelet/device-plugins", False)},
          "host paths: CDI, state and device-plugin directories, read-write, nothing else")
    env = {e["name"]: e for e in c.get("env", [])}
    check(env.get("NODE_NAME", {}).get("valueFrom") == {"fieldRef": {"fieldPath": "spec.nodeName"}},
          "NODE_NAME comes from spec.nodeName")
    check(pod.get("priorityClassName") == "system-node-critical", "node agent is system-node-critical")
    tol = {t.get("key") for t in pod.get("tolerations", []) if t.get("operator") == "Exists"}
    check({"nvidia.com/gpu", "gpufrac.io/gpu"} <= tol, "tolerates the GPU taints")
    port = c["ports"][0]["containerPort"]
    check(any(f":{port}" in a for a in c["command"]), "metrics port matches --listen")
    # RBAC for the DaemonSet's service account: exactly what the agent uses.
    sa, ns = pod.get("serviceAccountName"), ds["metadata"].get("namespace")
    check(any(d["kind"] == "ServiceAccount" and d["metadata"]["name"] == sa and
              d["metadata"].get("namespace") == ns for _, d in docs),
          f"service account {ns}/{sa} exists")
    roles = [b["roleRef"]["name"] for _, b in docs if b["kind"] == "ClusterRoleBinding" and
             {"kind": "ServiceAccount", "name": sa, "namespace": ns} in b.get("subjects", [])]
    check(len(roles) == 1, f"one ClusterRoleBinding for {sa}")
    granted = {}
    for _, d in docs:
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] in roles:
            for r in d.get("rules", []):
                for g in r.get("apiGroups", []):
                    for res in r.get("resources", []):
                        granted.setdefault((g, res), set()).update(r.get("verbs", []))
    # pods/status patch and events create: the weight cache's model loader
    # (docs/modelcache.md: the gpufrac.io/model-ready condition, events).
    # nodes/status patch: the share capacity (docs/kube.md).
    check(granted == {("", "pods"): {"get", "list", "watch"}, ("", "nodes"): {"get", "patch"},
                      ("", "nodes/status"): {"patch"},
                      ("", "pods/status"): {"patch"}, ("", "events"): {"create"}},
          f"node agent RBAC is exactly pods get/list/watch, nodes get/patch, "
          f"nodes/status patch, "
          f"pods/status patch, events create (got {granted})")
    # One namespaced Role: the weight cache's prefetch ConfigMaps, read-only.
    nroles = [b["roleRef"]["name"] for _, b in docs if b["kind"] == "RoleBinding" and
              {"kind": "ServiceAccount", "name": sa, "namespace": ns} in b.get("subjects", [])]
    check(nroles == ["gpufrac-node-prefetch"], f"one RoleBinding for {sa} (got {nroles})")
    nrules = [r for _, d in docs if d["kind"] == "Role" and
              d["metadata"]["name"] == "gpufrac-node-prefetch" for r in d.get("rules", [])]
    check(nrules == [{"apiGroups": [""], "resources": ["configmaps"],
                      "verbs": ["get", "list", "watch"]}],
          f"the prefetch Role is exactly configmaps get/list/watch (got {nrules})")
    check(all(d["metadata"].get("namespace") == ns for _, d in docs
              if d["kind"] in ("Role", "RoleBinding") and
              d["metadata"]["name"] == "gpufrac-node-prefetch"),
          "the prefetch Role is in the agent's namespace")
    penv = env.get("POD_NAMESPACE", {}).get("valueFrom")
    check(penv == {"fieldRef": {"fieldPath": "metadata.namespace"}},
          "POD_NAMESPACE comes from metadata.namespace")

# The DRA variant of the node agent (deploy/dra/node-agent-dra.yaml): the
# same agent in --mode dra, on nodes the device-plugin DaemonSet does not
# select (one mode per node), with kubelet's plugin directories mounted
# where the agent puts its sockets by default (docs/dra-node.md).
with open(os.path.join(root, "dra", "node-agent-dra.yaml")) as f:
    dra = [d for d in yaml.safe_load_all(f) if d]
dsd = [d for d in dra if d["kind"] == "DaemonSet"]
dp = [d for _, d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpufrac-node"]
check(len(dsd) == 1 and len(dp) == 1, "one DRA DaemonSet beside the device-plugin one")
if dsd and dp:
    t, u = dsd[0]["spec"]["template"]["spec"], dp[0]["spec"]["template"]["spec"]
    cmd = t["containers"][0]["command"]
    check(cmd[:2] == ["gpufrac", "node"] and "--mode" in cmd and
          cmd[cmd.index("--mode") + 1] == "dra", f"DRA DaemonSet runs gpufrac node --mode dra ({cmd})")
    sel_a, sel_b = t.get("nodeSelector", {}), u.get("nodeSelector", {})
    check(any(k in sel_b and sel_b[k] != v for k, v in sel_a.items()),
          f"no node matches both DaemonSets ({sel_a} vs {sel_b})")
    mounts = {m["mountPath"] for m in t["containers"][0]["volumeMounts"]}
    for path in ("/var/lib/kubelet/plugins_registry",
                 "/var/lib/kubelet/plugins/gpu.gpufrac.io", "/var/run/cdi", "/run/gpufrac"):
        check(path in mounts, f"DRA DaemonSet mounts {path}")
    check("/var/lib/kubelet/device-plugins" not in mounts,
          "DRA DaemonSet does not mount the device-plugin directory")
    check(t["serviceAccountName"] == u["serviceAccountName"],
          "DRA DaemonSet uses the node agent's ServiceAccount")
    sel = dsd[0]["spec"]["selector"]["matchLabels"]
    check(sel != dp[0]["spec"]["selector"]["matchLabels"],
          "the two DaemonSets' selectors differ (their pods do not overlap)")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
