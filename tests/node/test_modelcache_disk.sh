#!/bin/sh
# The weight cache and its disk (issue 28 item 4): on a 60 MiB filesystem
# (a tmpfs in a mount namespace of the test's own: needs root), a 128 MiB
# model is refused before a byte is written, by the budget that defaults to
# half the filesystem and, with a budget that would let it, by the free
# space check (a tenth of the filesystem is kept free); a model that fits
# is fetched.
#
# Usage: test_modelcache_disk.sh GPUFRAC
set -eu
GPUFRAC=$1
if [ "$(id -u)" != 0 ]; then
  echo "test_modelcache_disk: needs root (mounts a tmpfs in its own mount namespace)" >&2
  exit 1
fi
work=$(mktemp -d /tmp/gf_mc_disk.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/big" "$work/small" "$work/fs"
head -c $((128 << 20)) /dev/urandom > "$work/big/w.bin"
head -c $((8 << 20)) /dev/urandom > "$work/small/w.bin"
for m in big small; do
  "$GPUFRAC" cache manifest "$work/$m" > "$work/$m.manifest" 2> "$work/$m.digest"
  mv "$work/$m.manifest" "$work/$m/gpufrac.manifest"
done
big=$(sed -n 's/.*\(sha256:[0-9a-f]\{64\}\).*/\1/p' "$work/big.digest")
small=$(sed -n 's/.*\(sha256:[0-9a-f]\{64\}\).*/\1/p' "$work/small.digest")
[ -n "$big" ] && [ -n "$small" ] || { echo "no digests: $(cat "$work"/*.digest)"; exit 1; }
unshare --mount --propagation private sh -eu -c '
GPUFRAC=$1 work=$2 big=$3 small=$4
fail() { echo "FAIL: $*" >&2; exit 1; }
mount -n -t tmpfs -o size=60m gf-mc-disk "$work/fs"
c=$work/fs/cache
# 1. no budget: half the filesystem (30 MiB) does not hold 128 MiB
if "$GPUFRAC" cache --dir "$c" fetch "big@$big" --source "file://$work/big" \
    > "$work/o1" 2> "$work/e1"; then fail "the 128 MiB model fetched: $(cat "$work/o1")"; fi
grep -q "do not fit the cache.s budget" "$work/e1" || fail "default budget: $(cat "$work/e1")"
used=$(du -sk "$c" | cut -f1)
[ "$used" -lt 1024 ] || fail "default budget: $used KiB written"
# 2. a budget that lets it: the free space check refuses it, nothing written
if "$GPUFRAC" cache --dir "$c" --budget 1Gi fetch "big@$big" \
    --source "file://$work/big" > "$work/o2" 2> "$work/e2"; then
  fail "the 128 MiB model fetched on 60 MiB: $(cat "$work/o2")"; fi
grep -q "bytes to fetch, [0-9]* free on the filesystem of .*keeps [0-9]* free" "$work/e2" ||
  fail "free space: $(cat "$work/e2")"
used=$(du -sk "$c" | cut -f1)
[ "$used" -lt 1024 ] || fail "free space: $used KiB written"
n=$(grep -c "bytes to fetch" "$work/e2")
# 3. what fits is fetched
"$GPUFRAC" cache --dir "$c" fetch "small@$small" --source "file://$work/small" \
  > "$work/o3" 2> "$work/e3" || fail "small: $(cat "$work/e3")"
echo "test_modelcache_disk: refused: $(grep -m1 "bytes to fetch" "$work/e2")"
' sh "$GPUFRAC" "$work" "$big" "$small"
echo "test_modelcache_disk: all checks passed"
