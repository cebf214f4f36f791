//! The Rust client against a live server (errors, deadlines, TLS-less basics), against a
//! scripted peer (retry only on UNAVAILABLE, trace-context propagation), and `gpuschedctl`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpusched_api::v1::placement_service_server::{PlacementService, PlacementServiceServer};
use gpusched_client::{ClientBuilder, PodBuilder, RetryPolicy, node, v1};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use tonic::{Code, Request, Response, Status};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

async fn live() -> gpusched_service::Running {
    gpusched_service::testing::start_server(&[("metrics.enabled", "false")]).await
}

#[tokio::test]
async fn allocate_two_nodes_and_read_reasons() {
    let server = live().await;
    let client = ClientBuilder::new(server.grpc_addr.to_string())
        .connect()
        .await
        .unwrap();
    let pod = PodBuilder::new("default", "trainer")
        .container(
            "main",
            &[("nvidia.com/gpu", "2"), ("nvidia.com/gpumem", "30000")],
        )
        .build();
    let nodes = vec![
        node("small", 1, 40960, "NVIDIA-A100"),
        node("big", 4, 40960, "NVIDIA-A100"),
    ];
    let r = client.allocate(nodes, pod).await.unwrap();
    assert!(r.placed);
    assert_eq!(r.node_name, "big");
    assert_eq!(r.containers[0].cards.len(), 2);
    assert_eq!(r.failed_nodes[0].node_name, "small");
    assert_eq!(r.failed_nodes[0].message, "NodeInsufficientDevice");
}

#[tokio::test]
async fn invalid_annotation_is_a_typed_error() {
    let server = live().await;
    let client = ClientBuilder::new(format!("http://{}", server.grpc_addr))
        .connect()
        .await
        .unwrap();
    let pod = PodBuilder::new("default", "p")
        .annotation("hami.io/device-scoring-weights", "slot=1,core=1")
        .container("main", &[("nvidia.com/gpu", "1")])
        .build();
    let err = client.allocate(vec![], pod).await.unwrap_err();
    let api = err.api().expect("an API error");
    assert!(api.is_invalid_argument());
    let v = api
        .violation_for("hami.io/device-scoring-weights")
        .expect("names the annotation");
    assert!(v.description.contains("exactly 3"));
    assert_eq!(v.reason, "INVALID_SCORING_WEIGHTS");
    assert_eq!(v.kind(), v1::ViolationReason::InvalidScoringWeights);
    assert_eq!(
        api.violations_of(v1::ViolationReason::InvalidScoringWeights)
            .count(),
        1
    );
    assert_eq!(api.reason(), "INVALID_SCORING_WEIGHTS");
    assert_eq!(api.error_info.as_ref().unwrap().domain, "gpusched.io");
}

#[tokio::test]
async fn resource_exhausted_names_the_limit() {
    let server = gpusched_service::testing::start_server(&[
        ("metrics.enabled", "false"),
        ("limits.max_nodes", "1"),
    ])
    .await;
    let client = ClientBuilder::new(server.grpc_addr.to_string())
        .connect()
        .await
        .unwrap();
    let pod = PodBuilder::new("d", "p")
        .container("c", &[("nvidia.com/gpu", "1")])
        .build();
    let err = client
        .allocate(vec![node("a", 1, 1, "x"), node("b", 1, 1, "x")], pod)
        .await
        .unwrap_err();
    let api = err.api().unwrap();
    assert_eq!(api.code, Code::ResourceExhausted);
    assert_eq!(api.quota_violations[0].field, "nodes");
    assert!(
        api.quota_violations[0]
            .description
            .contains("limits.max_nodes")
    );
}

/// A peer that answers from a script and records what it received.
#[derive(Clone, Default)]
struct Scripted {
    calls: Arc<AtomicU32>,
    fail_first: u32,
    code: Option<Code>,
    traceparent: Arc<Mutex<Option<String>>>,
    delay: Option<Duration>,
}

