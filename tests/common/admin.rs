//! A plain HTTP/1.1 GET on driftgate's admin port, and the sum of a counter in the Prometheus
//! text it serves, shared by the loopback tests (`tests/common`), the end-to-end harness
//! (`tests/e2e/harness`, through `#[path]`) and the benchmarks that include that harness.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Status and body of `GET path`; bounded, so a wedged server fails the test instead of
/// hanging it.
pub fn admin_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: driftgate\r\nConnection: close\r\n\r\n"
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

/// The sum of the samples of counter `name` (any suffix-free series of that name) whose labels
/// contain every one of `labels` (`label="value"`), in Prometheus text.
pub fn counter_sum(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let metric = series.split('{').next()?;
            (metric == name && labels.iter().all(|l| series.contains(l)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}
