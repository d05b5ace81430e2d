//! `driftgate serve` as a real process over real TLS on loopback: keep-alive reuse, policy
//! reload, SIGHUP, slow headers, and a SIGTERM drain that lets an in-flight review finish.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const BIN: &str = env!("CARGO_BIN_EXE_driftgate");

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Server {
    child: Child,
    dir: PathBuf,
    webhook: SocketAddr,
    admin: SocketAddr,
    ca: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start(name: &str) -> Server {
    start_logging(name, "warn")
}

/// [`start`] with `RUST_LOG` set to `filter`; stderr is a pipe (`server.child.stderr`).
fn start_logging(name: &str, filter: &str) -> Server {
    let dir = std::env::temp_dir().join(format!("driftgate-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::copy("policies/example.yaml", dir.join("policies/example.yaml")).unwrap();
    let certs = dir.join("certs");
    let status = Command::new(BIN)
        .args(["certs", "dev", "--out"])
        .arg(&certs)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let webhook: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let child = Command::new(BIN)
        .arg("serve")
        .arg("--policy")
        .arg(dir.join("policies"))
        .arg("--tls-cert")
        .arg(certs.join("tls.crt"))
        .arg("--tls-key")
        .arg(certs.join("tls.key"))
        .args([
            "--addr",
            &webhook.to_string(),
            "--admin-addr",
            &admin.to_string(),
        ])
        .args([
            "--no-kube",
            "--reload-interval",
            "1s",
            "--header-timeout",
            "1s",
            "--shutdown-grace",
            "10s",
            "--shutdown-delay",
            "1s",
        ])
        .env("RUST_LOG", filter)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let server = Server {
        child,
        dir,
        webhook,
        admin,
        ca: certs.join("ca.crt"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if admin_get(server.admin, "/readyz")
            .map(|(s, _)| s == 200)
            .unwrap_or(false)
        {
            return server;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("driftgate serve did not become ready");
}

/// A plain HTTP/1.1 GET on the admin port.
fn admin_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

async fn connect(server: &Server) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&server.ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(server.webhook).await.unwrap();
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// Reads one HTTP/1.1 response (Content-Length bodies only, as axum sends them).
async fn read_response(stream: &mut TlsStream<TcpStream>) -> std::io::Result<(u16, Vec<u8>)> {
    let mut buffer = Vec::new();
    let mut byte = [0u8; 1];
    while !buffer.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buffer.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buffer).to_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await?;
    Ok((status, body))
}

async fn send_review(
    stream: &mut TlsStream<TcpStream>,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let head = format!(
        "POST /validate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    read_response(stream).await
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(Path::new("tests/fixtures").join(name)).unwrap()
}

fn allowed(body: &[u8]) -> bool {
    let answer: Value = serde_json::from_slice(body).unwrap();
    answer["response"]["allowed"].as_bool().unwrap()
}

fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[tokio::test]
async fn keep_alive_connection_serves_many_reviews() {
    install_provider();
    let server = start("keepalive");
    let mut stream = connect(&server).await;
    for i in 0..50 {
        let name = if i % 2 == 0 {
            "kubectl-edit.json"
        } else {
            "flux-ssa-update.json"
        };
        let (status, body) = send_review(&mut stream, &fixture(name)).await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(allowed(&body), i % 2 == 1);
    }
    let (_, metrics) = admin_get(server.admin, "/metrics").unwrap();
    assert!(
        metrics.contains("driftgate_admission_duration_seconds_count 50"),
        "{metrics}"
    );
}

#[tokio::test]
async fn policy_edits_reload_and_bad_ones_are_refused_while_serving() {
    install_provider();
    let server = start("reload");
    let policy = server.dir.join("policies/example.yaml");
    let mut stream = connect(&server).await;
    let edit = fixture("kubectl-edit.json");
    assert!(!allowed(&send_review(&mut stream, &edit).await.unwrap().1));

    // A ConfigMap mount replaces the file through a symlink swap; a rename is the same event.
    let swap = |text: String| {
        let tmp = server.dir.join("policies/.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &policy).unwrap();
    };
    swap("apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata: {name: broken}\nspec: {}\n".into());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, metrics) = admin_get(server.admin, "/metrics").unwrap();
        if metrics.contains("driftgate_policy_reloads_total{result=\"failure\"} 1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bad policy was not noticed:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Still the old policy, still ready.
    assert!(!allowed(&send_review(&mut stream, &edit).await.unwrap().1));
    assert_eq!(admin_get(server.admin, "/readyz").unwrap().0, 200);

    let relaxed = std::fs::read_to_string("policies/example.yaml")
        .unwrap()
        .replace("\"prod-*\", ", "");
    swap(relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !allowed(&send_review(&mut stream, &edit).await.unwrap().1) {
        assert!(
            Instant::now() < deadline,
            "the good policy was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // SIGHUP forces a reload even without a change.
    let (_, before) = admin_get(server.admin, "/metrics").unwrap();
    assert!(
        before.contains("driftgate_policy_reloads_total{result=\"success\"} 2"),
        "{before}"
    );
    Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, metrics) = admin_get(server.admin, "/metrics").unwrap();
        if metrics.contains("driftgate_policy_reloads_total{result=\"success\"} 3") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn slow_headers_are_cut_off() {
    install_provider();
    let server = start("slowheaders");
    let mut stream = connect(&server).await;
    stream
        .write_all(b"POST /validate HTTP/1.1\r\nHost: local")
        .await
        .unwrap();
    let started = Instant::now();
    let mut buffer = [0u8; 256];
    // The server closes (or answers 408) once --header-timeout (1s) passes; it never waits forever.
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer)).await;
    let outcome = read.expect("the server must not wait forever for headers");
    match outcome {
        Ok(0) | Err(_) => {}
        Ok(n) => assert!(
            String::from_utf8_lossy(&buffer[..n]).contains("408"),
            "{:?}",
            String::from_utf8_lossy(&buffer[..n])
        ),
    }
    assert!(started.elapsed() >= Duration::from_millis(500));
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_review_finish() {
    install_provider();
    let mut server = start("sigterm");
    let body = fixture("kubectl-edit.json");
    let mut stream = connect(&server).await;
    // Keep one connection idle in keep-alive: shutdown must close it.
    let mut idle = connect(&server).await;
    let (status, _) = send_review(&mut idle, &fixture("flux-ssa-update.json"))
        .await
        .unwrap();
    assert_eq!(status, 200);

    // Start a review and stop halfway through its body: it is in flight.
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body[..body.len() / 2]).await.unwrap();
    stream.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    // Readiness drops while draining.
    let deadline = Instant::now() + Duration::from_secs(5);
    while admin_get(server.admin, "/readyz")
        .map(|(s, _)| s == 200)
        .unwrap_or(false)
    {
        assert!(
            Instant::now() < deadline,
            "readiness did not drop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stream.write_all(&body[body.len() / 2..]).await.unwrap();
    let (status, answer) = read_response(&mut stream)
        .await
        .expect("the in-flight review is answered");
    assert_eq!(status, 200);
    assert!(!allowed(&answer));

    // The idle kept-alive connection is closed by the server.
    let mut buffer = [0u8; 16];
    let closed = tokio::time::timeout(Duration::from_secs(10), idle.read(&mut buffer)).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "idle connection not closed: {closed:?}"
    );

    let exit = tokio::task::spawn_blocking(move || {
        let status = server.child.wait().unwrap();
        let mut stderr = String::new();
        for line in BufReader::new(server.child.stderr.take().unwrap()).lines() {
            stderr.push_str(&line.unwrap());
            stderr.push('\n');
        }
        (status, stderr, server)
    })
    .await
    .unwrap();
    assert!(exit.0.success(), "exit {:?}; stderr:\n{}", exit.0, exit.1);
}

/// In a pod stderr is a pipe to the container runtime, not a terminal: the review lines must be
/// plain text, or `namespace=prod-payments` is no longer in them for anyone searching the logs.
#[tokio::test]
async fn log_lines_written_to_a_pipe_carry_no_terminal_colour_codes() {
    use std::io::Read;
    install_provider();
    let mut server = start_logging("plain-logs", "info");
    let mut stream = connect(&server).await;
    let (status, _) = send_review(&mut stream, &fixture("kubectl-edit.json"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    drop(stream);
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let mut stderr = String::new();
    server
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let review = stderr
        .lines()
        .find(|l| l.contains(" review "))
        .unwrap_or_else(|| panic!("no review line in:\n{stderr}"));
    assert!(!review.contains('\u{1b}'), "{review:?}");
    assert!(
        review.contains("namespace=prod-payments name=api user=bob"),
        "{review:?}"
    );
}

#[tokio::test]
async fn serve_dev_runs_from_a_fresh_checkout_and_says_how_to_call_it() {
    install_provider();
    let dir = std::env::temp_dir().join(format!("driftgate-serve-dev-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::copy("policies/example.yaml", dir.join("policies/example.yaml")).unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let mut child = Command::new(BIN)
        .args(["serve", "--dev", "--shutdown-delay", "0s"])
        .args([
            "--addr",
            &format!("127.0.0.1:{port}"),
            "--admin-addr",
            &format!("127.0.0.1:{admin_port}"),
        ])
        .current_dir(&dir)
        // No kubeconfig anywhere: --dev runs without a cluster.
        .env("HOME", &dir)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.contains(&format!("curl --cacert certs-dev/ca.crt -H 'Content-Type: application/json' --data @tests/fixtures/kubectl-edit.json https://localhost:{port}/validate")),
        "{line}"
    );
    assert!(dir.join("certs-dev/tls.key").exists());
    let server = Server {
        child,
        dir: dir.clone(),
        webhook: format!("127.0.0.1:{port}").parse().unwrap(),
        admin: format!("127.0.0.1:{admin_port}").parse().unwrap(),
        ca: dir.join("certs-dev/ca.crt"),
    };
    let (status, body) = admin_get(server.admin, "/readyz").unwrap();
    assert_eq!(status, 200, "{body}");
    let mut stream = connect(&server).await;
    let (status, answer) = send_review(&mut stream, &fixture("kubectl-edit.json"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(!allowed(&answer));
}

#[tokio::test]
async fn an_idle_kept_alive_connection_outlives_the_header_timeout() {
    // The API server pools connections and reuses them after idle gaps: a connection idle for
    // longer than --header-timeout (1s here) must still be served.
    install_provider();
    let server = start("idle");
    let mut stream = connect(&server).await;
    let body = fixture("flux-ssa-update.json");
    assert_eq!(send_review(&mut stream, &body).await.unwrap().0, 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(send_review(&mut stream, &body).await.unwrap().0, 200);
}
