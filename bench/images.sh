#!/usr/bin/env bash
# scripts/build-images' wall time for amd64 alone and for amd64 + arm64
# (the image index), the median of RUNS builds each, and each image's size
# per architecture (compressed: manifest, config and layer as pushed; the
# layer's tar uncompressed).  The binaries must be built first:
#   cmake --build build --target gpufrac gpufrac-cuda gpufrac-arm64
# Usage: bench/images.sh [RUNS]   (default 3; docs/benchmarks.md)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-3}
b="$root/build"
out=$(mktemp -d /tmp/gpufrac-bench-images.XXXXXX)
trap 'rm -rf "$out"' EXIT
export SOURCE_DATE_EPOCH=1764547200
for arches in amd64 amd64,arm64; do
  times=()
  for _ in $(seq "$runs"); do
    rm -rf "$out/$arches"
    s=$(date +%s.%N)
    "$root/scripts/build-images" --arch "$arches" --gpufrac "$b/gpufrac" \
      --interposer "$b/src/shim/libgpufrac-cuda.so" --gpufrac-arm64 "$b/arm64/gpufrac" \
      --interposer-arm64 "$b/arm64/src/shim/libgpufrac-cuda.so" --out "$out/$arches" >/dev/null
    times+=("$(echo "$(date +%s.%N) - $s" | bc)")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk -v a="$arches" -v n="$runs" \
    '{t[NR]=$1} END {printf "build-images --arch %-12s median %.1f s of %d (%s", a, t[int((n+1)/2)], n, t[1]; for (i=2;i<=n;i++) printf ", %s", t[i]; print ")"}'
done
python3 - "$out/amd64,arm64" <<'PY'
import gzip, json, os, sys
out = sys.argv[1]
for name in sorted(os.listdir(out)):
    lay = os.path.join(out, name)
    def blob(d):
        with open(os.path.join(lay, "blobs", *d.split(":")), "rb") as f:
            return f.read()
    with open(os.path.join(lay, "index.json")) as f:
        top = json.load(f)["manifests"][0]
    for m in json.loads(blob(top["digest"]))["manifests"]:
        man = json.loads(blob(m["digest"]))
        comp = m["size"] + man["config"]["size"] + sum(x["size"] for x in man["layers"])
        tar = sum(len(gzip.decompress(blob(x["digest"]))) for x in man["layers"])
        print("%-18s %-6s %6.2f MiB compressed, layer tar %6.2f MiB" %
              (name, m["platform"]["architecture"], comp / 2**20, tar / 2**20))
PY
