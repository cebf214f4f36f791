//! Nodes by reference (`node_refs`): misses, mixed requests, malformed and mismatched digests,
//! eviction under pressure, and decisions identical to whole nodes (property test).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::refs::*;
use common::*;
use gpusched_api::v1;
use gpusched_api::v1::placement_service_server::PlacementService;
use gpusched_service::{Metrics, Settings};
use proptest::prelude::*;
use prost::Message;
use tonic::{Code, Request};
use tonic_types::StatusExt;

fn gpu_pod(gpus: &str, mem: &str) -> v1::Workload {
    pod(
        &[],
        &[&[("nvidia.com/gpu", gpus), ("nvidia.com/gpumem", mem)]],
    )
}

fn cluster() -> Vec<v1::Node> {
    vec![
        node("a", 2, 16000),
        node_with(
            "b",
            vec![
                used(card("b-gpu0", 0, 16000), 2, 4000, 20),
                card("b-gpu1", 1, 16000),
            ],
        ),
        node("c", 4, 8000),
    ]
}

fn refs_req(nodes: Vec<v1::Node>, refs: Vec<v1::NodeRef>) -> v1::AllocateRequest {
    let mut r = allocate_req(nodes, gpu_pod("1", "3000"));
    r.node_refs = refs;
    r
}

