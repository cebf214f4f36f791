//! GPU quotas per namespace through the shim against a real gpusched-server (in process, on
//! 127.0.0.1:0), the view fed from reflector stores: the budget each pod is sent (hard limit
//! minus what its namespace holds, reservations included), the budget named in the failure
//! text kube-scheduler shows, the percentage placed on the card where it fits the budget,
//! other namespaces untouched, and admission refusing only what can never fit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use gpusched_client::ClientBuilder;
use gpusched_kube::admission::{self, WebhookOptions};
use gpusched_kube::config::Names;
use gpusched_kube::extender_v1::ExtenderArgs;
use gpusched_kube::leader::Leadership;
use gpusched_kube::metrics::{Metrics, registry};
use gpusched_kube::shim::Shim;
use gpusched_kube::view::ClusterView;
use k8s_openapi::api::core::v1::{Node, Pod, ResourceQuota};
use kube::core::admission::AdmissionReview;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::json;

const SCHEDULER: &str = "gpusched-scheduler";

/// A node with one card of `mem` MiB.
fn one_card_node(name: &str, mem: u64) -> Node {
    let cards = gpusched_client::node(name, 1, mem, "NVIDIA-A100").cards;
    serde_json::from_value(json!({"metadata": {"name": name, "annotations": {
        "hami.io/node-nvidia-register": gpusched_hami::encode_register(&cards)
    }}}))
    .unwrap()
}

/// A pod of `ns` with one container of these limits; bound to `node` with `devices` when given
/// (as the shim's Binding leaves it).
fn pod(ns: &str, name: &str, limits: serde_json::Value, bound: Option<(&str, &str)>) -> Pod {
    let mut p = json!({
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}"),
                     "resourceVersion": "1", "annotations": {}},
        "spec": {"schedulerName": SCHEDULER,
                 "containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"}
    });
    if let Some((node, devices)) = bound {
        p["metadata"]["annotations"] =
            json!({"hami.io/vgpu-devices-allocated": devices, "hami.io/vgpu-node": node});
        p["spec"]["nodeName"] = json!(node);
    }
    serde_json::from_value(p).unwrap()
}

fn quota(ns: &str, name: &str, hard: serde_json::Value) -> ResourceQuota {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "uid": format!("q-{ns}-{name}")},
        "spec": {"hard": hard}
    }))
    .unwrap()
}

struct Cluster {
    _server: gpusched_service::Running,
    shim: Arc<Shim>,
}

async fn cluster(nodes: Vec<Node>, pods: Vec<Pod>, quotas: Vec<ResourceQuota>) -> Cluster {
    let server = gpusched_service::testing::start_server(&[("metrics.enabled", "false")]).await;
    let service = ClientBuilder::new(server.grpc_addr.to_string())
        .timeout(Some(Duration::from_secs(5)))
        .connect()
        .await
        .unwrap();
    let (nr, mut nw) = reflector::store::<Node>();
    let (pr, mut pw) = reflector::store::<Pod>();
    let (qr, mut qw) = reflector::store::<ResourceQuota>();
    nodes
        .into_iter()
        .for_each(|n| nw.apply_watcher_event(&Event::Apply(n)));
    pods.into_iter()
        .for_each(|p| pw.apply_watcher_event(&Event::Apply(p)));
    quotas
        .into_iter()
        .for_each(|q| qw.apply_watcher_event(&Event::Apply(q)));
    let names = Names {
        scheduler_name: SCHEDULER.into(),
        ..Names::default()
    };
    let view = ClusterView::new(nr, pr, names, Duration::from_secs(60)).with_quotas(qr);
    view.mark_synced();
    let shim = Arc::new(Shim {
        view: Arc::new(view),
        service,
        kube: None,
        leader: Arc::new(Leadership::always("t")),
        recorder: None,
        reserve: true,
        metrics: Metrics::default(),
        traces: gpusched_kube::traces::PodTraces::off(),
        preemptor: None,
    });
    Cluster {
        _server: server,
        shim,
    }
}

fn args(p: Pod, nodes: &[&str]) -> ExtenderArgs {
    ExtenderArgs {
        pod: Some(p),
        nodes: None,
        node_names: Some(nodes.iter().map(|s| (*s).to_owned()).collect()),
    }
}

