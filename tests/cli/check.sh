# Sourced by the command-line tests (tests/cli/test_cli.sh,
# tests/plan/test_plan_cli.sh): one check per command, counted in pass and
# fail, its output kept in $tmp/out and $tmp/err.
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check NAME WANT_RC GREP_PATTERN -- command...
check() {
  local name=$1 want=$2 pat=$3
  shift 4
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL $name: exit $rc, want $want"; sed 's/^/  | /' "$tmp/err" | head -5
    fail=$((fail + 1)); return
  fi
  if [ -n "$pat" ] && ! grep -qE -- "$pat" "$tmp/out" "$tmp/err"; then
    echo "FAIL $name: output lacks /$pat/"; head -5 "$tmp/out" "$tmp/err" | sed 's/^/  | /'
    fail=$((fail + 1)); return
  fi
  echo "ok   $name"; pass=$((pass + 1))
}
