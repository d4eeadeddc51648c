#!/usr/bin/python3
"""The Helm chart deploy/helm/gpufrac, without a cluster: helm lint (and
--strict), helm template with each values file of tests/helm/values/ and
checks on the objects it renders, every file of tests/helm/values/bad/
refused with the message its first line names, and the chart's default
rendering equal to deploy/'s plain manifests.

Usage: test_chart.py HELM      Prints 'N passed, N failed'.

deploy/ against the chart: the objects are compared as data (parsed YAML),
not as text.  Normalised first, and nothing else: the four labels Helm's
conventions add to the chart's metadata (CHART_LABELS) are removed;
deploy/namespace.yaml is left out (helm install --create-namespace makes
the namespace); deploy/kube-scheduler-config.yaml, a file for
kube-scheduler's --config and no API object, is compared with the
ConfigMap gpufrac-kube-scheduler-config's data of the scheduler.mode
controlPlane rendering, which deploy/ does not have.

Every rendering is made as for a Kubernetes 1.37.2 API server that serves
MutatingAdmissionPolicy v1 (--kube-version, --api-versions: what helm
install learns from the cluster) unless a check says otherwise.
"""
import hashlib
import glob
import json
import os
import re
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHART = os.path.join(REPO, "deploy", "helm", "gpufrac")
DEPLOY = os.path.join(REPO, "deploy")
VALUES = os.path.join(HERE, "values")
CHART_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by",
                "app.kubernetes.io/instance", "app.kubernetes.io/version")
SCHED_CM = "gpufrac-kube-scheduler-config"
KS_CM = "gpufrac-kube-scheduler"  # gpufrac's own kube-scheduler's --config
KUBE_VERSION = "v1.37.2"
MAP_V1 = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
CAPS = ["--kube-version", KUBE_VERSION, "--api-versions", MAP_V1]
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding", "PriorityClass", "Namespace",
                  "DeviceClass", "MutatingAdmissionPolicy",
                  "MutatingAdmissionPolicyBinding"}
# The control-plane path, with the CIDRs it requires.
CONTROL_PLANE = ["scheduler.mode=controlPlane",
                 "extender.networkPolicy.schedulerCIDRs={10.0.0.0/24}"]

passed = failed = 0


def check(cond, what):
    global passed, failed
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    passed += bool(cond)
    failed += not cond
    return cond


def helm(*args):
    return subprocess.run([HELM] + list(args), capture_output=True, text=True, timeout=120)


