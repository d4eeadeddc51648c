#!/usr/bin/env bash
# The gpufrac command line: exit codes, help, errors that say what and where,
# and the report files.  Prints one line per check and 'N passed, N failed'.
set -u
: "${GPUFRAC:?path to the gpufrac binary}" "${TESTDATA:?tests/data}"
. "$(dirname "$0")/check.sh"

small=(--nodes "$TESTDATA/nodes_small.csv" --pods "$TESTDATA/pods_small.csv")

check help           0 'simulate'                 -- "$GPUFRAC" help
check dash-help      0 'commands:'                -- "$GPUFRAC" --help
check no-args        2 'usage'                    -- "$GPUFRAC"
check version        0 '^gpufrac [0-9]+\.'        -- "$GPUFRAC" version
check version-extra  2 'usage'                    -- "$GPUFRAC" version x
check unknown-cmd    2 "'frobnicate' is not"      -- "$GPUFRAC" frobnicate
check help-simulate  0 '--policy'                 -- "$GPUFRAC" help simulate
check sim-help       0 'fgd'                      -- "$GPUFRAC" simulate --help
check run-help       0 '--gpu-memory'             -- "$GPUFRAC" run --help
check inspect-help   0 'inspect region'           -- "$GPUFRAC" inspect --help
check scheduler-help 0 '/filter'                  -- "$GPUFRAC" scheduler --help
check scheduler-help-preempt 0 '/bind, /preempt'      -- "$GPUFRAC" scheduler --help
check sched-hami-placeholders 2 "placeholders cannot ask for it" -- "$GPUFRAC" scheduler --accept hami --autoscale-placeholders on --kubeconfig /nonexistent
check sched-hami-placeholders-other 2 "kubeconfig" -- "$GPUFRAC" scheduler --accept hami --autoscale-placeholders on --autoscale-resource example.com/gpu --kubeconfig /nonexistent
# --autoscale-*: checked as the bridge reads them, a usage error (exit 2),
# and refused without --autoscale-placeholders (issue 33 #6: accepted
# silently).
check sched-as-types-bad 2 "--autoscale-node-types: autoscale: node type 1 \\(a\\): GPU count" -- "$GPUFRAC" scheduler --autoscale-placeholders on --autoscale-node-types a:0:80Gi:10:100Gi --kubeconfig /nonexistent
check sched-as-types-dup 2 "node type 'a' given twice" -- "$GPUFRAC" scheduler --autoscale-placeholders on --autoscale-node-types a:1:80Gi:10:100Gi,a:2:80Gi:20:200Gi --kubeconfig /nonexistent
check sched-as-ns-bad 2 "--autoscale-namespace: .*DNS-1123" -- "$GPUFRAC" scheduler --autoscale-placeholders on --autoscale-namespace Not_A_Name --kubeconfig /nonexistent
check sched-as-off 2 "--autoscale-node-types needs --autoscale-placeholders on" -- timeout 20 "$GPUFRAC" scheduler --no-kube --autoscale-node-types a:1:80Gi:10:100Gi --listen 127.0.0.1:0
check sched-as-nokube-after 2 "--autoscale-after needs --autoscale-placeholders on" -- timeout 20 "$GPUFRAC" scheduler --no-kube --autoscale-after 2s --listen 127.0.0.1:0
# "off" given: the settings are kept (checked all the same), the bridge off
check sched-as-off-kept 2 "kubeconfig" -- "$GPUFRAC" scheduler --autoscale-placeholders off --autoscale-after 2s --kubeconfig /nonexistent
check sched-as-off-checked 2 "--autoscale-node-types: autoscale: node type 1" -- "$GPUFRAC" scheduler --autoscale-placeholders off --autoscale-node-types a:0:80Gi:10:100Gi --kubeconfig /nonexistent
# --no-kube: the extender's own preemption evicts through the API server
# (issue 32; it was accepted and did nothing); the default on becomes off.
check sched-nokube-preempt-evict 2 "--no-kube excludes --preempt-evict on" -- timeout 20 "$GPUFRAC" scheduler --no-kube --preempt-evict on --listen 127.0.0.1:0
check sched-nokube-defrag-hold 2 "--no-kube excludes --defrag-hold" -- timeout 20 "$GPUFRAC" scheduler --no-kube --defrag-hold 5m --listen 127.0.0.1:0
# --defrag-hold's range is 10s to 1h, said for a value that is no duration
# too (it said "1ms to 7 days": a stranger's finding).
check sched-defrag-hold-zero 2 "want a duration from 10s to 1h" -- timeout 20 "$GPUFRAC" scheduler --defrag-hold 0 --listen 127.0.0.1:0
check sched-defrag-hold-form 2 "want a duration from 10s to 1h" -- timeout 20 "$GPUFRAC" scheduler --defrag-hold 1h0m --listen 127.0.0.1:0
check node-help      0 'fake-gpus'                -- "$GPUFRAC" node --help
check help-lists-all 0 'scheduler'                -- "$GPUFRAC" help
check run-no-cmd     2 'usage'                    -- "$GPUFRAC" run --gpu-memory 1Gi
check inspect-usage  2 'usage'                    -- "$GPUFRAC" inspect
check help-unknown   2 "no command 'nope'"        -- "$GPUFRAC" help nope
check bad-option     2 "unknown option '--bogus'" -- "$GPUFRAC" simulate --bogus 1
check missing-value  2 'needs a value'            -- "$GPUFRAC" simulate --seeds
check bogus-last     2 "unknown option '--bogus'" -- "$GPUFRAC" simulate --bogus
check bogus-eq       2 "unknown option '--bogus'" -- "$GPUFRAC" simulate --bogus=1
check bad-policy     2 "no policy 'nope'"         -- "$GPUFRAC" simulate --policy fgd,nope
check bad-param      2 "unknown parameter 'bogus'" -- "$GPUFRAC" simulate --policy gpufrac:bogus=1
check bad-param-val  2 'cpu=-1'                   -- "$GPUFRAC" simulate --policy gpufrac:cpu=-1
check param-no-params 2 'takes no parameters'     -- "$GPUFRAC" simulate --policy bestfit:x=1
check bad-seeds      2 "--seeds '9-1'"            -- "$GPUFRAC" simulate --seeds 9-1
check bad-inflate    2 "--inflate 'x'"            -- "$GPUFRAC" simulate --inflate x
check bad-format     2 "--format 'xml'"           -- "$GPUFRAC" simulate --format xml
check bad-ties       2 "--ties 'sometimes'"       -- "$GPUFRAC" simulate --ties sometimes
check bad-trace-name 2 'not a trace name'         -- "$GPUFRAC" simulate --trace ../etc
check missing-trace  2 "no trace 'nosuch'"       -- "$GPUFRAC" simulate --trace nosuch
check trace-list     2 'default, .*gpushare40'    -- "$GPUFRAC" simulate --trace default,nosuch
check missing-nodes  1 '/nonexistent.csv'         -- "$GPUFRAC" simulate --nodes /nonexistent.csv
check models-needed  2 '--zipf needs --models'   -- "$GPUFRAC" simulate --zipf 2
check models-churn   2 'does not apply to --churn' -- "$GPUFRAC" simulate --models 10 --churn
check models-size    2 "--model-sizes 'lots'"     -- "$GPUFRAC" simulate --models 10 --model-sizes 1Gi,lots
check models-zero    2 "--models '0'"             -- "$GPUFRAC" simulate --models 0
check models-table   0 'cache-hit%'               -- "$GPUFRAC" simulate "${small[@]}" --models 5 --cache-budget 10Gi --seeds 1 --policy gpufrac

