//! The `gpusched-server` binary: start-up line, config errors, `--print-config`, SIGTERM, and
//! OpenTelemetry traces exported over OTLP/gRPC to a real receiver, continuing the caller's
//! W3C trace.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use gpusched_api::v1::placement_service_client::PlacementServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use tokio::sync::mpsc;

const BIN: &str = env!("CARGO_BIN_EXE_gpusched-server");

fn clean_env(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars() {
        if k.starts_with("GPUSCHED_") || k.starts_with("OTEL_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Starts the binary on free ports; returns the child and the gRPC address it printed.
fn spawn(envs: &[(&str, &str)]) -> (Child, String) {
    let mut cmd = Command::new(BIN);
    clean_env(&mut cmd)
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let line = listening_line(&mut child);
    let addr = listening_on(&line, "grpc");
    assert!(
        line.starts_with("gpusched-server listening grpc=127.0.0.1:"),
        "{line}"
    );
    assert!(line.contains(" metrics=127.0.0.1:"), "{line}");
    (child, addr)
}

fn terminate(mut child: Child) -> (i32, String) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    (out.code().unwrap_or(-1), err)
}

#[test]
fn print_config_shows_the_effective_configuration() {
    let out = clean_env(&mut Command::new(BIN))
        .arg("--print-config")
        .env(
            "GPUSCHED_SERVER_POLICY__GPU_SCHEDULER_POLICY",
            "binpack,numa",
        )
        .arg("--listen")
        .arg("0.0.0.0:7000")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("listen = \"0.0.0.0:7000\""), "{text}");
    assert!(
        text.contains("gpu_scheduler_policy = \"binpack,numa\""),
        "{text}"
    );
    assert!(
        text.contains("[limits]") && text.contains("request_timeout = \"10s\""),
        "{text}"
    );
}

#[test]
fn a_bad_value_stops_the_process_with_one_line_naming_the_key() {
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str], &'a str);
    let cases: &[Case<'_>] = &[
        (
            &[("GPUSCHED_SERVER_POLICY__GPU_SCHEDULER_POLICY", "pack")],
            &[],
            "policy.gpu_scheduler_policy",
        ),
        (
            &[("GPUSCHED_SERVER_LIMITS__MAX_NODES", "lots")],
            &[],
            "limits.max_nodes",
        ),
        (
            &[],
            &["--node-policy", "Spread"],
            "policy.node_scheduler_policy",
        ),
        (
            &[],
            &[
                "--tls-cert",
                "/nonexistent.pem",
                "--tls-key",
                "/nonexistent.key",
            ],
            "tls.cert",
        ),
        (&[], &["--config", "/nonexistent.toml"], "--config"),
        (
            &[("GPUSCHED_SERVER_LIMITS__MAX_NODES", "-1")],
            &[],
            "limits.max_nodes: -1 is negative",
        ),
        (
            &[],
            &["--log-level", "verbose"],
            "telemetry.log_level: unknown log level \"verbose\"",
        ),
        // The older variable names are still read.
        (
            &[("GPUSCHED_POLICY__GPU_SCHEDULER_POLICY", "pack")],
            &[],
            "policy.gpu_scheduler_policy",
        ),
    ];
    for (envs, args, key) in cases {
        let out = clean_env(&mut Command::new(BIN))
            .envs(envs.iter().copied())
            .args(*args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{key}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(key), "{key}: {err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "limits:\n  max_nodez: 3\n").unwrap();
    let out = clean_env(&mut Command::new(BIN))
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("max_nodez"));
    // A file that is not PEM: the key, the file and the reason, before anything starts.
    let pem = dir.path().join("not.pem");
    std::fs::write(&pem, "hello").unwrap();
    let out = clean_env(&mut Command::new(BIN))
        .arg("--tls-cert")
        .arg(&pem)
        .arg("--tls-key")
        .arg(&pem)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("tls.cert") && err.contains("not.pem") && err.contains("no PEM certificate"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_gracefully() {
    let (child, addr) = spawn(&[]);
    let mut client = PlacementServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    client
        .allocate(allocate_req(
            vec![node("a", 1, 8000)],
            pod(&[], &[&[("nvidia.com/gpu", "1")]]),
        ))
        .await
        .unwrap();
    // Keep the runtime running (the client's connection answers the server's GOAWAY) while
    // waiting for the process.
    let (code, err) = tokio::task::spawn_blocking(move || terminate(child))
        .await
        .unwrap();
    drop(client);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("shutting down") && err.contains("stopped"),
        "{err}"
    );
    assert!(
        err.contains("decision"),
        "one INFO line per decision: {err}"
    );
}

/// A span with its resource's attributes.
type Exported = (Vec<KeyValue>, Span);

#[derive(Clone)]
struct Receiver(mpsc::UnboundedSender<Exported>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for rs in request.into_inner().resource_spans {
            let resource = rs.resource.map(|r| r.attributes).unwrap_or_default();
            for ss in rs.scope_spans {
                for span in ss.spans {
                    let _ = self.0.send((resource.clone(), span));
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn find(attributes: &[KeyValue], key: &str) -> Option<Value> {
    attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| v.value.clone())
}

fn attr(span: &Span, key: &str) -> Option<Value> {
    find(&span.attributes, key)
}

fn string(v: &str) -> Option<Value> {
    Some(Value::StringValue(v.into()))
}

const PARENT_ID: &str = "00f067aa0ba902b7";

/// `traceparent` flags as OpenTelemetry SDKs send them, each in its own trace: `01` (Go, Rust),
/// `03` (Python with opentelemetry-instrumentation-grpc: sampled + random trace id), `09` (an
/// unknown bit, ignored per the W3C specification) and `00` (not sampled: no span).
const FLAGS: [(&str, &str); 4] = [
    ("01", "0af7651916cd43dd8448eb211c80319c"),
    ("03", "4bf92f3577b34da6a3ce929d0e0e4736"),
    ("09", "5c1d2b8e9f0a4b6c8d7e6f5a4b3c2d1e"),
    ("00", "6d2e3c9fa01b5c7d9e8f7a6b5c4d3e2f"),
];
const INVALID_TRACE: &str = "7e3f4d0ab12c6d8eaf9a8b7c6d5e4f30";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_reach_a_real_otlp_receiver_with_attributes_and_parent() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Receiver(tx)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let endpoint = format!("http://{otlp}");
    let (child, addr) = spawn(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_SERVICE_NAME", "gpusched-test"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment.name=ci,service.name=overridden",
        ),
    ]);
    let mut client = PlacementServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let with_parent = |mut req: tonic::Request<_>, trace: &str, flags: &str| {
        let md = req.metadata_mut();
        md.insert(
            "traceparent",
            format!("00-{trace}-{PARENT_ID}-{flags}").parse().unwrap(),
        );
        md.insert(
            "tracestate",
            "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7".parse().unwrap(),
        );
        req
    };
    for (flags, trace) in FLAGS {
        let req = tonic::Request::new(allocate_req(
            vec![node("a", 1, 8000), node("b", 2, 8000)],
            pod(&[], &[&[("nvidia.com/gpu", "1")]]),
        ));
        client
            .allocate(with_parent(req, trace, flags))
            .await
            .unwrap();
    }
    let bad = tonic::Request::new(allocate_req(
        vec![node("a", 1, 8000), node("a", 1, 8000)],
        pod(&[], &[&[("nvidia.com/gpu", "1")]]),
    ));
    let err = client
        .allocate(with_parent(bad, INVALID_TRACE, "03"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mut spans = std::collections::BTreeMap::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while spans.len() < 4 {
            let (resource, s) = rx.recv().await.unwrap();
            if s.name == "gpusched.v1.PlacementService/Allocate" {
                spans.insert(hex(&s.trace_id), (resource, s));
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the Allocate spans are exported: got {:?}", spans.keys()));
    for (flags, trace) in &FLAGS[..3] {
        let (_, span) = spans.get(*trace).unwrap_or_else(|| {
            panic!("flags {flags}: the server span continues the caller's trace")
        });
        assert_eq!(
            hex(&span.parent_span_id),
            PARENT_ID,
            "flags {flags}: child of the caller's span"
        );
        assert_eq!(span.kind, 2, "SPAN_KIND_SERVER");
        assert!(
            span.trace_state.contains("congo=t61rcWkgMzE"),
            "tracestate carried: {:?}",
            span.trace_state
        );
    }
    assert!(
        !spans.contains_key(FLAGS[3].1),
        "flags 00: the caller's not-sampled decision is honoured"
    );
    let (resource, span) = spans.get(FLAGS[0].1).unwrap();
    assert_eq!(attr(span, "gpusched.node_count"), Some(Value::IntValue(2)));
    assert_eq!(attr(span, "gpusched.card_count"), Some(Value::IntValue(3)));
    assert_eq!(attr(span, "gpusched.chosen_node"), string("a"));
    assert_eq!(attr(span, "gpusched.outcome"), string("placed"));
    assert_eq!(attr(span, "gpusched.workload"), string("default/pod"));
    // RPC semantic conventions.
    assert_eq!(attr(span, "rpc.system"), string("grpc"));
    assert_eq!(
        attr(span, "rpc.service"),
        string("gpusched.v1.PlacementService")
    );
    assert_eq!(attr(span, "rpc.method"), string("Allocate"));
    assert_eq!(attr(span, "rpc.grpc.status_code"), Some(Value::IntValue(0)));
    let status = span.status.as_ref().map(|s| s.code);
    assert_eq!(status, Some(1), "STATUS_CODE_OK");
    // No noise attributes.
    for a in &span.attributes {
        assert!(
            !a.key.starts_with("code.")
                && !a.key.starts_with("thread.")
                && a.key != "busy_ns"
                && a.key != "idle_ns"
                && !a.key.starts_with("otel."),
            "noise attribute {:?} on {:?}",
            a.key,
            span.attributes.iter().map(|a| &a.key).collect::<Vec<_>>()
        );
    }
    // Resource: OTEL_SERVICE_NAME wins over OTEL_RESOURCE_ATTRIBUTES' service.name, which
    // adds its other attributes.
    assert_eq!(find(resource, "service.name"), string("gpusched-test"));
    assert_eq!(
        find(resource, "service.version"),
        string(env!("CARGO_PKG_VERSION"))
    );
    match find(resource, "service.instance.id") {
        Some(Value::StringValue(id)) => {
            assert!(id.ends_with(&format!("-{}", child.id())), "host-pid: {id}")
        }
        other => panic!("service.instance.id: {other:?}"),
    }
    assert_eq!(find(resource, "deployment.environment.name"), string("ci"));
    // A failed call: error status with the message the caller got, and its gRPC code.
    let (_, failed) = spans.get(INVALID_TRACE).unwrap();
    assert_eq!(hex(&failed.parent_span_id), PARENT_ID);
    assert_eq!(
        attr(failed, "rpc.grpc.status_code"),
        Some(Value::IntValue(tonic::Code::InvalidArgument as i64))
    );
    let status = failed.status.clone().unwrap();
    assert_eq!(status.code, 2, "STATUS_CODE_ERROR");
    assert_eq!(status.message, err.message());
    assert!(!status.message.is_empty());
    // Keep the runtime running (the client's connection answers the server's GOAWAY) while
    // waiting for the process.
    let (code, err) = tokio::task::spawn_blocking(move || terminate(child))
        .await
        .unwrap();
    drop(client);
    assert_eq!(code, 0, "{err}");
}
