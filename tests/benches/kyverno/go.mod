// Pins Kyverno's admission controller, the peer tests/benches/apiserver_latency.rs measures with
// `--peers kyverno` (see build.sh). The replace is Kyverno v1.19.1's own (its fork of
// k8s.io/pod-security-admission): a module that requires Kyverno must repeat it, or the build
// fails; build.sh checks that it still matches Kyverno's go.mod.
module driftgate.dev/tests/benches/kyverno

go 1.26.6

require github.com/kyverno/kyverno v1.19.1

replace k8s.io/pod-security-admission => github.com/kyverno/pod-security-admission v0.0.0-20251031094455-46f20778634f