printf 'name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1,1,1000\np2,oops,1,1,500\n' >"$tmp/bad.csv"
check malformed-pods 1 'bad.csv:3: column cpu_milli' -- "$GPUFRAC" simulate "${small[@]:0:2}" --pods "$tmp/bad.csv"

check small-table    0 'fgd'    -- "$GPUFRAC" simulate "${small[@]}" --seeds 1-3 --policy fgd,bestfit
check small-params   0 'gpufrac:cpu=0:price=0' -- "$GPUFRAC" simulate "${small[@]}" --seeds 1 --policy gpufrac:cpu=0:price=0
check small-json     0 '"summary"' -- "$GPUFRAC" simulate "${small[@]}" --seeds 1 --format json
check small-csv      0 '^trace,policy,seeds' -- "$GPUFRAC" simulate "${small[@]}" --seeds 1 --format csv --jobs 1

# The JSON is valid and carries the fields the issue names.
"$GPUFRAC" simulate "${small[@]}" --seeds 1,2 --policy whole,fgd --format json >"$tmp/s.json"
if python3 - "$tmp/s.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
need = {"policy", "trace", "seeds", "unallocated_at_100", "unallocated_at_100_std",
        "unallocated_at_130", "frag_amount_at_80", "decision_us_median", "decision_us_p99",
        "first_drop_at_pct"}
