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
for cmd in node scheduler plan run simulate cache doctor; do
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
for cmd in node scheduler plan run inspect simulate kubectl cache doctor completion; do
  check "$cmd-help-h" 0 '^  -h, --help ' -- "$GPUFRAC" $cmd --help
done

# An operand where the command takes none is a usage error, after `--` too.
fake=(--once --no-kube --fake-gpus 1xH100-80GB --print gpus)
check node-dashdash   2 "unexpected argument 'extra'" -- "$GPUFRAC" node "${fake[@]}" -- extra
check sched-dashdash  2 "unexpected argument 'extra'" -- "$GPUFRAC" scheduler -- extra
check plan-dashdash   2 "unexpected argument 'extra'" -- "$GPUFRAC" plan --example -- extra
check sim-dashdash    2 "unexpected argument 'extra'" -- "$GPUFRAC" simulate "${small[@]}" -- extra
check doctor-dashdash 2 "unexpected argument 'extra'" -- "$GPUFRAC" doctor -- extra
check doctor-stuck    2 '--stuck-after soon: a duration' -- "$GPUFRAC" doctor --stuck-after=soon
check doctor-output   2 '-o yaml: the format is json' -- "$GPUFRAC" doctor -oyaml
check node-dashdash-none 0 'H100-80GB'              -- "$GPUFRAC" node "${fake[@]}" --

# A required value that is empty or looks like an option is a usage error.
check node-empty      2 '--fake-gpus: empty value'  -- "$GPUFRAC" node --fake-gpus=
check sched-empty     2 '--listen: empty value'     -- "$GPUFRAC" scheduler --listen=
check sched-optval    2 "--listen: value '--policy' looks like an option" -- "$GPUFRAC" scheduler --listen --policy
check plan-empty      2 '--prometheus: empty value' -- "$GPUFRAC" plan --prometheus=
check run-empty       2 '--gpu: empty value'        -- "$GPUFRAC" run --gpu= -- true
check version-bogus   2 "unknown option '--bogus'"  -- "$GPUFRAC" version --bogus
check kubectl-o-eq    2 "-o xml: the formats" -- "$GPUFRAC" kubectl top -o=xml


# Options accepted but ignored are usage errors.
check plan-window     2 '--window needs --prometheus' -- "$GPUFRAC" plan --example --window 1d
check sim-load-late   2 '--load needs --churn'     -- "$GPUFRAC" simulate "${small[@]}" --load 60% --seeds 1
ref=m@sha256:$(printf '%064d' 0)
check cache-context   2 '--context needs --kubeconfig' -- "$GPUFRAC" cache prefetch "$ref" --source http://127.0.0.1:1/m --node-names a --context x
check cache-names-empty 2 '--node-names: empty value' -- "$GPUFRAC" cache prefetch "$ref" --source http://127.0.0.1:1/m --node-names=
check cache-names-utf8 2 'not UTF-8'               -- "$GPUFRAC" cache prefetch "$ref" --source http://127.0.0.1:1/m --node-names "$(printf 'a\xff')"
check cache-selector  2 '--node-selector: want K=V' -- "$GPUFRAC" cache prefetch "$ref" --source http://127.0.0.1:1/m --node-selector aaaa
check cache-selector-ok 0 'gpu=h100,zone=a'          -- "$GPUFRAC" cache prefetch "$ref" --source http://127.0.0.1:1/m --node-selector gpu=h100,zone=a
# A source every node agent refuses is refused here, by the same check,
# before a ConfigMap is written (issue 28): credentials, dot segments, an
# empty port; the password is never printed.
check cache-src-creds 2 "--source 'https://\*\*\*@m.example/x' has a user name or password" -- "$GPUFRAC" cache prefetch "$ref" --source https://u:s3cret@m.example/x --node-names a
check cache-src-nopw  0 ''                           -- sh -c '! "$0" cache prefetch "$1" --source https://u:s3cret@m.example/x --node-names a 2>&1 | grep -q s3cret' "$GPUFRAC" "$ref"
check cache-src-dots  2 "--source 'https://m.example/pub/../priv/' has a '.' or '..' path segment" -- "$GPUFRAC" cache prefetch "$ref" --source https://m.example/pub/../priv/ --node-names a
check cache-src-dot   2 "'.' or '..' path segment"   -- "$GPUFRAC" cache prefetch "$ref" --source file:///srv/./m --node-names a
check cache-src-port  2 "has an empty port"          -- "$GPUFRAC" cache prefetch "$ref" --source https://m.example:/x --node-names a
check cache-src-hfrev 2 "has a revision"             -- "$GPUFRAC" cache prefetch "$ref" --source hf://acme/tiny@main/../x --node-names a
check cache-src-hf-ok 0 '"hf://acme/tiny@main"'      -- "$GPUFRAC" cache prefetch "$ref" --source hf://acme/tiny@main --node-names a

# The kubectl plugin's names go into API paths: checked as Kubernetes names
# before any request (so these fail without a cluster).
check kubectl-ns-path 2 "namespace '../../../api/v1/nodes\\?x=' is not a valid Kubernetes name" -- "$GPUFRAC" kubectl describe pod p -n '../../../api/v1/nodes?x='
check kubectl-pod-path 2 "pod 'a/b' is not a valid Kubernetes name" -- "$GPUFRAC" kubectl why-pending a/b
check kubectl-pod-caps 2 "pod 'Abc' is not"        -- "$GPUFRAC" kubectl describe pod Abc -n ok
check kubectl-agent-ns 2 "agent namespace 'a.b' is not" -- "$GPUFRAC" kubectl top --agent-namespace a.b

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
