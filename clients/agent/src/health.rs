//! `/healthz` (the process runs), `/readyz` (the first publication succeeded; the body says
//! what the agent last did) and `/metrics` (Prometheus: the loop's latency histograms, process
//! metrics; OpenMetrics or text 0.0.4 as the scrape asks).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::agent::AgentState;

async fn readyz(State(state): State<Arc<AgentState>>) -> (StatusCode, String) {
    let s = state.snapshot();
    let error = s
        .last_error
        .map(|e| format!("last error: {e}\n"))
        .unwrap_or_default();
    if s.ready {
        (
            StatusCode::OK,
            format!(
                "ready: {} card(s), {} healthy\n{error}",
                s.cards, s.healthy_cards
            ),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: nothing published yet\n{error}"),
        )
    }
}

/// The endpoint's routes.
pub fn router(state: Arc<AgentState>) -> Router {
    let metrics = gpusched_runtime::metrics::router(state.metrics.registry());
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state)
        .merge(metrics)
}

/// Binds `addr` and serves in the background; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    state: Arc<AgentState>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = router(state);
    let handle = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "health endpoint stopped");
        }
    });
    Ok((local, handle))
}
