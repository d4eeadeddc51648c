#!/usr/bin/env python3
"""Tables of bench/k8s_fair.sh's runs (issue 29): every run with the load
`uptime` showed before it, then per scenario the median of each config
over the rounds and its difference from kube-scheduler alone.

Usage: bench/k8s_fair_table.py OUT.jsonl
"""

import json
import statistics
import sys

CONFIGS = ("alone", "extender", "filter-top-1")
NAMES = {"alone": "kube-scheduler alone", "extender": "extender (default)",
         "filter-top-1": "extender, --filter-top 1"}


def cpu_all(r):
    return round(sum(v for k, v in r["cpu_ms_per_pod"].items()), 1)


def load1(line):
    return line["uptime"].split("load average:")[1].split(",")[0].strip()


# scenario -> [(column, function of a result)], the first is the headline
COLS = {
    "burst": [("pods/s", lambda r: r["pods_per_s_bound"]),
              ("attempt p50 ms", lambda r: r["attempt_p50_ms"]),
              ("attempt p99 ms", lambda r: r["attempt_p99_ms"])],
    "fill": [("pods/s", lambda r: r["pods_per_s_bound"]),
             ("scheduled", lambda r: r["scheduled"]),
             ("unschedulable", lambda r: r["unschedulable"]),
             ("attempts", lambda r: sum(r["attempts"].values())),
             ("settle s", lambda r: r["settle_s"])],
    "churn": [("latency p50 ms", lambda r: r["sli_p50_ms"]),
              ("latency p99 ms", lambda r: r["sli_p99_ms"]),
              ("scheduled", lambda r: r["scheduled"])],
}
CPU = [("kube-scheduler", lambda r: r["cpu_ms_per_pod"].get("kube-scheduler", 0)),
       ("kube-apiserver", lambda r: r["cpu_ms_per_pod"].get("kube-apiserver", 0)),
       ("extender", lambda r: r["cpu_ms_per_pod"].get("extender", 0)),
       ("all", cpu_all)]


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        runs = [json.loads(ln) for ln in f if ln.strip()]
    for sc in ("burst", "fill", "churn"):
        mine = [x for x in runs if x["scenario"] == sc]
        if not mine:
            continue
        r0 = mine[0]["result"]
        print("\n#### %s: %d nodes, %d pods, client limit %s (both sides)\n" %
              (sc, r0["nodes"], r0["pods"], r0["qps"]))
        cols = COLS[sc] + CPU
        print("| round | config | load (1 min) | " +
              " | ".join(c for c, _ in cols) + " |")
        print("|---|---|---:|" + "---:|" * len(cols))
        for x in mine:
            print("| %d | %s | %s | " % (x["round"], NAMES[x["config"]], load1(x)) +
                  " | ".join(str(fn(x["result"])) for _, fn in cols) + " |")
        print("\nmedians (%s):\n" % ", ".join(
            "%s %d runs" % (c, sum(1 for x in mine if x["config"] == c)) for c in CONFIGS))
        print("| config | " + " | ".join(c for c, _ in cols) + " | %s vs alone |" %
              cols[0][0])
        print("|---|" + "---:|" * (len(cols) + 1))
        med = {}
        for cf in CONFIGS:
            rs = [x["result"] for x in mine if x["config"] == cf]
            if not rs:
                continue
            med[cf] = [statistics.median(fn(r) for r in rs) for _, fn in cols]
        for cf, m in med.items():
            d = ""
            if cf != "alone" and "alone" in med and med["alone"][0]:
                d = "%+.0f%%" % (100.0 * (m[0] / med["alone"][0] - 1))
            print("| %s | " % NAMES[cf] + " | ".join(
                ("%g" % round(v, 1)) for v in m) + " | %s |" % d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