assert len(d["summary"]) == 2, d
for s in d["summary"]:
    assert need <= set(s), need - set(s)
    assert s["seeds"] == 2 and s["trace"] == "pods_small"
PY
then echo "ok   json-fields"; pass=$((pass + 1)); else echo "FAIL json-fields"; fail=$((fail + 1)); fi

# --out writes the summary, the curves and a chart per trace.
check out-dir 0 '' -- "$GPUFRAC" simulate "${small[@]}" --seeds 1 --out "$tmp/report"
for f in summary.csv curves.csv allocation-pods_small.svg; do
  if [ -s "$tmp/report/$f" ]; then echo "ok   out-$f"; pass=$((pass + 1))
  else echo "FAIL out-$f missing"; fail=$((fail + 1)); fi
done
if grep -q '<polyline' "$tmp/report/allocation-pods_small.svg" && grep -q '</svg>' "$tmp/report/allocation-pods_small.svg"; then
  echo "ok   svg-lines"; pass=$((pass + 1)); else echo "FAIL svg-lines"; fail=$((fail + 1)); fi
# --arrivals writes each workload in arrival order; the demand column climbs
# to the inflation (1.3 x capacity by default) and the order is the seed's.
check arrivals 0 '' -- "$GPUFRAC" simulate "${small[@]}" --seeds 3,4 --policy fgd --arrivals "$tmp/arr"
if python3 - "$tmp/arr" <<'PY'
import csv, os, sys
d = sys.argv[1]
assert sorted(os.listdir(d)) == ["arrivals-pods_small-3.csv", "arrivals-pods_small-4.csv"], os.listdir(d)
orders = []
for f in sorted(os.listdir(d)):
    rows = list(csv.DictReader(open(os.path.join(d, f))))
    pct = [float(r["arrived_pct"]) for r in rows]
    assert pct == sorted(pct) and 129 < pct[-1] < 250, pct[-3:]
    assert [int(r["position"]) for r in rows] == list(range(len(rows)))
    orders.append([r["pod"] for r in rows])
assert orders[0] != orders[1]  # seeds shuffle differently
PY
then echo "ok   arrivals-content"; pass=$((pass + 1)); else echo "FAIL arrivals-content"; fail=$((fail + 1)); fi
check arrivals-unwritable 1 'gpufrac-no' -- "$GPUFRAC" simulate "${small[@]}" --seeds 1 --arrivals /proc/gpufrac-no

check out-unwritable 1 'gpufrac-no' -- "$GPUFRAC" simulate "${small[@]}" --seeds 1 --out /proc/gpufrac-no

