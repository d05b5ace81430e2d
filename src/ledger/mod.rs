//! The backport ledger: durable records of break-glass windows and the changes made in them.

pub mod evidence;
pub mod record;
pub mod service;
