//! `serve --client-ca-file`: the webhook port answers only callers whose client certificate
//! comes from a client CA and names an expected name; every other caller fails the TLS
//! handshake, so no review of theirs is read. The real binary over real TLS on loopback, with
//! certificates made by rcgen (the API server's own is tested in `tests/e2e/client_auth.rs`).

mod common;

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::scratch::scratch_dir;
use common::webhook::{
    Options, Server, Stderr, admin_get, allowed, fixture, install_crypto_provider, send_review,
    spawn_with, start_with,
};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, ClientConfig, RootCertStore};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

type Issuer = CertifiedIssuer<'static, KeyPair>;

fn ca(name: &str) -> Issuer {
    let mut params = CertificateParams::new(Vec::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A certificate and its key, as a TLS client presents them.
struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

/// A client certificate (extended key usage `purpose`) with CN `cn`, signed by `issuer`;
/// `expired` ones ended yesterday.
fn certificate(
    issuer: &Issuer,
    cn: &str,
    purpose: ExtendedKeyUsagePurpose,
    expired: bool,
) -> Identity {
    let mut params = CertificateParams::new(Vec::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![purpose];
    if expired {
        let now = SystemTime::now();
        params.not_before = (now - Duration::from_secs(3 * 86400)).into();
        params.not_after = (now - Duration::from_secs(86400)).into();
    }
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    Identity {
        chain: vec![cert.der().clone()],
        key: PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
    }
}

fn client_cert(issuer: &Issuer, cn: &str) -> Identity {
    certificate(issuer, cn, ExtendedKeyUsagePurpose::ClientAuth, false)
}

/// A TLS client (HTTP/1.1) trusting the server's development CA, presenting `identity`, and
/// speaking only `version` when given.
fn client(
    server: &Server,
    identity: Option<Identity>,
    version: Option<&'static rustls::SupportedProtocolVersion>,
) -> TlsConnector {
    client_trusting(&server.ca, identity, version)
}

/// [`client`] for a server whose serving certificate `ca_file` signed.
fn client_trusting(
    ca_file: &Path,
    identity: Option<Identity>,
    version: Option<&'static rustls::SupportedProtocolVersion>,
) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider);
    let builder = match version {
        Some(version) => builder.with_protocol_versions(&[version]),
        None => builder.with_safe_default_protocol_versions(),
    }
    .unwrap()
    .with_root_certificates(roots);
    let mut config = match identity {
        Some(identity) => builder
            .with_client_auth_cert(identity.chain, identity.key)
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

/// One review (`kubectl-edit.json`, which the example policy denies) on a new connection: the
/// answer's `allowed`, or the error that ended the connection.
async fn review(connector: &TlsConnector, server: &Server) -> io::Result<bool> {
    let tcp = TcpStream::connect(server.webhook).await?;
    let name = ServerName::try_from("localhost").unwrap();
    let mut stream = connector.connect(name, tcp).await?;
    let (status, body) = send_review(&mut stream, &fixture("kubectl-edit.json")).await?;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    Ok(allowed(&body))
}

/// The TLS alert the server refuses a new connection with. A TLS 1.2 client gets it in the
/// handshake; a TLS 1.3 client's handshake is done once it has sent its certificate, and it
/// reads the alert next (a request written first could meet the closed socket instead).
async fn refusal(connector: &TlsConnector, server: &Server) -> Option<AlertDescription> {
    refusal_at(connector, server.webhook).await
}

async fn refusal_at(connector: &TlsConnector, addr: SocketAddr) -> Option<AlertDescription> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let error = match connector.connect(name, tcp).await {
        Err(error) => error,
        Ok(mut stream) => {
            let mut byte = [0u8; 1];
            let read = stream.read(&mut byte);
            match tokio::time::timeout(Duration::from_secs(10), read).await {
                Ok(Err(error)) => error,
                Ok(Ok(n)) => panic!("the server sent {n} bytes instead of refusing"),
                Err(_) => panic!("the server neither refused nor answered within 10 s"),
            }
        }
    };
    match error.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::AlertReceived(alert) => Some(*alert),
        other => panic!("refused with {other}, not an alert"),
    }
}

#[track_caller]
fn assert_refused(alert: Option<AlertDescription>, expected: AlertDescription, who: &str) {
    assert_eq!(alert, Some(expected), "{who}");
}

fn metric(server: &Server, series: &str) -> f64 {
    let metrics = server.metrics();
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
        .parse()
        .unwrap()
}

fn write_pem(dir: &Path, name: &str, pem: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).unwrap();
    path
}

