#!/bin/sh
# gpufrac plan on a generated cluster SCALE times the bundled example
# (scripts/plan-example --scale; docs/benchmarks.md): wall time and peak
# resident memory and CPU time (user + system: the machine may be shared,
# wall time then overstates) of RUNS runs of the whole plan (read, analyse, what-if
# under whole/fgd/gpufrac, JSON to /dev/null), of the same without the
# what-if, and with the cheapest fleet of data/plan-example/node-types.json;
# medians printed.
#
#   bench/plan.sh BUILD_DIR [SCALE] [RUNS]
set -eu
build=${1:?usage: bench/plan.sh BUILD_DIR [SCALE] [RUNS]}
scale=${2:-10}
runs=${3:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
cmake --build "$build" -j2 --target gpufrac >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$here/scripts/plan-example" --scale "$scale" --out "$tmp"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
types="--node-types $here/data/plan-example/node-types.json"
for mode in "" --no-whatif "$types"; do
  : >"$tmp/wall"
  : >"$tmp/cpu"
  : >"$tmp/rss"
  i=0
  while [ "$i" -lt "$runs" ]; do
    /usr/bin/time -f '%e %U %S %M' -o "$tmp/t" "$build/gpufrac" plan \
      --snapshot "$tmp/snapshot.json" --usage "$tmp/usage.json" \
      --format json $mode >/dev/null
    read -r wall user sys rss <"$tmp/t"
    echo "$wall" >>"$tmp/wall"
    echo "$user $sys" | awk '{print $1 + $2}' >>"$tmp/cpu"
    echo "$rss" >>"$tmp/rss"
    i=$((i + 1))
  done
  echo "plan ${mode:-(with what-if)}: median CPU $(median <"$tmp/cpu") s," \
    "wall $(median <"$tmp/wall") s, max RSS $(median <"$tmp/rss") KiB" \
    "($runs runs)"
done
