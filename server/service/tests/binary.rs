//! The `gpusched-server` binary: start-up line, config errors, `--print-config`, SIGTERM, and
//! OpenTelemetry traces exported over OTLP/gRPC to a real receiver, continuing the caller's
//! W3C trace.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
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
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("grpc="))
        .unwrap_or_else(|| panic!("no grpc= in {line:?}"))
        .to_owned();
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

fn attr(span: &Span, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| v.value.clone())
}

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
    ]);
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let mut client = PlacementServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut req = tonic::Request::new(allocate_req(
        vec![node("a", 1, 8000), node("b", 2, 8000)],
        pod(&[], &[&[("nvidia.com/gpu", "1")]]),
    ));
    req.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-{parent_id}-01").parse().unwrap(),
    );
    client.allocate(req).await.unwrap();
    let span = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let s = rx.recv().await.unwrap();
            if s.name == "gpusched.v1.PlacementService/Allocate" {
                return s;
            }
        }
    })
    .await
    .expect("the Allocate span is exported");
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    assert_eq!(
        hex(&span.trace_id),
        trace_id,
        "continues the caller's trace"
    );
    assert_eq!(
        hex(&span.parent_span_id),
        parent_id,
        "child of the caller's span"
    );
    assert_eq!(attr(&span, "gpusched.node_count"), Some(Value::IntValue(2)));
    assert_eq!(attr(&span, "gpusched.card_count"), Some(Value::IntValue(3)));
    assert_eq!(
        attr(&span, "gpusched.chosen_node"),
        Some(Value::StringValue("a".into()))
    );
    assert_eq!(
        attr(&span, "gpusched.outcome"),
        Some(Value::StringValue("placed".into()))
    );
    assert_eq!(
        attr(&span, "gpusched.workload"),
        Some(Value::StringValue("default/pod".into()))
    );
    assert_eq!(
        attr(&span, "rpc.method"),
        Some(Value::StringValue("Allocate".into()))
    );
    // Keep the runtime running (the client's connection answers the server's GOAWAY) while
    // waiting for the process.
    let (code, err) = tokio::task::spawn_blocking(move || terminate(child))
        .await
        .unwrap();
    drop(client);
    assert_eq!(code, 0, "{err}");
}
