//! The agent loop on pure trait fakes: a scripted [`GpuSource`], a local [`Normalizer`] that
//! can fail, and a recording [`Publisher`].

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Recording, healthy};
use gpusched_agent::agent::{self, AgentState, LoopSettings};
use gpusched_agent::discovery::{CardFacts, DiscoveryError, GpuSource};
use gpusched_agent::inventory::{NormalizeError, Normalizer};
use gpusched_api::v1;
use tokio::sync::Notify;

fn card(i: u32, healthy: bool) -> CardFacts {
    CardFacts {
        uuid: format!("GPU-{i}"),
        index: i,
        model_name: "NVIDIA T4".into(),
        total_memory_bytes: 16 << 30,
        numa: Some(0),
        mig_enabled: false,
        mig: gpusched_agent::discovery::MigState::Disabled,
        unhealthy_reasons: if healthy {
            vec![]
        } else {
            vec!["broken".into()]
        },
        links: vec![],
        pci_bus_id: None,
        minor_number: None,
        cpus: None,
        cores: None,
    }
}

#[derive(Debug, Clone)]
struct FakeSource {
    next: Arc<Mutex<Result<Vec<CardFacts>, DiscoveryError>>>,
    reads: Arc<AtomicUsize>,
    changes: Arc<Notify>,
}

impl FakeSource {
    fn new(cards: Vec<CardFacts>) -> Self {
        FakeSource {
            next: Arc::new(Mutex::new(Ok(cards))),
            reads: Arc::default(),
            changes: Arc::new(Notify::new()),
        }
    }

    fn set(&self, r: Result<Vec<CardFacts>, DiscoveryError>) {
        *self.next.lock().expect("lock") = r;
    }
}

impl GpuSource for FakeSource {
    fn read(&mut self) -> Result<Vec<CardFacts>, DiscoveryError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.next.lock().expect("lock").clone()
    }

    fn changes(&self) -> Option<Arc<Notify>> {
        Some(Arc::clone(&self.changes))
    }

    fn describe(&self) -> String {
        "fake".into()
    }
}

/// Normalises locally (10 slots, memory in MiB) unless told to fail.
#[derive(Debug, Clone, Default)]
struct FakeNormalizer {
    fail: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
}

impl Normalizer for FakeNormalizer {
    async fn normalize(
        &self,
        req: v1::NormalizeInventoryRequest,
    ) -> Result<v1::NormalizeInventoryResponse, NormalizeError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return Err(NormalizeError::Other("service down".into()));
        }
        Ok(v1::NormalizeInventoryResponse {
            cards: req
                .cards
                .iter()
                .map(|c| v1::Card {
                    mig: None,
                    id: c.uuid.clone(),
                    index: c.index,
                    r#type: c.model_name.clone(),
                    slots: 10,
                    total_mem_mib: c.total_memory_bytes >> 20,
                    total_cores: 100,
                    numa: c.numa.unwrap_or(0),
                    health: c.health,
                    mode: v1::CardMode::HamiCore as i32,
                    usage: None,
                })
                .collect(),
            ..Default::default()
        })
    }
}

fn settings(interval_ms: u64, poll_ms: u64, withdraw: bool) -> LoopSettings {
    LoopSettings {
        node_name: "n".into(),
        interval: Duration::from_millis(interval_ms),
        poll_interval: Duration::from_millis(poll_ms),
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        withdraw_on_shutdown: withdraw,
    }
}

struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    state: Arc<AgentState>,
}