#[tonic::async_trait]
impl PlacementService for Scripted {
    async fn filter(
        &self,
        _: Request<v1::FilterRequest>,
    ) -> Result<Response<v1::FilterResponse>, Status> {
        Err(Status::unimplemented("filter"))
    }
    async fn score(
        &self,
        _: Request<v1::ScoreRequest>,
    ) -> Result<Response<v1::ScoreResponse>, Status> {
        Err(Status::unimplemented("score"))
    }
    async fn allocate(
        &self,
        req: Request<v1::AllocateRequest>,
    ) -> Result<Response<v1::AllocateResponse>, Status> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        *self.traceparent.lock().unwrap() = req
            .metadata()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        match self.code {
            Some(code) if n <= self.fail_first => Err(Status::new(code, "scripted")),
            _ => Ok(Response::new(v1::AllocateResponse {
                result: Some(v1::AllocationResult {
                    placed: true,
                    ..Default::default()
                }),
            })),
        }
    }
    async fn allocate_batch(
        &self,
        _: Request<v1::AllocateBatchRequest>,
    ) -> Result<Response<v1::AllocateBatchResponse>, Status> {
        Err(Status::unimplemented("batch"))
    }
    async fn validate_workload(
        &self,
        _: Request<v1::ValidateWorkloadRequest>,
    ) -> Result<Response<v1::ValidateWorkloadResponse>, Status> {
        Err(Status::unimplemented("validate"))
    }
    async fn preempt(
        &self,
        _: Request<v1::PreemptRequest>,
    ) -> Result<Response<v1::PreemptResponse>, Status> {
        Err(Status::unimplemented("preempt"))
    }
}

async fn scripted(peer: Scripted) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(PlacementServiceServer::new(peer))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr
}

fn pod() -> v1::Workload {
    PodBuilder::new("d", "p")
        .container("c", &[("nvidia.com/gpu", "1")])
        .build()
}

