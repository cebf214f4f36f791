//! Reliability, codes: what a client reads back. Replays the attacks of issue 13 on answers,
//! codes, counting, configuration and operations and asserts their bounds: trailers under 8 KiB,
//! oversize answers RESOURCE_EXHAUSTED naming the limit, short deadlines DEADLINE_EXCEEDED, every
//! answer counted by the code the client read, overload shed with RetryInfo, NOT_SERVING during
//! the grace period, bad variables and TLS files exit 2 naming them (real gRPC on 127.0.0.1 port
//! 0; raw HTTP/2 requests where a client library would hide what goes over the wire). Nothing
//! here measures time. Malformed input is `wire.rs`'s, memory `memory.rs`'s, CPU `cpu.rs`'s.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::raw::*;
use common::*;
use gpusched_api::v1;
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt as _;

/// Attack: 1 MB of pair scores naming cards that do not exist (each a violation echoing a
/// long id). Before: a 20.7 MB grpc-message. Now the 20,000 entries are over
/// `limits.max_list_entries` and refused on the wire (RESOURCE_EXHAUSTED) before decoding; 4,000
/// of them (under the cap) make that node invalid (a failed node with REASON_INVALID_NODE whose
/// message lists 8 problems, then "and N more"), not the request. Either way the metadata stays
/// under 8 KiB and the answer is small.
#[tokio::test]
async fn pair_score_garbage_answers_in_bounded_trailers() {
    let server = TestServer::start(&[]).await;
    let long = "x".repeat(40);
    for (entries, code) in [(20_000, Code::ResourceExhausted), (4_000, Code::Ok)] {
        let mut n = node("n", 2, 8000);
        n.pair_scores = (0..entries)
            .map(|i| v1::CardPairScore {
                card_id: format!("{long}{i}"),
                peer_card_id: format!("{long}-peer-{i}"),
                score: 1,
            })
            .collect();
        let req = allocate_req(vec![n], gpu_pod());
        let bytes = prost::Message::encode_to_vec(&req);
        assert!(
            bytes.len() > 100 * entries,
            "{entries}: {} bytes",
            bytes.len()
        );
        let r = raw(
            server.running.grpc_addr,
            ALLOCATE,
            "application/grpc",
            &[],
            frame(&bytes),
        )
        .await;
        assert_eq!(r.code(), code, "{entries} pair scores");
        assert!(
            r.metadata_bytes() < 8 * 1024,
            "{entries}: {} bytes of metadata",
            r.metadata_bytes()
        );
        if code != Code::Ok {
            let status = server.placement().allocate(req).await.unwrap_err();
            assert_eq!(status.code(), code);
            assert!(status.message().contains("max_list_entries"), "{status:?}");
            continue;
        }
        let answer = server.placement().allocate(req).await.unwrap().into_inner();
        let f = &answer.result.as_ref().unwrap().failed_nodes[0];
        assert_eq!(f.reasons[0].reason, v1::Reason::InvalidNode as i32);
        assert!(
            f.message
                .ends_with(&format!("and {} more", 2 * entries - 8)),
            "{}",
            f.message
        );
        assert!(
            prost::Message::encoded_len(&answer) < 8 * 1024,
            "{} bytes",
            prost::Message::encoded_len(&answer)
        );
    }
}

/// Attack: 50 nodes whose cards leave `health` unset. Before: trailers so large that grpcio
/// reported RESOURCE_EXHAUSTED "metadata size exceeds hard limit". Now: INVALID_ARGUMENT in
/// trailers under 8 KiB (grpcio's soft limit).
#[tokio::test]
async fn fifty_nodes_with_health_unset_answer_invalid_argument_in_small_trailers() {
    let server = TestServer::start(&[]).await;
    let nodes: Vec<v1::Node> = (0..50)
        .map(|i| {
            let mut n = node(&format!("node-with-a-rather-long-name-{i:04}"), 8, 8000);
            for c in &mut n.cards {
                c.health = 0;
            }
            n
        })
        .collect();
    let req = allocate_req(nodes, gpu_pod());
    let r = raw(
        server.running.grpc_addr,
        ALLOCATE,
        "application/grpc",
        &[],
        frame(&prost::Message::encode_to_vec(&req)),
    )
    .await;
    assert_eq!(r.code(), Code::InvalidArgument);
    assert!(r.metadata_bytes() < 8 * 1024, "{}", r.metadata_bytes());
    let status = server.placement().allocate(req).await.unwrap_err();
    let d = status.get_error_details();
    assert_eq!(d.error_info().unwrap().metadata["violationCount"], "400");
}

