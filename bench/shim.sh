#!/usr/bin/env bash
# The interposer's cost, side by side with the bare fake driver in one run:
# nanoseconds per call (median), instructions per call (callgrind,
# repeatable), system calls per call (strace -c), process start, the
# allocation table's resident memory after 10 M churned pairs and the
# thread-churn test's leftover charge.  Results go in docs/benchmarks.md.
#   BUILD=build ./bench/shim.sh            (a Release build tree)
#   SHIM=/path/to/old/libgpufrac-cuda.so BUILD=build ./bench/shim.sh
#                                          (an older interposer, same bench)
#   BEFORE=/path/to/old/libgpufrac-cuda.so BUILD=build ./bench/shim.sh
#                                          (the instruction rows also for an
#                                          older interposer, side by side)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build} # the build tree to use (Release)
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j2 --target bench_shim gpufrac-cuda fake_cuda fake_nvml probe_dl >/dev/null
B=$BUILD/bench/bench_shim
[ -x "$B" ] || B=$BUILD/bench_shim
FAKE=$BUILD/tests/shim/fakelib
SHIM=${SHIM:-$PWD/$BUILD/src/shim/libgpufrac-cuda.so} # another interposer to compare
bare=(env LD_LIBRARY_PATH=$FAKE)
# Limits on, compute at 100% for the memory paths; a compute share with a
# bucket that never runs dry for the launch path (the fast path).
shim_mem=(env LD_LIBRARY_PATH=$FAKE LD_PRELOAD=$SHIM GPUFRAC_REAL_LIBCUDA=$PWD/$FAKE/libcuda.so.1 GPUFRAC_GPU_MEMORY=8Gi)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'compute = 50\ncapacity = 100000000000\nmemory = 8Gi\nregion = %s/r\n' "$tmp" >"$tmp/c"
shim_cpt=(env LD_LIBRARY_PATH=$FAKE LD_PRELOAD=$SHIM GPUFRAC_REAL_LIBCUDA=$PWD/$FAKE/libcuda.so.1 GPUFRAC_CONFIG=$tmp/c)
modes=(launch alloc alloclive info nvml nvml2)
# Every launch entry point, legacy and per-thread stream (instructions and
# system calls only).
launches=(launch_ptsz launchex launchex_ptsz coop coop_ptsz graph graph_ptsz)
shim_for() { case $1 in launch* | coop* | graph*) s=("${shim_cpt[@]}") ;; *) s=("${shim_mem[@]}") ;; esac; }
# The same environment with the older interposer BEFORE in place of SHIM.
before_of() { o=(); for w in "$@"; do o+=("${w/#LD_PRELOAD=*/LD_PRELOAD=$BEFORE}"); done; }
BEFORE=${BEFORE:-}

echo "== nanoseconds per call (median of 15 batches)"
for what in "${modes[@]}"; do
  shim_for $what
  echo "bare  $("${bare[@]}" $B $what 100000)"
  if [ -n "$BEFORE" ]; then before_of "${s[@]}"; echo "before $("${o[@]}" $B $what 100000)"; fi
  echo "shim  $("${s[@]}" $B $what 100000)"
done

echo "== instructions per call (callgrind: (I(2N) - I(N)) / 15N, N = 2000)"
# ir ENV-ARRAY-WORDS... -- CMD: instructions collected for CMD under ENV
ir() { local envs=() ; while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  "${envs[@]}" valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 |
  awk '/Collected/ {print $4}'; }
# added ENV-ARRAY-WORDS... -- MODE: "before +X, " when BEFORE is set
added_before() { [ -n "$BEFORE" ] || return 0; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  before_of "${envs[@]}"
  local o1 o2; o1=$(ir "${o[@]}" -- $B "$@" 2000); o2=$(ir "${o[@]}" -- $B "$@" 4000)
  python3 -c "print(f'before +{($o2-$o1)/2000/15-($b2-$b1)/2000/15:.0f}, ', end='')"; }
for what in "${modes[@]}" "${launches[@]}"; do
  shim_for $what
  b1=$(ir "${bare[@]}" -- $B $what 2000); b2=$(ir "${bare[@]}" -- $B $what 4000)
  s1=$(ir "${s[@]}" -- $B $what 2000); s2=$(ir "${s[@]}" -- $B $what 4000)
  echo "$what: $(added_before "${s[@]}" -- $what)$(python3 -c "
