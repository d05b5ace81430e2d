//! A TCP proxy to the API server that a test can interrupt: give a process a kubeconfig whose
//! server is the proxy ([`Proxy::kubeconfig_for`]), then make the API server unreachable for
//! it alone, while the API server itself (and every other client) carries on.

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::control_plane::{Identity, control_plane};

/// What the proxy does with connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Pass them through to the API server.
    Forward,
    /// Close every open connection, and every new one as soon as it is accepted: the API
    /// server is down.
    Refuse,
    /// Close every open connection, and hold new ones open without a byte in either direction:
    /// the API server (or the network) hangs.
    Hang,
}

/// Runs on its own thread with its own Tokio runtime, so tests that block (kubectl) do not
/// stall it; stops when dropped.
pub struct Proxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// A proxy to the test control plane's API server, forwarding.
    pub fn to_api_server() -> Proxy {
        let upstream: SocketAddr = control_plane()
            .url()
            .trim_start_matches("https://")
            .parse()
            .expect("the API server's URL is https://IP:PORT");
        let (mode, mode_rx) = watch::channel(Mode::Forward);
        let (stop, stop_rx) = tokio::sync::oneshot::channel();
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a Tokio runtime builds");
            runtime.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("the proxy binds");
                bound_tx
                    .send(listener.local_addr().expect("a local address"))
                    .expect("the test waits for the address");
                let accept = async {
                    loop {
                        let Ok((client, _)) = listener.accept().await else {
                            continue;
                        };
                        tokio::spawn(serve(client, upstream, mode_rx.clone()));
                    }
                };
                tokio::select! {
                    () = accept => {}
                    _ = stop_rx => {}
                }
            });
        });
        let addr = bound_rx.recv().expect("the proxy reports its address");
        Proxy {
            addr,
            mode,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Switches mode; open connections are closed unless the new mode is [`Mode::Forward`].
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// A kubeconfig for `who` whose server is this proxy (the API server's certificate is for
    /// 127.0.0.1, which the proxy's address is too).
    pub fn kubeconfig_for(&self, who: Identity) -> PathBuf {
        let control_plane = control_plane();
        let original = control_plane.kubeconfig(who);
        let text = std::fs::read_to_string(&original).expect("the kubeconfig reads");
        let proxied = text.replace(
            &format!("server: {}", control_plane.url()),
            &format!("server: https://{}", self.addr),
        );
        assert_ne!(text, proxied, "the kubeconfig names the API server");
        let path = original.with_file_name(format!("kubeconfig-via-{}", self.addr.port()));
        std::fs::write(&path, proxied).expect("the proxied kubeconfig is written");
        path
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One client connection, for as long as the mode allows it.
async fn serve(mut client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    let current = *mode.borrow_and_update();
    match current {
        Mode::Refuse => {}
        Mode::Hang => {
            // Held until the mode changes, then closed.
            let _ = mode.changed().await;
        }
        Mode::Forward => {
            let Ok(mut server) = TcpStream::connect(upstream).await else {
                return;
            };
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                _ = async {
                    while mode.changed().await.is_ok() {
                        if *mode.borrow_and_update() != Mode::Forward {
                            return;
                        }
                    }
                } => {}
            }
        }
    }
}
