//! The adapter's request, decision and usage loop against a live gpusched-server (in process,
//! 127.0.0.1 port 0): HAMi's stories 3 and 4 through recorded decisions, and service
//! refusals named by option.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use gpusched_client::{ClientBuilder, node, v1};
use gpusched_slurm::cluster::{candidate_nodes, decisions};
use gpusched_slurm::decision::Decision;
use gpusched_slurm::inventory::NodeInventory;
use gpusched_slurm::request::GpuRequest;
use gpusched_slurm::slurm::{Job, SlurmNode};
use gpusched_slurm::submit::{SubmitError, service_error};

async fn live() -> gpusched_service::Running {
    gpusched_service::testing::start_server(&[("metrics.enabled", "false")]).await
}

fn one_node() -> (BTreeMap<String, NodeInventory>, Vec<SlurmNode>) {
    let n = node("node1", 4, 8000, "NVIDIA-A100");
    let invs = [(
        "node1".to_owned(),
        NodeInventory {
            node: "node1".into(),
            cards: n.cards,
            pair_scores: vec![],
        },
    )]
    .into_iter()
    .collect();
    let slurm = vec![SlurmNode {
        name: "node1".into(),
        state: "idle".into(),
        flags: vec![],
        partitions: vec!["gpu".into()],
    }];
    (invs, slurm)
}

/// Places two 20 %/20 % jobs one after another, each seeing the first's recorded decision.
async fn two_jobs(policy: &str) -> Vec<Vec<u32>> {
    let server = live().await;
    let client = ClientBuilder::new(server.grpc_addr.to_string())
        .connect()
        .await
        .unwrap();
    let (invs, slurm) = one_node();
    let mut req = GpuRequest::default();
    req.add_gres("gpu:1").unwrap();
    req.add_option("gpucores=20").unwrap();
    req.add_option("gpumem-percentage=20").unwrap();
    req.add_option(&format!("gpu-scheduler-policy={policy}"))
        .unwrap();
    let mut jobs: Vec<Job> = vec![];
    let mut chosen = vec![];
    for id in 1..=2u64 {
        let booked = decisions(&jobs).unwrap();
        let nodes = candidate_nodes(&invs, &slurm, &[], booked.values());
        let r = client
            .allocate_request(v1::AllocateRequest {
                node_set: None,
                nodes,
                workload: Some(req.workload("j")),
                options: None,
                restrict_to_node_names: vec![],
                node_refs: vec![],
            })
            .await
            .unwrap();
        let d = Decision::from_result(&r).unwrap();
        assert_eq!(d.cards[0].mem_mib, 1600);
        assert_eq!(d.gres(), "gpuslot:1,gpumem:1600,gpucore:20");
        chosen.push(d.cards.iter().map(|c| c.index).collect());
        jobs.push(Job {
            id,
            state: "RUNNING".into(),
            comment: d.encode(),
            ..Job::default()
        });
    }
    chosen
}

#[tokio::test]
async fn story_3_gpu_binpack_through_recorded_decisions() {
    assert_eq!(two_jobs("binpack").await, vec![vec![0], vec![0]]);
}

#[tokio::test]
async fn story_4_gpu_spread_through_recorded_decisions() {
    assert_eq!(two_jobs("spread").await, vec![vec![0], vec![1]]);
}

async fn refusal(key_value: &str) -> String {
    let server = live().await;
    let client = ClientBuilder::new(server.grpc_addr.to_string())
        .connect()
        .await
        .unwrap();
    let (invs, _) = one_node();
    let mut req = GpuRequest::default();
    req.add_gres("gpu:1").unwrap();
    req.add_option(key_value).unwrap();
    let e = client
        .allocate_request(v1::AllocateRequest {
            node_set: None,
            nodes: vec![invs["node1"].to_node()],
            workload: Some(req.workload("j")),
            options: None,
            restrict_to_node_names: vec![],
            node_refs: vec![],
        })
        .await
        .unwrap_err();
    let e = service_error("http://x", e, &req);
    assert!(matches!(e, SubmitError::Invalid { .. }), "{e}");
    e.to_string()
}

#[tokio::test]
async fn service_refusals_name_the_option_and_value() {
    let e = refusal("device-scoring-weights=slot=1,core=1").await;
    assert!(
        e.starts_with("invalid hami.io/device-scoring-weights=slot=1,core=1: "),
        "{e}"
    );
    let e = refusal("gpucores=150").await;
    assert!(e.starts_with("invalid nvidia.com/gpucores=150: "), "{e}");
    let e = refusal("gpu-scheduler-policy=fastest").await;
    assert!(
        e.starts_with("invalid hami.io/gpu-scheduler-policy=fastest: "),
        "{e}"
    );
}

#[tokio::test]
async fn a_down_service_is_a_bounded_service_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("http://127.0.0.1:{port}");
    let client = ClientBuilder::new(addr.clone())
        .timeout(Some(std::time::Duration::from_secs(1)))
        .connect_timeout(std::time::Duration::from_secs(1))
        .connect_lazy()
        .unwrap();
    let req = GpuRequest::default();
    let t = std::time::Instant::now();
    let e = client
        .allocate_request(v1::AllocateRequest::default())
        .await
        .unwrap_err();
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
    let e = service_error(&addr, e, &req).to_string();
    assert!(
        e.contains(&addr) && e.contains("nothing was submitted"),
        "{e}"
    );
}
