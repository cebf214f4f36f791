//! Traces: one GPU pod scheduled through the extender, then, through Jaeger's HTTP query API
//! (`/api/traces?service=gpusched-kube&tag=k8s.pod.uid:...`), one trace for the pod whose id is
//! derived from its UID, holding gpusched-kube's `POST /filter`, `POST /prioritize` and
//! `POST /bind` spans and gpusched-server's RPC spans as their children (same trace id,
//! `CHILD_OF` references to the extender spans). `deploy/e2e/test.sh` runs Jaeger and points the
//! service and the shim at its OTLP receiver; it exports `E2E_JAEGER_QUERY` (the query
//! service's address), and without it (`E2E_TRACES=0`) the scenario is skipped.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::ALLOCATED;
use crate::harness::cluster::H;
use crate::harness::pods::{PodSpec, Shape, node_of};

/// GET over HTTP/1.0, so that the answer is never chunked (the harness's `http` speaks
/// HTTP/1.1 and does not decode chunks; Jaeger's answers are larger than Go's unchunked limit).
async fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req =
            format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n")?.1.to_owned();
        Some((code, body))
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .ok()
        .flatten()
}

/// One span of a Jaeger trace, with its service (process) name.
#[derive(Debug)]
struct JSpan {
    id: String,
    trace: String,
    op: String,
    service: String,
    parents: Vec<String>,
    tags: BTreeMap<String, Value>,
    warnings: Vec<String>,
}

