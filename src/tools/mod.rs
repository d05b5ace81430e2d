//! Commands for people on call: break-glass windows (and, with the ledger, the backport backlog).

pub mod backlog;
pub mod break_glass;
pub mod version;
