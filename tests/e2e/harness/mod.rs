//! The e2e harness: a real etcd, kube-apiserver and kube-controller-manager (one per test
//! binary), test identities with client certificates and RBAC, kubectl and kube-rs clients as
//! each of them, and `driftgate serve` as a real process registered as the API server's
//! validating webhook.
// Each test module uses a different subset of these helpers.
#![allow(dead_code)]

#[path = "../../common/admin.rs"]
pub mod admin;
pub mod argocd;
pub mod capture;
pub mod chart;
pub mod control_plane;
pub mod driftgate;
pub mod flux;
pub mod forge;
#[path = "../../common/log_file.rs"]
pub mod log_file;
pub mod node;
pub mod pki;
pub mod policy_report_crd;
pub mod process;
pub mod proxy;
pub mod review_fixtures;
pub mod testenv;

#[allow(unused_imports)]
pub use control_plane::{
    ADMIN, ALICE, BOB, ControlPlane, DRIFTGATE, FLUX, HPA, Identity, KUBE_CONTROLLER_MANAGER,
    KubectlOutput, control_plane,
};
#[allow(unused_imports)]
pub use driftgate::{
    Driftgate, driftgate_cli, policies_webhook_configuration, records_webhook_configuration,
    repo_path, shared, webhook_configuration,
};

// rustls needs a process-wide crypto provider before kube-rs builds a TLS client; the one the
// server installs.
#[allow(unused_imports)]
pub use ::driftgate::server::tls::install_crypto_provider;
