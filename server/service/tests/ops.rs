//! Health, reflection (v1 and v1alpha), metrics and graceful shutdown.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use gpusched_api::v1;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::StreamExt;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

async fn health(server: &TestServer, service: &str) -> i32 {
    HealthClient::new(server.channel.clone())
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

#[tokio::test]
async fn health_per_service() {
    let server = TestServer::start(&[]).await;
    for s in [
        "",
        "gpusched.v1.PlacementService",
        "gpusched.v1.InventoryService",
    ] {
        assert_eq!(
            health(&server, s).await,
            ServingStatus::Serving as i32,
            "{s:?}"
        );
    }
    let unknown = HealthClient::new(server.channel.clone())
        .check(HealthCheckRequest {
            service: "nope".into(),
        })
        .await;
    assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);
    server.running.set_serving(false).await;
    assert_eq!(
        health(&server, "gpusched.v1.PlacementService").await,
        ServingStatus::NotServing as i32
    );
}

#[tokio::test]
async fn reflection_v1_and_v1alpha_list_every_service() {
    use tonic_reflection::pb::v1 as r1;
    use tonic_reflection::pb::v1alpha as ra;
    let server = TestServer::start(&[]).await;
    let want = [
        "gpusched.v1.PlacementService",
        "gpusched.v1.InventoryService",
        "grpc.health.v1.Health",
    ];

    let mut c = r1::server_reflection_client::ServerReflectionClient::new(server.channel.clone());
    let req = r1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(r1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut stream = c
        .server_reflection_info(tokio_stream::iter(vec![req]))
        .await
        .unwrap()
        .into_inner();
    let resp = stream.next().await.unwrap().unwrap();
    let Some(r1::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        resp.message_response
    else {
        panic!("unexpected {resp:?}")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for w in want {
        assert!(names.iter().any(|n| n == w), "{w} missing from {names:?}");
    }
    // describe: the file that defines the placement service.
    let req = r1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            r1::server_reflection_request::MessageRequest::FileContainingSymbol(
                "gpusched.v1.PlacementService".into(),
            ),
        ),
    };
    let mut stream = c
        .server_reflection_info(tokio_stream::iter(vec![req]))
        .await
        .unwrap()
        .into_inner();
    let resp = stream.next().await.unwrap().unwrap();
    assert!(
        matches!(resp.message_response, Some(r1::server_reflection_response::MessageResponse::FileDescriptorResponse(f)) if !f.file_descriptor_proto.is_empty())
    );

    let mut c = ra::server_reflection_client::ServerReflectionClient::new(server.channel.clone());
    let req = ra::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(ra::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut stream = c
        .server_reflection_info(tokio_stream::iter(vec![req]))
        .await
        .unwrap()
        .into_inner();
    let resp = stream.next().await.unwrap().unwrap();
    let Some(ra::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        resp.message_response
    else {
        panic!("unexpected {resp:?}")
    };
    assert!(
        list.service
            .iter()
            .any(|s| s.name == "grpc.health.v1.Health")
    );
}

/// The error detail types statuses carry are described by reflection (v1 and v1alpha), with
/// their dependencies (`google.protobuf.Duration` of RetryInfo).
#[tokio::test]
async fn reflection_describes_the_error_detail_types() {
    use prost::Message as _;
    use tonic_reflection::pb::v1 as r1;
    use tonic_reflection::pb::v1alpha as ra;
    let server = TestServer::start(&[]).await;
    for symbol in [
        "google.rpc.Status",
        "google.rpc.BadRequest",
        "google.rpc.BadRequest.FieldViolation",
        "google.rpc.ErrorInfo",
        "google.rpc.RetryInfo",
        "google.rpc.ResourceInfo",
        "google.rpc.PreconditionFailure",
    ] {
        let mut c =
            r1::server_reflection_client::ServerReflectionClient::new(server.channel.clone());
        let req = r1::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(
                r1::server_reflection_request::MessageRequest::FileContainingSymbol(symbol.into()),
            ),
        };
        let resp = c
            .server_reflection_info(tokio_stream::iter(vec![req]))
            .await
            .unwrap()
            .into_inner()
            .next()
            .await
            .unwrap()
            .unwrap();
        let Some(r1::server_reflection_response::MessageResponse::FileDescriptorResponse(f)) =
            resp.message_response
        else {
            panic!("v1 {symbol}: {resp:?}")
        };
        let files: Vec<prost_types::FileDescriptorProto> = f
            .file_descriptor_proto
            .iter()
            .map(|b| prost_types::FileDescriptorProto::decode(b.as_slice()).unwrap())
            .collect();
        assert!(
            files.iter().any(|f| f.package() == "google.rpc"),
            "v1 {symbol}: {:?}",
            files.iter().map(|f| f.name()).collect::<Vec<_>>()
        );
        let mut c =
            ra::server_reflection_client::ServerReflectionClient::new(server.channel.clone());
        let req = ra::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(
                ra::server_reflection_request::MessageRequest::FileContainingSymbol(symbol.into()),
            ),
        };
        let resp = c
            .server_reflection_info(tokio_stream::iter(vec![req]))
            .await
            .unwrap()
            .into_inner()
            .next()
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(resp.message_response, Some(ra::server_reflection_response::MessageResponse::FileDescriptorResponse(f)) if !f.file_descriptor_proto.is_empty()),
            "v1alpha {symbol}"
        );
    }
}

