#!/usr/bin/env bash
# The interposer's cost, side by side with the bare fake driver in one run:
# nanoseconds per call (median), instructions per call (callgrind, repeatable)
# and process start.  Results go in docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build} # the build tree to use (Release)
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target bench_shim gpufrac-cuda fake_cuda >/dev/null
B=$BUILD/bench/bench_shim
[ -x "$B" ] || B=$BUILD/bench_shim
FAKE=$BUILD/tests/shim/fakelib
SHIM=$BUILD/src/shim/libgpufrac-cuda.so
bare=(env LD_LIBRARY_PATH=$FAKE)
# Limits on, compute at 100% for the memory path; a compute share with a
# bucket that never runs dry for the launch path (the fast path).
shim_mem=(env LD_LIBRARY_PATH=$FAKE LD_PRELOAD=$SHIM GPUFRAC_REAL_LIBCUDA=$PWD/$FAKE/libcuda.so.1 GPUFRAC_GPU_MEMORY=8Gi)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'compute = 50\ncapacity = 100000000000\nmemory = 8Gi\nregion = %s/r\n' "$tmp" >"$tmp/c"
shim_cpt=(env LD_LIBRARY_PATH=$FAKE LD_PRELOAD=$SHIM GPUFRAC_REAL_LIBCUDA=$PWD/$FAKE/libcuda.so.1 GPUFRAC_CONFIG=$tmp/c)

echo "== nanoseconds per call (median of 15 batches)"
for what in launch alloc; do
  echo "bare  $("${bare[@]}" $B $what 200000)"
  [ $what = launch ] && s=("${shim_cpt[@]}") || s=("${shim_mem[@]}")
  echo "shim  $("${s[@]}" $B $what 200000)"
done

echo "== instructions per call (callgrind: (I(2N) - I(N)) / N, N = 20000)"
# ir ENV-ARRAY-WORDS... -- CMD: instructions collected for CMD under ENV
ir() { local envs=() ; while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  "${envs[@]}" valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 |
  awk '/Collected/ {print $4}'; }
for what in launch alloc; do
  [ $what = launch ] && s=("${shim_cpt[@]}") || s=("${shim_mem[@]}")
  b1=$(ir "${bare[@]}" -- $B $what 20000); b2=$(ir "${bare[@]}" -- $B $what 40000)
  s1=$(ir "${s[@]}" -- $B $what 20000); s2=$(ir "${s[@]}" -- $B $what 40000)
  python3 -c "
b=($b2-$b1)/20000/15; s=($s2-$s1)/20000/15
print(f'$what: bare {b:.0f}, with interposer {s:.0f}, added {s-b:.0f} instructions per call')"
done

echo "== instructions per allocation alone (N allocations, none freed; N = 5000)"
b1=$(ir "${bare[@]}" -- $B allocs 5000); b2=$(ir "${bare[@]}" -- $B allocs 10000)
s1=$(ir "${shim_mem[@]}" -- $B allocs 5000); s2=$(ir "${shim_mem[@]}" -- $B allocs 10000)
python3 -c "print(f'cuMemAlloc_v2 alone: added {(($s2-$s1)-($b2-$b1))/5000:.0f} instructions per call')"

echo "== process start: first driver call (median of 21 processes)"
for mode in bare shim; do
  [ $mode = bare ] && r=("${bare[@]}") || r=("${shim_mem[@]}")
  for i in $(seq 21); do "${r[@]}" $B init; done | awk '{print $3}' | sort -n |
    awk -v m=$mode '{v[NR]=$1} END {print m ": " v[11] " us"}'
done
