//! The adapter's preemption request against a live gpusched-server (in process, 127.0.0.1 port
//! 0): booked jobs of two partition tiers on one node, a job of the higher tier that fits
//! nowhere; the service names exactly the later-started low job on the card it needs, and a
//! job of the low tier finds nobody to evict. (Requeueing is Slurm's: `e2e-test.sh`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use gpusched_client::{ClientBuilder, node, v1};
use gpusched_slurm::cluster::{candidate_nodes, decisions};
use gpusched_slurm::decision::{BookedCard, Decision, preempted_comment};
use gpusched_slurm::inventory::NodeInventory;
use gpusched_slurm::preempt::{Tiers, placed, plan};
use gpusched_slurm::request::GpuRequest;
use gpusched_slurm::slurm::{Job, Partition, SlurmNode};

#[tokio::test]
async fn the_service_names_the_later_started_low_job_and_low_jobs_evict_nobody() {
    let server = gpusched_service::testing::start_server(&[("metrics.enabled", "false")]).await;
    let client = ClientBuilder::new(server.grpc_addr.to_string())
        .connect()
        .await
        .unwrap();
    // node1: 2 cards of 16384 MiB; each holds one low job of 12000 MiB, 60% cores; job 3 (high)
    // is booked beside job 1 with 2000 MiB.
    let n = node("node1", 2, 16384, "T4");
    let card = |i: usize| n.cards[i].id.clone();
    let invs: BTreeMap<String, NodeInventory> = [(
        "node1".to_owned(),
        NodeInventory {
            node: "node1".into(),
            cards: n.cards.clone(),
            pair_scores: vec![],
        },
    )]
    .into_iter()
    .collect();
    let slurm = vec![SlurmNode {
        name: "node1".into(),
        state: "mixed".into(),
        flags: vec![],
        partitions: vec!["low".into(), "high".into()],
    }];
    let booking = |i: usize, mem: u64, cores: u32| Decision {
        node: "node1".into(),
        cards: vec![BookedCard {
            index: i as u32,
            uuid: card(i),
            mem_mib: mem,
            cores,
        }],
    };
    let job = |id: u64, d: &Decision, partition: &str, start: i64| Job {
        id,
        state: "RUNNING".into(),
        comment: d.encode(),
        partition: partition.into(),
        start_time: start,
        ..Job::default()
    };
    let jobs = vec![
        job(1, &booking(0, 12000, 60), "low", 1_000),
        job(2, &booking(1, 12000, 60), "low", 2_000),
        job(3, &booking(0, 2000, 10), "high", 3_000),
    ];
    let booked = decisions(&jobs).unwrap();
    let nodes = candidate_nodes(&invs, &slurm, &[], booked.values());
    let tiers = Tiers::new(&[
        Partition {
            name: "low".into(),
            priority_tier: 1,
            default: true,
        },
        Partition {
            name: "high".into(),
            priority_tier: 10,
            default: false,
        },
    ]);
    let mut req = GpuRequest::default();
    req.add_gres("gpu:1").unwrap();
    req.add_option("gpumem=8000").unwrap();
    req.add_option("gpucores=30").unwrap();
    let ask = |partition: &str| v1::PreemptRequest {
        nodes: nodes.clone(),
        workload: Some(req.workload("j")),
        priority: tiers.priority(partition),
        placed: placed(&nodes, &jobs, &booked, &tiers, 9_000_000),
        ..v1::PreemptRequest::default()
    };
    let high = client.preempt_request(ask("high")).await.unwrap();
    let p = plan(&high).unwrap();
    // Card 0 also holds the high job 3 (2000 MiB): only card 1 has room once its low job goes;
    // job 1 on card 0 is put back first (it started earlier) and stays.
    assert_eq!(p.victims, vec![2]);
    assert_eq!(p.decision.node, "node1");
    assert_eq!(p.decision.cards[0].index, 1);
    assert_eq!(p.decision.cards[0].mem_mib, 8000);
    assert_eq!(p.describe(&booked), "job(s) 2 on node1 (GPU 1)");
    // Once job 2 is requeued its comment holds nothing: the decision fits.
    let mut after = jobs.clone();
    after[1].comment = preempted_comment(9, &booked[&2]);
    let left = decisions(&after).unwrap();
    assert!(!left.contains_key(&2));
    let nodes = candidate_nodes(&invs, &slurm, &[], left.values());
    let r = client
        .allocate_request(v1::AllocateRequest {
            nodes,
            workload: Some(req.pinned_to(&p.decision.uuids()).workload("j")),
            ..v1::AllocateRequest::default()
        })
        .await
        .unwrap();
    assert!(r.placed);
    // A low job evicts nobody (no lower tier).
    let low = client.preempt_request(ask("low")).await.unwrap();
    let e = plan(&low).unwrap_err();
    assert!(
        e.contains("no job of a lower partition PriorityTier"),
        "{e}"
    );
    server.shutdown().await.unwrap();
}
