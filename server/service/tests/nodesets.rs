//! Candidates as changes to a kept node set (`NodeSetRef`): decisions identical to the list sent
//! in full (property test), a base the server does not hold, bad set requests, the bounds.
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
use sha2::Digest as _;
use tonic::{Code, Request};
use tonic_types::StatusExt;

/// The set digest as types.proto defines it, computed here independently of the server.
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

fn api_with(settings: Settings) -> (impl PlacementService, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    (
        gpusched_service::testing::placement(settings, Arc::clone(&metrics)),
        metrics,
    )
}

fn workload() -> v1::Workload {
    pod(
        &[],
        &[&[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "3000")]],
    )
}

fn req(
    nodes: Vec<v1::Node>,
    refs: Vec<v1::NodeRef>,
    set: Option<v1::NodeSetRef>,
) -> v1::AllocateRequest {
    let mut r = allocate_req(nodes, workload());
    r.node_refs = refs;
    r.node_set = set;
    r
}

fn keep() -> Option<v1::NodeSetRef> {
    Some(v1::NodeSetRef {
        keep: true,
        ..Default::default()
    })
}

fn base(d: &v1::Digest, removed: &[&str]) -> Option<v1::NodeSetRef> {
    Some(v1::NodeSetRef {
        base: Some(d.clone()),
        removed_node_names: removed.iter().map(|s| (*s).to_owned()).collect(),
        keep: false,
    })
}

fn cluster(n: usize) -> Vec<v1::Node> {
    (0..n)
        .map(|i| node(&format!("n{i:02}"), 2, 8000 + 1000 * i as u64))
        .collect()
}

#[tokio::test]
async fn a_kept_set_answers_changes_as_the_full_list_and_a_lost_one_is_named() {
    let (api, metrics) = api_with(settings(&[]));
    let nodes = cluster(6);
    let refs: Vec<_> = nodes.iter().map(inline).collect();
    let d = set_digest(&refs);
    let first = api
        .allocate(Request::new(req(vec![], refs, keep())))
        .await
        .unwrap();
    assert_eq!(
        first
            .metadata()
            .get(gpusched_api::NODE_SETS_HEADER)
            .unwrap(),
        "1"
    );
    assert_eq!(metrics.node_sets.inserts.get(), 1);
    // Changed: n01 gets usage (sent by reference, inline), n05 removed, n09 added (whole).
    let mut changed = nodes.clone();
    changed[1].cards[0].usage = Some(v1::CardUsage {
        used_slots: 1,
        used_mem_mib: 7000,
        used_cores: 30,
    });
    changed.remove(5);
    let added = node("n09", 1, 4000);
    changed.push(added.clone());
    let full = api
        .allocate(Request::new(req(changed.clone(), vec![], None)))
        .await
        .unwrap()
        .into_inner();
    let delta = api
        .allocate(Request::new(req(
            vec![added],
            vec![inline(&changed[1])],
            base(&d, &["n05"]),
        )))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(delta, full);
    assert_eq!(metrics.node_sets.hits.get(), 1);
    // A digest the server never kept: FAILED_PRECONDITION naming the set and the parts it
    // does not hold either.
    let mut other = d.clone();
    other.hash[0] ^= 1;
    let err = api
        .allocate(Request::new(req(
            vec![],
            vec![by_digest(&node("zz", 1, 1000))],
            base(&other, &[]),
        )))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let subjects: Vec<String> = err
        .get_error_details()
        .precondition_failure()
        .unwrap()
        .violations
        .iter()
        .map(|v| v.subject.clone())
        .collect();
    assert_eq!(subjects.len(), 2, "{subjects:?}");
    assert_eq!(subjects[0], format!("nodeset/{}", subject(&other)));
    assert!(subjects[1].starts_with("sha256/"));
    assert_eq!(metrics.node_sets.misses.get(), 1);
}

