#!/usr/bin/env bash
# scripts/check-conventions, check-long-functions and check-cycles on a
# small repository made here (a copy of the scripts beside crafted sources):
# each rule catches the case it is for, positional paths judge only their
# allowlist lines, a missing allowlist is a clear usage error, and --help
# states the rules.
set -u
: "${SCRIPTS:?path to scripts/}"
. "$(dirname "$0")/../cli/check.sh"

repo=$tmp/repo
mkdir -p "$repo/scripts" "$repo/src/lib" "$repo/src/use" "$repo/src/rd" "$repo/src/x" "$repo/src/y"
cp "$SCRIPTS/check-conventions" "$SCRIPTS/check-long-functions" "$SCRIPTS/check-cycles" "$repo/scripts/"
: >"$repo/scripts/conventions.allow"

# A function in one file hands out wrapper memory; another file, which
# allocates nothing itself, frees it with plain free().
cat >"$repo/src/lib/lib.c" <<'C'
#include "alloc.h"
int gf__lib_read(const char *path, char **out) {
  char *p = gf__malloc(16);
  if (!p)
    return 1;
  *out = p;
  return 0;
}
char *gf__lib_name(void) { return gf__strdup("x"); }
C
cat >"$repo/src/use/use.c" <<'C'
#include <stdlib.h>
int use(void) {
  char *t, *n;
  if (gf__lib_read("f", &t))
    return 1;
  free(t);
  n = gf__lib_name();
  free(n);
  char *other = getenv("X") ? realpath(".", NULL) : NULL;
  free(other);
  return 0;
}
C
# A whole-file reader written as a read() loop into a wrapper buffer.
cat >"$repo/src/rd/rd.c" <<'C'
#include <unistd.h>
#include "alloc.h"
char *slurp(int fd, size_t max) {
  char *buf = gf__malloc(max + 1);
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, max + 1 - n);
    if (r <= 0)
      break;
    n += (size_t)r;
  }
  buf[n] = 0;
  return buf;
}
C
# Long functions: one in src/x (allowlisted), one in src/y (allowlisted).
long_fn() {
  echo "int $1(int a) {"
  for i in $(seq 1 110); do echo "  a += $i;"; done
  echo "  return a;"; echo "}"
}
long_fn fx >"$repo/src/x/a.c"
long_fn fy >"$repo/src/y/b.c"
printf 'src/x/a.c fx 113\nsrc/y/b.c fy 113\n' >"$repo/scripts/long-functions.allow"
(cd "$repo" && git init -q . && git add -A) || exit 1

conv=$repo/scripts/check-conventions
longf=$repo/scripts/check-long-functions
cyc=$repo/scripts/check-cycles

# free: plain free() of memory a wrapper-returning function handed out,
# in a file that does not allocate through the wrapper itself (the out
# parameter and the return value), and not of a library's memory.
check conv-free-cross 1 '^free: src/use/use.c: 2 '  -- "$conv"
# buf: a read() loop is a whole-file reader; the message names the reader.
check conv-buf-read   1 '^buf: src/rd/rd.c: 1 '     -- "$conv"
check conv-buf-name   0 'gf__buf_read_stream'      -- "$conv" --help
check conv-help-rules 0 '_stop never frees'        -- "$conv" --help
check conv-help-free  0 'freed with gf__free'      -- "$conv" --help
# a missing allowlist: a clear error, exit 2, no traceback
check conv-allow-missing 2 'check-conventions: /nonexistent/x.allow: ' -- "$conv" --allow /nonexistent/x.allow
check long-allow-missing 2 'check-long-functions: /nonexistent/x.allow: ' -- "$longf" --allow /nonexistent/x.allow
check cyc-allow-missing  2 'check-cycles: /nonexistent/x.allow: ' -- "$cyc" --build "$repo" --allow /nonexistent/x.allow
if grep -q Traceback "$tmp/err"; then echo "FAIL traceback"; fail=$((fail + 1)); fi

# positional paths: only the allowlist lines of those paths are judged
check long-all        0 '2 over 100 lines, 2 allowlisted, 0 problem' -- "$longf"
check long-path       0 '1 over 100 lines, 1 allowlisted, 0 problem' -- "$longf" src/x
check long-path-file  0 '0 problem'                 -- "$longf" src/y/b.c
sed -i 's/fx 113/fx 120/' "$repo/scripts/long-functions.allow"
check long-path-stale 1 'src/x/a.c fx: now 113 lines' -- "$longf" src/x
check long-path-other 0 '0 problem'                 -- "$longf" src/y

# check-cycles --help: the description once, and a clean usage line
check cyc-help        0 '^usage: check-cycles '     -- "$cyc" --help
n=$(grep -c 'file-level call cycles among compiled objects' "$tmp/out")
if [ "$n" -eq 1 ] && ! grep -q '^--under PREFIX\]' "$tmp/out"; then
  echo "ok   cyc-help-once"; pass=$((pass + 1))
else
  echo "FAIL cyc-help-once: description $n times or a garbled usage line"; fail=$((fail + 1))
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
