#!/usr/bin/env bash
# gpufrac plan from the command line: exit codes, errors that say what and
# where, the bundled example, the files of --out DIR (the HTML's figures are
# the JSON's), and the example data being what scripts/plan-example makes.
# Prints one line per check and 'N passed, N failed'.
set -u
: "${GPUFRAC:?path to the gpufrac binary}" "${SRC:?the source tree}"
. "$(dirname "$0")/../cli/check.sh"

# ok NAME -- command...: passes when the command exits 0.
ok() {
  local name=$1
  shift 2
  if "$@" >"$tmp/ok.out" 2>&1; then
    echo "ok   $name"; pass=$((pass + 1))
  else
    echo "FAIL $name"; sed 's/^/  | /' "$tmp/ok.out" | head -10; fail=$((fail + 1))
  fi
}

check help         0 '--snapshot FILE'          -- "$GPUFRAC" plan --help
check in-help      0 'plan '                    -- "$GPUFRAC" help
check no-snapshot  2 'no snapshot'              -- "$GPUFRAC" plan
check bad-option   2 "unknown option '--bogus'" -- "$GPUFRAC" plan --bogus
check no-value     2 '--usage needs a value'    -- "$GPUFRAC" plan --example --usage
check bad-headroom 2 "--headroom 'lots'"        -- "$GPUFRAC" plan --example --headroom lots
check bad-format   2 "--format 'xml'"           -- "$GPUFRAC" plan --example --format xml
check bad-price    2 "--price: 'cheap'"         -- "$GPUFRAC" plan --example --price cheap
check both         2 'give one of them'         -- "$GPUFRAC" plan --example --snapshot x
check missing      1 '/nonexistent.json: No such file' -- "$GPUFRAC" plan --snapshot /nonexistent.json
check kc-missing   1 '/nonexistent.kc'          -- "$GPUFRAC" plan --kubeconfig /nonexistent.kc
check kc-example   2 'give one of them'         -- "$GPUFRAC" plan --kubeconfig x --example
check bad-window   2 "--window '7x'"            -- "$GPUFRAC" plan --example --window 7x
check long-window  2 "--window '91d'"           -- "$GPUFRAC" plan --example --window 91d
check prom-down    1 'http://127.0.0.1:1: query DCGM_FI_DEV_FB_USED' -- "$GPUFRAC" plan --example --prometheus http://127.0.0.1:1
check context-only 2 '--context needs --kubeconfig' -- "$GPUFRAC" plan --example --context c

echo '{"kind": "Deployment", "spec": {}}' >"$tmp/deploy.json"
check not-a-list   1 'deploy.json: not a Kubernetes list' -- "$GPUFRAC" plan --snapshot "$tmp/deploy.json"
printf '{"kind":"List","items":[{"kind":"Node","metadata":{"name":"c"},"status":{"allocatable":{"cpu":"4"}}}]}' >"$tmp/cpu.json"
check no-gpus      1 'no node in the snapshot has GPUs' -- "$GPUFRAC" plan --snapshot "$tmp/cpu.json"
printf '{"data":{"resultType":"vector","result":[{"metric":{"__name__":"DCGM_FI_DEV_FB_USED","pod":"p"},"value":[1,"x"]}]}}' >"$tmp/u.json"
check bad-usage    1 "u.json: response 0: result\[0\]: sample value 'x'" -- "$GPUFRAC" plan --example --usage "$tmp/u.json"

check example      0 'GPUs held'                -- "$GPUFRAC" plan --example
check example-wi   0 '^  gpufrac '              -- "$GPUFRAC" plan --example
check money-commas 0 'GPUs held .* \$[0-9]{1,3}(,[0-9]{3})+/month' -- "$GPUFRAC" plan --example
check no-whatif    0 'Waste'                    -- "$GPUFRAC" plan --example --no-whatif
check price-one    0 'GPUs held'                -- "$GPUFRAC" plan --example --price 1 --headroom 30%

