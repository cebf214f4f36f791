//! Node-level faults stay node-level: an invalid node (duplicate or blank card ids, more cards
//! than `limits.max_cards_per_node`, pair scores or cordons naming unknown cards, capacities
//! beyond the documented bounds) is answered as that node failed and unresolvable with reason
//! INVALID_NODE naming the field, in Filter, Score, Allocate and AllocateBatch, sent whole or by
//! reference; the decision is made on the other nodes exactly as without the bad ones.
//! Zero-capacity cards are refused card by card (CARD_ZERO_CAPACITY). Request-level limits stay
//! request errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use gpusched_api::v1;
use gpusched_api::v1::placement_service_server::PlacementService;
use gpusched_service::{Metrics, Settings};
use proptest::prelude::*;
use prost::Message;
use sha2::Digest as _;
use tonic::{Code, Request};

const CORDON: &str = "hami.io/device-cordon";

/// One kind of invalid node: the node, the field its problem is reported on (relative to the
/// node) and the violation reason named in the message.
#[derive(Clone, Debug)]
struct Bad {
    node: v1::Node,
    field: &'static str,
    reason: &'static str,
}

/// Every kind of invalid node, each named `bad-<kind>`, `k` distinguishing copies.
fn bad_nodes(k: usize) -> Vec<Bad> {
    let name = |kind: &str| format!("bad-{kind}-{k}");
    let with = |kind: &str, edit: &dyn Fn(&mut v1::Node)| {
        let mut n = node(&name(kind), 2, 16000);
        edit(&mut n);
        n
    };
    vec![
        Bad {
            node: with("dup", &|n| n.cards[1].id = n.cards[0].id.clone()),
            field: "cards[1].id",
            reason: "DUPLICATE_ID",
        },
        Bad {
            node: node(&name("many"), 65, 16000),
            field: "cards",
            reason: "LIMIT_EXCEEDED",
        },
        Bad {
            node: with("pair", &|n| {
                n.pair_scores = vec![v1::CardPairScore {
                    card_id: n.cards[0].id.clone(),
                    peer_card_id: "GPU-nowhere".into(),
                    score: 50,
                }];
            }),
            field: "pair_scores[0].peer_card_id",
            reason: "UNKNOWN_REFERENCE",
        },
        Bad {
            node: with("cordon", &|n| {
                n.cordoned_card_ids = vec![n.cards[0].id.clone(), "GPU-ghost".into()];
            }),
            field: "cordoned_card_ids[1]",
            reason: "UNKNOWN_REFERENCE",
        },
        Bad {
            node: with("cordonann", &|n| {
                n.annotations = BTreeMap::from([(CORDON.to_owned(), "GPU-ghost".to_owned())])
                    .into_iter()
                    .collect();
            }),
            field: "annotations[\"hami.io/device-cordon\"]",
            reason: "UNKNOWN_REFERENCE",
        },
        Bad {
            node: with("mem", &|n| n.cards[0].total_mem_mib = i32::MAX as u64),
            field: "cards[0].total_mem_mib",
            reason: "OUT_OF_RANGE",
        },
        Bad {
            node: with("cores", &|n| n.cards[1].total_cores = i32::MAX as u32),
            field: "cards[1].total_cores",
            reason: "OUT_OF_RANGE",
        },
        Bad {
            node: with("slots", &|n| n.cards[0].slots = u32::MAX),
            field: "cards[0].slots",
            reason: "OUT_OF_RANGE",
        },
        Bad {
            node: with("blank", &|n| n.cards[0].id = " ".into()),
            field: "cards[0].id",
            reason: "MISSING_FIELD",
        },
        Bad {
            node: with("empty", &|n| n.cards[1].id = String::new()),
            field: "cards[1].id",
            reason: "MISSING_FIELD",
        },
    ]
}

/// Two good nodes: `good-1` idle, `good-2` partly used (binpack prefers it).
fn good_nodes() -> Vec<v1::Node> {
    vec![
        node("good-1", 2, 16000),
        node_with(
            "good-2",
            vec![
                used(card("good-2-gpu0", 0, 16000), 1, 4000, 10),
                card("good-2-gpu1", 1, 16000),
            ],
        ),
    ]
}

fn gpu_pod() -> v1::Workload {
    pod(
        &[],
        &[&[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "3000")]],
    )
}

