//go:build tools

// Package testenv only pins the control-plane commands the e2e tests build; build.sh runs
// `go build` on each of these main packages from inside this module.
package testenv

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
