#!/usr/bin/env bash
# The compute-share semantic (docs/shim.md, "Compute"), on the fake GPU:
# kernels cost FAKE_GPU_NS_PER_BLOCK nanoseconds per block on one timeline
# shared by every process (a GPU of 1e9 / NS blocks per second running one
# kernel at a time), and the bucket's capacity is configured to that.
# Under saturating launches (every process launches as fast as the GPU and
# its bucket let it), each container's share of the GPU's work must be
# within 10% (relative) of its compute share, together and alone.
#   BUILD=build ./bench/shim_compute.sh [SECONDS]
# Prints each share and "ok"/"MISS"; exit status 0 when all are within.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SECS=${1:-5}
cmake --build "$BUILD" -j2 --target gpufrac-cuda fake_cuda probe_dl >/dev/null
FAKE=$BUILD/tests/shim/fakelib
SHIM=$PWD/$BUILD/src/shim/libgpufrac-cuda.so
PROBE=$BUILD/tests/shim/probe_dl
NS=10000 GRID=10 # 10 us a block, 100 us a kernel: capacity 100,000 blocks/s
CAP=$((1000000000 / NS))
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
conf() { printf 'compute = %s\ncapacity = %s\nmemory = 8Gi\nregion = %s/%s\n' "$1" "$CAP" "$tmp" "$2" >"$tmp/$2.conf"; }
work() { # NAME -> runs one container's probe, output in $tmp/NAME.out
  env LD_LIBRARY_PATH=$FAKE LD_PRELOAD=$SHIM GPUFRAC_REAL_LIBCUDA=$PWD/$FAKE/libcuda.so.1 \
    GPUFRAC_CONFIG=$tmp/$1.conf FAKE_GPU_NS_PER_BLOCK=$NS FAKE_CUDA_SHARED=$tmp/gpu-$2 \
    "$PROBE" work "$SECS" $GRID $((NS / 1000)) >"$tmp/$1.out" 2>&1
}
share() { awk '/^work/ {print $2 * '"$NS"' / 1e9 / $5}' "$tmp/$1.out"; }
miss=0
check() { # LABEL SHARE TARGET
  python3 - "$@" <<'PY' || miss=$((miss + 1))
import sys
label, got, want = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
ok = abs(got / want - 1) <= 0.10
print(f"{label}: share of the GPU's work {got:.3f}, target {want:.2f}, "
      f"{(got / want - 1) * 100:+.1f}% {'ok' if ok else 'MISS'}")
sys.exit(0 if ok else 1)
PY
}
conf 10 a10; conf 90 a90; conf 30 b30; conf 70 b70; conf 30 alone30
work a10 1 & work a90 1; wait
check "10% with 90% beside it" "$(share a10)" 0.10
check "90% with 10% beside it" "$(share a90)" 0.90
work b30 2 & work b70 2; wait
check "30% with 70% beside it" "$(share b30)" 0.30
check "70% with 30% beside it" "$(share b70)" 0.70
work alone30 3
check "30% alone on the GPU" "$(share alone30)" 0.30
echo "$miss outside 10%"
[ "$miss" -eq 0 ]
