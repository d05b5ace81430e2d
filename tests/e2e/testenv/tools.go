//go:build tools

// Package testenv only pins the Kubernetes commands the e2e tests build: build.sh runs `go build`
// on the control plane's from inside this module, node/build.sh on the node's (kubelet,
// kube-proxy) and kube-scheduler's, so that both come from one k8s.io/kubernetes.
package testenv

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
