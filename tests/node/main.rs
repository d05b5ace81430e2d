//! End-to-end tests on a real node: containerd, kubelet and kube-proxy (`harness::node`) joined
//! to a control plane of this binary's own, where driftgate runs from its image as pods, as users
//! run it. A binary apart from `tests/e2e` because its cluster is bare (no driftgate CRD or RBAC
//! applied beforehand: helm installs them) and because its pods run: the e2e suite's shared
//! driftgate, and its records webhook, would judge what an installed driftgate writes.
//! Needs root, Go, `nft`, and what `image/build.sh` needs (the musl target, musl-tools, jq).

#[path = "../e2e/harness/mod.rs"]
mod harness;
mod helm;
mod pod;
