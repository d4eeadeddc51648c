#!/usr/bin/env python3
"""deploy/planner-rbac.yaml: the planner's service account may get and list
nodes, pods and ResourceClaims, and nothing else (no watch, no writes, no secrets, no
namespaced roles).  Prints 'N passed, N failed'."""
import os
import sys

import yaml

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                    "deploy", "planner-rbac.yaml")
with open(path) as f:
    docs = [d for d in yaml.safe_load_all(f) if d]
passed = failed = 0


def check(cond, what):
    global passed, failed
    print(("ok   " if cond else "FAIL ") + what)
    passed += bool(cond)
    failed += not cond


kinds = sorted(d["kind"] for d in docs)
check(kinds == ["ClusterRole", "ClusterRoleBinding", "ServiceAccount"],
      f"a ServiceAccount, a ClusterRole and its binding (got {kinds})")
sa = next((d for d in docs if d["kind"] == "ServiceAccount"), {})
name, ns = sa.get("metadata", {}).get("name"), sa.get("metadata", {}).get("namespace")
check(ns == "gpufrac-system", "the service account lives in gpufrac-system")
binding = next((d for d in docs if d["kind"] == "ClusterRoleBinding"), {})
check(binding.get("subjects") == [{"kind": "ServiceAccount", "name": name,
                                    "namespace": ns}],
      "the binding names the service account and nothing else")
role = next((d for d in docs if d["kind"] == "ClusterRole"), {})
check(binding.get("roleRef", {}).get("name") == role.get("metadata", {}).get("name"),
      "the binding grants the planner's ClusterRole")
granted = {}
for r in role.get("rules", []):
    for g in r.get("apiGroups", []):
        for res in r.get("resources", []):
            granted.setdefault((g, res), set()).update(r.get("verbs", []))
check(granted == {("", "nodes"): {"get", "list"}, ("", "pods"): {"get", "list"},
                  ("resource.k8s.io", "resourceclaims"): {"get", "list"}},
      f"exactly nodes, pods and resourceclaims, get and list (got {granted})")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
