#!/usr/bin/env bash
# scripts/compare-reference on small hand-made inputs (tests/cli/compare-reference/):
# fgd-published.json holds the published FGD ten-seed mean and sample std of
# every trace, so it must pass; each case below changes one thing in it and
# must give the exit status named (0 within tolerance, 1 outside, 2 usage or
# input error, on one line naming the file and the trace or field).  Fast: no
# simulation.
set -u
: "${SCRIPTS:?}"
here=$(cd "$(dirname "$0")" && pwd)/compare-reference
base=$here/fgd-published.json
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pass=0 fail=0

# mk NAME PYTHON: $dir/NAME.json from the base with PYTHON applied to d (the
# document) and r (trace -> its fgd row).
mk() {
  python3 - "$base" "$dir/$1.json" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = {s["trace"]: s for s in d["summary"] if s["policy"] == "fgd"}
exec(sys.argv[3])
with open(sys.argv[2], "w") as f:
    f.write(json.dumps(d))
PY
}

# expect CODE PATTERN ARGS...: the script exits CODE and its output (stdout
# and stderr) matches the grep -E PATTERN; for CODE 2, stderr is one line
# with no traceback, at most 400 characters.
expect() {
  local code=$1 pat=$2 got
  shift 2
  "$SCRIPTS/compare-reference" "$@" >"$dir/out" 2>"$dir/err"
  got=$?
  local why=""
  [ "$got" = "$code" ] || why="exit $got, want $code"
  grep -Eq -- "$pat" "$dir/out" "$dir/err" || why="$why; no /$pat/"
  if [ "$code" = 2 ]; then
    [ "$(wc -l <"$dir/err")" = 1 ] || why="$why; stderr not one line"
    grep -q Traceback "$dir/err" && why="$why; traceback"
    [ "$(wc -c <"$dir/err")" -le 400 ] || why="$why; message over 400 chars"
  fi
  if [ -z "$why" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: compare-reference $*: $why"
    sed 's/^/  out: /' "$dir/out" | tail -n 5
    sed 's/^/  err: /' "$dir/err" | tail -n 5
  fi
}

# The published figures themselves pass, and say what was compared (D6).
expect 0 "17 of 17 traces within tolerance" "$base" --fgd --check
expect 0 "compared: ours seeds 42-51, inflate 1.3; published seeds 42-51" "$base" --fgd --check

# D7: options.
expect 2 "unrecognized arguments: --chek" "$base" --fgd --chek
expect 0 "usage" --help
expect 2 "usage" # no file
expect 2 "unknown trace" "$base" --fgd --traces cpu999

# D1: every published trace must be there, unless --traces names a subset.
mk missing 'd["summary"] = [s for s in d["summary"] if s["trace"] not in ("cpu250", "multigpu50")]'
expect 2 "missing 2 of 17: cpu250, multigpu50" "$dir/missing.json" --fgd --check
expect 2 "missing 2 of 17: cpu250, multigpu50" "$dir/missing.json" --fgd
expect 0 "15 of 15 traces within tolerance" "$dir/missing.json" --fgd --check \
  --traces "$(python3 -c 'import json,sys; print(",".join(s["trace"] for s in json.load(open(sys.argv[1]))["summary"] if s["policy"]=="fgd"))' "$dir/missing.json")"
expect 2 "missing.*fgd/cpu250" "$dir/missing.json" --check
expect 0 "1 of 1 within tolerance" "$dir/missing.json" --check --traces default

# D2: unknown or odd trace names, duplicated rows.
mk unknown 'd["summary"].append(dict(r["default"], trace="cpu999"))'
expect 2 "unknown trace.*cpu999" "$dir/unknown.json" --fgd --check
mk odd 'd["summary"].append(dict(r["default"], trace="x\ny\u0007"))'
expect 2 'unknown trace.*"x\\ny\\u0007"' "$dir/odd.json" --fgd --check
mk dup 'd["summary"].append(dict(r["cpu250"], unallocated_at_100=6.9))'
expect 2 "duplicated row.*fgd/cpu250" "$dir/dup.json" --fgd --check

# D3: unreadable input.
expect 2 "empty.json: empty file" "$here/empty.json" --fgd --check
expect 2 "truncated.json: not JSON" "$here/truncated.json" --fgd --check
expect 2 "nonexistent.json: cannot read" "$dir/nonexistent.json" --fgd --check
expect 2 "list.json: top level is a list" "$here/list.json" --fgd --check
expect 2 "no-summary.json: no \"summary\"" "$here/no-summary.json" --check
mk string 'r["gpuspec10"]["unallocated_at_100"] = "5.3"'
expect 2 'string.json: trace "gpuspec10".*unallocated_at_100 is str' "$dir/string.json" --fgd --check
mk null 'r["gpuspec10"]["unallocated_at_100_std"] = None'
expect 2 'null.json: trace "gpuspec10".*unallocated_at_100_std is null' "$dir/null.json" --fgd --check
mk nomean 'del r["cpu100"]["unallocated_at_100"]'
expect 2 'nomean.json: trace "cpu100".*no field unallocated_at_100$' "$dir/nomean.json" --fgd --check
mk nostd 'del r["cpu100"]["unallocated_at_100_std"]'
expect 2 'nostd.json: trace "cpu100".*no field unallocated_at_100_std' "$dir/nostd.json" --fgd --check
mk rowlist 'd["summary"].append([1, 2])'
expect 2 'rowlist.json: summary\[18\]' "$dir/rowlist.json" --fgd --check

# D4: numbers out of their domain.
mk negstd 'r["cpu200"]["unallocated_at_100_std"] = -0.1'
expect 2 'trace "cpu200".*unallocated_at_100_std -0.1 out of range' "$dir/negstd.json" --fgd --check
mk negmean 'r["cpu200"]["unallocated_at_100"] = -1'
expect 2 'trace "cpu200".*unallocated_at_100 -1 out of range' "$dir/negmean.json" --fgd --check
mk over 'r["cpu200"]["unallocated_at_100"] = 100.5'
expect 2 'trace "cpu200".*unallocated_at_100 100.5 out of range' "$dir/over.json" --fgd --check
mk nan 'r["cpu200"]["unallocated_at_100"] = float("nan")'
expect 2 'trace "cpu200".*unallocated_at_100 is not a finite number' "$dir/nan.json" --fgd --check
mk inf 'r["cpu200"]["unallocated_at_100"] = float("inf")'
expect 2 'trace "cpu200".*unallocated_at_100 is not a finite number' "$dir/inf.json" --fgd --check
mk huge 'r["cpu200"]["unallocated_at_100"] = 10**300'
expect 2 'trace "cpu200".*unallocated_at_100 out of range' "$dir/huge.json" --fgd --check
mk noseeds 'r["cpu200"]["seeds"] = 1'
expect 2 'trace "cpu200".*seeds' "$dir/noseeds.json" --fgd --check

# D5: the tolerance does not widen with our own spread, and a spread over
# four times the published one is itself a departure.
mk wide 'r["cpu250"].update(unallocated_at_100=7.30, unallocated_at_100_std=0.60)'
expect 1 "outside: cpu250 \+0.50 \(tolerance 0.46\)" "$dir/wide.json" --fgd --check
expect 0 "outside: cpu250" "$dir/wide.json" --fgd # without --check: reported, exit 0
mk spread 'r["gpushare40"]["unallocated_at_100_std"] = 0.31'
expect 1 "outside: gpushare40 std 0.31 \(over 4 x published 0.07\)" "$dir/spread.json" --fgd --check
mk spreadok 'r["gpushare40"]["unallocated_at_100_std"] = 0.29'
expect 0 "17 of 17" "$dir/spreadok.json" --fgd --check
# Two-sided, and a 0.5-point shift is outside on every trace.
for t in $(python3 -c 'import json,sys; print(" ".join(s["trace"] for s in json.load(open(sys.argv[1]))["summary"] if s["policy"]=="fgd"))' "$base"); do
  for sh in 0.5 -0.5; do
    mk "shift-$t$sh" "r['$t']['unallocated_at_100'] += $sh"
    expect 1 "outside: $t " "$dir/shift-$t$sh.json" --fgd --check
  done
done

# D6: other seeds or inflation are refused unless --any-seeds, and named.
mk seeds 'd["seeds"] = "100-109"'
expect 2 "seeds.json: seeds 100-109 are not the published 42-51" "$dir/seeds.json" --fgd --check
expect 0 "compared: ours seeds 100-109.*different seeds" "$dir/seeds.json" --fgd --check --any-seeds
mk seedlist 'd["seeds"] = "42,43,44-51"'
expect 0 "compared: ours seeds 42,43,44-51" "$dir/seedlist.json" --fgd --check
mk inflate 'd["inflate"] = 1.0'
expect 2 "inflate 1.0, the published runs used 1.3" "$dir/inflate.json" --fgd --check
mk noseedfield 'del d["seeds"]'
expect 2 "top-level \"seeds\" missing" "$dir/noseedfield.json" --fgd --check

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
