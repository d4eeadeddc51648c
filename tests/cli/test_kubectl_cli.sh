#!/usr/bin/env bash
# kubectl gpufrac without a cluster: the name it answers to (the
# kubectl-gpufrac symlink the build and `cmake --install` make), usage
# errors, and a kubeconfig that cannot be read.  The plugin against a real
# control plane: tests/e2e/test_kubectl_plugin.py.
# Env: GPUFRAC (the binary), BUILD_DIR (its build tree, for the install).
set -u
. "$(dirname "$0")/check.sh"
plugin="$(dirname "$GPUFRAC")/kubectl-gpufrac"

[ "$(readlink "$plugin")" = gpufrac ] && { echo "ok   build symlink"; pass=$((pass + 1)); } ||
  { echo "FAIL build symlink: $plugin -> $(readlink "$plugin")"; fail=$((fail + 1)); }
check "plugin --help" 0 '^usage: kubectl gpufrac top' -- "$plugin" --help
check "gpufrac kubectl --help" 0 'why-pending POD' -- "$GPUFRAC" kubectl --help
check "gpufrac help lists it" 0 'kubectl +the kubectl plugin' -- "$GPUFRAC" help
check "no subcommand" 2 '^usage: kubectl gpufrac' -- "$plugin"
check "unknown subcommand" 2 '^usage' -- "$plugin" frobnicate
check "describe needs pod NAME" 2 '^usage' -- "$plugin" describe pod
check "describe a node" 2 '^usage' -- "$plugin" describe node n1
check "unknown flag" 2 "unknown flag '--frob'" -- "$plugin" top --frob
check "flag without value" 2 '--context needs a value' -- "$plugin" top --context
check "plugin --version" 0 '^kubectl gpufrac [0-9]+\.[0-9]+\.[0-9]+$' -- "$plugin" --version
check "plugin doctor --help" 0 '^usage: gpufrac doctor' -- "$plugin" doctor --help
check "plugin doctor bad flag" 2 "kubectl gpufrac doctor: unknown option '--frob'" -- "$plugin" doctor --frob
check "bad -o" 2 'the formats are json and yaml' -- "$plugin" top -o wide
check "bad -o, attached" 2 '-o table: the formats' -- "$plugin" top -otable
check "missing kubeconfig" 1 "$tmp/nope" -- "$plugin" top --kubeconfig "$tmp/nope"
check "KUBECONFIG's first file" 1 "$tmp/first" -- \
  env KUBECONFIG="$tmp/first:$tmp/second" "$plugin" top
printf 'apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\ncurrent-context: ""\n' >"$tmp/empty.yaml"
check "unknown context" 1 'nowhere' -- "$plugin" top --kubeconfig "$tmp/empty.yaml" --context nowhere
check "version subcommand" 0 '^kubectl gpufrac [0-9]+\.[0-9]+\.[0-9]+$' -- "$plugin" version
check "--extender not a URL" 2 "extender 'not a url'" -- \
  "$plugin" why-pending p --kubeconfig "$tmp/nope" --extender 'not a url'

# An API server that answers what a real one never would (a real HTTP
# server on loopback, python's): a 200 that is not a Pod, HTTP 500 for the
# nodes; and a pod whose FailedScheduling message is not in
# kube-scheduler's "N nodes are available" form.  Issue 30 follow-up,
# items 4 and 6.
cat >"$tmp/api.py" <<'PY'
import http.server, json, os, sys
POD = {"kind": "Pod", "apiVersion": "v1",
       "metadata": {"name": "dra", "namespace": "default", "uid": "u1"},
       "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}}
EV = {"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": [
    {"reason": "FailedScheduling", "type": "Warning",
     "involvedObject": {"uid": "u1", "name": "dra"},
     "message": "0/2 nodes are available: device class gpu.gpufrac.io does "
                "not exist. preemption: not eligible."}]}
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def answer(self, code, doc):
        b = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_GET(self):
        with open(sys.argv[2], "a") as f:
            f.write(self.path + "\n")
        p = self.path.split("?")[0]
        if p == "/version" and os.path.exists(sys.argv[1] + ".garbage"):
            b = b"<html>a captive portal</html>"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)
        elif p == "/version":
            self.answer(200, {"major": "1", "minor": "37",
                              "gitVersion": "v1.37.2"})
        elif p == "/apis/apps/v1/namespaces/gpufrac-system/daemonsets":
            self.answer(200, {"kind": "DaemonSetList", "metadata": {}, "items": [
                {"metadata": {"name": "gpufrac-node"}, "spec": {"template": {
                    "spec": {"containers": [{"name": "agent",
                                             "command": ["gpufrac", "node"]}]}}}}]})
        elif p == "/api/v1/namespaces/gpufrac-system/pods":
            self.answer(200, {"kind": "PodList", "metadata": {}, "items": [
                {"metadata": {"name": "gpufrac-node-" + x},
                 "spec": {"nodeName": n}, "status": {"phase": "Pending"}}
                for x, n in (("w7zgf", "n1"), ("cjx96", "n2"))]})
        elif p == "/api/v1/namespaces/default/pods/notapod":
            self.answer(200, {"kind": "ConfigMap", "data": {}})
        elif p == "/api/v1/namespaces/default/pods/dra":
            self.answer(200, POD)
        elif p == "/api/v1/namespaces/default/events":
            self.answer(200, EV)
        elif p == "/api/v1/nodes" and os.path.exists(sys.argv[1]):
            self.answer(500, {"kind": "Status", "message": "boom"})
        elif p == "/api/v1/nodes":
            self.answer(200, {"kind": "NodeList", "metadata": {}, "items": [
                {"metadata": {"name": n}, "status": {"allocatable": {}}}
                for n in ("n1", "n2")]})
        else:
            self.answer(404, {"kind": "Status", "message": "no " + p})
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_port, flush=True)
s.serve_forever()
PY
python3 "$tmp/api.py" "$tmp/nodes500" "$tmp/req.log" >"$tmp/api.port" &
api_pid=$!
for _ in $(seq 300); do [ -s "$tmp/api.port" ] && break; sleep 0.1; done
port=$(cat "$tmp/api.port")
cat >"$tmp/fake.kc" <<KC
apiVersion: v1
kind: Config
clusters: [{name: f, cluster: {server: "http://127.0.0.1:$port"}}]
users: [{name: u, user: {}}]
contexts: [{name: f, context: {cluster: f, user: u}}]
current-context: f
KC
check "describe: a 200 that is not a Pod" 1 'not a Pod' -- \
  "$plugin" describe pod notapod --kubeconfig "$tmp/fake.kc"
