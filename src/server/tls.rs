//! The serving certificate: loaded with rustls (ring provider), and reloaded when its files
//! change, without dropping connections.
//!
//! A reload swaps the `ServerConfig` that new handshakes use; connections already established
//! keep the session they negotiated, so nothing in flight is dropped. With `serve
//! --client-ca-file`, every config requires the caller's client certificate (`client_auth`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject, SectionKind};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ParsedCertificate, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{InconsistentKeys, ServerConfig};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::server::client_auth::ClientAuth;

/// The certificate chain and private key files (PEM), e.g. a mounted `kubernetes.io/tls` Secret.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Installs ring as the process-wide rustls crypto provider; safe to call more than once.
pub fn install_crypto_provider() {
    // An error only means a provider is already installed (by an earlier call, or by a library
    // that got there first); either way there is a default, which is all callers need.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The provider our server configs use. Chosen explicitly rather than taken from the process
/// default, so a config is the same whether or not `install_crypto_provider` ran first.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
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

pub(crate) fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}

pub(crate) async fn read_async(path: &Path) -> Result<Vec<u8>> {
    tokio::fs::read(path).await.map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}

pub(crate) fn tls_error(path: &Path, reason: impl Into<String>) -> Error {
    Error::Tls {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// The PEM sections in `pem` (read from `path`), of any kind, in file order; a section that
/// does not parse is an error naming the file.
pub(crate) fn pem_sections<'a>(
    path: &'a Path,
    pem: &'a [u8],
) -> impl Iterator<Item = Result<(SectionKind, Vec<u8>)>> + 'a {
    <(SectionKind, Vec<u8>)>::pem_slice_iter(pem).map(move |section| {
        section.map_err(|e| {
            tls_error(
                path,
                format!(
                    "is not valid PEM ({}); is the file complete?",
                    pem_problem(&e)
                ),
            )
        })
    })
}

/// What is wrong with a PEM text, in words: pki-types prints the marker lines as byte lists,
/// which no one can read, so they are shown as text here.
pub(crate) fn pem_problem(error: &pem::Error) -> String {
    match error {
        // `end_marker` holds only the label, e.g. `CERTIFICATE`.
        pem::Error::MissingSectionEnd { end_marker } => format!(
            "no -----END {}----- line",
            String::from_utf8_lossy(end_marker)
        ),
        pem::Error::IllegalSectionStart { line } => {
            format!("illegal section start: {:?}", String::from_utf8_lossy(line))
        }
        other => other.to_string(),
    }
}

/// Parses the PEM certificate chain in `pem` (read from `path`): at least one certificate,
/// leaf first, each one well-formed DER.
pub(crate) fn parse_cert_chain(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    let mut chain = Vec::new();
    for section in pem_sections(path, pem) {
        match section? {
            (SectionKind::Certificate, der) => chain.push(CertificateDer::from(der)),
            // A certificate file is treated as public (copied into caBundles, pasted in
            // tickets), so a key in it is a leak waiting to happen: refuse it.
            (
                SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey,
                _,
            ) => {
                return Err(tls_error(
                    path,
                    "holds a private key; the certificate file must hold only the PEM \
                     certificate chain (leaf first), and the key its own file",
                ));
            }
            _ => {}
        }
    }
    if chain.is_empty() {
        return Err(tls_error(
            path,
            "holds no certificate (no -----BEGIN CERTIFICATE----- block); expected the PEM \
             certificate chain, leaf first",
        ));
    }
    // PEM only says the base64 decodes; parse the DER too, so a corrupt certificate is refused
    // here rather than failing every handshake later.
    for (index, cert) in chain.iter().enumerate() {
        if let Err(e) = ParsedCertificate::try_from(cert) {
            return Err(tls_error(
                path,
                format!(
                    "certificate {} of {} is not a valid X.509 certificate: {e}",
                    index + 1,
                    chain.len()
                ),
            ));
        }
    }
    Ok(chain)
}

/// Parses the one private key in `pem` (read from `path`): PKCS#8, PKCS#1 or SEC1.
fn parse_private_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>> {
    let mut keys: Vec<PrivateKeyDer<'static>> = Vec::new();
    for section in pem_sections(path, pem) {
        let (kind, der) = section?;
        // `from_pem` keeps the three private-key kinds (PKCS#8, PKCS#1, SEC1) and drops the rest.
        keys.extend(PrivateKeyDer::from_pem(kind, der));
    }
    match keys.len() {
        0 => Err(tls_error(
            path,
            "holds no private key (no -----BEGIN PRIVATE KEY----- or EC/RSA PRIVATE KEY \
             block); expected the PEM private key of the serving certificate",
        )),
        // Which of several keys was meant is a guess we should not make.
        1 => Ok(keys.pop().expect("one key")),
        n => Err(tls_error(
            path,
            format!("holds {n} private keys; keep only the key of the serving certificate"),
        )),
    }
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

/// Parses and checks a serving pair (parsable, key matches certificate); `files` name where
/// the PEM came from in any error (a Secret's keys are named the same way as files).
pub(crate) fn certified_key_from_pem(
    files: &TlsFiles,
    cert: &[u8],
    key: &[u8],
) -> Result<CertifiedKey> {
    let chain = parse_cert_chain(&files.cert, cert)?;
    let key = parse_private_key(&files.key, key)?;
    let signing_key = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| tls_error(&files.key, format!("is not a usable private key: {e}")))?;
    let certified = CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        Ok(()) => Ok(certified),
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            Err(Error::TlsKeyMismatch {
                cert: files.cert.clone(),
                key: files.key.clone(),
            })
        }
        // Includes "cannot tell" (a key that does not reveal its public half): serving a pair
        // we could not check is how a mismatch reaches production.
        Err(e) => Err(tls_error(
            &files.key,
            format!(
                "cannot be checked against the certificate in {}: {e}",
                files.cert.display()
            ),
        )),
    }
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

