//! MIG cards over real gRPC on 127.0.0.1 (docs/placement-semantics.md section 11): a layout by
//! reference decides as the node sent whole; a usage part may not contradict a MIG card's
//! instances; a layout's lists are charged on the wire before decoding.
#![allow(clippy::unwrap_used)]

mod common;

use common::refs::*;
use common::*;
use gpusched_api::v1;
use tonic::Code;

fn profile(
    name: &str,
    mem: u64,
    compute: u32,
    memory: u32,
    cores: u32,
    max: u32,
    at: &[u32],
) -> v1::MigProfile {
    v1::MigProfile {
        name: name.into(),
        mem_mib: mem,
        compute_slices: compute,
        memory_slices: memory,
        cores,
        max_instances: max,
        placements: at.to_vec(),
        not_allowed: false,
    }
}

/// An H100 80GB in MIG mode with a 3g.40gb in use at 4.
fn h100(name: &str) -> v1::Node {
    let mut c = card(&format!("{name}-gpu0"), 0, 81559);
    c.slots = 7;
    c.mode = v1::CardMode::Mig as i32;
    c.mig = Some(v1::MigLayout {
        compute_slices: 7,
        memory_slices: 8,
        profiles: vec![
            profile("1g.10gb", 9984, 1, 1, 13, 7, &[0, 1, 2, 3, 4, 5, 6]),
            profile("2g.20gb", 20096, 2, 2, 25, 3, &[0, 2, 4]),
            profile("3g.40gb", 40448, 3, 4, 46, 2, &[0, 4]),
            profile("7g.80gb", 81152, 7, 8, 100, 1, &[0]),
        ],
        instances: vec![v1::MigInstance {
            profile: "3g.40gb".into(),
            start: 4,
            size: 4,
            in_use_by: "team-a/train".into(),
        }],
    });
    node_with(name, vec![c])
}

fn mig_pod(mem: &str) -> v1::Workload {
    pod(
        &[("nvidia.com/vgpu-mode", "mig")],
        &[&[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", mem)]],
    )
}

#[tokio::test]
async fn a_layout_by_reference_decides_as_the_node_sent_whole() {
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    let nodes = vec![h100("m1"), h100("m2")];
    let whole = client
        .allocate(allocate_req(nodes.clone(), mig_pod("15000")))
        .await
        .unwrap()
        .into_inner();
    let r = whole.result.as_ref().unwrap();
    assert!(r.placed, "{r:?}");
    let mig = r.containers[0].cards[0].mig.as_ref().unwrap();
    assert_eq!(
        (mig.profile.as_str(), mig.start, mig.reused),
        ("2g.20gb", 0, false)
    );
    let mut req = allocate_req(Vec::new(), mig_pod("15000"));
    req.node_refs = nodes.iter().map(inline).collect();
    assert_eq!(
        client.allocate(req.clone()).await.unwrap().into_inner(),
        whole
    );
    req.node_refs = nodes.iter().map(by_digest).collect();
    assert_eq!(client.allocate(req).await.unwrap().into_inner(), whole);
}

#[tokio::test]
async fn a_usage_part_may_only_repeat_a_mig_cards_instances() {
    let server = TestServer::start(&[]).await;
    let mut client = server.placement();
    let n = h100("m1");
    let card_id = n.cards[0].id.clone();
    let with_usage = |u: v1::CardUsage| {
        let (inv, _) = split(&n);
        let usage = prost::Message::encode_to_vec(&v1::NodeUsage {
            cards: vec![v1::CardUsageEntry {
                card_id: card_id.clone(),
                usage: Some(u),
            }],
        });
        v1::NodeRef {
            inventory_digest: Some(digest(&inv)),
            usage_digest: Some(digest(&usage)),
            inventory: inv,
            usage,
        }
    };
    // What its instance in use books (section 11.5): 1 slot, 40,779 MiB, 42 cores.
    let same = v1::CardUsage {
        used_slots: 1,
        used_mem_mib: 40779,
        used_cores: 42,
    };
    for u in [v1::CardUsage::default(), same] {
        let mut req = allocate_req(Vec::new(), mig_pod("5000"));
        req.node_refs = vec![with_usage(u)];
        let r = client
            .allocate(req)
            .await
            .unwrap()
            .into_inner()
            .result
            .unwrap();
        assert!(r.placed, "{u:?}: {r:?}");
    }
    let mut req = allocate_req(Vec::new(), mig_pod("5000"));
    req.node_refs = vec![with_usage(v1::CardUsage {
        used_slots: 3,
        ..same
    })];
    let r = client
        .allocate(req)
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert!(!r.placed);
    let f = &r.failed_nodes[0];
    assert_eq!(f.reasons[0].reason, v1::Reason::InvalidNode as i32);
    assert!(
        f.message
            .starts_with("InvalidNode: usage.cards[0].usage OUT_OF_RANGE: card \"m1-gpu0\" of node \"m1\" is a MIG card"),
        "{}",
        f.message
    );
}

#[tokio::test]
async fn mig_lists_are_charged_before_decoding() {
    // 2 MiB of empty profiles on one card: a million profiles, each decoded and converted at
    // hundreds of bytes, far more than 16 MiB of calls in flight; without the card walk only
    // the wire bytes would be charged (8 MiB) and the call would be decoded.
    let server = TestServer::start(&[
        ("limits.max_message_bytes", "4194304"),
        ("limits.max_in_flight_bytes", "16777216"),
    ])
    .await;
    let mut client = server.placement();
    let mut n = h100("m1");
    if let Some(l) = n.cards[0].mig.as_mut() {
        l.profiles = vec![v1::MigProfile::default(); 1_000_000];
    }
    let e = client
        .allocate(allocate_req(vec![n], mig_pod("5000")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("max_in_flight_bytes"),
        "{}",
        e.message()
    );
    // A real layout passes (and the node is decided on).
    let r = client
        .allocate(allocate_req(vec![h100("m1")], mig_pod("5000")))
        .await
        .unwrap()
        .into_inner();
    assert!(r.result.unwrap().placed);
}
