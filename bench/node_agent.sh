#!/bin/sh
# The real node agent end to end, loopback only (docs/benchmarks.md):
#  1. Allocate latency: `gpufrac node --fake-gpus 8xH100-80GB` linked to the
#     stateful API-server test double (tests/sched/apiserver_double.py; a
#     test double, not an API server) and a fake kubelet on real gRPC;
#     PODS pods bound with grants are in the agent's cache, then PODS
#     sequential Allocates, each matched, its files written and answered.
#  2. Resident memory: the same agent with CTRS containers answered, each
#     with a region holding usage (tests/node/node_prep), while /metrics is
#     scraped SCRAPES times; VmRSS before and after, VmHWM.
#
#   bench/node_agent.sh BUILD_DIR [PODS] [CTRS] [SCRAPES]
set -eu
build=${1:?usage: bench/node_agent.sh BUILD_DIR [PODS] [CTRS] [SCRAPES]}
pods=${2:-500}
ctrs=${3:-64}
scrapes=${4:-500}
here=$(cd "$(dirname "$0")/.." && pwd)
cmake --build "$build" -j2 --target gpufrac node_prep dp_python_pb >/dev/null
cd "$build"
echo "== Allocate through the agent: $pods pods"
/usr/bin/python3 "$here/tests/node/agent_e2e.py" --gpufrac ./gpufrac \
  --pb tests/node/pb --bench "$pods"
echo
echo "== agent memory: 8 GPUs, $ctrs containers, $scrapes scrapes"
/usr/bin/python3 "$here/tests/node/agent_e2e.py" --gpufrac ./gpufrac \
  --pb tests/node/pb --node-prep tests/node/node_prep \
  --bench-rss "$ctrs" --scrapes "$scrapes"
