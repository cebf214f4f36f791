//! Fragmentation-aware placement (`docs/placement-semantics.md` section 12): every worked
//! example of 12.7, the mix's validation, explanations, host resources in batches and bookings.

mod common;

use std::sync::Arc;

use common::{CardExt, card, node, pod, snapshot};
use gpusched_engine::{
    BatchMode, Card, DecideOptions, HostResources, MixShape, NodePolicy, NodeSpec, Snapshot,
    ViolationKind, Workload, WorkloadMix, allocate, allocate_batch, apply, evaluate, release,
};

const MIB: u64 = 16_384;

/// A shape of `gpus` cards at `cores` % cores and memory, with weight `w` (parts per 1,000).
fn shape(gpus: u32, cores: u32, w: u64) -> MixShape {
    MixShape {
        weight: w * 1_000_000,
        gpus,
        cores,
        mem_percent: cores.max(1),
        ..MixShape::default()
    }
}

fn mix(shapes: Vec<MixShape>) -> Arc<WorkloadMix> {
    Arc::new(WorkloadMix::new(shapes).expect("valid mix"))
}

fn m1() -> Arc<WorkloadMix> {
    mix(vec![
        shape(1, 50, 500),
        shape(1, 100, 300),
        shape(2, 100, 200),
    ])
}

fn m2() -> Arc<WorkloadMix> {
    mix(vec![shape(1, 40, 1000)])
}

/// A card with `cores` booked in one slot, with the same share of its memory.
fn share(id: &str, index: u32, cores: u32) -> Card {
    card(id, index, MIB).used(1, MIB * u64::from(cores) / 100, cores)
}

/// A workload of one card at `cores` % cores and memory under the given policies.
fn workload(cores: u32, node_policy: &str, gpu_policy: &str, m: &Arc<WorkloadMix>) -> Workload {
    let c = cores.to_string();
    pod()
        .ann("hami.io/node-scheduler-policy", node_policy)
        .ann("hami.io/gpu-scheduler-policy", gpu_policy)
        .container(&[("gpu", "1"), ("cores", &c), ("pct", &c)])
        .workload()
        .with_mix(m.clone())
}

fn fgd(cores: u32, m: &Arc<WorkloadMix>) -> Workload {
    workload(cores, "fgd", "fgd", m)
}

/// (chosen node, chosen card ids).
fn chosen(s: &Snapshot, w: &Workload) -> (String, Vec<String>) {
    let (n, cards) = common::place(s, w).expect("placed");
    (n, cards.into_iter().flatten().collect())
}

