//go:build tools

// Package tools names the program scripts/install-k8s builds from this
// module, so that `go mod tidy` records every module it needs in go.sum. It is
// never compiled.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
