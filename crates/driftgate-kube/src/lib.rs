//! driftgate's Kubernetes side: what it reads from and writes to the API server, and the tasks
//! that run beside the webhook. Every judgement it acts on comes from `driftgate-core`; this
//! crate does the I/O (the pure plan, thin I/O shape of `event_sink`).
#![forbid(unsafe_code)]

pub mod blast_radius;
pub mod event_sink;
pub mod kube_state;
pub mod leader;
pub mod ledger;
pub mod log_queue;
pub mod metrics;
pub mod runtime_certs;
pub mod tasks;
pub mod throttle;
