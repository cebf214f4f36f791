//! Every story and worked example of the two design documents (`docs/design/`).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use gpusched_engine::{DecideOptions, Reason, allocate, evaluate};

const NODE_SPREAD: (&str, &str) = ("hami.io/node-scheduler-policy", "spread");
const GPU_BINPACK: (&str, &str) = ("hami.io/gpu-scheduler-policy", "binpack");

fn two_nodes() -> gpusched_engine::Snapshot {
    snapshot(vec![node("node1", 4, 8000), node("node2", 4, 8000)])
}

#[test]
fn story_1_node_binpack_keeps_both_pods_on_node1() {
    let mut s = two_nodes();
    let w = pod().gpus(1).workload();
    assert_eq!(place_and_apply(&mut s, &w).unwrap().0, "node1");
    assert_eq!(place_and_apply(&mut s, &w).unwrap().0, "node1");
}

#[test]
fn story_2_node_spread_puts_pods_on_different_nodes() {
    let mut s = two_nodes();
    let w = pod().ann(NODE_SPREAD.0, NODE_SPREAD.1).gpus(1).workload();
    assert_eq!(place_and_apply(&mut s, &w).unwrap().0, "node1");
    assert_eq!(place_and_apply(&mut s, &w).unwrap().0, "node2");
}

fn four_gpus() -> gpusched_engine::Snapshot {
    snapshot(vec![gpusched_engine::NodeSpec::new(
        "node1",
        (0..4)
            .map(|i| card(&format!("GPU{}", i + 1), i, 8000))
            .collect(),
    )])
}

fn small_pod() -> Pod {
    pod().container(&[("gpu", "1"), ("cores", "20"), ("pct", "20")])
}

#[test]
fn story_3_gpu_binpack_shares_gpu1() {
    let mut s = four_gpus();
    let w = small_pod().ann(GPU_BINPACK.0, GPU_BINPACK.1).workload();
    assert_eq!(
        place_and_apply(&mut s, &w).unwrap(),
        ("node1".into(), vec![vec!["GPU1".into()]])
    );
    assert_eq!(
        place_and_apply(&mut s, &w).unwrap(),
        ("node1".into(), vec![vec!["GPU1".into()]])
    );
}

#[test]
fn story_4_gpu_spread_uses_gpu1_then_gpu2() {
    let mut s = four_gpus();
    let w = small_pod().workload(); // spread is the default GPU policy
    assert_eq!(
        place_and_apply(&mut s, &w).unwrap(),
        ("node1".into(), vec![vec!["GPU1".into()]])
    );
    assert_eq!(
        place_and_apply(&mut s, &w).unwrap(),
        ("node1".into(), vec![vec!["GPU2".into()]])
    );
}

/// Node1 has 3 of 4 whole cards in use, node2 2 of 4; a pod asks for one whole card. Each of
/// the three utilisation terms equals the seed's one-dimensional ((request + used) /
/// allocatable), so the node scores are 3 x 10 and 3 x 7.5.
fn nodes_3_and_2_used() -> gpusched_engine::Snapshot {
    let build = |name: &str, used: u32| {
        let cards = (0..4)
            .map(|i| {
                let c = card(&format!("{name}-g{i}"), i, 8000).slots(1);
                if i < used { c.used(1, 8000, 100) } else { c }
            })
            .collect();
        gpusched_engine::NodeSpec::new(name, cards)
    };
    snapshot(vec![build("node1", 3), build("node2", 2)])
}

#[test]
fn node_policy_worked_example_scores_and_choice() {
    let s = nodes_3_and_2_used();
    let whole = pod().container(&[("gpu", "1"), ("cores", "100")]);
    let e = evaluate(&s, &whole.workload(), DecideOptions::default());
    let score = |n: &str| {
        e.feasible
            .iter()
            .find(|f| s[f.node].name() == n)
            .unwrap()
            .score
            .raw
    };
    assert!((score("node1") - 30.0).abs() < 1e-9, "{}", score("node1"));
    assert!((score("node2") - 22.5).abs() < 1e-9, "{}", score("node2"));
    assert_eq!(place(&s, &whole.workload()).unwrap().0, "node1");
    assert_eq!(
        place(
            &s,
            &whole.clone().ann(NODE_SPREAD.0, NODE_SPREAD.1).workload()
        )
        .unwrap()
        .0,
        "node2"
    );
}

