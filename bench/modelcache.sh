#!/usr/bin/env bash
# The weight cache's cold start (issue 15): a pod that loads a synthetic
# model of SIZE_GIB GiB (4 files), time from Allocate's model step
# (gf_node_cache_fetch, run here through `gpufrac cache fetch`: the same
# function the Allocate calls) to "weights in (fake) GPU memory" (the
# loader bench/modelcache_load.c through the interposer and tests/shim's
# fake libcuda.so.1), in three cases:
#   source : the cache is empty; the model comes from a loopback HTTP
#            source throttled to RATE bytes/s (bench/modelcache_serve.py)
#   cold   : the model is in the node cache, its files out of the page
#            cache (posix_fadvise DONTNEED, no root needed)
#   warm   : in the node cache and in the page cache
# Then the loader's read rate from a cold page cache against dd's on the
# same file, and the fetching process's CPU and peak RSS (/usr/bin/time).
# Medians of RUNS runs. Results go in docs/benchmarks.md.
#   BUILD=build RUNS=3 SIZE_GIB=4 RATE=200000000 ./bench/modelcache.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RUNS=${RUNS:-3}
SIZE_GIB=${SIZE_GIB:-4}
RATE=${RATE:-200000000}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j2 --target gpufrac bench_modelcache_load gpufrac-cuda fake_cuda >/dev/null
G=$PWD/$BUILD/gpufrac
L=$PWD/$BUILD/bench_modelcache_load
FAKE=$PWD/$BUILD/tests/shim/fakelib
SHIM=$PWD/$BUILD/src/shim/libgpufrac-cuda.so
load=(env LD_LIBRARY_PATH=$FAKE LD_PRELOAD=$SHIM GPUFRAC_REAL_LIBCUDA=$FAKE/libcuda.so.1
      GPUFRAC_GPU_MEMORY=16Gi FAKE_CUDA_TOTAL=$((80 << 30)) "$L")
work=$(mktemp -d "${TMPDIR:-/tmp}/gf_bench_mc.XXXXXX")
srv=""
cleanup() { [ -n "$srv" ] && kill "$srv" 2>/dev/null; chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

# The model: SIZE_GIB files of 1 GiB of random bytes.
mkdir -p "$work/src"
for i in $(seq 0 $((SIZE_GIB - 1))); do
  head -c $((1 << 30)) /dev/urandom >"$work/src/weights-$i.safetensors"
done
"$G" cache manifest "$work/src" >"$work/src/gpufrac.manifest" 2>"$work/digest"
ref="bench-model@$(cat "$work/digest")"
/usr/bin/python3 bench/modelcache_serve.py "$work/src" "$RATE" >"$work/port" &
srv=$!
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
url="http://127.0.0.1:$(cat "$work/port")"

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
sec() { sed -n 's/.*seconds=\([0-9.]*\).*/\1/p'; }
: >"$work/source" ; : >"$work/cold" ; : >"$work/warm"; : >"$work/cpu"
: >"$work/loadcold"; : >"$work/dd"; : >"$work/fetch"
for r in $(seq "$RUNS"); do
  chmod -R u+w "$work/cache" 2>/dev/null || true
  rm -rf "$work/cache"
  t0=$(now)
  /usr/bin/time -f "%e %U %S %M" -o "$work/time" \
    "$G" cache --dir "$work/cache" fetch "$ref" --source "$url" >"$work/dir" 2>"$work/log"
  t1=$(now)
  dir=$(cat "$work/dir")
  "${load[@]}" "$dir" >/dev/null
  t2=$(now)
  echo "$t2 - $t0" | bc -l >>"$work/source"
  echo "$t1 - $t0" | bc -l >>"$work/fetch"
  read -r el us sy rss <"$work/time"
  echo "$(echo "($us + $sy) / $el * 100" | bc -l) $rss" >>"$work/cpu"

  # Cold page cache: drop first, then the clock.
  python3 -c 'import os,sys
for f in os.listdir(sys.argv[1]):
    fd=os.open(os.path.join(sys.argv[1],f),os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)' "$dir"
  t0=$(now)
  "$G" cache --dir "$work/cache" fetch "$ref" --source "$url" >/dev/null 2>&1
  "${load[@]}" "$dir" >"$work/out"
  t2=$(now)
  echo "$t2 - $t0" | bc -l >>"$work/cold"
  # The loader's own read rate from a cold page cache, and dd's.
  "${load[@]}" --drop "$dir" | sec >"$work/s"
  echo "$SIZE_GIB * 1073741824 / $(cat "$work/s") / 1000000" | bc -l >>"$work/loadcold"
  f0=$(ls "$dir" | head -1)
  python3 -c 'import os,sys
fd=os.open(sys.argv[1],os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)' "$dir/$f0"
  dd if="$dir/$f0" of=/dev/null bs=16M 2>&1 | awk '/copied/ {print $(NF-1) * ($NF == "GB/s" ? 1000 : 1)}' >>"$work/dd"

  # Warm: the files were just read.
  "${load[@]}" "$dir" >/dev/null
  t0=$(now)
  "$G" cache --dir "$work/cache" fetch "$ref" --source "$url" >/dev/null 2>&1
  "${load[@]}" "$dir" >/dev/null
  t2=$(now)
  echo "$t2 - $t0" | bc -l >>"$work/warm"
done

printf '== %s GiB model, %s runs, source throttled to %s B/s (medians)\n' "$SIZE_GIB" "$RUNS" "$RATE"
printf 'source (fetch + load)      %.2f s   (fetch alone %.2f s)\n' "$(median <"$work/source")" "$(median <"$work/fetch")"
printf 'node cache, cold page cache %.2f s\n' "$(median <"$work/cold")"
printf 'node cache, warm           %.2f s\n' "$(median <"$work/warm")"
printf 'loader read, cold page cache %.0f MB/s; dd on the same disk %.0f MB/s\n' \
  "$(median <"$work/loadcold")" "$(median <"$work/dd")"
printf 'fetching process: CPU %.0f%% of one core, peak RSS %.0f MiB\n' \
  "$(awk '{print $1}' "$work/cpu" | median)" "$(awk '{print $2 / 1024}' "$work/cpu" | median)"
