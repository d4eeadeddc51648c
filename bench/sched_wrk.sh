#!/bin/sh
# Filter and prioritize latency of the real `gpufrac scheduler` process
# under steady load from wrk, and the memory it holds, with a model of
# NODES nodes (8 A100-80GB each) and PODS bound pods with grants, fed
# through the stateful API-server test double (tests/sched/apiserver_double.py;
# a test double, not an API server).  Loopback only.
#
#   bench/sched_wrk.sh BUILD_DIR [NODES] [PODS] [SECONDS] [CONNECTIONS]
#
# Prints wrk's latency distribution (--latency) for /filter and
# /prioritize with nodeCacheCapable NodeNames listing every node, and the
# extender's VmRSS / VmHWM once the model is synced, and its own timing
# of each request (the /metrics histogram: gf_sched_handle alone, without
# HTTP), to compare with wrk's.  Results and the
# machine they were measured on: docs/benchmarks.md.
#
# SECONDS 0 measures memory only (no load).  Environment knobs, all
# optional:
#   EXT_CPUS, WRK_CPUS  taskset -c lists pinning the extender and wrk
#                       (e.g. EXT_CPUS=1 WRK_CPUS=0 on a 2-core machine)
#   EXT_WRAP            a command put before the extender (e.g.
#                       "valgrind --tool=massif --massif-out-file=m.out")
#   PERF_OUT            perf record -g the extender during each wrk run,
#                       into PERF_OUT.filter and PERF_OUT.prioritize
set -eu
build=${1:?usage: bench/sched_wrk.sh BUILD_DIR [NODES] [PODS] [SECONDS] [CONNECTIONS]}
nodes=${2:-1000}
pods=${3:-10000}
secs=${4:-15}
conns=${5:-4}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$build/gpufrac
work=$(mktemp -d)
dpid=
epid=
cleanup() {
  [ -n "$epid" ] && kill "$epid" 2>/dev/null || true
  [ -n "$dpid" ] && kill "$dpid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

dport=$(port)
python3 "$here/tests/sched/apiserver_double.py" --port "$dport" \
  --kubeconfig "$work/kc.json" --nodes "$nodes" --pods "$pods" \
  >"$work/double.log" 2>&1 &
dpid=$!
i=0
until [ -s "$work/kc.json" ]; do
  i=$((i + 1)); [ $i -lt 600 ] || { cat "$work/double.log"; exit 1; }
  sleep 0.2
done

eport=$(port)
# CPU seconds (user + system) a process has used so far: how much of the
# sync was the extender's own work, how much the double's serving of it.
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }
dcpu0=$(cpu_s "$dpid")
t0=$(date +%s.%N)
ext_pin=
[ -n "${EXT_CPUS:-}" ] && ext_pin="taskset -c $EXT_CPUS"
wrk_pin=
[ -n "${WRK_CPUS:-}" ] && wrk_pin="taskset -c $WRK_CPUS"
# shellcheck disable=SC2086 # the wrappers are word lists on purpose
$ext_pin ${EXT_WRAP:-} "$bin" scheduler --listen "127.0.0.1:$eport" --kubeconfig "$work/kc.json" \
  --lease gpufrac-system/bench --threads 2 >"$work/ext.log" 2>&1 &
epid=$!
until curl -sf "http://127.0.0.1:$eport/readyz" >/dev/null 2>&1; do
  kill -0 "$epid" || { cat "$work/ext.log"; exit 1; }
  sleep 0.1
done
t1=$(date +%s.%N)
echo "== $nodes nodes, $pods bound pods: synced in $(echo "$t1 - $t0" | bc) s"
echo "CPU during the sync: extender $(cpu_s "$epid") s, API-server double" \
  "$(echo "$(cpu_s "$dpid") - $dcpu0" | bc) s"
sed -n 's/^gpufrac scheduler: //p' "$work/ext.log"
grep -E '^(VmRSS|VmHWM|RssAnon)' "/proc/$epid/status"
if [ "$secs" = 0 ]; then
  exit 0
fi

# The pending pod kube-scheduler asks about: 10Gi and 10% of one GPU.
python3 - "$work" "$nodes" <<'EOF'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
res = {"cpu": "1", "memory": "1Gi", "gpufrac.io/gpu": "1",
       "gpufrac.io/gpu-memory": "10Gi", "gpufrac.io/gpu-compute": "10"}
pod = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "bench-pending", "namespace": "bench",
                    "uid": "uid-bench-pending", "resourceVersion": "1"},
       "spec": {"containers": [{"name": "main", "image": "x",
                                "resources": {"requests": res,
                                              "limits": res}}]},
       "status": {"phase": "Pending"}}
args = {"Pod": pod, "Nodes": None,
        "NodeNames": ["node-%05d" % i for i in range(n)]}
body = json.dumps(args, separators=(",", ":"))
with open(work + "/args.lua", "w") as f:
    f.write('wrk.method = "POST"\n')
    f.write('wrk.headers["Content-Type"] = "application/json"\n')
    f.write("wrk.body = [==[%s]==]\n" % body)
with open(work + "/args.json", "w") as f:
    f.write(body)
print("ExtenderArgs body: %d bytes" % len(body))
EOF
for verb in filter prioritize; do
  curl -s -o /dev/null -H 'Content-Type: application/json' \
    --data-binary "@$work/args.json" -w "$verb reply: %{size_download} bytes\n" \
    "http://127.0.0.1:$eport/gpufrac/$verb"
done

for verb in filter prioritize; do
  echo "== POST /gpufrac/$verb: wrk -t1 -c$conns -d${secs}s --latency" \
    "(load average $(cut -d' ' -f1-3 /proc/loadavg)${EXT_CPUS:+, extender on CPU $EXT_CPUS}${WRK_CPUS:+, wrk on CPU $WRK_CPUS})"
  ppid=
  if [ -n "${PERF_OUT:-}" ]; then
    perf record -q -g -p "$epid" -o "$PERF_OUT.$verb" >/dev/null 2>&1 &
    ppid=$!
  fi
  # shellcheck disable=SC2086
  $wrk_pin wrk -t1 -c"$conns" -d"${secs}s" --latency -s "$work/args.lua" \
    "http://127.0.0.1:$eport/gpufrac/$verb"
  if [ -n "$ppid" ]; then
    kill -INT "$ppid"
    wait "$ppid" || true
  fi
done
grep -E '^(VmRSS|VmHWM)' "/proc/$epid/status"
curl -s "http://127.0.0.1:$eport/metrics" |
  grep -E '^gpufrac_extender_(nodes|pods|requests_total|request_duration_seconds_(bucket|count|sum)\{verb="(filter|prioritize)")'