/// The GPU example: 10 slots per card, 8000 MiB; GPU1 has 10 cores and 2000 MiB in use, GPU2
/// 70 cores and 6000 MiB; the pod asks 1 GPU, 20 cores, 1000 MiB.
fn gpu_example(used_slots: u32) -> gpusched_engine::Snapshot {
    snapshot(vec![gpusched_engine::NodeSpec::new(
        "node1",
        vec![
            card("GPU1", 0, 8000).used(used_slots, 2000, 10),
            card("GPU2", 1, 8000).used(used_slots, 6000, 70),
        ],
    )])
}

fn gpu_example_scores(used_slots: u32) -> (f64, f64) {
    let s = gpu_example(used_slots);
    let w = pod()
        .container(&[("gpu", "1"), ("cores", "20"), ("mem", "1000")])
        .workload();
    let a = allocate(&s, &w, DecideOptions::explained());
    let ex = &a.explanations[0].containers[0].cards;
    let score = |pos: usize| ex.iter().find(|c| c.card == pos).unwrap().terms.total();
    (score(0), score(1))
}

#[test]
fn gpu_policy_english_example_scores_7_75_and_18_75() {
    let (g1, g2) = gpu_example_scores(0);
    assert!((g1 - 7.75).abs() < 1e-9, "{g1}");
    assert!((g2 - 18.75).abs() < 1e-9, "{g2}");
}

#[test]
fn gpu_policy_chinese_example_scores_8_75_and_19_75() {
    let (g1, g2) = gpu_example_scores(1);
    assert!((g1 - 8.75).abs() < 1e-9, "{g1}");
    assert!((g2 - 19.75).abs() < 1e-9, "{g2}");
}

#[test]
fn gpu_policy_examples_binpack_picks_gpu2_spread_picks_gpu1() {
    for used in [0, 1] {
        let s = gpu_example(used);
        let base = pod().container(&[("gpu", "1"), ("cores", "20"), ("mem", "1000")]);
        let binpack = base.clone().ann(GPU_BINPACK.0, GPU_BINPACK.1).workload();
        assert_eq!(
            place(&s, &binpack).unwrap().1,
            vec![vec!["GPU2".to_owned()]]
        );
        let spread = base
            .ann("hami.io/gpu-scheduler-policy", "spread")
            .workload();
        assert_eq!(place(&s, &spread).unwrap().1, vec![vec!["GPU1".to_owned()]]);
    }
}

/// The weights example: after placing 1 vGPU with 40% memory, GPU A is at slot 0.2, core 0.9,
/// memory 0.5 and GPU B at 0.8, 0.1, 0.6.
fn weights_example() -> gpusched_engine::Snapshot {
    snapshot(vec![gpusched_engine::NodeSpec::new(
        "node1",
        vec![
            card("GPU-A", 0, 10000).used(1, 1000, 90),
            card("GPU-B", 1, 10000).used(7, 2000, 10),
        ],
    )])
}

fn weights_pod() -> Pod {
    pod().container(&[("gpu", "1"), ("pct", "40")])
}

#[test]
fn weights_example_scores_16_15_and_26_27() {
    let s = weights_example();
    for (weights, a_score, b_score) in [
        (None, 16.0, 15.0),
        (Some("slot=1,core=1,memory=3"), 26.0, 27.0),
    ] {
        let mut p = weights_pod();
        if let Some(w) = weights {
            p = p.ann("hami.io/device-scoring-weights", w);
        }
        let a = allocate(&s, &p.workload(), DecideOptions::explained());
        let cards = &a.explanations[0].containers[0].cards;
        let score = |pos: usize| cards.iter().find(|c| c.card == pos).unwrap().terms.total();
        assert!((score(0) - a_score).abs() < 1e-9, "A {}", score(0));
        assert!((score(1) - b_score).abs() < 1e-9, "B {}", score(1));
    }
}

