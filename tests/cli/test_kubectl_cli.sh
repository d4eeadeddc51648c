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
