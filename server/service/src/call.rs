//! What every RPC shares: the span (with the caller's trace context), the deadline, the
//! concurrency limit, running the CPU-bound decision inline or on the blocking pool, metrics
//! and the one log line per decision.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gpusched_engine::Reason;
use tokio::sync::Semaphore;
use tonic::metadata::MetadataMap;
use tracing::Instrument;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::config::Settings;
use crate::error::ServiceError;
use crate::metrics::Metrics;
use crate::rpc::Rpc;

/// Shared, read-only state of the service (plus the metrics and the decision permits).
#[derive(Debug)]
pub struct State {
    /// Validated settings.
    pub settings: Settings,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Converted node parts sent by reference (an optimisation; see `node_cache`).
    pub node_cache: crate::cache::nodes::NodeCache,
    /// Candidate sets kept by digest (an optimisation; see `set_cache`).
    pub node_sets: crate::cache::sets::SetCache,
    permits: Arc<Semaphore>,
    /// Calls waiting for a permit now (bounded by `limits.max_queued_requests`).
    queued: AtomicUsize,
}

impl State {
    /// State for these settings and metrics.
    pub fn new(settings: Settings, metrics: Arc<Metrics>) -> Self {
        let permits = Arc::new(Semaphore::new(settings.limits.max_concurrent_requests));
        let node_cache =
            crate::cache::nodes::NodeCache::new(&settings.node_cache, metrics.node_cache.clone());
        let node_sets = crate::cache::sets::SetCache::new(
            settings.node_sets.clone(),
            metrics.node_sets.clone(),
        );
        State {
            node_cache,
            node_sets,
            settings,
            metrics,
            permits,
            queued: AtomicUsize::new(0),
        }
    }

    /// A decision slot: at once when one is free; else after waiting in the bounded queue at
    /// most `limits.queue_timeout` and half of `remaining` (so a caller with a deadline reads
    /// RESOURCE_EXHAUSTED and RetryInfo before its deadline, not DEADLINE_EXCEEDED); refused at
    /// once when `limits.max_queued_requests` calls already wait.
    async fn permit(
        &self,
        remaining: Duration,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, ServiceError> {
        let limits = &self.settings.limits;
        let busy = || ServiceError::Busy(limits.max_concurrent_requests);
        match Arc::clone(&self.permits).try_acquire_owned() {
            Ok(p) => return Ok(p),
            Err(tokio::sync::TryAcquireError::Closed) => return Err(ServiceError::ShuttingDown),
            Err(tokio::sync::TryAcquireError::NoPermits) => {}
        }
        let queued = self.queued.fetch_add(1, Ordering::AcqRel);
        let _leave = Leave(&self.queued);
        if queued >= limits.max_queued_requests {
            return Err(busy());
        }
        let wait = limits.queue_timeout.min(remaining / 2);
        match tokio::time::timeout(wait, Arc::clone(&self.permits).acquire_owned()).await {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_)) => Err(ServiceError::ShuttingDown),
            Err(_) => Err(busy()),
        }
    }
}

/// Leaves the queue when dropped (the call got its permit, gave up or was dropped).
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Facts about a decision, recorded by the handler for the span, metrics and log.
#[derive(Debug, Default)]
pub struct Record {
    /// `namespace/name` of the workload(s).
    pub workload: String,
    /// Candidate nodes.
    pub nodes: usize,
    /// Candidate cards.
    pub cards: usize,
    /// Chosen node (Allocate).
    pub chosen: Option<String>,
    /// Decision result: `placed`, `unschedulable`, `feasible`, `no_gpu`, `valid`, `invalid`...
    pub result: &'static str,
    /// Node policy used.
    pub node_policy: &'static str,
    /// GPU policy used.
    pub gpu_policy: String,
    /// Nodes rejected per reason (summed over the request).
    pub rejections: Vec<(Reason, u64)>,
    /// Whether this call is a placement decision (logged at INFO).
    pub decision: bool,
}

