//! The backport ledger: durable records of break-glass windows and the changes made in them.
//!
//! All pure: `record` (the CRD), `phase` (phases and transitions), `plan` (what one decision
//! writes), `claims` (what was recorded on a review's word, confirmed or withdrawn),
//! `controller` (a controller's write judged), `upkeep` (expiry, retention, gauges), `evidence`,
//! `argocd` (Argo CD's status as evidence when it writes nothing) and `guard`. The I/O that
//! applies the plans is `driftgate_kube::ledger`.

pub mod argocd;
pub mod claims;
pub mod controller;
pub mod evidence;
pub mod guard;
pub mod phase;
pub mod plan;
pub mod record;
pub mod upkeep;
