//! Bad node inventories never stop scheduling: the shim checks each node's decoded inventory
//! (`gpusched_kube::inventory_check`), never sends a node it knows is invalid and answers it
//! unresolvable with the reason; what only the server can judge (its card limit per node) comes
//! back from the service as REASON_INVALID_NODE, also unresolvable. GPU pods are placed on the
//! good nodes. Against a real in-process gpusched-server; the view fed from reflector stores.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gpusched_client::{ClientBuilder, v1};
use gpusched_kube::config::Names;
use gpusched_kube::extender_v1::ExtenderArgs;
use gpusched_kube::leader::Leadership;
use gpusched_kube::metrics::Metrics;
use gpusched_kube::shim::Shim;
use gpusched_kube::translate;
use gpusched_kube::view::ClusterView;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::json;

const REGISTER: &str = "hami.io/node-nvidia-register";
const SCORE: &str = "hami.io/node-nvidia-score";
const CORDON: &str = "hami.io/device-cordon";

fn names() -> Names {
    Names {
        scheduler_name: "gpusched-scheduler".into(),
        ..Names::default()
    }
}

fn cards(node: &str, n: u32) -> Vec<v1::Card> {
    gpusched_client::node(node, n, 16384, "NVIDIA-A100").cards
}

fn k8s_node(name: &str, annotations: BTreeMap<&str, String>) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations}})).unwrap()
}

fn register(cards: &[v1::Card]) -> String {
    gpusched_hami::encode_register(cards)
}

/// One bad node: its name, its annotations, and what the filter answer must say about it.
struct Bad {
    name: &'static str,
    annotations: BTreeMap<&'static str, String>,
    /// A piece of the unresolvable reason.
    says: &'static str,
    /// Whether the shim itself knows the node is bad (else the service says so).
    shim_knows: bool,
}

fn bad_nodes() -> Vec<Bad> {
    let with = |name: &'static str, edit: &dyn Fn(&mut Vec<v1::Card>)| {
        let mut c = cards(name, 2);
        edit(&mut c);
        BTreeMap::from([(REGISTER, register(&c))])
    };
    let mut out = vec![
        Bad {
            name: "bad-dup",
            annotations: with("bad-dup", &|c| c[1].id = c[0].id.clone()),
            says: "hami.io/node-nvidia-register[1].id DUPLICATE_ID",
            shim_knows: true,
        },
        Bad {
            name: "bad-blank",
            annotations: with("bad-blank", &|c| c[0].id = "  ".into()),
            says: "hami.io/node-nvidia-register[0].id MISSING_FIELD",
            shim_knows: true,
        },
        Bad {
            name: "bad-mem",
            annotations: with("bad-mem", &|c| c[0].total_mem_mib = i32::MAX as u64),
            says: "hami.io/node-nvidia-register[0].devmem OUT_OF_RANGE",
            shim_knows: true,
        },
        Bad {
            name: "bad-cores",
            annotations: with("bad-cores", &|c| c[1].total_cores = i32::MAX as u32),
            says: "hami.io/node-nvidia-register[1].devcore OUT_OF_RANGE",
            shim_knows: true,
        },
        Bad {
            name: "bad-slots",
            annotations: with("bad-slots", &|c| c[0].slots = i32::MAX as u32),
            says: "hami.io/node-nvidia-register[0].count OUT_OF_RANGE",
            shim_knows: true,
        },
        Bad {
            name: "bad-many",
            // Over the server's limits.max_cards_per_node (64): only the server knows it.
            annotations: BTreeMap::from([(REGISTER, register(&cards("bad-many", 65)))]),
            says: "InvalidNode: cards LIMIT_EXCEEDED",
            shim_knows: false,
        },
        Bad {
            name: "bad-negative",
            annotations: BTreeMap::from([(
                REGISTER,
                r#"[{"id":"GPU-n","count":10,"devmem":-1,"devcore":100,"health":true}]"#.into(),
            )]),
            says: "is negative",
            shim_knows: true,
        },
        Bad {
            name: "bad-overflow",
            annotations: BTreeMap::from([(
                REGISTER,
                r#"[{"id":"GPU-o","count":10,"devmem":4294967296,"devcore":100,"health":true}]"#
                    .into(),
            )]),
            says: "unreadable GPU inventory",
            shim_knows: true,
        },
    ];
    let mut pair = with("bad-pair", &|_| {});
    pair.insert(
        SCORE,
        json!([{"uuid": "bad-pair-gpu0", "score": {"GPU-nowhere": 50}}]).to_string(),
    );
    out.push(Bad {
        name: "bad-pair",
        annotations: pair,
        says: "hami.io/node-nvidia-score UNKNOWN_REFERENCE",
        shim_knows: true,
    });
    let mut cordon = with("bad-cordon", &|_| {});
    cordon.insert(CORDON, "bad-cordon-gpu0, GPU-ghost".into());
    out.push(Bad {
        name: "bad-cordon",
        annotations: cordon,
        says: "hami.io/device-cordon UNKNOWN_REFERENCE",
        shim_knows: true,
    });
    out
}

