//! The control-plane binaries: kube-apiserver, kube-controller-manager, etcd and kubectl, built
//! from the Go module in `tests/e2e/testenv/` by its `build.sh` (once per machine; later runs
//! find them cached).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

pub const GO_MISSING: &str = "driftgate e2e: Go is missing or older than 1.25: install Go >= 1.25 (from go.dev, or apt-get install golang where it is that new: Debian 12 has 1.19)";

pub struct Binaries {
    pub dir: PathBuf,
}

impl Binaries {
    pub fn etcd(&self) -> PathBuf {
        self.dir.join("etcd")
    }
    pub fn kube_apiserver(&self) -> PathBuf {
        self.dir.join("kube-apiserver")
    }
    pub fn kube_controller_manager(&self) -> PathBuf {
        self.dir.join("kube-controller-manager")
    }
    pub fn kubectl(&self) -> PathBuf {
        self.dir.join("kubectl")
    }
}

/// The binaries, built on first use (Go is needed only then). A cold build takes many minutes;
/// `build.sh` reports its progress on stderr, which the test harness does not capture, so it
/// shows while it runs.
pub fn binaries() -> &'static Binaries {
    static BINARIES: OnceLock<Binaries> = OnceLock::new();
    BINARIES.get_or_init(build)
}

fn build() -> Binaries {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/testenv/build.sh");
    let dir = run_build_script(&script, GO_MISSING);
    let binaries = Binaries { dir };
    for binary in [
        binaries.etcd(),
        binaries.kube_apiserver(),
        binaries.kube_controller_manager(),
        binaries.kubectl(),
    ] {
        assert!(binary.is_file(), "{} was not built", binary.display());
    }
    binaries
}

/// Runs one of the testenv build scripts and returns the directory it prints on its last line.
/// Its progress goes to stderr, uncaptured, so it shows while it runs; exit code 3 means Go is
/// missing or too old (`go_missing` says what to install).
pub fn run_build_script(script: &Path, go_missing: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    if out.status.code() == Some(3) {
        panic!("{go_missing}");
    }
    assert!(
        out.status.success(),
        "{} failed ({}); its output is above",
        script.display(),
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(
        stdout
            .lines()
            .last()
            .unwrap_or_else(|| panic!("{} printed no directory", script.display()))
            .trim(),
    )
}
