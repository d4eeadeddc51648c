#!/bin/sh
# What gpufrac's cache term (docs/placement.md) costs per decision: RUNS
# alternating single-thread replays of the default trace with a model
# dimension (100 models), gpufrac:cache=0 and gpufrac, seed SEED; the
# median over runs of each run's median and p99 decision time (us).
#
#   bench/cache_term.sh BUILD_DIR [RUNS] [SEED]
set -eu
build=${1:?usage: bench/cache_term.sh BUILD_DIR [RUNS] [SEED]}
runs=${2:-5}
seed=${3:-42}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
i=0
while [ "$i" -lt "$runs" ]; do
  for p in gpufrac:cache=0 gpufrac; do
    "$build/gpufrac" simulate --policy "$p" --seeds "$seed" --models 100 \
      --jobs 1 --format json >"$tmp/out.json"
    python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))["summary"][0]
print(d["decision_us_median"], d["decision_us_p99"])' "$tmp/out.json" \
      >>"$tmp/$p"
  done
  i=$((i + 1))
done
for p in gpufrac:cache=0 gpufrac; do
  printf '%-16s median %s us  p99 %s us\n' "$p" \
    "$(cut -d' ' -f1 "$tmp/$p" | median)" "$(cut -d' ' -f2 "$tmp/$p" | median)"
done
