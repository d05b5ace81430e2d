//! The backport records themselves: the `BackportRequirement` CRD (`record`) and its phases and
//! transitions (`phase`). Data the decision reads (the ledger guards its records) and the
//! ledger's plans write, so it sits below both.

pub mod phase;
pub mod record;
