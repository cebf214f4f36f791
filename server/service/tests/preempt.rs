//! `PlacementService/Preempt` over real gRPC on 127.0.0.1 (docs/placement-semantics.md
//! section 9): the same answer whole, by reference and as node-set changes; invalid nodes and
//! their placed entries; the limits of `[limits]` as INVALID_ARGUMENT naming the field; the
//! charge of placed workloads on the wire (its metrics: `ops.rs`).
#![allow(clippy::unwrap_used)]

mod common;

use common::refs::*;
use common::*;
use gpusched_api::v1;
use tonic::Code;

/// A 1-card node of 40,960 MiB whose card holds `held` (id, priority, MiB), one slot each.
fn held_node(name: &str, held: &[(&str, i32, u64)]) -> (v1::Node, v1::NodePlaced) {
    let mem: u64 = held.iter().map(|h| h.2).sum();
    let slots = u32::try_from(held.len()).unwrap();
    let card_id = format!("{name}-gpu0");
    let node = node_with(name, vec![used(card(&card_id, 0, 40960), slots, mem, 0)]);
    let placed = v1::NodePlaced {
        node: name.into(),
        workloads: held
            .iter()
            .enumerate()
            .map(|(k, (id, priority, mib))| v1::PlacedWorkload {
                id: (*id).into(),
                priority: *priority,
                violates_budget: false,
                start_time_ms: i64::try_from(k).unwrap() * 1000,
                bookings: vec![v1::Booking {
                    mig_instance_start: None,
                    card_id: card_id.clone(),
                    slots: 1,
                    mem_mib: *mib,
                    cores: 0,
                }],
            })
            .collect(),
    };
    (node, placed)
}