fn reason_name(r: i32) -> &'static str {
    v1::Reason::try_from(r).map_or("?", |r| r.as_str_name())
}

/// The failed entry of a bad node is INVALID_NODE, unresolvable, naming its field and reason.
fn assert_invalid(failed: &[v1::FailedNode], bad: &Bad) {
    let f = failed
        .iter()
        .find(|f| f.node_name == bad.node.name)
        .unwrap_or_else(|| panic!("{} not among the failed nodes: {failed:#?}", bad.node.name));
    assert_eq!(f.reasons.len(), 1, "{f:?}");
    assert_eq!(
        reason_name(f.reasons[0].reason),
        "REASON_INVALID_NODE",
        "{f:?}"
    );
    assert_eq!(f.reasons[0].name, "InvalidNode");
    assert_eq!(f.reasons[0].count, 1);
    assert!(f.unresolvable, "{f:?}");
    assert!(f.container_name.is_empty(), "{f:?}");
    assert!(
        f.message.starts_with("InvalidNode: ")
            && f.message.contains(&format!("{} {}", bad.field, bad.reason)),
        "{} should name `{} {}`: {:?}",
        bad.node.name,
        bad.field,
        bad.reason,
        f.message
    );
}

fn all_bad() -> Vec<Bad> {
    bad_nodes(0)
}

fn mixed(bad: &[Bad]) -> Vec<v1::Node> {
    // Bad nodes around the good ones, so that no position is special.
    let mut nodes: Vec<v1::Node> = bad.iter().map(|b| b.node.clone()).collect();
    let good = good_nodes();
    nodes.insert(nodes.len() / 2, good[0].clone());
    nodes.push(good[1].clone());
    nodes
}

fn names(failed: &[v1::FailedNode]) -> Vec<String> {
    failed.iter().map(|f| f.node_name.clone()).collect()
}

fn sorted_bad_names(bad: &[Bad]) -> Vec<String> {
    let mut v: Vec<String> = bad.iter().map(|b| b.node.name.clone()).collect();
    v.sort();
    v
}