/// Replaces `path` as a ConfigMap mount's symlink swap does: all at once.
fn replace(path: &Path, contents: &str) {
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, contents).unwrap();
    std::fs::rename(&temp, path).unwrap();
}

fn authenticating(name: &str, ca_file: &Path, options: Options) -> Server {
    start_with(
        name,
        options
            .log("info", Stderr::File)
            .flag("--client-ca-file", ca_file),
    )
}

#[tokio::test]
async fn only_the_api_servers_certificate_is_answered_and_every_other_caller_fails_the_handshake() {
    install_crypto_provider();
    let dir = scratch_dir("client-auth-callers");
    let client_ca = ca("webhook client CA");
    let ca_file = write_pem(dir.path(), "client-ca.crt", &client_ca.pem());
    // No --client-name: the API server's name, kube-apiserver, is expected.
    let server = authenticating("client-auth-callers", &ca_file, Options::default());
    assert_eq!(metric(&server, "driftgate_webhook_client_auth"), 1.0);

    let api_server = client(
        &server,
        Some(client_cert(&client_ca, "kube-apiserver")),
        None,
    );
    assert!(
        !review(&api_server, &server).await.unwrap(),
        "bob's edit is answered, and denied"
    );

    let tls13 = Some(&rustls::version::TLS13);
    let tls12 = Some(&rustls::version::TLS12);
    let no_certificate = AlertDescription::CertificateRequired;
    for version in [tls13, tls12] {
        assert_refused(
            refusal(&client(&server, None, version), &server).await,
            no_certificate,
            "a client without a certificate",
        );
    }
    // A TLS 1.2 client learns it in the handshake itself.
    let tcp = TcpStream::connect(server.webhook).await.unwrap();
    let handshake = client(&server, None, tls12)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await;
    assert!(handshake.is_err(), "the TLS 1.2 handshake fails");

    let other_ca = ca("another CA");
    let refused = [
        (
            client_cert(&other_ca, "kube-apiserver"),
            AlertDescription::UnknownCA,
            "the API server's name from another CA",
        ),
        (
            certificate(
                &client_ca,
                "kube-apiserver",
                ExtendedKeyUsagePurpose::ClientAuth,
                true,
            ),
            AlertDescription::CertificateExpired,
            "an expired certificate of the client CA",
        ),
        (
            certificate(
                &client_ca,
                "kube-apiserver",
                ExtendedKeyUsagePurpose::ServerAuth,
                false,
            ),
            AlertDescription::UnsupportedCertificate,
            "a serving certificate of the client CA",
        ),
        (
            client_cert(&client_ca, "bob"),
            AlertDescription::AccessDenied,
            "another name from the client CA",
        ),
    ];
    for (identity, expected, who) in refused {
        for version in [tls13, tls12] {
            let connector = client(&server, Some(identity.clone()), version);
            assert_refused(refusal(&connector, &server).await, expected, who);
        }
    }

    // Only the API server's review was read; every refusal is counted by why.
    let reviews = "driftgate_admission_duration_seconds_count";
    assert_eq!(metric(&server, reviews), 1.0);
    let refusals = "driftgate_webhook_client_certificates_refused_total";
    assert_eq!(
        metric(&server, &format!("{refusals}{{reason=\"missing\"}}")),
        3.0
    );
    assert_eq!(
        metric(&server, &format!("{refusals}{{reason=\"untrusted\"}}")),
        6.0
    );
    assert_eq!(
        metric(&server, &format!("{refusals}{{reason=\"name\"}}")),
        2.0
    );
    // The kubelet's probes present no certificate: they are on the admin port, plain HTTP.
    assert_eq!(admin_get(server.admin, "/healthz").unwrap().0, 200);
    assert_eq!(admin_get(server.admin, "/readyz").unwrap().0, 200);
    // The API server still gets answers after all that.
    assert!(
        !review(&api_server, &server).await.unwrap(),
        "bob's edit is answered, and denied"
    );

    // The start says which mode is in force; a refusal names what was presented and expected,
    // once a minute per reason.
    let log = server.log();
    assert!(
        log.contains("webhook callers are authenticated")
            && log.contains("client_names=kube-apiserver"),
        "{log}"
    );
    let name_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("names none of the expected names"))
        .collect();
    assert_eq!(name_lines.len(), 1, "{log}");
    assert!(
        name_lines[0].contains("presented=\"CN=bob\"")
            && name_lines[0].contains("expected=kube-apiserver"),
        "{log}"
    );
    let missing_lines = log
        .lines()
        .filter(|l| l.contains("presented no client certificate"))
        .count();
    assert_eq!(missing_lines, 1, "{log}");
    assert!(
        log.contains("does not verify against the client CAs")
            && log.contains("presented=\"CN=kube-apiserver\""),
        "{log}"
    );
}

