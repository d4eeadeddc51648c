#!/usr/bin/env bash
# Reproduction: the default trace under the six published policies, seeds
# 42-51, must land within tolerance of the FGD paper's simulator results
# (scripts/compare-reference --check --traces default).  The full 17-trace comparison is in
# docs/simulator.md; this keeps the default trace honest on every change.
set -eu
: "${GPUFRAC:?}" "${SCRIPTS:?}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$GPUFRAC" simulate --trace default \
  --policy random,dotprod,clustering,packing,bestfit,fgd --seeds 42-51 \
  --format json >"$out"
if "$SCRIPTS/compare-reference" "$out" --check --traces default; then
  echo "6 passed, 0 failed"
else
  echo "0 passed, 6 failed"
  exit 1
fi
