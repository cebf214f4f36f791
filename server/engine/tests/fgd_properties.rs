//! Invariants of the fragmentation-aware policies (`docs/placement-semantics.md` section 12)
//! over random clusters, mixes and workloads: the measure equals its definition, the choices
//! are the smallest increase, the answer does not depend on the order of nodes, cards or
//! shapes, and a mix changes nothing under the other policies.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use gpusched_engine::{
    Card, CardMode, CardUsage, DecideOptions, GpuToken, HostRequest, HostResources, MixShape, Node,
    NodePolicy, NodeSpec, Snapshot, TypedContainer, TypedSpec, Workload, WorkloadMix, allocate,
    apply, evaluate,
};
use proptest::prelude::*;

mod common;
use common::{decision, reordered, typed};

const TYPES: [&str; 2] = ["NVIDIA-A100", "Tesla-T4"];

fn arb_card(node: usize, i: usize) -> impl Strategy<Value = Card> {
    (
        prop::sample::select(vec![2u32, 4, 10]),
        prop::sample::select(vec![8000u64, 16000]),
        prop::sample::select(vec![100u32, 100, 100, 200]),
        0u32..2,
        prop::bool::weighted(0.9),
        0usize..2,
        (0.0f64..=1.0, 0.0f64..=1.0, 0.0f64..=1.0),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            move |(count, mem, cores, numa, healthy, t, (fu, fm, fc), idle)| {
                let mut c = Card::new(format!("GPU-{node}-{i}"), i as u32, TYPES[t], mem);
                c.count = count;
                c.total_cores = cores;
                c.numa = numa;
                c.healthy = healthy;
                c.mode = CardMode::HamiCore;
                if !idle {
                    // Round usage to tens so that shapes meet it exactly now and then.
                    let step = |total: f64, f: f64| ((total * f) / 10.0).round() * 10.0;
                    c.usage = CardUsage {
                        used: (f64::from(count) * fu).ceil() as u32,
                        used_mem_mib: step(mem as f64, fm) as u64,
                        used_cores: step(f64::from(cores), fc) as u32,
                    };
                }
                c
            },
        )
}

fn arb_node(node: usize) -> impl Strategy<Value = NodeSpec> {
    (
        1usize..5,
        prop::option::weighted(0.4, (0i64..20_000, 0i64..60_000)),
        prop::bool::weighted(0.15),
    )
        .prop_flat_map(move |(n, host, cordon)| {
            let cards: Vec<_> = (0..n).map(|i| arb_card(node, i)).collect();
            cards.prop_map(move |cards| {
                let mut spec = NodeSpec::new(format!("node-{node:02}"), cards);
                spec.host = host.map(|(cpu, mem)| HostResources {
                    free_cpu_milli: cpu,
                    free_mem_mib: mem,
                });
                if cordon {
                    spec.cordoned = vec![spec.cards[0].id.clone()];
                }
                spec
            })
        })
}

fn arb_nodes() -> impl Strategy<Value = Vec<NodeSpec>> {
    (1usize..6).prop_flat_map(|n| (0..n).map(arb_node).collect::<Vec<_>>())
}

fn arb_shape() -> impl Strategy<Value = MixShape> {
    (
        0u64..1000,
        prop::sample::select(vec![1u32, 1, 1, 2, 3]),
        prop::sample::select(vec![0u32, 10, 30, 50, 100]),
        prop::sample::select(vec![0u64, 0, 2000, 6000]),
        prop::sample::select(vec![0u32, 10, 30, 50, 100]),
        prop::sample::select(vec![
            vec![],
            vec![],
            vec!["a100".to_owned()],
            vec!["T4".to_owned(), "x".to_owned()],
        ]),
        prop::sample::select(vec![0u64, 0, 4000, 16000]),
        prop::sample::select(vec![0u64, 0, 8000, 40000]),
    )
        .prop_map(
            |(weight, gpus, cores, mem_mib, mem_percent, card_types, cpu_milli, host_mem_mib)| {
                MixShape {
                    weight: weight + 1,
                    gpus,
                    cores,
                    mem_mib,
                    mem_percent,
                    card_types,
                    cpu_milli,
                    host_mem_mib,
                }
            },
        )
}

fn arb_mix() -> impl Strategy<Value = Vec<MixShape>> {
    prop::collection::vec(arb_shape(), 1..7)
}

fn arb_container() -> impl Strategy<Value = TypedContainer> {
    common::arb_container(
        false,
        vec![1, 1, 1, 2],
        vec![0, 0, 1000, 4000],
        vec![0, 10, 30, 50],
        vec![0, 10, 30, 50, 100],
    )
}

/// A typed workload under the policies, 1-2 app containers, maybe an init container.
fn arb_workload(node: NodePolicy, gpu: Vec<GpuToken>) -> impl Strategy<Value = Workload> {
    (
        prop::collection::vec(arb_container(), 1..3),
        prop::option::weighted(0.2, arb_container()),
    )
        .prop_map(move |(apps, init)| {
            typed(TypedSpec {
                node_policy: Some(node),
                gpu_policy: gpu.clone(),
                init_containers: init.into_iter().collect(),
                containers: apps,
                ..TypedSpec::default()
            })
        })
}