/// Expected fragmentation of every node, before and after (in cores), by name.
fn fragmentation(s: &Snapshot, w: &Workload) -> Vec<(String, f64, f64)> {
    let e = evaluate(s, w, DecideOptions::default());
    let mut out: Vec<(String, f64, f64)> = e
        .feasible
        .iter()
        .map(|f| {
            let fr = f.score.fragmentation.expect("fgd reports fragmentation");
            (s[f.node].name().to_owned(), fr.before(), fr.after())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn example_1_nodes() -> Vec<NodeSpec> {
    vec![
        NodeSpec::new("n1", vec![share("n1-0", 0, 50), card("n1-1", 1, MIB)]),
        node("n2", 2, MIB),
        NodeSpec::new("n3", vec![share("n3-0", 0, 80)]),
    ]
}

#[test]
fn example_1_the_measure() {
    let s = snapshot(example_1_nodes());
    // Explained: the measure of every node before the placement, shape by shape.
    let w = fgd(50, &m1());
    let e = evaluate(&s, &w, DecideOptions::explained());
    let before = |name: &str| {
        let ex = e
            .explanations
            .iter()
            .find(|x| s[x.node].name() == name)
            .and_then(|x| x.fragmentation.clone())
            .expect("explained fragmentation");
        let b = &ex.before;
        let cores: Vec<u64> = b.shapes.iter().map(|p| p.cores).collect();
        let hostable: Vec<bool> = b.shapes.iter().map(|p| p.hostable).collect();
        (
            b.weighted as f64 / ex.total_weight as f64,
            b.free_cores,
            cores,
            hostable,
        )
    };
    let (f, free, cores, hostable) = before("n1");
    assert!(close(f, 45.0), "{f}");
    assert_eq!(free, 150);
    assert_eq!(cores, vec![0, 50, 150]);
    assert_eq!(hostable, vec![true, true, false]);
    assert_eq!(before("n2").0, 0.0);
    let (f3, free3, cores3, _) = before("n3");
    assert!(close(f3, 20.0));
    assert_eq!((free3, cores3), (20, vec![20, 20, 20]));
}

#[test]
fn example_2_node_and_cards() {
    let s = snapshot(example_1_nodes());
    let w = fgd(50, &m1());
    assert_eq!(chosen(&s, &w), ("n1".into(), vec!["n1-0".into()]));
    let fr = fragmentation(&s, &w);
    assert_eq!(fr.len(), 2, "n3 fails");
    assert!(close(fr[0].1, 45.0) && close(fr[0].2, 20.0), "{fr:?}");
    assert!(close(fr[1].1, 0.0) && close(fr[1].2, 45.0), "{fr:?}");
    assert_eq!(
        common::failure_text(&s, &w, "n3").as_deref(),
        Some("1/1 CardInsufficientMemory")
    );
    let e = evaluate(&s, &w, DecideOptions::default());
    let norm: Vec<(String, u32)> = e
        .feasible
        .iter()
        .map(|f| (s[f.node].name().to_owned(), f.normalized))
        .collect();
    assert_eq!(norm, vec![("n1".into(), 100), ("n2".into(), 0)]);
    // The card's Δ: taking GPU-1 of n1 would leave it at 50 (Δ +5), worse than GPU-0 (-25).
    let only_n1 = snapshot(vec![example_1_nodes().remove(0)]);
    let a = allocate(&only_n1, &w, DecideOptions::default());
    let f = a
        .placement
        .expect("placed")
        .score
        .fragmentation
        .expect("fgd");
    assert!(close(f.delta(), -25.0));
    // Spread cards on n1 take GPU-1: 45 -> 50.
    let spread_cards = workload(50, "fgd", "spread", &m1());
    let a = allocate(&only_n1, &spread_cards, DecideOptions::default());
    let f = a
        .placement
        .expect("placed")
        .score
        .fragmentation
        .expect("fgd");
    assert!(close(f.after(), 50.0), "{}", f.after());
}

#[test]
fn example_3_binpack_leaves_a_sliver_fgd_does_not() {
    let s = snapshot(vec![
        NodeSpec::new("m1", vec![share("m1-0", 0, 50)]),
        NodeSpec::new("m2", vec![share("m2-0", 0, 60)]),
    ]);
    let binpack = workload(10, "binpack", "binpack", &m2());
    assert_eq!(chosen(&s, &binpack).0, "m2");
    let a = allocate(&s, &binpack, DecideOptions::default());
    assert!((a.placement.expect("placed").score.raw - 15.9995).abs() < 1e-4);
    let w = fgd(10, &m2());
    assert_eq!(chosen(&s, &w).0, "m1");
    let fr = fragmentation(&s, &w);
    assert_eq!(
        fr,
        vec![("m1".into(), 0.0, 0.0), ("m2".into(), 0.0, 30.0)],
        "m2 would keep 30 cores d cannot use"
    );
}

#[test]
fn example_4_ties_go_to_the_higher_node_score_then_the_name() {
    let s = snapshot(vec![
        NodeSpec::new("p1", vec![share("p1-0", 0, 20)]),
        node("p2", 1, MIB),
    ]);
    let w = fgd(10, &m2());
    assert_eq!(chosen(&s, &w).0, "p1");
    let e = evaluate(&s, &w, DecideOptions::default());
    let scores: Vec<(String, f64)> = e
        .feasible
        .iter()
        .map(|f| (s[f.node].name().to_owned(), f.score.raw))
        .collect();
    assert_eq!(scores[0].0, "p1");
    assert!((scores[0].1 - 7.9993).abs() < 1e-4 && (scores[1].1 - 2.9998).abs() < 1e-4);
    // Identical nodes: the smaller name.
    let s = snapshot(vec![node("b", 1, MIB), node("a", 1, MIB)]);
    assert_eq!(chosen(&s, &w).0, "a");
}

#[test]
fn example_5_cards_inside_a_node() {
    let s = snapshot(vec![NodeSpec::new(
        "n",
        vec![share("GPU-0", 0, 60), share("GPU-1", 1, 50)],
    )]);
    let binpack = workload(10, "binpack", "binpack", &m2());
    assert_eq!(chosen(&s, &binpack).1, vec!["GPU-0".to_owned()]);
    let w = workload(10, "binpack", "fgd", &m2());
    assert_eq!(chosen(&s, &w).1, vec!["GPU-1".to_owned()]);
    let explained = allocate(&s, &w, DecideOptions::explained());
    let ex = &explained.explanations[0].containers[0].cards;
    let order: Vec<usize> = ex.iter().map(|c| c.card).collect();
    assert_eq!(
        order,
        vec![1, 0],
        "GPU-1 (Δ 0) is visited before GPU-0 (Δ +30)"
    );
    // Under node fgd too, the node's Δ is the chosen card's.
    let w = fgd(10, &m2());
    let a = allocate(&s, &w, DecideOptions::default());
    let f = a
        .placement
        .expect("placed")
        .score
        .fragmentation
        .expect("fgd");
    assert!(close(f.delta(), 0.0));
}

fn host_node(name: &str, cpu: i64) -> NodeSpec {
    NodeSpec {
        host: Some(HostResources {
            free_cpu_milli: cpu,
            free_mem_mib: 1 << 20,
        }),
        ..node(name, 1, MIB)
    }
}

fn m3() -> Arc<WorkloadMix> {
    mix(vec![MixShape {
        cpu_milli: 8_000,
        ..shape(1, 50, 1000)
    }])
}

fn cpu_pod(cpu: &str) -> Workload {
    pod()
        .ann("hami.io/node-scheduler-policy", "fgd")
        .ann("hami.io/gpu-scheduler-policy", "fgd")
        .container(&[("gpu", "1"), ("cores", "50"), ("pct", "50"), ("cpu", cpu)])
        .workload()
        .with_mix(m3())
}

#[test]
fn example_6_host_cpu() {
    let w = cpu_pod("2");
    assert_eq!(w.host.cpu_milli, 2_000);
    let s = snapshot(vec![host_node("h1", 16_000), host_node("h2", 4_000)]);
    assert_eq!(chosen(&s, &w).0, "h2");
    let fr = fragmentation(&s, &w);
    assert_eq!(
        fr,
        vec![("h1".into(), 0.0, 0.0), ("h2".into(), 100.0, 50.0)]
    );
    // Without host resources the nodes tie: the smaller name.
    let s = snapshot(vec![node("h1", 1, MIB), node("h2", 1, MIB)]);
    assert_eq!(chosen(&s, &w).0, "h1");
}

/// Example 9 of 12.7: `Δ` in steps of `FRAG_STEP_CORES`, then the host match.
#[test]
fn example_9_steps_of_four_cores_then_the_host_match() {
    assert_eq!(gpusched_engine::FRAG_STEP_CORES, 4);
    // d: 1 card 40 cores, p 0.05; e: 1 card 10 cores, p 0.95.
    let m = mix(vec![shape(1, 40, 50), shape(1, 10, 950)]);
    let with_cpu = |name: &str, cards: Vec<Card>, cpu: i64| NodeSpec {
        host: Some(HostResources {
            free_cpu_milli: cpu,
            free_mem_mib: 1 << 20,
        }),
        ..NodeSpec::new(name, cards)
    };
    let s = snapshot(vec![
        with_cpu("s1", vec![share("s1-0", 0, 55)], 4_500),
        with_cpu("s2", vec![card("s2-0", 0, MIB)], 64_000),
    ]);
    let w = pod()
        .ann("hami.io/node-scheduler-policy", "fgd")
        .ann("hami.io/gpu-scheduler-policy", "fgd")
        .container(&[("gpu", "1"), ("cores", "10"), ("pct", "10"), ("cpu", "1")])
        .workload()
        .with_mix(m.clone());
    let fr = fragmentation(&s, &w);
    assert_eq!(fr[0].0, "s1");
    assert!(close(fr[0].1, 0.0) && close(fr[0].2, 1.75), "{fr:?}");
    assert_eq!(fr[1], ("s2".into(), 0.0, 0.0));
    // 1.75 and 0 are both in step 0: the host match decides. s1: 4,500 / 45 = 100 millicores
    // per free core, the workload's 1,000 / 10: distance 0; s2: 640 per core, distance 540.
    assert_eq!(chosen(&s, &w).0, "s1");
    // Without host resources the nodes tie on the match: the higher node score (s1 again).
    let plain = snapshot(vec![
        NodeSpec::new("s1", vec![share("s1-0", 0, 55)]),
        node("s2", 1, MIB),
    ]);
    assert_eq!(chosen(&plain, &w).0, "s1");
    // With the CPU the other way round, s2 matches: 1,000 / 10 against 10,000 / 100.
    let s = snapshot(vec![
        with_cpu("s1", vec![share("s1-0", 0, 55)], 64_000),
        with_cpu("s2", vec![card("s2-0", 0, MIB)], 10_000),
    ]);
    assert_eq!(chosen(&s, &w).0, "s2");
    // A step apart, the match does not count: d at 60 % (s1 then strands 35 x 0.6 = 21 cores).
    let m = mix(vec![shape(1, 40, 600), shape(1, 10, 400)]);
    let s = snapshot(vec![
        with_cpu("s1", vec![share("s1-0", 0, 55)], 4_500),
        with_cpu("s2", vec![card("s2-0", 0, MIB)], 64_000),
    ]);
    assert_eq!(chosen(&s, &w.clone().with_mix(m)).0, "s2");
}

#[test]
fn example_7_a_shape_that_names_another_type_sees_all_free_compute() {
    let v100 = mix(vec![MixShape {
        card_types: vec!["V100".into()],
        ..shape(1, 50, 1000)
    }]);
    let t4 = |name: &str| NodeSpec::new(name, vec![card(name, 0, MIB).typed("Tesla-T4")]);
    let s = snapshot(vec![t4("t")]);
    let fr = fragmentation(&s, &fgd(30, &v100));
    assert_eq!(fr, vec![("t".into(), 100.0, 70.0)]);
    let lower = mix(vec![MixShape {
        card_types: vec!["t4".into()],
        ..shape(1, 50, 1000)
    }]);
    let fr = fragmentation(&s, &fgd(30, &lower));
    assert_eq!(
        fr,
        vec![("t".into(), 0.0, 0.0)],
        "types match case-insensitively"
    );
}

#[test]
fn example_8_invalid_mixes_name_the_field() {
    let err = |shapes: Vec<MixShape>| {
        WorkloadMix::new(shapes)
            .expect_err("invalid")
            .violations
            .into_iter()
            .map(|v| (v.field, v.kind))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        err(vec![]),
        vec![("shapes".into(), ViolationKind::MissingField)]
    );
    assert_eq!(
        err(vec![shape(0, 10, 1)]),
        vec![("shapes[0].gpu_count".into(), ViolationKind::OutOfRange)]
    );
    assert_eq!(
        err(vec![MixShape {
            cores: 101,
            mem_percent: 101,
            card_types: vec![" ".into()],
            ..shape(1, 10, 1)
        }]),
        vec![
            (
                "shapes[0].gpucores_percent".into(),
                ViolationKind::OutOfRange
            ),
            ("shapes[0].gpumem_percent".into(), ViolationKind::OutOfRange),
            ("shapes[0].gpu_types[0]".into(), ViolationKind::MissingField),
        ]
    );
    assert_eq!(
        err(vec![shape(1, 10, 0)]),
        vec![("shapes".into(), ViolationKind::InvalidWorkloadMix)]
    );
    assert_eq!(
        err((0..65).map(|_| shape(1, 10, 1)).collect()),
        vec![("shapes".into(), ViolationKind::LimitExceeded)]
    );
    assert_eq!(
        err(vec![MixShape {
            weight: 1_000_000_001,
            ..shape(1, 10, 1)
        }]),
        vec![("shapes[0].weight".into(), ViolationKind::InvalidWorkloadMix)]
    );
}

#[test]
fn the_policy_parses_from_annotations_and_host_requests_only_under_fgd() {
    let w = fgd(10, &m2());
    assert_eq!(w.node_policy, NodePolicy::Fgd);
    assert_eq!(w.gpu_policy.to_string(), "fgd");
    // Kubernetes' effective request: app containers summed, init containers' largest.
    let w = pod()
        .ann("hami.io/node-scheduler-policy", "fgd")
        .container(&[("gpu", "1"), ("cpu", "500m"), ("memory", "1Gi")])
        .container(&[("cpu", "1.5"), ("memory", "512Mi")])
        .init(&[("cpu", "3"), ("memory", "1")])
        .workload();
    assert_eq!((w.host.cpu_milli, w.host.mem_mib), (3_000, 1_536));
    let bad = pod()
        .ann("hami.io/node-scheduler-policy", "fgd")
        .container(&[("gpu", "1"), ("cpu", "lots")]);
    let v = bad.parse().expect_err("malformed cpu").violations;
    assert_eq!(v[0].field, "containers[0].limits[\"cpu\"]");
    assert_eq!(v[0].kind, ViolationKind::InvalidResourceRequest);
    // Under the other policies host requests are not read at all.
    let binpack = pod().container(&[("gpu", "1"), ("cpu", "lots")]).workload();
    assert_eq!(binpack.host.cpu_milli, 0);
    let e = "fgd,binpack"
        .parse::<NodePolicy>()
        .expect_err("a node policy is one value");
    assert!(e.to_string().contains("binpack, spread, fgd"), "{e}");
}

#[test]
fn without_a_mix_fgd_measures_nothing_and_its_tie_breaks_decide() {
    let s = snapshot(vec![
        NodeSpec::new("m1", vec![share("m1-0", 0, 50)]),
        NodeSpec::new("m2", vec![share("m2-0", 0, 60)]),
    ]);
    let w = pod()
        .ann("hami.io/node-scheduler-policy", "fgd")
        .container(&[("gpu", "1"), ("cores", "10"), ("pct", "10")])
        .workload();
    assert!(w.mix().is_none());
    // Δ 0 everywhere: the higher node score (binpack's choice).
    assert_eq!(chosen(&s, &w).0, "m2");
}

#[test]
fn batches_and_bookings_carry_the_host_request() {
    let w = cpu_pod("2");
    let s = snapshot(vec![host_node("h1", 16_000)]);
    let out = allocate_batch(
        s.clone(),
        &[w.clone(), w.clone()],
        BatchMode::Independent,
        DecideOptions::default(),
    );
    assert!(out.all_placed);
    let h = out.snapshot.node_named("h1").and_then(|n| n.host());
    assert_eq!(h.map(|h| h.free_cpu_milli), Some(12_000));
    // apply and release: exact inverses, host included.
    let mut booked = s.clone();
    let p = allocate(&s, &w, DecideOptions::default())
        .placement
        .expect("placed");
    assert_eq!(p.host.cpu_milli, 2_000);
    apply(&mut booked, &p).expect("applies");
    assert_eq!(
        booked
            .node_named("h1")
            .and_then(|n| n.host())
            .map(|h| h.free_cpu_milli),
        Some(14_000)
    );
    release(&mut booked, &p).expect("releases");
    assert_eq!(booked, s);
}

#[test]
fn explanations_show_before_and_after_per_shape() {
    let s = snapshot(example_1_nodes());
    let w = fgd(50, &m1());
    let a = allocate(&s, &w, DecideOptions::explained());
    let ex = a.explanations[0].fragmentation.clone().expect("explained");
    let after = ex.after.expect("fits");
    assert_eq!(ex.before.weighted, 45 * 1_000_000_000);
    assert_eq!(after.weighted, 20 * 1_000_000_000);
    let parts: Vec<(u64, bool)> = after.shapes.iter().map(|p| (p.cores, p.hostable)).collect();
    assert_eq!(parts, vec![(0, true), (0, true), (100, false)]);
    // A node that does not fit has no "after".
    let e = evaluate(&s, &w, DecideOptions::explained());
    let n3 = e
        .explanations
        .iter()
        .find(|x| s[x.node].name() == "n3")
        .and_then(|x| x.fragmentation.clone())
        .expect("explained");
    assert!(n3.after.is_none());
}

#[test]
fn probabilities_become_weights_and_must_be_a_distribution() {
    let one = |p: f64| (p, shape(1, 10, 0));
    let m = WorkloadMix::from_probabilities(vec![one(0.25), one(0.75)]).expect("valid");
    let w: Vec<u64> = m.shapes().iter().map(|s| s.weight).collect();
    assert_eq!(w, vec![250_000_000, 750_000_000]);
    // Within the tolerance.
    assert!(WorkloadMix::from_probabilities(vec![one(0.5), one(0.5000009)]).is_ok());
    let err = |v: Vec<(f64, MixShape)>| {
        WorkloadMix::from_probabilities(v)
            .expect_err("invalid")
            .violations
            .into_iter()
            .map(|v| (v.field, v.kind, v.description))
            .collect::<Vec<_>>()
    };
    let e = err(vec![one(0.5), one(0.6)]);
    assert_eq!(
        (e[0].0.as_str(), e[0].1),
        ("shapes", ViolationKind::InvalidWorkloadMix)
    );
    assert!(e[0].2.contains("sum to 1.1"), "{}", e[0].2);
    for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
        let e = err(vec![one(bad), one(0.0)]);
        assert_eq!(e.len(), 1, "only the probability is named: {e:?}");
        assert_eq!(
            (e[0].0.as_str(), e[0].1),
            ("shapes[0].probability", ViolationKind::InvalidWorkloadMix),
            "{bad}"
        );
    }
    let e = err(vec![one(0.0), one(0.0)]);
    assert_eq!(e[0].0, "shapes");
}
