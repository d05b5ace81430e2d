//go:build tools

// Package kyverno only pins Kyverno; build.sh runs `go build` on its admission controller's main
// package from inside this module. A module of its own, apart from tests/e2e/testenv: Kyverno
// needs its own Kubernetes library versions and its pod-security-admission fork.
package kyverno

import _ "github.com/kyverno/kyverno/cmd/kyverno"