#[tokio::test]
async fn a_name_may_be_given_and_matches_exactly() {
    install_crypto_provider();
    let dir = scratch_dir("client-auth-name");
    let client_ca = ca("webhook client CA");
    let ca_file = write_pem(dir.path(), "client-ca.crt", &client_ca.pem());
    let server = authenticating(
        "client-auth-name",
        &ca_file,
        Options::default().flag("--client-name", "apiserver-webhook-client"),
    );
    let named = client_cert(&client_ca, "apiserver-webhook-client");
    assert!(
        !review(&client(&server, Some(named), None), &server)
            .await
            .unwrap(),
        "bob's edit is answered, and denied"
    );
    // The default name is not expected once a name is given.
    for cn in [
        "kube-apiserver",
        "apiserver-webhook-client-2",
        "Apiserver-Webhook-Client",
    ] {
        let connector = client(&server, Some(client_cert(&client_ca, cn)), None);
        assert_refused(
            refusal(&connector, &server).await,
            AlertDescription::AccessDenied,
            cn,
        );
    }
}

#[tokio::test]
async fn the_client_ca_file_is_reloaded_when_it_changes_and_a_bad_one_is_refused() {
    install_crypto_provider();
    let dir = scratch_dir("client-auth-reload");
    let (old_ca, new_ca) = (ca("old client CA"), ca("new client CA"));
    let ca_file = write_pem(dir.path(), "client-ca.crt", &old_ca.pem());
    let server = authenticating(
        "client-auth-reload",
        &ca_file,
        Options::default().flag("--reload-interval", "100ms"),
    );
    let old = client(&server, Some(client_cert(&old_ca, "kube-apiserver")), None);
    let new = client(&server, Some(client_cert(&new_ca, "kube-apiserver")), None);
    assert!(review(&old, &server).await.is_ok());
    assert_refused(
        refusal(&new, &server).await,
        AlertDescription::UnknownCA,
        "the new CA before the reload",
    );

    // A rotation: both CAs for a while, then the new one alone.
    replace(&ca_file, &format!("{}{}", old_ca.pem(), new_ca.pem()));
    wait_until("both CAs are trusted", || async {
        review(&new, &server).await.is_ok()
    })
    .await;
    assert!(review(&old, &server).await.is_ok());
    replace(&ca_file, &new_ca.pem());
    wait_until("the old CA is no longer trusted", || async {
        review(&old, &server).await.is_err()
    })
    .await;
    assert_refused(
        refusal(&old, &server).await,
        AlertDescription::UnknownCA,
        "the old CA after the reload",
    );
    assert_eq!(
        metric(&server, "driftgate_tls_reloads_total{result=\"success\"}"),
        2.0
    );

    // A half-written file is refused: the CAs in force stay, and it is said once.
    replace(&ca_file, "-----BEGIN CERTIFICATE-----\nMIIB\n");
    wait_until("the bad file is refused", || async {
        metric(&server, "driftgate_tls_reloads_total{result=\"failure\"}") == 1.0
    })
    .await;
    assert!(review(&new, &server).await.is_ok());
    assert!(
        server
            .log()
            .contains("client CA file refused; the client CAs in force stay"),
        "{}",
        server.log()
    );
}

