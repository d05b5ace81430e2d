//! The serving certificate over real TLS on loopback: `certs dev`, loading, keep-alive, and
//! rotation (good and bad) while clients keep connecting. No mocks: a real axum-server, real
//! handshakes with tokio-rustls, real files.

mod common;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use driftgate::Error;
use driftgate::certs::{DEFAULT_HOSTS, DevCertPaths, ensure_dev_certs, generate_dev_certs};
use driftgate::metrics::Metrics;
use driftgate::server::tls::{
    TlsFiles, install_crypto_provider, load_rustls_config, spawn_tls_reloader,
};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use rustls::{CertificateError, ClientConfig, ProtocolVersion, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::sync::CancellationToken;

use common::mount_secret;
use common::scratch::scratch_dir;

const RELOAD_INTERVAL: Duration = Duration::from_millis(100);

/// A certificate reloader polling `files` every RELOAD_INTERVAL, with its own metrics.
struct Watching {
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    reloader: tokio::task::JoinHandle<()>,
}

fn watch(config: RustlsConfig, files: &TlsFiles) -> Watching {
    let metrics = Arc::new(Metrics::new());
    let shutdown = CancellationToken::new();
    let reloader = spawn_tls_reloader(
        config,
        files.clone(),
        None,
        RELOAD_INTERVAL,
        metrics.clone(),
        shutdown.clone(),
    );
    Watching {
        metrics,
        shutdown,
        reloader,
    }
}

fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("driftgate=debug")
        .with_test_writer()
        .try_init();
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn leaf(cert_file: &Path) -> CertificateDer<'static> {
    CertificateDer::pem_slice_iter(&read(cert_file))
        .next()
        .expect("a certificate")
        .unwrap()
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Replaces `path` the way a careful writer does: a temporary file renamed over it.
fn replace(path: &Path, contents: &[u8]) {
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, contents).unwrap();
    std::fs::rename(&temp, path).unwrap();
}

/// A TLS client trusting only the CAs in `ca_files`, speaking HTTP/1.1.
fn client<P: AsRef<Path>>(ca_files: &[P]) -> TlsConnector {
    client_with(ca_files, ClientConfig::builder())
}

fn client_with<P: AsRef<Path>>(
    ca_files: &[P],
    builder: rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier>,
) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for ca in ca_files {
        for cert in CertificateDer::pem_slice_iter(&read(ca.as_ref())) {
            roots.add(cert.unwrap()).unwrap();
        }
    }
    let mut config = builder.with_root_certificates(roots).with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

async fn connect(
    connector: &TlsConnector,
    addr: SocketAddr,
    server_name: &str,
) -> io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(server_name.to_owned()).expect("a valid server name");
    connector.connect(name, tcp).await
}

/// The certificate error a failed handshake ended with, if that is why it failed.
fn certificate_error(error: &io::Error) -> Option<&CertificateError> {
    match error.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(e) => Some(e),
        _ => None,
    }
}

fn presented_leaf(stream: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    stream
        .get_ref()
        .1
        .peer_certificates()
        .expect("a server certificate")[0]
        .clone()
}

/// One HTTP/1.1 GET on `stream`, reading exactly one response so that the connection can carry
/// the next request. Returns the body; anything but a kept-alive 200 is an error.
async fn http_get(stream: &mut TlsStream<TcpStream>, path: &str) -> io::Result<String> {
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::other("connection closed before a response"));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200 ") {
        return Err(io::Error::other(format!("unexpected response: {head}")));
    }
    if head.contains("\r\nconnection: close") {
        return Err(io::Error::other("the server closed the connection"));
    }
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .ok_or_else(|| io::Error::other("no content-length"))?
        .trim()
        .parse()
        .map_err(io::Error::other)?;
    while buf.len() < header_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::other("connection closed mid-body"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8(buf[header_end..header_end + length].to_vec()).map_err(io::Error::other)
}

