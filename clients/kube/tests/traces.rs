//! One trace per pod: the extender's spans (filter, prioritize, bind) are in the trace derived
//! from the pod's UID and the gpusched service's RPC spans are their children, exported through
//! `gpusched_runtime::logging`'s OTLP pipeline to a real OTLP/gRPC receiver on 127.0.0.1:0.
//! The service runs in process (its `tracing` spans go through the same pipeline).
//!
//! One test in this file: it installs the process's global `tracing` subscriber.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gpusched_client::ClientBuilder;
use gpusched_kube::config::Names;
use gpusched_kube::extender_v1::{ExtenderArgs, ExtenderBindingArgs};
use gpusched_kube::leader::Leadership;
use gpusched_kube::metrics::Metrics;
use gpusched_kube::shim::{BindOutcome, Shim};
use gpusched_kube::traces::{PodTraces, pod_trace_id};
use gpusched_kube::view::ClusterView;
use gpusched_runtime::{LogFormat, Telemetry};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind, status::StatusCode};
use serde_json::json;
use tokio::sync::mpsc;

#[derive(Clone)]
struct Receiver(mpsc::UnboundedSender<Span>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for rs in request.into_inner().resource_spans {
            for ss in rs.scope_spans {
                for span in ss.spans {
                    let _ = self.0.send(span);
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn attr(span: &Span, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| v.value.clone())
}

fn gpu_node(name: &str, cards: u32) -> Node {
    let cards = gpusched_client::node(name, cards, 16384, "NVIDIA-A100").cards;
    serde_json::from_value(json!({"metadata": {"name": name, "annotations": {
        "hami.io/node-nvidia-register": gpusched_hami::encode_register(&cards)
    }}}))
    .unwrap()
}

fn gpu_pod(name: &str, uid: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {"schedulerName": "gpusched-scheduler",
                 "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extender_spans_share_the_pods_trace_and_parent_the_service_spans() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Receiver(tx)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let telemetry = gpusched_runtime::logging::init(
        &Telemetry {
            log_format: LogFormat::Text,
            log_level: "warn".into(),
            otlp_endpoint: Some(format!("http://{otlp}")),
            service_name: "gpusched-test".into(),
            sample_ratio: 1.0,
        },
        "gpusched_service",
    )
    .unwrap();

    let server = gpusched_service::testing::start_server(&[("metrics.enabled", "false")]).await;
    let service = ClientBuilder::new(server.grpc_addr.to_string())
        .timeout(Some(Duration::from_secs(5)))
        .connect()
        .await
        .unwrap();
    let (nr, mut nw) = reflector::store::<Node>();
    let (pr, _pw) = reflector::store::<Pod>();
    for n in [gpu_node("n1", 2), gpu_node("n2", 2)] {
        nw.apply_watcher_event(&Event::Apply(n));
    }
    let names = Names {
        scheduler_name: "gpusched-scheduler".into(),
        ..Names::default()
    };
    let view = Arc::new(ClusterView::new(nr, pr, names, Duration::from_secs(60)));
    view.mark_synced();
    let shim = Shim {
        view,
        service,
        kube: None,
        leader: Arc::new(Leadership::always("t")),
        recorder: None,
        reserve: true,
        metrics: Metrics::default(),
        traces: PodTraces::new(telemetry.tracer()),
        preemptor: None,
    };

    let uid = "3f1c6f0e-8d2a-4b1e-9c3a-5e7d2f4a6b8c";
    let pod = gpu_pod("p", uid);
    let args = ExtenderArgs {
        pod: Some(pod),
        nodes: None,
        node_names: Some(vec!["n1".into(), "n2".into()]),
    };
    let filtered = shim.filter(&args).await;
    assert_eq!(filtered.error, "");
    shim.prioritize(&args).await.unwrap();
    // No Kubernetes client here: the bind fails before the service is asked (the e2e binds for
    // real); its span is still in the pod's trace, with the error.
    let bind = shim
        .bind(&ExtenderBindingArgs {
            pod_name: "p".into(),
            pod_namespace: "ns".into(),
            pod_uid: uid.into(),
            node: "n1".into(),
        })
        .await;
    assert!(matches!(bind, BindOutcome::Failed(_)), "{bind:?}");
    telemetry.force_flush();

    // filter, prioritize, bind; Filter, Score and Allocate (prioritize's reservation).
    let mut spans: BTreeMap<String, Span> = BTreeMap::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while spans.len() < 6 {
            let s = rx.recv().await.unwrap();
            spans.insert(s.name.clone(), s);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("six spans exported: got {:?}", spans.keys()));

    let trace = pod_trace_id(uid).unwrap().to_string();
    for name in ["POST /filter", "POST /prioritize", "POST /bind"] {
        let s = spans
            .get(name)
            .unwrap_or_else(|| panic!("{name}: {:?}", spans.keys()));
        assert_eq!(hex(&s.trace_id), trace, "{name} is in the pod's trace");
        assert!(s.parent_span_id.is_empty(), "{name} is a root span");
        assert_eq!(s.kind, SpanKind::Server as i32, "{name}");
        assert_eq!(attr(s, "k8s.pod.uid"), Some(Value::StringValue(uid.into())));
        assert_eq!(
            attr(s, "k8s.pod.name"),
            Some(Value::StringValue("p".into()))
        );
        assert_eq!(
            attr(s, "k8s.namespace.name"),
            Some(Value::StringValue("ns".into()))
        );
    }
    let filter = &spans["POST /filter"];
    assert_eq!(
        attr(filter, "gpusched.candidate_nodes"),
        Some(Value::IntValue(2))
    );
    assert_eq!(
        attr(filter, "gpusched.feasible_nodes"),
        Some(Value::IntValue(2))
    );
    assert_eq!(
        attr(filter, "gpusched.outcome"),
        Some(Value::StringValue("ok".into()))
    );
    let bind = &spans["POST /bind"];
    assert_eq!(
        attr(bind, "k8s.node.name"),
        Some(Value::StringValue("n1".into()))
    );
    let status = bind.status.as_ref().expect("bind status");
    assert_eq!(status.code, StatusCode::Error as i32);
    assert!(
        status.message.contains("no Kubernetes client"),
        "{}",
        status.message
    );

    for (rpc, parent) in [
        ("gpusched.v1.PlacementService/Filter", "POST /filter"),
        ("gpusched.v1.PlacementService/Score", "POST /prioritize"),
        ("gpusched.v1.PlacementService/Allocate", "POST /prioritize"),
    ] {
        let s = spans
            .get(rpc)
            .unwrap_or_else(|| panic!("{rpc}: {:?}", spans.keys()));
        assert_eq!(hex(&s.trace_id), trace, "{rpc} is in the pod's trace");
        assert_eq!(
            s.parent_span_id, spans[parent].span_id,
            "{rpc} is a child of {parent}"
        );
    }
    drop(telemetry);
}
