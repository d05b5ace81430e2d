//go:build tools

// Package flux only pins Flux's kustomize-controller; build.sh runs `go build` on its main
// package from inside this module. A module of its own: it needs newer Kubernetes libraries
// (0.36) than the control plane's k8s.io/kubernetes v1.35 pins.
package flux

import _ "github.com/fluxcd/kustomize-controller"
