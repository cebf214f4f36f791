//! Invariants of MIG placement over random H100/H200 cards, instances and workloads (proptest,
//! `docs/placement-semantics.md` section 11): never two overlapping instances on a card after
//! any sequence of apply and release, the smallest covering allowed profile with a free place is
//! always the one chosen (checked against a brute-force reading of 11.4), and the answer does not
//! depend on the order of profiles, placements, instances, cards or nodes.

#![allow(clippy::unwrap_used)]

mod common;
mod mig_common;

use gpusched_engine::{
    Allocation, Card, DecideOptions, MigInstance, MigLayout, MigProfile, Node, NodeSpec, Snapshot,
    Workload, allocate, apply, release,
};
use mig_common::*;
use proptest::prelude::*;

/// Fills a layout with instances: each `(profile, in use)` at the first placement of the
/// profile (from the bottom) that overlaps nothing; skipped when there is none.
fn with_instances(mut layout: MigLayout, wanted: &[(usize, bool)]) -> MigLayout {
    for (i, &(k, in_use)) in wanted.iter().enumerate() {
        let Some(p) = layout.profiles.get(k % layout.profiles.len()).cloned() else {
            continue;
        };
        let of_p = layout
            .instances
            .iter()
            .filter(|x| x.profile == p.name)
            .count();
        if of_p >= p.max_instances as usize {
            continue;
        }
        let free = p.placements.iter().copied().find(|&s| {
            let pl = p.placement(s);
            !layout.instances.iter().any(|x| x.placement.overlaps(pl))
        });
        if let Some(start) = free {
            let inst = if in_use {
                MigInstance::in_use(p.name.clone(), p.placement(start), format!("old/{i}"))
            } else {
                MigInstance::free(p.name.clone(), p.placement(start))
            };
            layout.instances.push(inst);
        }
    }
    layout
}

fn arb_card(node: usize, i: usize) -> impl Strategy<Value = Card> {
    (
        prop::bool::ANY,
        0u8..=127,
        prop::collection::vec((0usize..7, prop::bool::ANY), 0..6),
        prop::bool::weighted(0.15),
    )
        .prop_map(move |(h200, allow, wanted, core)| {
            let id = format!("GPU-{node}-{i}");
            let idx = u32::try_from(i).unwrap();
            if core {
                return Card::new(id, idx, "NVIDIA H100 80GB HBM3", H100_MIB);
            }
            let (profiles, mem, ty) = if h200 {
                (h200_profiles(), H200_MIB, "NVIDIA H200 141GB HBM3e")
            } else {
                (h100_profiles(), H100_MIB, "NVIDIA H100 80GB HBM3")
            };
            let profiles: Vec<MigProfile> = profiles
                .into_iter()
                .enumerate()
                // Most profiles allowed; the allow mask takes a few away.
                .map(|(k, mut p)| {
                    p.allowed = allow & (1 << k) != 0 || k % 2 == 0;
                    p
                })
                .collect();
            let layout = with_instances(MigLayout::new(7, 8, profiles), &wanted);
            mig_card(&id, idx, ty, mem, layout.profiles.clone(), layout.instances)
        })
}

fn arb_nodes() -> impl Strategy<Value = Vec<NodeSpec>> {
    (1usize..=3).prop_flat_map(|n| {
        (0..n)
            .map(|node| {
                (1usize..=3).prop_flat_map(move |cards| {
                    (0..cards)
                        .map(|i| arb_card(node, i))
                        .collect::<Vec<_>>()
                        .prop_map(move |cards| NodeSpec::new(format!("node-{node}"), cards))
                })
            })
            .collect::<Vec<_>>()
    })
}

#[derive(Clone, Debug)]
struct Ask {
    mem: Option<u64>,
    pct: Option<u32>,
    cores: Option<u32>,
    gpus: u32,
}

fn arb_ask() -> impl Strategy<Value = Ask> {
    (
        prop::option::weighted(
            0.7,
            prop::sample::select(vec![
                4_000u64, 9_000, 9_984, 15_000, 20_096, 30_000, 40_448, 60_000, 90_000, 150_000,
            ]),
        ),
        prop::option::weighted(0.2, prop::sample::select(vec![10u32, 25, 50, 100])),
        prop::option::weighted(0.2, prop::sample::select(vec![0u32, 20, 40, 50, 100])),
        prop::sample::select(vec![1u32, 1, 1, 2]),
    )
        .prop_map(|(mem, pct, cores, gpus)| Ask {
            mem,
            pct,
            cores,
            gpus,
        })
}