# The same input gives the same JSON, byte for byte.
"$GPUFRAC" plan --example --format json >"$tmp/a.json"
"$GPUFRAC" plan --example --format json >"$tmp/b.json"
ok deterministic -- cmp "$tmp/a.json" "$tmp/b.json"

# The example is a few hundred pods on a few dozen nodes, every kind of
# request and flag shows up, and the fields docs/plan.md lists are there.
ok example-shape -- python3 - "$tmp/a.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["version"] == 1
c = d["cluster"]
assert 24 <= c["nodes"] <= 100 and 150 <= c["pods"] <= 600, c
for k in ("gpus", "gpus_held", "gpus_used", "gpus_unmeasured", "gpus_idle",
          "waste_gpus", "held_per_month", "waste_per_month"):
    assert k in d["today"], k
kinds = {w["request"] for w in d["workloads"]}
assert {"whole", "hami", "kai"} <= kinds, kinds
flags = {f for w in d["workloads"] for f in w["recommendation"]["flags"]}
assert {"no-data", "few-samples", "spiky", "multi-gpu"} <= flags, flags
assert [w["policy"] for w in d["whatif"]] == ["whole", "fgd", "gpufrac"]
for w in d["whatif"]:
    assert {"gpus_needed", "nodes_needed", "pods_placed", "pods_unplaced",
            "gpus_freed", "saved_per_month"} <= set(w), w
# waste = held - used over measured pods, so held >= used + waste - tiny
t = d["today"]
assert abs(t["gpus_held"] - t["gpus_unmeasured"] - t["gpus_used"] - t["waste_gpus"]) < 1e-3, t
PY

# With node types: the cheapest fleet per policy, in every output.
check fleet        0 'Cheapest fleet'           -- "$GPUFRAC" plan --example --node-types "$SRC/data/plan-example/node-types.json"
echo '[{"name": "x"}]' >"$tmp/nt.json"
check bad-types    1 'nt.json: node type \[0\]: gpu_model' -- "$GPUFRAC" plan --example --node-types "$tmp/nt.json"
"$GPUFRAC" plan --example --node-types "$SRC/data/plan-example/node-types.json" --format json >"$tmp/f.json"

# docs/plan.md's list of JSON fields is exactly what is written.
ok fields-documented -- python3 - "$tmp/f.json" "$SRC/docs/plan.md" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
doc = open(sys.argv[2]).read()
block = re.search(r"```\nversion .*?```", doc, re.S).group(0).strip("`\n")
sections, cur = {}, None
for line in block.splitlines():
    if not line.startswith(" "):
        cur, _, rest = line.partition(" ")
        cur = cur.rstrip("[]")
        sections[cur] = []
    else:
        rest = line
    sections[cur] += [w for w in re.split(r"[,\s]+", rest) if w]
def keys(obj):
    return list(obj) if isinstance(obj, dict) else None
got = {"version": ["1"], "settings": keys(d["settings"]),
       "cluster": keys(d["cluster"]), "today": keys(d["today"]),
       "namespaces": keys(d["namespaces"][0]),
       "node_types": keys(d["node_types"][0]),
       "workloads": keys(d["workloads"][0]),
       "recommendation": keys(d["workloads"][0]["recommendation"]),
       "whatif": keys(d["whatif"][0]), "fleet": keys(d["whatif"][0]["fleet"]),
       "warnings": ["strings"]}
assert list(d) == [k for k in got if k not in ("recommendation", "fleet")], list(d)
assert list(d["whatif"][0]["fleet"]["types"][0]) == ["name", "nodes"]
for k, v in got.items():
    assert sections.get(k) == v, (k, sections.get(k), v)
PY

check out-dir      0 'wrote'                    -- "$GPUFRAC" plan --example --out "$tmp/rep"
ok out-files -- test -s "$tmp/rep/summary.json" -a -s "$tmp/rep/workloads.csv" -a \
  -s "$tmp/rep/namespaces.csv" -a -s "$tmp/rep/node_types.csv" -a -s "$tmp/rep/whatif.csv" -a \
  -s "$tmp/rep/report.html" -a -s "$tmp/rep/patches/README.md"
ok summary-is-json-output -- cmp "$tmp/a.json" "$tmp/rep/summary.json"