fn start(src: &FakeSource, norm: &FakeNormalizer, rec: &Recording, cfg: LoopSettings) -> Running {
    let state = Arc::new(AgentState::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(agent::run(
        src.clone(),
        norm.clone(),
        rec.clone(),
        cfg,
        Arc::clone(&state),
        async move {
            let _ = stopped.await;
        },
    ));
    Running { stop, task, state }
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("agent stops")
            .expect("agent task");
    }
}

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_on_change_and_refreshes_at_the_interval() {
    let src = FakeSource::new(vec![card(0, true), card(1, true)]);
    let norm = FakeNormalizer::default();
    let rec = Recording::default();
    let run = start(&src, &norm, &rec, settings(1500, 30, false));
    rec.wait_for("first", WAIT, |i| i.normalized.cards.len() == 2)
        .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(rec.count(), 1, "nothing changed: no new publication");
    assert_eq!(
        norm.calls.load(Ordering::SeqCst),
        1,
        "same raw cards: the service is not asked again"
    );
    assert!(src.reads.load(Ordering::SeqCst) >= 5);
    src.set(Ok(vec![card(0, true), card(1, false)]));
    rec.wait_for("card 1 unhealthy", Duration::from_secs(2), |i| {
        healthy(i, "GPU-1") == Some(false)
    })
    .await;
    assert_eq!(rec.count(), 2);
    // The interval passes: the same inventory is published again (handshake refresh).
    tokio::time::sleep(Duration::from_millis(1700)).await;
    assert!(rec.count() >= 3, "{}", rec.count());
    run.stop().await;
    assert!(!rec.withdrawn.load(Ordering::SeqCst), "withdraw is off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_request_and_a_source_change_act_at_once() {
    let src = FakeSource::new(vec![card(0, true)]);
    let norm = FakeNormalizer::default();
    let rec = Recording::default();
    let run = start(&src, &norm, &rec, settings(60_000, 30_000, true));
    rec.wait_for("first", WAIT, |_| true).await;
    rec.requests.notify_one();
    let t = std::time::Instant::now();
    while rec.count() < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "handshake request not answered"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reads = src.reads.load(Ordering::SeqCst);
    src.set(Ok(vec![card(0, false)]));
    src.changes.notify_one();
    rec.wait_for("change published", Duration::from_secs(2), |i| {
        healthy(i, "GPU-0") == Some(false)
    })
    .await;
    assert!(src.reads.load(Ordering::SeqCst) > reads);
    run.stop().await;
    assert!(
        rec.withdrawn.load(Ordering::SeqCst),
        "withdrawn on clean shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_errors_publish_nothing() {
    let src = FakeSource::new(vec![]);
    src.set(Err(DiscoveryError::Card {
        index: 1,
        what: "memory",
        message: "unknown error".into(),
    }));
    let norm = FakeNormalizer::default();
    let rec = Recording::default();
    let run = start(&src, &norm, &rec, settings(1000, 20, false));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rec.count(), 0);
    assert_eq!(norm.calls.load(Ordering::SeqCst), 0);
    assert!(!run.state.ready());
    assert!(run.state.snapshot().last_error.unwrap().contains("card 1"));
    src.set(Ok(vec![card(0, true)]));
    rec.wait_for("published", WAIT, |_| true).await;
    assert!(run.state.ready());
    assert_eq!(run.state.snapshot().last_error, None);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_down_keeps_the_last_good_inventory_with_fresh_health() {
    let src = FakeSource::new(vec![card(0, true), card(1, true)]);
    let norm = FakeNormalizer::default();
    norm.fail.store(true, Ordering::SeqCst);
    let rec = Recording::default();
    let run = start(&src, &norm, &rec, settings(1000, 20, false));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rec.count(), 0, "no inventory yet: nothing to publish");
    assert!(
        norm.calls.load(Ordering::SeqCst) >= 3,
        "retried with backoff"
    );
    norm.fail.store(false, Ordering::SeqCst);
    rec.wait_for("first", WAIT, |i| i.normalized.cards.len() == 2)
        .await;
    norm.fail.store(true, Ordering::SeqCst);
    // A new card waits for the service; a card that breaks is published broken at once.
    src.set(Ok(vec![card(0, false), card(1, true), card(2, true)]));
    let inv = rec
        .wait_for("card 0 unhealthy", WAIT, |i| {
            healthy(i, "GPU-0") == Some(false)
        })
        .await;
    assert_eq!(inv.normalized.cards.len(), 2);
    assert!(
        run.state
            .snapshot()
            .last_error
            .unwrap()
            .contains("service down")
    );
    norm.fail.store(false, Ordering::SeqCst);
    rec.wait_for("new card after the service is back", WAIT, |i| {
        i.normalized.cards.len() == 3
    })
    .await;
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_failures_retry_and_readiness_waits_for_success() {
    let src = FakeSource::new(vec![card(0, true)]);
    let norm = FakeNormalizer::default();
    let rec = Recording::default();
    rec.fail.store(true, Ordering::SeqCst);
    let run = start(&src, &norm, &rec, settings(10_000, 5_000, false));
    tokio::time::sleep(Duration::from_millis(600)).await;
    let attempts = rec.attempts.load(Ordering::SeqCst);
    assert!(
        attempts >= 3,
        "retried with backoff, not every poll_interval: {attempts}"
    );
    assert!(!run.state.ready());
    assert!(
        run.state
            .snapshot()
            .last_error
            .unwrap()
            .contains("told to fail")
    );
    rec.fail.store(false, Ordering::SeqCst);
    rec.wait_for("published", WAIT, |_| true).await;
    assert!(run.state.ready());
    run.stop().await;
}

async fn http_get(addr: std::net::SocketAddr, path: &str, accept: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// `/metrics` on the health endpoint: the loop's latency histograms per step, the card gauges,
/// the process metrics, in both formats and clean under the promtool rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_time_the_publish_loop() {
    use gpusched_runtime::metrics::{Format, lint};
    let src = FakeSource::new(vec![card(0, true), card(1, false)]);
    let norm = FakeNormalizer::default();
    let rec = Recording::default();
    let run = start(&src, &norm, &rec, settings(60_000, 30, false));
    rec.wait_for("first", WAIT, |i| i.normalized.cards.len() == 2)
        .await;
    // A few more rounds (every 30 ms): the first one's duration is recorded once it ends.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (addr, server) =
        gpusched_agent::health::serve("127.0.0.1:0".parse().unwrap(), Arc::clone(&run.state))
            .await
            .unwrap();
    for (accept, format) in [
        ("text/plain; version=0.0.4", Format::Text004),
        (
            "application/openmetrics-text; version=1.0.0",
            Format::OpenMetrics,
        ),
    ] {
        let response = http_get(addr, "/metrics", accept).await;
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let body: String = body
            .lines()
            .filter(|l| l.starts_with('#') || l.starts_with(|c: char| c.is_ascii_alphabetic()))
            .filter(|l| !l.chars().all(|c| c.is_ascii_hexdigit()))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            lint(&body, format),
            Vec::<String>::new(),
            "{accept}:\n{body}"
        );
        for needle in [
            "gpusched_agent_step_duration_seconds_count{step=\"read\",result=\"ok\"}",
            "gpusched_agent_step_duration_seconds_count{step=\"normalize\",result=\"ok\"} 1",
            "gpusched_agent_step_duration_seconds_count{step=\"publish\",result=\"ok\"} 1",
            "gpusched_agent_step_duration_seconds_count{step=\"round\",result=\"ok\"}",
            "gpusched_agent_step_duration_seconds_bucket{le=\"+Inf\",step=\"publish\",result=\"ok\"} 1",
            "gpusched_agent_cards 2",
            "gpusched_agent_healthy_cards 1",
            "gpusched_agent_consecutive_failures 0",
            "process_resident_memory_bytes ",
            "gpusched_build_info{version=",
        ] {
            assert!(
                body.contains(needle),
                "{accept}: missing {needle} in\n{body}"
            );
        }
    }
    assert!(http_get(addr, "/healthz", "*/*").await.contains("ok"));
    server.abort();
    run.stop().await;
}