/// The serving certificate of runtime mode: swapped in place when the Secret changes, so new
/// handshakes get the new certificate while established connections keep theirs. Empty until
/// the first certificate is stored; a handshake then fails (no certificate to offer).
#[derive(Debug, Default)]
pub struct CertSlot(arc_swap::ArcSwapOption<CertifiedKey>);

impl CertSlot {
    pub fn store(&self, certified: Arc<CertifiedKey>) {
        self.0.store(Some(certified));
    }

    pub fn is_loaded(&self) -> bool {
        self.0.load().is_some()
    }
}

impl ResolvesServerCert for CertSlot {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.load_full()
    }
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

/// A polled source's memory, for the reloaders of certificate files: what is serving, what was
/// refused, what is settling. `S` is what one poll read.
#[derive(Debug)]
pub(crate) struct Polled<S> {
    /// The contents in force; None when they have never loaded.
    serving: Option<S>,
    /// Contents already refused, so a bad file is logged and counted once, not every poll.
    refused: Option<S>,
    /// Contents seen once and not yet acted on. A change is applied only when two polls in a
    /// row agree, so a writer that replaces files one after the other is not caught halfway
    /// (a new certificate with the old key) and reported as a failed reload.
    settling: Option<S>,
}

/// What one poll calls for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Poll<S> {
    /// Nothing new: what is serving, or what was refused already.
    Unchanged,
    /// A change seen for the first time; acted on if the next poll agrees.
    Changed,
    /// A change two polls agree on: load it, then report [`Polled::loaded`] or
    /// [`Polled::refused`].
    Stable(S),
}

impl<S: PartialEq> Polled<S> {
    pub(crate) fn new() -> Self {
        Polled {
            serving: None,
            refused: None,
            settling: None,
        }
    }

    pub(crate) fn observe(&mut self, snapshot: S) -> Poll<S> {
        if self.serving.as_ref() == Some(&snapshot) {
            // Unchanged, or changed back to what is serving: nothing to do, nothing pending.
            self.settling = None;
            self.refused = None;
            return Poll::Unchanged;
        }
        if self.refused.as_ref() == Some(&snapshot) {
            self.settling = None;
            return Poll::Unchanged;
        }
        if self.settling.as_ref() != Some(&snapshot) {
            self.settling = Some(snapshot);
            return Poll::Changed;
        }
        self.settling = None;
        Poll::Stable(snapshot)
    }

    /// `snapshot` is in force now.
    pub(crate) fn loaded(&mut self, snapshot: S) {
        self.serving = Some(snapshot);
        self.refused = None;
    }

    /// `snapshot` was refused; it is not tried again until the contents change.
    pub(crate) fn refused(&mut self, snapshot: S) {
        self.refused = Some(snapshot);
    }

    /// At start, contents that did not load: left to the polls, which refuse them only if they
    /// stay that way.
    pub(crate) fn pending(&mut self, snapshot: S) {
        self.settling = Some(snapshot);
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

/// The ticker of a file poll every `interval`.
pub(crate) fn poll_ticker(interval: Duration) -> tokio::time::Interval {
    // tokio's interval panics on zero; a busy loop would be no better.
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
    // After a stall, poll once rather than in a burst.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT_START: &[u8] = b"-----BEGIN CERTIFICATE-----\nMIIB\n";

    #[test]
    fn a_cut_off_certificate_names_the_missing_end_line() {
        let error = parse_cert_chain(Path::new("tls.crt"), CERT_START).unwrap_err();
        assert_eq!(
            error.to_string(),
            "tls.crt: is not valid PEM (no -----END CERTIFICATE----- line); is the file complete?"
        );
    }

    #[test]
    fn a_broken_begin_line_is_quoted_as_text() {
        let error = parse_private_key(Path::new("tls.key"), b"-----BEGIN PRIVATE KEY---\n")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("illegal section start: \"-----BEGIN PRIVATE KEY---\""),
            "{error}"
        );
    }
}