#[tokio::test]
async fn retries_unavailable_with_backoff() {
    let peer = Scripted {
        fail_first: 2,
        code: Some(Code::Unavailable),
        ..Default::default()
    };
    let calls = Arc::clone(&peer.calls);
    let addr = scripted(peer).await;
    let retry = RetryPolicy {
        max_attempts: 4,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
    };
    let client = ClientBuilder::new(addr.to_string())
        .retry(retry)
        .connect()
        .await
        .unwrap();
    assert!(client.allocate(vec![], pod()).await.unwrap().placed);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "two UNAVAILABLE answers, then success"
    );
    // Gives up after max_attempts.
    let peer = Scripted {
        fail_first: 10,
        code: Some(Code::Unavailable),
        ..Default::default()
    };
    let calls = Arc::clone(&peer.calls);
    let addr = scripted(peer).await;
    let client = ClientBuilder::new(addr.to_string())
        .retry(retry)
        .connect()
        .await
        .unwrap();
    assert_eq!(
        client
            .allocate(vec![], pod())
            .await
            .unwrap_err()
            .api()
            .unwrap()
            .code,
        Code::Unavailable
    );
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn never_retries_invalid_argument_or_other_codes() {
    for code in [
        Code::InvalidArgument,
        Code::ResourceExhausted,
        Code::Internal,
        Code::DeadlineExceeded,
    ] {
        let peer = Scripted {
            fail_first: 10,
            code: Some(code),
            ..Default::default()
        };
        let calls = Arc::clone(&peer.calls);
        let addr = scripted(peer).await;
        let client = ClientBuilder::new(addr.to_string())
            .connect()
            .await
            .unwrap();
        assert_eq!(
            client
                .allocate(vec![], pod())
                .await
                .unwrap_err()
                .api()
                .unwrap()
                .code,
            code
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{code:?} is not retried");
    }
}

#[test]
fn backoff_grows_and_is_capped() {
    let r = RetryPolicy {
        max_attempts: 10,
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(300),
    };
    let waits: Vec<u128> = (1..=5).map(|n| r.backoff(n).as_millis()).collect();
    assert_eq!(waits, vec![50, 100, 200, 300, 300]);
}

#[tokio::test]
async fn default_deadline_applies() {
    let peer = Scripted {
        delay: Some(Duration::from_secs(5)),
        ..Default::default()
    };
    let addr = scripted(peer).await;
    let client = ClientBuilder::new(addr.to_string())
        .timeout(Some(Duration::from_millis(100)))
        .retry(RetryPolicy::none())
        .connect()
        .await
        .unwrap();
    let err = client.allocate(vec![], pod()).await.unwrap_err();
    let code = err.api().unwrap().code;
    // tonic reports its own client-side timeout as CANCELLED; the peer's as DEADLINE_EXCEEDED.
    assert!(
        matches!(code, Code::Cancelled | Code::DeadlineExceeded),
        "{code:?}"
    );
}

#[tokio::test]
async fn propagates_the_current_trace() {
    let peer = Scripted::default();
    let seen = Arc::clone(&peer.traceparent);
    let addr = scripted(peer).await;
    let client = ClientBuilder::new(addr.to_string())
        .connect()
        .await
        .unwrap();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _guard = tracing::subscriber::set_default(subscriber);
    let span = tracing::info_span!("caller");
    let trace_id = span.context().span().span_context().trace_id().to_string();
    {
        let _entered = span.enter();
        client.allocate(vec![], pod()).await.unwrap();
    }
    let header = seen.lock().unwrap().clone().expect("traceparent sent");
    assert!(
        header.starts_with(&format!("00-{trace_id}-")),
        "{header} vs {trace_id}"
    );
}

/// Without a `tracing` span, the OpenTelemetry context the caller attached to the future (a span
/// made with the OpenTelemetry API, as gpusched-kube does for its per-pod traces) is sent.
#[tokio::test]
async fn propagates_an_attached_opentelemetry_context() {
    use opentelemetry::context::FutureExt as _;
    use opentelemetry::trace::{Span as _, Tracer as _};
    let peer = Scripted::default();
    let seen = Arc::clone(&peer.traceparent);
    let addr = scripted(peer).await;
    let client = ClientBuilder::new(addr.to_string())
        .connect()
        .await
        .unwrap();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let tracer = provider.tracer("test");
    let trace_id =
        opentelemetry::trace::TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap();
    let span = tracer
        .span_builder("caller")
        .with_trace_id(trace_id)
        .start_with_context(&tracer, &opentelemetry::Context::new());
    let span_id = span.span_context().span_id();
    let cx = opentelemetry::Context::new().with_span(span);
    client
        .allocate(vec![], pod())
        .with_context(cx)
        .await
        .unwrap();
    let header = seen.lock().unwrap().clone().expect("traceparent sent");
    assert_eq!(header, format!("00-{trace_id}-{span_id}-01"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpuschedctl_allocate_explain_and_errors() {
    let server = live().await;
    let addr = format!("http://{}", server.grpc_addr);
    let bin = env!("CARGO_BIN_EXE_gpuschedctl");
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let run = move |args: Vec<String>| Command::new(bin).args(args).output().unwrap();
    let a = addr.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(vec![
            "--addr".into(),
            a,
            "allocate".into(),
            format!("{examples}/allocate-two-nodes.json"),
        ])
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["nodeName"], "node1");
    assert_eq!(json["containers"][0]["cards"][0]["cardId"], "GPU2");
    let a = addr.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(vec![
            "--addr".into(),
            a,
            "allocate".into(),
            "--explain".into(),
            format!("{examples}/allocate-two-nodes.json"),
        ])
    })
    .await
    .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("placed on node1") && text.contains("CHOSEN") && text.contains("18.750"),
        "{text}"
    );
    let a = addr.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(vec![
            "--addr".into(),
            a,
            "allocate".into(),
            format!("{examples}/invalid-weights.json"),
        ])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("InvalidArgument") && err.contains("hami.io/device-scoring-weights"),
        "{err}"
    );
    let a = addr.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(vec![
            "--addr".into(),
            a,
            "normalize".into(),
            "--compact".into(),
            format!("{examples}/normalize.json"),
        ])
    })
    .await
    .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("\"totalMemMib\":\"215656\"")
    );
    // Preempt, explained: the choice, each node's verdict and every eligible workload's reprieve.
    let a = addr.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(vec![
            "--addr".into(),
            a,
            "preempt".into(),
            "--explain".into(),
            format!("{examples}/preempt.json"),
        ])
    })
    .await
    .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "evict on n1",
        "victims low (0 violate a budget; 2 eligible)",
        "GPU-0 (20000 MiB, 0% cores)",
        "not a candidate (no_lower_priority): 1/1 CardInsufficientMemory",
        "kept",
        "evicted: with it back, 1/1 CardInsufficientMemory",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    // A MIG card's choice, explained: the instance and every profile considered.
    let a = addr.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(vec![
            "--addr".into(),
            a,
            "allocate".into(),
            "--explain".into(),
            format!("{examples}/allocate-mig-h200.json"),
        ])
    })
    .await
    .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "GPU-h200 (MIG 1g.18gb at 0, reused; 16384 MiB, 13% cores)",
        "MIG: 1g.18gb chosen at 0 (reused) | 1g.18gb+me not reached",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}