fn with(w: Workload, shapes: &[MixShape]) -> Workload {
    w.with_mix(Arc::new(WorkloadMix::new(shapes.to_vec()).unwrap()))
}

/// The definition of section 12.2, written plainly: per shape, count the cards it fits.
fn reference(node: &Node, shapes: &[MixShape], host: Option<HostResources>) -> u128 {
    let mix = WorkloadMix::new(shapes.to_vec()).unwrap();
    let counted = |pos: usize, c: &Card| {
        c.healthy
            && !node.is_cordoned(pos)
            && c.count > 0
            && c.total_mem_mib > 0
            && c.total_cores > 0
            && c.mode != CardMode::Mig
    };
    let free = |c: &Card| u64::from(c.total_cores.saturating_sub(c.usage.used_cores));
    let total_free: u64 = node
        .cards()
        .iter()
        .enumerate()
        .filter(|(p, c)| counted(*p, c))
        .map(|(_, c)| free(c))
        .sum();
    let mut f: u128 = 0;
    for (i, s) in shapes.iter().enumerate() {
        let fits = |c: &Card| {
            let u = c.usage;
            let need = if s.mem_mib > 0 {
                s.mem_mib
            } else {
                let p = if s.mem_percent == 0 {
                    100
                } else {
                    s.mem_percent
                };
                c.total_mem_mib * u64::from(p) / 100
            };
            mix.accepts_type(i, &c.card_type)
                && u.used < c.count
                && i128::from(c.total_mem_mib) - i128::from(u.used_mem_mib) >= i128::from(need)
                && i64::from(c.total_cores) - i64::from(u.used_cores) >= i64::from(s.cores)
                && !(c.total_cores == 100 && s.cores == 100 && u.used > 0)
                && !(u.used_cores == c.total_cores && s.cores == 0)
        };
        let mut count = 0u32;
        let mut usable = 0u64;
        for (p, c) in node.cards().iter().enumerate() {
            if counted(p, c) && fits(c) {
                count += 1;
                usable += free(c);
            }
        }
        let host_ok = host.is_none_or(|h| {
            i128::from(s.cpu_milli) <= i128::from(h.free_cpu_milli.max(0))
                && i128::from(s.host_mem_mib) <= i128::from(h.free_mem_mib.max(0))
        });
        let frag = if count >= s.gpus && host_ok {
            total_free - usable
        } else {
            total_free
        };
        f += u128::from(s.weight) * u128::from(frag);
    }
    f
}

fn host_minus(h: Option<HostResources>, r: HostRequest) -> Option<HostResources> {
    h.map(|h| HostResources {
        free_cpu_milli: h.free_cpu_milli - r.cpu_milli as i64,
        free_mem_mib: h.free_mem_mib - r.mem_mib as i64,
    })
}

