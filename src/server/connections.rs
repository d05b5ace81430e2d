//! A cap on the webhook's open connections.
//!
//! Anyone who can reach the webhook port can open connections (the API server authenticates
//! driftgate, not the other way round), and each costs memory: about 12 KiB before its TLS
//! handshake and about 60 KiB once it has carried a review and is kept alive. Without a cap,
//! enough idle connections get the pod OOM-killed, and with `failurePolicy: Fail` every guarded
//! write in the cluster fails with it. With the cap, connections past it are closed at once and
//! counted: new connections are refused while the cap is reached, but the ones the API server
//! already holds keep working and the process keeps its memory.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum_server::accept::Accept;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The innermost acceptor of the webhook port: takes a place under the cap (or closes the
/// connection) and sets `TCP_NODELAY`. Without it, over HTTP/2 a small WINDOW_UPDATE frame often
/// goes out just before an answer, and Nagle's algorithm then holds the answer until the API
/// server's delayed ACK (~40 ms): `tests/benches/apiserver_latency.rs` saw it as a p99 of ~50 ms.
#[derive(Clone)]
pub struct ConnectionLimit {
    places: Arc<Semaphore>,
    open: Gauge,
    refused: Counter,
}

impl ConnectionLimit {
    pub fn new(max_connections: usize, open: Gauge, refused: Counter) -> Self {
        Self {
            places: Arc::new(Semaphore::new(max_connections)),
            open,
            refused,
        }
    }
}

impl<S> Accept<TcpStream, S> for ConnectionLimit {
    type Stream = LimitedStream;
    type Service = S;
    type Future = std::future::Ready<io::Result<(LimitedStream, S)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let Ok(place) = self.places.clone().try_acquire_owned() else {
            // Dropping the stream closes it; axum-server logs nothing and accepts the next.
            self.refused.inc();
            return std::future::ready(Err(io::Error::other(
                "the webhook's connection limit (--max-connections) is reached",
            )));
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY on a webhook connection");
        }
        self.open.inc();
        std::future::ready(Ok((
            LimitedStream {
                stream,
                _place: place,
                open: self.open.clone(),
            },
            service,
        )))
    }
}

/// A connection holding a place under the cap until it is dropped.
pub struct LimitedStream {
    stream: TcpStream,
    _place: OwnedSemaphorePermit,
    open: Gauge,
}

impl Drop for LimitedStream {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl AsyncRead for LimitedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for LimitedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
