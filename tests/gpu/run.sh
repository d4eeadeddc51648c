#!/usr/bin/env bash
# The real-GPU checks, in one go, for a machine with an NVIDIA GPU and its
# driver (never run in CI; no GPU there).  Builds gpufrac, then runs the
# interposer's probe against the real libcuda.so.1 / libnvidia-ml.so.1:
#   - every allocation path holds to a 1 GiB limit (probe limits, three ways
#     of reaching the driver);
#   - NVML and cuMemGetInfo agree with the limit;
#   - 6 processes x 4 threads churn under one region without passing it;
#   - 40 SIGKILLed processes' memory comes back;
# and prints nvidia-smi before and after.  It changes no GPU setting.
# Usage: tests/gpu/run.sh   (exit 0 when every check passed)
set -uo pipefail
cd "$(dirname "$0")/../.."
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,uuid,memory.total,memory.used --format=csv
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build build-gpu -j "$(nproc)" --target gpufrac-cuda probe_dl gpufrac >/dev/null || exit 1
SHIM=$PWD/build-gpu/src/shim/libgpufrac-cuda.so
PROBE=$PWD/build-gpu/tests/shim/probe_dl
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
run() { echo "== $1"; shift; if ! timeout 300 "$@"; then fail=$((fail + 1)); fi; }
# The probe's pitch and array expectations assume the fake driver's pitch
# (1024) and exact array sizes; on a real GPU those lines report what the
# driver chose, and only the limit checks must hold.
run "limits, dlopen"   env LD_PRELOAD=$SHIM GPUFRAC_GPU_MEMORY=1Gi GPUFRAC_LOG=info $PROBE dlopen limits
run "limits, procaddr" env LD_PRELOAD=$SHIM GPUFRAC_GPU_MEMORY=1Gi $PROBE procaddr limits
run "nvml"             env LD_PRELOAD=$SHIM GPUFRAC_GPU_MEMORY=1Gi $PROBE nvml
printf 'memory = 1Gi\nregion = %s/r\n' "$tmp" >"$tmp/c"
run "stress"           env LD_PRELOAD=$SHIM GPUFRAC_CONFIG=$tmp/c $PROBE stress 6 4 5 "$tmp/r"
printf 'memory = 1Gi\nregion = %s/r2\n' "$tmp" >"$tmp/c2"
run "sigkill"          env LD_PRELOAD=$SHIM GPUFRAC_CONFIG=$tmp/c2 $PROBE kill 40 "$tmp/r2"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=memory.used --format=csv
echo "gpu checks: $fail failed"
[ "$fail" -eq 0 ]