#[test]
fn weights_example_changes_binpack_and_spread_choice() {
    let s = weights_example();
    let chosen = |policy: &str, weights: Option<&str>| {
        let mut p = weights_pod().ann("hami.io/gpu-scheduler-policy", policy);
        if let Some(w) = weights {
            p = p.ann("hami.io/device-scoring-weights", w);
        }
        place(&s, &p.workload()).unwrap().1[0][0].clone()
    };
    assert_eq!(chosen("binpack", None), "GPU-A");
    assert_eq!(chosen("binpack", Some("slot=1,core=1,memory=3")), "GPU-B");
    assert_eq!(chosen("spread", None), "GPU-B");
    assert_eq!(chosen("spread", Some("slot=1,core=1,memory=3")), "GPU-A");
    // Absent annotation = 1,1,1.
    assert_eq!(chosen("binpack", Some("slot=1,core=1,memory=1")), "GPU-A");
}

#[test]
fn weights_do_not_bypass_fit_checks() {
    // GPU-B is the weighted favourite but has no free slot left.
    let s = snapshot(vec![gpusched_engine::NodeSpec::new(
        "node1",
        vec![
            card("GPU-A", 0, 10000).used(1, 1000, 90),
            card("GPU-B", 1, 10000).used(10, 2000, 10),
        ],
    )]);
    let w = weights_pod()
        .ann("hami.io/gpu-scheduler-policy", "binpack")
        .ann("hami.io/device-scoring-weights", "slot=1,core=1,memory=3")
        .workload();
    assert_eq!(place(&s, &w).unwrap().1[0][0], "GPU-A");
}

#[test]
fn mutex_example_both_cards_in_use_stays_pending() {
    let s = gpu_example(1);
    let w = pod()
        .ann("hami.io/gpu-scheduler-policy", "mutex")
        .container(&[("gpu", "1"), ("mem", "1000")])
        .workload();
    let a = allocate(&s, &w, DecideOptions::default());
    assert!(a.placement.is_none());
    assert_eq!(
        a.failed[0]
            .failure
            .reasons
            .get(Reason::ExclusiveDeviceAllocateConflict),
        2
    );
    assert_eq!(
        failure_text(&s, &w, "node1").unwrap(),
        "2/2 ExclusiveDeviceAllocateConflict"
    );
}

#[test]
fn mutex_takes_an_idle_card_and_the_card_stays_shareable() {
    let mut s = snapshot(vec![gpusched_engine::NodeSpec::new(
        "node1",
        vec![
            card("GPU1", 0, 8000).used(1, 1000, 0),
            card("GPU2", 1, 8000),
            card("GPU3", 2, 8000).used(2, 100, 0),
        ],
    )]);
    let mutex = pod()
        .ann("hami.io/gpu-scheduler-policy", "mutex")
        .container(&[("gpu", "1"), ("mem", "1000")])
        .workload();
    assert_eq!(
        place_and_apply(&mut s, &mutex).unwrap().1,
        vec![vec!["GPU2".to_owned()]]
    );
    // A second mutex pod finds no idle card.
    assert!(place(&s, &mutex).is_none());
    // A card given to a mutex pod can still be selected by other pods afterwards.
    let binpack = pod()
        .ann("hami.io/gpu-scheduler-policy", "binpack")
        .container(&[("gpu", "1"), ("mem", "1000")]);
    let only_gpu2 = binpack.ann("nvidia.com/use-gpuuuid", "GPU2").workload();
    assert_eq!(
        place(&s, &only_gpu2).unwrap().1,
        vec![vec!["GPU2".to_owned()]]
    );
}

#[test]
fn invalid_weights_reject_the_workload_before_any_node() {
    // Chinese seed: an invalid annotation is rejected (admission or scheduler), naming the key.
    let err = weights_pod()
        .ann("hami.io/device-scoring-weights", "slot=1,core=1")
        .parse()
        .unwrap_err();
    assert_eq!(err.violations.len(), 1);
    assert_eq!(
        err.violations[0].field,
        "annotations[\"hami.io/device-scoring-weights\"]"
    );
    assert!(
        err.violations[0]
            .description
            .contains("hami.io/device-scoring-weights")
    );
}
