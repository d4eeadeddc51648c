#!/bin/sh
# Time to Running of 4 pods on one node (real kubelet v1.37.2, fake CRI)
# when one of them needs an uncached 1 GiB model from a loopback source at
# RATE bytes/s (issue 28 item 1; docs/benchmarks.md).  Runs
# tests/e2e/test_model_admission.py RUNS times with GPUFRAC (which may be
# an older build: its runs then fail the test's 8 s limit, and their times
# are still printed) and prints each run's times to Running (and, when
# the test gets that far, the model pod's time to Ready) and the medians.
#
# Usage: bench/model_admission.sh GPUFRAC [RUNS] [RATE]   (root; default 3,
#        100000000)
# TEST=test_dra_kubelet_models.py runs the DRA path's test instead (the
# same four pods, each with a ResourceClaim, the agent in --mode dra).
set -eu
GPUFRAC=$1
RUNS=${2:-3}
RATE=${3:-100000000}
TEST=${TEST:-test_model_admission.py}
K8S_BIN=${K8S_BIN:-$HOME/.cache/gpufrac/k8s-v1.37.2/bin}
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp)
i=0
while [ "$i" -lt "$RUNS" ]; do
  i=$((i + 1))
  GF_E2E_MODEL_RATE=$RATE python3 "$here/tests/e2e/$TEST" \
    "$K8S_BIN" "$GPUFRAC" 2>&1 |
    sed -n -e 's/.*time to Running (s from creation): //p' \
      -e "s/.*pod 'model' Ready \([0-9.]*\) s after its creation.*/model-Ready \1/p" |
    paste -sd'|' - | sed 's/|/, /g' >> "$out" || true
done
cat "$out"
python3 - "$out" <<'PY'
import statistics, sys
runs = [dict((p.split()[0], float(p.split()[1])) for p in ln.strip().split(", "))
        for ln in open(sys.argv[1]) if ln.strip()]
keys = [k for k in runs[0]]
for r in runs[1:]:
    keys += [k for k in r if k not in keys]
print("medians of %d runs: %s" % (len(runs), ", ".join(
    "%s %.1f s" % (k, statistics.median(r[k] for r in runs if k in r))
    for k in keys)))
PY
rm -f "$out"
