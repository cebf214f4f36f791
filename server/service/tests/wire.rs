//! Reliability, the wire: no input may panic or hang the server, and malformed input is
//! INVALID_ARGUMENT: raw garbage bytes, empty messages, huge and adversarial values, random
//! requests, bytes that are no protobuf, frames cut short, content-types that are not gRPC.
//! After each, the server still answers.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;

use bytes_codec::RawCodec;
use common::raw::*;
use common::*;
use gpusched_api::v1;
use proptest::prelude::*;
use tonic::Code;
use tonic::client::Grpc;
use tonic::transport::Channel;

mod bytes_codec {
    //! Sends and receives raw bytes as gRPC messages.
    use tonic::Status;
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

    #[derive(Debug, Default, Clone)]
    pub struct RawCodec;

    #[derive(Debug, Default, Clone)]
    pub struct Raw;

    impl Encoder for Raw {
        type Item = Vec<u8>;
        type Error = Status;
        fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
            bytes::BufMut::put_slice(dst, &item);
            Ok(())
        }
    }

    impl Decoder for Raw {
        type Item = Vec<u8>;
        type Error = Status;
        fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
            let n = bytes::Buf::remaining(src);
            Ok(Some(bytes::Buf::copy_to_bytes(src, n).to_vec()))
        }
    }

    impl Codec for RawCodec {
        type Encode = Vec<u8>;
        type Decode = Vec<u8>;
        type Encoder = Raw;
        type Decoder = Raw;
        fn encoder(&mut self) -> Raw {
            Raw
        }
        fn decoder(&mut self) -> Raw {
            Raw
        }
    }
}

async fn raw_call(
    channel: Channel,
    path: &'static str,
    body: Vec<u8>,
) -> Result<Vec<u8>, tonic::Status> {
    let mut grpc = Grpc::new(channel);
    grpc.ready().await.unwrap();
    grpc.unary(
        tonic::Request::new(body),
        http::uri::PathAndQuery::from_static(path),
        RawCodec,
    )
    .await
    .map(|r| r.into_inner())
}

const METHODS: [&str; 6] = [
    "/gpusched.v1.PlacementService/Filter",
    "/gpusched.v1.PlacementService/Score",
    "/gpusched.v1.PlacementService/Allocate",
    "/gpusched.v1.PlacementService/AllocateBatch",
    "/gpusched.v1.PlacementService/ValidateWorkload",
    "/gpusched.v1.InventoryService/NormalizeInventory",
];

async fn still_answers(server: &TestServer) {
    let r = server
        .placement()
        .allocate(allocate_req(
            vec![node("ok", 1, 8000)],
            pod(&[], &[&[("nvidia.com/gpu", "1")]]),
        ))
        .await;
    assert!(r.unwrap().into_inner().result.unwrap().placed);
}

#[tokio::test]
async fn garbage_and_empty_bodies() {
    let server = TestServer::start(&[]).await;
    for method in METHODS {
        for body in [
            vec![],
            vec![0xff; 64],
            vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f],
            b"not protobuf at all".to_vec(),
        ] {
            match raw_call(server.channel.clone(), method, body.clone()).await {
                Ok(_) => {}
                Err(s) => assert!(
                    matches!(
                        s.code(),
                        Code::InvalidArgument | Code::Internal | Code::ResourceExhausted
                    ),
                    "{method} {body:?}: {s:?}"
                ),
            }
        }
    }
    still_answers(&server).await;
}

