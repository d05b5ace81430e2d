//! The backport ledger's I/O: `service` (the cache, the tasks, the plans applied), `writes` (the
//! API writes with their retries) and `identity`. What is written is planned in
//! `driftgate_core::ledger`.

pub mod identity;
pub mod service;
pub mod writes;
