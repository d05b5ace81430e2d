//! The serving certificate: loaded with rustls (ring provider), and reloaded when its files
//! change, without dropping connections.
//!
//! CONTRACT (implementation pending).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::metrics::Metrics;

/// The certificate chain and private key files (PEM), e.g. a mounted `kubernetes.io/tls` Secret.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Installs ring as the process-wide rustls crypto provider; safe to call more than once.
pub fn install_crypto_provider() {
    unimplemented!("tls: pending")
}

/// Reads and checks the pair (parsable, key matches certificate), and builds a server config
/// offering TLS 1.2 and 1.3 with ALPN `h2` and `http/1.1`.
pub async fn load_rustls_config(files: &TlsFiles) -> Result<RustlsConfig> {
    let _ = files;
    unimplemented!("tls: pending")
}

/// Watches the files (polling every `interval`; symlink swaps included) and reloads `config`
/// when they change. A pair that does not parse or does not match is refused: the old
/// certificate keeps serving, a line is logged and `driftgate_tls_reloads_total{result="failure"}`
/// counts it. Stops when `shutdown` is cancelled.
pub fn spawn_tls_reloader(
    config: RustlsConfig,
    files: TlsFiles,
    interval: Duration,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    let _ = (config, files, interval, metrics, shutdown);
    unimplemented!("tls: pending")
}
