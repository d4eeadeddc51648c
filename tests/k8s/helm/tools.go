//go:build tools

// Package tools names the program scripts/install-k8s builds from this
// module, helm, so that `go mod tidy` records every module it needs in
// go.sum. It is never compiled. Helm has a module of its own (not
// ../go.mod) so that its requirements do not raise the versions the
// Kubernetes programs are built with.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
