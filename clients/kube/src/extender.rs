//! The scheduler extender's HTTP handlers (kube-scheduler `extender/v1` JSON over HTTP):
//! `/filter`, `/prioritize`, `/bind`, `/preempt`, plus `/healthz` and `/readyz`. They decode the wire
//! types of [`crate::extender_v1`], call the logic in [`crate::shim`] and encode its answer;
//! `/metrics` is served by `gpusched_runtime::metrics::router` (see `run.rs`).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;

use crate::answer::filter_error;
use crate::extender_v1::{
    ExtenderArgs, ExtenderBindingArgs, ExtenderBindingResult, ExtenderPreemptionArgs,
};
use crate::shim::{BindOutcome, Shim};

fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_string(body) {
        Ok(s) => (status, [(header::CONTENT_TYPE, "application/json")], s).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn filter(State(shim): State<Arc<Shim>>, body: Bytes) -> Response {
    let result = match serde_json::from_slice::<ExtenderArgs>(&body) {
        Ok(args) => shim.filter(&args).await,
        Err(e) => filter_error(format!("gpusched-kube: cannot read ExtenderArgs: {e}")),
    };
    json(StatusCode::OK, &result)
}

async fn prioritize(State(shim): State<Arc<Shim>>, body: Bytes) -> Response {
    match serde_json::from_slice::<ExtenderArgs>(&body) {
        Ok(args) => match shim.prioritize(&args).await {
            Ok(list) => json(StatusCode::OK, &list),
            // kube-scheduler ignores a failed prioritize and scores with its own plugins.
            Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e).into_response(),
        },
        Err(e) => (
            StatusCode::BAD_REQUEST,
            format!("cannot read ExtenderArgs: {e}"),
        )
            .into_response(),
    }
}

async fn bind(State(shim): State<Arc<Shim>>, body: Bytes) -> Response {
    let result = match serde_json::from_slice::<ExtenderBindingArgs>(&body) {
        Ok(args) => match shim.bind(&args).await {
            BindOutcome::Bound { .. } => ExtenderBindingResult::default(),
            BindOutcome::Failed(e) => ExtenderBindingResult { error: e },
        },
        Err(e) => ExtenderBindingResult {
            error: format!("gpusched-kube: cannot read ExtenderBindingArgs: {e}"),
        },
    };
    json(StatusCode::OK, &result)
}

async fn preempt(State(shim): State<Arc<Shim>>, body: Bytes) -> Response {
    match serde_json::from_slice::<ExtenderPreemptionArgs>(&body) {
        Ok(args) => match shim.preempt(&args).await {
            Ok(r) => json(StatusCode::OK, &r),
            // kube-scheduler fails this preemption attempt with the error and retries later.
            Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e).into_response(),
        },
        Err(e) => (
            StatusCode::BAD_REQUEST,
            format!("cannot read ExtenderPreemptionArgs: {e}"),
        )
            .into_response(),
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(shim): State<Arc<Shim>>) -> Response {
    match shim.not_ready_reason() {
        None => (StatusCode::OK, "ok").into_response(),
        Some(r) => (StatusCode::SERVICE_UNAVAILABLE, r).into_response(),
    }
}

/// The extender's HTTP routes.
pub fn router(shim: Arc<Shim>) -> Router {
    Router::new()
        .route("/filter", post(filter))
        .route("/prioritize", post(prioritize))
        .route("/bind", post(bind))
        .route("/preempt", post(preempt))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(64 << 20))
        .with_state(shim)
}
