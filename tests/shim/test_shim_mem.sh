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

# ---- GPUs by index with CUDA_VISIBLE_DEVICES, and one budget (items 6, 10)
# The machine (the fake) has GPUs ua (number 0) and ub (number 1); NVML
# numbers them so whatever CUDA_VISIBLE_DEVICES says.  memory.<i> is the
# container's GPU i (its CUDA index without CUDA_VISIBLE_DEVICES).
ua=GPU-aaaaaaaa-0000-4000-8000-00000000000a ub=GPU-bbbbbbbb-0000-4000-8000-00000000000b
# views FILE ua_total ua_used ub_total ub_used: every view line of FILE
# says exactly these numbers (MiB) for its GPU.
views() {
  python3 - "$1" "$ua" "$2" "$3" "$ub" "$4" "$5" <<'PY'
import sys, re
f, want = sys.argv[1], {sys.argv[2]: (int(sys.argv[3]), int(sys.argv[4])),
                        sys.argv[5]: (int(sys.argv[6]), int(sys.argv[7]))}
bad = n = 0
for line in open(f):
    m = re.match(r"view (\S+) (\S+)(?: total=(\d+))? used=(\d+)", line)
    if not m:
        continue
    n += 1
    u, src, tot, used = m.group(1), m.group(2), m.group(3), int(m.group(4))
    wt, wu = want.get(u, (None, None))
    if wt is None or used != wu or (tot is not None and int(tot) != wt):
        print(f"  disagrees: {line.strip()} (want total={wt} used={wu})"); bad += 1
print(f"  {n} views checked, {bad} disagree")
sys.exit(1 if bad or n == 0 else 0)
PY
}
check_views() { # name file ua_total ua_used ub_total ub_used
  local name=$1; shift
  if views "$@" >"$tmp/vcheck" 2>&1; then echo "ok   $name"; pass=$((pass + 1))
  else echo "FAIL $name"; sed 's/^/  | /' "$tmp/vcheck" "$1" | tail -30; fail=$((fail + 1)); fi
}
dev=(FAKE_CUDA_UUIDS="$ua,$ub" LD_LIBRARY_PATH="$FAKE_DIR")

# Reordered: CUDA_VISIBLE_DEVICES=1,0 with HAMi's per-index limits (_0 is
# ua's 256 MiB, _1 ub's 512 MiB): each GPU filled to its own limit, and
# NVML's view of each GPU shows that GPU's numbers.
run reorder-hami 0 -- "${base[@]}" "${dev[@]}" CUDA_VISIBLE_DEVICES=1,0 CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/ro1" \
    CUDA_DEVICE_MEMORY_LIMIT_0=256m CUDA_DEVICE_MEMORY_LIMIT_1=512m "$PROBE_MEM" report r fill -
cp "$tmp/out" "$tmp/ro1.out"
grep -q "^filled $ua 256$" "$tmp/ro1.out" && grep -q "^filled $ub 512$" "$tmp/ro1.out" &&
  { echo "ok   reorder-hami-limits"; pass=$((pass + 1)); } ||
  { echo "FAIL reorder-hami-limits"; sed 's/^/  | /' "$tmp/ro1.out"; fail=$((fail + 1)); }
check_views reorder-hami-views "$tmp/ro1.out" 256 256 512 512
# ... the same with the config's memory.0 / memory.1.
printf 'memory.0 = 256Mi\nmemory.1 = 512Mi\ncontext_overhead = 0\nregion = %s/ro2\n' "$tmp" >"$tmp/ro2.conf"
run reorder-config 0 -- "${base[@]}" "${dev[@]}" CUDA_VISIBLE_DEVICES=1,0 GPUFRAC_CONFIG="$tmp/ro2.conf" \
    "$PROBE_MEM" report r fill -
cp "$tmp/out" "$tmp/ro2.out"
grep -q "^filled $ua 256$" "$tmp/ro2.out" && grep -q "^filled $ub 512$" "$tmp/ro2.out" &&
  { echo "ok   reorder-config-limits"; pass=$((pass + 1)); } ||
  { echo "FAIL reorder-config-limits"; sed 's/^/  | /' "$tmp/ro2.out"; fail=$((fail + 1)); }
check_views reorder-config-views "$tmp/ro2.out" 256 256 512 512

# CUDA_VISIBLE_DEVICES naming a GPU by UUID (the node agent's CDI does):
# the container's index of ub is NVML's, 1, so _1's 512 MiB is its limit.
run uuid-visible-hami 0 -- "${base[@]}" "${dev[@]}" CUDA_VISIBLE_DEVICES="$ub" CUDA_DEVICE_MEMORY_SHARED_CACHE="$tmp/uv" \
    CUDA_DEVICE_MEMORY_LIMIT_0=256m CUDA_DEVICE_MEMORY_LIMIT_1=512m "$PROBE_MEM" report u fill -
