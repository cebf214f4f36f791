//! The extender and webhook logic against a real gpusched-server (in process, on 127.0.0.1:0),
//! with the cluster view fed from reflector stores (no Kubernetes API needed).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::gpu_node;
use gpusched_client::v1;
use gpusched_kube::admission::{self, WebhookOptions};
use gpusched_kube::extender_v1::ExtenderArgs;
use gpusched_kube::leader::Leadership;
use gpusched_kube::metrics::Metrics;
use gpusched_kube::shim::Shim;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::core::admission::AdmissionReview;
use serde_json::json;

fn pod(name: &str, ann: serde_json::Value, limits: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "annotations": ann},
        "spec": {"schedulerName": "gpusched-scheduler",
                 "containers": [{"name": "main", "resources": {"limits": limits}}]}
    }))
    .unwrap()
}

/// A pod holding `devices` on `node`, as the shim's Binding leaves it (spec.nodeName and
/// hami.io/vgpu-node written together).
fn holder(name: &str, node: &str, devices: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "1",
                     "annotations": {"hami.io/vgpu-devices-allocated": devices, "hami.io/vgpu-node": node}},
        "spec": {"schedulerName": "gpusched-scheduler", "nodeName": node,
                 "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"}
    }))
    .unwrap()
}

struct Fixture {
    _server: gpusched_service::Running,
    shim: Arc<Shim>,
    leader: Arc<Leadership>,
}

async fn fixture(nodes: Vec<Node>, pods: Vec<Pod>, leader: Arc<Leadership>) -> Fixture {
    let l = common::live(&[], nodes, pods).await;
    let shim = Arc::new(Shim {
        view: l.view,
        service: l.service,
        kube: None,
        leader: leader.clone(),
        recorder: None,
        reserve: true,
        metrics: Metrics::default(),
        traces: gpusched_kube::traces::PodTraces::off(),
        preemptor: None,
    });
    Fixture {
        _server: l.server,
        shim,
        leader,
    }
}

fn args(p: Pod, nodes: &[&str]) -> ExtenderArgs {
    ExtenderArgs {
        pod: Some(p),
        nodes: None,
        node_names: Some(nodes.iter().map(|s| (*s).to_owned()).collect()),
    }
}

