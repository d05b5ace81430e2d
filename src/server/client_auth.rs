//! Who may call the webhook: with `serve --client-ca-file`, the TLS handshake requires a client
//! certificate that chains to one of the CAs in that file and names one of `--client-name`
//! (its subject CN, or a DNS or URI SAN). The API server presents one when its admission
//! configuration names a kubeconfig for webhooks; any other caller fails the handshake, so no
//! review of theirs is ever read.
//!
//! Refusals are counted in `driftgate_webhook_client_certificates_refused_total{reason}`
//! (`missing`, `untrusted`, `name`) and logged at most once a minute per reason, with the
//! names the certificate presented. The CA file is reloaded when it changes, as the serving
//! certificate is; a file that does not load is refused and the CAs in force stay.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum_server::accept::Accept;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::SectionKind;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme,
};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use x509_parser::extensions::GeneralName;

use crate::error::Result;
use crate::server::polled::{Poll, Polled, poll_ticker, read_async};
use driftgate_core::certs::pem::{pem_sections, provider, read};
use driftgate_kube::metrics::{Metrics, ReasonLabels};
use driftgate_kube::throttle::Throttle;

/// The name a caller's certificate must carry when `--client-name` is not given: the API
/// server's, as Gatekeeper's `--client-cn-name` defaults to.
pub const DEFAULT_CLIENT_NAME: &str = "kube-apiserver";

// Its counter is registered with the other metrics, in `driftgate_kube`.
pub use driftgate_kube::metrics::ClientCertRefusal as Refusal;

/// `serve`'s client-authentication flags, once read.
#[derive(Clone, Debug)]
pub struct ClientAuthSettings {
    pub ca_file: PathBuf,
    pub names: ExpectedNames,
}

/// The names a caller's certificate may carry; one is enough.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedNames(Vec<String>);

impl ExpectedNames {
    /// `names`, or [`DEFAULT_CLIENT_NAME`] when none are given.
    pub fn new(names: &[String]) -> Self {
        if names.is_empty() {
            ExpectedNames(vec![DEFAULT_CLIENT_NAME.to_owned()])
        } else {
            ExpectedNames(names.to_vec())
        }
    }

    /// Whether `presented` carries one of these names, exactly, as its CN or a DNS or URI SAN.
    pub fn accepts(&self, presented: &PresentedNames) -> bool {
        presented.all().any(|name| self.0.iter().any(|n| n == name))
    }
}

impl fmt::Display for ExpectedNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(", "))
    }
}

/// The names a client certificate carries, as the name check reads them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PresentedNames {
    pub common_names: Vec<String>,
    pub dns_names: Vec<String>,
    pub uris: Vec<String>,
}

impl PresentedNames {
    /// The subject's CNs and the DNS and URI SANs of the certificate `der`; None when it does
    /// not parse as X.509.
    pub fn of(der: &[u8]) -> Option<PresentedNames> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let common_names = cert
            .subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
            .collect();
        let mut names = PresentedNames {
            common_names,
            ..PresentedNames::default()
        };
        if let Ok(Some(sans)) = cert.subject_alternative_name() {
            for san in &sans.value.general_names {
                match san {
                    GeneralName::DNSName(dns) => names.dns_names.push((*dns).to_owned()),
                    GeneralName::URI(uri) => names.uris.push((*uri).to_owned()),
                    _ => {}
                }
            }
        }
        Some(names)
    }

    fn all(&self) -> impl Iterator<Item = &str> {
        self.common_names
            .iter()
            .chain(&self.dns_names)
            .chain(&self.uris)
            .map(String::as_str)
    }
}