grep -q "^filled $ub 512$" "$tmp/out" && [ "$(grep -c '^filled' "$tmp/out")" = 1 ] &&
  { echo "ok   uuid-visible-hami-limit"; pass=$((pass + 1)); } ||
  { echo "FAIL uuid-visible-hami-limit"; sed 's/^/  | /' "$tmp/out"; fail=$((fail + 1)); }

# Ranks of one container, each pinned to its GPU (CUDA_VISIBLE_DEVICES=
# <rank>), each GPU with its own share (memory.0 = 512Mi for ua, memory.1
# = 768Mi for ub): rank 0 holds 128 MiB on ua, rank 1 all its 768 MiB on
# ub (summed on one GPU before: refused).  Then every process of the
# container (both ranks, and processes seeing ub only, both GPUs, both
# reordered) agrees on every view of every GPU: cuMemGetInfo_v2,
# nvmlDeviceGetMemoryInfo v1 and v2, the process lists' sums.
printf 'memory.0 = 512Mi\nmemory.1 = 768Mi\ncontext_overhead = 0\nregion = %s/rk\n' "$tmp" >"$tmp/rk.conf"
mkdir -p "$tmp/sync"
rk=("${base[@]}" "${dev[@]}" GPUFRAC_CONFIG="$tmp/rk.conf")
env "${rk[@]}" CUDA_VISIBLE_DEVICES=0 "$PROBE_MEM" report rank0 128 "$tmp/sync" >"$tmp/rank0" 2>&1 &
p0=$!
env "${rk[@]}" CUDA_VISIBLE_DEVICES=1 "$PROBE_MEM" report rank1 768 "$tmp/sync" >"$tmp/rank1" 2>&1 &
p1=$!
for _ in $(seq 300); do [ -e "$tmp/sync/ready-rank0" ] && [ -e "$tmp/sync/ready-rank1" ] && break; sleep 0.02; done
touch "$tmp/sync/go"
for _ in $(seq 300); do [ -e "$tmp/sync/done-rank0" ] && [ -e "$tmp/sync/done-rank1" ] && break; sleep 0.02; done
for v in 1 0,1 1,0; do
  env "${rk[@]}" CUDA_VISIBLE_DEVICES=$v "$PROBE_MEM" report "see$v" 0 - >>"$tmp/others" 2>&1
done
touch "$tmp/sync/end"; wait "$p0" "$p1"
grep -q '^ok   rank1: 768 MiB' "$tmp/rank1" && grep -q '^ok   rank0: 128 MiB' "$tmp/rank0" &&
  { echo "ok   ranks-per-gpu"; pass=$((pass + 1)); } ||
  { echo "FAIL ranks-per-gpu"; sed 's/^/  | /' "$tmp/rank0" "$tmp/rank1"; fail=$((fail + 1)); }
cat "$tmp/rank0" "$tmp/rank1" "$tmp/others" >"$tmp/all-views"
check_views one-budget-all-processes "$tmp/all-views" 512 128 768 768
# The budget, for engines that read one: a file beside the region, one
# line per GPU (UUID, limit in bytes, context charge in bytes).
grep -qx "$ua 536870912 0" "$tmp/rk.budget" && grep -qx "$ub 805306368 0" "$tmp/rk.budget" &&
  [ "$(grep -vc '^#' "$tmp/rk.budget")" = 2 ] &&
  { echo "ok   budget-file"; pass=$((pass + 1)); } ||
  { echo "FAIL budget-file"; sed 's/^/  | /' "$tmp/rk.budget"; fail=$((fail + 1)); }
# ... also for GPUs the config names by UUID (the node agent's way).
printf 'memory.%s = 1Gi\ncontext_overhead = 100Mi\nregion = %s/nb\n' "$ub" "$tmp" >"$tmp/nb.conf"
run budget-named 0 -- "${base[@]}" "${dev[@]}" GPUFRAC_CONFIG="$tmp/nb.conf" "$PROBE_MEM" report nb 0 -
grep -qx "$ub 1073741824 104857600" "$tmp/nb.budget" &&
  { echo "ok   budget-file-named"; pass=$((pass + 1)); } ||
  { echo "FAIL budget-file-named"; sed 's/^/  | /' "$tmp/nb.budget"; fail=$((fail + 1)); }

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
