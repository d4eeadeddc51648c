#!/usr/bin/env bash
# The interposer under NVIDIA's CUDA runtime on a GPU (issue 25, item 12),
# run by tests/gpu/run.sh after its driver-level checks:
#   - cudart_check (tests/gpu/cudart_check.c) built against libcudart.so.13
#     of the pinned nvidia-cuda-runtime wheel: the limits through cudart
#     (cudaMalloc, cudaMallocManaged, cudaMallocAsync, cudaMemGetInfo);
#   - the launch throttle through cudart: a container at 30% alone on the
#     GPU gets 30% of its time (within 10%, relative) through
#     cudaLaunchKernel, cudaLaunchKernelExC and their per-thread default
#     stream forms (_ptsz: the driver's _ptsz entry points);
#   - compute by GPU time (docs/shim.md), real kernels: 2 and 4 containers
#     whose blocks spin 0.5 to 5 ms (up to 10x apart), each within 10%
#     (relative) of its share of the GPU's time; capacity from the device
#     (not configured: a GPU of unknown speed to the interposer).
# Kernels are PTX text (a spin on %globaltimer) that cudart hands to the
# driver to JIT: no CUDA compiler anywhere.  A kernel is one wave (SMs x
# blocks per SM, 32 threads a block), so it holds the whole GPU for its
# spin: a container's GPU time is its kernels x the spin.
#
# The GPU machine has no network: the runtime comes with the tree.  It is
# looked for at $GF_CUDART, tests/gpu/cudart/libcudart.so.13 (copy it there
# and carry that folder, 0.7 MB; it is ignored by git), then the cache of
# scripts/install-cuda-headers, which puts it there where there is network.
#
# Here, without a GPU: GF_GPU_FAKE=BUILD-DIR runs the same flow on the fake
# driver of that build, with cudart_over_driver.c standing in for libcudart
# (NVIDIA's runtime does not start over the fake driver), shorter runs, and
# the timing rows reported but not counted as failures (timing is
# bench/'s, never a test's) - what test_gpu_cudart_fake does.
# Usage: tests/gpu/cudart.sh SHIM   (exit 0 when every check passed)
set -uo pipefail
cd "$(dirname "$0")/../.."
SHIM=${1:?usage: tests/gpu/cudart.sh /path/to/libgpufrac-cuda.so}
FAKE_BUILD=${GF_GPU_FAKE:-}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0 timing=0
CC=${CC:-cc}
if [ -n "$FAKE_BUILD" ]; then
  fakelib=$(cd "$FAKE_BUILD" && pwd)/tests/shim/fakelib
  $CC -std=c11 -O2 -Wall -Werror -Isrc/shim -o "$tmp/cudart_check" \
    tests/gpu/cudart_check.c tests/gpu/cudart_over_driver.c -ldl || exit 1
  SECS=${GF_GPU_FAKE_SECONDS:-2}
  # One fake device of 4 x 8 block slots (a wave is 32 blocks), its model
  # 8,000 blocks/s (125 us a block); kernels take their spin on it.
  drv=(LD_LIBRARY_PATH="$fakelib" GPUFRAC_REAL_LIBCUDA="$fakelib/libcuda.so.1"
    FAKE_CUDA_DEVICES=1 FAKE_CUDA_SMS=4 FAKE_CUDA_BLOCKS_PER_SM=8)
  wave=32
  apis="launch ex launch_ptsz"
  nm -D "$fakelib/libcuda.so.1" | grep -q ' cuLaunchKernelEx_ptsz$' && apis="$apis ex_ptsz"
else
  rt=${GF_CUDART:-}
  [ -z "$rt" ] && [ -f tests/gpu/cudart/libcudart.so.13 ] && rt=$PWD/tests/gpu/cudart/libcudart.so.13
  if [ -z "$rt" ]; then
    inc=$(scripts/install-cuda-headers 2>/dev/null | tail -n1)
    [ -n "$inc" ] && [ -f "$inc/../lib/libcudart.so.13" ] && rt=$(cd "$inc/../lib" && pwd)/libcudart.so.13
  fi
  if [ -z "$rt" ]; then
    echo "FAIL cudart: no libcudart.so.13 (GF_CUDART, tests/gpu/cudart/, or scripts/install-cuda-headers with network)"
    exit 1
  fi
  echo "cudart: $rt"
  $CC -std=c11 -O2 -Wall -Werror -o "$tmp/cudart_check" tests/gpu/cudart_check.c "$rt" \
    -Wl,-rpath,"$(dirname "$rt")" || exit 1
  SECS=${GF_GPU_SECONDS:-10}
  drv=()
  wave=0 # from the device, in cudart_check
  apis="launch ex launch_ptsz ex_ptsz"
