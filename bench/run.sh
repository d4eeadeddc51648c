#!/usr/bin/env bash
# Runs every gpufrac benchmark in a release build and prints the results
# that docs/benchmarks.md quotes.  Run on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target gpufrac bench_sim >/dev/null
echo "== per-policy replay and decision latency (bench_sim)"
./build/bench_sim "${1:-5}"
echo
echo "== the full sweep: 17 traces x 6 policies x seeds 42-51, $(nproc) threads"
start=$(date +%s.%N)
./build/gpufrac simulate --trace all --policy random,dotprod,clustering,packing,bestfit,fgd \
  --seeds 42-51 --format json >/tmp/gpufrac-sweep.json
end=$(date +%s.%N)
echo "wall: $(echo "$end - $start" | bc) s  (1020 replays; output /tmp/gpufrac-sweep.json)"
