//! The backport ledger: durable records of break-glass windows and the changes made in them.
//!
//! Pure: `record` (the CRD), `phase` (phases and transitions), `plan` (what one decision
//! writes), `claims` (what was recorded on a review's word, confirmed or withdrawn), `controller` (a controller's write judged), `upkeep` (expiry, retention, gauges),
//! `evidence`, `argocd` (Argo CD's status as evidence when it writes nothing) and `guard`. I/O: `service` (the cache, the tasks, the plans applied), `writes`
//! (the API writes with their retries) and `identity`.

pub mod argocd;
pub mod claims;
pub mod controller;
pub mod evidence;
pub mod guard;
pub mod identity;
pub mod phase;
pub mod plan;
pub mod record;
pub mod service;
pub mod upkeep;
pub mod writes;