# --churn: the churn-and-autoscaler replay (docs/simulator.md).
printf 'type,model,gpus,cpu_milli,memory_mib,gpu_hour_price,count\nt4,T4,2,32000,131072,0.35,2\nv100,V100M32,8,64000,262144,2.48,1\ncpu,,0,16000,65536,0,0\n' >"$tmp/types.csv"
churn=(--churn --pods "$TESTDATA/pods_small.csv" --node-types "$tmp/types.csv" --duration 1d --seeds 1,2)
check churn-table    0 'GPUh bought' -- "$GPUFRAC" simulate "${churn[@]}" --policy whole,gpufrac
check churn-help     0 '--consolidate' -- "$GPUFRAC" simulate --help
check churn-load-hi  2 "--load '250%'" -- "$GPUFRAC" simulate "${churn[@]}" --load 250%
check churn-load-0   2 "--load '0'"    -- "$GPUFRAC" simulate "${churn[@]}" --load 0
check churn-load-bad 2 "--load '6o%'"  -- "$GPUFRAC" simulate "${churn[@]}" --load 6o%
check churn-only     2 '--load needs --churn' -- "$GPUFRAC" simulate --load 60%
check churn-consolidate-only 2 '--consolidate needs --churn' -- "$GPUFRAC" simulate --consolidate
check churn-duration 2 "--duration '0'" -- "$GPUFRAC" simulate "${churn[@]}" --duration 0
check churn-delay    2 "--provision '3x'" -- "$GPUFRAC" simulate "${churn[@]}" --provision 3x
check churn-nodes    2 '--nodes does not apply' -- "$GPUFRAC" simulate "${churn[@]}" --nodes "$TESTDATA/nodes_small.csv"
check churn-csv      2 'table or json' -- "$GPUFRAC" simulate "${churn[@]}" --format csv
printf 'type,model,gpus,cpu_milli,memory_mib,gpu_hour_price,count\nt4,T4,2,32000,131072,0.35,2\nv100,V100M32,eight,64000,262144,2.48,1\n' >"$tmp/badtypes.csv"
check churn-bad-types 1 'badtypes.csv:3: column gpus' -- "$GPUFRAC" simulate "${churn[@]}" --node-types "$tmp/badtypes.csv"
check churn-no-types 1 '/nonexistent/types.csv' -- "$GPUFRAC" simulate "${churn[@]}" --node-types /nonexistent/types.csv
# Priorities, preemption and defragmentation (issue 32).
check churn-preempt     0 'high p99' -- "$GPUFRAC" simulate "${churn[@]}" --preempt gpufrac --defrag
check churn-preempt-bad 2 "--preempt 'maybe'" -- "$GPUFRAC" simulate "${churn[@]}" --preempt maybe
check churn-high-bad    2 "--high '150%'" -- "$GPUFRAC" simulate "${churn[@]}" --high 150%
check churn-preempt-only 2 '--preempt needs --churn' -- "$GPUFRAC" simulate --preempt kube
"$GPUFRAC" simulate "${churn[@]}" --format json --jobs 1 >"$tmp/p0.json"
"$GPUFRAC" simulate "${churn[@]}" --format json --jobs 1 --preempt kube --high 20% >"$tmp/p1.json"
if python3 - "$tmp/p0.json" "$tmp/p1.json" <<'PY'
import json, sys
off, on = (json.load(open(p)) for p in sys.argv[1:3])
assert "preempt" not in off["churn"] and "preemptions" not in off["summary"][0]
assert on["churn"]["preempt"] == "kube" and on["churn"]["high"] == 0.2
for s in on["summary"]:
    for k in ("pending_high_p99_s", "pending_low_p99_s", "preemptions",
              "preempt_wasted", "defrag_moves", "evictions_per_day"):
        assert k in s, k
    assert 0 < s["arrived_high"] < s["arrived"]
PY
then echo "ok   churn-preempt-json"; pass=$((pass + 1)); else echo "FAIL churn-preempt-json"; fail=$((fail + 1)); fi
# --arrivals DIR with --churn: each (trace, seed)'s arrivals as CSV, the
# arrivals the JSON counts (bench/karpenter_replay.py replays them).
"$GPUFRAC" simulate "${churn[@]}" --format json --jobs 1 --arrivals "$tmp/arr" >"$tmp/a.json"
if python3 - "$tmp/a.json" "$tmp/arr" <<'PY'
import csv, json, os, sys
j = json.load(open(sys.argv[1]))
for seed in (1, 2):
    rows = list(csv.DictReader(open(os.path.join(sys.argv[2], "churn-arrivals-pods_small-%d.csv" % seed))))
    assert rows and list(rows[0]) == ["t_s", "row", "name", "num_gpu", "gpu_milli", "cpu_milli",
                                      "memory_mib", "gpu_spec", "lifetime_s"], rows[:1]
    ts = [float(r["t_s"]) for r in rows]
    assert ts == sorted(ts) and ts[-1] <= 86400 and all(float(r["lifetime_s"]) > 0 for r in rows)
    j.setdefault("n", []).append(len(rows))
