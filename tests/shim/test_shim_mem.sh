#!/usr/bin/env bash
# Memory scenarios of issue 25 against the fake driver, under LD_PRELOAD
# (probe_mem.c).  Prints one line per scenario and 'N passed, N failed'.
set -u
: "${SHIM:?}" "${FAKE_DIR:?}" "${PROBE_MEM:?}"
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

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
