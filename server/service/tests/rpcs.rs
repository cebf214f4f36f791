//! Every RPC over real gRPC on 127.0.0.1: the seed stories end to end, answers, errors and
//! their details, limits, deadlines.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use gpusched_api::v1;
use tonic::Code;

const WEIGHTS: &str = "hami.io/device-scoring-weights";

fn one_gpu() -> v1::Workload {
    pod(&[], &[&[("nvidia.com/gpu", "1")]])
}

#[tokio::test]
async fn seed_stories_1_and_2_node_binpack_and_spread() {
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    for (annotations, expected) in [
        (vec![], ["node1", "node1"]),
        (
            vec![("hami.io/node-scheduler-policy", "spread")],
            ["node1", "node2"],
        ),
    ] {
        let w = pod(&annotations, &[&[("nvidia.com/gpu", "1")]]);
        let out = client
            .allocate_batch(v1::AllocateBatchRequest {
                node_set: None,
                nodes: vec![node("node1", 4, 8000), node("node2", 4, 8000)],
                workloads: vec![w.clone(), w],
                options: None,
                all_or_nothing: false,
                return_updated_nodes: true,
                node_refs: Vec::new(),
            })
            .await
            .unwrap()
            .into_inner();
        let chosen: Vec<&str> = out.results.iter().map(|r| r.node_name.as_str()).collect();
        assert_eq!(chosen, expected, "{annotations:?}");
        assert!(out.all_placed);
        let booked: u32 = out
            .updated_nodes
            .iter()
            .flat_map(|n| &n.cards)
            .filter_map(|c| c.usage.as_ref())
            .map(|u| u.used_slots)
            .sum();
        assert_eq!(booked, 2);
    }
}

