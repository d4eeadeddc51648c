#!/bin/sh
# scripts/placement-bound on workloads small enough to bound by hand.
set -eu
bound="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
hdr="position,pod,num_gpu,gpu_milli,cpu_milli,arrived_pct"

# Two GPUs.  Shares 600, 600, 800 arrive (30%, 60%, 100% of capacity).
# No two fit on one GPU, so at most two are held: 800 + 600 = 1400 of
# 2000, 30% unallocated.  If both 600s must be held (no drop before 60%),
# the 800 has nowhere to go: 1200 held, 40% unallocated.
printf '%s\n0,a,1,600,1000,30\n1,b,1,600,1000,60\n2,c,1,800,1000,100\n' \
  "$hdr" >"$dir/arrivals-x-1.csv"
# Two GPUs, three 600s by 90%: holding all three is impossible.
printf '%s\n0,a,1,600,1000,30\n1,b,1,600,1000,60\n2,c,1,600,1000,90\n' \
  "$hdr" >"$dir/arrivals-y-1.csv"
# Four GPUs: a 2-GPU pod (50%), 470, 470, 320, 650 (3910 milli, 97.75%):
# everything fits as {1000}, {1000}, {470, 470}, {650, 320}; 90 milli of
# 4000, 2.25%, is left whatever must be placed.
printf '%s\n0,a,2,1000,1000,50\n1,b,1,470,0,61.75\n2,c,1,470,0,73.5\n3,d,1,320,0,81.5\n4,e,1,650,0,97.75\n' \
  "$hdr" >"$dir/arrivals-z-1.csv"

out=$("$bound" --prefix 60,90 "$dir/arrivals-x-1.csv" "$dir/arrivals-y-1.csv" \
  "$dir/arrivals-z-1.csv")
echo "$out"
line() { echo "$out" | awk -v w="$1" '$1 == w { $1 = ""; print substr($0, 2) }'; }
test "$(line x-1)" = "30.000 40.000 40.000" || { echo "x-1 wrong"; exit 1; }
test "$(line y-1)" = "40.000 40.000 infeasible" || { echo "y-1 wrong"; exit 1; }
test "$(line z-1)" = "2.250 2.250 2.250" || { echo "z-1 wrong"; exit 1; }
test "$(line mean)" = "24.083 27.417 n/a" || { echo "mean wrong"; exit 1; }

# Bad input: says which file and line.
printf '%s\n0,a,1,abc,1000,30\n' "$hdr" >"$dir/arrivals-bad-1.csv"
if "$bound" "$dir/arrivals-bad-1.csv" 2>"$dir/err"; then
  echo "bad input accepted"
  exit 1
fi
grep -q "arrivals-bad-1.csv: line 2" "$dir/err" || { cat "$dir/err"; exit 1; }
# A missing file and a bad --prefix say so, without a traceback.
if "$bound" "$dir/nosuch.csv" 2>"$dir/err"; then exit 1; fi
grep -q "nosuch.csv: No such file" "$dir/err" || { cat "$dir/err"; exit 1; }
if "$bound" --prefix 9x "$dir/arrivals-x-1.csv" 2>"$dir/err"; then exit 1; fi
grep -q "prefix '9x'" "$dir/err" || { cat "$dir/err"; exit 1; }
echo ok