impl Record {
    /// Sums reasons over failed nodes.
    pub fn add_rejections<'a>(
        &mut self,
        failures: impl Iterator<Item = &'a gpusched_engine::NodeFailure>,
    ) {
        let mut sums = [0u64; Reason::ALL.len()];
        for f in failures {
            for (i, r) in Reason::ALL.iter().enumerate() {
                if f.reasons.get(*r) > 0
                    && let Some(s) = sums.get_mut(i)
                {
                    *s += 1;
                }
            }
        }
        self.rejections = Reason::ALL
            .iter()
            .copied()
            .zip(sums)
            .filter(|(_, n)| *n > 0)
            .collect();
    }

    fn summary(&self) -> String {
        self.rejections
            .iter()
            .map(|(r, n)| format!("{r}={n}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// When a call's work must stop: its deadline passed, or nobody waits for the answer any more
/// (the caller went away, or the answer was already given as DEADLINE_EXCEEDED). The decision
/// asks [`Cancel::stopped`] before each node (`engine::*_until`). The flag is read at every ask;
/// the clock at every ask while reads come more than [`DENSE_READS`] apart (heavy nodes), and
/// at most every [`CLOCK_EVERY`]th ask while they come closer (light nodes: reading it at every
/// one was 11% of a 1,000-node decision's CPU). So the work, and the decision slot it holds,
/// end within one node's evaluation of a stop, and of the deadline within one node's or
/// [`CLOCK_EVERY`] light nodes' evaluations.
#[derive(Debug)]
pub struct Cancel {
    flag: Arc<AtomicBool>,
    deadline: Instant,
    limit: Duration,
    /// The clock reads of one decision (each clone has its own; one decision asks from one
    /// thread, so no atomic is needed).
    reads: Cell<Reads>,
}

/// When [`Cancel::stopped`] reads the clock next.
#[derive(Clone, Copy, Debug)]
struct Reads {
    /// Asks before the next read.
    skip: u32,
    /// Asks between reads now (1 up to [`CLOCK_EVERY`]).
    stride: u32,
    /// The last read.
    last: Option<Instant>,
}

/// Most asks of [`Cancel::stopped`] that share one reading of the clock.
pub const CLOCK_EVERY: u32 = 32;

/// Reads of the clock closer than this double the asks between reads; farther, one ask each.
pub const DENSE_READS: Duration = Duration::from_micros(50);

const FIRST_READ: Reads = Reads {
    skip: 0,
    stride: 1,
    last: None,
};

impl Clone for Cancel {
    fn clone(&self) -> Self {
        Cancel {
            flag: Arc::clone(&self.flag),
            deadline: self.deadline,
            limit: self.limit,
            reads: Cell::new(FIRST_READ),
        }
    }
}

impl Cancel {
    /// Stops at `limit` after `started`, or when [`Cancel::stop`] is called.
    pub fn new(started: Instant, limit: Duration) -> Self {
        Cancel {
            flag: Arc::new(AtomicBool::new(false)),
            deadline: started + limit,
            limit,
            reads: Cell::new(FIRST_READ),
        }
    }

    /// Never stops by itself (in-process callers without a deadline).
    pub fn never() -> Self {
        Cancel::new(Instant::now(), Duration::from_secs(100 * 365 * 24 * 3600))
    }

    /// Whether the work should stop now.
    pub fn stopped(&self) -> bool {
        if self.flag.load(Ordering::Relaxed) {
            return true;
        }
        let r = self.reads.get();
        if r.skip > 0 {
            self.reads.set(Reads {
                skip: r.skip - 1,
                ..r
            });
            return false;
        }
        let now = Instant::now();
        if now >= self.deadline {
            // Latched: every later ask, of every clone, stops at once.
            self.stop();
            return true;
        }
        let dense = r.last.is_some_and(|last| now - last < DENSE_READS);
        let stride = if dense {
            (r.stride * 2).min(CLOCK_EVERY)
        } else {
            1
        };
        self.reads.set(Reads {
            skip: stride - 1,
            stride,
            last: Some(now),
        });
        false
    }

    /// Tells the work to stop.
    pub fn stop(&self) {
        self.flag.store(true, Ordering::Relaxed);
    }

    /// The error of abandoned work.
    pub fn abandoned(&self) -> ServiceError {
        ServiceError::DeadlineExceeded(self.limit)
    }
}

/// Stops the work when dropped: the handler's future was dropped (the caller reset the stream)
/// or returned.
struct StopOnDrop(Cancel);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Runs one call: `work` is the synchronous decision (it fills the record and stops when
/// [`Cancel`] says so). `work_estimate` is the request's estimated work (card evaluations,
/// `prescan::Admission::work`), deciding inline or on the blocking pool. The decision slot is
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
    }
    span.in_scope(|| match &result {
        Ok(_) if record.decision => tracing::info!(
            rpc,
            workload = %record.workload,
            nodes = record.nodes,
            chosen = record.chosen.as_deref().unwrap_or(""),
            result = record.result,
            reasons = %record.summary(),
            micros = started.elapsed().as_micros() as u64,
            "decision"
        ),
        Ok(_) => tracing::debug!(rpc, workload = %record.workload, result = record.result, "call"),
        Err(e) => tracing::debug!(rpc, error = %e.message(), code = ?e.code(), "call failed"),
    });
    result.map(tonic::Response::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(slots: usize, queue: usize) -> State {
        let mut settings = crate::config::default_settings().expect("defaults");
        settings.limits.max_concurrent_requests = slots;
        settings.limits.max_queued_requests = queue;
        settings.limits.queue_timeout = Duration::from_secs(3600);
        State::new(settings, Arc::new(Metrics::new()))
    }

    #[test]
    fn a_passed_deadline_stops_within_clock_every_asks_and_stays_stopped() {
        // Already past: the first ask reads the clock.
        let past = Cancel::new(Instant::now() - Duration::from_secs(1), Duration::ZERO);
        assert!(past.stopped());
        // Passes while asked: seen within CLOCK_EVERY asks, then latched.
        let soon = Cancel::new(Instant::now(), Duration::from_millis(20));
        assert!(!soon.stopped());
        std::thread::sleep(Duration::from_millis(30));
        let asks = (1..=CLOCK_EVERY).find(|_| soon.stopped());
        assert!(asks.is_some(), "not seen within {CLOCK_EVERY} asks");
        assert!((0..3 * CLOCK_EVERY).all(|_| soon.stopped()));
        // A clone shares the stop.
        assert!(soon.clone().stopped());
        // Light nodes (asks close together): the reads spread out, yet the deadline is seen
        // within CLOCK_EVERY asks.
        let light = Cancel::new(Instant::now(), Duration::from_millis(20));
        assert!((0..10_000).all(|_| !light.stopped()));
        std::thread::sleep(Duration::from_millis(30));
        assert!((1..=CLOCK_EVERY).any(|_| light.stopped()));
        // Heavy nodes (asks over DENSE_READS apart): every ask reads the clock, so no ask that
        // starts after the deadline lets the work go on.
        let limit = Duration::from_millis(20);
        let started = Instant::now();
        let heavy = Cancel::new(started, limit);
        let mut late_passes = 0;
        loop {
            let asked = Instant::now();
            if heavy.stopped() {
                break;
            }
            if asked >= started + limit {
                late_passes += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(late_passes, 0);
        // Never: no ask stops it; an explicit stop does, at the next ask.
        let never = Cancel::never();
        assert!((0..3 * CLOCK_EVERY).all(|_| !never.stopped()));
        never.clone().stop();
        assert!(never.stopped());
    }

    #[tokio::test]
    async fn a_full_queue_sheds_at_once() {
        let st = state(1, 0);
        let held = st
            .permit(Duration::from_secs(3600))
            .await
            .expect("free slot");
        // No queue: refused without waiting (the timeouts above are an hour).
        let e = st.permit(Duration::from_secs(3600)).await.unwrap_err();
        assert_eq!(e, ServiceError::Busy(1));
        drop(held);
        assert!(st.permit(Duration::from_secs(3600)).await.is_ok());
        assert_eq!(st.queued.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn a_queued_call_gets_the_slot_when_it_frees() {
        let st = Arc::new(state(1, 1));
        let held = st
            .permit(Duration::from_secs(3600))
            .await
            .expect("free slot");
        let waiter = {
            let st = Arc::clone(&st);
            tokio::spawn(async move { st.permit(Duration::from_secs(3600)).await.is_ok() })
        };
        while st.queued.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        // The queue (of one) is full: the next is shed at once.
        assert_eq!(
            st.permit(Duration::from_secs(3600)).await.unwrap_err(),
            ServiceError::Busy(1)
        );
        drop(held);
        assert!(waiter.await.expect("waiter"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_queued_call_gives_up_at_half_its_deadline() {
        let st = state(1, 8);
        let _held = st
            .permit(Duration::from_secs(3600))
            .await
            .expect("free slot");
        let started = tokio::time::Instant::now();
        let e = st.permit(Duration::from_secs(10)).await.unwrap_err();
        assert_eq!(e, ServiceError::Busy(1));
        // Paused clock: exactly the wait the rule gives, not a measurement.
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }
}
