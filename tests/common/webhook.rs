//! `driftgate serve` as a real process on loopback (`--no-kube`), and a raw HTTP/1.1-over-TLS
//! client for it: the tests of the served process (`serve.rs`, `faults.rs`) share these, so a
//! fault test drives exactly the binary, flags and TLS stack that production runs.

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

pub const BIN: &str = env!("CARGO_BIN_EXE_driftgate");

/// The flags every test server starts with; [`Options::flag`] replaces one.
const DEFAULT_FLAGS: &[(&str, &str)] = &[
    ("--reload-interval", "1s"),
    ("--header-timeout", "1s"),
    ("--shutdown-grace", "10s"),
    ("--shutdown-delay", "1s"),
];

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// The server's own installer, so tests and the binary install the same provider.
#[allow(unused_imports)]
pub use driftgate::server::tls::install_crypto_provider;

/// Where the server's stderr goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stderr {
    /// A pipe the test reads (`server.child.stderr`); it must be drained, or a chatty server
    /// blocks on it.
    Pipe,
    /// `stderr.log` in the server's directory ([`Server::log`]): safe under load.
    File,
}

#[derive(Clone)]
pub struct Options {
    log_filter: String,
    stderr: Stderr,
    flags: Vec<(String, String)>,
    open_files: Option<u64>,
    policy: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            log_filter: "warn".into(),
            stderr: Stderr::Pipe,
            flags: DEFAULT_FLAGS
                .iter()
                .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
                .collect(),
            open_files: None,
            policy: None,
        }
    }
}

impl Options {
    /// `RUST_LOG` for the server.
    pub fn log(mut self, filter: &str, stderr: Stderr) -> Self {
        self.log_filter = filter.into();
        self.stderr = stderr;
        self
    }

    /// Starts the server with both its soft and hard open-files limits at `limit` (through the
    /// shell's `ulimit`, which then `exec`s it: the process id stays the server's).
    pub fn open_files_limit(mut self, limit: u64) -> Self {
        self.open_files = Some(limit);
        self
    }

    /// The policy file's text instead of the example policy's.
    pub fn policy(mut self, text: &str) -> Self {
        self.policy = Some(text.to_owned());
        self
    }

    /// Sets `flag` to `value`, replacing a default (clap refuses a flag given twice).
    pub fn flag(mut self, flag: &str, value: impl AsRef<Path>) -> Self {
        let value = value.as_ref().to_string_lossy().into_owned();
        match self.flags.iter_mut().find(|(f, _)| f == flag) {
            Some(entry) => entry.1 = value,
            None => self.flags.push((flag.to_owned(), value)),
        }
        self
    }
}

