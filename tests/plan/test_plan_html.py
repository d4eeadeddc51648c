#!/usr/bin/env python3
"""The HTML report in a real browser (headless Chromium, Debian's chromium
package): it renders (a DOM with the charts, a screenshot that is not
blank), logs nothing to the console, requests nothing from the network, and
every figure it shows equals the JSON's.  The checker is first shown to
catch a console error and a network request, on broken copies of the
report.  Prints 'N passed, N failed'.

usage: test_plan_html.py GPUFRAC NODE_TYPES_JSON
"""
import html
import html.parser
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

GPUFRAC = sys.argv[1]
NODE_TYPES = sys.argv[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu",
         "--enable-logging=stderr", "--v=0",
         "--host-resolver-rules=MAP * ~NOTFOUND",
         "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-default-apps",
         "--disable-extensions"]
passed = failed = 0


def check(cond, what):
    global passed, failed
    print(("ok   " if cond else "FAIL ") + what)
    passed += bool(cond)
    failed += not cond


def browse(page, work, *extra):
    """Runs Chromium on file `page`; returns (rc, stdout, console lines,
    page network requests)."""
    prof = tempfile.mkdtemp(dir=work)
    netlog = os.path.join(work, "net.json")
    p = subprocess.run([CHROMIUM] + FLAGS + [f"--user-data-dir={prof}",
                        f"--log-net-log={netlog}"] + list(extra) +
                       ["file://" + os.path.abspath(page)],
                       capture_output=True, text=True, timeout=120)
    console = [l for l in p.stderr.splitlines() if ":CONSOLE" in l]
    requests = []
    try:
        log = json.load(open(netlog))
    except (OSError, ValueError):
        log = None
    if log:
        start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
        for e in log["events"]:
            prm = e.get("params", {})
            if (e["type"] == start and "site=file://" in
                    prm.get("site_for_cookies", "") and
                    not prm.get("url", "").startswith("file:")):
                requests.append(prm["url"])
    return p.returncode, p.stdout, console, requests


class Figures(html.parser.HTMLParser):
    """Collects every element carrying data-value: its id or data-field,
    the value, the text shown, and the table (class) it is in."""

    def __init__(self):
        super().__init__()
        self.figs, self.stack, self.table, self.svgs = [], [], None, 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self.svgs += 1
        if tag == "table":
            self.table = a.get("class")
        if tag == "tr" and self.table:
            self.figs.append(("row", self.table, None, None))
        if "data-value" in a:
            self.stack.append([a.get("id") or a.get("data-field"),
                               a["data-value"], "", self.table])
        elif tag in ("td", "span") and "data-field" in a:
            self.stack.append([a["data-field"], None, "", self.table])

    def handle_data(self, data):
        if self.stack:
            self.stack[-1][2] += data

    def handle_endtag(self, tag):
        if tag == "table":
            self.table = None
        if tag in ("td", "span") and self.stack:
            name, value, text, table = self.stack.pop()
            self.figs.append((name, table, value, text.strip()))


def rows(figs, table):
    out = []
    for name, t, value, text in figs:
        if t != table:
            continue
        if name == "row":
            out.append({})
        elif out:
            out[-1][name] = (value, text)
    return [r for r in out if r]