impl fmt::Display for PresentedNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = (self.common_names.iter().map(|n| format!("CN={n}")))
            .chain(self.dns_names.iter().map(|n| format!("DNS={n}")))
            .chain(self.uris.iter().map(|n| format!("URI={n}")))
            .collect();
        if parts.is_empty() {
            f.write_str("no CN and no DNS or URI name")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// The client CAs in force: rustls' WebPKI verifier over them.
#[derive(Debug)]
struct Trust {
    verifier: Arc<dyn ClientCertVerifier>,
}

/// A client CA file's problem, said as the serving pair's are.
fn tls_error(path: &Path, reason: impl Into<String>) -> crate::Error {
    driftgate_core::certs::pem::tls_error(path, reason).into()
}

/// Parses the PEM bundle `pem` (read from `path`) into the verifier of the client CAs: at
/// least one certificate, each a CA, and no private key.
fn trust_from_pem(path: &Path, pem: &[u8]) -> Result<Trust> {
    let mut cas = Vec::new();
    for section in pem_sections(path, pem) {
        match section? {
            (SectionKind::Certificate, der) => cas.push(CertificateDer::from(der)),
            (
                SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey,
                _,
            ) => {
                return Err(tls_error(
                    path,
                    "holds a private key; the client CA file must hold only the PEM CA \
                     certificates that sign the API server's client certificate",
                ));
            }
            _ => {}
        }
    }
    if cas.is_empty() {
        return Err(tls_error(
            path,
            "holds no certificate (no -----BEGIN CERTIFICATE----- block); expected the PEM CA \
             certificates that sign the API server's client certificate",
        ));
    }
    let mut roots = RootCertStore::empty();
    let count = cas.len();
    for (index, ca) in cas.into_iter().enumerate() {
        let which = format!("certificate {} of {count}", index + 1);
        let (_, parsed) = x509_parser::parse_x509_certificate(&ca).map_err(|e| {
            tls_error(
                path,
                format!("{which} is not a valid X.509 certificate: {e}"),
            )
        })?;
        // RFC 5280 requires CA:TRUE of a CA; a caller's own certificate here is a mistake that
        // would otherwise only show as every handshake failing.
        let is_ca = matches!(parsed.basic_constraints(), Ok(Some(c)) if c.value.ca);
        if !is_ca {
            return Err(tls_error(
                path,
                format!(
                    "{which} ({}) is not a CA certificate (no basicConstraints CA:TRUE): the \
                     file holds the CAs that sign callers' certificates, not a caller's own \
                     certificate",
                    parsed.subject()
                ),
            ));
        }
        roots
            .add(ca)
            .map_err(|e| tls_error(path, format!("{which} cannot be a trust anchor: {e}")))?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| tls_error(path, format!("cannot verify client certificates: {e}")))?;
    Ok(Trust { verifier })
}

/// Takes a refusal's turn at the warning: Some(n) when one is due now, with the `n` refusals
/// of that reason not logged since. One throttle per reason, so that a port scanner's missing
/// certificates never hide the API server's name mismatch.
fn warning_due(throttle: &Mutex<Throttle>) -> Option<u64> {
    throttle.lock().unwrap_or_else(|e| e.into_inner()).failure()
}

/// The webhook's client-certificate verifier: the client CAs in force (swapped whole when the
/// file changes) and the expected names.
pub struct ClientAuth {
    ca_file: PathBuf,
    names: ExpectedNames,
    trust: ArcSwap<Trust>,
    refused: Family<ReasonLabels, Counter>,
    untrusted_warning: Mutex<Throttle>,
    name_warning: Mutex<Throttle>,
}

impl fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientAuth")
            .field("ca_file", &self.ca_file)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl ClientAuth {
    /// Reads `settings.ca_file` (a file that does not load is an error naming it and why), and
    /// sets `driftgate_webhook_client_auth` to 1.
    pub fn load(settings: &ClientAuthSettings, metrics: &Metrics) -> Result<ClientAuth> {
        let pem = read(&settings.ca_file)?;
        let trust = trust_from_pem(&settings.ca_file, &pem)?;
        metrics.webhook_client_auth.set(1);
        Ok(ClientAuth {
            ca_file: settings.ca_file.clone(),
            names: settings.names.clone(),
            trust: ArcSwap::from_pointee(trust),
            refused: metrics.webhook_client_certificates_refused.clone(),
            untrusted_warning: Mutex::default(),
            name_warning: Mutex::default(),
        })
    }

    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    pub fn names(&self) -> &ExpectedNames {
        &self.names
    }

    /// Counts a certificate that did not verify against the client CAs, and logs it (throttled).
    fn refuse_untrusted(&self, presented: Option<&PresentedNames>, reason: &str) {
        let why = "it does not verify against the client CAs";
        self.refuse(
            Refusal::Untrusted,
            &self.untrusted_warning,
            why,
            presented,
            reason,
        );
    }

    /// Counts a certificate of a client CA that names none of the expected names, and logs it
    /// (throttled).
    fn refuse_name(&self, presented: Option<&PresentedNames>) {
        let why = "it names none of the expected names (--client-name, as CN or a DNS or URI SAN)";
        self.refuse(
            Refusal::Name,
            &self.name_warning,
            why,
            presented,
            "no expected name",
        );
    }

    fn refuse(
        &self,
        refusal: Refusal,
        throttle: &Mutex<Throttle>,
        why: &str,
        presented: Option<&PresentedNames>,
        reason: &str,
    ) {
        count(&self.refused, refusal).inc();
        let Some(suppressed) = warning_due(throttle) else {
            return;
        };
        let presented = presented.map_or_else(
            || "an unreadable certificate".to_owned(),
            ToString::to_string,
        );
        tracing::warn!(
            presented,
            expected = %self.names,
            reason,
            client_ca_file = %self.ca_file.display(),
            suppressed,
            "a webhook caller's client certificate was refused at the TLS handshake: {why}; \
             no review of it was read"
        );
    }

    /// Swaps in the CAs of the file's new contents.
    fn reload(&self, pem: &[u8]) -> Result<()> {
        let trust = trust_from_pem(&self.ca_file, pem)?;
        self.trust.store(Arc::new(trust));
        Ok(())
    }
}

fn count(refused: &Family<ReasonLabels, Counter>, refusal: Refusal) -> Counter {
    refused
        .get_or_create(&ReasonLabels {
            reason: refusal.label().to_owned(),
        })
        .clone()
}

impl ClientCertVerifier for ClientAuth {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    /// No hints: the CAs are swapped on reload, and a borrowed list cannot follow them. With an
    /// empty list a client sends the certificate it has (Go's client, the API server's, always
    /// does).
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        let presented = PresentedNames::of(end_entity);
        let trust = self.trust.load();
        if let Err(error) = trust
            .verifier
            .verify_client_cert(end_entity, intermediates, now)
        {
            self.refuse_untrusted(presented.as_ref(), &error.to_string());
            return Err(error);
        }
        match &presented {
            Some(names) if self.names.accepts(names) => Ok(ClientCertVerified::assertion()),
            _ => {
                self.refuse_name(presented.as_ref());
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::ApplicationVerificationFailure,
                ))
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.trust
            .load()
            .verifier
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.trust
            .load()
            .verifier
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.trust.load().verifier.supported_verify_schemes()
    }
}

