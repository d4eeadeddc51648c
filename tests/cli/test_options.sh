#!/usr/bin/env bash
# The one option parser (src/cli/parse_options.c) as every subcommand uses
# it: `--key=value` and `--key value` alike, an unknown option named, a flag
# given a value refused, and --help generated from the table the parser
# reads (so it lists every option the command takes).
set -u
: "${GPUFRAC:?path to the gpufrac binary}" "${TESTDATA:?tests/data}"
. "$(dirname "$0")/check.sh"

small=(--nodes="$TESTDATA/nodes_small.csv" --pods="$TESTDATA/pods_small.csv")

# --key=value reaches the option's own check (the value is read, not the
# whole argument taken as an unknown option).
check node-eq        2 "--interval: "              -- "$GPUFRAC" node --interval=0
check node-eq-run    0 'H100-80GB'                 -- "$GPUFRAC" node --fake-gpus=1xH100-80GB --once --print=gpus
check sched-eq       2 '--threads: '               -- "$GPUFRAC" scheduler --threads=0
check sched-eq-lease 2 "--lease 'bad': want"       -- "$GPUFRAC" scheduler --kubeconfig=/nonexistent --lease=bad
check plan-eq        2 "--format 'xml': text or json" -- "$GPUFRAC" plan --example --format=xml
check plan-eq-run    0 '"workloads"'               -- "$GPUFRAC" plan --example --format=json --no-whatif
check run-eq         2 '--gpu-memory: '            -- "$GPUFRAC" run --gpu-memory=0 -- true
check run-eq-compute 2 '--gpu-compute: '           -- "$GPUFRAC" run --gpu-compute=101 -- true
check sim-eq         0 'pods_small'                -- "$GPUFRAC" simulate "${small[@]}" --seeds=1 --policy=fgd --format=csv
check kubectl-eq     2 "-o xml: the formats"       -- "$GPUFRAC" kubectl top --output=xml
check kubectl-short  2 "-o xml: the formats"       -- "$GPUFRAC" kubectl top -oxml
check cache-eq       2 '--budget: not a byte quantity' -- "$GPUFRAC" cache --budget=lots ls
mkdir -p "$tmp/cache"
check cache-eq-run   0 ''                          -- "$GPUFRAC" cache --dir="$tmp/cache" ls

# Unknown options are named, with where to look.
for cmd in node scheduler plan run simulate cache; do
  check "$cmd-unknown"  2 "gpufrac $cmd: unknown option '--frob'" -- "$GPUFRAC" $cmd --frob=1
done
check inspect-unknown 2 "unknown option '--frob'"  -- "$GPUFRAC" inspect region --frob x
check kubectl-unknown 2 "unknown flag '--frob'"    -- "$GPUFRAC" kubectl top --frob=1
check see-help        2 "see 'gpufrac node --help'" -- "$GPUFRAC" node --frob
check flag-value      2 '--once takes no value'    -- "$GPUFRAC" node --once=yes
check no-value-eq     2 "unknown option '--nodes-x'" -- "$GPUFRAC" simulate --nodes-x=1

# --help lists what the parser takes: plan's --prometheus, --window and
# --node-types were accepted but missing from its hand-written help.
check plan-help-prom  0 '^  --prometheus URL'      -- "$GPUFRAC" plan --help
check plan-help-win   0 '^  --window W'            -- "$GPUFRAC" plan --help
check plan-help-types 0 '^  --node-types FILE'     -- "$GPUFRAC" plan --help
for cmd in node scheduler plan run inspect simulate kubectl cache; do
  check "$cmd-help-h" 0 '^  -h, --help ' -- "$GPUFRAC" $cmd --help
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