fn good_nodes() -> Vec<Node> {
    ["good-1", "good-2"]
        .into_iter()
        .map(|n| k8s_node(n, BTreeMap::from([(REGISTER, register(&cards(n, 2)))])))
        .collect()
}

fn gpu_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "spec": {"schedulerName": "gpusched-scheduler",
                 "containers": [{"name": "main", "resources": {"limits":
                     {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096"}}}]}
    }))
    .unwrap()
}

async fn shim(nodes: Vec<Node>) -> (gpusched_service::Running, Shim) {
    let server = gpusched_service::testing::start_server(&[("metrics.enabled", "false")]).await;
    let service = ClientBuilder::new(server.grpc_addr.to_string())
        .timeout(Some(Duration::from_secs(5)))
        .connect()
        .await
        .unwrap();
    let (nr, mut nw) = reflector::store::<Node>();
    let (pr, _pw) = reflector::store::<Pod>();
    for n in nodes {
        nw.apply_watcher_event(&Event::Apply(n));
    }
    let view = Arc::new(ClusterView::new(nr, pr, names(), Duration::from_secs(60)));
    view.mark_synced();
    let shim = Shim {
        view,
        service,
        kube: None,
        leader: Arc::new(Leadership::always("t")),
        recorder: None,
        reserve: false,
        metrics: Metrics::default(),
        traces: gpusched_kube::traces::PodTraces::off(),
        preemptor: None,
    };
    (server, shim)
}

#[tokio::test]
async fn bad_inventories_fail_alone_and_pods_go_to_the_good_nodes() {
    let bad = bad_nodes();
    let mut nodes: Vec<Node> = bad
        .iter()
        .map(|b| k8s_node(b.name, b.annotations.clone()))
        .collect();
    nodes.extend(good_nodes());
    let (_server, shim) = shim(nodes).await;
    let mut candidates: Vec<String> = bad.iter().map(|b| b.name.to_owned()).collect();
    candidates.insert(3, "good-2".into());
    candidates.push("good-1".into());
    let args = ExtenderArgs {
        pod: Some(gpu_pod("p")),
        nodes: None,
        node_names: Some(candidates.clone()),
    };
    let r = shim.filter(&args).await;
    assert_eq!(r.error, "", "{r:?}");
    assert_eq!(
        r.node_names,
        Some(vec!["good-2".to_owned(), "good-1".to_owned()])
    );
    assert!(r.failed_nodes.is_empty(), "{r:?}");
    for b in &bad {
        let why = r
            .failed_and_unresolvable_nodes
            .get(b.name)
            .unwrap_or_else(|| panic!("{} not unresolvable: {r:?}", b.name));
        assert!(
            why.contains(b.says),
            "{}: {why:?} should say {:?}",
            b.name,
            b.says
        );
        // The shim's own verdict names the annotation; the server's names the node's fields.
        assert_eq!(
            why.contains("hami.io/") || why.contains("unreadable") || why.contains("negative"),
            b.shim_knows,
            "{}: {why}",
            b.name
        );
    }
    let scores = shim.prioritize(&args).await.unwrap();
    for s in &scores {
        let good = s.host.starts_with("good-");
        assert_eq!(s.score > 0, good, "{s:?}");
    }
}

/// The shim refuses only what the server refuses: every node the shim knows to be invalid, sent
/// to the server anyway, is answered REASON_INVALID_NODE; nodes at the bounds pass both.
#[tokio::test]
async fn the_shim_refuses_only_what_the_service_refuses() {
    let (_server, shim) = shim(vec![]).await;
    let n = names();
    for b in bad_nodes().into_iter().filter(|b| b.shim_knows) {
        let node = k8s_node(b.name, b.annotations.clone());
        let inv = translate::inventory(&node, &n);
        assert!(inv.problem.is_some(), "{}", b.name);
        if inv.cards.is_empty() {
            continue; // unreadable: nothing could be sent
        }
        let sent = translate::node_with_usage(b.name, &inv, std::iter::empty(), &n);
        let r = shim
            .service
            .filter_request(v1::FilterRequest {
                nodes: vec![sent],
                workload: Some(translate::workload(&gpu_pod("p"), &n)),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(r.failed_nodes.len(), 1, "{}: {r:?}", b.name);
        assert_eq!(
            r.failed_nodes[0].reasons[0].reason,
            v1::Reason::InvalidNode as i32,
            "{}: {r:?}",
            b.name
        );
    }
    // At the bounds: valid for both.
    let mut c = cards("edge", 1);
    c[0].slots = gpusched_kube::inventory_check::MAX_CARD_SLOTS;
    c[0].total_mem_mib = gpusched_kube::inventory_check::MAX_CARD_MEM_MIB;
    c[0].total_cores = gpusched_kube::inventory_check::MAX_CARD_CORES;
    let node = k8s_node("edge", BTreeMap::from([(REGISTER, register(&c))]));
    let inv = translate::inventory(&node, &n);
    assert_eq!(inv.problem, None);
    let r = shim
        .service
        .filter_request(v1::FilterRequest {
            nodes: vec![translate::node_with_usage(
                "edge",
                &inv,
                std::iter::empty(),
                &n,
            )],
            workload: Some(translate::workload(&gpu_pod("p"), &n)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.feasible_node_names, ["edge"], "{r:?}");
}