fn gpu_policies() -> impl Strategy<Value = Vec<GpuToken>> {
    prop::sample::select(vec![
        vec![GpuToken::Fgd],
        vec![GpuToken::Binpack],
        vec![GpuToken::Spread],
        vec![GpuToken::Numa, GpuToken::Fgd],
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The measure before and after every feasible node's placement is the definition.
    #[test]
    fn the_measure_is_its_definition(
        nodes in arb_nodes(), shapes in arb_mix(),
        w in gpu_policies().prop_flat_map(|g| arb_workload(NodePolicy::Fgd, g)),
    ) {
        let s = Snapshot::new(nodes).unwrap();
        let w = with(w, &shapes);
        let e = evaluate(&s, &w, DecideOptions::default());
        for f in &e.feasible {
            let node = &s[f.node];
            let fr = f.score.fragmentation.unwrap();
            prop_assert_eq!(fr.weighted_before, reference(node, &shapes, node.host()));
            // After: book the placement and measure the node again.
            let mut one = Snapshot::new(vec![node.to_spec()]).unwrap();
            let p = allocate(&one, &w, DecideOptions::default()).placement.unwrap();
            apply(&mut one, &p).unwrap();
            let after = one.nodes().next().unwrap();
            prop_assert_eq!(after.host(), host_minus(node.host(), w.host));
            prop_assert_eq!(fr.weighted_after, reference(after, &shapes, after.host()));
        }
    }

    /// Node policy fgd: no feasible node increases fragmentation by fewer steps of
    /// `FRAG_STEP_CORES` than the chosen one.
    /// GPU policy fgd on a one-card workload: no card does (each card forced by its id).
    #[test]
    fn the_choice_is_the_smallest_increase(
        nodes in arb_nodes(), shapes in arb_mix(), cores in prop::sample::select(vec![0u32, 10, 30, 50, 100]),
    ) {
        let s = Snapshot::new(nodes).unwrap();
        let one = |uuid: Option<String>| with(typed(TypedSpec {
            node_policy: Some(NodePolicy::Fgd),
            gpu_policy: vec![GpuToken::Fgd],
            use_uuids: uuid.into_iter().collect(),
            containers: vec![TypedContainer {
                name: "c".into(), gpus: 1, gpucores: Some(cores), gpumem_percent: cores.max(10), ..Default::default()
            }],
            ..TypedSpec::default()
        }), &shapes);
        let w = one(None);
        let e = evaluate(&s, &w, DecideOptions::default());
        let a = allocate(&s, &w, DecideOptions::default());
        let delta = |f: &gpusched_engine::NodeScore| f.fragmentation.unwrap().weighted_delta();
        // The node policy compares Δ in steps of FRAG_STEP_CORES cores (section 12.3).
        let step = |f: &gpusched_engine::NodeScore| {
            let frag = f.fragmentation.unwrap();
            frag.weighted_delta().div_euclid(
                i128::from(frag.total_weight.max(1)) * i128::from(gpusched_engine::FRAG_STEP_CORES),
            )
        };
        if let Some(p) = &a.placement {
            let chosen = delta(&p.score);
            for f in &e.feasible {
                prop_assert!(step(&p.score) <= step(&f.score));
            }
            // Every card of the chosen node, forced: none gives a smaller Δ.
            let node = &s[p.node];
            let single = Snapshot::new(vec![node.to_spec()]).unwrap();
            for c in node.cards() {
                let forced = allocate(&single, &one(Some(c.id.clone())), DecideOptions::default());
                if let Some(q) = forced.placement {
                    prop_assert!(chosen <= delta(&q.score), "card {} gives {} < {}", c.id, delta(&q.score), chosen);
                }
            }
        } else {
            prop_assert!(e.feasible.is_empty());
        }
    }

    /// The same answer whatever the order of nodes, cards and shapes.
    #[test]
    fn order_does_not_matter(
        nodes in arb_nodes(), shapes in arb_mix(), rot in 0usize..7,
        w in gpu_policies().prop_flat_map(|g| arb_workload(NodePolicy::Fgd, g)),
    ) {
        let a = decision(&Snapshot::new(nodes.clone()).unwrap(), &with(w.clone(), &shapes));
        let mut shuffled = shapes.clone();
        shuffled.reverse();
        let len = shuffled.len();
        shuffled.rotate_left(rot % len);
        let b = decision(&Snapshot::new(reordered(nodes, rot)).unwrap(), &with(w, &shuffled));
        prop_assert_eq!(a, b);
    }

    /// A mix changes nothing under the other policies.
    #[test]
    fn other_policies_ignore_the_mix(
        nodes in arb_nodes(), shapes in arb_mix(),
        w in (
            prop::sample::select(vec![NodePolicy::Binpack, NodePolicy::Spread]),
            prop::sample::select(vec![vec![GpuToken::Binpack], vec![GpuToken::Spread], vec![GpuToken::Mutex]]),
        ).prop_flat_map(|(n, g)| arb_workload(n, g)),
    ) {
        let s = Snapshot::new(nodes).unwrap();
        let plain = allocate(&s, &w, DecideOptions::explained());
        let mixed = allocate(&s, &with(w, &shapes), DecideOptions::explained());
        prop_assert_eq!(plain, mixed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The lone-container shortcut (one app container under node and GPU policy fgd) gives
    /// what the full evaluation gives (explanations take the full path).
    #[test]
    fn the_lone_shortcut_agrees_with_the_full_evaluation(
        nodes in arb_nodes(), shapes in arb_mix(), c in arb_container(),
        host in prop::sample::select(vec![None, Some(("2", "1Gi")), Some(("500m", "64Gi"))]),
    ) {
        let s = Snapshot::new(nodes).unwrap();
        let mut limits = vec![
            ("nvidia.com/gpu".to_owned(), c.gpus.to_string()),
        ];
        if c.gpumem_mib > 0 { limits.push(("nvidia.com/gpumem".into(), c.gpumem_mib.to_string())); }
        if c.gpumem_percent > 0 { limits.push(("nvidia.com/gpumem-percentage".into(), c.gpumem_percent.to_string())); }
        if let Some(k) = c.gpucores { limits.push(("nvidia.com/gpucores".into(), k.to_string())); }
        if let Some((cpu, mem)) = host {
            limits.push(("cpu".into(), cpu.into()));
            limits.push(("memory".into(), mem.into()));
        }
        let mut p = common::pod()
            .ann("hami.io/node-scheduler-policy", "fgd")
            .ann("hami.io/gpu-scheduler-policy", "fgd");
        let pairs: Vec<(&str, &str)> = limits.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        p = p.container(&pairs);
        let w = with(p.workload(), &shapes);
        let quick = evaluate(&s, &w, DecideOptions::default());
        let full = evaluate(&s, &w, DecideOptions::explained());
        prop_assert_eq!(&quick.feasible, &full.feasible);
        prop_assert_eq!(&quick.failed, &full.failed);
        let a = allocate(&s, &w, DecideOptions::default());
        let b = allocate(&s, &w, DecideOptions::explained());
        prop_assert_eq!(a.placement, b.placement);
    }
}