#[tokio::test]
async fn references_the_server_does_not_hold_are_all_listed() {
    let server = TestServer::start(&[]).await;
    let nodes = cluster();
    let refs: Vec<_> = nodes.iter().map(by_digest).collect();
    let err = server
        .placement()
        .allocate(refs_req(vec![], refs.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let pf = err
        .get_error_details()
        .precondition_failure()
        .cloned()
        .unwrap();
    let mut got: Vec<String> = pf.violations.iter().map(|v| v.subject.clone()).collect();
    assert!(pf.violations.iter().all(|v| v.r#type == "MISSING"));
    let mut want: Vec<String> = refs
        .iter()
        .flat_map(|r| [r.inventory_digest.as_ref(), r.usage_digest.as_ref()])
        .flatten()
        .map(subject)
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "every missing digest (3 inventories + 1 usage)");
    assert_eq!(want.len(), 4);
    // Resent inline: answered; then by digest alone: the same answer.
    let whole = server
        .placement()
        .allocate(refs_req(nodes.clone(), vec![]))
        .await
        .unwrap()
        .into_inner();
    let first = server
        .placement()
        .allocate(refs_req(vec![], nodes.iter().map(inline).collect()))
        .await
        .unwrap()
        .into_inner();
    let second = server
        .placement()
        .allocate(refs_req(vec![], refs))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first, whole);
    assert_eq!(second, whole);
}

#[tokio::test]
async fn whole_nodes_and_references_mix_and_every_rpc_takes_them() {
    let server = TestServer::start(&[]).await;
    let nodes = cluster();
    let mut p = server.placement();
    // Warm "b" and "c".
    p.allocate(refs_req(vec![], nodes[1..].iter().map(inline).collect()))
        .await
        .unwrap();
    let mixed = vec![by_digest(&nodes[1]), by_digest(&nodes[2])];
    let whole = p
        .allocate(refs_req(nodes.clone(), vec![]))
        .await
        .unwrap()
        .into_inner();
    let got = p
        .allocate(refs_req(vec![nodes[0].clone()], mixed.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, whole);
    let w = gpu_pod("1", "3000");
    let f_whole = p
        .filter(v1::FilterRequest {
            node_set: None,
            nodes: nodes.clone(),
            workload: Some(w.clone()),
            options: None,
            node_refs: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    let f = p
        .filter(v1::FilterRequest {
            node_set: None,
            nodes: vec![nodes[0].clone()],
            workload: Some(w.clone()),
            options: None,
            node_refs: mixed.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(f, f_whole);
    let s_whole = p
        .score(v1::ScoreRequest {
            node_set: None,
            nodes: nodes.clone(),
            workload: Some(w.clone()),
            options: None,
            node_refs: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    let s = p
        .score(v1::ScoreRequest {
            node_set: None,
            nodes: vec![nodes[0].clone()],
            workload: Some(w.clone()),
            options: None,
            node_refs: mixed.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(s, s_whole);
    let batch = |nodes: Vec<v1::Node>, node_refs: Vec<v1::NodeRef>| v1::AllocateBatchRequest {
        node_set: None,
        nodes,
        workloads: vec![w.clone(), w.clone()],
        options: None,
        all_or_nothing: false,
        return_updated_nodes: true,
        node_refs,
    };
    let b_whole = p
        .allocate_batch(batch(nodes.clone(), vec![]))
        .await
        .unwrap()
        .into_inner();
    let b = p
        .allocate_batch(batch(vec![nodes[0].clone()], mixed))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(b, b_whole);
    // A name twice (whole and by reference) is a duplicate, named after the request's fields.
    let err = p
        .allocate(refs_req(vec![nodes[1].clone()], vec![by_digest(&nodes[1])]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let v = violations(&err);
    assert_eq!(v[0].0, "node_refs[0].inventory.name", "{v:?}");
}

#[tokio::test]
async fn a_digest_that_does_not_match_its_bytes_is_invalid() {
    let server = TestServer::start(&[]).await;
    let nodes = cluster();
    let mut r = inline(&nodes[0]);
    r.inventory_digest = Some(digest(b"something else"));
    let err = server
        .placement()
        .allocate(refs_req(vec![], vec![r]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(violations(&err)[0].0, "node_refs[0].inventory_digest");
    // Malformed references: wrong hash length, unknown function, nothing at all, bad bytes.
    // (A usage part naming a card the node does not have makes that node invalid, not the
    // request: tests/node_faults.rs.)
    let mut short = by_digest(&nodes[0]);
    short.inventory_digest.as_mut().unwrap().hash.pop();
    let mut func = by_digest(&nodes[0]);
    func.inventory_digest.as_mut().unwrap().function = 7;
    let empty = v1::NodeRef::default();
    let junk = v1::NodeRef {
        inventory: vec![0xff, 0xff, 0xff],
        ..Default::default()
    };
    let err = server
        .placement()
        .allocate(refs_req(vec![], vec![short, func, empty, junk]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let fields: Vec<String> = violations(&err).into_iter().map(|v| v.0).collect();
    assert_eq!(
        fields,
        [
            "node_refs[0].inventory_digest.hash",
            "node_refs[1].inventory_digest.function",
            "node_refs[2]",
            "node_refs[3].inventory",
        ]
    );
}

fn flood_node(i: usize) -> v1::Node {
    node(&format!("flood-{i:05}"), 8, 81920)
}

#[tokio::test]
async fn a_flood_of_distinct_nodes_evicts_and_stays_under_the_bound() {
    let settings = settings(&[
        ("node_cache.max_bytes", "1048576"),
        ("node_cache.max_entries", "100000"),
    ]);
    let metrics = Arc::new(Metrics::new());
    let running = gpusched_service::start(settings, Arc::clone(&metrics))
        .await
        .unwrap();
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", running.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut p = v1::placement_service_client::PlacementServiceClient::new(channel)
        .max_encoding_message_size(64 << 20);
    for chunk in 0..10 {
        let refs = (chunk * 500..(chunk + 1) * 500)
            .map(|i| inline(&flood_node(i)))
            .collect();
        p.allocate(refs_req(vec![], refs)).await.unwrap();
        let m = &metrics.node_cache;
        assert!(m.bytes.get() <= 1 << 20, "{} bytes held", m.bytes.get());
    }
    let m = &metrics.node_cache;
    assert!(m.evictions.get() > 4000, "{} evictions", m.evictions.get());
    assert!(m.entries.get() > 0 && m.bytes.get() > (1 << 20) / 2);
    // The newest are held, the oldest were evicted (and are reported missing, not misused).
    let err = p
        .allocate(refs_req(vec![], vec![by_digest(&flood_node(0))]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let text = metrics.encode();
    for name in [
        "gpusched_node_cache_hits_total",
        "gpusched_node_cache_misses_total",
        "gpusched_node_cache_evictions_total",
        "gpusched_node_cache_bytes",
        "gpusched_node_cache_entries",
    ] {
        assert!(text.contains(name), "{name} missing from\n{text}");
    }
    running.shutdown().await.unwrap();
}

// --- decisions by reference are those with whole nodes, bit for bit ------------------------

fn api(settings: Settings) -> impl PlacementService {
    gpusched_service::testing::placement(settings, Arc::new(Metrics::new()))
}

prop_compose! {
    fn arb_card(node: usize, j: usize)(
        mem in prop::sample::select(vec![8000u64, 16000, 40960]),
        used_slots in 0u32..4,
        used_mem in 0u64..9000,
        used_cores in prop::sample::select(vec![0u32, 10, 50, 100]),
        numa in 0u32..2,
        healthy in prop::bool::weighted(0.9),
    ) -> v1::Card {
        let mut c = card(&format!("n{node}-gpu{j}"), j as u32, mem);
        c.numa = numa;
        if !healthy {
            c.health = v1::CardHealth::Unhealthy as i32;
        }
        if used_slots > 0 {
            c.usage = Some(v1::CardUsage { used_slots, used_mem_mib: used_mem.min(mem), used_cores });
        }
        c
    }
}

fn arb_node(i: usize) -> impl Strategy<Value = v1::Node> {
    (1usize..5)
        .prop_flat_map(move |n| (0..n).map(|j| arb_card(i, j)).collect::<Vec<_>>())
        .prop_map(move |cards| node_with(&format!("n{i}"), cards))
}

fn arb_cluster() -> impl Strategy<Value = Vec<v1::Node>> {
    (1usize..7).prop_flat_map(|n| (0..n).map(arb_node).collect::<Vec<_>>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn decisions_by_reference_are_byte_identical(
        nodes in arb_cluster(),
        gpus in prop::sample::select(vec!["1", "2"]),
        mem in prop::sample::select(vec!["1000", "6000", "20000"]),
        policy in prop::sample::select(vec!["binpack", "spread", "topology-aware", "numa"]),
        whole_prefix in 0usize..3,
        explain in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let api = api(settings(&[]));
        let w = pod(
            &[("hami.io/gpu-scheduler-policy", policy)],
            &[&[("nvidia.com/gpu", gpus), ("nvidia.com/gpumem", mem)]],
        );
        let req = |nodes: Vec<v1::Node>, refs: Vec<v1::NodeRef>| v1::AllocateRequest {
            node_set: None,
            nodes,
            workload: Some(w.clone()),
            options: Some(v1::PlacementOptions { explain, ..Default::default() }),
            restrict_to_node_names: vec![],
            node_refs: refs,
        };
        let k = whole_prefix.min(nodes.len());
        let (whole, rest) = nodes.split_at(k);
        rt.block_on(async {
            let want = api.allocate(Request::new(req(nodes.clone(), vec![]))).await
                .unwrap().into_inner().encode_to_vec();
            let inl = api
                .allocate(Request::new(req(whole.to_vec(), rest.iter().map(inline).collect())))
                .await.unwrap().into_inner().encode_to_vec();
            let dig = api
                .allocate(Request::new(req(whole.to_vec(), rest.iter().map(by_digest).collect())))
                .await.unwrap().into_inner().encode_to_vec();
            prop_assert_eq!(&inl, &want);
            prop_assert_eq!(&dig, &want);
            Ok(())
        })?;
    }
}

#[tokio::test]
async fn an_unchanged_node_is_one_combined_entry_and_answers_carry_the_header() {
    let metrics = Arc::new(Metrics::new());
    let api = gpusched_service::testing::placement(settings(&[]), Arc::clone(&metrics));
    // "b" has usage: inventory, usage and the combined pair; "a" and "c" only inventories.
    let nodes = cluster();
    let whole = api
        .allocate(Request::new(refs_req(nodes.clone(), vec![])))
        .await
        .unwrap();
    assert_eq!(
        whole
            .metadata()
            .get(gpusched_api::NODE_REFS_HEADER)
            .unwrap(),
        "1"
    );
    let whole = whole.into_inner();
    let first = api
        .allocate(Request::new(refs_req(
            vec![],
            nodes.iter().map(inline).collect(),
        )))
        .await
        .unwrap()
        .into_inner();
    let m = &metrics.node_cache;
    assert_eq!(m.entries.get(), 3 + 1 + 1, "3 inventories, 1 usage, 1 pair");
    for _ in 0..3 {
        let again = api
            .allocate(Request::new(refs_req(
                vec![],
                nodes.iter().map(by_digest).collect(),
            )))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(again, whole);
    }
    assert_eq!(first, whole);
    assert_eq!(m.entries.get(), 5, "nothing new held");
    assert_eq!(m.hits[0].get(), 9);
    assert_eq!(
        m.hits[1].get(),
        3,
        "the pair counts as the usage part's hit"
    );
    assert_eq!(m.misses[0].get() + m.misses[1].get(), 0);
    // A usage part the pair was not built with: the inventory's entry and a new pair.
    let mut changed = nodes.clone();
    changed[1].cards[1].usage = Some(v1::CardUsage {
        used_slots: 1,
        used_mem_mib: 1000,
        used_cores: 10,
    });
    let want = api
        .allocate(Request::new(refs_req(changed.clone(), vec![])))
        .await
        .unwrap()
        .into_inner();
    let mut refs: Vec<_> = changed.iter().map(by_digest).collect();
    refs[1] = inline(&changed[1]);
    refs[1].inventory.clear();
    let got = api
        .allocate(Request::new(refs_req(vec![], refs)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, want);
    assert_eq!(m.entries.get(), 5 + 1 + 1, "the new usage and its pair");
    // Errors carry the header too.
    let err = api
        .allocate(Request::new(refs_req(
            vec![],
            vec![by_digest(&node("z", 1, 8000))],
        )))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.metadata().contains_key(gpusched_api::NODE_REFS_HEADER));
}
