//go:build tools

// Package tools names the CNI plugins scripts/install-k8s builds from this
// module (loopback, bridge, host-local: the pod network of the one-node
// cluster in tests/e2e/test_node.py), so that `go mod tidy` records every
// module they need in go.sum. It is never compiled.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
)
