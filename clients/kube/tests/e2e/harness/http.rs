//! Raw HTTP/1.1 to the shims' plain-HTTP endpoints (extender, `/readyz`, `/metrics`).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One request with `Connection: close`; None on any failure or after 5 s.
pub async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    http_with(addr, method, path, &[], body).await
}

/// [`http`] with extra header lines (`Name: value`); the answer's body includes nothing of the
/// headers.
pub async fn http_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
) -> Option<(u16, String)> {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|b| b.1.to_owned())
            .unwrap_or_default();
        Some((code, body))
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .ok()
        .flatten()
}

/// `/readyz` answers 200 (informers synced and leading).
pub async fn is_ready(ext: SocketAddr) -> bool {
    matches!(http(ext, "GET", "/readyz", "").await, Some((200, _)))
}

/// The value of one series of `/metrics`, written as encoded (`name{label="v",...}`); panics
/// when the series is missing.
pub async fn metric(ext: SocketAddr, name: &str) -> u64 {
    let (_, body) = http(ext, "GET", "/metrics", "").await.expect("metrics");
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing"))
}

/// The sum of the `/metrics` series whose line starts with `prefix` (e.g.
/// `family{` for a whole family, `family{label="v"` for some of its series); 0 when none.
pub async fn metric_sum(ext: SocketAddr, prefix: &str) -> u64 {
    let (_, body) = http(ext, "GET", "/metrics", "").await.expect("metrics");
    body.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<u64>().ok())
        .sum()
}