#[tokio::test]
async fn without_a_client_ca_anyone_who_reaches_the_port_is_answered_and_the_log_says_so() {
    install_crypto_provider();
    let server = start_with(
        "client-auth-off",
        Options::default().log("info", Stderr::File),
    );
    assert_eq!(metric(&server, "driftgate_webhook_client_auth"), 0.0);
    assert!(
        !review(&client(&server, None, None), &server).await.unwrap(),
        "bob's edit is answered, and denied"
    );
    // A certificate nobody asked for is never sent: a client holding one is answered too.
    let stranger = client_cert(&ca("any CA"), "anyone");
    assert!(
        !review(&client(&server, Some(stranger), None), &server)
            .await
            .unwrap(),
        "bob's edit is answered, and denied"
    );
    assert!(
        server
            .log()
            .contains("webhook callers are not authenticated (no --client-ca-file)"),
        "{}",
        server.log()
    );
}

#[tokio::test]
async fn a_client_ca_file_that_does_not_load_stops_serve_with_a_sentence() {
    let dir = scratch_dir("client-auth-bad");
    let client_ca = ca("webhook client CA");
    let cert_only = {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params
            .signed_by(&KeyPair::generate().unwrap(), &client_ca)
            .unwrap()
            .pem()
    };
    let cases = [
        (
            dir.path().join("absent.crt"),
            "absent.crt: cannot be read: No such file or directory".to_owned(),
        ),
        (
            write_pem(dir.path(), "caller.crt", &cert_only),
            "caller.crt: certificate 1 of 1 (CN=kube-apiserver) is not a CA certificate".to_owned(),
        ),
    ];
    for (index, (file, expected)) in cases.into_iter().enumerate() {
        let mut server = spawn_with(
            &format!("client-auth-bad-{index}"),
            Options::default().flag("--client-ca-file", &file),
        );
        let status = wait_for_exit(&mut server);
        let mut stderr = String::new();
        io::Read::read_to_string(&mut server.child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&expected),
            "expected {expected:?} in:\n{stderr}"
        );
    }

    // A name without a CA file authenticates nobody: refused before anything starts.
    let out = common::binary::driftgate(&[
        "serve",
        "--dev",
        "--no-kube",
        "--client-name",
        "kube-apiserver",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--client-ca-file <FILE>"), "{stderr}");
}

/// Runtime mode serves the certificate in a slot the Secret's watch fills; its config is built
/// by the same function with the same client authentication, which this drives directly (the
/// Secret needs a cluster: `tests/e2e/scenarios/rotation.rs`).
#[tokio::test]
async fn runtime_certificates_are_served_under_the_same_client_authentication() {
    use driftgate::metrics::Metrics;
    use driftgate::server::client_auth::{ClientAuth, ClientAuthSettings, ExpectedNames};
    use driftgate::server::tls::{CertSlot, server_config_with_resolver};

    install_crypto_provider();
    let dir = scratch_dir("client-auth-runtime");
    let serving = driftgate::certs::generate_dev_certs(&dir.path().join("serving"), &[]).unwrap();
    let client_ca = ca("webhook client CA");
    let settings = ClientAuthSettings {
        ca_file: write_pem(dir.path(), "client-ca.crt", &client_ca.pem()),
        names: ExpectedNames::new(&[]),
    };
    let metrics = Metrics::new();
    let auth = Arc::new(ClientAuth::load(&settings, &metrics).unwrap());

    let slot = Arc::new(CertSlot::default());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&serving.cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(&serving.key).unwrap();
    let signing_key = rustls::crypto::ring::default_provider()
        .key_provider
        .load_private_key(key)
        .unwrap();
    slot.store(Arc::new(rustls::sign::CertifiedKey::new(
        chain,
        signing_key,
    )));
    let config = server_config_with_resolver(slot, Some(&auth));

    let handle = axum_server::Handle::<SocketAddr>::new();
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "served" }));
    let server = axum_server::bind_rustls(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        axum_server::tls_rustls::RustlsConfig::from_config(config),
    )
    .handle(handle.clone());
    tokio::spawn(server.serve(app.into_make_service()));
    let addr = handle.listening().await.unwrap();

    let api_server = client_trusting(
        &serving.ca_cert,
        Some(client_cert(&client_ca, "kube-apiserver")),
        None,
    );
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut stream = api_server
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    use tokio::io::AsyncWriteExt;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("served"),
        "{answer}"
    );

    let anyone = client_trusting(&serving.ca_cert, None, None);
    assert_refused(
        refusal_at(&anyone, addr).await,
        AlertDescription::CertificateRequired,
        "a client without a certificate",
    );
    handle.shutdown();
}

fn wait_for_exit(server: &mut Server) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "driftgate serve did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