/// A tiny axum app over TLS on an ephemeral loopback port; `/whoami` answers with the client's
/// address, which tells one connection from another.
struct Server {
    addr: SocketAddr,
    handle: Handle<SocketAddr>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

async fn serve(config: RustlsConfig) -> Server {
    let app = Router::new().route(
        "/whoami",
        get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
    );
    let handle = Handle::<SocketAddr>::new();
    let server = axum_server::bind_rustls(SocketAddr::from(([127, 0, 0, 1], 0)), config)
        .handle(handle.clone());
    tokio::spawn(async move {
        server
            .serve(app.into_make_service_with_connect_info::<SocketAddr>())
            .await
            .expect("the test server runs");
    });
    let addr = handle.listening().await.expect("the test server listens");
    Server { addr, handle }
}

/// Polls `check` until it gives a value, failing after a few seconds.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn tls_reloads(metrics: &Metrics, result: &str) -> u64 {
    let prefix = format!("driftgate_tls_reloads_total{{result=\"{result}\"}} ");
    let text = metrics.encode();
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
        .parse()
        .unwrap()
}

fn pair(paths: &DevCertPaths) -> TlsFiles {
    paths.tls_files()
}

#[tokio::test]
async fn dev_serving_cert_verifies_against_its_ca_for_every_default_name() {
    install_crypto_provider();
    let dir = scratch_dir("tls-dev-names");
    let paths = generate_dev_certs(&dir.path().join("out"), &[]).unwrap();
    for file in [&paths.ca_cert, &paths.ca_key, &paths.cert, &paths.key] {
        assert!(file.is_file(), "{} missing", file.display());
    }
    assert_eq!(mode(&paths.ca_key), 0o600);
    assert_eq!(mode(&paths.key), 0o600);
    let other = generate_dev_certs(&dir.path().join("other"), &[]).unwrap();

    let server = serve(load_rustls_config(&pair(&paths), None).await.unwrap()).await;
    let trusting_ca = client(&[&paths.ca_cert]);
    for name in DEFAULT_HOSTS {
        let mut stream = connect(&trusting_ca, server.addr, name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(presented_leaf(&stream), leaf(&paths.cert));
        http_get(&mut stream, "/whoami").await.unwrap();
    }
    // The checks are real: a name the certificate lacks, and another CA, are refused.
    let error = connect(&trusting_ca, server.addr, "evil.example.com")
        .await
        .unwrap_err();
    assert!(
        matches!(
            certificate_error(&error),
            Some(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            )
        ),
        "{error}"
    );
    let error = connect(&client(&[&other.ca_cert]), server.addr, "localhost")
        .await
        .unwrap_err();
    assert_eq!(
        certificate_error(&error),
        Some(&CertificateError::UnknownIssuer),
        "{error}"
    );
}

#[tokio::test]
async fn certs_dev_command_adds_hosts_and_writes_private_keys() {
    install_crypto_provider();
    let dir = scratch_dir("tls-dev-command");
    let out_dir = dir.path().join("certs");
    let out = Command::new(env!("CARGO_BIN_EXE_driftgate"))
        .args(["certs", "dev", "--out"])
        .arg(&out_dir)
        .args(["--host", "webhook.example.com", "--host", "10.1.2.3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&out_dir.display().to_string()), "{stdout}");
    assert!(stdout.contains("webhook.example.com, 10.1.2.3"), "{stdout}");
    assert!(stdout.contains("hint: "), "{stdout}");
    let paths = DevCertPaths::in_dir(&out_dir);
    assert_eq!(mode(&paths.ca_key), 0o600);
    assert_eq!(mode(&paths.key), 0o600);
    // No temporary files are left behind.
    let mut names: Vec<_> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["ca.crt", "ca.key", "tls.crt", "tls.key"]);

    let server = serve(load_rustls_config(&pair(&paths), None).await.unwrap()).await;
    let trusting_ca = client(&[&paths.ca_cert]);
    for name in ["webhook.example.com", "10.1.2.3", "localhost", "127.0.0.1"] {
        let mut stream = connect(&trusting_ca, server.addr, name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        http_get(&mut stream, "/whoami").await.unwrap();
    }

    let out = Command::new(env!("CARGO_BIN_EXE_driftgate"))
        .args(["certs", "dev", "--out"])
        .arg(dir.path().join("bad"))
        .args(["--host", "not a host"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("--host \"not a host\" is neither a DNS name"),
        "{stderr}"
    );
    assert!(!dir.path().join("bad").exists());
}

#[test]
fn ensure_dev_certs_generates_missing_keeps_good_and_replaces_broken() {
    let dir = scratch_dir("tls-ensure");
    let out = dir.path().join("certs");
    let paths = ensure_dev_certs(&out).unwrap();
    let first_ca = read(&paths.ca_cert);

    ensure_dev_certs(&out).unwrap();
    assert_eq!(read(&paths.ca_cert), first_ca, "good certificates are kept");

    std::fs::remove_file(&paths.ca_key).unwrap();
    ensure_dev_certs(&out).unwrap();
    let second_ca = read(&paths.ca_cert);
    assert_ne!(second_ca, first_ca, "a missing file regenerates");
    assert!(paths.ca_key.is_file());

    // A key from another issuance: the pair no longer loads.
    let other = generate_dev_certs(&dir.path().join("other"), &[]).unwrap();
    replace(&paths.key, &read(&other.key));
    ensure_dev_certs(&out).unwrap();
    assert_ne!(
        read(&paths.ca_cert),
        second_ca,
        "a mismatched pair regenerates"
    );
    driftgate::server::tls::server_config(&pair(&paths)).unwrap();
    let third_ca = read(&paths.ca_cert);

    // A serving pair that loads but was signed by another CA.
    replace(&paths.cert, &read(&other.cert));
    replace(&paths.key, &read(&other.key));
    ensure_dev_certs(&out).unwrap();
    assert_ne!(
        read(&paths.ca_cert),
        third_ca,
        "a foreign serving pair regenerates"
    );
}

#[tokio::test]
async fn several_requests_share_one_kept_alive_tls_connection() {
    install_crypto_provider();
    let dir = scratch_dir("tls-keep-alive");
    let paths = generate_dev_certs(dir.path(), &[]).unwrap();
    let server = serve(load_rustls_config(&pair(&paths), None).await.unwrap()).await;

    let mut stream = connect(&client(&[&paths.ca_cert]), server.addr, "localhost")
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let local = stream.get_ref().0.local_addr().unwrap().to_string();
    for _ in 0..5 {
        // The server saw every request come from this one socket.
        assert_eq!(http_get(&mut stream, "/whoami").await.unwrap(), local);
    }
    assert_eq!(server.handle.connection_count(), 1);
}

#[tokio::test]
async fn offers_h2_and_http11_over_tls12_and_tls13() {
    install_crypto_provider();
    let dir = scratch_dir("tls-protocols");
    let paths = generate_dev_certs(dir.path(), &[]).unwrap();
    let server = serve(load_rustls_config(&pair(&paths), None).await.unwrap()).await;

    let stream = connect(&client(&[&paths.ca_cert]), server.addr, "localhost")
        .await
        .unwrap();
    assert_eq!(
        stream.get_ref().1.protocol_version(),
        Some(ProtocolVersion::TLSv1_3)
    );

    let tls12 = client_with(
        &[&paths.ca_cert],
        ClientConfig::builder_with_protocol_versions(&[&rustls::version::TLS12]),
    );
    let stream = connect(&tls12, server.addr, "localhost").await.unwrap();
    assert_eq!(
        stream.get_ref().1.protocol_version(),
        Some(ProtocolVersion::TLSv1_2)
    );

    let mut config = (*client(&[&paths.ca_cert]).config().clone()).clone();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let stream = connect(
        &TlsConnector::from(Arc::new(config)),
        server.addr,
        "localhost",
    )
    .await
    .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_is_picked_up_while_clients_keep_connecting() {
    init_logging();
    install_crypto_provider();
    let dir = scratch_dir("tls-rotation");
    let a = generate_dev_certs(&dir.path().join("a"), &[]).unwrap();
    let b = generate_dev_certs(&dir.path().join("b"), &[]).unwrap();
    let (leaf_a, leaf_b) = (leaf(&a.cert), leaf(&b.cert));
    let mount = dir.path().join("mount");
    std::fs::create_dir(&mount).unwrap();
    let files = mount_secret(&mount, "v1", &a);

    let config = load_rustls_config(&files, None).await.unwrap();
    let server = serve(config.clone()).await;
    let Watching {
        metrics,
        shutdown,
        reloader,
    } = watch(config, &files);

    // A connection opened before the rotation, kept alive across it.
    let mut kept = connect(&client(&[&a.ca_cert]), server.addr, "localhost")
        .await
        .unwrap();
    let kept_peer = http_get(&mut kept, "/whoami").await.unwrap();

    // A client trusting both CAs, opening a fresh connection per request throughout: whichever
    // certificate the server presents, it must never fail.
    let outcomes: Arc<Mutex<Vec<Result<CertificateDer<'static>, String>>>> = Arc::default();
    let stop = CancellationToken::new();
    let prober = tokio::spawn({
        let (outcomes, stop, addr) = (outcomes.clone(), stop.clone(), server.addr);
        let both = client(&[&a.ca_cert, &b.ca_cert]);
        async move {
            while !stop.is_cancelled() {
                let outcome = async {
                    let mut stream = connect(&both, addr, "localhost").await?;
                    http_get(&mut stream, "/whoami").await?;
                    Ok::<_, io::Error>(presented_leaf(&stream))
                }
                .await;
                outcomes
                    .lock()
                    .unwrap()
                    .push(outcome.map_err(|e| e.to_string()));
                // Steady traffic, without starving the other tests of the machine's cores.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    eventually("the prober to connect before the rotation", || async {
        (!outcomes.lock().unwrap().is_empty()).then_some(())
    })
    .await;

    mount_secret(&mount, "v2", &b);

    let only_b = client(&[&b.ca_cert]);
    eventually("the server to present certificate B", || async {
        connect(&only_b, server.addr, "localhost").await.ok()
    })
    .await;
    eventually("the prober to see certificate B", || async {
        outcomes
            .lock()
            .unwrap()
            .iter()
            .any(|o| o.as_ref() == Ok(&leaf_b))
            .then_some(())
    })
    .await;
    stop.cancel();
    prober.await.unwrap();

    let outcomes = outcomes.lock().unwrap().clone();
    let failures: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert!(
        failures.is_empty(),
        "failures during rotation: {failures:?}"
    );
    let leaves: Vec<_> = outcomes.into_iter().map(Result::unwrap).collect();
    // A, then B from the switch on: never back, never anything else.
    let switch = leaves.iter().position(|l| *l == leaf_b).unwrap();
    assert!(switch > 0);
    assert!(leaves[..switch].iter().all(|l| *l == leaf_a));
    assert!(leaves[switch..].iter().all(|l| *l == leaf_b));

    // A client trusting only the old CA now fails, and for exactly that reason.
    let error = connect(&client(&[&a.ca_cert]), server.addr, "localhost")
        .await
        .unwrap_err();
    assert_eq!(
        certificate_error(&error),
        Some(&CertificateError::UnknownIssuer),
        "{error}"
    );
    // The connection from before the rotation still works, on its original session.
    assert_eq!(http_get(&mut kept, "/whoami").await.unwrap(), kept_peer);
    assert_eq!(presented_leaf(&kept), leaf_a);

    assert_eq!(tls_reloads(&metrics, "success"), 1);
    assert_eq!(tls_reloads(&metrics, "failure"), 0);
    shutdown.cancel();
    reloader.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rotation_keeps_the_old_certificate_until_a_good_pair_arrives() {
    init_logging();
    install_crypto_provider();
    let dir = scratch_dir("tls-bad-rotation");
    let a = generate_dev_certs(&dir.path().join("a"), &[]).unwrap();
    let b = generate_dev_certs(&dir.path().join("b"), &[]).unwrap();
    let (leaf_a, leaf_b) = (leaf(&a.cert), leaf(&b.cert));
    let files = TlsFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    replace(&files.cert, &read(&a.cert));
    replace(&files.key, &read(&a.key));

    let config = load_rustls_config(&files, None).await.unwrap();
    let server = serve(config.clone()).await;
    let Watching {
        metrics,
        shutdown,
        reloader,
    } = watch(config, &files);
    let only_a = client(&[&a.ca_cert]);
    let presents = |expected: CertificateDer<'static>, connector: TlsConnector| {
        let addr = server.addr;
        async move {
            let mut stream = connect(&connector, addr, "localhost").await.unwrap();
            http_get(&mut stream, "/whoami").await.unwrap();
            assert_eq!(presented_leaf(&stream), expected);
        }
    };

    // B's key with A's certificate: refused, A keeps serving.
    replace(&files.key, &read(&b.key));
    eventually("the mismatched pair to be refused", || async {
        (tls_reloads(&metrics, "failure") == 1).then_some(())
    })
    .await;
    presents(leaf_a.clone(), only_a.clone()).await;
    // Refused once, not on every poll.
    tokio::time::sleep(RELOAD_INTERVAL * 4).await;
    assert_eq!(tls_reloads(&metrics, "failure"), 1);
    assert_eq!(tls_reloads(&metrics, "success"), 0);

    // B's certificate, cut off halfway through writing: refused too.
    let cert_b = read(&b.cert);
    replace(&files.cert, &cert_b[..cert_b.len() / 2]);
    eventually("the half-written certificate to be refused", || async {
        (tls_reloads(&metrics, "failure") == 2).then_some(())
    })
    .await;
    presents(leaf_a.clone(), only_a.clone()).await;

    // The whole of B: picked up.
    replace(&files.cert, &cert_b);
    eventually("the good pair to be loaded", || async {
        (tls_reloads(&metrics, "success") == 1).then_some(())
    })
    .await;
    presents(leaf_b, client(&[&b.ca_cert])).await;
    let text = metrics.encode();
    assert!(
        text.contains("driftgate_tls_reloads_total{result=\"failure\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("driftgate_tls_reloads_total{result=\"success\"} 1"),
        "{text}"
    );

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), reloader)
        .await
        .expect("the reloader stops when shut down")
        .unwrap();
}

#[tokio::test]
async fn reloader_starts_from_the_files_as_they_are_then() {
    init_logging();
    install_crypto_provider();
    let dir = scratch_dir("tls-reloader-start");
    let a = generate_dev_certs(&dir.path().join("a"), &[]).unwrap();
    let b = generate_dev_certs(&dir.path().join("b"), &[]).unwrap();
    let files = TlsFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    replace(&files.cert, &read(&a.cert));
    replace(&files.key, &read(&a.key));
    let config = load_rustls_config(&files, None).await.unwrap();
    let server = serve(config.clone()).await;

    // Rotated between loading and watching: served as soon as the watch starts, without
    // waiting for a poll, and not counted as a reload.
    replace(&files.cert, &read(&b.cert));
    replace(&files.key, &read(&b.key));
    let Watching {
        metrics,
        shutdown,
        reloader,
    } = watch(config.clone(), &files);
    let only_b = client(&[&b.ca_cert]);
    let stream = connect(&only_b, server.addr, "localhost").await.unwrap();
    assert_eq!(presented_leaf(&stream), leaf(&b.cert));
    assert_eq!(tls_reloads(&metrics, "success"), 0);
    shutdown.cancel();
    reloader.await.unwrap();

    // Broken when the watch starts: B keeps serving, and the refusal is counted once.
    replace(&files.key, &read(&a.key));
    let Watching {
        metrics,
        shutdown,
        reloader,
    } = watch(config, &files);
    eventually("the broken pair to be refused", || async {
        (tls_reloads(&metrics, "failure") == 1).then_some(())
    })
    .await;
    tokio::time::sleep(RELOAD_INTERVAL * 3).await;
    assert_eq!(tls_reloads(&metrics, "failure"), 1);
    let stream = connect(&only_b, server.addr, "localhost").await.unwrap();
    assert_eq!(presented_leaf(&stream), leaf(&b.cert));
    shutdown.cancel();
    reloader.await.unwrap();
}

#[tokio::test]
async fn load_rustls_config_says_which_file_is_wrong_and_why() {
    install_crypto_provider();
    let dir = scratch_dir("tls-load-errors");
    let a = generate_dev_certs(&dir.path().join("a"), &[]).unwrap();
    let b = generate_dev_certs(&dir.path().join("b"), &[]).unwrap();
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    let files = TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
    };
    let load = |cert_pem: Option<&[u8]>, key_pem: Option<&[u8]>| {
        for (path, contents) in [(&cert, cert_pem), (&key, key_pem)] {
            let _ = std::fs::remove_file(path);
            if let Some(contents) = contents {
                std::fs::write(path, contents).unwrap();
            }
        }
        let files = files.clone();
        async move { load_rustls_config(&files, None).await.unwrap_err() }
    };
    let (cert_a, key_a, key_b) = (read(&a.cert), read(&a.key), read(&b.key));
    let garbage = b"-----BEGIN CERTIFICATE-----\n!!! not base64 !!!\n-----END CERTIFICATE-----\n";
    let cases: Vec<(&str, Error, &Path, &str)> = vec![
        (
            "missing certificate",
            load(None, Some(&key_a)).await,
            &cert,
            "cannot be read",
        ),
        (
            "missing key",
            load(Some(&cert_a), None).await,
            &key,
            "cannot be read",
        ),
        (
            "empty certificate",
            load(Some(b""), Some(&key_a)).await,
            &cert,
            "holds no certificate",
        ),
        (
            "empty key",
            load(Some(&cert_a), Some(b"")).await,
            &key,
            "holds no private key",
        ),
        (
            "garbage PEM certificate",
            load(Some(garbage), Some(&key_a)).await,
            &cert,
            "is not valid PEM",
        ),
        (
            "text that is not PEM",
            load(Some(b"hello, world\n"), Some(&key_a)).await,
            &cert,
            "holds no certificate",
        ),
        (
            "half a certificate",
            load(Some(&cert_a[..cert_a.len() / 2]), Some(&key_a)).await,
            &cert,
            "is the file complete?",
        ),
        (
            "a key where the certificate belongs",
            load(Some(&key_a), Some(&key_a)).await,
            &cert,
            "holds a private key",
        ),
        (
            "two keys",
            load(
                Some(&cert_a),
                Some(&[key_a.clone(), key_b.clone()].concat()),
            )
            .await,
            &key,
            "holds 2 private keys",
        ),
        (
            "mismatched pair",
            load(Some(&cert_a), Some(&key_b)).await,
            &key,
            "does not belong to the first certificate in",
        ),
    ];
    for (case, error, path, phrase) in cases {
        let message = error.to_string();
        assert!(
            message.starts_with(&format!("{}: ", path.display())),
            "{case}: {message}"
        );
        assert!(message.contains(phrase), "{case}: {message}");
    }
    let message = load(Some(&cert_a), Some(&key_b)).await.to_string();
    assert!(message.contains(&cert.display().to_string()), "{message}");
}
