#!/usr/bin/env bash
# Interposer scenarios against the fake driver, under LD_PRELOAD.
# Prints one line per scenario and 'N passed, N failed'.
set -u
: "${NEXT_WRAP:?}" "${FOREIGN_LIB:?}" "${SHIM:?}" "${FAKE_DIR:?}" "${PROBE_LINKED:?}" "${PROBE_DL:?}" "${GPUFRAC:?}" "${SHIM_LOCKED:?}" "${SYSTEM_CONF:?}"
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

base=(LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$SHIM" GPUFRAC_REAL_LIBCUDA="$FAKE_DIR/libcuda.so.1")
# The limits scenario counts no context overhead (its own scenario does).
lim=(GPUFRAC_GPU_MEMORY=1Gi GPUFRAC_CONTEXT_OVERHEAD=0)
unset GPUFRAC_CONFIG

# Limits on every path, reaching the driver three ways.
run linked-limits   0 -- "${base[@]}" "${lim[@]}" "$PROBE_LINKED" limits
run dlopen-limits   0 -- "${base[@]}" "${lim[@]}" "$PROBE_DL" dlopen limits
run procaddr-limits 0 -- "${base[@]}" "${lim[@]}" "$PROBE_DL" procaddr limits
run nvml-view       0 -- "${base[@]}" "${lim[@]}" "$PROBE_DL" nvml
# One visible device (the interposer then never asks which is current).
run one-device-limits 0 -- "${base[@]}" "${lim[@]}" FAKE_CUDA_DEVICES=1 "$PROBE_DL" procaddr limits

# Context overhead (100Mi a context) and pools charged by their reservation
# (the fake reserves in 32Mi steps), three ways each.
ctx=(GPUFRAC_GPU_MEMORY=1Gi GPUFRAC_CONTEXT_OVERHEAD=100Mi)
pool=(GPUFRAC_GPU_MEMORY=1Gi GPUFRAC_CONTEXT_OVERHEAD=0 FAKE_POOL_GRAN=33554432)
run linked-contexts   0 -- "${base[@]}" "${ctx[@]}" "$PROBE_LINKED" contexts
run dlopen-contexts   0 -- "${base[@]}" "${ctx[@]}" "$PROBE_DL" dlopen contexts
run procaddr-contexts 0 -- "${base[@]}" "${ctx[@]}" "$PROBE_DL" procaddr contexts
run linked-pools      0 -- "${base[@]}" "${pool[@]}" "$PROBE_LINKED" pools
run dlopen-pools      0 -- "${base[@]}" "${pool[@]}" "$PROBE_DL" dlopen pools
run procaddr-pools    0 -- "${base[@]}" "${pool[@]}" "$PROBE_DL" procaddr pools
# Without the interposer these checks fail.
run contexts-without-shim 1 -- LD_LIBRARY_PATH="$FAKE_DIR" "$PROBE_LINKED" contexts
run pools-without-shim    1 -- LD_LIBRARY_PATH="$FAKE_DIR" FAKE_POOL_GRAN=33554432 "$PROBE_LINKED" pools

# Limits by GPU UUID; CUDA order a,b then b,a (NVML the other way round);
# a UUID no device has is ignored with one log line.
ua=GPU-aaaaaaaa-0000-4000-8000-00000000000a ub=GPU-bbbbbbbb-0000-4000-8000-00000000000b
printf 'memory.%s = 512Mi\nmemory.%s = 256Mi\nmemory.GPU-cccccccc-0000-4000-8000-00000000000c = 1Gi\ncontext_overhead = 0\nregion = %s/u1\n' \
  "${ub^^}" "$ua" "$tmp" >"$tmp/u1.conf"
sed "s#$tmp/u1#$tmp/u2#" "$tmp/u1.conf" >"$tmp/u2.conf"
run uuid-limits     0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/u1.conf" FAKE_CUDA_UUIDS="$ua,$ub" FAKE_NVML_REVERSE=1 \
    "$PROBE_DL" uuid dlopen "$tmp/u1" 256 512
[ "$(grep -c 'memory.GPU-cccccccc-0000-4000-8000-00000000000c: no visible device has this UUID; ignored' "$tmp/out")" = 1 ] &&
  { echo "ok   uuid-unknown-logged-once"; pass=$((pass + 1)); } ||
  { echo "FAIL uuid-unknown-logged-once"; sed 's/^/  | /' "$tmp/out"; fail=$((fail + 1)); }
run uuid-other-order 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/u2.conf" FAKE_CUDA_UUIDS="$ub,$ua" FAKE_NVML_REVERSE=1 \
    "$PROBE_DL" uuid procaddr "$tmp/u2" 512 256

# NVML process lists: the container's processes from its region.
printf 'memory = 1Gi\ncontext_overhead = 0\nregion = %s/p1\n' "$tmp" >"$tmp/p1.conf"
run nvml-procs      0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/p1.conf" "$PROBE_DL" procs
run nvml-procs-without-shim 1 -- LD_LIBRARY_PATH="$FAKE_DIR" GPUFRAC_REAL_LIBCUDA="$FAKE_DIR/libcuda.so.1" \
    LD_PRELOAD="$SHIM" GPUFRAC_DISABLE=1 "$PROBE_DL" procs
# The MPS lists (v1 layout, _v2, _v3) the same way.
printf 'memory = 1Gi\ncontext_overhead = 0\nregion = %s/p2\n' "$tmp" >"$tmp/p2.conf"
run nvml-mps-procs  0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/p2.conf" "$PROBE_DL" procs mps
run nvml-mps-procs-without-shim 1 -- LD_LIBRARY_PATH="$FAKE_DIR" GPUFRAC_REAL_LIBCUDA="$FAKE_DIR/libcuda.so.1" \
    LD_PRELOAD="$SHIM" GPUFRAC_DISABLE=1 "$PROBE_DL" procs mps

# The bucket's capacity: from the devices when not configured (2 x 132 SMs
# x 32 blocks x 250/s = 2,112,000; one device of 108 x 32 = 864,000), the
# configured one otherwise, the default 1,000,000 (logged) when the driver
# cannot say.
printf 'compute = 25\nregion = %s/k1\n' "$tmp" >"$tmp/k1.conf"
run capacity-from-devices 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/k1.conf" "$PROBE_DL" capacity "$tmp/k1" 2112000 528000 0
printf 'compute = 50\nregion = %s/k2\n' "$tmp" >"$tmp/k2.conf"
run capacity-from-a100 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/k2.conf" FAKE_CUDA_DEVICES=1 FAKE_CUDA_SMS=108 \
    "$PROBE_DL" capacity "$tmp/k2" 864000 432000 0
printf 'compute = 50\ncapacity = 200000\nregion = %s/k3\n' "$tmp" >"$tmp/k3.conf"
run capacity-configured 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/k3.conf" "$PROBE_DL" capacity "$tmp/k3" 200000 100000 100000
printf 'compute = 50\nregion = %s/k4\n' "$tmp" >"$tmp/k4.conf"
run capacity-unknown 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/k4.conf" FAKE_CUDA_SMS=0 \
    "$PROBE_DL" capacity "$tmp/k4" 1000000 500000 0
grep -q "capacity: the driver does not give SMs and blocks per SM; using 1000000 blocks/s" "$tmp/out" &&
  { echo "ok   capacity-unknown-logged"; pass=$((pass + 1)); } ||
  { echo "FAIL capacity-unknown-logged"; sed 's/^/  | /' "$tmp/out"; fail=$((fail + 1)); }

# The real-GPU variant (tests/gpu/run.sh) against the fake: the model from
# the driver's attributes, here 2 x 132 x 32 x 250 at 25%.
run capacity-device 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/k1.conf" "$PROBE_DL" capacity-device "$tmp/k1" 25
grep -q "capacity 2112000 blocks/s (model 2112000), rate 528000" "$tmp/out" &&
  { echo "ok   capacity-device-values"; pass=$((pass + 1)); } ||
  { echo "FAIL capacity-device-values"; sed 's/^/  | /' "$tmp/out"; fail=$((fail + 1)); }

# Utilisation feedback, the region written as the node agent would.
printf 'compute = 30\ncapacity = 1000000\nregion = %s/f1\n' "$tmp" >"$tmp/f1.conf"
run feedback 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/f1.conf" "$PROBE_DL" feedback "$tmp/f1"

# Compute by GPU time (docs/shim.md): blocks of "spin" cost 10 us on the
# fake GPU, 10x the token of the configured capacity (1 us), so after the
# interposer has timed some launches a block must be charged about 10
# tokens (the block model charged 1).  Without timing events, or with every
# stream in capture (no event may be recorded then), launches go on and a
# block is charged exactly 1.
for t in t1 t2 t3; do printf 'compute = 99\ncapacity = 1000000\nregion = %s/%s\n' "$tmp" "$t" >"$tmp/$t.conf"; done
run cost-measured 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/t1.conf" FAKE_GPU_KERNEL_NS=spin=10000 "$PROBE_DL" costcharge "$tmp/t1" 8 13
run cost-no-events 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/t2.conf" FAKE_GPU_KERNEL_NS=spin=10000 FAKE_CUDA_NO_EVENTS=1 \
    "$PROBE_DL" costcharge "$tmp/t2" 1 1
# A grid the driver refuses whose block count wraps 64 bits: no tokens
# gained (the block model's negative charge), no wait for the wrapped one.
printf 'compute = 50\ncapacity = 1000000\nregion = %s/t4\n' "$tmp" >"$tmp/t4.conf"
run cost-absurd-grid 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/t4.conf" "$PROBE_DL" hugegrid "$tmp/t4"
run cost-in-capture 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/t3.conf" FAKE_GPU_KERNEL_NS=spin=10000 FAKE_CUDA_CAPTURING=1 \
    "$PROBE_DL" costcharge "$tmp/t3" 1 1

# The same program without the interposer sees the whole fake GPU: the
# first check (total == 1 GiB) must fail, proving the checks can fail.
run without-shim    1 -- LD_LIBRARY_PATH="$FAKE_DIR" "$PROBE_LINKED" limits

# HAMi-core's variables in the environment fallback: a drop-in for
# libvgpu.so (1024m = the probe's 1 GiB; per device; the off switch).
# (a region of its own: the default one, /tmp/gpufrac-shim.region, would be
# shared with any other run on the machine; test_shim_mem tests the default)
hami=(LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$SHIM" GPUFRAC_REAL_LIBCUDA="$FAKE_DIR/libcuda.so.1" GPUFRAC_CONTEXT_OVERHEAD=0
      CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/hami")
run hami-memory-limit 0 -- "${hami[@]}" CUDA_DEVICE_MEMORY_LIMIT=1024m "$PROBE_LINKED" limits
run hami-memory-limit-0 0 -- "${hami[@]}" CUDA_DEVICE_MEMORY_LIMIT=8g CUDA_DEVICE_MEMORY_LIMIT_0=1g "$PROBE_LINKED" limits
run hami-disable-control 1 -- "${hami[@]}" CUDA_DEVICE_MEMORY_LIMIT=1024m CUDA_DISABLE_CONTROL=true "$PROBE_LINKED" limits
run hami-bad-value 1 -- "${hami[@]}" CUDA_DEVICE_MEMORY_LIMIT=1gb "$PROBE_LINKED" limits
grep -q "CUDA_DEVICE_MEMORY_LIMIT = '1gb'" "$tmp/out" && grep -q "refusing device memory" "$tmp/out" &&
  { echo "ok   hami-bad-value-says-which"; pass=$((pass + 1)); } ||
  { echo "FAIL hami-bad-value-says-which"; sed 's/^/  | /' "$tmp/out"; fail=$((fail + 1)); }

# Off switch: pass-through even with limits configured.
run disabled        1 -- "${base[@]}" "${lim[@]}" GPUFRAC_DISABLE=1 "$PROBE_LINKED" limits

# A malformed config refuses device memory (fail closed) without crashing.
printf 'memory = lots\n' >"$tmp/bad.conf"
run bad-config-refuses 1 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/bad.conf" "$PROBE_LINKED" limits
grep -q "refusing device memory" "$tmp/out" && { echo "ok   bad-config-logs"; pass=$((pass + 1)); } ||
  { echo "FAIL bad-config-logs"; fail=$((fail + 1)); }

# Config file with a shared region.
printf 'version = 1\nmemory = 1Gi\ncontext_overhead = 0\nregion = %s/r1\n' "$tmp" >"$tmp/good.conf"
run config-file     0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/good.conf" "$PROBE_DL" dlopen limits

# A corrupt region (bad magic): refuse, log, no crash.
head -c 41984 /dev/urandom >"$tmp/corrupt"
printf 'memory = 1Gi\nregion = %s/corrupt\n' "$tmp" >"$tmp/corrupt.conf"
run corrupt-region  1 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/corrupt.conf" "$PROBE_LINKED" limits

# No real driver at all: calls fail with a CUDA error, no crash.
run no-driver       1 -- LD_PRELOAD="$SHIM" GPUFRAC_REAL_LIBCUDA=/nonexistent/libcuda.so.1 \
                           GPUFRAC_GPU_MEMORY=1Gi LD_LIBRARY_PATH="$FAKE_DIR" "$PROBE_LINKED" limits

# Threads of one process churning the same sizes on every tracked path
# (the fake hands freed addresses straight back): no phantom charge, no
# refusal while live is far under the limit.
run thread-churn    0 -- "${base[@]}" GPUFRAC_GPU_MEMORY=2Gi GPUFRAC_CONTEXT_OVERHEAD=0 "$PROBE_DL" threads 8 3

# A stream-ordered free keeps its charge until the stream reaches it (the
# fake queues frees until a synchronisation).
run free-async-stream 0 -- "${base[@]}" GPUFRAC_GPU_MEMORY=1Gi GPUFRAC_CONTEXT_OVERHEAD=0 FAKE_CUDA_STREAMS=1 \
    FAKE_POOL_GRAN=33554432 FAKE_CUDA_SHARED="$tmp/fa1" "$PROBE_DL" freeasync
# ... also when the driver cannot queue a host function (it waits for the
# stream instead).
run free-async-no-hostfn 0 -- "${base[@]}" GPUFRAC_GPU_MEMORY=1Gi GPUFRAC_CONTEXT_OVERHEAD=0 FAKE_CUDA_STREAMS=1 \
    FAKE_CUDA_NO_HOSTFN=1 FAKE_POOL_GRAN=33554432 FAKE_CUDA_SHARED="$tmp/fa2" "$PROBE_DL" freeasync

# Memory views in a loop do not run the reaper per call.
run views-no-reap 0 -- "${base[@]}" GPUFRAC_GPU_MEMORY=1Gi GPUFRAC_CONTEXT_OVERHEAD=0 "$PROBE_DL" views 100000

# The region file truncated under its mapping: no SIGBUS, refusals, one
# log line.
printf 'memory = 1Gi\ncontext_overhead = 0\ncompute = 50\ncapacity = 1000000\nregion = %s/tr\n' "$tmp" >"$tmp/tr.conf"
run region-truncated 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/tr.conf" "$PROBE_DL" shrink "$tmp/tr"
[ "$(grep -c 'region file shrank under its mapping' "$tmp/out")" = 1 ] &&
  { echo "ok   region-truncated-logged-once"; pass=$((pass + 1)); } ||
  { echo "FAIL region-truncated-logged-once"; sed 's/^/  | /' "$tmp/out"; fail=$((fail + 1)); }

run sigbus-not-ours 135 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/tr.conf" "$PROBE_DL" raise-bus
# A program that ignores SIGBUS, or handles it itself, keeps that: the
# interposer's handler passes a SIGBUS that is not the region's on as the
# program asked (before: an ignored sent SIGBUS killed the program, and one
# ignored with SA_SIGINFO set made the handler call address 1).
for how in ign ign-info handler; do
  run "sigbus-$how" 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/tr.conf" "$PROBE_DL" bus-ignored "$how"
done
# A handler given SA_RESETHAND runs once and is reset; the interposer's own
# stays, so a region truncated afterwards is still caught.
run sigbus-resethand 0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/tr.conf" "$PROBE_DL" bus-ignored resethand "$tmp/tr"

# A context that really holds 500 MiB, context_overhead 300 MiB: the
# measured cost is charged, so the true total never passes the limit.
run context-measured 0 -- "${base[@]}" GPUFRAC_GPU_MEMORY=1Gi GPUFRAC_CONTEXT_OVERHEAD=300Mi \
    FAKE_CUDA_CTX_COST=524288000 FAKE_CUDA_SHARED="$tmp/ctxdev" "$PROBE_DL" ctxtrue

# dlsym(RTLD_NEXT) keeps its meaning for other preloaded libraries: a
# getpid wrapper preloaded after the interposer finds the C library's.
run rtld-next       0 -- LD_PRELOAD="$SHIM $NEXT_WRAP" /bin/true

# A lookup is not use: dlsym(libm, cos) and lookups on the driver take no
# region slot, the first allocation does.  A driver whose constructor calls
# dlsym and cuInit from inside the interposer's setup does not hang it.
run lookups-no-slot 0 -- "${base[@]}" GPUFRAC_GPU_MEMORY=1Gi GPUFRAC_REGION="$tmp/lk" "$PROBE_DL" lookups "$tmp/lk"
# ... nor is a lookup of a hooked name on another library's handle: it
# gets that library's own function and loads neither the driver nor NVML.
run lookups-foreign 0 -- "${base[@]}" GPUFRAC_GPU_MEMORY=1Gi GPUFRAC_REGION="$tmp/lf" "$PROBE_DL" foreign "$FOREIGN_LIB" "$tmp/lf"
run setup-reentered 0 -- "${base[@]}" GPUFRAC_GPU_MEMORY=1Gi FAKE_CUDA_CTOR_DLSYM=1 timeout 20 "$PROBE_DL" reenter

# Many processes x threads on one region; SIGKILLs at random points.
printf 'memory = 1Gi\nregion = %s/r2\n' "$tmp" >"$tmp/r2.conf"
run stress          0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/r2.conf" FAKE_CUDA_SHARED="$tmp/dev2" "$PROBE_DL" stress 6 4 3 "$tmp/r2"
printf 'memory = 1Gi\nregion = %s/r3\n' "$tmp" >"$tmp/r3.conf"
run sigkill         0 -- "${base[@]}" GPUFRAC_CONFIG="$tmp/r3.conf" "$PROBE_DL" kill 40 "$tmp/r3"

# gpufrac inspect: the region after the SIGKILL scenario.
run inspect 0 -- "$GPUFRAC" inspect region "$tmp/r3"
grep -qE "dead processes reclaimed: [1-9]" "$tmp/out" && grep -q "1.00 GiB" "$tmp/out" &&
  { echo "ok   inspect-shows-reclaim"; pass=$((pass + 1)); } ||
  { echo "FAIL inspect-shows-reclaim"; sed 's/^/  | /' "$tmp/out"; fail=$((fail + 1)); }
# Read-only inspect shows a SIGKILLed process's slot as dead with its
# usage, and leaves it; --reclaim frees it and says so.
printf 'memory = 1Gi\ncontext_overhead = 0\nregion = %s/ho\n' "$tmp" >"$tmp/ho.conf"
env "${base[@]}" GPUFRAC_CONFIG="$tmp/ho.conf" "$PROBE_DL" hold >"$tmp/hold" 2>&1 &
hpid=$!
for _ in $(seq 100); do grep -q holding "$tmp/hold" && break; sleep 0.05; done
kill -9 "$hpid"; wait "$hpid" 2>/dev/null
run inspect-read-only 0 -- "$GPUFRAC" inspect region "$tmp/ho"
run inspect-still-there 0 -- "$GPUFRAC" inspect region "$tmp/ho"
grep -qE "^0 +[0-9]+ +dead +0 +100.00 MiB" "$tmp/out" && grep -q "reclaimed: 0" "$tmp/out" &&
  { echo "ok   inspect-leaves-dead-slot"; pass=$((pass + 1)); } ||
  { echo "FAIL inspect-leaves-dead-slot"; sed 's/^/  | /' "$tmp/out"; fail=$((fail + 1)); }
run inspect-reclaim 0 -- "$GPUFRAC" inspect region --reclaim "$tmp/ho"
grep -q "^reclaimed 1 slots of dead processes" "$tmp/out" && ! grep -qE "^[0-9]+ +[0-9]+ +dead " "$tmp/out" &&
  grep -qE "^0 +(-|GPU-[0-9a-f-]+) +1.00 GiB +0 B" "$tmp/out" &&
  { echo "ok   inspect-reclaim-frees"; pass=$((pass + 1)); } ||
  { echo "FAIL inspect-reclaim-frees"; sed 's/^/  | /' "$tmp/out"; fail=$((fail + 1)); }
run inspect-help 0 -- "$GPUFRAC" inspect --help
grep -q -- "--reclaim" "$tmp/out" && grep -q "Read-only" "$tmp/out" &&
  { echo "ok   inspect-help-says-both"; pass=$((pass + 1)); } ||
  { echo "FAIL inspect-help-says-both"; fail=$((fail + 1)); }
run inspect-bad 1 -- "$GPUFRAC" inspect region "$tmp/corrupt"
grep -q "bad magic" "$tmp/out" && { echo "ok   inspect-bad-says-why"; pass=$((pass + 1)); } ||
  { echo "FAIL inspect-bad-says-why"; fail=$((fail + 1)); }

# gpufrac run: the same limits without Kubernetes.
run gpufrac-run 0 -- GPUFRAC_SHIM="$SHIM" GPUFRAC_CONTEXT_OVERHEAD=0 GPUFRAC_REAL_LIBCUDA="$FAKE_DIR/libcuda.so.1" \
    LD_LIBRARY_PATH="$FAKE_DIR" "$GPUFRAC" run --gpu-memory 1Gi -- "$PROBE_LINKED" limits
run gpufrac-run-exit 3 -- GPUFRAC_SHIM="$SHIM" "$GPUFRAC" run --gpu-compute 50 -- sh -c 'exit 3'
run gpufrac-run-bad 2 -- GPUFRAC_SHIM="$SHIM" "$GPUFRAC" run --gpu-compute 101 -- true

# The node agent's file beats the environment: with it present, neither
# GPUFRAC_DISABLE nor another GPUFRAC_CONFIG nor GPUFRAC_GPU_MEMORY lifts the
# 1 GiB limit.
mkdir -p "$(dirname "$SYSTEM_CONF")"
printf 'memory = 1Gi\ncontext_overhead = 0\nlibcuda = %s/libcuda.so.1\n' "$FAKE_DIR" >"$SYSTEM_CONF"
printf 'memory = 64Gi\n' >"$tmp/loose.conf"
run system-config-wins 0 -- LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$SHIM_LOCKED" \
    GPUFRAC_DISABLE=1 GPUFRAC_CONFIG="$tmp/loose.conf" GPUFRAC_GPU_MEMORY=64Gi "$PROBE_LINKED" limits
# ... nor HAMi-core's variables.
run system-config-beats-hami 0 -- LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$SHIM_LOCKED" \
    CUDA_DISABLE_CONTROL=true CUDA_DEVICE_MEMORY_LIMIT=64g CUDA_DEVICE_MEMORY_LIMIT_0=64g "$PROBE_LINKED" limits
rm -f "$SYSTEM_CONF"

# Compute: two containers at 30% and 70% of the same capacity, at once.
printf 'compute = 30\ncapacity = 200000\nregion = %s/c30\n' "$tmp" >"$tmp/c30.conf"
printf 'compute = 70\ncapacity = 200000\nregion = %s/c70\n' "$tmp" >"$tmp/c70.conf"
env "${base[@]}" GPUFRAC_CONFIG="$tmp/c30.conf" "$PROBE_DL" launches 3 >"$tmp/l30" 2>&1 &
env "${base[@]}" GPUFRAC_CONFIG="$tmp/c70.conf" "$PROBE_DL" launches 3 >"$tmp/l70" 2>&1
wait
n30=$(awk '/^launches/{print $2}' "$tmp/l30"); n70=$(awk '/^launches/{print $2}' "$tmp/l70")
if [ -n "$n30" ] && [ -n "$n70" ] && python3 - "$n30" "$n70" <<'PY'
import sys
a, b = int(sys.argv[1]), int(sys.argv[2])
r = b / a
print(f"launch throughput 70%/30% = {b}/{a} = {r:.3f} (ideal {70/30:.3f})")
sys.exit(0 if abs(r / (70 / 30) - 1) <= 0.10 else 1)
PY
then echo "ok   compute-ratio"; pass=$((pass + 1)); else echo "FAIL compute-ratio ($n30, $n70)"; fail=$((fail + 1)); fi

# Per-GPU compute (a claim of two GPUs at 50 and 10 cores, issue 27): one
# container, one region, each GPU its own bucket; a process saturating
# each GPU gets its GPU's share (before: the smallest, 10, for both).
u0=GPU-fa4e0000-0000-4000-8000-000000000000 u1=GPU-fa4e0000-0000-4000-8000-000000000001
printf 'capacity = 200000\ncompute.%s = 50\ncompute.%s = 10\nregion = %s/pg\n' "$u0" "$u1" "$tmp" >"$tmp/pg.conf"
env "${base[@]}" GPUFRAC_CONFIG="$tmp/pg.conf" CUDA_VISIBLE_DEVICES=0 "$PROBE_DL" launches 3 >"$tmp/g50" 2>&1 &
env "${base[@]}" GPUFRAC_CONFIG="$tmp/pg.conf" CUDA_VISIBLE_DEVICES=1 "$PROBE_DL" launches 3 >"$tmp/g10" 2>&1
wait
n50=$(awk '/^launches/{print $2}' "$tmp/g50"); n10=$(awk '/^launches/{print $2}' "$tmp/g10")
if [ -n "$n50" ] && [ -n "$n10" ] && python3 - "$n50" "$n10" <<'PY'
import sys
a, b = int(sys.argv[1]), int(sys.argv[2])
# Both ran the same 2-3 s (the probe's clock is whole seconds): their
# ratio is the shares' within 10%, as compute-ratio's; the 10% GPU at no
# more than 10% of 200,000 blocks/s (10-block launches, 3 s and a burst).
ok = abs(a / b / 5 - 1) <= 0.10 and b <= 2000 * 3 + 200
print(f"per-GPU launches: 50% GPU {a}, 10% GPU {b}, ratio {a / b:.2f} (ideal 5)")
sys.exit(0 if ok else 1)
PY
then echo "ok   compute-per-gpu"; pass=$((pass + 1)); else echo "FAIL compute-per-gpu ($n50, $n10)"; sed 's/^/  | /' "$tmp/g50" "$tmp/g10" | head -5; fail=$((fail + 1)); fi
# The same in one process: a thread on each GPU's context (with contexts,
# launches are charged by measured GPU time, so only the ratio is fixed).
printf 'capacity = 200000\ncompute.%s = 50\ncompute.%s = 10\nregion = %s/pg2\n' "$u0" "$u1" "$tmp" >"$tmp/pg2.conf"
env "${base[@]}" GPUFRAC_CONFIG="$tmp/pg2.conf" "$PROBE_DL" launches2 3 >"$tmp/g2" 2>&1
read -r _ n50 n10 < <(grep '^launches' "$tmp/g2")
if [ -n "$n50" ] && [ -n "$n10" ] && [ "$n10" -gt 0 ] && python3 -c "
import sys; a, b = $n50, $n10
print(f'one process, two GPUs: 50% GPU {a}, 10% GPU {b}, ratio {a / b:.2f} (ideal 5)')
sys.exit(0 if abs(a / b / 5 - 1) <= 0.10 else 1)"
then echo "ok   compute-per-gpu-threads"; pass=$((pass + 1)); else echo "FAIL compute-per-gpu-threads"; sed 's/^/  | /' "$tmp/g2" | head -5; fail=$((fail + 1)); fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
