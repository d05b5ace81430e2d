// Pins OPA Gatekeeper, the peer tests/benches/apiserver_latency.rs measures with
// `--peers gatekeeper` (see build.sh). Gatekeeper's go.mod has no replace to repeat.
module driftgate.dev/tests/benches/gatekeeper

go 1.26.0

require github.com/open-policy-agent/gatekeeper/v3 v3.23.1
