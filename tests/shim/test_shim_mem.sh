#!/usr/bin/env bash
# Memory scenarios of issue 25 against the fake driver, under LD_PRELOAD
# (probe_mem.c).  Prints one line per scenario and 'N passed, N failed'.
set -u
: "${SHIM:?}" "${FAKE_DIR:?}" "${PROBE_MEM:?}" "${SHIM_LOCKED:?}" "${HAMI_REGION:?}" "${SYSTEM_CONF:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

run() { # name expect-rc -- env/cmd...
  local name=$1 want=$2
  shift 3
  if timeout 120 env "$@" >"$tmp/out" 2>&1; then rc=0; else rc=$?; fi
  if [ "$rc" -eq "$want" ] && { [ "$want" -ne 0 ] || ! grep -q '^FAIL' "$tmp/out"; }; then
    echo "ok   $name"; pass=$((pass + 1))
  else
    echo "FAIL $name (exit $rc, want $want)"; sed 's/^/  | /' "$tmp/out" | tail -25
    fail=$((fail + 1))
  fi
}

unset GPUFRAC_CONFIG GPUFRAC_GPU_MEMORY GPUFRAC_REGION CUDA_VISIBLE_DEVICES
base=(LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$SHIM" GPUFRAC_REAL_LIBCUDA="$FAKE_DIR/libcuda.so.1"
      GPUFRAC_CONTEXT_OVERHEAD=0)

# exec after using CUDA: the new image starts with no charge of the old
# one's (same pid, same start time).  256 MiB, exec, 256 MiB more under
# 400 MiB: the old image's slot made that 512.
run exec-resets-slot 0 -- "${base[@]}" GPUFRAC_GPU_MEMORY=400Mi GPUFRAC_REGION="$tmp/ex" "$PROBE_MEM" exec 400

# VMM: cuMemRelease while the mapping stays keeps the memory (the driver
# frees it at the later of the release and the last unmap), so the charge
# stays too: 0 bytes over a 1 GiB limit.
run vmm-release-mapped 0 -- "${base[@]}" GPUFRAC_GPU_MEMORY=1Gi FAKE_CUDA_SHARED="$tmp/vd1" \
    "$PROBE_MEM" vmm-release-mapped "$tmp/vd1" 1024
# ... and the usual idiom keeps working within the limit.
run vmm-idiom 0 -- "${base[@]}" GPUFRAC_GPU_MEMORY=1Gi FAKE_CUDA_SHARED="$tmp/vd2" \
    "$PROBE_MEM" vmm-idiom "$tmp/vd2" 1024
# The fake driver's model itself: without the interposer the loop holds
# far more than 1 GiB (the check can fail).
run vmm-without-shim 1 -- LD_LIBRARY_PATH="$FAKE_DIR" FAKE_CUDA_SHARED="$tmp/vd3" \
    "$PROBE_MEM" vmm-release-mapped "$tmp/vd3" 1024

# Pools under threads: 8 threads allocating from one pool (the fake
# reserves in 32 MiB steps, each pool allocation taking 50 us) pass a
# 2000 MiB limit by less than one step.
run pool-threads 0 -- "${base[@]}" GPUFRAC_GPU_MEMORY=2000Mi FAKE_POOL_GRAN=33554432 FAKE_POOL_DELAY_US=50 \
    FAKE_CUDA_SHARED="$tmp/pt" "$PROBE_MEM" pool-threads 8 2000 "$tmp/pt" 32

# As a HAMi-core drop-in with only CUDA_DEVICE_MEMORY_LIMIT set, the
# processes of a container share one default region (HAMi-core shares
# /tmp/cudevshr.cache): 2g between two processes, not 2g each.  The
# locked build's default region is moved into the build tree
# (GF_SHIM_HAMI_REGION) so runs in parallel do not share /tmp's.
if [ -e "$SYSTEM_CONF" ]; then
  echo "FAIL hami-default-region: $SYSTEM_CONF exists (test_shim running?)"; fail=$((fail + 1))
else
  mkdir -p "$(dirname "$HAMI_REGION")"; rm -f "$HAMI_REGION"
  hami=(LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$SHIM_LOCKED" GPUFRAC_REAL_LIBCUDA="$FAKE_DIR/libcuda.so.1"
        CUDA_DEVICE_MEMORY_LIMIT=2g)
  env "${hami[@]}" "$PROBE_MEM" hold-alloc 6 20 >"$tmp/h1" 2>&1 &
  hpid=$!
  for _ in $(seq 200); do grep -q holding "$tmp/h1" && break; sleep 0.05; done
  run hami-default-region 0 -- "${hami[@]}" "$PROBE_MEM" hold-alloc 6 0
  a=$(awk '/^allocated/{print $2}' "$tmp/h1"); b=$(awk '/^allocated/{print $2}' "$tmp/out")
  kill "$hpid" 2>/dev/null; wait "$hpid" 2>/dev/null
  if [ "$a" = 6 ] && [ "$b" = 2 ]; then
    echo "ok   hami-default-region-shared (6 + 2 x 256 MiB = 2 GiB together)"; pass=$((pass + 1))
  else
    echo "FAIL hami-default-region-shared: first $a, second $b x 256 MiB under 2g together (want 6 and 2)"
    fail=$((fail + 1))
  fi
  rm -f "$HAMI_REGION"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