assert sum(j["n"]) / 2 == j["summary"][0]["arrived"], (j["n"], j["summary"][0]["arrived"])
PY
then echo "ok   churn-arrivals"; pass=$((pass + 1)); else echo "FAIL churn-arrivals"; fail=$((fail + 1)); fi
# The same seeds give the same JSON, byte for byte, whatever the threads.
"$GPUFRAC" simulate "${churn[@]}" --consolidate --format json --jobs 1 >"$tmp/c1.json"
"$GPUFRAC" simulate "${churn[@]}" --consolidate --format json --jobs 4 >"$tmp/c2.json"
"$GPUFRAC" simulate "${churn[@]}" --consolidate --format json --seeds 3 >"$tmp/c3.json"
if [ -s "$tmp/c1.json" ] && cmp -s "$tmp/c1.json" "$tmp/c2.json" && ! cmp -s "$tmp/c1.json" "$tmp/c3.json"; then
  echo "ok   churn-deterministic"; pass=$((pass + 1)); else echo "FAIL churn-deterministic"; fail=$((fail + 1)); fi
if python3 - "$tmp/c1.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
need = {"gpu_hours_bought", "gpu_hours_asked", "bought_per_asked", "pending_p50_s",
        "pending_p99_s", "evictions", "reload_minutes", "cost", "nodes"}
assert d["churn"]["consolidate"] is True and d["seeds"] == "1,2"
assert [s["policy"] for s in d["summary"]] == ["whole", "fgd", "gpufrac"]
for s in d["summary"]:
    assert need <= set(s), need - set(s)
    assert s["gpu_hours_bought"] >= s["gpu_hours_asked"] > 0, s
    assert len(s["nodes"]) == 25, len(s["nodes"])
PY
then echo "ok   churn-json-fields"; pass=$((pass + 1)); else echo "FAIL churn-json-fields"; fail=$((fail + 1)); fi
check churn-out 0 '' -- "$GPUFRAC" simulate "${churn[@]}" --out "$tmp/creport"
if grep -q '<polyline' "$tmp/creport/churn-nodes-pods_small.svg" && [ -s "$tmp/creport/churn-summary.json" ]; then
  echo "ok   churn-out-files"; pass=$((pass + 1)); else echo "FAIL churn-out-files"; fail=$((fail + 1)); fi

# The bundled data is found at run time beside the executable, never at a
# build path compiled in (src/cli/data_dir.c): an install's share/gpufrac
# (the gpufrac-plan image's /usr/share/gpufrac), else none.
mkdir -p "$tmp/inst/bin" "$tmp/inst/share/gpufrac" "$tmp/bare/bin"
cp "$GPUFRAC" "$tmp/inst/bin/gpufrac"
cp "$GPUFRAC" "$tmp/bare/bin/gpufrac"
cp -r "$TESTDATA/../../data/plan-example" "$tmp/inst/share/gpufrac/"
check data-installed 0 '^gpufrac plan: 61 nodes' -- env -u GPUFRAC_DATA "$tmp/inst/bin/gpufrac" plan --example
check data-none      1 '/usr/share/gpufrac/plan-example/snapshot.json' -- env -u GPUFRAC_DATA "$tmp/bare/bin/gpufrac" plan --example
check data-env       0 '^gpufrac plan: 61 nodes' -- env GPUFRAC_DATA="$tmp/inst/share/gpufrac" "$tmp/bare/bin/gpufrac" plan --example

# A hub token goes only over https, or in the clear to this machine (a
# stranger's finding: it was sent to any http:// endpoint).
printf 'tok-SECRET\n' >"$tmp/hf-token"
for ep in http://10.255.255.1:9 http://127.evil.example:80; do
  check "hf-token-http-${ep#http://}" 1 'sent only over https' -- "$GPUFRAC" cache --dir "$tmp/hfc" \
    fetch m --source hf://org/name --hf-endpoint "$ep" --hf-token-file "$tmp/hf-token" --deadline 3
done
check hf-token-loopback-http 1 'Failed to connect to 127.0.0.1 port 9' -- "$GPUFRAC" cache --dir "$tmp/hfc" \
  fetch m --source hf://org/name --hf-endpoint http://127.0.0.1:9 --hf-token-file "$tmp/hf-token" --deadline 3

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
