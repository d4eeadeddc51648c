#!/usr/bin/env bash
# The thread-churn scenario under ThreadSanitizer: the interposer and the
# probe built with clang -fsanitize=thread (the interposer linked into the
# probe, not preloaded: TSan's runtime must come first in the process), the
# fake driver plain.  Fails on any TSan report or a failed check.
set -eu
: "${SRC:?}" "${FAKE_DIR:?}" "${CLANG:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc=("$CLANG" -std=gnu11 -O1 -g -fsanitize=thread -fPIC -I"$SRC/include" -I"$SRC/src/shim" -I"$SRC/src/nvml")
core=("$SRC/src/core/quantity.c" "$SRC/src/core/diag.c" "$SRC/src/core/error.c")
"${cc[@]}" -shared -fvisibility=hidden -o "$tmp/libgpufrac-cuda.so" \
  "$SRC"/src/shim/*.c "$SRC/src/nvml/nvml_load.c" "${core[@]}" -ldl -lpthread
"${cc[@]}" -o "$tmp/probe_dl" "$SRC/tests/shim/probe.c" "$SRC/src/shim/region.c" "${core[@]}" \
  -L"$tmp" -Wl,--no-as-needed -lgpufrac-cuda -Wl,-rpath,"$tmp" -ldl -lpthread
env LD_LIBRARY_PATH="$FAKE_DIR" GPUFRAC_REAL_LIBCUDA="$FAKE_DIR/libcuda.so.1" \
  GPUFRAC_GPU_MEMORY=2Gi GPUFRAC_CONTEXT_OVERHEAD=0 TSAN_OPTIONS="exitcode=66" \
  "$tmp/probe_dl" threads 4 2