/// Attack: AllocateBatch over many nodes with many unschedulable workloads, and a Filter whose
/// failed nodes outweigh the request, answers over `limits.max_message_bytes`. Before:
/// OUT_OF_RANGE "encoded message length too large" after building the whole answer. Now:
/// RESOURCE_EXHAUSTED with a QuotaFailure naming the limit.
#[tokio::test]
async fn answers_over_the_limit_are_resource_exhausted_naming_it() {
    let server = TestServer::start(&[("limits.max_message_bytes", "65536")]).await;
    let nodes: Vec<v1::Node> = (0..200).map(|i| node(&format!("n{i}"), 1, 1000)).collect();
    let too_big = pod(
        &[],
        &[&[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "900000")]],
    );
    let batch = v1::AllocateBatchRequest {
        nodes: nodes.clone(),
        workloads: vec![too_big; 100],
        ..Default::default()
    };
    assert!(prost::Message::encoded_len(&batch) < 65536);
    let filter = v1::FilterRequest {
        nodes: (0..5000).map(|i| node(&format!("n{i}"), 0, 0)).collect(),
        workload: Some(gpu_pod()),
        ..Default::default()
    };
    assert!(prost::Message::encoded_len(&filter) < 65536);
    let mut c = server.placement();
    let statuses = [
        c.allocate_batch(batch).await.unwrap_err(),
        c.filter(filter).await.unwrap_err(),
    ];
    for s in statuses {
        assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
        let d = s.get_error_details();
        let q = d.quota_failure().unwrap();
        assert_eq!(q.violations[0].subject, "response");
        assert!(
            q.violations[0]
                .description
                .contains("limits.max_message_bytes"),
            "{:?}",
            q.violations[0]
        );
        assert_eq!(d.error_info().unwrap().reason, "LIMIT_EXCEEDED");
    }
    still_places(&server).await;
}

/// Attack: a caller's deadline of 1 ms. Before: CANCELLED ("Timeout expired", tonic's timer).
/// Now: DEADLINE_EXCEEDED every time, and short deadlines are never answered CANCELLED. Raw
/// requests: tonic's client would report its own local timer as CANCELLED.
#[tokio::test]
async fn short_deadlines_are_deadline_exceeded_never_cancelled() {
    let server = TestServer::start(&[]).await;
    let nodes: Vec<v1::Node> = (0..500).map(|i| node(&format!("n{i}"), 8, 8000)).collect();
    let body = frame(&prost::Message::encode_to_vec(&allocate_req(
        nodes,
        gpu_pod(),
    )));
    let ch = server.running.grpc_addr;
    let h = "application/grpc";
    for _ in 0..30 {
        let r = raw(ch, ALLOCATE, h, &[("grpc-timeout", "1m")], body.clone()).await;
        assert_eq!(r.code(), Code::DeadlineExceeded);
    }
    for t in ["1000u", "2m", "3m", "5m", "8m", "13m", "21m", "34m"] {
        for _ in 0..5 {
            let r = raw(ch, ALLOCATE, h, &[("grpc-timeout", t)], body.clone()).await;
            assert!(
                matches!(r.code(), Code::Ok | Code::DeadlineExceeded),
                "{t}: {:?}",
                r.code()
            );
        }
    }
    still_places(&server).await;
}

/// Every answer is counted once, by the code its client read: successes, bad input, malformed
/// and oversize messages, unknown methods, deadlines, refused content-types, health checks.
/// Before: malformed, oversize, unimplemented and timed-out calls were not counted, and some
/// were counted "ok".
#[tokio::test]
async fn every_answer_is_counted_by_the_code_the_client_read() {
    let server = TestServer::start(&[("limits.max_message_bytes", "200000")]).await;
    let ch = server.running.grpc_addr;
    let good = frame(&prost::Message::encode_to_vec(&allocate_req(
        vec![node("a", 1, 8000)],
        gpu_pod(),
    )));
    let oversize = frame(&vec![0u8; 300_000]);
    let mut seen: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut note = |rpc: &str, code: Code| {
        *seen
            .entry((
                rpc.to_owned(),
                gpusched_service::testing::outcome(code).to_owned(),
            ))
            .or_default() += 1;
    };
    let h = "application/grpc";
    for _ in 0..3 {
        note(
            "Allocate",
            raw(ch, ALLOCATE, h, &[], good.clone()).await.code(),
        );
    }
    note(
        "Allocate",
        raw(ch, ALLOCATE, h, &[], frame(&[0xff; 9])).await.code(),
    );
    note("Allocate", raw(ch, ALLOCATE, h, &[], oversize).await.code());
    note(
        "Allocate",
        raw(ch, ALLOCATE, h, &[("grpc-timeout", "1m")], good.clone())
            .await
            .code(),
    );
    note(
        "Allocate",
        raw(ch, ALLOCATE, "text/plain", &[], good.clone())
            .await
            .code(),
    );
    note(
        "unknown",
        raw(
            ch,
            "/gpusched.v1.PlacementService/Nope",
            h,
            &[],
            good.clone(),
        )
        .await
        .code(),
    );
    note(
        "Check",
        raw(ch, "/grpc.health.v1.Health/Check", h, &[], frame(&[]))
            .await
            .code(),
    );
    let expected: BTreeMap<(String, String), u64> = [
        (("Allocate", "ok"), 3),
        (("Allocate", "invalid_argument"), 2),
        (("Allocate", "resource_exhausted"), 1),
        (("Allocate", "deadline_exceeded"), 1),
        (("unknown", "unimplemented"), 1),
        (("Check", "ok"), 1),
    ]
    .into_iter()
    .map(|((r, o), n)| ((r.to_owned(), o.to_owned()), n))
    .collect();
    assert_eq!(seen, expected, "what the client read");
    let text = scrape(server.running.metrics_addr.unwrap()).await;
    assert_eq!(counted(&text), expected, "what the server counted");
}