/// The webhook port's outermost acceptor: says at debug level where each connection came from
/// and how its TLS handshake ended (the peer address is what a NetworkPolicy matches: the chart
/// README's "NetworkPolicy: the API server's source" reads it from here), and counts
/// (`reason="missing"`) and logs at most once a minute, as a warning, a handshake refused
/// because the caller sent no client certificate: rustls refuses it before any verifier is
/// asked. Without client authentication no handshake is refused so.
#[derive(Clone)]
pub struct HandshakeLog<A> {
    inner: A,
    missing: Counter,
    warning: Arc<Mutex<Throttle>>,
}

impl<A> HandshakeLog<A> {
    /// In front of `inner`, the TLS acceptor.
    pub fn new(inner: A, metrics: &Metrics) -> Self {
        HandshakeLog {
            inner,
            missing: count(
                &metrics.webhook_client_certificates_refused,
                Refusal::Missing,
            ),
            warning: Arc::default(),
        }
    }
}

impl<A, S> Accept<TcpStream, S> for HandshakeLog<A>
where
    A: Accept<TcpStream, S>,
    A::Future: Send + 'static,
{
    type Stream = A::Stream;
    type Service = A::Service;
    type Future =
        Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send + 'static>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "unknown".to_owned(), |addr| addr.to_string());
        let handshake = self.inner.accept(stream, service);
        let missing = self.missing.clone();
        let warning = self.warning.clone();
        Box::pin(async move {
            let result = handshake.await;
            match &result {
                Ok(_) => tracing::debug!(peer = %peer, "webhook connection: TLS handshake done"),
                Err(error) if presented_no_certificate(error) => {
                    missing.inc();
                    match warning_due(&warning) {
                        Some(suppressed) => tracing::warn!(
                            peer = %peer,
                            suppressed,
                            "a webhook caller presented no client certificate and was refused at \
                             the TLS handshake; if it is the API server, its admission \
                             configuration names no client certificate for this webhook (see the \
                             chart README, \"Authenticating the API server\")"
                        ),
                        None => {
                            tracing::debug!(peer = %peer, "webhook connection refused: no client certificate")
                        }
                    }
                }
                Err(error) => {
                    tracing::debug!(peer = %peer, %error, "webhook connection: TLS handshake failed");
                }
            }
            result
        })
    }
}

