//! The shim's preemption against a real gpusched-server (in process, on 127.0.0.1:0), the view
//! fed from reflector stores: the requests it builds from the view are valid for the service,
//! the per-node verdicts reach the filter answer, kube-scheduler's `/preempt` gets its victims
//! plus the card-exact ones, the offers made there count once the node is nominated, and a bad
//! input (too many placed pods on a node for the server's limit) comes back naming the field.
//! Evictions need the Kubernetes API: the e2e (`tests/e2e/scenarios/preempt.rs`) covers them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::gpu_node;
use gpusched_kube::extender_v1::{ExtenderArgs, ExtenderPreemptionArgs};
use gpusched_kube::leader::Leadership;
use gpusched_kube::metrics::Metrics;
use gpusched_kube::preempt::Preemptor;
use gpusched_kube::shim::Shim;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::json;

/// A pending pod of this priority asking for one card with `mib`.
fn pending(name: &str, priority: i32, mib: u64, extra: serde_json::Value) -> Pod {
    let mut spec = json!({"schedulerName": "gpusched-scheduler", "priority": priority,
        "containers": [{"name": "main", "resources": {"limits":
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": mib.to_string()}}}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "1"},
        "spec": spec
    }))
    .unwrap()
}

/// A pod bound by the shim's decision holding `mib` on `card` of `node`, with this priority,
/// started `start` seconds into 2026.
fn placed(name: &str, node: &str, card: &str, mib: u64, priority: i32, start: u32) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "1",
                     "annotations": {"hami.io/vgpu-devices-allocated": format!("{card},NVIDIA,{mib},0:;"),
                                     "hami.io/vgpu-node": node}},
        "spec": {"schedulerName": "gpusched-scheduler", "nodeName": node, "priority": priority,
                 "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running", "startTime": format!("2026-01-01T00:00:{start:02}Z")}
    }))
    .unwrap()
}

struct Fixture {
    _server: gpusched_service::Running,
    shim: Arc<Shim>,
    pods: reflector::store::Writer<Pod>,
}

async fn fixture(server: &[(&str, &str)], nodes: Vec<Node>, pods: Vec<Pod>) -> Fixture {
    let l = common::live(server, nodes, pods).await;
    let shim = Arc::new(Shim {
        view: l.view,
        service: l.service,
        kube: None,
        leader: Arc::new(Leadership::always("t")),
        recorder: None,
        reserve: false,
        metrics: Metrics::default(),
        traces: gpusched_kube::traces::PodTraces::off(),
        preemptor: Some(Preemptor::without_budgets()),
    });
    Fixture {
        _server: l.server,
        shim,
        pods: l.pods,
    }
}

fn args(p: Pod, nodes: &[&str]) -> ExtenderArgs {
    ExtenderArgs {
        pod: Some(p),
        nodes: None,
        node_names: Some(nodes.iter().map(|s| (*s).to_owned()).collect()),
    }
}

/// n1: card 1 holds `low` (priority 1, 10000 MiB); n2: card 1 holds `peer` (priority 100,
/// 10000 MiB). Each node has one card of 16384 MiB.
async fn two_nodes(server: &[(&str, &str)]) -> Fixture {
    fixture(
        server,
        vec![gpu_node("n1", 1), gpu_node("n2", 1)],
        vec![
            placed("low", "n1", "n1-gpu0", 10000, 1, 1),
            placed("peer", "n2", "n2-gpu0", 10000, 100, 1),
        ],
    )
    .await
}

#[tokio::test]
async fn the_filter_answer_carries_each_nodes_preemption_verdict() {
    let f = two_nodes(&[]).await;
    // Priority 100 and 8000 MiB: n1's low pod must go; n2 holds an equal one.
    let r = f
        .shim
        .filter(&args(pending("high", 100, 8000, json!({})), &["n1", "n2"]))
        .await;
    assert_eq!(r.node_names, Some(vec![]));
    assert_eq!(
        r.failed_nodes["n2"],
        "1/1 CardInsufficientMemory; preemption: no pod of lower priority here (NoLowerPriority)"
    );
    // The service chose n1; without a Kubernetes client nothing can be evicted.
    assert_eq!(
        r.failed_nodes["n1"],
        "1/1 CardInsufficientMemory; preemption: no Kubernetes client to evict with"
    );
    assert!(
        f.shim.view.holds_of("uid-high").is_empty(),
        "no hold without an eviction"
    );
    // preemptionPolicy: Never: no verdicts.
    let never = pending("never", 100, 8000, json!({"preemptionPolicy": "Never"}));
    let r = f.shim.filter(&args(never, &["n1", "n2"])).await;
    assert_eq!(r.failed_nodes["n2"], "1/1 CardInsufficientMemory");
    // Too big even with every pod of lower priority gone (the card has 16384 MiB).
    let r = f
        .shim
        .filter(&args(pending("huge", 100, 20000, json!({})), &["n1"]))
        .await;
    assert!(
        r.failed_and_unresolvable_nodes["n1"].contains("(InsufficientAfterEviction)"),
        "{r:?}"
    );
    // Priority 1: nothing lower anywhere (the service is not asked).
    let r = f
        .shim
        .filter(&args(pending("one", 1, 8000, json!({})), &["n1", "n2"]))
        .await;
    for n in ["n1", "n2"] {
        assert!(
            r.failed_nodes[n]
                .ends_with("; preemption: no pod of lower priority here (NoLowerPriority)"),
            "{r:?}"
        );
    }
    let text = gpusched_kube::metrics::encode(&f.shim.registry()).unwrap();
    for (outcome, n) in [("error", 1), ("no_candidate", 2), ("evicting", 0)] {
        let line = format!("\ngpusched_kube_preemptions_total{{outcome=\"{outcome}\"}} {n}\n");
        assert!(text.contains(&line), "{line} in {text}");
    }
}