/// Attack: more concurrent calls than decision slots, each with a long deadline. Before: they
/// waited until their deadline and the caller read DEADLINE_EXCEEDED. Now: refused early with
/// RESOURCE_EXHAUSTED and RetryInfo from a bounded queue (here of 0), counted as such.
#[tokio::test]
async fn overload_is_shed_early_with_retry_info() {
    let server = TestServer::start(&[
        ("limits.max_concurrent_requests", "1"),
        ("limits.max_queued_requests", "0"),
        ("limits.blocking_threshold_cards", "1"),
    ])
    .await;
    let nodes: Vec<v1::Node> = (0..3000).map(|i| node(&format!("n{i}"), 4, 8000)).collect();
    let req = allocate_req(nodes, gpu_pod());
    let calls = (0..16).map(|_| {
        let mut c = server.placement();
        let mut r = tonic::Request::new(req.clone());
        r.set_timeout(std::time::Duration::from_secs(60));
        async move { c.allocate(r).await }
    });
    let results = futures_join_all(calls).await;
    let mut shed = 0;
    for r in &results {
        if let Err(s) = r {
            assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
            assert!(s.get_error_details().retry_info().is_some(), "{s:?}");
            shed += 1;
        }
    }
    assert!(
        shed > 0,
        "16 calls at once, one slot and no queue: some were shed"
    );
    let text = scrape(server.running.metrics_addr.unwrap()).await;
    let c = counted(&text);
    assert_eq!(
        c.get(&("Allocate".to_owned(), "resource_exhausted".to_owned())),
        Some(&shed)
    );
    assert_eq!(
        c.get(&("Allocate".to_owned(), "ok".to_owned())).copied(),
        Some(16 - shed)
    );
}

async fn futures_join_all<F>(fs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = fs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

/// Attack: SIGTERM while load balancers still send calls. Before: health turned NOT_SERVING
/// ~0.1 s before connections were refused. Now: NOT_SERVING for `limits.shutdown_grace`
/// while calls are still served.
#[tokio::test]
async fn not_serving_is_served_for_the_grace_period_before_the_listener_closes() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let server = TestServer::start(&[("limits.shutdown_grace", "1h")]).await;
    let TestServer { running, channel } = server;
    let addr = running.grpc_addr;
    let stopping = tokio::spawn(running.shutdown());
    let mut health = HealthClient::new(channel.clone());
    loop {
        let s = health
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        if s == ServingStatus::NotServing as i32 {
            break;
        }
        tokio::task::yield_now().await;
    }
    // Still serving, on the open connection and on a new one.
    let fresh = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    for ch in [channel, fresh] {
        let r = gpusched_api::v1::placement_service_client::PlacementServiceClient::new(ch)
            .allocate(allocate_req(vec![node("a", 1, 8000)], gpu_pod()))
            .await
            .unwrap();
        assert!(r.into_inner().result.unwrap().placed);
    }
    assert!(!stopping.is_finished());
    stopping.abort();
}

fn server_bin() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_gpusched-server"));
    c.args(["--listen", "127.0.0.1:0", "--no-metrics"]);
    c
}

/// Typos in variables stop start-up naming the variable (exit 2). Before: silently ignored.
#[test]
fn unknown_variables_stop_start_up_naming_them() {
    for var in [
        "GPUSCHED_SERVER_LIMTS__MAX_NODES",
        "GPUSCHED_SERVER_LIMITS_MAX_NODES",
        "GPUSCHED_LIMTS__MAX_NODES",
    ] {
        // --print-config: a server that ignored the variable would print and exit 0.
        let out = server_bin()
            .env(var, "5")
            .arg("--print-config")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}: {stderr}");
        assert!(
            stderr.contains(var) && stderr.contains("unknown variable"),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    // The scripts' own variables are not configuration.
    let out = server_bin()
        .env("GPUSCHED_SERVER_BIN", "/x")
        .env("GPUSCHED_CACHE", "/x")
        .arg("--print-config")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Bad TLS files stop start-up naming the file and the reason (exit 2). Before: exit 1 with
/// "TLS: transport error".
#[test]
fn tls_errors_name_the_file_and_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let other = rcgen::KeyPair::generate().unwrap();
    let (c, k) = (dir.path().join("tls.crt"), dir.path().join("other.key"));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, other.serialize_pem()).unwrap();
    let out = server_bin()
        .arg("--tls-cert")
        .arg(&c)
        .arg("--tls-key")
        .arg(&k)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tls.key")
            && stderr.contains("other.key")
            && stderr.contains("does not match"),
        "{stderr}"
    );
}
