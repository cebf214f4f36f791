//! What the in-process shim tests share: names, fake GPU nodes, and a cluster view fed from
//! reflector stores beside a real gpusched-server (in process, on 127.0.0.1:0).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use gpusched_kube::config::{Names, PolicySettings};
use gpusched_kube::view::ClusterView;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::json;

/// The names the tests use (our scheduler profile).
pub fn names() -> Names {
    Names {
        scheduler_name: "gpusched-scheduler".into(),
        ..Names::default()
    }
}

/// A node with `cards` cards of 16384 MiB, registered the way the agent writes it.
pub fn gpu_node(name: &str, cards: u32) -> Node {
    let cards = gpusched_client::node(name, cards, 16384, "NVIDIA-A100").cards;
    serde_json::from_value(json!({"metadata": {"name": name, "annotations": {
        "hami.io/node-nvidia-register": gpusched_hami::encode_register(&cards)
    }}}))
    .unwrap()
}

/// A running service, a client of it, and a synced view over these nodes and pods (the pod
/// store's writer, to change pods later).
pub struct Live {
    pub server: gpusched_service::Running,
    pub service: gpusched_client::Client,
    pub view: Arc<ClusterView>,
    pub pods: reflector::store::Writer<Pod>,
}

/// Starts the server (metrics off, plus `overrides`) and builds the view.
pub async fn live(overrides: &[(&str, &str)], nodes: Vec<Node>, pods: Vec<Pod>) -> Live {
    live_with(overrides, nodes, pods, PolicySettings::default()).await
}

/// [`live`] with the shim's default policies and fgd mix.
pub async fn live_with(
    overrides: &[(&str, &str)],
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    policy: PolicySettings,
) -> Live {
    let mut all = vec![("metrics.enabled", "false")];
    all.extend_from_slice(overrides);
    let server = gpusched_service::testing::start_server(&all).await;
    let service = gpusched_client::ClientBuilder::new(server.grpc_addr.to_string())
        .timeout(Some(Duration::from_secs(5)))
        .connect()
        .await
        .unwrap();
    let (nr, mut nw) = reflector::store::<Node>();
    let (pr, mut pw) = reflector::store::<Pod>();
    for n in nodes {
        nw.apply_watcher_event(&Event::Apply(n));
    }
    for p in pods {
        pw.apply_watcher_event(&Event::Apply(p));
    }
    let view =
        Arc::new(ClusterView::new(nr, pr, names(), Duration::from_secs(60)).with_policy(policy));
    view.mark_synced();
    Live {
        server,
        service,
        view,
        pods: pw,
    }
}
