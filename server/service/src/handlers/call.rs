//! What every RPC's handler shares ([`run`]): the span (with the caller's trace context), the
//! deadline, the decision permit, cancellation when the caller goes away, running the
//! synchronous decision inline or on the blocking pool, metrics and the one log line per
//! decision.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::metadata::MetadataMap;
use tracing::Instrument;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::error::ServiceError;
use crate::pipeline::{Cancel, Record};
use crate::rpc::{Admission, Rpc};
use crate::state::State;

/// Stops the work when dropped: the handler's future was dropped (the caller reset the stream)
/// or returned.
struct StopOnDrop(Cancel);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The request's estimated work, as counted at intake ([`Admission`]), deciding inline or on
/// the blocking pool: 0 (inline) for a call that already runs on the blocking pool; `fallback`
/// when the call did not come through the intake layer.
pub fn estimated_work(extensions: &tonic::Extensions, fallback: impl FnOnce() -> usize) -> usize {
    extensions
        .get::<Admission>()
        .map_or_else(fallback, |a| if a.offloaded { 0 } else { a.work })
}

/// Runs one call: `work` is the synchronous decision (it fills the record and stops when
/// [`Cancel`] says so). `work_estimate` is the request's estimated work (card evaluations,
/// `rpc::Admission::work`), deciding inline or on the blocking pool. The decision slot is
/// held by the work itself, so it is released only when the work has really ended.
pub async fn run<T, F>(
    state: Arc<State>,
    rpc: Rpc,
    metadata: &MetadataMap,
    work_estimate: usize,
    work: F,
) -> Result<tonic::Response<T>, tonic::Status>
where
    T: Send + 'static,
    F: FnOnce(&State, &mut Record, &Cancel) -> Result<T, ServiceError> + Send + 'static,
{
    let started = Instant::now();
    let (service, rpc) = (rpc.service(), rpc.method());
    let _in_flight = state.metrics.in_flight();
    // DEBUG: exported over OTLP whatever the log level (the trace layer's own filter), but
    // printed in log lines only at debug: at info the one decision line already says what the
    // span's fields say, and formatting them on every call cost 5% of a decision's CPU.
    let span = tracing::debug_span!(
        "rpc",
        otel.name = format!("{service}/{rpc}"),
        otel.kind = "server",
        otel.status_code = Empty,
        otel.status_description = Empty,
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = rpc,
        rpc.grpc.status_code = Empty,
        gpusched.workload = Empty,
        gpusched.node_count = Empty,
        gpusched.card_count = Empty,
        gpusched.chosen_node = Empty,
        gpusched.outcome = Empty,
        gpusched.reason_summary = Empty,
    );
    let _ = span.set_parent(crate::telemetry::remote_context(metadata));
    let limits = &state.settings.limits;
    // The caller's deadline is also enforced by tonic's timer (answering CANCELLED); answering a
    // little before it keeps the answer DEADLINE_EXCEEDED.
    let deadline = crate::rpc::grpc_timeout(metadata)
        .map(|t| t.saturating_sub((t / 20).min(Duration::from_millis(2))))
        .map_or(limits.request_timeout, |t| t.min(limits.request_timeout));
    let blocking = work_estimate >= limits.blocking_threshold_cards;
    let cancel = Cancel::new(started, deadline);
    let _stop_on_drop = StopOnDrop(cancel.clone());
    let st = Arc::clone(&state);
    let outcome = async move {
        let permit = st.permit(deadline).await?;
        let remaining = deadline.saturating_sub(started.elapsed());
        let task = {
            let st = Arc::clone(&st);
            let cancel = cancel.clone();
            move || {
                // The slot is the work's: released when the work ends, not when the caller
                // stops waiting.
                let _permit = permit;
                let mut record = Record::default();
                // Defence in depth: a bug must fail one call, never the server.
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    work(&st, &mut record, &cancel)
                }))
                .unwrap_or_else(|_| Err(ServiceError::Internal("the decision panicked".into())));
                (out, record)
            }
        };
        let result = if blocking {
            let handle = tokio::task::spawn_blocking(task);
            match tokio::time::timeout(remaining, handle).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => (
                    Err(ServiceError::Internal(format!("decision task failed: {e}"))),
                    Record::default(),
                ),
                Err(_) => {
                    // The work stops at its next node and then releases its slot.
                    cancel.stop();
                    (
                        Err(ServiceError::DeadlineExceeded(deadline)),
                        Record::default(),
                    )
                }
            }
        } else {
            task()
        };
        // An answer ready only after the deadline is of no use to the caller.
        let result = if started.elapsed() > deadline {
            (Err(ServiceError::DeadlineExceeded(deadline)), result.1)
        } else {
            result
        };
        Ok(result)
    }
    .instrument(span.clone())
    .await;
    let (result, record) = match outcome {
        Ok(r) => r,
        Err(e) => (Err(e), Record::default()),
    };
    let outcome_label = match &result {
        Ok(_) => "ok",
        Err(e) => e.outcome(),
    };
    span.record("gpusched.workload", record.workload.as_str());
    span.record(
        "gpusched.node_count",
        i64::try_from(record.nodes).unwrap_or(i64::MAX),
    );
    span.record(
        "gpusched.card_count",
        i64::try_from(record.cards).unwrap_or(i64::MAX),
    );
    if let Some(c) = &record.chosen {
        span.record("gpusched.chosen_node", c.as_str());
    }
    let decision_outcome = if result.is_ok() {
        record.result
    } else {
        outcome_label
    };
    span.record("gpusched.outcome", decision_outcome);
    span.record("gpusched.reason_summary", record.summary().as_str());
    // RPC semantic conventions: the gRPC status code as an integer and, on failure, an error
    // span status carrying the message the caller gets.
    let result = result.map_err(tonic::Status::from);
    match &result {
        Ok(_) => {
            span.record("rpc.grpc.status_code", tonic::Code::Ok as i64);
            span.record("otel.status_code", "ok");
        }
        Err(status) => {
            span.record("rpc.grpc.status_code", status.code() as i64);
            span.record("otel.status_code", "error");
            span.record("otel.status_description", status.message());
        }
    }
    // Calls are counted by code in `edge` (the code the client reads, whatever failed).
    let metrics = &state.metrics;
    if record.nodes > 0 {
        metrics.observe_nodes(rpc, record.nodes);
    }
    if result.is_ok() && record.decision {
        metrics.decision(rpc, record.node_policy, &record.gpu_policy, record.result);
        metrics.rejections(&record.rejections);
        if let Some(n) = record.victims {
            metrics.victims(n);
        }
    }
    span.in_scope(|| match &result {
        Ok(_) if record.decision => tracing::info!(
            rpc,
            workload = %record.workload,
            nodes = record.nodes,
            chosen = record.chosen.as_deref().unwrap_or(""),
            result = record.result,
            reasons = %record.summary(),
            victims = record.victims,
            micros = started.elapsed().as_micros() as u64,
            "decision"
        ),
        Ok(_) => tracing::debug!(rpc, workload = %record.workload, result = record.result, "call"),
        Err(e) => tracing::debug!(rpc, error = %e.message(), code = ?e.code(), "call failed"),
    });
    result.map(tonic::Response::new)
}