def render(values=None, ns="gpufrac-system", sets=(), caps=CAPS):
    args = ["template", "gpufrac", CHART, "--namespace", ns] + list(caps)
    if values:
        args += ["-f", values]
    for s in sets:
        args += ["--set", s]
    r = helm(*args)
    if r.returncode != 0:
        raise RuntimeError("helm %s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr))
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def key(o):
    m = o["metadata"]
    return (o["kind"], m.get("namespace", ""), m["name"])


def index(objs):
    out = {}
    for o in objs:
        if key(o) in out:
            raise RuntimeError("two objects %s" % (key(o),))
        out[key(o)] = o
    return out


def sched_config(objs):
    """The KubeSchedulerConfiguration that calls the extender: the
    control-plane ConfigMap's, else gpufrac's own kube-scheduler's."""
    for o in objs:
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == SCHED_CM:
            return yaml.safe_load(o["data"]["kube-scheduler-config.yaml"])
    for o in objs:
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == KS_CM:
            return yaml.safe_load(o["data"]["config.yaml"])
    return None


def diff(a, b, path=""):
    """The paths where two parsed objects differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a:
                out.append("%s/%s: only in deploy/" % (path, k))
            elif k not in b:
                out.append("%s/%s: only in the chart" % (path, k))
            else:
                out += diff(a[k], b[k], "%s/%s" % (path, k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, "%s/%d" % (path, i))]
    return [] if a == b else ["%s: chart %r, deploy/ %r" % (path, a, b)]


def strip_chart_labels(o):
    o = json.loads(json.dumps(o))
    labels = o["metadata"].get("labels", {})
    for k in CHART_LABELS:
        labels.pop(k, None)
    if "labels" in o["metadata"] and not labels:
        del o["metadata"]["labels"]
    return o


def compare_with_deploy(objs, cp_objs):
    """[] when the chart's objects are deploy/'s, else what differs; cp_objs
    is the controlPlane rendering, whose ConfigMap holds
    deploy/kube-scheduler-config.yaml."""
    plain = []
    for p in sorted(glob.glob(os.path.join(DEPLOY, "*.yaml"))):
        with open(p) as f:
            plain += [d for d in yaml.safe_load_all(f) if d]
    want_sched = [d for d in plain if d["kind"] == "KubeSchedulerConfiguration"]
    plain = [d for d in plain if d["kind"] not in ("Namespace", "KubeSchedulerConfiguration")]
    got = [strip_chart_labels(o) for o in objs
           if not (o["kind"] == "ConfigMap" and o["metadata"]["name"] == SCHED_CM)]
    a, b = index(got), index(plain)
    out = ["%s %s/%s: only in the chart" % (k[0], k[1], k[2]) for k in sorted(set(a) - set(b))]
    out += ["%s %s/%s: only in deploy/" % (k[0], k[1], k[2]) for k in sorted(set(b) - set(a))]
    for k in sorted(set(a) & set(b)):
        out += ["%s %s: %s" % (k[0], k[2], d) for d in diff(a[k], b[k])]
    if len(want_sched) != 1:
        out.append("deploy/ has %d KubeSchedulerConfigurations" % len(want_sched))
    else:
        out += ["kube-scheduler-config.yaml: " + d
                for d in diff(sched_config(cp_objs), want_sched[0])]
    return out


# ---- checks every rendering passes ----------------------------------------
def generic(name, objs, ns):
    by = index(objs)
    check(all(o.get("apiVersion") and o.get("kind") and o["metadata"].get("name")
              for o in objs), "%s: every object has apiVersion, kind and a name" % name)
    # kube-system's: the binding to the Role that reads its
    # extension-apiserver-authentication ConfigMap.
    check(all((o["kind"] in CLUSTER_SCOPED) == ("namespace" not in o["metadata"]) and
              o["metadata"].get("namespace", ns) == ns or
              (o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) ==
              ("RoleBinding", "kube-system", "gpufrac-kube-scheduler-authentication-reader")
              for o in objs),
          "%s: namespaced objects in %s, cluster-scoped ones without a namespace" % (name, ns))
    check(all(o["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") == "Helm"
              for o in objs), "%s: every object carries Helm's labels" % name)
    sas = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    for o in objs:
        if o["kind"] not in ("DaemonSet", "Deployment"):
            continue
        n = o["metadata"]["name"]
        tmpl = o["spec"]["template"]
        sel = o["spec"]["selector"]["matchLabels"]
        check(sel.items() <= tmpl["metadata"]["labels"].items(),
              "%s: %s %s's selector matches its pod labels" % (name, o["kind"], n))
        check(tmpl["spec"]["serviceAccountName"] in sas,
              "%s: %s's ServiceAccount is rendered" % (name, n))
        for c in tmpl["spec"]["containers"]:
            img = c["image"]
            check(":" in img.rsplit("/", 1)[-1] and not img.endswith(":"),
                  "%s: %s's image %s has a tag" % (name, n, img))
    # Workload controllers must not fight over pods.
    sels = [(o["metadata"]["name"], o["spec"]["selector"]["matchLabels"])
            for o in objs if o["kind"] == "DaemonSet"]
    for i, (a, sa) in enumerate(sels):
        for b, sb in sels[i + 1:]:
            check(sa != sb and not (sa.items() <= sb.items() or sb.items() <= sa.items()),
                  "%s: DaemonSets %s and %s select different pods" % (name, a, b))
    cfg = sched_config(objs)
    svc = by.get(("Service", ns, "gpufrac-scheduler"))
    dep = by.get(("Deployment", ns, "gpufrac-scheduler"))
    if check(cfg and svc and dep, "%s: the extender's Deployment, Service and "
             "kube-scheduler configuration" % name):
        ext = cfg["extenders"][0]
        url = ext["urlPrefix"]
        host = url.split("//", 1)[1].split("/", 1)[0]
        port = svc["spec"]["ports"][0]["port"]
        want_host = svc["spec"].get("clusterIP") or "gpufrac-scheduler.%s.svc" % ns
        check(host == "%s:%d" % (want_host, port),
              "%s: urlPrefix %s calls the Service (%s:%d)" % (name, url, want_host, port))
        https = url.startswith("https://")
        check(ext["enableHTTPS"] is https and ("tlsConfig" in ext) is https,
              "%s: enableHTTPS and tlsConfig follow the URL's scheme" % name)
        c = dep["spec"]["template"]["spec"]["containers"][0]
        check(("--tls-cert" in c["args"]) is https, "%s: the extender serves %s" %
              (name, "HTTPS" if https else "HTTP"))
        cports = {p["name"]: p["containerPort"] for p in c["ports"]}
        check(c["args"][c["args"].index("--listen") + 1] == "0.0.0.0:%d" % cports["http"] and
              svc["spec"]["ports"][0]["targetPort"] == "http",
              "%s: the Service's target is the --listen port" % name)
        lease = c["args"][c["args"].index("--lease") + 1] if "--lease" in c["args"] else \
            "gpufrac-system/gpufrac-scheduler"
        role = by.get(("Role", ns, "gpufrac-scheduler-leader"))
        check(role and lease == "%s/gpufrac-scheduler" % ns and
              "gpufrac-scheduler" in role["rules"][1]["resourceNames"],
              "%s: the extender's Lease (%s) is the one its Role grants" % (name, lease))
    own_scheduler(name, objs, ns, by)
    admission(name, objs, by)
    netpol = by.get(("NetworkPolicy", ns, "gpufrac-scheduler"))
    if netpol:
        ext_port = dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
        rule = [r for r in netpol["spec"]["ingress"]
                if any(p["port"] == ext_port for p in r["ports"])]
        peers = rule[0]["from"] if rule else []
        ks = by.get(("Deployment", ns, "gpufrac-kube-scheduler"))
        if ks:
            labels = ks["spec"]["template"]["metadata"]["labels"]
            check(any("namespaceSelector" not in p and "podSelector" in p and
                      p["podSelector"]["matchLabels"].items() <= labels.items()
                      for p in peers),
                  "%s: the NetworkPolicy admits gpufrac's kube-scheduler pods to port %d "
                  "by label" % (name, ext_port))
        else:
            check(any("ipBlock" in p for p in peers),
                  "%s: controlPlane: the NetworkPolicy admits the schedulerCIDRs" % name)
    vap = by.get(("ValidatingAdmissionPolicy", "", "gpufrac-node-own-inventory"))
    pods = by.get(("ValidatingAdmissionPolicy", "", "gpufrac-node-own-pods"))
    check(bool(vap) == bool(pods),
          "%s: the agent's pods/status policy comes with its Node policy" % name)
    for v in (vap, pods):
        if v:
            expr = v["spec"]["matchConditions"][0]["expression"]
            check("'system:serviceaccount:%s:gpufrac-node'" % ns in expr,
                  "%s: admission policy %s matches %s's gpufrac-node" %
                  (name, v["metadata"]["name"], ns))
    return by


def own_scheduler(name, objs, ns, by):
    """scheduler.mode deployment: gpufrac's kube-scheduler Deployment, its
    configuration, Lease and RBAC agree with each other; controlPlane: none
    of it, and the control-plane ConfigMap instead."""
    dep = by.get(("Deployment", ns, "gpufrac-kube-scheduler"))
    cm = by.get(("ConfigMap", ns, KS_CM))
    if not dep:
        check(not cm and not any(o["metadata"]["name"].startswith("gpufrac-kube-scheduler")
                                 and o["kind"] != "ConfigMap" for o in objs) and
              ("ConfigMap", ns, SCHED_CM) in by,
              "%s: controlPlane: no kube-scheduler of the chart's, the ConfigMap %s" %
              (name, SCHED_CM))
        return
    check(("ConfigMap", ns, SCHED_CM) not in by,
          "%s: deployment: no control-plane ConfigMap" % name)
    spec = dep["spec"]["template"]["spec"]
    c = spec["containers"][0]
    cmd = c["command"]
    flags = dict(a[2:].split("=", 1) for a in cmd[1:])
    check(cmd[0] == "kube-scheduler" and set(flags) == {"config", "bind-address",
                                                        "secure-port", "v"},
          "%s: kube-scheduler's command %s" % (name, cmd))
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    cfg_dir, cfg_file = os.path.split(flags["config"])
    check(mounts.get("config") == cfg_dir and
          vols["config"]["configMap"]["name"] == KS_CM and cm and cfg_file in cm["data"],
          "%s: --config %s is the ConfigMap %s's key, mounted" % (name, flags["config"], KS_CM))
    text = cm["data"][cfg_file]
    want_hash = hashlib.sha256(text.rstrip("\n").encode()).hexdigest()[:16]
    check(dep["spec"]["template"]["metadata"]["annotations"].get("gpufrac.io/config-hash")
          == want_hash, "%s: the pod template carries the configuration's hash (a changed "
          "configuration rolls the pods)" % name)
    cfg = yaml.safe_load(text)
    check(cfg["kind"] == "KubeSchedulerConfiguration" and
          cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1" and
          "clientConnection" not in cfg and len(cfg["profiles"]) == 1 and
          len(cfg["extenders"]) == 1,
          "%s: one profile, one extender, the in-cluster client" % name)
    le = cfg["leaderElection"]
    role = by.get(("Role", ns, "gpufrac-kube-scheduler-leader"))
    rb = by.get(("RoleBinding", ns, "gpufrac-kube-scheduler-leader"))
    sa = spec["serviceAccountName"]
    subj = [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    check(le["leaderElect"] is True and le["resourceLock"] == "leases" and
          le["resourceNamespace"] == ns and le["resourceName"] != "gpufrac-scheduler" and
          role and le["resourceName"] in role["rules"][1]["resourceNames"] and
          {"get", "update"} <= set(role["rules"][1]["verbs"]) and rb and
          rb["roleRef"]["name"] == role["metadata"]["name"] and rb["subjects"] == subj,
          "%s: leader election on Lease %s/%s, granted to %s (not the extender's)" %
          (name, ns, le["resourceName"], sa))
    for rname, kind, bns, ref in (
            ("gpufrac-kube-scheduler", "ClusterRoleBinding", "", "system:kube-scheduler"),
            ("gpufrac-kube-scheduler-volume", "ClusterRoleBinding", "",
             "system:volume-scheduler"),
            ("gpufrac-kube-scheduler-authentication-reader", "RoleBinding", "kube-system",
             "extension-apiserver-authentication-reader")):
        b = by.get((kind, bns, rname))
        check(b and b["roleRef"]["name"] == ref and b["subjects"] == subj,
              "%s: %s %s binds %s to %s" % (name, kind, rname, ref, sa))
    img = c["image"]
    check(img.rsplit(":", 1)[0] == "registry.k8s.io/kube-scheduler" or
          name != "default", "%s: the upstream kube-scheduler image (%s)" % (name, img))
    for probe in ("livenessProbe", "readinessProbe"):
        g = c[probe]["httpGet"]
        check(g["scheme"] == "HTTPS" and g["port"] == "https" and
              c["ports"][0]["containerPort"] == int(flags["secure-port"]),
              "%s: %s on --secure-port" % (name, probe))


def admission(name, objs, by):
    """The MutatingAdmissionPolicy and its binding: the names it matches
    follow extender.accept, and the schedulerName it writes is the profile
    of gpufrac's kube-scheduler (mode deployment) or none (the control-plane
    path with default-scheduler)."""
    pol = [o for o in objs if o["kind"] == "MutatingAdmissionPolicy" and
           o["metadata"]["name"] == "gpufrac-gpu-pods"]
    gate = by.get(("MutatingAdmissionPolicy", "", "gpufrac-model-ready-gate"))
    check(bool(gate) == bool(pol),
          "%s: the model readiness gate's policy comes with the GPU pods' one" % name)
    if gate:
        gb = by.get(("MutatingAdmissionPolicyBinding", "", "gpufrac-model-ready-gate"))
        check(gb and gb["spec"]["policyName"] == "gpufrac-model-ready-gate" and
              gb["apiVersion"] == gate["apiVersion"] and
              "gpufrac.io/model-ready" in gate["spec"]["mutations"][0]["jsonPatch"]["expression"],
              "%s: the model readiness gate's binding and mutation" % name)
    if not pol:
        return
    pol = pol[0]
    b = by.get(("MutatingAdmissionPolicyBinding", "", pol["metadata"]["name"]))
    check(b and b["spec"]["policyName"] == pol["metadata"]["name"] and
          b["apiVersion"] == pol["apiVersion"],
          "%s: the MutatingAdmissionPolicy's binding" % name)
    sp = pol["spec"]
    check(sp["failurePolicy"] == "Fail" and sp["matchConstraints"]["resourceRules"] ==
          [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
            "resources": ["pods"]}], "%s: the policy acts on pod CREATE, failing closed" % name)
    ks = [o for o in objs if o["kind"] == "Deployment" and
          o["metadata"]["name"] == "gpufrac-kube-scheduler"]
    sched_patch = [m for m in sp["mutations"] if "/spec/schedulerName" in
                   m["jsonPatch"]["expression"]]
    if ks:
        prof = sched_config(objs)["profiles"][0]["schedulerName"]
        check(len(sched_patch) == 1 and
              ("value: '%s'" % prof) in sched_patch[0]["jsonPatch"]["expression"],
              "%s: the policy sends GPU pods to profile %s" % (name, prof))
    else:
        check(not sched_patch, "%s: controlPlane with default-scheduler: the policy "
              "leaves schedulerName alone" % name)


def kinds(objs):
    out = {}
    for o in objs:
        out.setdefault(o["kind"], []).append(o)
    return out


def container(by, kind, ns, name):
    return by[(kind, ns, name)]["spec"]["template"]["spec"]["containers"][0]


def away_from_gpus(by, ns):
    """The extender's preferred node affinity: {label: values} of its
    NotIn expressions, or None without one."""
    a = by[("Deployment", ns, "gpufrac-scheduler")]["spec"]["template"]["spec"]
    pref = a.get("affinity", {}).get("nodeAffinity", {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution")
    if not pref or len(pref) != 1 or pref[0]["weight"] != 100:
        return None
    ex = pref[0]["preference"]["matchExpressions"]
    if any(e["operator"] != "NotIn" for e in ex):
        return None
    return {e["key"]: e["values"] for e in ex}


def doc_install_images(path):
    """The images a document's install block pushes (its `for i in ...;
    do skopeo copy` loop), the copy command's arguments and the --set
    *.image.repository=REG/NAME names of its helm install: (pushed, copy
    arguments, {value: name})."""
    with open(path) as f:
        text = f.read()
    m = re.search(r"^for i in ([^;]*); do\b[^\n]*\n\s*skopeo copy([^\n;]*)", text, re.M)
    pushed = m.group(1).split() if m else []
    copy = m.group(2).split() if m else []
    sets = dict(re.findall(r"--set ([a-zA-Z.]+)\.image\.repository=\S*/([\w.-]+)", text))
    return pushed, copy, sets


def chart_images():
    """Every image the default rendering's pods and NOTES.txt name whose
    repository is one of gpufrac's (ghcr.io/gpufrac/...), as NAME."""
    objs = render()
    names = set()
    for o in objs:
        spec = o.get("spec", {}).get("template", {}).get("spec", {})
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            names.add(c["image"])
    with open(os.path.join(CHART, "templates", "NOTES.txt")) as f:
        for v in re.findall(r'include "gpufrac.image" \(list \.Values\.([a-zA-Z]+)\.image', f.read()):
            with open(os.path.join(CHART, "values.yaml")) as vf:
                names.add(yaml.safe_load(vf)[v]["image"]["repository"])
    return sorted({n.split("/")[-1].split(":")[0] for n in names
                   if n.startswith("ghcr.io/gpufrac/")})


def t_push_loop(objs, ns):
    """README's and docs/install.md's install blocks push every image of
    gpufrac's that the chart's pods and NOTES.txt use, and point the chart
    at each (issue 30 item 13: gpufrac-plan was missing)."""
    del objs, ns  # renders its own
    want = chart_images()
    check(set(want) >= {"gpufrac-node", "gpufrac-scheduler", "gpufrac-plan"},
          "push loop: the chart and NOTES.txt use %s" % want)
    with open(os.path.join(CHART, "values.yaml")) as f:
        values = yaml.safe_load(f)
    for doc in ("README.md", os.path.join("docs", "install.md")):
        pushed, copy, sets = doc_install_images(os.path.join(REPO, doc))
        check(sorted(pushed) == want,
              "push loop: %s pushes %s; the chart uses %s" % (doc, sorted(pushed), want))
        # Each layout's tag is an image index (amd64, arm64): without --all
        # skopeo copies only the machine's own platform's image.
        check("--all" in copy or "--multi-arch=all" in copy,
              "push loop: %s's skopeo copy pushes the image index with every "
              "platform (--all): %s" % (doc, " ".join(copy)))
        pointed = sorted(sets.values())
        check(pointed == want and all(
            values[k]["image"]["repository"].endswith("/" + n) for k, n in sets.items()),
              "push loop: %s's helm install points %s at the pushed images (%s)" %
              (doc, sorted(sets), pointed))


# ---- per values file --------------------------------------------------------
def t_default(objs, ns):
    by = generic("default", objs, ns)
    c = container(by, "DaemonSet", ns, "gpufrac-node")
    check(c["image"] == "ghcr.io/gpufrac/gpufrac-node:0.1.0" and
          container(by, "Deployment", ns, "gpufrac-scheduler")["image"] ==
          "ghcr.io/gpufrac/gpufrac-scheduler:0.1.0",
          "default: the images scripts/build-images builds, tagged appVersion")
    check(not any(o["kind"] in ("ServiceMonitor", "PriorityClass") for o in objs),
          "default: no ServiceMonitor and no PriorityClass")
    aw = away_from_gpus(by, ns)
    check(aw == {"gpufrac.io/enabled": ["true"]},
          "default: the extender prefers nodes without the default pool's "
          "gpufrac.io/enabled=true (%s)" % aw)
    cp = render(ns=ns, sets=CONTROL_PLANE)
    a = container(by, "Deployment", ns, "gpufrac-scheduler")["args"]
    check("--bind-qps" not in a and "--bind-burst" not in a,
          "default: no Binding limit (--bind-qps left out)")
    d = compare_with_deploy(objs, cp)
    check(not d, "default: the chart's objects equal deploy/'s%s" %
          "".join("\n       " + x for x in d))
    # The comparison sees a change: one value changed, exactly that differs.
    d = compare_with_deploy(render(ns=ns, sets=["extender.replicas=3"]), cp)
    check(d == ["Deployment gpufrac-scheduler: /spec/replicas: chart 3, deploy/ 2"],
          "default: with extender.replicas=3 the comparison reports that one "
          "difference (got %s)" % d)


def t_default_scheduler(objs, ns):
    """The defaults put gpufrac's own kube-scheduler and the admission
    policy in (issue 30): the scheduler's version is the cluster's, the
    policy's the newest the cluster serves, and the NetworkPolicy admits the
    scheduler pods without any CIDR."""
    by = index(objs)
    img = container(by, "Deployment", ns, "gpufrac-kube-scheduler")["image"]
    check(img == "registry.k8s.io/kube-scheduler:" + KUBE_VERSION,
          "default: kube-scheduler %s is the cluster's version (%s)" % (img, KUBE_VERSION))
    o = render(ns=ns, caps=["--kube-version", "v1.36.1-eks-a737599"])
    img = container(index(o), "Deployment", ns, "gpufrac-kube-scheduler")["image"]
    check(img == "registry.k8s.io/kube-scheduler:v1.36.1",
          "default: on v1.36.1-eks-a737599 the image is kube-scheduler:v1.36.1 (%s)" % img)
    check(not any(x["kind"].startswith("MutatingAdmissionPolicy") for x in o),
          "default: a cluster that does not serve MutatingAdmissionPolicy gets none")
    # helm install --dry-run=client: helm's built-in capabilities, which
    # list no MutatingAdmissionPolicy (helm template prints no NOTES).
    out = helm("install", "gpufrac", CHART, "-n", ns, "--dry-run=client").stdout
    check("spec.schedulerName: gpufrac" in out and "No MutatingAdmissionPolicy" in out,
          "default: without the policy, NOTES.txt says what each GPU pod must carry")
    o = render(ns=ns, caps=["--kube-version", "v1.35.0", "--api-versions",
                            "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"])
    v = sorted(x["apiVersion"] for x in o if x["kind"].startswith("MutatingAdmissionPolicy"))
    check(v == ["admissionregistration.k8s.io/v1beta1"] * 4,
          "default: where only v1beta1 is served, the policy is v1beta1 (%s)" % v)
    o = render(ns=ns, caps=["--kube-version", "v1.33.0"],
               sets=["admissionPolicy.apiVersion=v1"])
    v = sorted(x["apiVersion"] for x in o if x["kind"].startswith("MutatingAdmissionPolicy"))
    check(v == ["admissionregistration.k8s.io/v1"] * 4,
          "default: admissionPolicy.apiVersion v1 renders v1 without asking the cluster")
    # extender.accept: the extender's flag, HAMi's names managed, the
    # policy matching them, the scheduler's pods rolled (helm upgrade).
    a = render(ns=ns, sets=["extender.accept={hami,kai}",
                            "extender.extraManagedResources={nvidia.com/gpu}"])
    ab = index(a)
    args = container(ab, "Deployment", ns, "gpufrac-scheduler")["args"]
    check(args[args.index("--accept") + 1] == "hami,kai" if "--accept" in args else False,
          "default: extender.accept={hami,kai} runs the extender with --accept hami,kai")
    check("--accept" not in container(by, "Deployment", ns, "gpufrac-scheduler")["args"],
          "default: no --accept by default")
    managed = {m["name"]: m["ignoredByScheduler"]
               for m in sched_config(a)["extenders"][0]["managedResources"]}
    check(managed == {"gpufrac.io/gpu": False, "gpufrac.io/gpu-memory": True,
                      "gpufrac.io/gpu-compute": True, "nvidia.com/gpumem": True,
                      "nvidia.com/gpumem-percentage": True, "nvidia.com/gpucores": True,
                      "nvidia.com/gpu": True},
          "default: with hami, HAMi's names and the extra ones are managed (%s)" % managed)
    h0 = by[("Deployment", ns, "gpufrac-kube-scheduler")]["spec"]["template"]["metadata"]
    h1 = ab[("Deployment", ns, "gpufrac-kube-scheduler")]["spec"]["template"]["metadata"]
    check(h0["annotations"]["gpufrac.io/config-hash"] != h1["annotations"]["gpufrac.io/config-hash"],
          "default: a changed accept changes the scheduler pods' template (they restart)")
    pol = ab[("MutatingAdmissionPolicy", "", "gpufrac-gpu-pods")]["spec"]
    cond = pol["matchConditions"][0]["expression"]
    check(all(n in cond for n in ("nvidia.com/gpumem", "nvidia.com/gpucores", "'gpu-fraction'"))
          and "nvidia.com/gpumem" not in
          by[("MutatingAdmissionPolicy", "", "gpufrac-gpu-pods")]["spec"]["matchConditions"][0]
          ["expression"], "default: the policy matches HAMi's and KAI's names only when accepted")


def t_pools(objs, ns):
    by = generic("pools", objs, ns)
    ds = kinds(objs)["DaemonSet"]
    check(sorted(o["metadata"]["name"] for o in ds) == ["gpufrac-node", "gpufrac-node-a100"],
          "pools: two DaemonSets, gpufrac-node and gpufrac-node-a100")
    a = by[("DaemonSet", ns, "gpufrac-node-a100")]["spec"]["template"]
    check(a["spec"]["nodeSelector"] == {"gpufrac.io/enabled": "true", "gpufrac.io/pool": "a100"},
          "pools: a100's nodeSelector")
    check(a["metadata"]["labels"]["gpufrac.io/node-pool"] == "a100", "pools: a100's pod label")
    keys = [t.get("key") for t in a["spec"]["tolerations"]]
    check(keys == ["nvidia.com/gpu", "gpufrac.io/gpu", "dedicated"],
          "pools: a100 tolerates the GPU taints and its own (%s)" % keys)
    c = a["spec"]["containers"][0]
    check(c["command"][-2:] == ["--config", "/etc/gpufrac/node.conf"],
          "pools: a100's agent reads its node.conf")
    vol = [v for v in a["spec"]["volumes"] if v["name"] == "config"][0]
    cm = by.get(("ConfigMap", ns, "gpufrac-node-config-a100"))
    check(cm and vol["configMap"]["name"] == "gpufrac-node-config-a100",
          "pools: a100 mounts its ConfigMap gpufrac-node-config-a100")
    lines = [x for x in cm["data"]["node.conf"].splitlines() if x and not x.startswith("#")]
    check(lines == ["mode = exclusive", "mode.0 = shared", "slots = 8"],
          "pools: node.conf holds the pool's keys (%s)" % lines)
    d = by[("DaemonSet", ns, "gpufrac-node")]["spec"]["template"]["spec"]["containers"][0]
    check("--config" not in d["command"] and ("ConfigMap", ns, "gpufrac-node-config") not in by,
          "pools: the default pool, without config, has no ConfigMap and no --config")
    aw = away_from_gpus(by, ns)
    check(aw == {"gpufrac.io/enabled": ["true"], "gpufrac.io/pool": ["a100"]},
          "pools: the extender prefers nodes with none of the pools' labels (%s)" % aw)


def t_tls(objs, ns):
    by = generic("tls", objs, ns)
    dep = by[("Deployment", ns, "gpufrac-scheduler")]
    spec = dep["spec"]["template"]["spec"]
    c = spec["containers"][0]
    check(dep["spec"]["replicas"] == 3, "tls: 3 replicas")
    check(c["image"] == "registry.example/gpufrac-scheduler:0.1.0-rc1" and
          c["imagePullPolicy"] == "Always", "tls: the image and pull policy from the values")
    check(spec["imagePullSecrets"] == [{"name": "regcred"}] and
          by[("DaemonSet", ns, "gpufrac-node")]["spec"]["template"]["spec"]["imagePullSecrets"]
          == [{"name": "regcred"}], "tls: the pull secret on every pod")
    a = c["args"]
    check([a[a.index(f) + 1] for f in ("--tls-cert", "--tls-key", "--tls-client-ca")] ==
          ["/etc/gpufrac/tls/tls.crt", "/etc/gpufrac/tls/tls.key",
           "/etc/gpufrac/tls/client-ca.crt"], "tls: the extender's certificate arguments")
    check(spec["volumes"] == [{"name": "tls", "secret": {"secretName": "extender-tls",
                                                          "defaultMode": 0o440}}] and
          c["volumeMounts"][0]["mountPath"] == "/etc/gpufrac/tls",
          "tls: the Secret extender-tls mounted where the arguments point")
    ext = sched_config(objs)["extenders"][0]
    check(ext["urlPrefix"] == "https://10.96.0.99:8888/gpufrac" and ext["weight"] == 10,
          "tls: kube-scheduler calls https://10.96.0.99:8888 with weight 10")
    check(a[a.index("--lease") + 1] == "gpu-ops/gpufrac-scheduler",
          "tls: in namespace gpu-ops the extender's Lease is gpu-ops/gpufrac-scheduler")
    pol = by[("NetworkPolicy", ns, "gpufrac-scheduler")]
    cidrs = [f["ipBlock"]["cidr"] for f in pol["spec"]["ingress"][0]["from"] if "ipBlock" in f]
    check(cidrs == ["192.0.2.10/32", "192.0.2.11/32"], "tls: the NetworkPolicy's scheduler CIDRs")


def t_monitoring(objs, ns):
    by = generic("monitoring", objs, ns)
    sm = by.get(("ServiceMonitor", ns, "gpufrac"))
    if not check(sm and sm["apiVersion"] == "monitoring.coreos.com/v1",
                 "monitoring: a ServiceMonitor monitoring.coreos.com/v1"):
        return
    check(sm["metadata"]["labels"].get("release") == "kube-prometheus" and
          sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s",
                                       "honorLabels": True}],
          "monitoring: its labels and endpoint, honorLabels: true (docs/monitoring.md)")
    svcs = [o for o in objs if o["kind"] == "Service" and
            sm["spec"]["selector"]["matchLabels"].items() <= o["metadata"]["labels"].items()]
    check(sorted(s["metadata"]["name"] for s in svcs) ==
          ["gpufrac-node-metrics", "gpufrac-scheduler-metrics"],
          "monitoring: it selects the agents' and the extenders' metrics Services")
    for s in svcs:
        wl = [o for o in objs if o["kind"] in ("DaemonSet", "Deployment") and
              s["spec"]["selector"].items() <= o["spec"]["template"]["metadata"]["labels"].items()]
        port = s["spec"]["ports"][0]
        names = {p["name"]: p["containerPort"] for o in wl
                 for p in o["spec"]["template"]["spec"]["containers"][0]["ports"]}
        check(wl and s["spec"]["clusterIP"] == "None" and port["name"] == "metrics" and
              names.get(port["targetPort"]) == port["port"],
              "monitoring: %s is headless and targets its pods' %s port %d" %
              (s["metadata"]["name"], port["targetPort"], port["port"]))


def t_minimal(objs, ns):
    by = generic("minimal", objs, ns)
    ks = kinds(objs)
    check(not any(k in ks for k in ("NetworkPolicy", "ValidatingAdmissionPolicy",
                                    "ValidatingAdmissionPolicyBinding")),
          "minimal: no NetworkPolicy and no admission policy")
    check(("ServiceAccount", ns, "gpufrac-planner") not in by and
          ("ClusterRole", "", "gpufrac-planner") not in by, "minimal: no planner RBAC")
    dep = by[("Deployment", ns, "gpufrac-scheduler")]
    a = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    check(dep["spec"]["replicas"] == 1 and a[a.index("--guard") + 1] == "off" and
          "--guard-settle" not in a, "minimal: one replica, --guard off")
    check(a[a.index("--filter-top") + 1] == "1", "minimal: --filter-top 1")
    check("--bind-qps" in a and a[a.index("--bind-qps") + 1] == "50" and
          a[a.index("--bind-burst") + 1] == "100",
          "minimal: --bind-qps 50 --bind-burst 100")
    check("clusterIP" not in by[("Service", ns, "gpufrac-scheduler")]["spec"],
          "minimal: the Service gets a ClusterIP from Kubernetes")
    pcs = {o["metadata"]["name"]: o for o in ks.get("PriorityClass", [])}
    check(sorted(pcs) == ["gpufrac-batch", "gpufrac-serving"] and
          pcs["gpufrac-serving"]["value"] == 100000 and
          pcs["gpufrac-serving"]["preemptionPolicy"] == "PreemptLowerPriority" and
          pcs["gpufrac-batch"]["preemptionPolicy"] == "Never" and
          pcs["gpufrac-batch"]["globalDefault"] is False and
          pcs["gpufrac-serving"]["description"] == "GPU-share serving",
          "minimal: the two PriorityClasses as given")


def t_dra(objs, ns):
    """A pool in mode dra: its DaemonSet, the DeviceClasses and both DRA
    roles are deploy/dra's objects (the DRA variant of the agent, the
    classes, node-rbac.yaml and scheduler-rbac.yaml), and the extender runs
    with --dra allocate."""
    by = generic("dra", objs, ns)
    plain = []
    for f in ("node-agent-dra.yaml", "deviceclasses.yaml", "node-rbac.yaml",
              "scheduler-rbac.yaml"):
        with open(os.path.join(DEPLOY, "dra", f)) as fh:
            plain += [d for d in yaml.safe_load_all(fh) if d]
    want = index(plain)
    got = index([strip_chart_labels(o) for o in objs])
    missing = sorted(k for k in want if k not in got)
    check(not missing, "dra: the chart renders deploy/dra's objects (missing %s)" % missing)
    diffs = ["%s %s: %s" % (k[0], k[2], d) for k in sorted(want) if k in got
             for d in diff(got[k], want[k])]
    check(not diffs, "dra: and they equal deploy/dra's%s" %
          "".join("\n       " + x for x in diffs))
    dp = container(by, "DaemonSet", ns, "gpufrac-node")
    check("--mode" not in dp["command"] and
          any(m["mountPath"] == "/var/lib/kubelet/device-plugins" for m in dp["volumeMounts"]),
          "dra: the device-plugin pool is unchanged")
    args = container(by, "Deployment", ns, "gpufrac-scheduler")["args"]
    check(args[args.index("--dra") + 1] == "allocate" if "--dra" in args else False,
          "dra: the extender runs with --dra allocate (%s)" % args)
    aw = away_from_gpus(by, ns)
    check(aw == {"gpufrac.io/enabled": ["dra", "true"]},
          "dra: the extender prefers nodes of neither pool (%s)" % aw)
    # And without a dra pool or extender.dra, none of it.
    plain_objs = render(ns=ns)
    check(not any(o["kind"] == "DeviceClass" or o["metadata"]["name"].endswith("-dra")
                  for o in plain_objs),
          "dra: the default rendering has no DRA objects")


def t_autoscale(objs, ns):
    """extender.autoscale.enabled: deploy/autoscale's objects, and the
    extender runs the bridge with the values' delay and resource."""
    by = generic("autoscale", objs, ns)
    with open(os.path.join(DEPLOY, "autoscale", "autoscale.yaml")) as fh:
        want = index([d for d in yaml.safe_load_all(fh) if d])
    got = index([strip_chart_labels(o) for o in objs])
    missing = sorted(k for k in want if k not in got)
    diffs = ["%s %s: %s" % (k[0], k[2], d) for k in sorted(want) if k in got
             for d in diff(got[k], want[k])]
    check(not missing and not diffs, "autoscale: the chart renders deploy/autoscale's "
          "objects exactly (missing %s)%s" % (missing, "".join("\n       " + x for x in diffs)))
    args = container(by, "Deployment", ns, "gpufrac-scheduler")["args"]
    pairs = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    check(pairs.get("--autoscale-placeholders") == "on" and
          pairs.get("--autoscale-after") == "2m" and
          pairs.get("--autoscale-resource") == "nvidia.com/gpu" and
          pairs.get("--autoscale-node-types") ==
          "gpu-2x:2:80Gi:16:128Gi:H100-80GB,gpu-8x:8:80Gi:64:512Gi:H100-80GB",
          "autoscale: the extender's flags (%s)" % args)
    check(not any(o["metadata"]["name"] == "gpufrac-placeholder" for o in render(ns=ns)),
          "autoscale: off by default (no PriorityClass gpufrac-placeholder)")


def t_defrag(objs, ns):
    """extender.defrag: on: the extender runs with --defrag on and the chart
    renders deploy/defrag's RBAC exactly; dry-run: the flag without the RBAC
    (it evicts nothing); off (the default): neither."""
    by = generic("defrag", objs, ns)
    with open(os.path.join(DEPLOY, "defrag", "scheduler-defrag-rbac.yaml")) as fh:
        want = index([d for d in yaml.safe_load_all(fh) if d])
    got = index([strip_chart_labels(o) for o in objs])
    missing = sorted(k for k in want if k not in got)
    diffs = ["%s %s: %s" % (k[0], k[2], d) for k in sorted(want) if k in got
             for d in diff(got[k], want[k])]
    check(not missing and not diffs, "defrag: the chart renders deploy/defrag's "
          "objects exactly (missing %s)%s" % (missing, "".join("\n       " + x for x in diffs)))

    def flag(objs_):
        a = container(index(objs_), "Deployment", ns, "gpufrac-scheduler")["args"]
        return a[a.index("--defrag") + 1] if "--defrag" in a else None

    check(flag(objs) == "on", "defrag: the extender runs with --defrag on")
    a = container(index(objs), "Deployment", ns, "gpufrac-scheduler")["args"]
    check("--defrag-hold" in a and a[a.index("--defrag-hold") + 1] == "90s",
          "defrag: extender.defragHold passes --defrag-hold 90s (%s)" % a)
    dry = render(ns=ns, sets=("extender.defrag=dry-run",))
    check(flag(dry) == "dry-run" and
          not any(o["metadata"]["name"] == "gpufrac-scheduler-defrag" for o in dry),
          "defrag: dry-run passes the flag and installs no eviction RBAC")
    plain = render(ns=ns)
    check(flag(plain) is None and "--defrag-hold" not in
          container(index(plain), "Deployment", ns, "gpufrac-scheduler")["args"] and
          not any(o["metadata"]["name"] == "gpufrac-scheduler-defrag" for o in plain),
          "defrag: off by default (no flag, no RBAC)")


def t_scheduler(objs, ns):
    """gpufrac's own kube-scheduler with every value changed, TLS to the
    extender, and the control-plane path refused without CIDRs."""
    by = generic("scheduler", objs, ns)
    dep = by[("Deployment", ns, "gpufrac-kube-scheduler")]
    spec = dep["spec"]["template"]["spec"]
    c = spec["containers"][0]
    check(dep["spec"]["replicas"] == 3 and c["image"] == "registry.example/kube-scheduler:v1.36.4"
          and c["imagePullPolicy"] == "IfNotPresent" and "--v=4" in c["command"] and
          "--secure-port=10300" in c["command"] and spec["nodeSelector"] ==
          {"node-role.kubernetes.io/infra": ""} and spec["tolerations"][0]["key"] == "infra",
          "scheduler: replicas, image, verbosity, port, placement from the values")
    cfg = sched_config(objs)
    ext = cfg["extenders"][0]
    check(cfg["profiles"] == [{"schedulerName": "gpu-sched"}] and
          cfg["leaderElection"]["resourceName"] == "gpu-sched-lease" and
          ext["tlsConfig"] == {"certFile": "/etc/gpufrac/tls/tls.crt",
                               "keyFile": "/etc/gpufrac/tls/tls.key",
                               "caFile": "/etc/gpufrac/tls/ca.crt"},
          "scheduler: profile gpu-sched, Lease gpu-sched-lease, the client certificate")
    tls = [v for v in spec["volumes"] if v["name"] == "tls"]
    mnt = [m for m in c["volumeMounts"] if m["name"] == "tls"]
    check(tls and tls[0]["secret"]["secretName"] == "ks-client" and mnt and
          mnt[0]["mountPath"] == "/etc/gpufrac/tls",
          "scheduler: the Secret ks-client mounted where tlsConfig points")
    check(not any(o["kind"].startswith("MutatingAdmissionPolicy") for o in objs),
          "scheduler: admissionPolicy.enabled false: no policy")
    r = helm("template", "gpufrac", CHART, "-n", ns, *CAPS, "--set", "scheduler.mode=controlPlane")
    check(r.returncode != 0 and "extender.networkPolicy.schedulerCIDRs is empty" in r.stderr,
          "scheduler: controlPlane without schedulerCIDRs is refused, saying why (%s)" %
          r.stderr.strip()[:200])


CASES = [("default", None, "gpufrac-system", t_default),
         ("default-scheduler", None, "gpufrac-system", t_default_scheduler),
         ("scheduler", "scheduler.yaml", "gpu-ops", t_scheduler),
         ("autoscale", "autoscale.yaml", "gpufrac-system", t_autoscale),
         ("defrag", "defrag.yaml", "gpufrac-system", t_defrag),
         ("dra", "dra.yaml", "gpufrac-system", t_dra),
         ("pools", "pools.yaml", "gpufrac-system", t_pools),
         ("tls", "tls.yaml", "gpu-ops", t_tls),
         ("monitoring", "monitoring.yaml", "gpufrac-system", t_monitoring),
         ("minimal", "minimal.yaml", "gpufrac-system", t_minimal),
         ("push-loop", None, "gpufrac-system", t_push_loop)]


def main():
    global HELM
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    HELM = sys.argv[1]
    if not os.access(HELM, os.X_OK):
        check(False, "helm at %s (scripts/install-k8s builds it)" % HELM)
        print("%d passed, %d failed" % (passed, failed))
        return 1
    for strict in ([], ["--strict"]):
        r = helm("lint", *strict, CHART)
        check(r.returncode == 0 and "0 chart(s) failed" in r.stdout,
              "helm lint %s%s%s" % (" ".join(strict), "" if r.returncode == 0 else "\n",
                                    "" if r.returncode == 0 else r.stdout + r.stderr))
    files = sorted(glob.glob(os.path.join(VALUES, "*.yaml")))
    listed = sorted(os.path.join(VALUES, v) for _, v, _, _ in CASES if v)
    check(files == listed, "every values file in tests/helm/values is checked")
    for f in files:
        r = helm("lint", "--strict", CHART, "-f", f)
        check(r.returncode == 0, "helm lint --strict -f %s%s" %
              (os.path.basename(f), "" if r.returncode == 0 else "\n" + r.stdout + r.stderr))
    for name, vf, ns, fn in CASES:
        try:
            fn(render(os.path.join(VALUES, vf) if vf else None, ns), ns)
        except Exception as e:  # a rendering or check crashed: that case failed
            check(False, "%s: %s: %s" % (name, type(e).__name__, e))
    # nodeAgent.advertiseCapacity (docs/kube.md, "Share capacity on the Node")
    for v, want in (("true", False), ("false", True)):
        try:
            by = index(render(sets=["nodeAgent.advertiseCapacity=" + v]))
            cmd = by[("DaemonSet", "gpufrac-system", "gpufrac-node")]["spec"][
                "template"]["spec"]["containers"][0]["command"]
            check(("--advertise-capacity=false" in cmd) == want,
                  "nodeAgent.advertiseCapacity=%s: --advertise-capacity=false %s (%s)"
                  % (v, "passed" if want else "not passed", cmd))
        except Exception as e:  # a rendering crashed: that case failed
            check(False, "advertiseCapacity=%s: %s: %s" % (v, type(e).__name__, e))
    bad = sorted(glob.glob(os.path.join(VALUES, "bad", "*.yaml")))
    check(len(bad) >= 5, "bad values files present (%d)" % len(bad))
    for f in bad:
        with open(f) as fh:
            first = fh.readline()
        want = first.split("# refused:", 1)[1].strip() if "# refused:" in first else None
        r = helm("template", "gpufrac", CHART, "-n", "gpufrac-system", "-f", f)
        check(want and r.returncode != 0 and want in r.stderr,
              "bad/%s refused: %s%s" % (os.path.basename(f), want,
                                        "" if r.returncode != 0 and want and want in r.stderr
                                        else "\n       exit %d: %s" % (r.returncode,
                                                                       r.stderr.strip()[:400])))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


HELM = None
if __name__ == "__main__":
    sys.exit(main())
