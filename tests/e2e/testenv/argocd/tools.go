//go:build tools

// Package argocd only pins Argo CD; build.sh runs `go build` on its multi-call binary
// (github.com/argoproj/argo-cd/v3/cmd) from inside this module. A module of its own: it needs
// other Kubernetes libraries (0.34) than the control plane's and Flux's modules.
package argocd

import _ "github.com/argoproj/argo-cd/v3/cmd"