# The HTML's figures equal the JSON's; it fetches nothing and runs nothing.
ok html-equals-json -- python3 - "$tmp/rep/report.html" "$tmp/rep/summary.json" <<'PY'
import json, re, sys
html = open(sys.argv[1]).read()
d = json.load(open(sys.argv[2]))
assert "<script" not in html and "src=" not in html and "<link" not in html
assert re.search(r"https?://(?!www\.w3\.org/2000/svg)", html) is None
figs = dict(re.findall(r'id="(\w+)" data-value="([-0-9.]+)"', html))
assert len(figs) == 8, figs
for k, v in figs.items():
    assert abs(float(v) - d["today"][k]) < 1e-3, (k, v, d["today"][k])
def rows(cls):
    m = re.search(r'<table class="%s">(.*?)</table>' % cls, html, re.S)
    assert m, cls
    out = []
    for tr in re.findall(r"<tr>(.*?)</tr>", m.group(1), re.S)[1:]:
        out.append(dict(re.findall(r'data-field="(\w+)"(?: data-value="([^"]*)")?', tr)))
        out[-1]["_text"] = tr
    return out
wi = rows("whatif")
assert len(wi) == len(d["whatif"]) == 3
for r, w in zip(wi, d["whatif"]):
    assert w["policy"] in r["_text"]
    for k in ("gpus_needed", "nodes_needed", "pods_unplaced", "gpus_freed", "saved_per_month"):
        assert abs(float(r[k]) - w[k]) < 1e-3, (k, r[k], w[k])
ns = rows("namespaces")
assert len(ns) == len(d["namespaces"])
for r, n in zip(ns, d["namespaces"]):
    for k in ("gpus_held", "gpus_used", "waste_gpus", "waste_per_month"):
        assert abs(float(r[k]) - n[k]) < 1e-3, (k, r[k], n[k])
wl = rows("workloads")
for r, w in zip(wl, d["workloads"]):
    assert w["name"] in r["_text"]
    for k in ("gpus_held", "waste_gpus"):
        assert abs(float(r[k]) - w[k]) < 1e-3, (k, r[k], w[k])
PY

# One patch per share workload with a template; each a strategic merge
# patch that drops the old request and asks for gpufrac's.
ok patches -- python3 - "$tmp/rep/patches" "$tmp/rep/summary.json" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[2]))
files = sorted(f for f in os.listdir(sys.argv[1]) if f.endswith(".json"))
want = sorted("%s-%s-%s.json" % (w["kind"].lower(), w["namespace"], w["name"])
              for w in d["workloads"]
              if w["recommendation"]["action"] == "share"
              and w["kind"] in ("Deployment", "StatefulSet", "CronJob", "DaemonSet", "ReplicaSet"))
assert files == want, (files, want)
assert files
byname = {"%s-%s-%s.json" % (w["kind"].lower(), w["namespace"], w["name"]): w for w in d["workloads"]}
for f in files:
    p = json.load(open(os.path.join(sys.argv[1], f)))
    w = byname[f]
    tmpl = p["spec"]["template"]
    c = tmpl["spec"]["containers"][0]
    req = c["resources"]["requests"]
    assert req["gpufrac.io/gpu"] == "1"
    assert req["gpufrac.io/gpu-memory"] == "%dMi" % w["recommendation"]["gpu_memory_mib"]
    assert req["gpufrac.io/gpu-compute"] == str(w["recommendation"]["gpu_compute_pct"])
    if w["request"] == "whole":
        assert "nvidia.com/gpu" in req and req["nvidia.com/gpu"] is None
    if w["request"] == "kai":
        assert tmpl["metadata"]["annotations"]["gpu-fraction"] is None
PY

