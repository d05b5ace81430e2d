//! The backport ledger: durable records of break-glass windows and the changes made in them.

pub mod evidence;
pub mod guard;
pub mod identity;
pub mod record;
pub mod service;
