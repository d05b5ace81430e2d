//! The backport ledger: durable records of break-glass windows and the changes made in them.
//!
//! All pure: `plan` (what one decision writes), `claims` (what was recorded on a review's word,
//! confirmed or withdrawn), `controller` (a controller's write judged), `upkeep` (expiry,
//! retention, gauges), `evidence` and `argocd` (Argo CD's status as evidence when it writes
//! nothing). The records themselves are `records`, their guard `decision::ledger_guard`; the
//! I/O that applies the plans is `driftgate_kube::ledger`.

pub mod argocd;
pub mod claims;
pub mod controller;
pub mod evidence;
pub mod plan;
pub mod upkeep;

// The records and their phases live below the decision (`records`); here is where the ledger
// has always named them.
pub use crate::records::{phase, record};