#[tokio::test]
async fn too_many_placed_pods_for_the_servers_limit_come_back_naming_the_field() {
    let f = fixture(
        &[("limits.max_placed_workloads_per_node", "1")],
        vec![gpu_node("n1", 1)],
        vec![
            placed("a", "n1", "n1-gpu0", 6000, 1, 1),
            placed("b", "n1", "n1-gpu0", 6000, 1, 2),
        ],
    )
    .await;
    let r = f
        .shim
        .filter(&args(pending("high", 100, 8000, json!({})), &["n1"]))
        .await;
    let why = &r.failed_nodes["n1"];
    assert!(
        why.contains("preemption: placed[0].workloads:") && why.contains("1"),
        "{why}"
    );
}

#[tokio::test]
async fn at_preempt_kube_schedulers_victims_stay_and_the_cards_add_theirs() {
    // n1: `cpu` (priority 1, 2000 MiB, kube-scheduler's victim for its own filters) and `mem`
    // (priority 1, 10000 MiB): once `cpu` is gone the card has 6384 MiB, the pod wants 8000.
    // n2: `peer` holds 10000 MiB with priority 100: nothing else may go.
    let f = fixture(
        &[],
        vec![gpu_node("n1", 1), gpu_node("n2", 1)],
        vec![
            placed("cpu", "n1", "n1-gpu0", 2000, 1, 1),
            placed("mem", "n1", "n1-gpu0", 10000, 1, 2),
            placed("peer", "n2", "n2-gpu0", 10000, 100, 1),
            placed("cpu2", "n2", "n2-gpu0", 1000, 1, 2),
        ],
    )
    .await;
    let high = pending("high", 100, 8000, json!({}));
    let body = json!({
        "Pod": high,
        "NodeNameToVictims": null,
        "NodeNameToMetaVictims": {
            "n1": {"Pods": [{"UID": "uid-cpu"}], "NumPDBViolations": 0},
            "n2": {"Pods": [{"UID": "uid-cpu2"}], "NumPDBViolations": 0}
        }
    });
    let a: ExtenderPreemptionArgs = serde_json::from_value(body).unwrap();
    let r = f.shim.preempt(&a).await.unwrap();
    let got: Vec<(&str, Vec<&str>)> = r
        .node_name_to_meta_victims
        .iter()
        .map(|(n, v)| (n.as_str(), v.pods.iter().map(|p| p.uid.as_str()).collect()))
        .collect();
    assert_eq!(got, vec![("n1", vec!["uid-cpu", "uid-mem"])]);
    // The placement on n1 is offered: it counts for others once kube-scheduler nominates n1.
    let offers = f.shim.view.holds_of("uid-high");
    assert_eq!(offers.len(), 1);
    assert!(offers[0].offer && offers[0].node == "n1");
    // 10000 MiB: fits the card unless the offered 8000 MiB count.
    let other = pending("other", 100, 10000, json!({}));
    // The victims still hold their cards; say they are gone (deleted from the store).
    let mut f = f;
    for v in ["cpu", "mem"] {
        f.pods
            .apply_watcher_event(&Event::Delete(placed(v, "n1", "n1-gpu0", 1, 1, 1)));
    }
    let r = f.shim.filter(&args(other.clone(), &["n1"])).await;
    assert_eq!(
        r.node_names,
        Some(vec!["n1".to_owned()]),
        "not nominated: free"
    );
    let mut nominated = high.clone();
    nominated.status = Some(serde_json::from_value(json!({"nominatedNodeName": "n1"})).unwrap());
    f.pods.apply_watcher_event(&Event::Apply(nominated));
    let r = f.shim.filter(&args(other, &["n1"])).await;
    assert_eq!(
        r.node_names,
        Some(vec![]),
        "held for the nominated pod: {r:?}"
    );
    // The preemptor itself does not count its own hold, and it does not preempt again.
    let r = f.shim.filter(&args(high.clone(), &["n1"])).await;
    assert_eq!(r.node_names, Some(vec!["n1".to_owned()]));
    // With a hold under way kube-scheduler gets no node at /preempt.
    let r = f.shim.preempt(&a).await.unwrap();
    assert!(r.node_name_to_meta_victims.is_empty(), "{r:?}");
    // A pod without GPU requests: kube-scheduler's victims unchanged.
    let cpu_only: Pod = serde_json::from_value(json!({"metadata": {"name": "c", "uid": "u"},
        "spec": {"containers": [{"name": "c"}]}}))
    .unwrap();
    let mut a2 = a.clone();
    a2.pod = Some(cpu_only);
    let r = f.shim.preempt(&a2).await.unwrap();
    assert_eq!(r.node_name_to_meta_victims.len(), 2);
}
