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
check cache-names-utf8 2 '--node-names: not UTF-8'               -- "$GPUFRAC" cache prefetch "$ref" --source http://127.0.0.1:1/m --node-names "$(printf 'a\xff')"
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
# fetch refuses what prefetch refuses the same way: a usage error (2)
# naming --source, before the cache is opened (it exited 1).
check cache-fetch-src-port 2 "--source 'https://m.example:/x' has an empty port" -- "$GPUFRAC" cache --dir="$tmp/cache" fetch "$ref" --source https://m.example:/x
check cache-fetch-src-host 2 "--source 'https://999.1.1.1/x' has an all-numeric host that is not an IPv4 address" -- "$GPUFRAC" cache --dir="$tmp/cache" fetch "$ref" --source https://999.1.1.1/x
check cache-pre-src-host 2 "--source 'https://999.1.1.1/x' has an all-numeric host that is not an IPv4 address" -- "$GPUFRAC" cache prefetch "$ref" --source https://999.1.1.1/x --node-names a
check cache-fetch-src-creds 2 "--source 'https://\*\*\*@m.example/x' has a user name" -- "$GPUFRAC" cache --dir="$tmp/cache" fetch "$ref" --source https://u:s3cret@m.example/x
# a bidi control in a source is refused and not echoed (the message is
# ASCII: U+202E shown as its %XX bytes)
check cache-src-bidi 2 "--source 'https://m.example/a%E2%80%AEb' has a bidirectional control" -- "$GPUFRAC" cache prefetch "$ref" --source "$(printf 'https://m.example/a\xe2\x80\xaeb')" --node-names a
# a scheme in capitals is a scheme (RFC 3986), written in lower case
check cache-pre-caps 0 '"source": "https://m.example/x"' -- "$GPUFRAC" cache prefetch "$ref" --source HTTPS://m.example/x --node-names a
mkdir -p "$tmp/src" && echo hello >"$tmp/src/w.bin"
"$GPUFRAC" cache manifest "$tmp/src" >"$tmp/src/gpufrac.manifest" 2>"$tmp/digest"
check cache-fetch-caps 0 "$tmp/cache2/" -- "$GPUFRAC" cache --dir="$tmp/cache2" fetch "m@$(cat "$tmp/digest")" --source "FILE://$tmp/src"
# a value that is not UTF-8 is named
check cache-ns-utf8 2 '--namespace: not UTF-8' -- "$GPUFRAC" cache prefetch "$ref" --source http://127.0.0.1:1/m --node-names a --namespace "$(printf 'a\xff')"
check cache-sel-utf8 2 '--node-selector: not UTF-8' -- "$GPUFRAC" cache prefetch "$ref" --source http://127.0.0.1:1/m --node-selector "$(printf 'a=\xff')"
check cache-src-utf8 2 '--source: not UTF-8' -- "$GPUFRAC" cache prefetch "$ref" --source "$(printf 'http://127.0.0.1:1/m\xff')" --node-names a
# --hf-endpoint's errors name the option the user wrote, not the node
# config's key
check cache-hfep-port 1 "^gpufrac cache: --hf-endpoint 'https://hub.example:' has an empty port" -- "$GPUFRAC" cache --dir="$tmp/cache" fetch m --source hf://acme/tiny --hf-endpoint https://hub.example:
echo tok >"$tmp/tok"
check cache-hfep-token 1 "^gpufrac cache: --hf-endpoint 'http://hub.example': the hub token \(--hf-token-file\) is sent only" -- "$GPUFRAC" cache --dir="$tmp/cache" fetch m --source hf://acme/tiny --hf-endpoint http://hub.example --hf-token-file "$tmp/tok"

# The kubectl plugin's names go into API paths: checked as Kubernetes names
# before any request (so these fail without a cluster).
check kubectl-ns-path 2 "namespace '../../../api/v1/nodes\\?x=' is not a valid Kubernetes name" -- "$GPUFRAC" kubectl describe pod p -n '../../../api/v1/nodes?x='
check kubectl-pod-path 2 "pod 'a/b' is not a valid Kubernetes name" -- "$GPUFRAC" kubectl why-pending a/b
check kubectl-pod-caps 2 "pod 'Abc' is not"        -- "$GPUFRAC" kubectl describe pod Abc -n ok
check kubectl-agent-ns 2 "agent namespace 'a.b' is not" -- "$GPUFRAC" kubectl top --agent-namespace a.b

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
