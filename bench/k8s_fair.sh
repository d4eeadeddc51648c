#!/bin/sh
# Like-for-like scheduling throughput (issue 29): kube-scheduler alone and
# through the gpufrac extender (its default, and --filter-top 1) on the SAME
# pods and Nodes (bench/k8s_sched.py --mode alone-shares / extender
# --node-shares) and the SAME client limit on both sides (kube-scheduler's
# clientConnection qps QPS, burst 2 x QPS; the extender's --bind-qps QPS,
# --bind-burst 2 x QPS), in three scenarios, alternating the three configs
# round after round so that each sees the same machine load:
#
#   burst  BURST_NODES nodes, BURST_PODS identical pods (8Gi, 10%)
#   fill   FILL_NODES nodes, FILL_PODS pods of four sizes, more than fit
#   churn  CHURN_NODES nodes, CHURN_PODS pods arriving at CHURN_RATE a second,
#          each deleted CHURN_LIFE s after its creation
#
#   bench/k8s_fair.sh K8S_BIN BUILD_DIR OUT.jsonl [ROUNDS] [QPS] [SCENARIOS]
#
# Appends one JSON line per run to OUT.jsonl: round, scenario, config, the
# `uptime` line read just before the run, and bench/k8s_sched.py's figures.
# bench/k8s_fair_table.py OUT.jsonl prints the medians.  Sizes default to
# 500 x 2000 (burst), 60 x 2000 (fill), 40 nodes and 1800 pods at 30/s
# living 20 s (churn); override with the variables above.
set -eu
k8s=${1:?usage: bench/k8s_fair.sh K8S_BIN BUILD_DIR OUT.jsonl [ROUNDS] [QPS] [SCENARIOS]}
build=${2:?build dir}
out=${3:?output file}
rounds=${4:-3}
qps=${5:-50}
scenarios=${6:-burst fill churn}
here=$(cd "$(dirname "$0")" && pwd)
bench=$here/k8s_sched.py
gpufrac=$(cd "$build" && pwd)/gpufrac
: "${BURST_NODES:=500}" "${BURST_PODS:=2000}"
: "${FILL_NODES:=60}" "${FILL_PODS:=2000}"
: "${CHURN_NODES:=40}" "${CHURN_PODS:=1800}" "${CHURN_RATE:=30}" "${CHURN_LIFE:=20}"

run() { # round scenario config args...
  r=$1 sc=$2 cf=$3
  shift 3
  up=$(uptime)
  echo "round $r $sc $cf: $up" >&2
  res=$(python3 "$bench" "$k8s" "$gpufrac" --qps "$qps" --node-shares "$@" | tail -n1)
  printf '{"round": %s, "scenario": "%s", "config": "%s", "uptime": "%s", "result": %s}\n' \
    "$r" "$sc" "$cf" "$(echo "$up" | sed 's/^ *//')" "$res" >>"$out"
}

r=1
while [ "$r" -le "$rounds" ]; do
  for sc in $scenarios; do
    case $sc in
    burst) size="--scenario burst --nodes $BURST_NODES --pods $BURST_PODS" ;;
    fill) size="--scenario fill --nodes $FILL_NODES --pods $FILL_PODS" ;;
    churn) size="--scenario churn --nodes $CHURN_NODES --pods $CHURN_PODS
                 --rate $CHURN_RATE --lifetime $CHURN_LIFE" ;;
    *) echo "unknown scenario $sc" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086
    run "$r" "$sc" alone $size --mode alone-shares
    # shellcheck disable=SC2086
    run "$r" "$sc" extender $size --mode extender --bind-qps "$qps"
    # shellcheck disable=SC2086
    run "$r" "$sc" filter-top-1 $size --mode extender --bind-qps "$qps" --filter-top 1
  done
  r=$((r + 1))
done