#[tokio::test]
async fn empty_messages_are_answered() {
    let server = TestServer::start(&[]).await;
    let mut c = server.placement();
    assert_eq!(
        c.filter(v1::FilterRequest::default())
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    assert_eq!(
        c.score(v1::ScoreRequest::default())
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    assert_eq!(
        c.allocate_batch(v1::AllocateBatchRequest::default())
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    let empty_workload = v1::Workload::default();
    let err = c
        .allocate(allocate_req(vec![], empty_workload))
        .await
        .unwrap_err();
    assert_eq!(violations(&err)[0].0, "workload.spec");
    // A workload without nodes is simply unschedulable.
    let r = c
        .allocate(allocate_req(
            vec![],
            pod(&[], &[&[("nvidia.com/gpu", "1")]]),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!r.result.unwrap().placed);
    let inv = server
        .inventory()
        .normalize_inventory(v1::NormalizeInventoryRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(inv.cards.is_empty());
    still_answers(&server).await;
}

#[tokio::test]
async fn extreme_values() {
    let server = TestServer::start(&[]).await;
    let mut c = server.placement();
    let mut max = card("max", u32::MAX, u64::MAX);
    max.slots = u32::MAX;
    max.total_cores = u32::MAX;
    max.numa = u32::MAX;
    max.usage = Some(v1::CardUsage {
        used_slots: u32::MAX,
        used_mem_mib: u64::MAX,
        used_cores: u32::MAX,
    });
    let mut zero = card("zero", 0, 0);
    zero.slots = 0;
    zero.total_cores = 0;
    let mut over = card("over", 1, 8000);
    over.usage = Some(v1::CardUsage {
        used_slots: 1,
        used_mem_mib: 9_000_000,
        used_cores: 500,
    });
    let half = card("half", 2, u64::MAX / 2);
    let mut n = node_with("extreme", vec![max, zero, over, half]);
    n.pair_scores = vec![v1::CardPairScore {
        card_id: "max".into(),
        peer_card_id: "zero".into(),
        score: i64::MIN,
    }];
    let workloads = [
        pod(
            &[(
                "hami.io/device-scoring-weights",
                "slot=9223372036854775807,core=9223372036854775807,memory=9223372036854775807",
            )],
            &[&[("nvidia.com/gpu", "4294967295")]],
        ),
        pod(
            &[("hami.io/gpu-scheduler-policy", "topology-aware")],
            &[&[
                ("nvidia.com/gpu", "2"),
                ("nvidia.com/gpumem", "9223372036854775807"),
            ]],
        ),
        pod(
            &[
                ("nvidia.com/numa-bind", "true"),
                (
                    "hami.io/gpu-scheduler-policy",
                    "binpack,numa,mutex,spread,topology-aware",
                ),
            ],
            &[&[
                ("nvidia.com/gpu", "3"),
                ("nvidia.com/gpumem-percentage", "100"),
                ("nvidia.com/gpucores", "100"),
            ]],
        ),
        pod(
            &[],
            &[&[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "8Ei")]],
        ),
        pod(
            &[("nvidia.com/use-gputype", &"A".repeat(10_000))],
            &[&[("nvidia.com/gpu", "1")]],
        ),
    ];
    for w in workloads {
        for explain in [false, true] {
            let mut req = allocate_req(vec![n.clone(), node("ok", 2, 8000)], w.clone());
            req.options = Some(v1::PlacementOptions {
                explain,
                ..Default::default()
            });
            match c.allocate(req).await {
                Ok(_) => {}
                Err(s) => assert!(
                    matches!(s.code(), Code::InvalidArgument | Code::ResourceExhausted),
                    "{s:?}"
                ),
            }
        }
    }
    // Topology-aware over many fitting cards (combinations are bounded).
    let many = node_with(
        "many",
        (0..64).map(|i| card(&format!("g{i}"), i, 8000)).collect(),
    );
    let w = pod(
        &[("hami.io/gpu-scheduler-policy", "topology-aware")],
        &[&[("nvidia.com/gpu", "32"), ("nvidia.com/gpumem", "1")]],
    );
    let r = c
        .allocate(allocate_req(vec![many], w))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(r.containers[0].cards.len(), 32);
    still_answers(&server).await;
}

fn arb_card() -> impl Strategy<Value = v1::Card> {
    (
        "[a-c]{0,2}",
        any::<u32>(),
        prop::sample::select(vec![0u32, 1, 10, u32::MAX]),
        prop::sample::select(vec![0u64, 1, 8000, u64::MAX]),
        prop::sample::select(vec![0u32, 100, 200, u32::MAX]),
        0i32..4,
        0i32..5,
        prop::option::of((any::<u32>(), any::<u64>(), any::<u32>())),
    )
        .prop_map(
            |(id, index, slots, mem, cores, health, mode, usage)| v1::Card {
                mig: None,
                id,
                index,
                r#type: "NVIDIA-X".into(),
                slots,
                total_mem_mib: mem,
                total_cores: cores,
                numa: index % 3,
                health,
                mode,
                usage: usage.map(|(a, b, c)| v1::CardUsage {
                    used_slots: a % 12,
                    used_mem_mib: b % 10_000,
                    used_cores: c % 150,
                }),
            },
        )
}

fn arb_annotations() -> impl Strategy<Value = BTreeMap<String, String>> {
    let keys = prop::sample::select(vec![
        "hami.io/node-scheduler-policy",
        "hami.io/gpu-scheduler-policy",
        "hami.io/device-scoring-weights",
        "nvidia.com/use-gputype",
        "nvidia.com/nouse-gpuuuid",
        "nvidia.com/numa-bind",
        "nvidia.com/vgpu-mode",
    ]);
    let values = prop::sample::select(vec![
        "",
        "binpack",
        "spread",
        "mutex,numa",
        "topology-aware",
        "slot=1,core=2,memory=3",
        "slot=0,core=0,memory=0",
        "true",
        "x",
        "a,,b",
        "slot=1,core=1,memory=1,",
        "hami-core",
    ]);
    prop::collection::btree_map(
        keys.prop_map(str::to_owned),
        values.prop_map(str::to_owned),
        0..4,
    )
}

fn arb_limits() -> impl Strategy<Value = BTreeMap<String, String>> {
    let names = prop::sample::select(vec![
        "nvidia.com/gpu",
        "nvidia.com/gpumem",
        "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores",
    ]);
    let values = prop::sample::select(vec![
        "0",
        "1",
        "2",
        "3",
        "40",
        "100",
        "101",
        "-1",
        "1.5",
        "1k",
        "x",
        "99999999999999999999",
    ]);
    prop::collection::btree_map(
        names.prop_map(str::to_owned),
        values.prop_map(str::to_owned),
        0..4,
    )
}

fn arb_request() -> impl Strategy<Value = v1::AllocateRequest> {
    (
        prop::collection::vec(("[n-p]{1}", prop::collection::vec(arb_card(), 0..5)), 0..4),
        arb_annotations(),
        prop::collection::vec(arb_limits(), 0..3),
        prop::collection::vec(arb_limits(), 0..2),
        any::<bool>(),
    )
        .prop_map(|(nodes, annotations, containers, init, explain)| {
            let container =
                |(i, limits): (usize, BTreeMap<String, String>)| v1::KubernetesContainer {
                    name: format!("c{i}"),
                    limits,
                    requests: BTreeMap::new(),
                };
            v1::AllocateRequest {
                node_set: None,
                nodes: nodes
                    .into_iter()
                    .map(|(name, cards)| v1::Node {
                        name,
                        cards,
                        ..Default::default()
                    })
                    .collect(),
                workload: Some(v1::Workload {
                    spec: Some(v1::workload::Spec::Kubernetes(v1::KubernetesWorkloadSpec {
                        annotations,
                        init_containers: init.into_iter().enumerate().map(container).collect(),
                        containers: containers.into_iter().enumerate().map(container).collect(),
                    })),
                    ..Default::default()
                }),
                options: Some(v1::PlacementOptions {
                    explain,
                    ..Default::default()
                }),
                restrict_to_node_names: vec![],
                node_refs: vec![],
            }
        })
}

#[test]
fn random_requests_never_break_the_server() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(TestServer::start(&[]));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 300,
        ..ProptestConfig::default()
    });
    runner
        .run(&arb_request(), |req| {
            let result = rt.block_on(async {
                let mut c = server.placement();
                let filter = c
                    .filter(v1::FilterRequest {
                        node_set: None,
                        nodes: req.nodes.clone(),
                        workload: req.workload.clone(),
                        options: req.options.clone(),
                        node_refs: Vec::new(),
                    })
                    .await;
                let allocate = c.allocate(req).await;
                (filter, allocate)
            });
            for r in [result.0.map(|_| ()), result.1.map(|_| ())] {
                if let Err(s) = r {
                    prop_assert!(
                        matches!(s.code(), Code::InvalidArgument),
                        "unexpected status {:?}",
                        s
                    );
                    prop_assert!(
                        !violations(&s).is_empty(),
                        "INVALID_ARGUMENT without field violations: {:?}",
                        s
                    );
                }
            }
            Ok(())
        })
        .unwrap();
    rt.block_on(still_answers(&server));
}

/// Attack: bytes that are no protobuf, and a frame cut short. Before: INTERNAL. Now:
/// INVALID_ARGUMENT on every method.
#[tokio::test]
async fn malformed_requests_are_invalid_argument() {
    let server = TestServer::start(&[]).await;
    let cut = {
        let mut f = frame(&[0x0a; 100]).to_vec();
        f.truncate(20);
        Bytes::from(f)
    };
    for method in METHODS {
        for body in [
            frame(&[0xff; 64]),
            frame(b"not protobuf at all"),
            frame(&[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]),
            cut.clone(),
            Bytes::new(),
        ] {
            let r = raw(
                server.running.grpc_addr,
                method,
                "application/grpc",
                &[],
                body.clone(),
            )
            .await;
            assert_eq!(r.code(), Code::InvalidArgument, "{method} {body:?}");
        }
    }
    still_places(&server).await;
}

/// Attack: requests that are not gRPC. Before: accepted. Now: HTTP 415 with grpc-status 3.
#[tokio::test]
async fn non_grpc_content_types_are_refused() {
    let server = TestServer::start(&[]).await;
    let body = frame(&prost::Message::encode_to_vec(&allocate_req(
        vec![node("a", 1, 8000)],
        gpu_pod(),
    )));
    for ct in ["application/json", "text/plain", "application/grpc+json"] {
        let r = raw(server.running.grpc_addr, ALLOCATE, ct, &[], body.clone()).await;
        assert_eq!(r.http, http::StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct}");
        assert_eq!(r.code(), Code::InvalidArgument, "{ct}");
    }
    let ok = raw(
        server.running.grpc_addr,
        ALLOCATE,
        "application/grpc",
        &[],
        body,
    )
    .await;
    assert_eq!(ok.code(), Code::Ok);
}
