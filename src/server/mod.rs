//! The webhook service: `POST /validate` on the TLS port, health and metrics on the admin port.

pub mod tls;
