#!/usr/bin/env python3
"""The simulator's charts in a real browser (headless Chromium, Debian's
chromium package; issue 30 item 11): every label of allocation-TRACE.svg
and churn-nodes-TRACE.svg is drawn inside its chart (each text's box
measured by the browser), the headline quantity has one name ("stranded")
in the table, the summary and the chart, and the churn chart has the
"asked" line (the GPUs the running pods ask for, dashed) beside the GPUs
each policy bought.  Prints 'N passed, N failed'.

usage: test_sim_svg.py GPUFRAC TESTDATA
"""
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

GPUFRAC, DATA = sys.argv[1], sys.argv[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
passed = failed = 0

MEASURE = """<script>
var bad = [], n = 0;
document.querySelectorAll('svg').forEach(function (svg) {
  var s = svg.getBoundingClientRect();
  svg.querySelectorAll('text').forEach(function (t) {
    var b = t.getBoundingClientRect(); n++;  /* transforms included */
    if (b.left < s.left - 0.5 || b.right > s.right + 0.5 ||
        b.top < s.top - 0.5 || b.bottom > s.bottom + 0.5)
      bad.push(t.textContent + ' at ' + Math.round(b.left - s.left) + '..' +
               Math.round(b.right - s.left) + ' of ' + Math.round(s.width));
  });
});
document.title = 'CLIPPED:' + JSON.stringify({n: n, bad: bad});
</script>"""


def check(cond, what):
    global passed, failed
    print(("ok   " if cond else "FAIL ") + what)
    passed += bool(cond)
    failed += not cond


def clipped(svg, work):
    page = os.path.join(work, "page.html")
    with open(page, "w") as f:
        f.write("<!DOCTYPE html><html><head><title>x</title></head><body>" +
                open(svg).read() + MEASURE + "</body></html>")
    prof = tempfile.mkdtemp(dir=work)
    p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        "--no-first-run", "--disable-extensions",
                        "--host-resolver-rules=MAP * ~NOTFOUND",
                        f"--user-data-dir={prof}", "--dump-dom",
                        "file://" + page], capture_output=True, text=True,
                       timeout=120)
    m = re.search(r"CLIPPED:(.*?)</title>", p.stdout)
    return json.loads(html.unescape(m.group(1))) if m else {"n": 0, "bad": ["none"]}


def main():
    check(CHROMIUM is not None, "chromium is installed (Debian package chromium)")
    if CHROMIUM is None:
        return
    work = tempfile.mkdtemp(prefix="gf_sim_svg.")
    try:
        small = ["--nodes", os.path.join(DATA, "nodes_small.csv"),
                 "--pods", os.path.join(DATA, "pods_small.csv")]
        out = os.path.join(work, "sim")
        r = subprocess.run([GPUFRAC, "simulate"] + small +
                           ["--seeds", "1", "--out", out],
                           capture_output=True, text=True, check=True)
        svg = os.path.join(out, "allocation-pods_small.svg")
        m = clipped(svg, work)
        check(m["n"] > 10 and m["bad"] == [],
              f"allocation chart: all {m['n']} labels inside ({m['bad'][:2]})")
        text = open(svg).read()
        legends = re.findall(r">([^<>]*stranded at 100% demand)</text>", text)
        check(len(legends) >= 3 and "idle at" not in text,
              f"its legends name the quantity 'stranded' ({legends[:1]})")
        check("stranded@100%" in r.stdout and "unalloc@" not in r.stdout,
              "the table calls it 'stranded' too (as the main job's summary, "
              "'GPUs stranded')")

        types = os.path.join(work, "types.csv")
        with open(types, "w") as f:
            f.write("type,model,gpus,cpu_milli,memory_mib,gpu_hour_price,count\n"
                    "t4,T4,2,32000,131072,0.35,2\n"
                    "v100,V100M32,8,64000,262144,2.48,1\n"
                    "cpu,,0,16000,65536,0,0\n")
        cout = os.path.join(work, "churn")
        subprocess.run([GPUFRAC, "simulate", "--churn", "--pods",
                        os.path.join(DATA, "pods_small.csv"), "--node-types",
                        types, "--duration", "1d", "--seeds", "1,2",
                        "--out", cout], capture_output=True, text=True,
                       check=True)
        svg = os.path.join(cout, "churn-nodes-pods_small.svg")
        m = clipped(svg, work)
        check(m["n"] > 10 and m["bad"] == [],
              f"churn chart: all {m['n']} labels inside ({m['bad'][:2]})")
        text = open(svg).read()
        lines = re.findall(r'<polyline([^>]*)points="([^"]*)"', text)
        dashed = [pts for attrs, pts in lines if "stroke-dasharray" in attrs]
        solid = [pts for attrs, pts in lines if "stroke-dasharray" not in attrs]

        def ys(pts):  # SVG y grows downwards: smaller y, more GPUs
            return [float(p.split(",")[1]) for p in pts.split()]
        ok = len(dashed) == 1 and len(solid) == 3 and \
            "asked: GPUs the running pods want" in text
        # what is asked is never above what the cheapest policy bought
        if ok:
            asked = ys(dashed[0])
            ok = all(len(ys(s)) == len(asked) for s in solid) and \
                min(asked) < max(asked) and \
                all(a >= b - 0.05 for s in solid for a, b in zip(asked, ys(s)))
        check(ok, "churn chart: a dashed 'asked' line under every policy's "
              "GPUs bought")
    finally:
        shutil.rmtree(work, ignore_errors=True)


main()
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
