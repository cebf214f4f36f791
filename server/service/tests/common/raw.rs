//! Raw HTTP/2 exchanges (hyper's client, where a client library would hide the wire), the
//! metrics scrape and the checks the hardening tests share.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;

use bytes::Bytes;
use gpusched_api::v1;
use http_body_util::BodyExt as _;
use tonic::Code;

use super::{TestServer, allocate_req, node, pod};

/// A raw HTTP/2 exchange: the HTTP status, the headers and the trailers (None when the answer
/// is trailers-only).
pub struct Raw {
    /// The HTTP status.
    pub http: http::StatusCode,
    /// The headers.
    pub headers: http::HeaderMap,
    /// The trailers, `None` for a trailers-only answer.
    pub trailers: Option<http::HeaderMap>,
}

impl Raw {
    /// The final gRPC code, wherever it is.
    pub fn code(&self) -> Code {
        let h = self
            .trailers
            .as_ref()
            .filter(|t| t.contains_key("grpc-status"))
            .unwrap_or(&self.headers);
        Code::from_bytes(h.get("grpc-status").expect("grpc-status").as_bytes())
    }

    /// Bytes of the answer's metadata (names and values of headers and trailers).
    pub fn metadata_bytes(&self) -> usize {
        let size = |h: &http::HeaderMap| {
            h.iter()
                .map(|(k, v)| k.as_str().len() + v.len())
                .sum::<usize>()
        };
        size(&self.headers) + self.trailers.as_ref().map_or(0, size)
    }
}

/// A gRPC message frame (uncompressed).
pub fn frame(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(0);
    out.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    out.extend_from_slice(message);
    out.into()
}

/// One request on a new HTTP/2 connection (hyper's client: tonic's channel would also run a
/// timer of its own for `grpc-timeout` and report it as CANCELLED).
pub async fn raw(
    addr: std::net::SocketAddr,
    path: &str,
    content_type: &str,
    extra: &[(&str, &str)],
    body: Bytes,
) -> Raw {
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"))
        .header("content-type", content_type)
        .header("te", "trailers");
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let req = req.body(http_body_util::Full::new(body)).unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let resp = send.send_request(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let collected = body.collect().await.unwrap();
    Raw {
        http: parts.status,
        headers: parts.headers,
        trailers: collected.trailers().cloned(),
    }
}

pub const ALLOCATE: &str = "/gpusched.v1.PlacementService/Allocate";

pub fn gpu_pod() -> v1::Workload {
    pod(&[], &[&[("nvidia.com/gpu", "1")]])
}

pub async fn scrape(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// `gpusched_requests_total` by (rpc, outcome), from a scrape.
pub fn counted(text: &str) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("gpusched_requests_total{") else {
            continue;
        };
        let (labels, value) = rest.split_once("} ").unwrap();
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .unwrap()
                .trim_end_matches('"')
                .to_owned()
        };
        out.insert((label("rpc"), label("outcome")), value.parse().unwrap());
    }
    out
}

pub async fn still_places(server: &TestServer) {
    let r = server
        .placement()
        .allocate(allocate_req(vec![node("ok", 1, 8000)], gpu_pod()))
        .await
        .unwrap();
    assert!(r.into_inner().result.unwrap().placed);
}
