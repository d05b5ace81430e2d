//! The control-plane binaries: kube-apiserver, etcd and kubectl, built from the Go module in
//! `tests/e2e/testenv/` by its `build.sh` (once per machine; later runs find them cached).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

pub const GO_MISSING: &str =
    "driftgate e2e: Go is missing: install Go >= 1.25 (apt-get install golang or from go.dev)";

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
    pub fn kubectl(&self) -> PathBuf {
        self.dir.join("kubectl")
    }
}

/// The binaries, built on first use. A cold build takes many minutes; `build.sh` reports its
/// progress on stderr, which is not captured by the test harness, so it shows while it runs.
pub fn binaries() -> &'static Binaries {
    static BINARIES: OnceLock<Binaries> = OnceLock::new();
    BINARIES.get_or_init(build)
}

fn build() -> Binaries {
    // build.sh also looks in /usr/local/go/bin, where go.dev's tarball installs.
    let on_path = Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !on_path && !Path::new("/usr/local/go/bin/go").is_file() {
        panic!("{GO_MISSING}");
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/testenv/build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed ({}); its output is above",
        script.display(),
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = PathBuf::from(
        stdout
            .lines()
            .last()
            .unwrap_or_else(|| panic!("{} printed no directory", script.display()))
            .trim(),
    );
    let binaries = Binaries { dir };
    for binary in [
        binaries.etcd(),
        binaries.kube_apiserver(),
        binaries.kubectl(),
    ] {
        assert!(binary.is_file(), "{} was not built", binary.display());
    }
    binaries
}
