#!/usr/bin/env bash
# Reproduction of FGD on every published trace: our fgd, seeds 42-51, on all
# 17 traces, against the FGD paper's simulator's own results
# (scripts/compare-reference --fgd --check: a trace fails when its ten-seed
# mean differs from the published one by more than 3.6 published standard
# deviations times sqrt(1/10 + 1/10), or its spread exceeds 4 times the
# published one; docs/placement.md, "Our fgd against the published FGD").
# About 45 s of CPU.  Then the check itself is checked: the same results
# with one trace moved by a point must fail it.
set -eu
: "${GPUFRAC:?}" "${SCRIPTS:?}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$GPUFRAC" simulate --trace all --policy fgd --seeds 42-51 --jobs 2 \
  --format json >"$dir/fgd.json"
if ! "$SCRIPTS/compare-reference" "$dir/fgd.json" --fgd --check; then
  echo "0 passed, 2 failed"
  exit 1
fi
python3 - "$dir/fgd.json" "$dir/moved.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
n = 0
for s in d["summary"]:
    if s["trace"] == "gpushare40":
        s["unallocated_at_100"] += 1.0
        n += 1
assert n == 1, "no gpushare40 row"
json.dump(d, open(sys.argv[2], "w"))
PY
if "$SCRIPTS/compare-reference" "$dir/moved.json" --fgd --check >"$dir/moved.out"; then
  cat "$dir/moved.out"
  echo "1 passed, 1 failed: a trace one point off passed the check"
  exit 1
fi
grep -q "outside: gpushare40" "$dir/moved.out"
echo "2 passed, 0 failed"
