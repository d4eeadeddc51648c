#!/bin/bash
# gpufrac node, driven as a command: --help, --once --print, exit codes,
# bad flags, the fake NVML through the loader path.
set -u
fails=0
check() { # check NAME WANT_RC CMD... ; output in $out
  local name=$1 want=$2
  shift 2
  out=$("$@" 2>&1)
  local rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL $name: exit $rc, want $want"; echo "$out"; fails=$((fails + 1))
    return 1
  fi
}
has() { # has NAME TEXT
  if ! grep -qF -- "$2" <<<"$out"; then
    echo "FAIL $1: output lacks '$2'"; echo "$out"; fails=$((fails + 1))
  fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check help 0 "$NODE_CLI" --help && has help "usage: gpufrac node"
check inventory 0 "$NODE_CLI" --fake-gpus 8xH100-80GB --once --print inventory
has inventory '{"version":1,'
has inventory '"index":7,'
has inventory '"model":"H100-80GB","memory":85899345920,"sms":132'
check cdi 0 "$NODE_CLI" --fake-gpus 2xT4-16GB --once --print cdi
has cdi '"cdiVersion": "0.5.0"'
has cdi '"kind": "gpufrac.io/gpu"'
check metrics 0 "$NODE_CLI" --fake-gpus 1xA100-80GB --state-dir "$tmp" --once --print metrics
has metrics '# TYPE gpufrac_gpu_memory_total_bytes gauge'
has metrics 'gpufrac_node_memory_wasted_bytes 0'
check gpus 0 "$NODE_CLI" --fake-gpus 1xL4-24GB --once
has gpus 'L4-24GB'
check write-cdi 0 "$NODE_CLI" --fake-gpus 2xT4-16GB --cdi-dir "$tmp/cdi" --once --write-cdi
[ -s "$tmp/cdi/gpufrac.io-gpu.json" ] || { echo "FAIL write-cdi: no file"; fails=$((fails + 1)); }

printf 'mode = exclusive\nmode.1 = mps\n' >"$tmp/node.conf"
check config 0 "$NODE_CLI" --fake-gpus 2xT4-16GB --config "$tmp/node.conf" --once --print inventory
has config '"mode":"exclusive","sharing":"exclusive"'
has config '"mode":"shared","sharing":"mps"'
printf 'mode = exclusive\nmode = turbo\n' >"$tmp/bad.conf"
check bad-config 1 "$NODE_CLI" --fake-gpus 2xT4-16GB --config "$tmp/bad.conf" --once
has bad-config "bad.conf:2: mode = 'turbo'"

# The fake NVML, found through the loader path as on a real node.
export GF_FAKE_NVML='NVIDIA H100 80GB HBM3=81559;Tesla T4=15360:broken'
check nvml 0 env LD_LIBRARY_PATH="$FAKE_NVML_DIR" "$NODE_CLI" --once --print inventory
has nvml '"driver":"550.54.15","cuda":12040'
has nvml '"model":"H100-80GB-HBM3"'
has nvml 'GPU 1 unhealthy: nvmlDeviceGetUUID: GPU is lost (15)'
check nvml-missing 1 "$NODE_CLI" --nvml /nonexistent/libnvidia-ml.so.1 --once
has nvml-missing 'cannot load NVML'

check bad-flag 2 "$NODE_CLI" --frobnicate
has bad-flag "unknown option '--frobnicate'"
check bad-print 2 "$NODE_CLI" --fake-gpus 1xT4-16GB --once --print yaml
has bad-print "--print 'yaml'"

# --mode dra (docs/dra-node.md): the choice, what it excludes, the slices.
check bad-mode 2 "$NODE_CLI" --fake-gpus 1xT4-16GB --mode both
has bad-mode "--mode 'both': want device-plugin or dra"
check dra-no-kube 2 "$NODE_CLI" --fake-gpus 1xT4-16GB --mode dra --no-kube
has dra-no-kube "--mode dra needs the API server"
check dra-no-api 1 env -u KUBERNETES_SERVICE_HOST "$NODE_CLI" --fake-gpus 1xT4-16GB --mode dra --node-name n1 --state-dir "$tmp" --listen 127.0.0.1:0
has dra-no-api "--mode dra needs an API server"
printf 'dra_slice_devices = 2\n' >"$tmp/dra.conf"
check slices 0 "$NODE_CLI" --fake-gpus 3xT4-16GB --config "$tmp/dra.conf" --node-name n1 --once --print slices
has slices '"name": "n1-gpu.gpufrac.io-1"'
has slices '"resourceSliceCount": 2'
has slices '"name": "gpu-2"'
check slices-no-node 1 env -u NODE_NAME "$NODE_CLI" --fake-gpus 1xT4-16GB --once --print slices
has slices-no-node "DRA: node name '' is not a DNS name"
printf 'dra_slice_devices = 129\n' >"$tmp/dra2.conf"
check dra-bad-config 1 "$NODE_CLI" --fake-gpus 1xT4-16GB --config "$tmp/dra2.conf" --once
has dra-bad-config "dra_slice_devices = '129': want 0..128"
check no-value 2 "$NODE_CLI" --fake-gpus
has no-value "--fake-gpus needs a value"
check print-no-once 2 "$NODE_CLI" --fake-gpus 1xT4-16GB --print cdi
check both 2 "$NODE_CLI" --fake-gpus 1xT4-16GB --nvml x --once
check interval 2 "$NODE_CLI" --interval 0
check bad-fake 1 "$NODE_CLI" --fake-gpus 8xH100 --once
has bad-fake "COUNTxMODEL-MEMORY"
check kube-both 2 "$NODE_CLI" --no-kube --kubeconfig x
printf 'apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster: {server: "http://127.0.0.1:9"}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n' >"$tmp/kc.yaml"
check no-node-name 1 env -u NODE_NAME "$NODE_CLI" --fake-gpus 1xT4-16GB \
  --state-dir "$tmp" --listen 127.0.0.1:0 --kubeconfig "$tmp/kc.yaml"
has no-node-name "this node's name is unknown"
check bad-kubeconfig 1 "$NODE_CLI" --fake-gpus 1xT4-16GB --node-name n1 \
  --state-dir "$tmp" --listen 127.0.0.1:0 --kubeconfig "$tmp/missing.yaml"
has bad-kubeconfig "API server:"

# Serving: starts, answers, stops on SIGTERM with exit 0.
env -u KUBERNETES_SERVICE_HOST "$NODE_CLI" --fake-gpus 1xT4-16GB \
  --state-dir "$tmp" --cdi-dir "$tmp/cdi2" \
  --listen 127.0.0.1:0 2>"$tmp/serve.log" &
pid=$!
for _ in $(seq 50); do grep -q 'metrics on port' "$tmp/serve.log" && break; sleep 0.1; done
port=$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "$tmp/serve.log")
if [ -z "$port" ]; then echo "FAIL serve: no port"; cat "$tmp/serve.log"; fails=$((fails + 1));
else
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3
  out=$(cat <&3); exec 3<&-
  has serve 'ok'