fi
C=$tmp/cudart_check

echo "== cudart: limits (1 GiB)"
if ! timeout 120 env "${drv[@]}" LD_PRELOAD="$SHIM" GPUFRAC_GPU_MEMORY=1Gi GPUFRAC_CONTEXT_OVERHEAD=0 \
  "$C" limits 1024; then fail=$((fail + 1)); fi

# tenants SPIN_US,SHARE... : containers at once, each its own region (one
# container each), on one GPU; prints each one's share of the GPU's time,
# and whether each is within 10% (relative) of its share.
group=0
tenants() {
  group=$((group + 1))
  local i=0 pids=() specs=("$@")
  for spec in "${specs[@]}"; do
    local spin=${spec%,*} pct=${spec#*,} api=${API:-launch}
    printf 'compute = %s\nregion = %s/g%s-%s.region\n' "$pct" "$tmp" "$group" "$i" >"$tmp/g$group-$i.conf"
    local fake=()
    [ -n "$FAKE_BUILD" ] && fake=(FAKE_CUDA_SHARED="$tmp/g$group.gpu" FAKE_GPU_NS_PER_BLOCK=$((spin * 1000 / wave)))
    timeout $((SECS * 4 + 60)) env "${drv[@]}" "${fake[@]}" LD_PRELOAD="$SHIM" GPUFRAC_CONFIG="$tmp/g$group-$i.conf" \
      "$C" work "$SECS" "$spin" "$api" >"$tmp/g$group-$i.out" 2>&1 &
    pids+=($!)
    i=$((i + 1))
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  [ "$rc" -eq 0 ] || { cat "$tmp"/g$group-*.out; fail=$((fail + 1)); return; }
  python3 - "$tmp" "$group" "${specs[@]}" <<'PY'
import re, sys
tmp, group, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
got, ok = [], True
for i, spec in enumerate(specs):
    spin, pct = (int(x) for x in spec.split(","))
    out = open(f"{tmp}/g{group}-{i}.out").read()
    m = re.search(r"^work (\d+) kernels \d+ blocks in ([\d.]+) s", out, re.M)
    if not m:
        print(f"   no work line from the container at {pct}%:\n{out}")
        sys.exit(2)
    share = int(m.group(1)) * spin / 1e6 / float(m.group(2))
    err = share / (pct / 100) - 1
    ok &= abs(err) <= 0.10
    got.append(f"{pct}% ({spin} us): {100 * share:.1f}% ({100 * err:+.1f}%)")
print("   " + ", ".join(got) + ("  ok" if ok else "  MISS"))
sys.exit(0 if ok else 1)
PY
  case $? in
  0) ;;
  1) timing=$((timing + 1)) ;;
  *) fail=$((fail + 1)) ;;
  esac
}

echo "== cudart: the launch throttle, 30% alone, per launch path"
for api in $apis; do
  echo "-- $api"
  API=$api tenants 2000,30
done

echo "== compute by GPU time, real kernels (spin per block, share)"
for set in "2000,30 2000,70" "500,30 5000,70" "5000,30 500,70" \
  "2000,10 2000,90" "500,10 5000,90" "5000,10 500,90" \
  "1000,10 1000,20 1000,30 1000,40" "500,10 1000,20 2500,30 5000,40"; do
  echo "-- $set"
  # shellcheck disable=SC2086
  tenants $set
done

if [ -n "$FAKE_BUILD" ]; then
  echo "cudart checks (fake driver): $fail failed; timing rows outside 10%: $timing (not failures here)"
else
  echo "cudart checks: $fail failed, $timing timing rows outside 10%"
  fail=$((fail + timing))
fi
[ "$fail" -eq 0 ]
