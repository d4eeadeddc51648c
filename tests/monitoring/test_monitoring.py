#!/usr/bin/env python3
"""deploy/monitoring: the rules and the Grafana dashboard (label monitoring).

Usage: test_monitoring.py GPUFRAC PROMTOOL

- `promtool check rules` on deploy/monitoring/gpufrac-rules.yaml and
  `promtool test rules` on tests/monitoring/gpufrac-rules-test.yaml.
- Every query of deploy/monitoring/gpufrac-dashboard.json (panel targets and
  template variables, with Grafana's variables given values) parses: they
  become recording rules of a generated file that `promtool check rules`
  must accept.
- Every metric those queries and the rules name is one gpufrac exports: the
  names are read from what the node agent (`gpufrac node --once --print
  metrics`) and the extender (`gpufrac scheduler --no-kube`, GET /metrics)
  serve, not from a list kept here; the rules' own recorded names count
  too.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RULES = os.path.join(ROOT, "deploy", "monitoring", "gpufrac-rules.yaml")
RULES_TEST = os.path.join(HERE, "gpufrac-rules-test.yaml")
DASHBOARD = os.path.join(ROOT, "deploy", "monitoring", "gpufrac-dashboard.json")

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right",
            "offset", "bool", "and", "or", "unless", "inf", "nan"}


class Failure(Exception):
    pass


def fail(msg):
    raise Failure(msg)


def metric_names(expr):
    """The metric names a PromQL expression selects: identifiers that are
    not functions or aggregations (followed by "("), keywords, label names
    (inside {...} or a by/without/on/ignoring/group_x list) or parts of
    numbers, strings or durations."""
    s = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    s = re.sub(r"'(?:\\.|[^'\\])*'", "''", s)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)",
               " ", s)
    out = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        tok = m.group(0)
        if m.start() > 0 and (s[m.start() - 1].isdigit() or s[m.start() - 1] == "."):
            continue  # 1e3, 0x1f
        if s[m.end():].lstrip().startswith("("):
            continue
        if tok.lower() in KEYWORDS:
            continue
        out.add(tok)
    return out


def families(text):
    """Sample names a Prometheus text exposition may carry: each # TYPE's
    name (with _bucket, _sum and _count for a histogram) and every sample's."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(None, 3)
            names.add(name)
            if typ.strip() in ("histogram", "summary"):
                names |= {name + "_bucket", name + "_sum", name + "_count"}
        elif line and not line.startswith("#"):
            names.add(re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group(0))
    return names


def exported(gpufrac, work):
    agent = subprocess.run(
        [gpufrac, "node", "--fake-gpus", "2xA100-80GB", "--no-kube", "--once",
         "--print", "metrics", "--state-dir", os.path.join(work, "state"),
         "--cdi-dir", os.path.join(work, "cdi")],
        capture_output=True, text=True, timeout=60)
    if agent.returncode != 0:
        fail("gpufrac node --print metrics: exit %d: %s" % (agent.returncode,
                                                           agent.stderr))
    log = open(os.path.join(work, "extender.log"), "w+")
    ext = subprocess.Popen([gpufrac, "scheduler", "--no-kube", "--listen",
                            "127.0.0.1:0"], stdout=log, stderr=subprocess.STDOUT)
    try:
        port = None
        for _ in range(100):
            log.seek(0)
            m = re.search(r"serving on port (\d+)", log.read())
            if m:
                port = int(m.group(1))
                break
            if ext.poll() is not None:
                fail("gpufrac scheduler exited %d" % ext.returncode)
            time.sleep(0.1)
        if not port:
            fail("gpufrac scheduler did not say its port")
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                    timeout=10) as r:
            ext_text = r.read().decode()
    finally:
        ext.terminate()
        ext.wait(10)
    a, e = families(agent.stdout), families(ext_text)
    if not any(n.startswith("gpufrac_gpu_") for n in a) or \
            not any(n.startswith("gpufrac_extender_") for n in e):
        fail("no gpufrac metrics read from the agent (%d) or the extender (%d)"
             % (len(a), len(e)))
    return a | e


def promtool(tool, *args):
    r = subprocess.run([tool] + list(args), capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        fail("promtool %s: exit %d:\n%s%s" % (" ".join(args), r.returncode,
                                              r.stdout, r.stderr))
    print("ok   promtool %s" % " ".join(os.path.relpath(a, ROOT)
                                        if os.path.isabs(a) else a for a in args))


def grafana_values(expr):
    """A dashboard query with Grafana's variables given values PromQL
    accepts ($__rate_interval a duration, the template variables regexes)."""
    expr = re.sub(r"\$__(rate_)?interval|\$\{__(rate_)?interval\}", "5m", expr)
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", expr)


def dashboard_queries(d):
    qs = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if "expr" in t:
                    qs.append(("panel %r %s" % (p.get("title"), t.get("refId")),
                               t["expr"]))
            walk(p.get("panels", []))
    walk(d.get("panels", []))
    for v in d.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\)\s*", q)
        qs.append(("variable %s" % v["name"], m.group(1) if m else q))
    return qs


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    gpufrac, tool = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="gfmon")
    try:
        # The name check must be able to fail: it names what it is given.
        if metric_names('sum by (a) (rate(x_total{b="c"}[5m])) / on (d) y > 1e3') \
                != {"x_total", "y"}:
            fail("metric_names self-check: %s" % metric_names(
                'sum by (a) (rate(x_total{b="c"}[5m])) / on (d) y > 1e3'))
        names = exported(gpufrac, work)
        print("ok   %d metric names from the agent and the extender" % len(names))

        promtool(tool, "check", "rules", RULES)
        promtool(tool, "test", "rules", RULES_TEST)

        rules = yaml.safe_load(open(RULES))
        recorded = {r["record"] for g in rules["groups"] for r in g["rules"]
                    if "record" in r}
        bad = []
        for g in rules["groups"]:
            for r in g["rules"]:
                unknown = metric_names(r["expr"]) - names - recorded
                if unknown:
                    bad.append("rule %s: %s" % (r.get("record") or r.get("alert"),
                                                 sorted(unknown)))

        d = json.load(open(DASHBOARD))
        qs = dashboard_queries(d)
        if len(qs) < 10:
            fail("the dashboard has %d queries; fleet waste, per-GPU shares and "
                 "per-container usage need more" % len(qs))
        gen = {"groups": [{"name": "dashboard", "rules": [
            {"record": "dashboard:query_%d" % i, "expr": grafana_values(q)}
            for i, (_, q) in enumerate(qs)]}]}
        path = os.path.join(work, "dashboard-queries.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(gen, f)
        promtool(tool, "check", "rules", path)
        for where, q in qs:
            unknown = metric_names(grafana_values(q)) - names - recorded
            if unknown:
                bad.append("dashboard %s: %s" % (where, sorted(unknown)))
        if bad:
            fail("names gpufrac does not export:\n  " + "\n  ".join(bad))
        print("ok   %d dashboard queries parse and name only gpufrac's metrics"
              % len(qs))
    except Failure as e:
        print("FAIL %s" % e)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("monitoring: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
