//! The fgd policies through the shim against a real gpusched-server (in process): per pod by
//! annotation and as the shim's default, with the observed and the configured workload mix
//! (contract example 12.7.3: binpack leaves a sliver where fgd does not).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::gpu_node;
use gpusched_client::v1;
use gpusched_kube::config::{MixSource, PolicySettings};
use gpusched_kube::extender_v1::ExtenderArgs;
use gpusched_kube::leader::Leadership;
use gpusched_kube::metrics::Metrics;
use gpusched_kube::shim::Shim;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

fn pod(name: &str, ann: serde_json::Value, pct: u32) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                     "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": ann},
        "spec": {"schedulerName": "gpusched-scheduler",
                 "containers": [{"name": "main", "resources": {"limits": {
                     "nvidia.com/gpu": "1", "nvidia.com/gpucores": pct.to_string(),
                     "nvidia.com/gpumem-percentage": pct.to_string()}}}]}
    }))
    .unwrap()
}

/// A pod holding `cores` % (and as much memory) of `node`'s one card.
fn holder(name: &str, node: &str, cores: u32) -> Pod {
    let mem = 16384 * u64::from(cores) / 100;
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "1",
                     "creationTimestamp": "2025-01-01T00:00:00Z",
                     "annotations": {"hami.io/vgpu-devices-allocated": format!("{node}-gpu0,NVIDIA,{mem},{cores}:;"),
                                     "hami.io/vgpu-node": node}},
        "spec": {"schedulerName": "gpusched-scheduler", "nodeName": node,
                 "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"}
    }))
    .unwrap()
}

async fn shim(pods: Vec<Pod>, policy: PolicySettings) -> (gpusched_service::Running, Shim) {
    // m1 holds 50 % of its card, m2 60 % (contract 12.7.3).
    let mut all = vec![holder("h1", "m1", 50), holder("h2", "m2", 60)];
    all.extend(pods);
    let l = common::live_with(&[], vec![gpu_node("m1", 1), gpu_node("m2", 1)], all, policy).await;
    let s = Shim {
        view: l.view,
        service: l.service,
        kube: None,
        leader: Arc::new(Leadership::always("t")),
        recorder: None,
        reserve: false,
        metrics: Metrics::default(),
        traces: gpusched_kube::traces::PodTraces::off(),
        preemptor: None,
    };
    (l.server, s)
}

fn args(p: Pod) -> ExtenderArgs {
    ExtenderArgs {
        pod: Some(p),
        nodes: None,
        node_names: Some(vec!["m1".into(), "m2".into()]),
    }
}

/// The node kube-scheduler would take: the one the shim gives 10.
async fn top(s: &Shim, p: Pod) -> String {
    let f = s.filter(&args(p.clone())).await;
    assert!(f.error.is_empty(), "{}", f.error);
    assert_eq!(f.node_names.as_ref().map(Vec::len), Some(2), "{f:?}");
    let list = s.prioritize(&args(p)).await.unwrap();
    list.into_iter().max_by_key(|h| h.score).unwrap().host
}

fn observed() -> PolicySettings {
    PolicySettings {
        mix: MixSource::Observed {
            window: 100,
            max_shapes: 8,
            coverage: 1.0,
            by_demand: true,
            refresh: Duration::from_secs(60),
        },
        ..PolicySettings::default()
    }
}

#[tokio::test]
async fn a_pod_under_fgd_keeps_the_room_binpack_would_waste() {
    // The pods expected: 40 % ones (four pending), and the one placed: 10 %.
    let pending: Vec<Pod> = (0..4)
        .map(|i| pod(&format!("q{i}"), json!({}), 40))
        .collect();
    let (_server, s) = shim(pending, observed()).await;
    let both = |policy: &str| {
        json!({"hami.io/node-scheduler-policy": policy,
                                      "hami.io/gpu-scheduler-policy": policy})
    };
    // Binpack fills m2 to 70 %: 30 % nobody of the mix can use.
    assert_eq!(top(&s, pod("b", both("binpack"), 10)).await, "m2");
    // fgd with the mix the shim derives from the pods it sees (40 % and 10 %): m1 keeps 40 %.
    assert_eq!(top(&s, pod("f", both("fgd"), 10)).await, "m1");
}

#[tokio::test]
async fn fgd_as_the_shims_default_with_a_configured_mix() {
    let m2 = v1::WorkloadMix {
        shapes: vec![v1::WorkloadMixShape {
            probability: 1.0,
            gpu_count: 1,
            gpucores_percent: 40,
            gpumem_percent: 40,
            ..v1::WorkloadMixShape::default()
        }],
    };
    let (_server, s) = shim(
        vec![],
        PolicySettings {
            node: v1::NodePolicy::Fgd,
            gpu: vec![v1::GpuPolicy::Fgd],
            mix: MixSource::Config(m2),
        },
    )
    .await;
    assert_eq!(top(&s, pod("d", json!({}), 10)).await, "m1");
    // A pod's own annotation still wins over the default.
    let binpack = json!({"hami.io/node-scheduler-policy": "binpack"});
    assert_eq!(top(&s, pod("b", binpack, 10)).await, "m2");
}

#[tokio::test]
async fn without_a_mix_from_the_shim_or_the_service_the_pod_is_invalid() {
    let (_server, s) = shim(
        vec![],
        PolicySettings {
            mix: MixSource::Service,
            ..PolicySettings::default()
        },
    )
    .await;
    let p = pod("f", json!({"hami.io/node-scheduler-policy": "fgd"}), 10);
    let f = s.filter(&args(p)).await;
    let failed = format!("{:?}", f.failed_and_unresolvable_nodes);
    assert!(failed.contains("options.workload_mix"), "{f:?}");
}