/// The refusals counted for a namespace and stage.
fn refusals(shim: &Shim, ns: &str, stage: &str) -> f64 {
    let text = gpusched_kube::metrics::encode(&registry(
        &shim.metrics,
        shim.view.clone(),
        Arc::new(Leadership::always("t")),
    ))
    .unwrap();
    let series =
        format!(r#"gpusched_kube_quota_refusals_total{{namespace="{ns}",stage="{stage}"}} "#);
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// `team-a` may hold 10240 MiB.
fn team_a_quota() -> Vec<ResourceQuota> {
    vec![quota(
        "team-a",
        "gpu",
        json!({"limits.nvidia.com/gpumem": "10240"}),
    )]
}

/// The filter answer for a pod of `ns` asking `limits`, on these candidates.
async fn filter(
    c: &Cluster,
    ns: &str,
    limits: &serde_json::Value,
    nodes: &[&str],
) -> gpusched_kube::extender_v1::ExtenderFilterResult {
    c.shim
        .filter(&args(pod(ns, "p", limits.clone(), None), nodes))
        .await
}

#[tokio::test]
async fn each_pod_gets_what_its_namespace_has_left() {
    let nodes = || vec![one_card_node("big", 81920), one_card_node("small", 16384)];
    let half = json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"});
    let c = cluster(nodes(), vec![], team_a_quota()).await;
    // 50% books 40,960 MiB on the 80 GiB card, past the budget; 8,192 on the 16 GiB one.
    let r = filter(&c, "team-a", &half, &["big", "small"]).await;
    assert_eq!(r.error, "");
    assert_eq!(r.node_names, Some(vec!["small".to_owned()]));
    assert_eq!(
        r.failed_and_unresolvable_nodes["big"],
        "1/1 ResourceQuotaNotFit; quota of namespace team-a: limits.nvidia.com/gpumem 10240 \
         (ResourceQuota gpu), 0 used, 10240 left"
    );
    // Another namespace has no quota: both cards.
    let r = filter(&c, "team-b", &half, &["big", "small"]).await;
    assert_eq!(r.node_names.map(|n| n.len()), Some(2));
    assert_eq!(refusals(&c.shim, "team-a", "filter"), 0.0);

    // The namespace already holds 8,192 MiB (a bound pod): 2,048 left, no card fits; the
    // holder in team-b does not count against team-a.
    let c = cluster(
        nodes(),
        vec![
            pod(
                "team-a",
                "h",
                json!({"nvidia.com/gpu": "1"}),
                Some(("small", "small-gpu0,NVIDIA,8192,0:;")),
            ),
            pod(
                "team-b",
                "h",
                json!({"nvidia.com/gpu": "1"}),
                Some(("big", "big-gpu0,NVIDIA,40960,0:;")),
            ),
        ],
        team_a_quota(),
    )
    .await;
    let r = filter(&c, "team-a", &half, &["big", "small"]).await;
    assert_eq!(r.node_names, Some(vec![]));
    let note = "quota of namespace team-a: limits.nvidia.com/gpumem 10240 (ResourceQuota gpu), \
                8192 used, 2048 left";
    for node in ["big", "small"] {
        assert_eq!(
            r.failed_and_unresolvable_nodes[node],
            format!("1/1 ResourceQuotaNotFit; {note}"),
            "{node}"
        );
    }
    assert_eq!(refusals(&c.shim, "team-a", "filter"), 1.0);
    // The pod being placed never counts against itself: the holder's own retry fits.
    let r = c
        .shim
        .filter(&args(
            pod(
                "team-a",
                "h",
                json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"}),
                None,
            ),
            &["small"],
        ))
        .await;
    assert_eq!(r.node_names, Some(vec!["small".to_owned()]));
}

#[tokio::test]
async fn a_reservation_takes_its_share_of_the_budget_at_once() {
    let c = cluster(
        vec![one_card_node("n1", 40960), one_card_node("n2", 40960)],
        vec![],
        vec![quota(
            "team-a",
            "gpu",
            json!({"limits.nvidia.com/gpumem": "20000", "limits.nvidia.com/gpucores": "50"}),
        )],
    )
    .await;
    let six =
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "6000", "nvidia.com/gpucores": "30"});
    // kube-scheduler tells the first pod's node at prioritize, which reserves its cards.
    let first = c
        .shim
        .prioritize(&args(pod("team-a", "p1", six.clone(), None), &["n1", "n2"]))
        .await
        .unwrap();
    assert_eq!(first.iter().map(|h| h.score).max(), Some(10));
    assert_eq!(c.shim.view.namespace_use("team-a", "").cores, 30);
    // The next pod's filter sees 20 cores left, before any bind.
    let r = c
        .shim
        .filter(&args(pod("team-a", "p2", six, None), &["n1", "n2"]))
        .await;
    assert_eq!(r.node_names, Some(vec![]));
    assert!(
        r.failed_and_unresolvable_nodes["n2"].ends_with(
            "limits.nvidia.com/gpumem 20000 (ResourceQuota gpu), 6000 used, 14000 left; \
             limits.nvidia.com/gpucores 50 (ResourceQuota gpu), 30 used, 20 left"
        ),
        "{:?}",
        r.failed_and_unresolvable_nodes
    );
}