fi
kill -TERM "$pid"; wait "$pid"; rc=$?
[ "$rc" = 0 ] || { echo "FAIL serve: exit $rc after SIGTERM"; fails=$((fails + 1)); }
[ -s "$tmp/cdi2/gpufrac.io-gpu.json" ] || { echo "FAIL serve: no CDI spec"; fails=$((fails + 1)); }
out=$(cat "$tmp/serve.log"); has serve-no-api "no API server"

# Xid health: a critical Xid marks the GPU unhealthy within a few seconds;
# an application Xid does not.
# A container with a grant on GPU 0 alone: utilisation feedback measures it
# by the GPU's own utilisation (no per-process samples in the fake NVML).
"$NODE_PREP" container "$tmp" fb-pod main GPU-00000000-1111-2222-3333-000000000000 \
  1073741824 0 30 || { echo "FAIL node_prep"; fails=$((fails + 1)); }
GF_FAKE_NVML='NVIDIA A100-SXM4-80GB=81920;NVIDIA A100-SXM4-80GB=81920;NVIDIA A100-SXM4-80GB=81920' \
GF_FAKE_NVML_XID_FILE="$tmp/xids" GF_FAKE_NVML_UTIL="37,5" LD_LIBRARY_PATH="$FAKE_NVML_DIR" \
  env -u KUBERNETES_SERVICE_HOST "$NODE_CLI" --state-dir "$tmp" \
  --cdi-dir "$tmp/cdi3" --listen 127.0.0.1:0 --node-name cli-node 2>"$tmp/xid.log" &
