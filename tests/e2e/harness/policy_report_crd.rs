//! The PolicyReport CRD (wgpolicyk8s.io/v1alpha2, tests/fixtures/crds/) is cluster-wide, and two
//! tests need it in different states: `reports.rs` starts without it, `forgeries.rs` installs
//! it. One test at a time holds it, and it is removed when the holder lets go, whether the test
//! passed or panicked: a failing test must not fail the next one with a leftover CRD.

use std::sync::{Mutex, MutexGuard, PoisonError};

use super::{ADMIN, control_plane, repo_path};

pub const NAME: &str = "policyreports.wgpolicyk8s.io";

static HOLDER: Mutex<()> = Mutex::new(());

/// The right to install the CRD; dropping it removes the CRD.
pub struct PolicyReportCrd {
    _held: MutexGuard<'static, ()>,
}

impl PolicyReportCrd {
    /// Waits for the other test to let go (a panicking holder poisons nothing that matters:
    /// its Drop has removed the CRD).
    pub fn hold() -> Self {
        PolicyReportCrd {
            _held: HOLDER.lock().unwrap_or_else(PoisonError::into_inner),
        }
    }

    pub fn installed(&self) -> bool {
        control_plane()
            .kubectl(ADMIN, &["get", "crd", NAME])
            .success()
    }

    /// Applies the upstream schema and waits until the API server serves it.
    pub fn install(&self) {
        let crd = std::fs::read_to_string(repo_path(&format!("tests/fixtures/crds/{NAME}.yaml")))
            .expect("the CRD fixture reads");
        control_plane().apply(ADMIN, &crd).ok();
        control_plane()
            .kubectl(
                ADMIN,
                &[
                    "wait",
                    "--for=condition=Established",
                    &format!("crd/{NAME}"),
                    "--timeout=60s",
                ],
            )
            .ok();
    }
}

impl Drop for PolicyReportCrd {
    fn drop(&mut self) {
        // Not `.ok()`: a panic while the test is already unwinding would abort the run.
        let out = control_plane().kubectl(
            ADMIN,
            &["delete", "crd", NAME, "--ignore-not-found", "--wait=true"],
        );
        if !out.success() {
            eprintln!("the {NAME} CRD could not be removed:\n{}", out.stderr);
        }
    }
}
