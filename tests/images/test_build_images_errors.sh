#!/bin/bash
# scripts/build-images and the arm64 cross build refusing what they cannot
# do with a message that says what and how to fix it: an empty --arch list,
# and no aarch64-linux-gnu-gcc on PATH (crossbuild-essential-arm64 not
# installed).  Needs no build: the script stops before reading a binary.
set -u
root=${ROOT:?ROOT: the source tree}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# expect_refusal ARCH MESSAGE: build-images --arch ARCH exits 1 saying MESSAGE
expect_refusal() {
  local rc=0
  "$root/scripts/build-images" --arch "$1" --out "$tmp/out" 2>"$tmp/err" >/dev/null || rc=$?
  [ "$rc" = 1 ] || bad "--arch '$1': exit $rc, expected 1"
  grep -qF -- "$2" "$tmp/err" || bad "--arch '$1': stderr lacks '$2': $(cat "$tmp/err")"
  ! grep -q 'unbound variable' "$tmp/err" || bad "--arch '$1': shell error: $(cat "$tmp/err")"
  [ ! -e "$tmp/out" ] || bad "--arch '$1': wrote $tmp/out"
}
expect_refusal '' 'build-images: --arch: no architecture'
expect_refusal ',' 'build-images: --arch: no architecture'
expect_refusal 'bogus' "build-images: --arch: 'bogus' is neither"

# --version is the tag a registry must take (Docker's tag grammar): one with
# ':' or a space is refused by build-images itself, before umoci runs.
expect_version_refusal() {
  local rc=0
  "$root/scripts/build-images" --arch amd64 --version "$1" --out "$tmp/out" 2>"$tmp/err" >/dev/null || rc=$?
  [ "$rc" = 2 ] || bad "--version '$1': exit $rc, expected 2"
  grep -qF -- "build-images: --version '$1' is not an image tag" "$tmp/err" ||
    bad "--version '$1': stderr: $(cat "$tmp/err")"
  [ ! -e "$tmp/out" ] || bad "--version '$1': wrote $tmp/out"
}
expect_version_refusal 'v1:2'
expect_version_refusal '1.0 beta'
expect_version_refusal '.1'

# An option given last without its value is a usage error that names it.
for opt in --arch --out --version --only --gpufrac; do
  rc=0
  "$root/scripts/build-images" "$opt" 2>"$tmp/err" >/dev/null || rc=$?
  [ "$rc" = 2 ] || bad "$opt without a value: exit $rc, expected 2"
  grep -qF -- "build-images: $opt needs a value" "$tmp/err" ||
    bad "$opt without a value: stderr: $(cat "$tmp/err")"
done

# The cross toolchain missing: PATH has every program of /usr/bin and
# /usr/local/bin except aarch64-linux-gnu-*.
mkdir "$tmp/bin"
for f in /usr/local/bin/* /usr/bin/*; do
  b=${f##*/}
  case "$b" in aarch64-linux-gnu-*) ;; *) ln -sf "$f" "$tmp/bin/$b" ;; esac
done
rc=0
PATH=$tmp/bin cmake -S "$root" -B "$tmp/arm64" --toolchain "$root/cmake/toolchain-aarch64.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DGF_TESTS=OFF >"$tmp/cmake.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || bad "cmake configured arm64 without aarch64-linux-gnu-gcc"
for want in 'aarch64-linux-gnu-gcc' 'crossbuild-essential-arm64' 'scripts/install-deps' \
            'scripts/build-images --arch amd64'; do
  grep -qF -- "$want" "$tmp/cmake.log" || bad "no cross compiler: cmake's error lacks '$want'"
done
[ "$fail" = 0 ] && echo "test_build_images_errors: ok"
[ "$fail" = 0 ] && [ "$rc" != 0 ] && sed -n '/CMake Error/,/^$/p' "$tmp/cmake.log" | head -8
exit "$fail"