async fn scrape(addr: std::net::SocketAddr) -> String {
    scrape_accepting(addr, None).await
}

async fn scrape_accepting(addr: std::net::SocketAddr, accept: Option<&str>) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nHost: localhost\r\n{accept}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// A scrape in each format is clean under promtool's `check metrics` rules (HELP on every
/// family, units in names, counters in `_total`...), and carries the process metrics, the build
/// info, the in-flight gauge and the request size histogram.
#[tokio::test]
async fn metrics_scrapes_in_both_formats_pass_the_lint() {
    use gpusched_runtime::metrics::{Format, lint};
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    let req = allocate_req(
        vec![node("a", 1, 8000)],
        pod(&[], &[&[("nvidia.com/gpu", "1")]]),
    );
    let size = prost::Message::encoded_len(&req);
    client.allocate(req).await.unwrap();
    let addr = server.running.metrics_addr.unwrap();
    for (accept, format, content_type) in [
        (
            Some("text/plain; version=0.0.4"),
            Format::Text004,
            "content-type: text/plain; version=0.0.4",
        ),
        (
            Some("application/openmetrics-text; version=1.0.0"),
            Format::OpenMetrics,
            "content-type: application/openmetrics-text; version=1.0.0",
        ),
        (
            None,
            Format::OpenMetrics,
            "content-type: application/openmetrics-text",
        ),
    ] {
        let response = scrape_accepting(addr, accept).await;
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(
            head.to_ascii_lowercase().contains(content_type),
            "{accept:?}: {head}"
        );
        // The body may be chunked: keep the exposition lines only.
        let body: String = body
            .lines()
            .filter(|l| l.starts_with('#') || l.starts_with(|c: char| c.is_ascii_alphabetic()))
            .filter(|l| !l.chars().all(|c| c.is_ascii_hexdigit()))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            lint(&body, format),
            Vec::<String>::new(),
            "{accept:?}:\n{body}"
        );
        for needle in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_start_time_seconds ",
            &format!(
                "gpusched_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            ),
            "gpusched_requests_in_flight 0",
            "gpusched_request_size_bytes_count{rpc=\"Allocate\"} 1",
            &format!("gpusched_request_size_bytes_sum{{rpc=\"Allocate\"}} {size}"),
            "gpusched_requests_total{rpc=\"Allocate\",outcome=\"ok\"} 1",
        ] {
            assert!(
                body.contains(needle),
                "{accept:?}: missing {needle} in\n{body}"
            );
        }
        let expected_type = match format {
            Format::Text004 => "# TYPE gpusched_requests_total counter",
            Format::OpenMetrics => "# TYPE gpusched_requests counter",
        };
        assert!(body.contains(expected_type), "{body}");
    }
}