#[tokio::test]
async fn bad_set_requests_name_the_field() {
    let (api, _) = api_with(settings(&[]));
    let nodes = cluster(3);
    let refs: Vec<_> = nodes.iter().map(inline).collect();
    let d = set_digest(&refs);
    api.allocate(Request::new(req(vec![], refs.clone(), keep())))
        .await
        .unwrap();
    let field_of = |e: tonic::Status| {
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        e.get_error_details()
            .bad_request()
            .unwrap()
            .field_violations
            .iter()
            .map(|v| (v.field.clone(), v.reason.clone()))
            .collect::<Vec<_>>()
    };
    let cases: Vec<(v1::AllocateRequest, Vec<(&str, &str)>)> = vec![
        (
            req(
                vec![],
                vec![],
                Some(v1::NodeSetRef {
                    base: Some(d.clone()),
                    keep: true,
                    ..Default::default()
                }),
            ),
            vec![("node_set.keep", "INVALID_NODE_REFERENCE")],
        ),
        (
            req(vec![node("w", 1, 1000)], refs.clone(), keep()),
            vec![("node_set.keep", "INVALID_NODE_REFERENCE")],
        ),
        (
            req(
                vec![],
                refs.clone(),
                Some(v1::NodeSetRef {
                    removed_node_names: vec!["n00".into()],
                    ..Default::default()
                }),
            ),
            vec![("node_set.removed_node_names", "INVALID_NODE_REFERENCE")],
        ),
        (
            req(
                vec![nodes[1].clone()],
                vec![],
                base(&d, &["nope", "n01", "n02", "n02"]),
            ),
            vec![
                ("node_set.removed_node_names[0]", "UNKNOWN_REFERENCE"),
                ("node_set.removed_node_names[1]", "DUPLICATE_ID"),
                ("node_set.removed_node_names[3]", "DUPLICATE_ID"),
            ],
        ),
        (
            req(
                vec![],
                vec![],
                Some(v1::NodeSetRef {
                    base: Some(v1::Digest {
                        hash: vec![1, 2, 3],
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            ),
            vec![("node_set.base.hash", "INVALID_NODE_REFERENCE")],
        ),
    ];
    for (r, want) in cases {
        let got = field_of(api.allocate(Request::new(r)).await.unwrap_err());
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(f, k)| ((*f).to_owned(), (*k).to_owned()))
            .collect();
        assert_eq!(got, want);
    }
}

#[tokio::test]
async fn sets_are_bounded_and_a_change_over_the_node_limit_is_refused() {
    let (api, metrics) = api_with(settings(&[
        ("node_cache.max_sets", "2"),
        ("limits.max_nodes", "4"),
    ]));
    let mut digests = Vec::new();
    for k in 0..3 {
        let nodes: Vec<_> = (0..4)
            .map(|i| node(&format!("s{k}-{i}"), 1, 1000))
            .collect();
        let refs: Vec<_> = nodes.iter().map(inline).collect();
        digests.push(set_digest(&refs));
        api.allocate(Request::new(req(vec![], refs, keep())))
            .await
            .unwrap();
    }
    assert_eq!(metrics.node_sets.entries.get(), 2);
    assert_eq!(metrics.node_sets.evictions.get(), 1);
    let oldest = api
        .allocate(Request::new(req(vec![], vec![], base(&digests[0], &[]))))
        .await
        .unwrap_err();
    assert_eq!(oldest.code(), Code::FailedPrecondition);
    api.allocate(Request::new(req(vec![], vec![], base(&digests[2], &[]))))
        .await
        .unwrap();
    // Four kept nodes plus one added: over limits.max_nodes.
    let over = api
        .allocate(Request::new(req(
            vec![node("extra", 1, 1000)],
            vec![],
            base(&digests[2], &[]),
        )))
        .await
        .unwrap_err();
    assert_eq!(over.code(), Code::ResourceExhausted, "{over:?}");
    assert!(over.message().contains("limits.max_nodes"), "{over:?}");
}

// --- changes against a kept set decide as the full list, bit for bit -----------------------

fn arb_usage() -> impl Strategy<Value = Option<v1::CardUsage>> {
    prop::option::of(
        (1u32..3, 0u64..8000, 0u32..100).prop_map(|(s, m, c)| v1::CardUsage {
            used_slots: s,
            used_mem_mib: m,
            used_cores: c,
        }),
    )
}

fn arb_node(i: usize) -> impl Strategy<Value = v1::Node> {
    (
        1usize..4,
        prop::sample::select(vec![8000u64, 16000]),
        arb_usage(),
    )
        .prop_map(move |(n, mem, usage)| {
            let mut nd = node(&format!("n{i:02}"), n as u32, mem);
            nd.cards[0].usage = usage;
            nd
        })
}

fn arb_nodes(from: usize, n: usize) -> impl Strategy<Value = Vec<v1::Node>> {
    (from..from + n).map(arb_node).collect::<Vec<_>>()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn changes_against_a_kept_set_decide_as_the_full_list(
        before in arb_nodes(0, 8),
        replaced in arb_nodes(0, 8),
        added in arb_nodes(8, 3),
        replace_mask in prop::collection::vec(any::<bool>(), 8),
        remove_mask in prop::collection::vec(prop::bool::weighted(0.2), 8),
        add_count in 0usize..4,
        gpus in prop::sample::select(vec!["1", "2"]),
        policy in prop::sample::select(vec!["binpack", "spread"]),
        whole_changes in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (api, _) = api_with(settings(&[]));
        let w = pod(
            &[("hami.io/node-scheduler-policy", policy)],
            &[&[("nvidia.com/gpu", gpus), ("nvidia.com/gpumem", "2000")]],
        );
        let mk = |nodes: Vec<v1::Node>, refs: Vec<v1::NodeRef>, set: Option<v1::NodeSetRef>| {
            let mut r = allocate_req(nodes, w.clone());
            r.node_refs = refs;
            r.node_set = set;
            r
        };
        // The list after the change, and the change itself.
        let mut after = Vec::new();
        let mut sent = Vec::new();
        let mut removed = Vec::new();
        for i in 0..8 {
            if remove_mask[i] && !replace_mask[i] {
                removed.push(before[i].name.clone());
                continue;
            }
            if replace_mask[i] {
                after.push(replaced[i].clone());
                sent.push(replaced[i].clone());
            } else {
                after.push(before[i].clone());
            }
        }
        for n in added.iter().take(add_count) {
            after.push(n.clone());
            sent.push(n.clone());
        }
        rt.block_on(async {
            let refs: Vec<_> = before.iter().map(inline).collect();
            let d = set_digest(&refs);
            api.allocate(Request::new(mk(vec![], refs, keep()))).await.unwrap();
            let want = api.allocate(Request::new(mk(after.clone(), vec![], None))).await
                .map(|r| r.into_inner().encode_to_vec()).map_err(|e| e.code());
            let removed: Vec<&str> = removed.iter().map(String::as_str).collect();
            let change = if whole_changes {
                mk(sent.clone(), vec![], base(&d, &removed))
            } else {
                mk(vec![], sent.iter().map(inline).collect(), base(&d, &removed))
            };
            let got = api.allocate(Request::new(change)).await
                .map(|r| r.into_inner().encode_to_vec()).map_err(|e| e.code());
            prop_assert_eq!(got, want);
            Ok(())
        })?;
    }
}
