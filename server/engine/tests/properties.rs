//! Invariants over random clusters and workloads (proptest).

#![allow(clippy::unwrap_used)]

use gpusched_engine::{
    BatchMode, BookingError, Card, CardMode, CardUsage, DecideOptions, GpuToken, NodePolicy,
    NodeSpec, NodeVerdict, PairScore, PreparedWorkload, ScoringWeights, Snapshot, TypedContainer,
    TypedSpec, Workload, allocate, allocate_batch, apply, evaluate, release,
};
use proptest::prelude::*;

mod common;
use common::{decision, reordered, typed};

fn arb_card(node: usize, i: usize) -> impl Strategy<Value = Card> {
    (
        1u32..=10,
        prop::sample::select(vec![4000u64, 8000, 16000]),
        prop::sample::select(vec![100u32, 100, 100, 200]),
        0u32..3,
        prop::bool::weighted(0.9),
        0u32..4,
        (0.0f64..=1.0, 0.0f64..=1.0, 0.0f64..=1.0),
    )
        .prop_map(
            move |(count, mem, cores, numa, healthy, index, (fu, fm, fc))| {
                let mut c = Card::new(format!("GPU-{node}-{i}"), index, "NVIDIA-A100", mem);
                c.count = count;
                c.total_cores = cores;
                c.numa = numa;
                c.healthy = healthy;
                c.mode = CardMode::HamiCore;
                c.usage = CardUsage {
                    used: (f64::from(count) * fu) as u32,
                    used_mem_mib: (mem as f64 * fm) as u64,
                    used_cores: (f64::from(cores) * fc) as u32,
                };
                if c.usage.used == 0 {
                    c.usage = CardUsage::default();
                }
                c
            },
        )
}

fn arb_node(node: usize) -> impl Strategy<Value = NodeSpec> {
    (0usize..6, prop::bool::ANY, any::<u64>()).prop_flat_map(move |(n, pairs, seed)| {
        let cards: Vec<_> = (0..n).map(|i| arb_card(node, i)).collect();
        cards.prop_map(move |cards| {
            let mut spec = NodeSpec::new(format!("node-{node:02}"), cards);
            if pairs {
                let ids: Vec<String> = spec.cards.iter().map(|c| c.id.clone()).collect();
                for (a, x) in ids.iter().enumerate() {
                    for (b, y) in ids.iter().enumerate() {
                        if a != b {
                            let score = ((seed >> ((a * 7 + b * 3) % 60)) & 0x7f) as i64;
                            spec.pair_scores.push(PairScore {
                                card_id: x.clone(),
                                peer_card_id: y.clone(),
                                score,
                            });
                        }
                    }
                }
            }
            spec
        })
    })
}

fn arb_nodes() -> impl Strategy<Value = Vec<NodeSpec>> {
    (1usize..6).prop_flat_map(|n| (0..n).map(arb_node).collect::<Vec<_>>())
}

fn arb_container(init: bool) -> impl Strategy<Value = TypedContainer> {
    common::arb_container(
        init,
        vec![0, 1, 1, 1, 2, 3],
        vec![0, 0, 500, 2000, 5000],
        vec![0, 0, 10, 40, 100],
        vec![0, 10, 30, 100],
    )
}

fn arb_workload() -> impl Strategy<Value = Workload> {
    let policies = prop::sample::select(vec![
        vec![GpuToken::Binpack],
        vec![GpuToken::Spread],
        vec![GpuToken::Mutex],
        vec![GpuToken::TopologyAware],
        vec![GpuToken::Numa],
        vec![GpuToken::Binpack, GpuToken::Numa],
        vec![GpuToken::Numa, GpuToken::Spread],
        vec![GpuToken::Mutex, GpuToken::Binpack],
        vec![GpuToken::TopologyAware, GpuToken::Binpack],
    ]);
    (
        prop::sample::select(vec![NodePolicy::Binpack, NodePolicy::Spread]),
        policies,
        (0u64..4, 0u64..4, 1u64..4),
        prop::bool::weighted(0.3),
        prop::collection::vec(arb_container(true), 0..2),
        prop::collection::vec(arb_container(false), 1..3),
    )
        .prop_map(
            |(node_policy, gpu_policy, (slot, core, memory), numa_bind, init, apps)| {
                let spec = TypedSpec {
                    node_policy: Some(node_policy),
                    gpu_policy,
                    weights: Some(ScoringWeights { slot, core, memory }),
                    numa_bind,
                    init_containers: init,
                    containers: apps,
                    ..TypedSpec::default()
                };
                typed(spec)
            },
        )
}