pub struct Server {
    pub child: Child,
    pub dir: PathBuf,
    pub webhook: SocketAddr,
    pub admin: SocketAddr,
    pub ca: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn start(name: &str) -> Server {
    start_with(name, Options::default())
}

/// [`start`] with `RUST_LOG` set to `filter`; stderr is a pipe (`server.child.stderr`).
pub fn start_logging(name: &str, filter: &str) -> Server {
    start_with(name, Options::default().log(filter, Stderr::Pipe))
}

/// Starts `driftgate serve --no-kube` with the example policy (copied to `dir/policies`) and
/// development certificates (`dir/certs`), and waits until it is ready.
pub fn start_with(name: &str, options: Options) -> Server {
    // Ports come from `free_port`, which releases them: a test running at the same time may
    // take one first, and then this server exits at start while the other's admin port answers
    // `/readyz`. Such a server is started again on other ports.
    for _ in 0..3 {
        let mut server = spawn_with(name, options.clone());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if server.child.try_wait().ok().flatten().is_some() {
                break;
            }
            let ready = admin_get(server.admin, "/readyz")
                .map(|(s, _)| s == 200)
                .unwrap_or(false);
            if ready {
                // A server that lost a port exits within milliseconds of starting.
                std::thread::sleep(Duration::from_millis(100));
                if server.child.try_wait().ok().flatten().is_none() {
                    return server;
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if server.child.try_wait().ok().flatten().is_none() {
            panic!("driftgate serve did not become ready");
        }
    }
    panic!("driftgate serve exited at start three times");
}

/// [`start_with`] without waiting for readiness (a server started with a bad policy).
pub fn spawn_with(name: &str, options: Options) -> Server {
    let dir = std::env::temp_dir().join(format!("driftgate-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::copy(
        super::path("policies/example.yaml"),
        dir.join("policies/example.yaml"),
    )
    .unwrap();
    if let Some(text) = &options.policy {
        std::fs::write(dir.join("policies/example.yaml"), text).unwrap();
    }
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
    // The development pair, unless the test mounts its own.
    let mut options = options;
    for (flag, file) in [("--tls-cert", "tls.crt"), ("--tls-key", "tls.key")] {
        if !options.flags.iter().any(|(f, _)| f == flag) {
            options = options.flag(flag, certs.join(file));
        }
    }
    let mut command = match options.open_files {
        Some(limit) => {
            let mut shell = Command::new("sh");
            shell
                .arg("-c")
                .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
                .arg(BIN);
            shell
        }
        None => Command::new(BIN),
    };
    command
        .arg("serve")
        .arg("--policy")
        .arg(dir.join("policies"))
        .args([
            "--addr",
            &webhook.to_string(),
            "--admin-addr",
            &admin.to_string(),
            "--no-kube",
        ]);
    for (flag, value) in &options.flags {
        command.args([flag, value]);
    }
    command
        .env("RUST_LOG", &options.log_filter)
        .stdout(Stdio::null());
    match options.stderr {
        Stderr::Pipe => command.stderr(Stdio::piped()),
        Stderr::File => command.stderr(std::fs::File::create(dir.join("stderr.log")).unwrap()),
    };
    let child = command.spawn().unwrap();
    Server {
        child,
        dir,
        webhook,
        admin,
        ca: certs.join("ca.crt"),
    }
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn policy_file(&self) -> PathBuf {
        self.dir.join("policies/example.yaml")
    }

    /// The server's stderr, when started with [`Stderr::File`], once it has stopped growing
    /// (its lines are written in batches: [`super::log_file`]).
    pub fn log(&self) -> String {
        let path = self.dir.join("stderr.log");
        super::log_file::wait_for_quiet_file(&path);
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// A field of `/proc/PID/status` in KiB (`VmRSS`: resident now; `VmHWM`: the peak).
    pub fn memory_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/PID/status:\n{status}"))
    }

    /// How many file descriptors the server holds open (its sockets included).
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .unwrap()
            .count()
    }

    pub fn metrics(&self) -> String {
        admin_get(self.admin, "/metrics").unwrap().1
    }

    /// Stops the server with SIGTERM and returns all it wrote to stderr (a pipe). Log lines are
    /// written by a thread of their own, which writes out the queued ones as the process exits:
    /// a SIGKILL could lose the last.
    pub fn stop_for_stderr(&mut self) -> String {
        use std::io::Read;
        self.signal("TERM");
        let mut stderr = String::new();
        // To the end of the pipe: the process has exited.
        self.child
            .stderr
            .take()
            .expect("started with Stderr::Pipe")
            .read_to_string(&mut stderr)
            .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "exit {status:?}; stderr:\n{stderr}");
        stderr
    }

    /// Waits up to `timeout` for `/metrics` to hold `line`.
    pub async fn wait_for_metric(&self, line: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let metrics = self.metrics();
            if metrics.contains(line) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no {line:?} in /metrics within {timeout:?}:\n{metrics}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// A client trusting this server's development CA.
    pub fn connector(&self) -> TlsConnector {
        connector(&[&self.ca])
    }
}

pub use super::admin::admin_get;

/// A TLS client (HTTP/1.1) trusting the CAs in `ca_files`.
pub fn connector<P: AsRef<Path>>(ca_files: &[P]) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for ca in ca_files {
        for cert in CertificateDer::pem_file_iter(ca.as_ref()).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

pub async fn try_connect(
    connector: &TlsConnector,
    addr: SocketAddr,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

pub async fn connect(server: &Server) -> TlsStream<TcpStream> {
    try_connect(&server.connector(), server.webhook)
        .await
        .unwrap()
}

/// Reads one HTTP/1.1 response (Content-Length bodies only, as axum sends them).
pub async fn read_response<S: AsyncReadExt + Unpin>(
    stream: &mut S,
) -> std::io::Result<(u16, Vec<u8>)> {
    let answer = read_answer(stream, &mut 0).await?;
    Ok((answer.status, answer.body))
}

pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    /// The server said `Connection: close`: it closes the connection after this response.
    pub close: bool,
}

/// [`read_response`], counting in `received` the bytes of the response read so far, so that a
/// caller can tell a connection closed before any answer from one cut mid-response.
pub async fn read_answer<S: AsyncReadExt + Unpin>(
    stream: &mut S,
    received: &mut usize,
) -> std::io::Result<Answer> {
    let mut buffer = Vec::new();
    let mut byte = [0u8; 1];
    while !buffer.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        *received += 1;
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
    let close = head.lines().any(|l| l.trim() == "connection: close");
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await?;
    *received += length;
    Ok(Answer {
        status,
        body,
        close,
    })
}

/// The head of a `POST /validate` with a `length`-byte body.
pub fn review_head(length: usize) -> String {
    format!(
        "POST /validate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )
}

pub async fn send_review<S: AsyncReadExt + AsyncWriteExt + Unpin>(
    stream: &mut S,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    stream.write_all(review_head(body.len()).as_bytes()).await?;
    stream.write_all(body).await?;
    read_response(stream).await
}

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(super::path("tests/fixtures").join(name)).unwrap()
}

pub fn allowed(body: &[u8]) -> bool {
    let answer: Value = serde_json::from_slice(body).unwrap();
    answer["response"]["allowed"].as_bool().unwrap()
}