#[tokio::test]
async fn metrics_count_calls_decisions_and_reasons() {
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    client
        .allocate(allocate_req(
            vec![node("a", 1, 8000)],
            pod(&[], &[&[("nvidia.com/gpu", "1")]]),
        ))
        .await
        .unwrap();
    client
        .allocate(allocate_req(
            vec![node("a", 1, 8000)],
            pod(
                &[],
                &[&[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "9999")]],
            ),
        ))
        .await
        .unwrap();
    let _ = client
        .allocate(v1::AllocateRequest::default())
        .await
        .unwrap_err();
    let text = scrape(server.running.metrics_addr.unwrap()).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    for needle in [
        "gpusched_requests_total{rpc=\"Allocate\",outcome=\"ok\"} 2",
        "gpusched_requests_total{rpc=\"Allocate\",outcome=\"invalid_argument\"} 1",
        "gpusched_request_duration_seconds_count{rpc=\"Allocate\",outcome=\"ok\"} 2",
        "gpusched_decisions_total{rpc=\"Allocate\",node_policy=\"binpack\",gpu_policy=\"spread\",result=\"placed\"} 1",
        "gpusched_decisions_total{rpc=\"Allocate\",node_policy=\"binpack\",gpu_policy=\"spread\",result=\"unschedulable\"} 1",
        "gpusched_node_rejections_total{reason=\"CardInsufficientMemory\"} 1",
        "gpusched_request_nodes_count{rpc=\"Allocate\"} 2",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}

fn big_cluster(nodes: usize) -> Vec<v1::Node> {
    (0..nodes)
        .map(|i| node(&format!("node-{i:05}"), 8, 81920))
        .collect()
}

#[tokio::test]
async fn shutdown_turns_health_not_serving_and_drains_in_flight_calls() {
    let server = TestServer::start(&[
        ("limits.blocking_threshold_cards", "1"),
        ("limits.drain_timeout", "3s"),
    ])
    .await;
    let mut watch = HealthClient::new(server.channel.clone())
        .watch(HealthCheckRequest {
            service: "gpusched.v1.PlacementService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first: HealthCheckResponse = watch.next().await.unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);
    // A large call in flight while the server stops.
    let mut client = server.placement();
    let req = v1::AllocateBatchRequest {
        nodes: big_cluster(2000),
        workloads: (0..20)
            .map(|_| {
                pod(
                    &[],
                    &[&[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "1000")]],
                )
            })
            .collect(),
        ..Default::default()
    };
    let call = tokio::spawn(async move { client.allocate_batch(req).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let TestServer {
        running,
        channel: _,
    } = server;
    let addr = running.grpc_addr;
    let stop = tokio::spawn(running.shutdown());
    let next: HealthCheckResponse = watch.next().await.unwrap().unwrap();
    assert_eq!(next.status, ServingStatus::NotServing as i32);
    let answer = call.await.unwrap().expect("the in-flight call completes");
    assert!(answer.into_inner().all_placed);
    stop.await.unwrap().unwrap();
    // Nothing listens any more.
    assert!(
        tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .is_err()
    );
}

/// A Preempt that chose a node counts a decision with result `evict` and its victims.
#[tokio::test]
async fn preemption_is_counted() {
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    let card_id = "n-gpu0";
    let booking = |mib| v1::Booking {
        mig_instance_start: None,
        card_id: card_id.into(),
        slots: 1,
        mem_mib: mib,
        cores: 0,
    };
    let r = client
        .preempt(v1::PreemptRequest {
            nodes: vec![node_with(
                "n",
                vec![used(card(card_id, 0, 40960), 2, 36000, 0)],
            )],
            workload: Some(pod(
                &[],
                &[&[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "30000")]],
            )),
            priority: 10,
            placed: vec![v1::NodePlaced {
                node: "n".into(),
                workloads: vec![
                    v1::PlacedWorkload {
                        id: "a".into(),
                        bookings: vec![booking(18000)],
                        ..Default::default()
                    },
                    v1::PlacedWorkload {
                        id: "b".into(),
                        bookings: vec![booking(18000)],
                        ..Default::default()
                    },
                ],
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.node_name, "n");
    let text = scrape(server.running.metrics_addr.unwrap()).await;
    for needle in [
        "gpusched_decisions_total{rpc=\"Preempt\",node_policy=\"binpack\",gpu_policy=\"spread\",result=\"evict\"} 1",
        "gpusched_preemption_victims_count 1",
        "gpusched_preemption_victims_sum 2.0",
        "gpusched_requests_total{rpc=\"Preempt\",outcome=\"ok\"} 1",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}