#[tokio::test]
async fn each_kind_of_invalid_node_fails_alone_in_every_rpc() {
    let server = TestServer::start(&[]).await;
    let mut c = server.placement();
    let bad = all_bad();
    for b in &bad {
        // Each kind on its own beside the good nodes, then all of them together.
        for set in [std::slice::from_ref(b), &bad[..]] {
            let nodes = mixed(set);
            let want_failed = sorted_bad_names(set);
            let f = c
                .filter(v1::FilterRequest {
                    nodes: nodes.clone(),
                    workload: Some(gpu_pod()),
                    ..Default::default()
                })
                .await
                .unwrap_or_else(|e| panic!("Filter with {}: {e:?}", b.node.name))
                .into_inner();
            assert_eq!(f.feasible_node_names, ["good-1", "good-2"]);
            assert_eq!(names(&f.failed_nodes), want_failed, "sorted by name");
            for x in set {
                assert_invalid(&f.failed_nodes, x);
            }
            let s = c
                .score(v1::ScoreRequest {
                    nodes: nodes.clone(),
                    workload: Some(gpu_pod()),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            let scored: Vec<&str> = s.scores.iter().map(|s| s.node_name.as_str()).collect();
            assert_eq!(
                scored,
                ["good-2", "good-1"],
                "binpack prefers the used node"
            );
            assert_eq!(names(&s.failed_nodes), want_failed);
            let a = c
                .allocate(allocate_req(nodes.clone(), gpu_pod()))
                .await
                .unwrap()
                .into_inner()
                .result
                .unwrap();
            assert!(a.placed);
            assert_eq!(a.node_name, "good-2");
            assert_eq!(a.feasible_node_count, 2);
            assert_eq!(names(&a.failed_nodes), want_failed);
            for x in set {
                assert_invalid(&a.failed_nodes, x);
            }
            let batch = c
                .allocate_batch(v1::AllocateBatchRequest {
                    nodes,
                    workloads: vec![gpu_pod(), gpu_pod(), gpu_pod()],
                    return_updated_nodes: true,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            assert!(batch.all_placed);
            for r in &batch.results {
                assert!(r.node_name.starts_with("good-"), "{r:?}");
                assert_eq!(names(&r.failed_nodes), want_failed);
                for x in set {
                    assert_invalid(&r.failed_nodes, x);
                }
            }
            let updated: Vec<&str> = batch
                .updated_nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect();
            assert_eq!(
                updated,
                ["good-1", "good-2"],
                "invalid nodes are not echoed"
            );
        }
    }
}

#[tokio::test]
async fn a_node_named_by_restrict_may_be_invalid() {
    let server = TestServer::start(&[]).await;
    let mut c = server.placement();
    let bad = all_bad();
    let mut req = allocate_req(mixed(&bad), gpu_pod());
    req.restrict_to_node_names = vec![bad[0].node.name.clone()];
    let a = c.allocate(req).await.unwrap().into_inner().result.unwrap();
    assert!(!a.placed);
    assert_eq!(names(&a.failed_nodes), [bad[0].node.name.clone()]);
    assert_invalid(&a.failed_nodes, &bad[0]);
    let mut req = allocate_req(mixed(&bad), gpu_pod());
    req.restrict_to_node_names = vec!["good-1".into(), bad[3].node.name.clone()];
    let a = c.allocate(req).await.unwrap().into_inner().result.unwrap();
    assert_eq!(a.node_name, "good-1");
    assert_eq!(names(&a.failed_nodes), [bad[3].node.name.clone()]);
}

#[tokio::test]
async fn a_workload_without_gpu_still_sees_invalid_nodes_failed() {
    let server = TestServer::start(&[]).await;
    let bad = all_bad();
    let f = server
        .placement()
        .filter(v1::FilterRequest {
            nodes: mixed(&bad),
            workload: Some(pod(&[], &[&[("cpu", "1")]])),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!f.requests_gpu);
    assert_eq!(f.feasible_node_names, ["good-1", "good-2"]);
    assert_eq!(names(&f.failed_nodes), sorted_bad_names(&bad));
}

#[tokio::test]
async fn request_level_problems_stay_request_errors() {
    let server =
        TestServer::start(&[("limits.max_nodes", "12"), ("limits.max_cards", "200")]).await;
    let mut c = server.placement();
    let bad = all_bad();
    // 13 nodes: over max_nodes.
    let mut nodes = mixed(&bad);
    nodes.push(node("one-more", 1, 8000));
    let err = c
        .allocate(allocate_req(nodes, gpu_pod()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("limits.max_nodes"));
    // Cards of invalid nodes count towards max_cards (what was sent, not what was usable).
    let many: Vec<v1::Node> = (0..4).map(|i| node(&format!("m{i}"), 65, 1)).collect();
    let err = c.allocate(allocate_req(many, gpu_pod())).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("limits.max_cards"), "{err:?}");
    // Duplicate and empty node names name no node to fail: the request is invalid.
    let err = c
        .allocate(allocate_req(
            vec![bad[0].node.clone(), bad[0].node.clone(), node("g", 1, 8000)],
            gpu_pod(),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(
        reasons(&err),
        [("nodes[1].name".into(), "DUPLICATE_ID".into())]
    );
    let mut unnamed = bad[0].node.clone();
    unnamed.name.clear();
    let err = c
        .allocate(allocate_req(vec![unnamed, node("g", 1, 8000)], gpu_pod()))
        .await
        .unwrap_err();
    assert_eq!(
        reasons(&err),
        [("nodes[0].name".into(), "MISSING_FIELD".into())]
    );
}

#[tokio::test]
async fn zero_capacity_cards_are_refused_with_their_reason() {
    let server = TestServer::start(&[]).await;
    let mut c = server.placement();
    for (dimension, edit) in [
        (
            "slots",
            (|k: &mut v1::Card| k.slots = 0) as fn(&mut v1::Card),
        ),
        ("memory", |k: &mut v1::Card| k.total_mem_mib = 0),
        ("cores", |k: &mut v1::Card| k.total_cores = 0),
    ] {
        // A node with one zero-capacity card and one good card: only the good one is used,
        // whatever the policy prefers (binpack and spread, memory by percentage and in MiB).
        let mut zero = card("zero", 0, 16000);
        edit(&mut zero);
        let mixed_node = node_with("mixed", vec![zero.clone(), card("fine", 1, 16000)]);
        for (policy, mem) in [
            ("binpack", ("nvidia.com/gpumem-percentage", "50")),
            ("spread", ("nvidia.com/gpumem", "1000")),
        ] {
            let w = pod(
                &[("hami.io/gpu-scheduler-policy", policy)],
                &[&[("nvidia.com/gpu", "1"), mem, ("nvidia.com/gpucores", "0")]],
            );
            let a = c
                .allocate(allocate_req(vec![mixed_node.clone()], w))
                .await
                .unwrap()
                .into_inner()
                .result
                .unwrap();
            assert_eq!(
                a.containers[0].cards[0].card_id, "fine",
                "{dimension} {policy}"
            );
        }
        // A node of zero-capacity cards only fails, unresolvable, with the card reason.
        let only_zero = node_with(
            "only-zero",
            vec![zero.clone(), {
                let mut z = zero.clone();
                z.id = "zero-2".into();
                z.index = 1;
                z
            }],
        );
        let mut req = allocate_req(
            vec![only_zero, node("good", 1, 16000)],
            pod(
                &[],
                &[&[
                    ("nvidia.com/gpu", "1"),
                    ("nvidia.com/gpumem-percentage", "10"),
                    ("nvidia.com/gpucores", "0"),
                ]],
            ),
        );
        req.options = Some(v1::PlacementOptions {
            explain: true,
            ..Default::default()
        });
        let a = c.allocate(req).await.unwrap().into_inner().result.unwrap();
        assert_eq!(a.node_name, "good", "{dimension}");
        let f = &a.failed_nodes[0];
        assert_eq!(f.node_name, "only-zero");
        assert!(f.unresolvable, "{dimension}: {f:?}");
        assert_eq!(
            reason_name(f.reasons[0].reason),
            "REASON_CARD_ZERO_CAPACITY"
        );
        assert_eq!(f.message, "2/2 CardZeroCapacity", "{dimension}");
    }
}

// --- by reference: the same answers, and nothing bad is cached as good ----------------------

fn digest(bytes: &[u8]) -> v1::Digest {
    v1::Digest {
        hash: sha2::Sha256::digest(bytes).to_vec(),
        size_bytes: bytes.len() as u64,
        function: 0,
    }
}

/// The node as a reference with its inventory inline (usage moved to the usage part).
fn inline(n: &v1::Node) -> v1::NodeRef {
    let mut inv = n.clone();
    let mut usage = v1::NodeUsage::default();
    for c in &mut inv.cards {
        if let Some(u) = c.usage.take() {
            usage.cards.push(v1::CardUsageEntry {
                card_id: c.id.clone(),
                usage: Some(u),
            });
        }
    }
    let (inv, usage) = (inv.encode_to_vec(), usage.encode_to_vec());
    v1::NodeRef {
        inventory_digest: Some(digest(&inv)),
        usage_digest: (!usage.is_empty()).then(|| digest(&usage)),
        inventory: inv,
        usage,
    }
}

fn by_digest(n: &v1::Node) -> v1::NodeRef {
    let mut r = inline(n);
    r.inventory.clear();
    r.usage.clear();
    r
}

fn api(settings: Settings) -> impl PlacementService {
    gpusched_service::testing::placement(settings, Arc::new(Metrics::new()))
}

#[tokio::test]
async fn by_reference_an_invalid_node_is_answered_as_sent_whole() {
    let metrics = Arc::new(Metrics::new());
    let api = gpusched_service::testing::placement(settings(&[]), metrics.clone());
    let bad = all_bad();
    let nodes = mixed(&bad);
    let req = |nodes: Vec<v1::Node>, refs: Vec<v1::NodeRef>| {
        let mut r = allocate_req(nodes, gpu_pod());
        r.node_refs = refs;
        Request::new(r)
    };
    let whole = api
        .allocate(req(nodes.clone(), vec![]))
        .await
        .unwrap()
        .into_inner()
        .encode_to_vec();
    // Inline, then by digest alone (the server remembers the verdict), then mixed.
    let inl = api
        .allocate(req(vec![], nodes.iter().map(inline).collect()))
        .await
        .unwrap()
        .into_inner()
        .encode_to_vec();
    assert_eq!(inl, whole, "inline references answer as whole nodes");
    let refs = api
        .allocate(req(vec![], nodes.iter().map(by_digest).collect()))
        .await
        .unwrap_or_else(|e| panic!("invalid inventories are remembered by digest: {e:?}"))
        .into_inner()
        .encode_to_vec();
    assert_eq!(refs, whole, "references answer as whole nodes");
    let (a, b) = nodes.split_at(5);
    let mix = api
        .allocate(req(a.to_vec(), b.iter().map(by_digest).collect()))
        .await
        .unwrap()
        .into_inner()
        .encode_to_vec();
    assert_eq!(mix, whole);
    // A usage part naming a card the inventory does not have makes that node invalid too.
    let mut r = inline(&good_nodes()[0]);
    let usage = v1::NodeUsage {
        cards: vec![v1::CardUsageEntry {
            card_id: "GPU-elsewhere".into(),
            usage: Some(v1::CardUsage {
                used_slots: 1,
                used_mem_mib: 1,
                used_cores: 1,
            }),
        }],
    }
    .encode_to_vec();
    r.usage_digest = Some(digest(&usage));
    r.usage = usage;
    let a = api
        .allocate(req(vec![good_nodes()[1].clone()], vec![r]))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(a.node_name, "good-2");
    assert_eq!(names(&a.failed_nodes), ["good-1"]);
    let f = &a.failed_nodes[0];
    assert_eq!(reason_name(f.reasons[0].reason), "REASON_INVALID_NODE");
    assert!(
        f.message
            .contains("usage.cards[0].card_id UNKNOWN_REFERENCE"),
        "{f:?}"
    );
    // The good inventory is still good when sent with its own usage.
    let a = api
        .allocate(req(vec![], vec![by_digest(&good_nodes()[0])]))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert!(a.placed && a.node_name == "good-1", "{a:?}");
    // Verdicts are keyed by content, not by name: the fixed node of the same name is valid.
    let fixed = node(&bad[0].node.name, 2, 16000);
    let a = api
        .allocate(req(vec![], vec![inline(&fixed)]))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert!(a.placed && a.node_name == fixed.name, "{a:?}");
    // Each invalid node is counted once per call: 10 in each of 4 calls, then good-1 once.
    let text = metrics.encode();
    assert!(
        text.contains("gpusched_node_rejections_total{reason=\"InvalidNode\"} 41"),
        "{text}"
    );
}

// --- property: bad nodes change nothing about the decision on the good ones ----------------

prop_compose! {
    fn arb_good(i: usize)(
        cards in 1u32..5,
        mem in prop::sample::select(vec![8000u64, 16000, 40960]),
        used_slots in 0u32..3,
        used_mem in 0u64..6000,
    ) -> v1::Node {
        let mut n = node(&format!("g{i}"), cards, mem);
        if used_slots > 0 {
            n.cards[0].usage = Some(v1::CardUsage { used_slots, used_mem_mib: used_mem, used_cores: 0 });
        }
        n
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn invalid_nodes_are_isolated(
        good in (0usize..4).prop_flat_map(|n| (0..n).map(arb_good).collect::<Vec<_>>()),
        kinds in prop::collection::vec(0usize..10, 1..12),
        positions in prop::collection::vec(any::<prop::sample::Index>(), 12),
        policy in prop::sample::select(vec!["binpack", "spread"]),
        by_ref in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let api = api(settings(&[]));
        let w = pod(
            &[("hami.io/node-scheduler-policy", policy)],
            &[&[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "2000")]],
        );
        // Bad nodes of the chosen kinds (copies numbered), shuffled in among the good ones.
        let bad: Vec<Bad> = kinds
            .iter()
            .enumerate()
            .map(|(k, &kind)| bad_nodes(k).swap_remove(kind))
            .collect();
        let mut nodes = good.clone();
        for (b, at) in bad.iter().zip(&positions) {
            let i = at.index(nodes.len() + 1);
            nodes.insert(i, b.node.clone());
        }
        let req = |nodes: &[v1::Node]| {
            let mut r = allocate_req(vec![], w.clone());
            if by_ref {
                r.node_refs = nodes.iter().map(inline).collect();
            } else {
                r.nodes = nodes.to_vec();
            }
            Request::new(r)
        };
        rt.block_on(async {
            let alone = api.allocate(req(&good)).await.unwrap().into_inner().result.unwrap();
            let with = api.allocate(req(&nodes)).await.unwrap().into_inner().result.unwrap();
            // The same node and cards, score and feasible count; the failed list gains exactly
            // the bad nodes.
            prop_assert_eq!(&with.node_name, &alone.node_name);
            prop_assert_eq!(&with.containers, &alone.containers);
            prop_assert_eq!(&with.node_score, &alone.node_score);
            prop_assert_eq!(with.feasible_node_count, alone.feasible_node_count);
            let mut expected: Vec<String> = names(&alone.failed_nodes);
            expected.extend(bad.iter().map(|b| b.node.name.clone()));
            expected.sort();
            prop_assert_eq!(names(&with.failed_nodes), expected);
            for b in &bad {
                assert_invalid(&with.failed_nodes, b);
            }
            Ok(())
        })?;
    }
}

// --- node sets: invalid nodes are kept and changed like the others ----------------------------

/// The set digest as types.proto defines it.
fn set_digest(refs: &[v1::NodeRef]) -> v1::Digest {
    let mut h = sha2::Sha256::new();
    for r in refs {
        h.update(&r.inventory_digest.as_ref().unwrap().hash);
        match &r.usage_digest {
            Some(d) => h.update(&d.hash),
            None => h.update([0u8; 32]),
        }
    }
    v1::Digest {
        hash: h.finalize().to_vec(),
        size_bytes: 64 * refs.len() as u64,
        function: 0,
    }
}

#[tokio::test]
async fn node_sets_keep_and_change_invalid_nodes_as_the_full_list() {
    let api = api(settings(&[]));
    let bad = all_bad();
    let nodes = mixed(&bad);
    let full = |nodes: Vec<v1::Node>| async {
        api.allocate(Request::new(allocate_req(nodes, gpu_pod())))
            .await
            .unwrap()
            .into_inner()
            .encode_to_vec()
    };
    let refs: Vec<v1::NodeRef> = nodes.iter().map(inline).collect();
    let mut keep = allocate_req(vec![], gpu_pod());
    keep.node_refs = refs.clone();
    keep.node_set = Some(v1::NodeSetRef {
        keep: true,
        ..Default::default()
    });
    let kept = api.allocate(Request::new(keep)).await.unwrap().into_inner();
    assert_eq!(kept.encode_to_vec(), full(nodes.clone()).await);
    // Changes: good-2 turns invalid, bad-dup-0 is fixed, a new invalid node comes, bad-cordon-0
    // is removed.
    let mut broken = good_nodes()[1].clone();
    broken.cards[1].id = broken.cards[0].id.clone();
    let fixed = node(&bad[0].node.name, 2, 16000);
    let new_bad = bad_nodes(7).swap_remove(5);
    let removed = bad[3].node.name.clone();
    let changes = vec![broken.clone(), fixed.clone(), new_bad.node.clone()];
    let mut change = allocate_req(vec![], gpu_pod());
    change.node_refs = changes.iter().map(inline).collect();
    change.node_set = Some(v1::NodeSetRef {
        base: Some(set_digest(&refs)),
        removed_node_names: vec![removed.clone()],
        keep: false,
    });
    let got = api
        .allocate(Request::new(change))
        .await
        .unwrap_or_else(|e| panic!("a change to a kept set: {e:?}"))
        .into_inner();
    let mut list: Vec<v1::Node> = nodes
        .into_iter()
        .filter(|n| ![&broken.name, &fixed.name, &removed].contains(&&n.name))
        .collect();
    list.extend(changes);
    let want = full(list).await;
    assert_eq!(got.encode_to_vec(), want);
    let r = got.result.unwrap();
    // The fixed node is valid now (idle like good-1, and first by name).
    assert_eq!(r.node_name, fixed.name);
    assert!(names(&r.failed_nodes).contains(&"good-2".to_owned()));
    assert!(!names(&r.failed_nodes).contains(&removed));
    assert!(!names(&r.failed_nodes).contains(&fixed.name));
    // Removing an invalid node of the base is a change like any other; removing a node twice,
    // or one that is not in the base, is still an error.
    let mut again = allocate_req(vec![], gpu_pod());
    again.node_set = Some(v1::NodeSetRef {
        base: Some(set_digest(&refs)),
        removed_node_names: vec![bad[1].node.name.clone(), "nowhere".into()],
        keep: false,
    });
    let err = api.allocate(Request::new(again)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(
        reasons(&err),
        [(
            "node_set.removed_node_names[1]".to_owned(),
            "UNKNOWN_REFERENCE".to_owned()
        )]
    );
}
