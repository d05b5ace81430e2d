//! End-to-end tests against a real control plane: etcd, kube-apiserver and
//! kube-controller-manager built from the Kubernetes release pinned in `tests/e2e/testenv/go.mod`
//! (needs Go; the first run builds them, which takes many minutes), with `driftgate serve`
//! registered as its validating webhook.

mod claims;
mod client_auth;
mod docs;
mod faults;
mod forgeries;
mod harness;
mod ledger;
mod plugin;
mod reports;
mod restart;
mod scenarios;
mod silence;
mod smoke;
mod wiring;