fn review(p: &Pod) -> kube::core::admission::AdmissionRequest<Pod> {
    let body = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "r1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "p", "namespace": p.metadata.namespace, "operation": "CREATE",
            "userInfo": {"username": "u"}, "object": p, "dryRun": false}
    });
    let r: AdmissionReview<Pod> = serde_json::from_value(body).unwrap();
    r.try_into().unwrap()
}

/// Contract 10.6 at the webhook: (namespace, limits, denied with).
#[tokio::test]
async fn admission_refuses_what_can_never_fit_and_names_the_quota() {
    let c = cluster(
        vec![],
        vec![],
        vec![
            quota(
                "team-a",
                "gpu",
                json!({"limits.nvidia.com/gpumem": "20000"}),
            ),
            quota(
                "team-a",
                "cores",
                json!({"limits.nvidia.com/gpucores": "400"}),
            ),
            quota("frozen", "gpu", json!({"limits.nvidia.com/gpumem": "0"})),
            quota("typo", "gpu", json!({"limits.nvidia.com/gpumem": "16Gi"})),
        ],
    )
    .await;
    let opts = WebhookOptions {
        mutate: true,
        ignore_label: "hami.io/webhook".into(),
    };
    let cards = |n: &str, mem: &str| json!({"nvidia.com/gpu": n, "nvidia.com/gpumem": mem});
    let cases: Vec<(&str, serde_json::Value, Option<&str>)> = vec![
        (
            "team-a",
            cards("4", "6000"),
            Some(
                "exceeding resource quota: the pod can never fit: ResourceQuota team-a/gpu sets \
                 limits.nvidia.com/gpumem to 20000 MiB and the pod needs at least 24000 MiB on \
                 any node",
            ),
        ),
        ("team-a", cards("3", "6000"), None),
        (
            "team-a",
            json!({"nvidia.com/gpu": "5", "nvidia.com/gpucores": "100"}),
            Some(
                "exceeding resource quota: the pod can never fit: ResourceQuota team-a/cores \
                 sets limits.nvidia.com/gpucores to 400 and the pod needs at least 500 on any node",
            ),
        ),
        (
            "team-a",
            json!({"nvidia.com/gpu": "4", "nvidia.com/gpumem-percentage": "50"}),
            None,
        ),
        (
            "frozen",
            json!({"nvidia.com/gpu": "1"}),
            Some(
                "exceeding resource quota: the pod can never fit: ResourceQuota frozen/gpu sets \
                 limits.nvidia.com/gpumem to 0, which blocks every GPU pod of the namespace",
            ),
        ),
        (
            "typo",
            cards("1", "100"),
            Some(
                "exceeding resource quota: the pod can never fit: ResourceQuota typo/gpu \
                 limits.nvidia.com/gpumem: \"16Gi\" has the binary suffix \"Gi\", a multiple of \
                 bytes; the key counts MiB (write a plain number, e.g. 16384 for 16Gi of \
                 memory); an unreadable limit counts as 0 and blocks every GPU pod of the \
                 namespace until it is fixed",
            ),
        ),
        ("no-quota", cards("8", "80000"), None),
    ];
    for (ns, limits, want) in cases {
        let r =
            admission::validate(&c.shim, &opts, &review(&pod(ns, "p", limits.clone(), None))).await;
        match want {
            None => assert!(r.allowed, "{ns} {limits}: {}", r.result.message),
            Some(m) => {
                assert!(!r.allowed, "{ns} {limits} admitted");
                assert_eq!(r.result.message, m, "{ns} {limits}");
            }
        }
    }
    assert_eq!(refusals(&c.shim, "team-a", "admission"), 2.0);
    assert_eq!(refusals(&c.shim, "frozen", "admission"), 1.0);
    // A pod without GPU resources is nobody's business here.
    let cpu = pod("frozen", "cpu", json!({"cpu": "1"}), None);
    assert!(
        admission::validate(&c.shim, &opts, &review(&cpu))
            .await
            .allowed
    );
}
