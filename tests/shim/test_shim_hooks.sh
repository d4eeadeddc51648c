#!/usr/bin/env bash
# Issue 25's interposer checks against the fake driver (check_hooks.c):
# names, throttle per launch variant, preload order, IPC.
# Prints one line per scenario and 'N passed, N failed'.
set -u
: "${SHIM:?}" "${FAKE_DIR:?}" "${CHECK_HOOKS:?}" "${ALLOC_WRAP:?}" "${NEXT_WRAP:?}" "${DATA:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
unset GPUFRAC_CONFIG

run() { # name expect-rc -- env/cmd...
  local name=$1 want=$2
  shift 3
  if timeout 100 env "$@" >"$tmp/out" 2>&1; then rc=0; else rc=$?; fi
  if [ "$rc" -eq "$want" ] && { [ "$want" -ne 0 ] || ! grep -q '^FAIL' "$tmp/out"; }; then
    echo "ok   $name"; pass=$((pass + 1))
  else
    echo "FAIL $name (exit $rc, want $want)"; sed 's/^/  | /' "$tmp/out" | tail -40
    fail=$((fail + 1))
  fi
}

drv=(LD_LIBRARY_PATH="$FAKE_DIR" GPUFRAC_REAL_LIBCUDA="$FAKE_DIR/libcuda.so.1")

# Every name libcudart 12.9.79 / 13.5.37 asks for, with its version and
# flags, and every per-thread symbol of cuda.h.
run names-wrapped-or-listed 0 -- "${drv[@]}" LD_PRELOAD="$SHIM" GPUFRAC_GPU_MEMORY=1Gi "$CHECK_HOOKS" names "$DATA"

# Every launch variant, legacy and per-thread stream, draws from the
# bucket (10% of 1,000,000 blocks/s).
printf 'compute = 10\ncapacity = 1000000\ngraph = 5000\nregion = %s/t1\n' "$tmp" >"$tmp/t1.conf"
run throttle-every-variant 0 -- "${drv[@]}" LD_PRELOAD="$SHIM" GPUFRAC_CONFIG="$tmp/t1.conf" "$CHECK_HOOKS" throttle

# A cuMemAlloc_v2 wrapper preloaded before the interposer (RTLD_NEXT finds
# the original), and after it: 1 GiB limit, 0 bytes over either way.
lim=(GPUFRAC_GPU_MEMORY=1Gi GPUFRAC_CONTEXT_OVERHEAD=0)
run preload-wrapper-first 0 -- "${drv[@]}" "${lim[@]}" LD_PRELOAD="$ALLOC_WRAP $SHIM" FAKE_CUDA_SHARED="$tmp/pw1" "$CHECK_HOOKS" preload 1024
run preload-wrapper-after 0 -- "${drv[@]}" "${lim[@]}" LD_PRELOAD="$SHIM $ALLOC_WRAP" FAKE_CUDA_SHARED="$tmp/pw2" "$CHECK_HOOKS" preload 1024
# ... and without the interposer the same check fails (it can fail).
run preload-without-shim 1 -- "${drv[@]}" LD_PRELOAD="$ALLOC_WRAP" FAKE_CUDA_SHARED="$tmp/pw3" "$CHECK_HOOKS" preload 1024
# A getpid wrapper preloaded after (and before) the interposer still gets
# the C library's getpid through RTLD_NEXT.
run rtld-next-after 0 -- LD_PRELOAD="$SHIM $NEXT_WRAP" /bin/true
run rtld-next-before 0 -- LD_PRELOAD="$NEXT_WRAP $SHIM" /bin/true

# The driver's pre-3.2 allocators (cuMemAlloc, cuMemAllocPitch: 32-bit
# sizes, still exported under their plain names) cannot get round the
# limit, linked, through dlsym or through cuGetProcAddress at version 2000;
# without the interposer the same check fails.
run legacy-entry-points 0 -- "${drv[@]}" "${lim[@]}" LD_PRELOAD="$SHIM" FAKE_CUDA_SHARED="$tmp/lg1" "$CHECK_HOOKS" legacy 1024
run legacy-without-shim 1 -- "${drv[@]}" FAKE_CUDA_SHARED="$tmp/lg2" "$CHECK_HOOKS" legacy 1024

# CUDA IPC between two processes of one container: charged once, to the
# process that allocated.
printf 'memory = 1Gi\ncontext_overhead = 0\nregion = %s/ipc\n' "$tmp" >"$tmp/ipc.conf"
run ipc-charged-once 0 -- "${drv[@]}" LD_PRELOAD="$SHIM" GPUFRAC_CONFIG="$tmp/ipc.conf" "$CHECK_HOOKS" ipc "$tmp/ipc"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