fn gpu(mem: &str) -> v1::Workload {
    pod(
        &[],
        &[&[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", mem)]],
    )
}

fn request(nodes: Vec<v1::Node>, placed: Vec<v1::NodePlaced>, priority: i32) -> v1::PreemptRequest {
    v1::PreemptRequest {
        nodes,
        workload: Some(gpu("20000")),
        options: None,
        priority,
        placed,
        node_refs: Vec::new(),
        node_set: None,
    }
}

/// Three nodes: `a` needs `low` gone, `b` fits as it is only without two pods, `c` holds a pod
/// of equal priority.
fn cluster() -> (Vec<v1::Node>, Vec<v1::NodePlaced>) {
    let (a, pa) = held_node("a", &[("low", 1, 30000), ("mid", 5, 8000)]);
    let (b, pb) = held_node("b", &[("x", 2, 15000), ("y", 3, 15000)]);
    let (c, pc) = held_node("c", &[("peer", 10, 30000)]);
    (vec![a, b, c], vec![pa, pb, pc])
}

fn victims(r: &v1::PreemptResponse, node: &str) -> Vec<String> {
    let n = r.nodes.iter().find(|n| n.node_name == node).unwrap();
    match n.verdict.as_ref().unwrap() {
        v1::node_preemption::Verdict::Victims(v) => v.ids.clone(),
        other => panic!("{node}: {other:?}"),
    }
}

#[tokio::test]
async fn whole_by_reference_and_as_set_changes_give_one_answer() {
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    let (nodes, placed) = cluster();
    let whole = client
        .preempt(request(nodes.clone(), placed.clone(), 10))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(whole.choice, v1::PreemptChoiceKind::Evict as i32);
    // Fewest victims' priority: `a` evicts `low` (1), `b` evicts one of x (2) / y (3).
    assert_eq!(whole.node_name, "a");
    assert_eq!(victims(&whole, "a"), ["low"]);
    assert_eq!(victims(&whole, "b"), ["x"]);
    // By reference (inline parts), kept as a set.
    let mut by_ref = request(Vec::new(), placed.clone(), 10);
    by_ref.node_refs = nodes.iter().map(inline).collect();
    by_ref.node_set = Some(v1::NodeSetRef {
        base: None,
        removed_node_names: vec![],
        keep: true,
    });
    let first = client.preempt(by_ref.clone()).await.unwrap().into_inner();
    assert_eq!(first, whole);
    // The same nodes by digest only.
    by_ref.node_refs = nodes.iter().map(by_digest).collect();
    by_ref.node_set = None;
    assert_eq!(client.preempt(by_ref).await.unwrap().into_inner(), whole);
}

#[tokio::test]
async fn invalid_nodes_are_not_candidates_and_fields_keep_their_positions() {
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    let (mut nodes, mut placed) = cluster();
    // An invalid node (a repeated card id) with placed workloads of its own.
    let bad = node_with("bad", vec![card("dup", 0, 40960), card("dup", 1, 40960)]);
    nodes.push(bad);
    placed.insert(
        0,
        v1::NodePlaced {
            node: "bad".into(),
            workloads: vec![v1::PlacedWorkload {
                id: "w".into(),
                ..Default::default()
            }],
        },
    );
    let r = client
        .preempt(request(nodes.clone(), placed.clone(), 10))
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = r.nodes.iter().map(|n| n.node_name.as_str()).collect();
    assert_eq!(names, ["a", "b", "bad", "c"]);
    match r.nodes[2].verdict.as_ref().unwrap() {
        v1::node_preemption::Verdict::NotCandidate(nc) => {
            assert_eq!(nc.reason, v1::NotCandidateReason::InvalidNode as i32);
            let f = nc.failure.as_ref().unwrap();
            assert_eq!(f.reasons[0].reason, v1::Reason::InvalidNode as i32);
            assert!(f.message.contains("DUPLICATE_ID"), "{}", f.message);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.node_name, "a");
    // A bad entry after the invalid node's is named at its place in the request.
    placed[2].workloads[0].bookings[0].card_id = "nope".into();
    let e = client
        .preempt(request(nodes, placed, 10))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(
        reasons(&e),
        [(
            "placed[2].workloads[0].bookings[0].card_id".to_owned(),
            "UNKNOWN_REFERENCE".to_owned()
        )]
    );
}

#[tokio::test]
async fn placed_limits_are_invalid_argument_naming_the_field() {
    let server = TestServer::start(&[
        ("limits.max_placed_workloads_per_node", "2"),
        ("limits.max_placed_workloads", "6"),
        ("limits.max_placed_id_bytes", "8"),
    ])
    .await;
    let mut client = server.placement();
    let (nodes, mut placed) = cluster();
    placed[0].workloads.push(v1::PlacedWorkload {
        id: "third".into(),
        ..Default::default()
    });
    let e = client
        .preempt(request(nodes.clone(), placed, 10))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(
        reasons(&e),
        [(
            "placed[0].workloads".to_owned(),
            "LIMIT_EXCEEDED".to_owned()
        )]
    );
    let (_, mut placed) = cluster();
    placed[2].workloads[0].id = "a-very-long-id".into();
    let e = client
        .preempt(request(nodes.clone(), placed, 10))
        .await
        .unwrap_err();
    assert_eq!(
        reasons(&e),
        [(
            "placed[2].workloads[0].id".to_owned(),
            "LIMIT_EXCEEDED".to_owned()
        )]
    );
    let (_, mut placed) = cluster();
    for id in ["z1", "z2"] {
        placed[2].workloads.push(v1::PlacedWorkload {
            id: id.into(),
            ..Default::default()
        });
    }
    let e = client
        .preempt(request(nodes, placed, 10))
        .await
        .unwrap_err();
    assert_eq!(
        reasons(&e),
        [("placed".to_owned(), "LIMIT_EXCEEDED".to_owned())]
    );
}

#[tokio::test]
async fn no_candidate_and_not_needed() {
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    let (nodes, placed) = cluster();
    // Priority 1: nothing is lower anywhere but on no node.
    let r = client
        .preempt(request(nodes.clone(), placed.clone(), 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.choice, v1::PreemptChoiceKind::NoCandidate as i32);
    assert!(r.node_name.is_empty());
    assert!(r.nodes.iter().all(|n| matches!(
        n.verdict,
        Some(v1::node_preemption::Verdict::NotCandidate(_))
    )));
    // A small request fits `c` (10,960 MiB free) as it is.
    let mut req = request(nodes, placed, 10);
    req.workload = Some(gpu("5000"));
    let r = client.preempt(req).await.unwrap().into_inner();
    assert_eq!(r.choice, v1::PreemptChoiceKind::NotNeeded as i32);
}

#[tokio::test]
async fn a_flood_of_placed_workloads_is_refused_before_decoding() {
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    let (nodes, _) = cluster();
    // 12 MiB of empty placed workloads (2 bytes each on the wire: 6 million of them) would
    // decode to far more than the in-flight memory budget.
    let placed = vec![v1::NodePlaced {
        node: "a".into(),
        workloads: vec![v1::PlacedWorkload::default(); 6_000_000],
    }];
    let e = client
        .preempt(request(nodes, placed, 10))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("max_in_flight_bytes"),
        "{}",
        e.message()
    );
}