fn within_capacity(c: &Card) -> bool {
    c.usage.used <= c.count
        && c.usage.used_mem_mib <= c.total_mem_mib
        && c.usage.used_cores <= c.total_cores
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn never_books_beyond_a_card(nodes in arb_nodes(), ws in prop::collection::vec(arb_workload(), 1..6)) {
        let s = Snapshot::new(nodes).unwrap();
        prop_assume!(s.nodes().flat_map(|n| n.cards()).all(within_capacity));
        let out = allocate_batch(s, &ws, BatchMode::Independent, DecideOptions::default());
        for node in out.snapshot.nodes() {
            for c in node.cards() {
                prop_assert!(within_capacity(c), "over-booked {:?} on {}", c, node.name());
            }
        }
    }

    #[test]
    fn same_answer_whatever_the_order_of_nodes_and_cards(nodes in arb_nodes(), w in arb_workload(), rot in 0usize..7) {
        let s1 = Snapshot::new(nodes.clone()).unwrap();
        let s2 = Snapshot::new(reordered(nodes, rot)).unwrap();
        prop_assert_eq!(decision(&s1, &w), decision(&s2, &w));
    }

    #[test]
    fn filter_feasible_exactly_when_allocate_on_that_node_succeeds(nodes in arb_nodes(), w in arb_workload()) {
        let s = Snapshot::new(nodes).unwrap();
        let e = evaluate(&s, &w, DecideOptions::default());
        for node in s.nodes() {
            let mut only = s.clone();
            only.retain_names(&[node.name().to_owned()]);
            let feasible = e.feasible.iter().any(|f| s[f.node].name() == node.name());
            let a = allocate(&only, &w, DecideOptions::default());
            prop_assert_eq!(feasible, a.placement.is_some() || !a.requests_gpu, "node {}", node.name());
        }
    }

    #[test]
    fn node_choice_follows_the_node_policy(nodes in arb_nodes(), w in arb_workload()) {
        let s = Snapshot::new(nodes).unwrap();
        let e = evaluate(&s, &w, DecideOptions::default());
        let a = allocate(&s, &w, DecideOptions::default());
        if let Some(p) = a.placement {
            for f in &e.feasible {
                match w.node_policy {
                    NodePolicy::Binpack => prop_assert!(f.score.raw <= p.score.raw + 1e-9),
                    NodePolicy::Spread => prop_assert!(f.score.raw >= p.score.raw - 1e-9),
                    // Section 12.3 (its own properties: tests/fgd_properties.rs).
                    NodePolicy::Fgd => {
                        let delta = |s: &gpusched_engine::NodeScore| {
                            s.fragmentation.map_or(0, |f| f.weighted_delta())
                        };
                        prop_assert!(delta(&f.score) >= delta(&p.score));
                    }
                }
            }
            prop_assert_eq!(e.feasible.first().map(|f| f.node), Some(p.node));
        } else {
            prop_assert!(e.feasible.is_empty() || !w.requests_gpu());
        }
    }

    #[test]
    fn quick_feasibility_agrees_with_the_full_card_choice(nodes in arb_nodes(), w in arb_workload()) {
        // Without an explanation a lone container is decided without choosing cards; with one,
        // every card is visited. Both must give the same feasibility, scores and reasons.
        let s = Snapshot::new(nodes).unwrap();
        let quick = evaluate(&s, &w, DecideOptions::default());
        let full = evaluate(&s, &w, DecideOptions::explained());
        prop_assert_eq!(quick.feasible, full.feasible);
        prop_assert_eq!(quick.failed, full.failed);
    }

    #[test]
    fn asking_each_node_agrees_with_evaluate(nodes in arb_nodes(), w in arb_workload()) {
        let s = Snapshot::new(nodes).unwrap();
        let e = evaluate(&s, &w, DecideOptions::default());
        let prepared = PreparedWorkload::new(&w);
        prop_assert_eq!(e.feasible.len() + e.failed.len(), s.len());
        for (id, node) in s.iter() {
            let verdict = prepared.fit(node);
            let feasible = e.feasible.iter().find(|f| f.node == id);
            let failed = e.failed.iter().find(|f| f.node == id);
            match (feasible, failed) {
                (Some(f), None) => prop_assert_eq!(verdict, NodeVerdict::Fits(f.score)),
                (None, Some(f)) => {
                    prop_assert_eq!(verdict, NodeVerdict::DoesNotFit(f.failure.clone()));
                }
                other => prop_assert!(false, "{} is reported {:?}", node.name(), other),
            }
        }
    }

    #[test]
    fn release_is_the_exact_inverse_of_apply(nodes in arb_nodes(), ws in prop::collection::vec(arb_workload(), 1..5)) {
        let s = Snapshot::new(nodes).unwrap();
        let mut current = s.clone();
        let mut placements = Vec::new();
        for w in &ws {
            let Some(p) = allocate(&current, w, DecideOptions::default()).placement else {
                continue;
            };
            let before = current.clone();
            apply(&mut current, &p).unwrap();
            let usage: Vec<CardUsage> = current[p.node].cards().iter().map(|c| c.usage).collect();
            prop_assert_eq!(&usage, &p.final_usage);
            let mut undone = current.clone();
            release(&mut undone, &p).unwrap();
            prop_assert_eq!(&undone, &before);
            placements.push(p);
        }
        // Applying one after another is what a batch does.
        let batch = allocate_batch(s.clone(), &ws, BatchMode::Independent, DecideOptions::default());
        prop_assert_eq!(&batch.snapshot, &current);
        // Bookings add up: releasing them in the order applied also gives the start back.
        for p in &placements {
            release(&mut current, p).unwrap();
        }
        prop_assert_eq!(current, s);
    }

    #[test]
    fn releasing_what_was_never_applied_is_a_typed_error(nodes in arb_nodes(), w in arb_workload()) {
        let s = Snapshot::new(nodes.clone()).unwrap();
        let idle_nodes = nodes
            .into_iter()
            .map(|mut n| {
                for c in &mut n.cards {
                    c.usage = CardUsage::default();
                }
                n
            })
            .collect();
        let idle = Snapshot::new(idle_nodes).unwrap();
        if let Some(p) = allocate(&s, &w, DecideOptions::default()).placement {
            let mut t = idle.clone();
            let err = release(&mut t, &p).unwrap_err();
            prop_assert!(matches!(err, BookingError::NotBooked { .. }), "{:?}", err);
            prop_assert_eq!(t, idle);
        }
    }
}
