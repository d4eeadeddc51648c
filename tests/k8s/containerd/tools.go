//go:build tools

// Package tools names the programs scripts/install-k8s builds from this
// module (containerd, its runc shim and ctr, the container runtime of
// tests/e2e/test_node.py), so that `go mod tidy` records every module they
// need in go.sum. It is never compiled. containerd has a module of its own
// so that its requirements do not change the Kubernetes programs' build.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