fn workload(name: &str, policy: &str, asks: &[Ask]) -> Workload {
    let limits: Vec<Vec<(String, String)>> = asks
        .iter()
        .map(|a| {
            let mut l = vec![("gpu".to_owned(), a.gpus.to_string())];
            if let Some(m) = a.mem {
                l.push(("mem".into(), m.to_string()));
            }
            if let Some(p) = a.pct {
                l.push(("pct".into(), p.to_string()));
            }
            if let Some(c) = a.cores {
                l.push(("cores".into(), c.to_string()));
            }
            l
        })
        .collect();
    let refs: Vec<Vec<(&str, &str)>> = limits
        .iter()
        .map(|l| l.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
        .collect();
    let containers: Vec<&[(&str, &str)]> = refs.iter().map(Vec::as_slice).collect();
    pod_with(
        name,
        &[
            ("nvidia.com/vgpu-mode", "mig"),
            ("hami.io/gpu-scheduler-policy", policy),
        ],
        &[],
        &containers,
    )
}

fn arb_workloads() -> impl Strategy<Value = Vec<Workload>> {
    prop::collection::vec(
        (
            prop::sample::select(vec!["binpack", "spread"]),
            prop::collection::vec(arb_ask(), 1..=2),
        ),
        1..8,
    )
    .prop_map(|ws| {
        ws.iter()
            .enumerate()
            .map(|(i, (policy, asks))| workload(&format!("w{i}"), policy, asks))
            .collect()
    })
}

/// Every MIG card of the snapshot: instances pairwise disjoint, each at a placement its
/// profile allows, within the profile's instance count, and the usage that of the instances;
/// the node validates again from its own spec.
fn assert_sound(s: &Snapshot) {
    for node in s.nodes() {
        for card in node.cards() {
            let Some(l) = card.mig.as_deref() else {
                continue;
            };
            for (a, x) in l.instances.iter().enumerate() {
                for y in l.instances.iter().skip(a + 1) {
                    assert!(
                        !x.placement.overlaps(y.placement),
                        "{}: {x:?} overlaps {y:?}",
                        card.id
                    );
                }
                let p = l.profile(&x.profile).unwrap();
                assert!(p.placements.contains(&x.placement.start));
                assert_eq!(x.placement.size, p.memory_slices);
            }
            for p in &l.profiles {
                let n = l.instances.iter().filter(|i| i.profile == p.name).count();
                assert!(n <= p.max_instances as usize, "{}: {}", card.id, p.name);
            }
            assert_eq!(Some(card.usage), card.mig_usage(), "{}", card.id);
        }
        Node::new(node.to_spec()).unwrap();
    }
}

/// 11.3: whether `p` covers the (single-container) ask on a layout of 8 memory slices.
fn covers(p: &MigProfile, ask: &Ask) -> bool {
    let memory = match (ask.mem, ask.pct) {
        (Some(m), _) => p.mem_mib >= m,
        (None, Some(pct)) => p.memory_slices * 100 >= pct * 8,
        (None, None) => p.memory_slices * 100 >= 100 * 8,
    };
    memory && p.cores >= ask.cores.unwrap_or(0)
}

/// 11.4 by brute force: the profile and start a one-card ask gets on `card` as it is.
fn expected(card: &Card, ask: &Ask) -> Option<(String, u32, bool)> {
    let l = card.mig.as_deref()?;
    let mut order: Vec<&MigProfile> = l.profiles.iter().collect();
    order.sort_by_key(|p| (p.mem_mib, p.compute_slices, p.memory_slices, p.name.clone()));
    for p in order {
        if !covers(p, ask) || !p.allowed {
            continue;
        }
        let high = p.compute_slices == 1 || p.compute_slices == 3;
        let mut free: Vec<u32> = l
            .instances
            .iter()
            .filter(|i| i.profile == p.name && !i.is_in_use())
            .map(|i| i.placement.start)
            .collect();
        free.sort_unstable();
        if high {
            free.reverse();
        }
        if let Some(&s) = free.first() {
            return Some((p.name.clone(), s, true));
        }
        let count = l.instances.iter().filter(|i| i.profile == p.name).count();
        if count >= p.max_instances as usize {
            continue;
        }
        let mut starts = p.placements.clone();
        starts.sort_unstable();
        if high {
            starts.reverse();
        }
        for s in starts {
            let pl = p.placement(s);
            if !l.instances.iter().any(|i| i.placement.overlaps(pl)) {
                return Some((p.name.clone(), s, false));
            }
        }
    }
    None
}

/// The answer in names: node, and per container the (card id, profile, start, reused).
type Answer = Option<(String, Vec<Vec<(String, String, u32, bool)>>)>;

fn answer(s: &Snapshot, a: &Allocation) -> Answer {
    let p = a.placement.as_ref()?;
    let node = &s[p.node];
    Some((
        node.name().to_owned(),
        p.containers
            .iter()
            .map(|c| {
                c.cards
                    .iter()
                    .map(|k| {
                        let m = k.mig.clone().unwrap();
                        (
                            node.cards()[k.card].id.clone(),
                            m.profile,
                            m.placement.start,
                            m.reused,
                        )
                    })
                    .collect()
            })
            .collect(),
    ))
}

/// The same nodes in another order of everything a MIG answer must not depend on.
fn shuffled(nodes: &[NodeSpec], rot: usize) -> Vec<NodeSpec> {
    let mut out: Vec<NodeSpec> = nodes
        .iter()
        .map(|n| {
            let mut n = n.clone();
            let k = rot % n.cards.len().max(1);
            n.cards.rotate_left(k);
            for c in &mut n.cards {
                if let Some(l) = c.mig.as_deref_mut() {
                    let k = rot % l.profiles.len().max(1);
                    l.profiles.rotate_left(k);
                    l.profiles.reverse();
                    for p in &mut l.profiles {
                        p.placements.reverse();
                    }
                    l.instances.reverse();
                }
            }
            n
        })
        .collect();
    let k = rot % out.len().max(1);
    out.rotate_left(k);
    out.reverse();
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// No sequence of allocations, applies and releases ever leaves two overlapping instances.
    #[test]
    fn never_two_overlapping_instances(nodes in arb_nodes(), ws in arb_workloads(), drop in prop::collection::vec(prop::bool::ANY, 8)) {
        let mut s = Snapshot::new(nodes).unwrap();
        assert_sound(&s);
        let mut placed = Vec::new();
        for (w, d) in ws.iter().zip(drop.iter().cycle()) {
            let a = allocate(&s, w, DecideOptions::default());
            if let Some(p) = a.placement {
                apply(&mut s, &p).unwrap();
                placed.push((p, *d));
            }
            assert_sound(&s);
        }
        for (p, _) in placed.iter().filter(|(_, d)| *d) {
            release(&mut s, p).unwrap();
            assert_sound(&s);
        }
        // What is left can still be released, the other way round, back to the start.
        for (p, _) in placed.iter().rev().filter(|(_, d)| !*d) {
            release(&mut s, p).unwrap();
        }
        assert_sound(&s);
        prop_assert!(s.nodes().flat_map(|n| n.cards()).all(|c| c.mig.as_deref().is_none_or(
            |l| l.instances.iter().all(|i| i.in_use_by.as_deref().is_none_or(|o| o.starts_with("old/"))))));
    }

    /// A one-card ask gets the smallest covering allowed profile with a free place, at the
    /// first qualifying start in its scan order (11.4), on whichever card it lands.
    #[test]
    fn the_smallest_fitting_profile_is_chosen(nodes in arb_nodes(), ask in arb_ask(), policy in prop::sample::select(vec!["binpack", "spread"])) {
        let ask = Ask { gpus: 1, ..ask };
        let s = Snapshot::new(nodes).unwrap();
        let w = workload("w", policy, std::slice::from_ref(&ask));
        let a = allocate(&s, &w, DecideOptions::default());
        let fits_somewhere = s.nodes().flat_map(|n| n.cards()).any(|c| {
            c.healthy && c.usage.used < c.count && expected(c, &ask).is_some()
        });
        prop_assert_eq!(a.placement.is_some(), fits_somewhere);
        if let Some(p) = &a.placement {
            let k = &p.containers[0].cards[0];
            let card = &s[p.node].cards()[k.card];
            let m = k.mig.clone().unwrap();
            prop_assert_eq!(expected(card, &ask), Some((m.profile.clone(), m.placement.start, m.reused)));
            let profile = card.mig.as_deref().unwrap().profile(&m.profile).unwrap();
            prop_assert_eq!((k.mem_mib, k.cores), (profile.mem_mib, profile.cores));
        }
    }

    /// The same answer whatever the order of nodes, cards, profiles, placements and instances.
    #[test]
    fn the_answer_does_not_depend_on_input_order(nodes in arb_nodes(), ws in arb_workloads(), rot in 0usize..5) {
        let mut s = Snapshot::new(nodes.clone()).unwrap();
        let mut t = Snapshot::new(shuffled(&nodes, rot)).unwrap();
        for w in &ws {
            let a = allocate(&s, w, DecideOptions::default());
            let b = allocate(&t, w, DecideOptions::default());
            prop_assert_eq!(answer(&s, &a), answer(&t, &b));
            if let (Some(p), Some(q)) = (&a.placement, &b.placement) {
                prop_assert_eq!(p.score.raw.to_bits(), q.score.raw.to_bits());
                apply(&mut s, p).unwrap();
                apply(&mut t, q).unwrap();
            }
        }
    }

    /// Release is the exact inverse of apply on MIG cards too.
    #[test]
    fn release_undoes_apply(nodes in arb_nodes(), ws in arb_workloads()) {
        let start = Snapshot::new(nodes).unwrap();
        let mut s = start.clone();
        let mut placed = Vec::new();
        for w in &ws {
            if let Some(p) = allocate(&s, w, DecideOptions::default()).placement {
                apply(&mut s, &p).unwrap();
                placed.push(p);
            }
        }
        for p in placed.iter().rev() {
            release(&mut s, p).unwrap();
        }
        prop_assert_eq!(s, start);
    }
}
