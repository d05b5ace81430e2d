//! The serving certificate: loaded with rustls (ring provider), and reloaded when its files
//! change, without dropping connections.
//!
//! A reload swaps the `ServerConfig` that new handshakes use; connections already established
//! keep the session they negotiated, so nothing in flight is dropped. With `serve
//! --client-ca-file`, every config requires the caller's client certificate (`client_auth`).

use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use driftgate_core::certs::pem::{certified_key_from_pem, provider, read};
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use driftgate_kube::metrics::Metrics;

use crate::error::Result;
use crate::server::client_auth::ClientAuth;
use crate::server::polled::{Poll, Polled, poll_ticker, read_async};

// Where the files and the slot are, for those who build a server config.
pub use driftgate_core::certs::pem::TlsFiles;
pub use driftgate_kube::runtime_certs::CertSlot;

/// Installs ring as the process-wide rustls crypto provider; safe to call more than once.
pub fn install_crypto_provider() {
    // An error only means a provider is already installed (by an earlier call, or by a library
    // that got there first); either way there is a default, which is all callers need.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Reads and checks the pair (parsable, key matches certificate), and builds a server config
/// offering TLS 1.2 and 1.3 with ALPN `h2` and `http/1.1`, requiring a client certificate when
/// `client_auth` is given.
pub async fn load_rustls_config(
    files: &TlsFiles,
    client_auth: Option<&Arc<ClientAuth>>,
) -> Result<RustlsConfig> {
    let cert = read_async(&files.cert).await?;
    let key = read_async(&files.key).await?;
    let config = server_config_from_pem(files, &cert, &key, client_auth)?;
    Ok(RustlsConfig::from_config(config))
}

/// The synchronous core of [`load_rustls_config`] without client authentication: reads the
/// pair and builds the server config.
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>> {
    let cert = read(&files.cert)?;
    let key = read(&files.key)?;
    server_config_from_pem(files, &cert, &key, None)
}

/// Serves the one certificate whatever the client asks for (SNI included).
#[derive(Debug)]
struct SingleCert(Arc<CertifiedKey>);

impl ResolvesServerCert for SingleCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// Builds the server config from the PEM contents of `files`; every check happens here, so
/// the first load and every reload refuse exactly the same things.
fn server_config_from_pem(
    files: &TlsFiles,
    cert: &[u8],
    key: &[u8],
    client_auth: Option<&Arc<ClientAuth>>,
) -> Result<Arc<ServerConfig>> {
    let certified = certified_key_from_pem(files, cert, key)?;
    Ok(server_config_with_resolver(
        Arc::new(SingleCert(Arc::new(certified))),
        client_auth,
    ))
}

/// TLS 1.2 and 1.3 with ALPN `h2` and `http/1.1`, certificates from `resolver`; with
/// `client_auth`, every handshake requires a client certificate that it accepts.
pub fn server_config_with_resolver(
    resolver: Arc<dyn ResolvesServerCert>,
    client_auth: Option<&Arc<ClientAuth>>,
) -> Arc<ServerConfig> {
    let versions = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .expect("the ring provider supports TLS 1.2 and 1.3");
    let mut config = match client_auth {
        Some(client_auth) => {
            let mut config = versions
                .with_client_cert_verifier(client_auth.clone())
                .with_cert_resolver(resolver);
            // A resumed session skips the client certificate's verification: it would keep a
            // caller authenticated by a CA since removed from --client-ca-file. The API server
            // (Go's TLS client without a session cache) never resumes, so nothing is lost.
            config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
            config
        }
        None => versions.with_no_client_auth().with_cert_resolver(resolver),
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// What the two files held at one poll: their contents, or why they could not be read.
/// Contents rather than mtimes, because a Secret mount swaps a `..data` symlink and the
/// files' own mtimes need not change.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Snapshot(std::result::Result<(Vec<u8>, Vec<u8>), String>);

impl Snapshot {
    fn read(files: &TlsFiles) -> Snapshot {
        let contents = read(&files.cert).and_then(|cert| Ok((cert, read(&files.key)?)));
        Snapshot(contents.map_err(|e| e.to_string()))
    }

    async fn read_async(files: &TlsFiles) -> Snapshot {
        let contents = match read_async(&files.cert).await {
            Ok(cert) => read_async(&files.key).await.map(|key| (cert, key)),
            Err(e) => Err(e),
        };
        Snapshot(contents.map_err(|e| e.to_string()))
    }
}

/// The reloader's memory: the config it swaps and the files' state.
struct Reloader {
    config: RustlsConfig,
    files: TlsFiles,
    client_auth: Option<Arc<ClientAuth>>,
    metrics: Arc<Metrics>,
    polled: Polled<Snapshot>,
}

impl Reloader {
    fn build(&self, snapshot: &Snapshot) -> std::result::Result<Arc<ServerConfig>, String> {
        let (cert, key) = snapshot.0.as_ref().map_err(Clone::clone)?;
        server_config_from_pem(&self.files, cert, key, self.client_auth.as_ref())
            .map_err(|e| e.to_string())
    }

    /// Takes the files as they are at startup as the truth: `config` may have been loaded from
    /// them a moment ago or from something else, and only a rebuild makes sure. Files that do
    /// not load are left to the first poll, which refuses them only if they stay that way.
    fn start(&mut self, snapshot: Snapshot) {
        match self.build(&snapshot) {
            Ok(config) => {
                self.config.reload_from_config(config);
                self.polled.loaded(snapshot);
            }
            Err(_) => self.polled.pending(snapshot),
        }
    }

    fn observe(&mut self, snapshot: Snapshot) {
        let snapshot = match self.polled.observe(snapshot) {
            Poll::Unchanged => return,
            Poll::Changed => {
                tracing::debug!(
                    cert = %self.files.cert.display(),
                    key = %self.files.key.display(),
                    "serving certificate files changed; reloading once they are stable"
                );
                return;
            }
            Poll::Stable(snapshot) => snapshot,
        };
        match self.build(&snapshot) {
            Ok(config) => {
                self.config.reload_from_config(config);
                Metrics::count_result(&self.metrics.tls_reloads, true);
                tracing::info!(
                    cert = %self.files.cert.display(),
                    key = %self.files.key.display(),
                    "serving certificate reloaded; new connections use it"
                );
                self.polled.loaded(snapshot);
            }
            Err(reason) => self.refuse(snapshot, &reason),
        }
    }

    fn refuse(&mut self, snapshot: Snapshot, reason: &str) {
        Metrics::count_result(&self.metrics.tls_reloads, false);
        tracing::warn!(
            cert = %self.files.cert.display(),
            key = %self.files.key.display(),
            reason,
            "serving certificate files refused; the previous certificate keeps serving, and \
             the files are tried again when they next change"
        );
        self.polled.refused(snapshot);
    }
}

/// Watches the files (polling every `interval`; symlink swaps included) and reloads `config`
/// when they change, keeping `client_auth` (the same one `config` was loaded with). A pair that
/// does not parse or does not match is refused: the old certificate keeps serving, a line is
/// logged and `driftgate_tls_reloads_total{result="failure"}` counts it. Stops when `shutdown`
/// is cancelled.
///
/// The files are read once before this returns and `config` is rebuilt from them (not counted
/// as a reload), so a change between loading `config` and starting the watch is not missed.
/// A change is applied after two polls agree on it, i.e. within two intervals. Must be called
/// within a Tokio runtime.
pub fn spawn_tls_reloader(
    config: RustlsConfig,
    files: TlsFiles,
    client_auth: Option<Arc<ClientAuth>>,
    interval: Duration,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    let mut reloader = Reloader {
        config,
        files,
        client_auth,
        metrics,
        polled: Polled::new(),
    };
    reloader.start(Snapshot::read(&reloader.files));
    tokio::spawn(async move {
        let mut ticker = poll_ticker(interval);
        ticker.tick().await; // the first tick is immediate, and the files were just read
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = ticker.tick() => {}
            }
            let snapshot = Snapshot::read_async(&reloader.files).await;
            reloader.observe(snapshot);
        }
        tracing::debug!(cert = %reloader.files.cert.display(), "serving certificate watch stopped");
    })
}
