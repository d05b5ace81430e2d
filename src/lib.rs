//! driftgate: a validating admission webhook that keeps GitOps-managed namespaces true to Git.
//!
//! The library holds everything testable without a cluster: the policy language
//! ([`policy`]), the pure decision ([`decision::decide`]) and the offline tools ([`cli`]: every command, each in its own module).
#![forbid(unsafe_code)]

pub mod backport;
pub mod blast_radius;
pub mod cascade;
pub mod certs;
pub mod cli;
pub mod decision;
pub mod deletions;
pub mod diff;
pub mod error;
pub mod events;
pub mod fieldpath;
pub mod kube_state;
pub mod leader;
pub mod ledger;
pub mod lingering;
pub mod metrics;
pub mod ownership;
pub mod policy;
pub mod reading;
pub mod reports;
pub mod request;
pub mod review;
pub mod scan;
pub mod serve;
pub mod server;
pub mod silence;
pub mod suspensions;
pub mod text;
mod throttle;
pub mod timefmt;
pub mod window;

pub use error::{Error, Result};
