//! The mix the shim sends: derived from the pods it sees (bounded, deterministic), or the
//! configured one (which wins), and the default policies.

use std::time::Duration;

use serde_json::json;

use super::*;

fn names() -> Names {
    Names {
        scheduler_name: "gpusched-scheduler".into(),
        ..Names::default()
    }
}

/// A GPU pod created at second `t` with these limits and annotations.
fn pod(name: &str, t: u32, limits: serde_json::Value, ann: serde_json::Value) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "creationTimestamp": format!("2026-01-01T00:{:02}:{:02}Z", t / 60, t % 60),
                         "annotations": ann},
            "spec": {"schedulerName": "gpusched-scheduler",
                     "containers": [{"name": "c", "resources": {"limits": limits}}]}
        }))
        .unwrap(),
    )
}

fn frac(name: &str, t: u32, cores: u32) -> Arc<Pod> {
    pod(
        name,
        t,
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": cores.to_string(),
               "nvidia.com/gpumem-percentage": cores.to_string()}),
        json!({}),
    )
}

fn observed(window: usize, max_shapes: usize, by_demand: bool) -> PolicySettings {
    PolicySettings {
        node: v1::NodePolicy::Fgd,
        gpu: vec![v1::GpuPolicy::Fgd],
        mix: MixSource::Observed {
            window,
            max_shapes,
            coverage: 1.0,
            by_demand,
            refresh: Duration::from_secs(60),
        },
    }
}

fn workload(p: &Pod) -> v1::Workload {
    crate::translate::workload(p, &names())
}

fn node(types: &[&str]) -> v1::Node {
    v1::Node {
        name: "n".into(),
        cards: types
            .iter()
            .enumerate()
            .map(|(i, t)| v1::Card {
                id: format!("GPU-{i}"),
                r#type: (*t).into(),
                ..v1::Card::default()
            })
            .collect(),
        ..v1::Node::default()
    }
}

/// (cores, probability) of each shape, in the mix's order.
fn shares(m: &v1::WorkloadMix) -> Vec<(u32, f64)> {
    m.shapes
        .iter()
        .map(|s| (s.gpucores_percent, s.probability))
        .collect()
}

#[test]
fn shapes_of_a_pod() {
    let p = pod(
        "a",
        0,
        json!({"nvidia.com/gpu": "2", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "4000"}),
        json!({"nvidia.com/use-gputype": "A100, H100"}),
    );
    let s = pod_shapes(&p, &names().resources);
    assert_eq!(
        s,
        vec![ShapeKey {
            gpu_count: 2,
            gpucores_percent: 30,
            gpumem_mib: 4000,
            gpu_types: vec!["A100".into(), "H100".into()],
            ..ShapeKey::default()
        }]
    );
    // Cores alone: one card (as the mutating webhook makes it); not a number: not counted.
    let p = pod("b", 0, json!({"nvidia.com/gpucores": "20"}), json!({}));
    assert_eq!(pod_shapes(&p, &names().resources)[0].gpu_count, 1);
    let p = pod("c", 0, json!({"nvidia.com/gpumem": "4Gi"}), json!({}));
    assert!(pod_shapes(&p, &names().resources).is_empty());
    // Beyond a mix's ranges (16 TiB, 100 %): not counted, so the mix stays valid.
    let p = pod("e", 0, json!({"nvidia.com/gpumem": "17000000"}), json!({}));
    assert!(pod_shapes(&p, &names().resources).is_empty());
    let p = pod("f", 0, json!({"nvidia.com/gpucores": "101"}), json!({}));
    assert!(pod_shapes(&p, &names().resources).is_empty());
    let p = pod("d", 0, json!({"cpu": "1"}), json!({}));
    assert!(pod_shapes(&p, &names().resources).is_empty());
}

#[test]
fn demand_and_count_weights() {
    let pods = vec![frac("a", 1, 10), frac("b", 2, 10), frac("c", 3, 80)];
    let by_demand = observed_counter(&pods, &names(), 100, true)
        .mix(1.0, 64)
        .unwrap();
    assert_eq!(shares(&by_demand), vec![(80, 0.8), (10, 0.2)]);
    let by_pods = observed_counter(&pods, &names(), 100, false)
        .mix(1.0, 64)
        .unwrap();
    assert_eq!(shares(&by_pods), vec![(10, 2.0 / 3.0), (80, 1.0 / 3.0)]);
}

#[test]
fn the_window_keeps_the_newest_pods_and_the_shapes_are_capped() {
    // 10 old pods of 10 cores, then 3 new ones of 50: a window of 3 sees only the new ones.
    let mut pods: Vec<Arc<Pod>> = (0..10).map(|i| frac(&format!("old{i}"), i, 10)).collect();
    pods.extend((0..3).map(|i| frac(&format!("new{i}"), 100 + i, 50)));
    let m = observed_counter(&pods, &names(), 3, true)
        .mix(1.0, 64)
        .unwrap();
    assert_eq!(shares(&m), vec![(50, 1.0)]);
    // At most max_shapes shapes, the most popular, renormalised.
    let pods: Vec<Arc<Pod>> = (0..20)
        .map(|i| frac(&format!("p{i}"), i, 5 + (i % 5) * 10))
        .collect();
    let f = Fgd::new(observed(1000, 2, false));
    let w = workload(&pods[0]);
    let o = f
        .options(&w, &[node(&["A100"])], || pods.clone(), &names(), None)
        .unwrap();
    let m = o.workload_mix.unwrap();
    assert_eq!(m.shapes.len(), 2);
    assert!((m.shapes.iter().map(|s| s.probability).sum::<f64>() - 1.0).abs() < 1e-12);
    // Finished and deleting pods are not counted.
    let mut done = (*frac("done", 200, 90)).clone();
    done.status = Some(k8s_openapi::api::core::v1::PodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    });
    let m = observed_counter(&[Arc::new(done), frac("x", 1, 10)], &names(), 10, true)
        .mix(1.0, 64)
        .unwrap();
    assert_eq!(shares(&m), vec![(10, 1.0)]);
}