touch "$tmp/nodes500"
check "HTTP 500 names the server" 1 "127\.0\.0\.1:$port.*HTTP 500|HTTP 500.*127\.0\.0\.1:$port" -- \
  "$plugin" top --kubeconfig "$tmp/fake.kc"
rm "$tmp/nodes500"
check "why-pending: a message not in the usual form, verbatim" 0 \
  'device class gpu\.gpufrac\.io does not exist' -- \
  "$plugin" why-pending dra --kubeconfig "$tmp/fake.kc"
dead=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
check "why-pending: unreachable extender is a failure" 1 "extender http://127\.0\.0\.1:$dead" -- \
  "$plugin" why-pending dra --kubeconfig "$tmp/fake.kc" --extender "http://127.0.0.1:$dead"

# gpufrac doctor (issue 30 follow-up, item 5): -n is a DNS-1123 label,
# checked before any request; the API server answers sanely first, else
# one failure and nothing else; a failure and its fix name the same pod.
: >"$tmp/req.log"
check "doctor -n not a label" 2 'DNS-1123' -- \
  "$plugin" doctor --kubeconfig "$tmp/fake.kc" -n 'x/../../../api/v1/nodes?'
if [ -s "$tmp/req.log" ]; then
  echo "FAIL doctor -n: requests sent:"; sed 's/^/  | /' "$tmp/req.log"; fail=$((fail + 1))
else
  echo "ok   doctor -n: no request sent"; pass=$((pass + 1))
fi
cat >"$tmp/dead.kc" <<KC
apiVersion: v1
kind: Config
clusters: [{name: f, cluster: {server: "http://127.0.0.1:$dead"}}]
users: [{name: u, user: {}}]
contexts: [{name: f, context: {cluster: f, user: u}}]
current-context: f
KC
one_failure() { # NAME KUBECONFIG PATTERN
  "$GPUFRAC" doctor --kubeconfig "$2" >"$tmp/out" 2>&1
  local rc=$? lines
  lines=$(grep -cE '^(PASS|FAIL|SKIP)' "$tmp/out")
  if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && grep -qE "^FAIL +api-server .*$3" "$tmp/out" &&
    ! grep -q 'helm upgrade' "$tmp/out"; then
    echo "ok   $1"; pass=$((pass + 1))
  else
    echo "FAIL $1: exit $rc, $lines check lines"; sed 's/^/  | /' "$tmp/out" | head -8; fail=$((fail + 1))
  fi
}
one_failure "doctor: API server unreachable" "$tmp/dead.kc" "127\.0\.0\.1:$dead"
touch "$tmp/nodes500.garbage"
one_failure "doctor: API server answers garbage" "$tmp/fake.kc" "127\.0\.0\.1:$port"
rm "$tmp/nodes500.garbage"
"$GPUFRAC" doctor --kubeconfig "$tmp/fake.kc" >"$tmp/out" 2>&1
agents=$(grep -A1 -E '^FAIL +agents' "$tmp/out")
if echo "$agents" | head -1 | grep -q 'gpufrac-node-w7zgf' &&
  echo "$agents" | tail -1 | grep -q 'describe pod gpufrac-node-w7zgf' &&
  ! echo "$agents" | grep -q cjx96; then
  echo "ok   doctor: the failure and its fix name the same pod"; pass=$((pass + 1))
else
  echo "FAIL doctor: the agents check:"; sed 's/^/  | /' "$tmp/out" | head -12; fail=$((fail + 1))
fi
kill "$api_pid"

# cmake --install puts the symlink beside the binary.
if cmake --install "$BUILD_DIR" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 &&
  [ "$(readlink "$tmp/prefix/bin/kubectl-gpufrac")" = gpufrac ] &&
  [ -x "$tmp/prefix/bin/gpufrac" ]; then
  echo "ok   install: bin/kubectl-gpufrac -> gpufrac"; pass=$((pass + 1))
else
  echo "FAIL install:"; sed 's/^/  | /' "$tmp/install.log" | tail -5; ls -l "$tmp/prefix/bin" 2>&1 | sed 's/^/  | /'
  fail=$((fail + 1))
fi
check "installed plugin runs" 0 '^usage: kubectl gpufrac' -- "$tmp/prefix/bin/kubectl-gpufrac" --help

echo "kubectl cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
