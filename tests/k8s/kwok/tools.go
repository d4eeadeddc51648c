//go:build tools

// KWOK, which keeps the simulated nodes Karpenter's KWOK provider buys alive
// (heartbeats, pod status), for tests/e2e/test_karpenter.py, built by
// scripts/install-autoscalers. No Go code of this project lives here.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
