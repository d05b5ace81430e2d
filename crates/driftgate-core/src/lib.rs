//! driftgate's pure core: everything decided from what is given, with the clock passed in.
//!
//! The policy language ([`policy`]), a review read ([`review`], [`request`], [`reading`]) and
//! decided ([`decision`], [`window`]), what a decision calls for ([`events`], the ledger's plans in
//! [`ledger`], [`silence`], [`suspensions`], [`lingering`], [`reports`]), and the offline tools'
//! logic ([`backport`], [`scan`], the certificates' rotation plan in [`certs`]).
//!
//! This crate does not depend on a Kubernetes client, tokio or axum: the Kubernetes side is
//! `driftgate-kube`, the HTTP server and CLI the `driftgate` binary.
#![forbid(unsafe_code)]

pub mod applied;
pub mod backport;
pub mod cascade;
pub mod certs;
pub mod decision;
pub mod deletions;
pub mod diff;
pub mod error;
pub mod events;
pub mod fieldpath;
pub mod files;
pub mod ledger;
pub mod lingering;
pub mod ownership;
pub mod policy;
pub mod reading;
pub mod records;
pub mod reports;
pub mod request;
pub mod review;
pub mod scan;
pub mod silence;
pub mod suspensions;
pub mod text;
pub mod timefmt;
pub mod window;

pub use error::{Error, Result};