#[tokio::test]
async fn filter_returns_every_feasible_node_and_the_services_reasons() {
    let f = fixture(
        vec![
            gpu_node("big", 4),
            gpu_node("small", 1),
            gpu_node("full", 2),
            serde_json::from_value(json!({"metadata": {"name": "cpu"}})).unwrap(),
        ],
        vec![
            holder("h1", "full", "full-gpu0,NVIDIA,16384,0:;"),
            holder("h2", "full", "full-gpu1,NVIDIA,16384,0:;"),
        ],
        Arc::new(Leadership::always("t")),
    )
    .await;
    let p = pod(
        "two",
        json!({}),
        json!({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"}),
    );
    let r = f
        .shim
        .filter(&args(p, &["small", "big", "full", "cpu"]))
        .await;
    assert_eq!(r.error, "");
    assert_eq!(r.node_names, Some(vec!["big".to_owned()]));
    assert_eq!(
        r.failed_and_unresolvable_nodes["small"],
        "NodeInsufficientDevice"
    );
    assert!(
        r.failed_and_unresolvable_nodes["cpu"].contains("hami.io/node-nvidia-register is missing")
    );
    // Full node: usage could change, so it is resolvable; HAMi's text "<n>/<cards> <Reason>".
    assert_eq!(r.failed_nodes["full"], "2/2 CardInsufficientMemory");
    assert!(!r.failed_and_unresolvable_nodes.contains_key("full"));
}

#[tokio::test]
async fn invalid_annotation_fails_every_node_unresolvable_naming_the_key() {
    let f = fixture(
        vec![gpu_node("n1", 2)],
        vec![],
        Arc::new(Leadership::always("t")),
    )
    .await;
    let p = pod(
        "bad",
        json!({"hami.io/device-scoring-weights": "slot=1,core=1"}),
        json!({"nvidia.com/gpu": "1"}),
    );
    // Not an Error (kube-scheduler would retry it after every backoff, forever) but every
    // candidate unresolvable with the reason: the pod is marked unschedulable and parked.
    let r = f.shim.filter(&args(p.clone(), &["n1", "n2"])).await;
    assert_eq!(r.error, "");
    assert_eq!(r.node_names, Some(vec![]));
    for n in ["n1", "n2"] {
        let why = &r.failed_and_unresolvable_nodes[n];
        assert!(
            why.contains("hami.io/device-scoring-weights") && why.contains("invalid pod"),
            "{why}"
        );
    }
    // A contradictory request (a card count of 0 with GPU memory) too.
    let zero = pod(
        "zero",
        json!({}),
        json!({"nvidia.com/gpu": "0", "nvidia.com/gpumem": "4096"}),
    );
    let r = f.shim.filter(&args(zero, &["n1"])).await;
    assert!(
        r.failed_and_unresolvable_nodes["n1"].contains("nvidia.com/gpumem"),
        "{r:?}"
    );
    let e = f.shim.prioritize(&args(p, &["n1"])).await.unwrap_err();
    assert!(e.contains("hami.io/device-scoring-weights"), "{e}");
}

#[tokio::test]
async fn pods_without_gpu_pass_and_foreign_scheduler_names_are_refused() {
    let f = fixture(
        vec![gpu_node("n1", 1)],
        vec![],
        Arc::new(Leadership::always("t")),
    )
    .await;
    let cpu = pod("cpu", json!({}), json!({"cpu": "1"}));
    let r = f.shim.filter(&args(cpu.clone(), &["n1", "other"])).await;
    assert_eq!(
        r.node_names,
        Some(vec!["n1".to_owned(), "other".to_owned()])
    );
    assert!(r.failed_nodes.is_empty() && r.error.is_empty());
    let pr = f.shim.prioritize(&args(cpu, &["n1"])).await.unwrap();
    assert_eq!(pr[0].score, 0);
    let mut foreign = pod("f", json!({}), json!({"nvidia.com/gpu": "1"}));
    foreign.spec.as_mut().unwrap().scheduler_name = Some("default-scheduler".into());
    let r = f.shim.filter(&args(foreign, &["n1"])).await;
    assert!(r.error.contains("schedulerName"), "{}", r.error);
}

#[tokio::test]
async fn prioritize_follows_the_node_policy() {
    // n1 already holds a pod: binpack prefers it, spread prefers n2.
    let f = fixture(
        vec![gpu_node("n1", 4), gpu_node("n2", 4)],
        vec![holder("h", "n1", "n1-gpu0,NVIDIA,16384,0:;")],
        Arc::new(Leadership::always("t")),
    )
    .await;
    for (policy, top) in [("binpack", "n1"), ("spread", "n2")] {
        let p = pod(
            "p",
            json!({"hami.io/node-scheduler-policy": policy}),
            json!({"nvidia.com/gpu": "1"}),
        );
        let list = f.shim.prioritize(&args(p, &["n1", "n2"])).await.unwrap();
        let best = list.iter().max_by_key(|h| h.score).unwrap();
        assert_eq!(best.host, top, "{policy}: {list:?}");
        assert_eq!(best.score, 10);
        assert!(list.iter().filter(|h| h.score == 10).count() == 1);
    }
    // Equal nodes: the service's tie-break (smaller name) stays on top.
    let p = pod("p", json!({}), json!({"nvidia.com/gpu": "1"}));
    let f2 = fixture(
        vec![gpu_node("b", 2), gpu_node("a", 2)],
        vec![],
        Arc::new(Leadership::always("t")),
    )
    .await;
    let list = f2.shim.prioritize(&args(p, &["b", "a"])).await.unwrap();
    assert_eq!(
        list.iter()
            .map(|h| (h.host.as_str(), h.score))
            .collect::<Vec<_>>(),
        vec![("b", 9), ("a", 10)]
    );
}

#[tokio::test]
async fn a_standby_answers_with_an_error() {
    let f = fixture(
        vec![gpu_node("n1", 1)],
        vec![],
        Arc::new(Leadership::elected("standby-1")),
    )
    .await;
    let p = pod("p", json!({}), json!({"nvidia.com/gpu": "1"}));
    let r = f.shim.filter(&args(p.clone(), &["n1"])).await;
    assert!(
        r.error.contains("standby-1 is not the leader"),
        "{}",
        r.error
    );
    assert!(f.shim.prioritize(&args(p, &["n1"])).await.is_err());
    assert!(
        f.shim
            .not_ready_reason()
            .unwrap()
            .contains("not the leader")
    );
    assert!(!f.leader.is_leader());
    let b = f
        .shim
        .bind(&gpusched_kube::extender_v1::ExtenderBindingArgs {
            pod_name: "p".into(),
            pod_namespace: "ns".into(),
            pod_uid: "uid-p".into(),
            node: "n1".into(),
        })
        .await;
    assert!(
        matches!(b, gpusched_kube::shim::BindOutcome::Failed(e) if e.contains("not the leader"))
    );
    let text = gpusched_kube::metrics::encode(&f.shim.registry()).unwrap();
    assert!(text.contains("\ngpusched_kube_leader 0\n"), "{text}");
    assert!(
        text.contains(
            "\ngpusched_kube_extender_requests_total{call=\"bind\",outcome=\"error\"} 1\n"
        ),
        "{text}"
    );
}

fn review(p: &Pod) -> kube::core::admission::AdmissionRequest<Pod> {
    let body = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "r1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "p", "namespace": "ns", "operation": "CREATE", "userInfo": {"username": "u"},
            "object": p, "dryRun": false}
    });
    let r: AdmissionReview<Pod> = serde_json::from_value(body).unwrap();
    r.try_into().unwrap()
}

