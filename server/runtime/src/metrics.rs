//! The Prometheus endpoint: `GET /metrics` serves a prometheus-client [`Registry`] in the
//! OpenMetrics text format.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::response::IntoResponse;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The metrics listener could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("metrics endpoint: cannot listen on {addr}: {source}")]
pub struct MetricsError {
    /// The address.
    pub addr: SocketAddr,
    /// Why.
    pub source: std::io::Error,
}

/// The registry as OpenMetrics text (a collector may fail to encode).
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

/// A `GET /metrics` response for `registry` (to mount on a router of one's own); 500 when a
/// collector fails to encode.
pub fn response(registry: &Registry) -> axum::response::Response {
    match encode(registry) {
        Ok(text) => ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(e) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("metrics: {e}"),
        )
            .into_response(),
    }
}

/// A router with `GET /metrics`.
pub fn router(registry: Arc<Registry>) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let registry = Arc::clone(&registry);
            async move { response(&registry) }
        }),
    )
}

/// A running metrics endpoint.
#[derive(Debug)]
pub struct MetricsServer {
    /// The bound address.
    pub addr: SocketAddr,
    /// The serving task; it ends after `shutdown` resolves and open requests finish.
    pub task: JoinHandle<std::io::Result<()>>,
}

/// Binds `addr` (port 0 picks one) and serves `/metrics` until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    registry: Arc<Registry>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<MetricsServer, MetricsError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsError { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| MetricsError { addr, source })?;
    let app = router(registry);
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
    });
    Ok(MetricsServer { addr: bound, task })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[tokio::test]
    async fn serves_the_registry() {
        let mut registry = Registry::with_prefix("test");
        let c = Counter::<u64>::default();
        registry.register("hits", "Hits", c.clone());
        c.inc_by(3);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = serve(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(registry),
            async move {
                let _ = stopped.await;
            },
        )
        .await
        .unwrap();
        let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        assert!(body.contains("test_hits_total 3"), "{body}");
        assert!(body.contains("openmetrics-text"), "{body}");
        stop.send(()).unwrap();
        server.task.await.unwrap().unwrap();
    }
}