# The same patches as a kustomize Component, built by the real kubectl's
# kustomize over a Deployment per patched workload (written here, with a
# second container and a CPU request the patch must leave alone): the GPU
# container asks for gpufrac's resources and no longer for nvidia.com/gpu.
: "${KUBECTL:?KUBECTL must name the kubectl scripts/install-k8s builds}"
ok kustomize-component -- python3 - "$tmp/rep" "$KUBECTL" <<'PY'
import json, os, subprocess, sys
rep, kubectl = sys.argv[1], sys.argv[2]
d = json.load(open(os.path.join(rep, "summary.json")))
kdir = os.path.join(rep, "patches", "kustomize")
listed = [l.split("path: ")[1].strip() for l in open(os.path.join(kdir, "kustomization.yaml"))
          if "- path: " in l]
top = os.path.join(rep, "kz")
os.makedirs(top, exist_ok=True)
wls = {}
for f in listed:
    p = json.load(open(os.path.join(kdir, f)))
    md = p["metadata"]
    cron = p["kind"] == "CronJob"
    tp = p["spec"]["jobTemplate"]["spec"]["template"] if cron else p["spec"]["template"]
    gpu_ctr = tp["spec"]["containers"][0]["name"]
    # today's request: what the patch removes (its null keys)
    dropped = [k for k, v in tp["spec"]["containers"][0]["resources"]["requests"].items()
               if v is None]
    anns = [k for k, v in tp.get("metadata", {}).get("annotations", {}).items() if v is None]
    old_req = {k: "1" for k in dropped}
    tmpl = {"metadata": {"labels": {"app": md["name"]},
                         "annotations": {k: "0.5" for k in anns}},
            "spec": {"containers": [
                {"name": gpu_ctr, "image": "srv",
                 "resources": {"requests": dict(old_req, cpu="2"),
                               "limits": dict(old_req)}},
                {"name": "sidecar-x", "image": "side"}]}}
    spec = ({"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": tmpl}}} if cron
            else {"selector": {"matchLabels": {"app": md["name"]}}, "template": tmpl})
    res = {"apiVersion": p["apiVersion"], "kind": p["kind"], "metadata": md, "spec": spec}
    key = (md["namespace"], md["name"], p["kind"].lower())
    wls[key] = dropped + anns
    with open(os.path.join(top, "%s-%s-%s.json" % key), "w") as out:
        json.dump(res, out)
assert wls, "no patch to build"
with open(os.path.join(top, "kustomization.yaml"), "w") as k:
    k.write("resources:\n" + "".join("  - %s-%s-%s.json\n" % w for w in sorted(wls)))
    k.write("components:\n  - %s\n" % os.path.relpath(kdir, top))
import re
out = subprocess.run([kubectl, "kustomize", top], capture_output=True, text=True)
assert out.returncode == 0, out.stderr
docs = [x for x in out.stdout.split("\n---\n") if x.strip()]
assert len(docs) == len(wls), (len(docs), len(wls))
# every patch file listed is one the plan wrote, and every file is listed
assert sorted(listed) == sorted(f for f in os.listdir(kdir) if f.endswith(".json"))
byname = {(w["namespace"], w["name"]): w for w in d["workloads"]}
for doc in docs:
    name = re.search(r"^  name: (\S+)$", doc, re.M).group(1)
    ns = re.search(r"^  namespace: (\S+)$", doc, re.M).group(1)
    rec = byname[(ns, name)]["recommendation"]
    kind = re.search(r"^kind: (\S+)$", doc, re.M).group(1).lower()
    for gone in wls[(ns, name, kind)]:
        assert not re.search(r"^ *%s:" % re.escape(gone), doc, re.M), (gone, doc)
    assert doc.count("gpufrac.io/gpu-memory: %dMi" % rec["gpu_memory_mib"]) == 2, doc
    assert "cpu: \"2\"" in doc and "name: sidecar-x" in doc, doc
print("built %d workloads through the Component" % len(docs))
PY

# The bundled example is exactly what the committed generator makes.
ok example-regenerates -- sh -c "python3 '$SRC/scripts/plan-example' --traces '$SRC/data/traces' --out '$tmp/ex' 2>/dev/null &&
  cmp '$tmp/ex/snapshot.json' '$SRC/data/plan-example/snapshot.json' &&
  cmp '$tmp/ex/usage.json' '$SRC/data/plan-example/usage.json'"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