#[tokio::test]
async fn validating_webhook_uses_validate_workload() {
    let f = fixture(vec![], vec![], Arc::new(Leadership::always("t"))).await;
    let opts = WebhookOptions {
        mutate: true,
        ignore_label: "hami.io/webhook".into(),
    };
    let bad = pod(
        "p",
        json!({"hami.io/device-scoring-weights": "slot=1,core=1,memory=x", "nvidia.com/numa-bind": "maybe"}),
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"}),
    );
    let r = admission::validate(&f.shim, &opts, &review(&bad)).await;
    assert!(!r.allowed);
    let msg = r.result.message;
    for key in [
        "hami.io/device-scoring-weights",
        "nvidia.com/numa-bind",
        "nvidia.com/gpucores",
    ] {
        assert!(msg.contains(key), "{key} not in {msg}");
    }
    let good = pod(
        "p",
        json!({"hami.io/device-scoring-weights": "slot=1,core=1,memory=3"}),
        json!({"nvidia.com/gpu": "1"}),
    );
    assert!(
        admission::validate(&f.shim, &opts, &review(&good))
            .await
            .allowed
    );
    let cpu = pod(
        "p",
        json!({"hami.io/device-scoring-weights": "junk"}),
        json!({"cpu": "1"}),
    );
    assert!(
        admission::validate(&f.shim, &opts, &review(&cpu))
            .await
            .allowed,
        "non-GPU pods are not validated"
    );
    // A GPU pod that brings its own decision (annotations, or already bound) is denied at
    // CREATE, naming the key, before the service is asked.
    let mut forged = pod(
        "forged",
        json!({"hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,16384,100:;"}),
        json!({"nvidia.com/gpu": "1"}),
    );
    let r = admission::validate(&f.shim, &opts, &review(&forged)).await;
    assert!(!r.allowed && r.result.message.contains("hami.io/vgpu-devices-allocated"));
    forged.metadata.annotations = None;
    forged.spec.as_mut().unwrap().node_name = Some("n1".into());
    let r = admission::validate(&f.shim, &opts, &review(&forged)).await;
    assert!(!r.allowed && r.result.message.contains("spec.nodeName"));
    // A card count of 0 with GPU memory contradicts itself: denied naming the memory key.
    let zero = pod(
        "zero",
        json!({}),
        json!({"nvidia.com/gpu": "0", "nvidia.com/gpumem": "4096"}),
    );
    let r = admission::validate(&f.shim, &opts, &review(&zero)).await;
    assert!(
        !r.allowed && r.result.message.contains("nvidia.com/gpumem"),
        "{:?}",
        r.result.message
    );
    let mut ignored = bad.clone();
    ignored.metadata.labels = Some([("hami.io/webhook".to_owned(), "ignore".to_owned())].into());
    assert!(
        admission::validate(&f.shim, &opts, &review(&ignored))
            .await
            .allowed
    );
    // Mutation of the same request.
    let mut unsched = good.clone();
    unsched.spec.as_mut().unwrap().scheduler_name = Some("default-scheduler".into());
    let m = admission::mutate(f.shim.view.names(), &opts, &review(&unsched));
    assert!(m.allowed);
    let patch: serde_json::Value = serde_json::from_slice(&m.patch.unwrap()).unwrap();
    assert_eq!(patch[0]["value"], "gpusched-scheduler");
    let _ = v1::NodePolicy::Binpack;
}

#[tokio::test]
async fn prioritize_reserves_the_preferred_node_until_the_bind() {
    // One card per node; a whole-card pod prioritized onto n1 makes n1 full for the next pod,
    // before any bind (kube-scheduler has assumed it there).
    let f = fixture(
        vec![gpu_node("n1", 1), gpu_node("n2", 1)],
        vec![],
        Arc::new(Leadership::always("t")),
    )
    .await;
    let a = pod("a", json!({}), json!({"nvidia.com/gpu": "1"}));
    let list = f
        .shim
        .prioritize(&args(a.clone(), &["n1", "n2"]))
        .await
        .unwrap();
    assert_eq!(
        list[0],
        gpusched_kube::extender_v1::HostPriority {
            host: "n1".into(),
            score: 10
        }
    );
    assert_eq!(f.shim.view.assumed_len(), 1);
    let b = pod("b", json!({}), json!({"nvidia.com/gpu": "1"}));
    let r = f.shim.filter(&args(b, &["n1", "n2"])).await;
    assert_eq!(r.node_names, Some(vec!["n2".to_owned()]));
    assert_eq!(r.failed_nodes["n1"], "1/1 CardInsufficientMemory");
    // b's filter left one node: kube-scheduler skips prioritize, so it was reserved there.
    assert_eq!(f.shim.view.assumed_len(), 2);
    // a itself still sees n1 free (its own reservation does not count against it).
    let r = f.shim.filter(&args(a, &["n1", "n2"])).await;
    assert_eq!(r.node_names, Some(vec!["n1".to_owned()]));
}
