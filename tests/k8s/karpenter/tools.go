//go:build tools

// Karpenter with its KWOK cloud provider, for tests/e2e/test_karpenter.py,
// built by scripts/install-autoscalers. No Go code of this project lives here.
package tools

import _ "sigs.k8s.io/karpenter/kwok"