#[test]
fn the_derivation_is_deterministic() {
    // Same creation time everywhere: ties by name; any order of the store gives one mix.
    let mut pods: Vec<Arc<Pod>> = (0..30)
        .map(|i| frac(&format!("p{i:02}"), 7, 10 + (i % 7) * 10))
        .collect();
    let want = observed_counter(&pods, &names(), 12, true).mix(0.95, 4);
    pods.reverse();
    assert_eq!(
        observed_counter(&pods, &names(), 12, true).mix(0.95, 4),
        want
    );
    pods.rotate_left(11);
    assert_eq!(
        observed_counter(&pods, &names(), 12, true).mix(0.95, 4),
        want
    );
}

#[test]
fn the_configured_mix_wins_and_types_the_nodes_lack_are_dropped() {
    let configured = v1::WorkloadMix {
        shapes: vec![
            v1::WorkloadMixShape {
                probability: 0.5,
                gpu_count: 1,
                gpucores_percent: 50,
                ..v1::WorkloadMixShape::default()
            },
            v1::WorkloadMixShape {
                probability: 0.5,
                gpu_count: 1,
                gpucores_percent: 30,
                gpu_types: vec!["H100".into()],
                ..v1::WorkloadMixShape::default()
            },
        ],
    };
    let f = Fgd::new(PolicySettings {
        mix: MixSource::Config(configured.clone()),
        ..observed(10, 10, true)
    });
    let pods = vec![frac("a", 1, 10)];
    let w = workload(&pods[0]);
    let o = f
        .options(
            &w,
            &[node(&["NVIDIA-H100-80GB"])],
            || pods.clone(),
            &names(),
            None,
        )
        .unwrap();
    assert_eq!(o.workload_mix.as_ref(), Some(&configured), "config wins");
    let o = f
        .options(
            &w,
            &[node(&["NVIDIA-A100"])],
            || pods.clone(),
            &names(),
            None,
        )
        .unwrap();
    assert_eq!(shares(&o.workload_mix.unwrap()), vec![(50, 1.0)]);
}

#[test]
fn the_mix_goes_only_with_fgd_pods_and_the_defaults_with_every_request() {
    let pods = vec![frac("a", 1, 10)];
    let nodes = [node(&["A100"])];
    // No default, no annotation: nothing to send.
    let plain = Fgd::new(PolicySettings {
        mix: observed(10, 10, true).mix,
        ..PolicySettings::default()
    });
    assert_eq!(
        plain.options(&workload(&pods[0]), &nodes, Vec::new, &names(), None),
        None
    );
    // The pod's annotation asks for fgd: the mix (the pod alone is observed here).
    let p = pod(
        "f",
        2,
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "40"}),
        json!({"hami.io/gpu-scheduler-policy": "numa,fgd"}),
    );
    let o = plain
        .options(&workload(&p), &nodes, Vec::new, &names(), None)
        .unwrap();
    assert_eq!(shares(&o.workload_mix.unwrap()), vec![(40, 1.0)]);
    assert_eq!(o.default_node_policy, v1::NodePolicy::Unspecified as i32);
    // fgd by default, binpack by annotation on both: defaults sent, no mix.
    let f = Fgd::new(observed(10, 10, true));
    let p = pod(
        "b",
        3,
        json!({"nvidia.com/gpu": "1"}),
        json!({"hami.io/node-scheduler-policy": "binpack",
               "hami.io/gpu-scheduler-policy": "spread"}),
    );
    let o = f
        .options(&workload(&p), &nodes, || pods.clone(), &names(), None)
        .unwrap();
    assert_eq!(o.default_node_policy, v1::NodePolicy::Fgd as i32);
    assert_eq!(o.default_gpu_policy, vec![v1::GpuPolicy::Fgd as i32]);
    assert!(o.workload_mix.is_none());
    // The caller's options are kept.
    let base = v1::PlacementOptions {
        explain: true,
        ..v1::PlacementOptions::default()
    };
    let o = f
        .options(
            &workload(&pods[0]),
            &nodes,
            || pods.clone(),
            &names(),
            Some(base),
        )
        .unwrap();
    assert!(o.explain && o.workload_mix.is_some());
}

#[test]
fn the_observed_mix_is_derived_again_only_after_refresh() {
    let f = Fgd::new(observed(10, 10, true));
    let t0 = Instant::now();
    let first = vec![frac("a", 1, 10)];
    let m = f.observed(|| first.clone(), &names(), t0).unwrap();
    assert_eq!(shares(&m), vec![(10, 1.0)]);
    let later = vec![frac("b", 2, 70)];
    let kept = f
        .observed(
            || panic!("not read again"),
            &names(),
            t0 + Duration::from_secs(1),
        )
        .unwrap();
    assert_eq!(kept, m);
    let m = f
        .observed(|| later.clone(), &names(), t0 + Duration::from_secs(61))
        .unwrap();
    assert_eq!(shares(&m), vec![(70, 1.0)]);
}