pid=$!
for _ in $(seq 50); do grep -q 'metrics on port' "$tmp/xid.log" && break; sleep 0.1; done
port=$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "$tmp/xid.log")
printf '0 13\n1 79\n' >"$tmp/xids"
for _ in $(seq 50); do grep -q 'Xid 79' "$tmp/xid.log" && break; sleep 0.1; done
sleep 1.5 # the main loop applies events once a second
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
out=$(cat <&3); exec 3<&-
kill -TERM "$pid"; wait "$pid"
# Every GPU series also carries DCGM exporter's UUID, modelName and Hostname.
U=GPU-00000000-1111-2222-3333-00000000000
L=',modelName="A100-SXM4-80GB",Hostname="cli-node"}'
healthy() { grep "^gpufrac_gpu_healthy{gpu=\"$U$1\",UUID=\"$U$1\"$L" <<<"$out" | awk '{print $NF}'; }
[ "$(healthy 0)" = 1 ] || { echo "FAIL xid: GPU 0 (Xid 13, an application error) should stay healthy"; echo "$out" | grep healthy; fails=$((fails + 1)); }
[ "$(healthy 1)" = 0 ] || { echo "FAIL xid: GPU 1 (Xid 79) should be unhealthy"; echo "$out" | grep healthy; fails=$((fails + 1)); }
[ "$(healthy 2)" = 1 ] || { echo "FAIL xid: GPU 2 should stay healthy"; fails=$((fails + 1)); }
# Live telemetry from NVML: utilisation where NVML answers (GPU 2 has none
# in GF_FAKE_NVML_UTIL: no series), device memory in use.
has telemetry "gpufrac_gpu_utilization_ratio{gpu=\"${U}0\",UUID=\"${U}0\"$L 0.37"
has telemetry "gpufrac_gpu_utilization_ratio{gpu=\"${U}1\",UUID=\"${U}1\"$L 0.05"
if grep -q 'gpufrac_gpu_utilization_ratio{gpu="GPU-00000000-1111-2222-3333-000000000002"' <<<"$out"; then
  echo "FAIL telemetry: GPU 2 has no utilisation sample but got a series"; fails=$((fails + 1))
fi
has telemetry "gpufrac_gpu_memory_device_used_bytes{gpu=\"${U}0\",UUID=\"${U}0\"$L 0"
has telemetry "gpufrac_gpu_compute_granted_ratio{gpu=\"${U}0\",UUID=\"${U}0\"$L 0.30"
has feedback 'gpufrac_container_gpu_utilization_ratio{pod_uid="fb-pod",container="main",Hostname="cli-node"} 0.3700'
has feedback 'gpufrac_container_compute_correction{pod_uid="fb-pod",container="main",Hostname="cli-node"} 1.000'
out=$(cat "$tmp/xid.log")
has xid-log 'Xid 13 on GPU-00000000-1111-2222-3333-000000000000 (an application error'
has xid-log 'Xid 79 on GPU-00000000-1111-2222-3333-000000000001: GPU marked unhealthy'

if [ "$fails" != 0 ]; then echo "$fails failures"; exit 1; fi
echo "test_node_cli: all passed"