def png_not_blank(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return False
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    return len(set(zlib.decompress(idat))) > 8


def near(a, b, tol):
    return abs(float(str(a).replace("$", "").replace(",", "")) - float(b)) <= tol


# Run in a copy of a report: every SVG text's box measured by the browser;
# the ones outside their SVG land in document.title.
MEASURE = """<script>
var bad = [];
document.querySelectorAll('svg').forEach(function (svg) {
  var w = svg.width.baseVal.value, h = svg.height.baseVal.value;
  svg.querySelectorAll('text').forEach(function (t) {
    var b = t.getBBox();
    if (b.x < 0 || b.x + b.width > w + 0.5 || b.y < 0 || b.y + b.height > h + 0.5)
      bad.push(t.textContent + ' at ' + Math.round(b.x) + '..' +
               Math.round(b.x + b.width) + ' of ' + w);
  });
});
document.title = 'CLIPPED:' + JSON.stringify(bad);
</script>"""


def clipped(page, work):
    """The SVG labels a browser draws outside their SVG in page."""
    copy = os.path.join(work, "measure.html")
    with open(page) as f:
        src = f.read()
    with open(copy, "w") as f:
        f.write(src.replace("</body>", MEASURE + "</body>"))
    _, dom, _, _ = browse(copy, work, "--dump-dom")
    start = dom.find("CLIPPED:")
    if start < 0:
        return ["no measurement"]
    end = dom.find("</title>", start)
    return json.loads(html.unescape(dom[start + 8:end]))


def main():
    check(CHROMIUM is not None, "chromium is installed (Debian package chromium)")
    if CHROMIUM is None:
        return
    work = tempfile.mkdtemp(prefix="gf_plan_html.")
    try:
        rep = os.path.join(work, "rep")
        subprocess.run([GPUFRAC, "plan", "--example", "--node-types",
                        NODE_TYPES, "--out", rep],
                       check=True, capture_output=True)
        page = os.path.join(rep, "report.html")
        d = json.load(open(os.path.join(rep, "summary.json")))

        # The checker catches what it looks for: a console error, a fetch.
        src = open(page).read()
        bad = os.path.join(work, "bad.html")
        with open(bad, "w") as f:
            f.write(src.replace("</body>", "<script>console.error('x')"
                                "</script></body>"))
        _, _, console, _ = browse(bad, work, "--dump-dom")
        check(len(console) > 0, "a console error in a broken copy is seen")
        with open(bad, "w") as f:
            f.write(src.replace("</body>", "<img src='http://example.invalid"
                                "/x.png'></body>"))
        _, _, _, requests = browse(bad, work, "--dump-dom")
        check(any("example.invalid" in r for r in requests),
              "a network request in a broken copy is seen")

        rc, dom, console, requests = browse(page, work, "--dump-dom")
        check(rc == 0 and "</html>" in dom, "the report renders to a DOM")
        check(console == [], f"no console messages ({console[:2]})")
        check(requests == [], f"no network requests ({requests[:2]})")
        shot = os.path.join(work, "shot.png")
        browse(page, work, f"--screenshot={shot}", "--window-size=1280,2000")
        check(os.path.exists(shot) and png_not_blank(shot),
              "a screenshot of it is not blank")

        p = Figures()
        p.feed(dom)
        check(p.svgs >= 3, f"inline SVG charts in the DOM ({p.svgs})")
        today = {n: (v, t) for n, tb, v, t in p.figs if tb is None and v}
        ok = len(today) == 8
        for k, (v, t) in today.items():
            digits = 0 if k in ("gpus",) or k.endswith("per_month") else 1
            ok &= near(v, d["today"][k], 1e-9)
            ok &= near(t.lstrip("$"), d["today"][k], 0.5 * 10 ** -digits + 1e-9)
        check(ok, f"the {len(today)} headline figures equal the JSON's, "
              "as shown and as data")
        for table, key, fields in (
                ("whatif", "whatif", ("gpus_needed", "nodes_needed",
                                      "pods_unplaced", "gpus_freed",
                                      "saved_per_month")),
                ("namespaces", "namespaces", ("gpus_held", "gpus_used",
                                              "gpus_unmeasured", "waste_gpus",
                                              "waste_per_month")),
                ("node_types", "node_types", ("gpus", "gpus_held",
                                              "gpus_used", "waste_gpus")),
                ("workloads", "workloads", ("gpus_held", "gpus_used",
                                            "waste_gpus",
                                            "waste_per_month"))):
            got = rows(p.figs, table)
            want = d[key][:len(got)]
            ok = len(got) > 0 and (len(got) == len(d[key]) or
                                   table == "workloads")
            for r, w in zip(got, want):
                for f in fields:
                    v, t = r[f]
                    digits = 0 if f.endswith("per_month") or table == \
                        "whatif" or f == "gpus" else 2
                    ok &= near(v, w[f], 1e-9)
                    ok &= near(t, w[f], 0.5 * 10 ** -digits + 1e-9)
                if "name" in r:
                    ok &= r["name"][1] == w["name"]
                if "policy" in r:
                    ok &= r["policy"][1] == w["policy"]
            check(ok, f"the {table} table ({len(got)} rows) equals the JSON's")
        got = rows(p.figs, "fleet")
        ok = len(got) == 3
        for r, w in zip(got, d["whatif"]):
            f = w["fleet"]
            ok &= r["policy"][1] == w["policy"]
            for k in ("nodes", "gpus", "pods_unplaced", "per_month"):
                ok &= near(r[k][0], f[k], 1e-9) and near(r[k][1], f[k], 0.5)
            for k in ("saved_vs_bill_per_month", "saved_vs_whole_per_month"):
                ok &= near(r[k][0], f[k], 1e-9) and near(r[k][1], f[k], 0.5)
        check(ok, "the fleet table equals the JSON's")
        # Money as a finance reader reads it: "$52,086", never "52086".
        money = [(n, v, t) for n, tb, v, t in p.figs
                 if v and n and n.endswith("per_month")]
        check(money and all(t.startswith("$") and
                            (abs(float(v)) < 999.5 or "," in t)
                            for n, v, t in money),
              f"every money figure has '$' and thousands separators "
              f"({len(money)}, e.g. {[t for _, _, t in money[:3]]})")
        check(near(today["bill_per_month"][0], d["today"]["bill_per_month"], 1e-9)
              and near(d["today"]["bill_per_month"], sum(
                  t["gpus"] * t["price_per_gpu_hour"] * 730
                  for t in d["node_types"]), 0.01)
              and d["today"]["bill_per_month"] >= d["today"]["held_per_month"],
              "the GPU bill per month is shown: every GPU at its price")
        check("saved / month prices each freed GPU" in dom and
              "the bill you can reach" in dom,
              "the what-if saving and the fleet's are told apart")
        bad = clipped(page, work)
        check(bad == [], f"no SVG label drawn outside its chart ({bad[:3]})")

        # A namespace with a long name: its label still fits.
        snap = json.load(open(os.path.join(os.path.dirname(NODE_TYPES),
                                           "snapshot.json")))
        long_ns = "advertising-realtime-bidding-inference-production"
        for it in snap["items"]:
            if it.get("metadata", {}).get("namespace") == "ads":
                it["metadata"]["namespace"] = long_ns
        sp = os.path.join(work, "long.json")
        json.dump(snap, open(sp, "w"))
        rep2 = os.path.join(work, "rep2")
        subprocess.run([GPUFRAC, "plan", "--snapshot", sp, "--out", rep2],
                       check=True, capture_output=True)
        page2 = os.path.join(rep2, "report.html")
        bad = clipped(page2, work)
        check(long_ns in open(page2).read() and bad == [],
              f"a {len(long_ns)}-character namespace's label fits ({bad[:3]})")
        # Without usage data waste is unknown, and the report says how to
        # measure it; not "$0".
        _, dom2, _, _ = browse(page2, work, "--dump-dom")
        d2 = json.load(open(os.path.join(rep2, "summary.json")))
        p2 = Figures()
        p2.feed(dom2)
        shown = {n: t for n, tb, v, t in p2.figs if tb is None and n}
        check(d2["today"]["waste_known"] is False and
              'id="waste_per_month">unknown<' in dom2 and
              "--usage FILE or --prometheus URL" in dom2 and
              "waste_per_month" not in [n for n, tb, v, t in p2.figs
                                        if tb is None and v],
              f"no usage data: waste 'unknown' with how to measure it "
              f"({shown.get('waste_per_month')})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


main()
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
