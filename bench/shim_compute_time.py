#!/usr/bin/env python3
"""Compute shares as shares of GPU time (docs/shim.md, "Compute by GPU time"),
on the fake GPU: tenants x per-block cost ratios x share sets x GPU speed.

Every tenant is its own container (its own region and bucket, capacity not
configured: derived from the fake device, 1 x 132 SMs x 32 x 250 = 1,056,000
blocks/s, a model block of 947 ns) running `probe_dl work`: saturating
launches, at most 8 kernels in flight.  All tenants share one fake GPU
timeline (FAKE_CUDA_SHARED: one kernel at a time, in launch order, as contexts
time-sliced on one GPU).  Tenant i's blocks cost 947 ns x SPEED x
RATIO^(i/(n-1)) (spread geometrically from 1x to RATIOx; "desc" gives the
costliest blocks to the smallest share), SPEED 10 being a GPU ten times slower
than the interposer's model; grids are sized so a kernel takes about 1 ms.
A tenant's share is its blocks x its cost per block over its wall time.

Target: every tenant within 10% (relative) of its share, medians of REPS runs.
  BUILD=build bench/shim_compute_time.py [SECONDS [REPS]]
  SHIM=/path/to/other/libgpufrac-cuda.so ...   (another interposer, same bench)
  ONLY=2 ...                                    (only the configs of 2 tenants)
Prints one row per configuration (a Markdown table) and exits 0 when all hit.
"""
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
SECS = int(sys.argv[1]) if len(sys.argv) > 1 else 4
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
FAKE = os.path.join(BUILD, "tests/shim/fakelib")
SHIM = os.environ.get("SHIM", os.path.join(BUILD, "src/shim/libgpufrac-cuda.so"))
PROBE = os.path.join(BUILD, "tests/shim/probe_dl")
MODEL_NS = 1e9 / (132 * 32 * 250)  # 947 ns: the model's block on the fake

SETS = {
    2: [[10, 90], [30, 70]],
    4: [[10, 20, 30, 40]],
    8: [[5, 5, 10, 10, 15, 15, 20, 20]],
}


def run_once(shares, costs, tmp, tag):
    procs = []
    for i, (pct, ns) in enumerate(zip(shares, costs)):
        conf = os.path.join(tmp, f"{tag}-{i}.conf")
        with open(conf, "w") as f:
            f.write(f"compute = {pct}\nmemory = 8Gi\nregion = {tmp}/{tag}-{i}.region\n")
        grid = max(1, round(1e6 / ns))
        env = dict(os.environ, LD_LIBRARY_PATH=FAKE, LD_PRELOAD=SHIM,
                   GPUFRAC_REAL_LIBCUDA=os.path.join(FAKE, "libcuda.so.1"),
                   GPUFRAC_CONFIG=conf, FAKE_CUDA_DEVICES="1",
                   FAKE_GPU_NS_PER_BLOCK=str(int(ns)),
                   FAKE_CUDA_SHARED=os.path.join(tmp, f"{tag}-gpu"))
        procs.append((subprocess.Popen([PROBE, "work", str(SECS), str(grid), "1"],
                                       env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True), ns))
    got = []
    for p, ns in procs:
        out, _ = p.communicate(timeout=SECS * 10 + 60)
        line = [l for l in out.splitlines() if l.startswith("work ")]
        if not line:
            raise SystemExit(f"probe failed:\n{out}")
        w = line[0].split()
        got.append(int(w[1]) * int(ns) / 1e9 / float(w[4]))
    return got


def main():
    cmake = ["cmake", "--build", BUILD, "-j2", "--target", "gpufrac-cuda",
             "fake_cuda", "probe_dl"]
    subprocess.run(cmake, check=True, stdout=subprocess.DEVNULL)
    only = os.environ.get("ONLY")
    rows, miss = [], 0
    print("| tenants | cost ratio | GPU vs model | shares (%) | got (% of GPU time, medians) "
          "| worst (relative) | |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        n_run = 0
        for n, sets in SETS.items():
            if only and int(only) != n:
                continue
            for shares in sets:
                for ratio, order in ((1, "asc"), (10, "asc"), (10, "desc")):
                    if order == "desc" and n != 2:
                        continue
                    for speed in (1, 10):
                        costs = [MODEL_NS * speed * ratio ** (i / (n - 1))
                                 for i in range(n)]
                        if order == "desc":
                            costs.reverse()
                        runs = []
                        for _ in range(REPS):
                            n_run += 1
                            runs.append(run_once(shares, costs, tmp, f"r{n_run}"))
                        med = [statistics.median(r[i] for r in runs) for i in range(n)]
                        errs = [m / (s / 100) - 1 for m, s in zip(med, shares)]
                        worst = max(errs, key=abs)
                        ok = abs(worst) <= 0.10
                        miss += not ok
                        label = f"{ratio}x" + (" (costliest to the smallest)" if order == "desc" else "")
                        print(f"| {n} | {label} | {'model' if speed == 1 else '10x slower'} | "
                              f"{'/'.join(map(str, shares))} | "
                              f"{'/'.join(f'{100 * m:.1f}' for m in med)} | "
                              f"{100 * worst:+.1f}% | {'ok' if ok else 'MISS'} |", flush=True)
    print(f"{miss} configurations outside 10%")
    return 0 if miss == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
