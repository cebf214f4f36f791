//! The Kubernetes publisher against a real kube-apiserver. Ignored in a plain `cargo test`
//! (there is no cluster); `clients/agent/e2e-test.sh` starts one and runs it with
//! `--ignored` and `GPUSCHED_AGENT_E2E=1`. When run without a cluster it fails: it never passes
//! silently.

mod common;

use std::time::Duration;

use common::{FakeMachine, start_server};
use gpusched_agent::config::KubeSettings;
use gpusched_agent::discovery::GpuSource as _;
use gpusched_agent::discovery::nvml::NvmlSource;
use gpusched_agent::format::NodeInventory;
use gpusched_agent::inventory::{Normalizer as _, request};
use gpusched_agent::publish::{KubePublisher, Publisher as _};
use gpusched_api::v1;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

async fn client() -> kube::Client {
    let hint = "a kube-apiserver is required: run clients/agent/e2e-test.sh";
    assert!(
        std::env::var("KUBECONFIG").is_ok_and(|k| !k.is_empty()),
        "KUBECONFIG is not set ({hint}; GPUSCHED_AGENT_E2E={:?})",
        std::env::var("GPUSCHED_AGENT_E2E").ok()
    );
    kube::Client::try_default()
        .await
        .unwrap_or_else(|e| panic!("Kubernetes client: {e} ({hint})"))
}

fn annotation(node: &Node, key: &str) -> Option<String> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key).cloned())
}

fn capacity(node: &Node) -> Option<String> {
    node.status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("nvidia.com/gpu"))
        .map(|q| q.0.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a kube-apiserver: clients/agent/e2e-test.sh runs it"]
async fn publisher_on_a_real_apiserver() {
    let client = client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let name = format!("agent-rust-e2e-{}", std::process::id());
    let mut node = Node::default();
    node.metadata.name = Some(name.clone());
    nodes.create(&PostParams::default(), &node).await.unwrap();

    // The inventory of the fake machine, normalised by a real server.
    let m = FakeMachine::new("retired 2 64\npending_retire 5\n");
    let mut src = NvmlSource::open(m.options()).unwrap();
    let facts = src.read().unwrap();
    let server = start_server().await;
    let normalizer = common::normalizer(&server, Duration::from_secs(5));
    let normalized = normalizer.normalize(request(&name, &facts)).await.unwrap();
    let inv = NodeInventory {
        node_name: name.clone(),
        normalized,
        facts,
    };

    let publisher = KubePublisher::new(
        client.clone(),
        &name,
        KubeSettings {
            remove_on_shutdown: true,
            patch_capacity: true,
            resource_name: "nvidia.com/gpu".into(),
        },
    );
    publisher.publish(&inv).await.unwrap();
    let got = nodes.get(&name).await.unwrap();
    let register = annotation(&got, gpusched_hami::NODE_REGISTER).unwrap();
    assert_eq!(
        register,
        gpusched_hami::encode_register(&inv.normalized.cards)
    );
    let cards = gpusched_hami::decode_register(&register).unwrap();
    assert_eq!(cards, inv.normalized.cards);
    let unhealthy: Vec<u32> = cards
        .iter()
        .filter(|c| c.health != v1::CardHealth::Healthy as i32)
        .map(|c| c.index)
        .collect();
    assert_eq!(unhealthy, vec![2, 5], "retired pages, pending retirement");
    let scores = annotation(&got, gpusched_hami::NODE_SCORE).unwrap();
    assert_eq!(
        gpusched_hami::decode_pair_scores(&scores).unwrap().len(),
        56
    );
    let handshake = annotation(&got, gpusched_hami::NODE_HANDSHAKE).unwrap();
    assert!(
        handshake.starts_with("Reported_")
            && handshake.len() == "Reported_2026-01-01 00:00:00".len()
    );
    assert_eq!(capacity(&got).as_deref(), Some("60"));

    // HAMi's scheduler writes Requesting_...: the publisher asks for a fresh publication.
    let requests = publisher.requests().unwrap();
    nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata":{"annotations":{
                gpusched_hami::NODE_HANDSHAKE: "Requesting_2026-01-01 00:00:00"
            }}})),
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), requests.notified())
        .await
        .expect("the handshake request is noticed");

    publisher.withdraw().await.unwrap();
    let got = nodes.get(&name).await.unwrap();
    for key in [
        gpusched_hami::NODE_REGISTER,
        gpusched_hami::NODE_SCORE,
        gpusched_hami::NODE_HANDSHAKE,
    ] {
        assert_eq!(annotation(&got, key), None, "{key} after withdraw");
    }
    assert_eq!(capacity(&got), None);
    nodes.delete(&name, &DeleteParams::default()).await.unwrap();
}
