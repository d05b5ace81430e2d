//! driftgate: a validating admission webhook that keeps GitOps-managed namespaces true to Git.
//!
//! Built as linkerd2's policy-controller is: `driftgate-core` decides (the policy language, the
//! pure decision [`decision::decide`], every plan of a side effect) and cannot reach a cluster;
//! `driftgate-kube` does the Kubernetes I/O and runs the background tasks; this crate is the
//! binary's: the HTTP server ([`server`], [`serve`]) and the CLI ([`cli`]: every command, each in
//! its own module). The two crates' modules are re-exported here under their own names, so the
//! library's paths (`driftgate::decision`, `driftgate::kube_state`) say which crate holds them.
#![forbid(unsafe_code)]

pub use driftgate_core::{
    backport, cascade, certs, decision, deletions, diff, events, fieldpath, files, ledger,
    lingering, ownership, policy, reading, reports, request, review, scan, silence, suspensions,
    text, timefmt, window,
};
pub use driftgate_kube::{
    blast_radius, event_sink, kube_state, leader, log_queue, metrics, runtime_certs, tasks,
    throttle,
};

pub mod cli;
pub mod error;
pub mod serve;
pub mod server;

pub use error::{Error, Result};
