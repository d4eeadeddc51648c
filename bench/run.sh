#!/usr/bin/env bash
# Runs every gpufrac benchmark in a release build and prints the results
# that docs/benchmarks.md quotes.  Run on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target gpufrac bench_sim bench_churn >/dev/null
echo "== per-policy replay and decision latency (bench_sim)"
./build/bench_sim "${1:-5}"
echo
echo "== a simulated week of churn and autoscaling per policy (bench_churn)"
./build/bench_churn 3
echo
echo "== what gpufrac's packing plan costs at engine creation (bench_sim --plan)"
./build/bench_sim --plan
echo
echo "== fgd vs gpufrac decision p99, side by side, all 17 traces (bench_sim --versus)"
./build/bench_sim --versus 3 42 default,cpu050,cpu100,cpu200,cpu250,gpushare40,gpushare60,gpushare80,gpushare100,gpuspec10,gpuspec20,gpuspec25,gpuspec33,multigpu20,multigpu30,multigpu40,multigpu50
echo
echo "== the full sweep: 17 traces x 6 policies x seeds 42-51, $(nproc) threads"
start=$(date +%s.%N)
./build/gpufrac simulate --trace all --policy random,dotprod,clustering,packing,bestfit,fgd \
  --seeds 42-51 --format json >/tmp/gpufrac-sweep.json
end=$(date +%s.%N)
echo "wall: $(echo "$end - $start" | bc) s  (1020 replays; output /tmp/gpufrac-sweep.json)"