#[tokio::test]
async fn seed_stories_3_and_4_gpu_binpack_and_spread() {
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    let gpus = || {
        node_with(
            "node1",
            (0..4)
                .map(|i| card(&format!("GPU{}", i + 1), i, 8000))
                .collect(),
        )
    };
    for (policy, expected) in [("binpack", ["GPU1", "GPU1"]), ("spread", ["GPU1", "GPU2"])] {
        let w = pod(
            &[("hami.io/gpu-scheduler-policy", policy)],
            &[&[
                ("nvidia.com/gpu", "1"),
                ("nvidia.com/gpucores", "20"),
                ("nvidia.com/gpumem-percentage", "20"),
            ]],
        );
        let out = client
            .allocate_batch(v1::AllocateBatchRequest {
                nodes: vec![gpus()],
                workloads: vec![w.clone(), w],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let cards: Vec<&str> = out
            .results
            .iter()
            .map(|r| r.containers[0].cards[0].card_id.as_str())
            .collect();
        assert_eq!(cards, expected, "{policy}");
        assert_eq!(out.results[0].containers[0].cards[0].mem_mib, 1600);
        assert_eq!(out.results[0].containers[0].cards[0].cores_percent, 20);
    }
}

#[tokio::test]
async fn allocate_explains_the_seed_gpu_example() {
    let server = TestServer::start(&[]).await;
    let n = node_with(
        "node1",
        vec![
            used(card("GPU1", 0, 8000), 0, 2000, 10),
            used(card("GPU2", 1, 8000), 0, 6000, 70),
        ],
    );
    let w = pod(
        &[("hami.io/gpu-scheduler-policy", "binpack")],
        &[&[
            ("nvidia.com/gpu", "1"),
            ("nvidia.com/gpucores", "20"),
            ("nvidia.com/gpumem", "1000"),
        ]],
    );
    let mut req = allocate_req(vec![n], w);
    req.options = Some(v1::PlacementOptions {
        explain: true,
        ..Default::default()
    });
    let r = server
        .placement()
        .allocate(req)
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert!(r.placed && r.requests_gpu);
    assert_eq!(r.containers[0].cards[0].card_id, "GPU2");
    let cards = &r.explanations[0].containers[0].cards;
    assert_eq!(cards[0].card_id, "GPU2");
    assert!((cards[0].score - 18.75).abs() < 1e-9 && cards[0].chosen && cards[0].visited);
    assert!((cards[0].slot_term - 1.0).abs() < 1e-9);
    assert!((cards[0].core_term - 9.0).abs() < 1e-9);
    assert!((cards[0].memory_term - 8.75).abs() < 1e-9);
    assert!((cards[1].score - 7.75).abs() < 1e-9 && !cards[1].chosen && !cards[1].visited);
    let eff = r.effective_policy.unwrap();
    assert_eq!(eff.gpu_policy_text, "binpack");
    assert_eq!(eff.node_policy, v1::NodePolicy::Binpack as i32);
    assert_eq!(
        eff.scoring_weights,
        Some(v1::ScoringWeights {
            slot: 1,
            core: 1,
            memory: 1
        })
    );
}

#[tokio::test]
async fn filter_reports_feasible_nodes_and_reasons() {
    let server = TestServer::start(&[]).await;
    let full = node_with(
        "full",
        vec![used(card("f0", 0, 8000), 10, 0, 0), card("f1", 1, 8000)],
    );
    let small = node("small", 1, 8000);
    let ok = node("ok", 2, 8000);
    let out = server
        .placement()
        .filter(v1::FilterRequest {
            node_set: None,
            nodes: vec![full, small, ok],
            workload: Some(pod(
                &[],
                &[&[("nvidia.com/gpu", "2"), ("nvidia.com/gpumem", "100")]],
            )),
            options: None,
            node_refs: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.feasible_node_names, vec!["ok"]);
    assert!(out.requests_gpu);
    let full = out
        .failed_nodes
        .iter()
        .find(|f| f.node_name == "full")
        .unwrap();
    assert_eq!(
        full.message,
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted"
    );
    assert_eq!(
        full.reasons[0].reason,
        v1::Reason::AllocatedCardsInsufficientRequest as i32
    );
    assert_eq!(full.reasons[0].count, 1);
    assert_eq!(full.reasons[0].name, "AllocatedCardsInsufficientRequest");
    assert!(!full.unresolvable);
    assert_eq!(full.container_name, "c0");
    let small = out
        .failed_nodes
        .iter()
        .find(|f| f.node_name == "small")
        .unwrap();
    assert_eq!(small.message, "NodeInsufficientDevice");
    assert!(small.unresolvable);
}

#[tokio::test]
async fn score_orders_by_preference() {
    let server = TestServer::start(&[]).await;
    let busy = node_with(
        "busy",
        vec![used(card("b0", 0, 8000), 3, 4000, 30), card("b1", 1, 8000)],
    );
    let out = server
        .placement()
        .score(v1::ScoreRequest {
            node_set: None,
            nodes: vec![node("idle", 2, 8000), busy],
            workload: Some(pod(
                &[],
                &[&[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "100")]],
            )),
            options: Some(v1::PlacementOptions {
                default_node_policy: v1::NodePolicy::Spread as i32,
                ..Default::default()
            }),
            node_refs: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    let order: Vec<(&str, u32)> = out
        .scores
        .iter()
        .map(|s| (s.node_name.as_str(), s.normalized_score))
        .collect();
    assert_eq!(order, vec![("idle", 100), ("busy", 0)]);
    assert!(out.scores[0].raw_score < out.scores[1].raw_score);
    assert_eq!(
        out.effective_policy.unwrap().node_policy,
        v1::NodePolicy::Spread as i32
    );
}

#[tokio::test]
async fn batch_all_or_nothing_rolls_back() {
    let server = TestServer::start(&[]).await;
    let w = one_gpu();
    let out = server
        .placement()
        .allocate_batch(v1::AllocateBatchRequest {
            node_set: None,
            nodes: vec![node("n", 2, 8000)],
            workloads: vec![w.clone(), w.clone(), w],
            options: None,
            all_or_nothing: true,
            return_updated_nodes: true,
            node_refs: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!out.all_placed);
    assert!(out.results.iter().all(|r| !r.placed));
    assert!(
        out.results[0].rolled_back && out.results[1].rolled_back && !out.results[2].rolled_back
    );
    assert_eq!(out.results[0].node_name, "n");
    assert!(out.updated_nodes[0].cards.iter().all(|c| c.usage.is_none()));
    assert_eq!(
        out.results[2].failed_nodes[0].message,
        "2/2 CardInsufficientMemory"
    );
}

#[tokio::test]
async fn typed_workloads_work_like_annotations() {
    let server = TestServer::start(&[]).await;
    let typed = v1::Workload {
        name: "typed".into(),
        spec: Some(v1::workload::Spec::Typed(v1::TypedWorkloadSpec {
            node_policy: v1::NodePolicy::Spread as i32,
            gpu_policy: vec![v1::GpuPolicy::Binpack as i32, v1::GpuPolicy::Numa as i32],
            scoring_weights: Some(v1::ScoringWeights {
                slot: 1,
                core: 1,
                memory: 3,
            }),
            containers: vec![v1::ContainerRequest {
                name: "main".into(),
                gpu_count: 1,
                gpumem_percent: 40,
                ..Default::default()
            }],
            ..Default::default()
        })),
        ..Default::default()
    };
    let n = node_with(
        "node1",
        vec![
            used(card("GPU-A", 0, 10000), 1, 1000, 90),
            used(card("GPU-B", 1, 10000), 7, 2000, 10),
        ],
    );
    let r = server
        .placement()
        .allocate(allocate_req(vec![n], typed))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(r.containers[0].cards[0].card_id, "GPU-B");
    let eff = r.effective_policy.unwrap();
    assert_eq!(eff.gpu_policy_text, "binpack,numa");
    assert_eq!(eff.node_policy, v1::NodePolicy::Spread as i32);
}

#[tokio::test]
async fn validate_workload_answers() {
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    let ok = client
        .validate_workload(v1::ValidateWorkloadRequest {
            workload: Some(pod(
                &[("hami.io/gpu-scheduler-policy", "mutex")],
                &[&[("nvidia.com/gpu", "2"), ("nvidia.com/gpucores", "30")]],
            )),
            options: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ok.valid && ok.requests_gpu && ok.violations.is_empty());
    assert_eq!(ok.containers[0].gpu_count, 2);
    assert_eq!(ok.containers[0].mem_percent, Some(100));
    assert_eq!(ok.containers[0].cores_percent, 30);
    assert_eq!(ok.effective_policy.unwrap().gpu_policy_text, "mutex");
    let bad = client
        .validate_workload(v1::ValidateWorkloadRequest {
            workload: Some(pod(
                &[(WEIGHTS, "slot=1,core=1,memory=x")],
                &[&[("nvidia.com/gpu", "1")]],
            )),
            options: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!bad.valid);
    assert_eq!(
        bad.violations[0].field,
        "workload.kubernetes.annotations[\"hami.io/device-scoring-weights\"]"
    );
    assert!(bad.violations[0].description.contains(WEIGHTS));
    let no_gpu = client
        .validate_workload(v1::ValidateWorkloadRequest {
            workload: Some(pod(&[(WEIGHTS, "junk")], &[&[("cpu", "1")]])),
            options: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(no_gpu.valid && !no_gpu.requests_gpu);
    let missing = client
        .validate_workload(v1::ValidateWorkloadRequest::default())
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument);
    assert_eq!(violations(&missing)[0].0, "workload");
}

#[tokio::test]
async fn invalid_input_is_invalid_argument_with_field_violations() {
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    // Invalid weights: rejected before any node is looked at (the nodes are bad too).
    let err = client
        .filter(v1::FilterRequest {
            node_set: None,
            nodes: vec![node("a", 1, 8000), node("a", 1, 8000)],
            workload: Some(pod(
                &[(WEIGHTS, "slot=1,core=1")],
                &[&[("nvidia.com/gpu", "1")]],
            )),
            options: None,
            node_refs: Vec::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let v = violations(&err);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        v[0].0,
        "workload.kubernetes.annotations[\"hami.io/device-scoring-weights\"]"
    );
    // Node problems, each with its field.
    let mut unhealthy = card("x", 0, 8000);
    unhealthy.health = v1::CardHealth::Unspecified as i32;
    let err = client
        .allocate(allocate_req(
            vec![
                node("a", 1, 8000),
                node("a", 1, 8000),
                node_with("b", vec![unhealthy]),
            ],
            one_gpu(),
        ))
        .await
        .unwrap_err();
    let fields: Vec<String> = violations(&err).into_iter().map(|v| v.0).collect();
    assert_eq!(fields, vec!["nodes[1].name", "nodes[2].cards[0].health"]);
    let err = client
        .allocate(allocate_req(
            vec![node("a", 1, 8000), node("a", 1, 8000)],
            one_gpu(),
        ))
        .await
        .unwrap_err();
    assert_eq!(violations(&err)[0].0, "nodes[1].name");
    // Resource values, typed enums, missing workload, unknown restriction.
    let err = client
        .allocate(allocate_req(
            vec![node("a", 1, 8000)],
            pod(
                &[],
                &[&[("nvidia.com/gpu", "1"), ("nvidia.com/gpucores", "150")]],
            ),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        violations(&err)[0].0,
        "workload.kubernetes.containers[0].limits[\"nvidia.com/gpucores\"]"
    );
    let typed = v1::Workload {
        spec: Some(v1::workload::Spec::Typed(v1::TypedWorkloadSpec {
            gpu_policy: vec![0],
            ..Default::default()
        })),
        ..Default::default()
    };
    let err = client
        .allocate(allocate_req(vec![], typed))
        .await
        .unwrap_err();
    assert_eq!(violations(&err)[0].0, "workload.typed.gpu_policy[0]");
    let err = client
        .allocate(v1::AllocateRequest::default())
        .await
        .unwrap_err();
    assert_eq!(violations(&err)[0].0, "workload");
    let mut req = allocate_req(vec![node("a", 1, 8000)], one_gpu());
    req.restrict_to_node_names = vec!["zzz".into()];
    let err = client.allocate(req).await.unwrap_err();
    assert_eq!(violations(&err)[0].0, "restrict_to_node_names");
}

#[tokio::test]
async fn nothing_fits_is_an_answer_not_an_error() {
    let server = TestServer::start(&[]).await;
    let r = server
        .placement()
        .allocate(allocate_req(
            vec![node("a", 1, 8000)],
            pod(
                &[],
                &[&[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "9000")]],
            ),
        ))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert!(!r.placed);
    assert_eq!(r.failed_nodes[0].message, "1/1 CardInsufficientMemory");
    assert!(r.failed_nodes[0].unresolvable);
    let r = server
        .placement()
        .allocate(allocate_req(
            vec![node("a", 1, 8000)],
            pod(&[], &[&[("cpu", "1")]]),
        ))
        .await
        .unwrap();
    let r = r.into_inner().result.unwrap();
    assert!(!r.placed && !r.requests_gpu && r.failed_nodes.is_empty());
}

#[tokio::test]
async fn restrict_to_the_chosen_node() {
    let server = TestServer::start(&[]).await;
    let mut req = allocate_req(vec![node("a", 1, 8000), node("b", 1, 8000)], one_gpu());
    req.restrict_to_node_names = vec!["b".into()];
    let r = server
        .placement()
        .allocate(req)
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(r.node_name, "b");
    assert_eq!(r.feasible_node_count, 1);
}

#[tokio::test]
async fn normalize_inventory() {
    let server = TestServer::start(&[("inventory.split_count", "4")]).await;
    let raw = |uuid: &str, index: u32, health: v1::CardHealth| v1::RawCard {
        uuid: uuid.into(),
        index,
        model_name: "NVIDIA H200".into(),
        total_memory_bytes: 143_771_287_552,
        numa: Some(1),
        mig_enabled: false,
        health: health as i32,
        links: vec![v1::RawLink {
            peer_uuid: if uuid == "GPU-a" { "GPU-b" } else { "GPU-a" }.into(),
            kind: v1::LinkKind::Nvlink as i32,
            link_count: 18,
        }],
    };
    let out = server
        .inventory()
        .normalize_inventory(v1::NormalizeInventoryRequest {
            node_name: "n".into(),
            cards: vec![
                raw("GPU-b", 1, v1::CardHealth::Unhealthy),
                raw("GPU-a", 0, v1::CardHealth::Healthy),
            ],
            config: Some(v1::NormalizationConfig {
                memory_scaling: 2.0,
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.cards.len(), 2);
    assert_eq!(out.cards[0].id, "GPU-a");
    assert_eq!(
        out.cards[0].slots, 4,
        "split count from the server's config"
    );
    assert_eq!(out.cards[0].total_mem_mib, 143_771_287_552 / (1 << 20) * 2);
    assert_eq!(out.cards[0].r#type, "NVIDIA H200");
    assert_eq!(out.cards[1].health, v1::CardHealth::Unhealthy as i32);
    assert_eq!(out.pair_scores.len(), 2);
    assert_eq!(out.pair_scores[0].score, 1800);
    let cfg = out.effective_config.unwrap();
    assert_eq!((cfg.split_count, cfg.memory_scaling), (4, 2.0));
    let err = server
        .inventory()
        .normalize_inventory(v1::NormalizeInventoryRequest {
            node_name: "n".into(),
            cards: vec![raw("GPU-a", 0, v1::CardHealth::Unspecified)],
            config: Some(v1::NormalizationConfig {
                core_scaling: -1.0,
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(violations(&err)[0].0, "cards[0].health");
}

#[tokio::test]
async fn limits_are_resource_exhausted() {
    let server = TestServer::start(&[
        ("limits.max_nodes", "2"),
        ("limits.max_cards_per_node", "4"),
        ("limits.max_workloads", "2"),
        ("limits.max_containers", "2"),
        ("limits.max_message_bytes", "20000"),
    ])
    .await;
    let mut client = server.placement();
    let err = client
        .allocate(allocate_req(
            vec![node("a", 1, 1), node("b", 1, 1), node("c", 1, 1)],
            one_gpu(),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(
        err.message().contains("limits.max_nodes"),
        "{}",
        err.message()
    );
    // A node over max_cards_per_node is invalid itself, not the request (tests/node_faults.rs).
    let r = client
        .allocate(allocate_req(vec![node("a", 5, 1)], one_gpu()))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(r.failed_nodes.len(), 1);
    assert!(
        r.failed_nodes[0]
            .message
            .contains("cards LIMIT_EXCEEDED: 5 cards exceed the limit of 4 per node (limits.max_cards_per_node)"),
        "{r:?}"
    );
    let w = one_gpu();
    let err = client
        .allocate_batch(v1::AllocateBatchRequest {
            nodes: vec![],
            workloads: vec![w.clone(), w.clone(), w],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    let three = pod(&[], &[&[("nvidia.com/gpu", "1")], &[], &[]]);
    let err = client
        .allocate(allocate_req(vec![], three))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    // A message over max_message_bytes.
    let mut huge = one_gpu();
    if let Some(v1::workload::Spec::Kubernetes(k)) = &mut huge.spec {
        k.annotations.insert("big".into(), "x".repeat(30_000));
    }
    let err = client
        .allocate(allocate_req(vec![], huge))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    // The server still answers.
    assert!(
        client
            .allocate(allocate_req(vec![node("a", 1, 8000)], one_gpu()))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn deadlines_are_honoured() {
    let server = TestServer::start(&[("limits.request_timeout", "1ns")]).await;
    let err = server
        .placement()
        .allocate(allocate_req(vec![node("a", 1, 8000)], one_gpu()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    // On the blocking pool: the server's own limit is enforced while the decision runs.
    let server = TestServer::start(&[
        ("limits.request_timeout", "1ns"),
        ("limits.blocking_threshold_cards", "1"),
    ])
    .await;
    let err = server
        .placement()
        .allocate(allocate_req(vec![node("a", 1, 8000)], one_gpu()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    // The parsing of the caller's grpc-timeout: `rpc::tests::grpc_timeouts_parse`.
    let server = TestServer::start(&[("limits.blocking_threshold_cards", "1")]).await;
    // A reasonable deadline passes, on the blocking pool too.
    let mut req = tonic::Request::new(allocate_req(vec![node("a", 1, 8000)], one_gpu()));
    req.set_timeout(std::time::Duration::from_secs(5));
    assert!(
        server
            .placement()
            .allocate(req)
            .await
            .unwrap()
            .into_inner()
            .result
            .unwrap()
            .placed
    );
}

/// (field, reason) of the first violation of a failed call.
fn first_reason(s: &tonic::Status) -> (String, String) {
    reasons(s).into_iter().next().expect("a field violation")
}

#[tokio::test]
async fn every_violation_carries_its_reason() {
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    let kube = |annotations: &[(&str, &str)], limits: &[(&str, &str)]| {
        let mut client = client.clone();
        let req = allocate_req(vec![node("a", 1, 8000)], pod(annotations, &[limits]));
        async move { client.allocate(req).await }
    };
    let gpu = ("nvidia.com/gpu", "1");
    for (annotation, reason) in [
        (
            ("hami.io/node-scheduler-policy", "pack"),
            "INVALID_NODE_POLICY",
        ),
        (
            ("hami.io/gpu-scheduler-policy", "pack"),
            "INVALID_GPU_POLICY",
        ),
        ((WEIGHTS, "slot=1"), "INVALID_SCORING_WEIGHTS"),
        (("nvidia.com/numa-bind", "maybe"), "INVALID_NUMA_BIND"),
    ] {
        let err = kube(&[annotation], &[gpu]).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert_eq!(first_reason(&err).1, reason, "{annotation:?}");
        assert_eq!(error_info_reason(&err), reason);
    }
    for limits in [
        vec![("nvidia.com/gpu", "one")],
        vec![gpu, ("nvidia.com/gpucores", "150")],
        vec![gpu, ("nvidia.com/gpumem-percentage", "101")],
        vec![gpu, ("nvidia.com/gpumem", "lots")],
    ] {
        let err = kube(&[], &limits).await.unwrap_err();
        assert_eq!(
            first_reason(&err).1,
            "INVALID_RESOURCE_REQUEST",
            "{limits:?}"
        );
    }
    // Typed form: the same reasons as the annotations.
    let typed = |spec: v1::TypedWorkloadSpec| v1::Workload {
        spec: Some(v1::workload::Spec::Typed(v1::TypedWorkloadSpec {
            containers: vec![v1::ContainerRequest {
                name: "c".into(),
                gpu_count: 1,
                ..Default::default()
            }],
            ..spec
        })),
        ..Default::default()
    };
    for (spec, field, reason) in [
        (
            v1::TypedWorkloadSpec {
                node_policy: 9,
                ..Default::default()
            },
            "workload.typed.node_policy",
            "INVALID_NODE_POLICY",
        ),
        (
            v1::TypedWorkloadSpec {
                gpu_policy: vec![0],
                ..Default::default()
            },
            "workload.typed.gpu_policy[0]",
            "INVALID_GPU_POLICY",
        ),
        (
            v1::TypedWorkloadSpec {
                scoring_weights: Some(v1::ScoringWeights::default()),
                ..Default::default()
            },
            "workload.typed.scoring_weights",
            "INVALID_SCORING_WEIGHTS",
        ),
    ] {
        let err = client
            .allocate(allocate_req(vec![node("a", 1, 8000)], typed(spec)))
            .await
            .unwrap_err();
        assert_eq!(first_reason(&err), (field.to_owned(), reason.to_owned()));
    }
    // Request structure.
    let mut no_health = card("x", 0, 8000);
    no_health.health = v1::CardHealth::Unspecified as i32;
    let mut odd_mode = card("y", 1, 8000);
    odd_mode.mode = 42;
    let mut pairs = node("p", 1, 8000);
    pairs.pair_scores = vec![v1::CardPairScore {
        card_id: pairs.cards[0].id.clone(),
        peer_card_id: "nowhere".into(),
        score: 1,
    }];
    let err = client
        .allocate(allocate_req(
            vec![node_with("b", vec![no_health, odd_mode])],
            one_gpu(),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        reasons(&err),
        vec![
            (
                "nodes[0].cards[0].health".to_owned(),
                "MISSING_FIELD".to_owned()
            ),
            (
                "nodes[0].cards[1].mode".to_owned(),
                "UNKNOWN_ENUM_VALUE".to_owned()
            ),
        ]
    );
    let err = client
        .allocate(allocate_req(
            vec![
                node("a", 1, 8000),
                node("a", 1, 8000),
                node("", 1, 8000),
                pairs,
            ],
            one_gpu(),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        reasons(&err),
        vec![
            ("nodes[1].name".to_owned(), "DUPLICATE_ID".to_owned()),
            ("nodes[2].name".to_owned(), "MISSING_FIELD".to_owned()),
            // nodes[3] (a pair score naming an unknown card) is invalid itself, answered as a
            // failed node: tests/node_faults.rs.
        ]
    );
    assert_eq!(error_info_reason(&err), "DUPLICATE_ID");
    let err = client
        .allocate(v1::AllocateRequest::default())
        .await
        .unwrap_err();
    assert_eq!(
        first_reason(&err),
        ("workload".into(), "MISSING_FIELD".into())
    );
    let mut req = allocate_req(vec![node("a", 1, 8000)], one_gpu());
    req.restrict_to_node_names = vec!["zzz".into()];
    let err = client.allocate(req).await.unwrap_err();
    assert_eq!(first_reason(&err).1, "UNKNOWN_REFERENCE");
}

#[tokio::test]
async fn validate_workload_violations_carry_the_typed_reason() {
    let server = TestServer::start(&[]).await;
    let bad = server
        .placement()
        .validate_workload(v1::ValidateWorkloadRequest {
            workload: Some(pod(&[(WEIGHTS, "x")], &[&[("nvidia.com/gpu", "1")]])),
            options: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!bad.valid);
    assert_eq!(
        bad.violations[0].reason(),
        v1::ViolationReason::InvalidScoringWeights
    );
}

#[tokio::test]
async fn over_a_limit_is_limit_exceeded() {
    let server = TestServer::start(&[("limits.max_nodes", "1")]).await;
    let err = server
        .placement()
        .allocate(allocate_req(
            vec![node("a", 1, 8000), node("b", 1, 8000)],
            one_gpu(),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(error_info_reason(&err), "LIMIT_EXCEEDED");
}

/// Each invalid request default is reported against its own options field.
#[tokio::test]
async fn failed_nodes_are_listed_as_the_options_ask_and_always_counted() {
    let server = TestServer::start(&[]).await;
    // "ok" fits one card; "small" (no card) and "full" (its card taken) do not; one invalid
    // node (a card without memory) fails too.
    let nodes = || {
        let mut bad = node("bad", 1, 8000);
        bad.cards[0].total_mem_mib = 0;
        vec![
            node("ok", 1, 8000),
            node_with("full", vec![used(card("f0", 0, 8000), 10, 0, 0)]),
            node("small", 0, 8000),
            bad,
        ]
    };
    let ask = |shown: v1::FailedNodes, w: v1::Workload| {
        let mut req = allocate_req(nodes(), w);
        req.options = Some(v1::PlacementOptions {
            failed_nodes: shown as i32,
            ..Default::default()
        });
        req
    };
    let names = |r: &v1::AllocationResult| -> Vec<String> {
        r.failed_nodes.iter().map(|f| f.node_name.clone()).collect()
    };
    let all = vec!["bad", "full", "small"];
    let too_big = pod(&[], &[&[("nvidia.com/gpu", "2")]]);
    for (shown, placed_lists, unplaced_lists) in [
        (v1::FailedNodes::Unspecified, true, true),
        (v1::FailedNodes::All, true, true),
        (v1::FailedNodes::WhenUnplaced, false, true),
        (v1::FailedNodes::None, false, false),
    ] {
        let placed = server
            .placement()
            .allocate(ask(shown, one_gpu()))
            .await
            .unwrap()
            .into_inner()
            .result
            .unwrap();
        assert!(placed.placed, "{shown:?}");
        assert_eq!(placed.node_name, "ok");
        assert_eq!(placed.failed_node_count, 3, "{shown:?}");
        let want: Vec<&str> = if placed_lists { all.clone() } else { vec![] };
        assert_eq!(names(&placed), want, "{shown:?}");

        let unplaced = server
            .placement()
            .allocate(ask(shown, too_big.clone()))
            .await
            .unwrap()
            .into_inner()
            .result
            .unwrap();
        assert!(!unplaced.placed);
        assert_eq!(unplaced.failed_node_count, 4, "{shown:?}");
        let want: Vec<&str> = if unplaced_lists {
            vec!["bad", "full", "ok", "small"]
        } else {
            vec![]
        };
        assert_eq!(names(&unplaced), want, "{shown:?}");
    }
    // AllocateBatch: per result; an all-or-nothing batch rolled back counts as not placed.
    let batch = server
        .placement()
        .allocate_batch(v1::AllocateBatchRequest {
            node_set: None,
            nodes: nodes(),
            workloads: vec![one_gpu(), one_gpu()],
            options: Some(v1::PlacementOptions {
                failed_nodes: v1::FailedNodes::WhenUnplaced as i32,
                ..Default::default()
            }),
            all_or_nothing: true,
            return_updated_nodes: false,
            node_refs: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!batch.all_placed);
    let first = &batch.results[0];
    assert!(first.rolled_back && !first.placed);
    assert_eq!(names(first), all);
    assert_eq!(batch.results[1].failed_node_count, 4);
    assert_eq!(batch.results[1].failed_nodes.len(), 4);
}

#[tokio::test]
async fn each_invalid_option_names_its_own_field() {
    let server = TestServer::start(&[]).await;
    let cases = [
        (
            v1::PlacementOptions {
                default_cores_percent: Some(101),
                ..Default::default()
            },
            "options.default_cores_percent",
            "OUT_OF_RANGE",
        ),
        (
            v1::PlacementOptions {
                default_node_policy: 7,
                ..Default::default()
            },
            "options.default_node_policy",
            "INVALID_NODE_POLICY",
        ),
        (
            v1::PlacementOptions {
                default_gpu_policy: vec![1, 0],
                ..Default::default()
            },
            "options.default_gpu_policy[1]",
            "INVALID_GPU_POLICY",
        ),
        (
            v1::PlacementOptions {
                default_gpu_policy: vec![99],
                ..Default::default()
            },
            "options.default_gpu_policy[0]",
            "INVALID_GPU_POLICY",
        ),
        (
            v1::PlacementOptions {
                failed_nodes: 9,
                ..Default::default()
            },
            "options.failed_nodes",
            "UNKNOWN_ENUM_VALUE",
        ),
    ];
    for (options, field, reason) in cases {
        let mut req = allocate_req(vec![node("a", 1, 8000)], one_gpu());
        req.options = Some(options.clone());
        let err = server.placement().allocate(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert_eq!(
            reasons(&err),
            vec![(field.to_owned(), reason.to_owned())],
            "{options:?}"
        );
        // ValidateWorkload validates the options the same way (they are not the workload's).
        let err = server
            .placement()
            .validate_workload(v1::ValidateWorkloadRequest {
                workload: Some(one_gpu()),
                options: Some(options),
            })
            .await
            .unwrap_err();
        assert_eq!(reasons(&err), vec![(field.to_owned(), reason.to_owned())]);
    }
    // Two bad defaults: two violations, each with its own field.
    let mut req = allocate_req(vec![node("a", 1, 8000)], one_gpu());
    req.options = Some(v1::PlacementOptions {
        default_node_policy: 7,
        default_cores_percent: Some(200),
        default_memory_mib: Some(u64::MAX),
        ..Default::default()
    });
    let err = server.placement().allocate(req).await.unwrap_err();
    let fields: Vec<String> = reasons(&err).into_iter().map(|v| v.0).collect();
    assert_eq!(
        fields,
        vec![
            "options.default_node_policy",
            "options.default_cores_percent"
        ]
    );
}