/// Whether a failed handshake failed because the client sent no certificate.
fn presented_no_certificate(error: &io::Error) -> bool {
    error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .is_some_and(|e| matches!(e, rustls::Error::NoCertificatesPresented))
}

/// What the CA file held at one poll, or why it could not be read.
type Snapshot = std::result::Result<Vec<u8>, String>;

/// Watches `--client-ca-file` (polling every `interval`) and swaps in its CAs when it changes:
/// new handshakes verify against them, established connections keep theirs. A file that does
/// not load is refused: the CAs in force stay, a line is logged and
/// `driftgate_tls_reloads_total{result="failure"}` counts it, as for the serving certificate.
/// Stops when `shutdown` is cancelled.
pub fn spawn_client_ca_reloader(
    auth: Arc<ClientAuth>,
    interval: Duration,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    let read_file = |path: &Path| read(path).map_err(|e| e.to_string());
    // What `load` read a moment ago; a change since then is seen by the first poll.
    let mut polled = Polled::<Snapshot>::new();
    polled.loaded(read_file(&auth.ca_file));
    tokio::spawn(async move {
        let mut ticker = poll_ticker(interval);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = ticker.tick() => {}
            }
            let snapshot = match read_async(&auth.ca_file).await {
                Ok(pem) => Ok(pem),
                Err(e) => Err(e.to_string()),
            };
            let snapshot = match polled.observe(snapshot) {
                Poll::Unchanged => continue,
                Poll::Changed => {
                    tracing::debug!(client_ca_file = %auth.ca_file.display(), "client CA file changed; reloading once it is stable");
                    continue;
                }
                Poll::Stable(snapshot) => snapshot,
            };
            let loaded = match &snapshot {
                Ok(pem) => auth.reload(pem).map_err(|e| e.to_string()),
                Err(reason) => Err(reason.clone()),
            };
            match loaded {
                Ok(()) => {
                    Metrics::count_result(&metrics.tls_reloads, true);
                    tracing::info!(client_ca_file = %auth.ca_file.display(), "client CAs reloaded; new connections are verified against them");
                    polled.loaded(snapshot);
                }
                Err(reason) => {
                    Metrics::count_result(&metrics.tls_reloads, false);
                    tracing::warn!(
                        client_ca_file = %auth.ca_file.display(),
                        reason,
                        "client CA file refused; the client CAs in force stay, and the file is \
                         tried again when it next changes"
                    );
                    polled.refused(snapshot);
                }
            }
        }
        tracing::debug!(client_ca_file = %auth.ca_file.display(), "client CA watch stopped");
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType,
    };

    fn ca() -> CertifiedIssuer<'static, KeyPair> {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "client CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    }

    fn leaf(
        issuer: &CertifiedIssuer<'static, KeyPair>,
        cn: &str,
        sans: Vec<SanType>,
    ) -> rcgen::Certificate {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.subject_alt_names = sans;
        params
            .signed_by(&KeyPair::generate().unwrap(), issuer)
            .unwrap()
    }

    #[test]
    fn a_name_is_matched_exactly_as_cn_dns_or_uri() {
        let issuer = ca();
        let expected = ExpectedNames::new(&[
            "kube-apiserver".to_owned(),
            "spiffe://cluster.local/apiserver".to_owned(),
        ]);
        let names = |cert: rcgen::Certificate| PresentedNames::of(cert.der()).unwrap();
        assert!(expected.accepts(&names(leaf(&issuer, "kube-apiserver", vec![]))));
        let by_dns = names(leaf(
            &issuer,
            "other",
            vec![SanType::DnsName("kube-apiserver".try_into().unwrap())],
        ));
        assert!(expected.accepts(&by_dns));
        assert_eq!(by_dns.to_string(), "CN=other, DNS=kube-apiserver");
        let by_uri = names(leaf(
            &issuer,
            "other",
            vec![SanType::URI(
                "spiffe://cluster.local/apiserver".try_into().unwrap(),
            )],
        ));
        assert!(expected.accepts(&by_uri));
        for refused in ["bob", "kube-apiserver-kubelet-client", "Kube-Apiserver"] {
            assert!(
                !expected.accepts(&names(leaf(&issuer, refused, vec![]))),
                "{refused}"
            );
        }
    }

    #[test]
    fn without_names_the_api_servers_is_expected() {
        assert_eq!(ExpectedNames::new(&[]).to_string(), DEFAULT_CLIENT_NAME);
    }

    #[test]
    fn a_bundle_of_cas_loads_and_anything_else_is_refused_with_a_sentence() {
        let path = Path::new("client-ca.crt");
        let (first, second) = (ca(), ca());
        let bundle = format!("{}{}", first.pem(), second.pem());
        trust_from_pem(path, bundle.as_bytes()).unwrap();

        let refusal = |pem: &str| {
            trust_from_pem(path, pem.as_bytes())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refusal(""),
            "client-ca.crt: holds no certificate (no -----BEGIN CERTIFICATE----- block); \
             expected the PEM CA certificates that sign the API server's client certificate"
        );
        // Without basicConstraints (rcgen's default), and with CA:FALSE.
        let caller = leaf(&first, "kube-apiserver", vec![]);
        let error = refusal(&format!("{}{}", first.pem(), caller.pem()));
        assert!(
            error.contains("certificate 2 of 2 (CN=kube-apiserver) is not a CA certificate"),
            "{error}"
        );
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "leaf");
        params.is_ca = IsCa::ExplicitNoCa;
        let explicit = params
            .signed_by(&KeyPair::generate().unwrap(), &first)
            .unwrap();
        let error = refusal(&explicit.pem());
        assert!(
            error.contains("certificate 1 of 1 (CN=leaf) is not a CA certificate"),
            "{error}"
        );
        let key = KeyPair::generate().unwrap().serialize_pem();
        assert!(
            refusal(&format!("{}{key}", first.pem())).contains("holds a private key"),
            "a key in the CA file"
        );
        assert!(
            refusal("-----BEGIN CERTIFICATE-----\nMIIB\n").contains("is not valid PEM"),
            "a cut-off file"
        );
    }
}