fn spans_of(trace: &Value) -> Vec<JSpan> {
    let processes = &trace["processes"];
    trace["spans"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|s| JSpan {
            id: s["spanID"].as_str().unwrap_or_default().to_owned(),
            trace: s["traceID"].as_str().unwrap_or_default().to_owned(),
            op: s["operationName"].as_str().unwrap_or_default().to_owned(),
            service: processes[s["processID"].as_str().unwrap_or_default()]["serviceName"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            parents: s["references"]
                .as_array()
                .map(|a| a.as_slice())
                .unwrap_or_default()
                .iter()
                .filter(|r| r["refType"] == "CHILD_OF")
                .filter_map(|r| r["spanID"].as_str().map(str::to_owned))
                .collect(),
            tags: s["tags"]
                .as_array()
                .map(|a| a.as_slice())
                .unwrap_or_default()
                .iter()
                .filter_map(|t| Some((t["key"].as_str()?.to_owned(), t["value"].clone())))
                .collect(),
            warnings: s["warnings"]
                .as_array()
                .map(|a| a.as_slice())
                .unwrap_or_default()
                .iter()
                .filter_map(|w| w.as_str().map(str::to_owned))
                .collect(),
        })
        .collect()
}

const EXTENDER: [&str; 3] = ["POST /filter", "POST /prioritize", "POST /bind"];
/// Each extender call and the RPC it must have made as its child.
const CHILDREN: [(&str, &str); 3] = [
    ("POST /filter", "gpusched.v1.PlacementService/Filter"),
    ("POST /prioritize", "gpusched.v1.PlacementService/Score"),
    ("POST /bind", "gpusched.v1.PlacementService/Allocate"),
];

/// Whether every extender span has its RPC child in `spans` (the exporters batch, so the spans
/// arrive over a second or so).
fn complete(spans: &[JSpan]) -> bool {
    CHILDREN.iter().all(|(parent, child)| {
        spans.iter().any(|p| {
            p.op == *parent
                && spans
                    .iter()
                    .any(|c| c.op == *child && c.parents.contains(&p.id))
        })
    })
}

pub async fn run(h: &H) {
    let Ok(jaeger) = std::env::var("E2E_JAEGER_QUERY") else {
        h.say("traces: skipped (E2E_JAEGER_QUERY not set: deploy/e2e/test.sh with E2E_TRACES=0)");
        return;
    };
    let pool = "traces";
    let ns = h.namespace(pool, false).await;
    // Two feasible nodes, so that kube-scheduler calls prioritize too.
    for node in ["traces-node1", "traces-node2"] {
        h.make_node(
            node,
            pool,
            Shape {
                cards: 2,
                mem: 16384,
            },
            2,
        )
        .await;
    }
    let spec = PodSpec::new("traced", pool)
        .limit("nvidia.com/gpu", "1")
        .limit("nvidia.com/gpumem", "1000")
        .build();
    h.create(&ns, &spec).await.unwrap();
    let pod = h.wait_bound(&ns, "traced").await;
    let uid = pod.metadata.uid.clone().expect("uid");
    let node = node_of(&pod).expect("bound");
    let devices = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ALLOCATED))
        .cloned()
        .expect("decision annotation");
    let want = gpusched_kube::traces::pod_trace_id(&uid)
        .expect("uid")
        .to_string();

    // Search as a user would: the shim's service, the pod's UID as a span tag.
    let search =
        format!("/api/traces?service=gpusched-kube&tag=k8s.pod.uid:{uid}&lookback=1h&limit=20");
    let t = Instant::now();
    let (traces, spans) = loop {
        let found = get(&jaeger, &search).await;
        let traces: Vec<Value> = found
            .as_ref()
            .filter(|(code, _)| *code == 200)
            .and_then(|(_, body)| serde_json::from_str::<Value>(body).ok())
            .and_then(|v| v["data"].as_array().cloned())
            .unwrap_or_default();
        let spans: Vec<JSpan> = traces.iter().flat_map(spans_of).collect();
        if complete(&spans) {
            break (traces, spans);
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "Jaeger has no complete trace for pod {ns}/traced (uid {uid}) after 60s: {search} -> \
             {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let ids: Vec<&str> = traces
        .iter()
        .filter_map(|t| t["traceID"].as_str())
        .collect();
    assert_eq!(
        ids,
        [want.as_str()],
        "one trace for the pod, its id derived from the UID"
    );
    for s in &spans {
        assert_eq!(s.trace, want, "{} in the pod's trace", s.op);
        assert!(
            s.warnings.is_empty(),
            "{}: Jaeger warns {:?}",
            s.op,
            s.warnings
        );
    }
    for op in EXTENDER {
        let ours: Vec<&JSpan> = spans.iter().filter(|s| s.op == op).collect();
        assert!(!ours.is_empty(), "{op} in the trace");
        for s in ours {
            assert_eq!(s.service, "gpusched-kube", "{op}");
            assert!(
                s.parents.is_empty(),
                "{op} is a root span of the pod's trace"
            );
            assert_eq!(s.tags.get("k8s.pod.uid"), Some(&Value::from(uid.as_str())));
            assert_eq!(s.tags.get("k8s.pod.name"), Some(&Value::from("traced")));
            assert_eq!(
                s.tags.get("k8s.namespace.name"),
                Some(&Value::from(ns.as_str()))
            );
        }
    }
    // Every service span hangs under one of the shim's spans of this trace.
    let shim_ids: Vec<&str> = spans
        .iter()
        .filter(|s| s.service == "gpusched-kube")
        .map(|s| s.id.as_str())
        .collect();
    let rpcs: Vec<&JSpan> = spans
        .iter()
        .filter(|s| s.service == "gpusched-server")
        .collect();
    for s in &rpcs {
        assert!(
            s.parents.len() == 1 && shim_ids.contains(&s.parents[0].as_str()),
            "{} ({}) is a child of an extender span: parents {:?}",
            s.op,
            s.id,
            s.parents
        );
    }
    let bind = spans
        .iter()
        .find(|s| {
            s.op == "POST /bind"
                && s.tags.get("gpusched.outcome") == Some(&Value::from("bound_gpu"))
        })
        .expect("a bind span with outcome bound_gpu");
    assert_eq!(
        bind.tags.get("k8s.node.name"),
        Some(&Value::from(node.as_str()))
    );
    assert_eq!(
        bind.tags.get("gpusched.devices"),
        Some(&Value::from(devices.as_str()))
    );
    let count = |op: &str| spans.iter().filter(|s| s.op == op).count();
    h.result(format!(
        "traces: pod {ns}/traced -> {node}; Jaeger: one trace {want} (from the UID) with \
         filter×{} prioritize×{} bind×{} (gpusched-kube) and {} gpusched-server RPC spans, each \
         a child of one of them ✓",
        count("POST /filter"),
        count("POST /prioritize"),
        count("POST /bind"),
        rpcs.len()
    ));
}