b=($b2-$b1)/2000/15; s=($s2-$s1)/2000/15
print(f'bare {b:.0f}, with interposer {s:.0f}, added {s-b:.0f} instructions per call')")"
done

echo "== the same with one visible device (FAKE_CUDA_DEVICES=1: no cuCtxGetDevice)"
for what in alloc info; do
  b1=$(ir "${bare[@]}" FAKE_CUDA_DEVICES=1 -- $B $what 2000); b2=$(ir "${bare[@]}" FAKE_CUDA_DEVICES=1 -- $B $what 4000)
  s1=$(ir "${shim_mem[@]}" FAKE_CUDA_DEVICES=1 -- $B $what 2000); s2=$(ir "${shim_mem[@]}" FAKE_CUDA_DEVICES=1 -- $B $what 4000)
  python3 -c "
b=($b2-$b1)/2000/15; s=($s2-$s1)/2000/15
print(f'$what, one device: bare {b:.0f}, with interposer {s:.0f}, added {s-b:.0f} instructions per call')"
done

echo "== alloclive with every address new (FAKE_CUDA_NO_REUSE=1: the 1 MiB block lands anywhere in the table)"
b1=$(ir "${bare[@]}" FAKE_CUDA_NO_REUSE=1 -- $B alloclive 2000); b2=$(ir "${bare[@]}" FAKE_CUDA_NO_REUSE=1 -- $B alloclive 4000)
s1=$(ir "${shim_mem[@]}" FAKE_CUDA_NO_REUSE=1 -- $B alloclive 2000); s2=$(ir "${shim_mem[@]}" FAKE_CUDA_NO_REUSE=1 -- $B alloclive 4000)
echo "alloclive, every address new: $(added_before "${shim_mem[@]}" FAKE_CUDA_NO_REUSE=1 -- alloclive)$(python3 -c "
b=($b2-$b1)/2000/15; s=($s2-$s1)/2000/15
print(f'bare {b:.0f}, with interposer {s:.0f}, added {s-b:.0f} instructions per call')")"

echo "== instructions per allocation alone (N allocations, none freed; N = 5000)"
b1=$(ir "${bare[@]}" -- $B allocs 5000); b2=$(ir "${bare[@]}" -- $B allocs 10000)
s1=$(ir "${shim_mem[@]}" -- $B allocs 5000); s2=$(ir "${shim_mem[@]}" -- $B allocs 10000)
python3 -c "print(f'cuMemAlloc_v2 alone: added {(($s2-$s1)-($b2-$b1))/5000:.0f} instructions per call')"

echo "== system calls per call (strace -c: S(2N) - S(N) over 15N = 100,005 calls)"
sc() { "$@" strace -f -c -o "$tmp/sc" $B $what $N >/dev/null 2>&1; awk '/total/ {print $4}' "$tmp/sc"; }
for what in "${modes[@]}" "${launches[@]}"; do
  shim_for $what
  N=6667; b1=$(sc "${bare[@]}"); s1=$(sc "${s[@]}")
  N=13334; b2=$(sc "${bare[@]}"); s2=$(sc "${s[@]}")
  echo "$what: 100,005 more calls make bare $((b2 - b1)), with interposer $((s2 - s1)) system calls"
done

echo "== resident memory after 10 M alloc/free pairs, one live (every address new)"
echo "bare  $("${bare[@]}" FAKE_CUDA_NO_REUSE=1 $B churn 10000000)"
echo "shim  $("${shim_mem[@]}" FAKE_CUDA_NO_REUSE=1 $B churn 10000000)"

echo "== thread churn: 8 threads x 7 paths, 3 s, freed addresses handed straight back"
"${shim_mem[@]}" GPUFRAC_GPU_MEMORY=2Gi GPUFRAC_CONTEXT_OVERHEAD=0 "$BUILD/tests/shim/probe_dl" threads 8 3 | grep -E 'refused|charged'

echo "== process start: first driver call (median of 21 processes)"
for mode in bare shim; do
  [ $mode = bare ] && r=("${bare[@]}") || r=("${shim_mem[@]}")
  for i in $(seq 21); do "${r[@]}" $B init; done | awk '{print $3}' | sort -n |
    awk -v m=$mode '{v[NR]=$1} END {print m ": " v[11] " us"}'
done
