//! Preemption on MIG cards (`docs/placement-semantics.md` sections 9.1 and 9.8.8), property
//! tested over random H100 layouts whose instances are held by placed workloads of random
//! priorities: every victim is of lower priority; with the victims' instances gone the
//! workload gets exactly the answered instance, which overlaps no instance that stays; putting
//! any single victim's instance back makes it not fit; a node that fits as it is has no victims.

#![allow(clippy::unwrap_used)]

mod common;
mod mig_common;

use common::placed::{PlacedExt, held};
use gpusched_engine::{
    Card, DecideOptions, MigInstance, NodeSpec, NodeWorkloads, Occupancy, PreemptLimits,
    PreemptOptions, PreemptVerdict, Snapshot, Workload, allocate, preempt,
};
use mig_common::*;
use proptest::prelude::*;

/// An H100 (every profile allowed) filled by MIG pods of the given sizes, in order, each placed
/// by the engine (those that do not fit are skipped): the card and who holds each instance.
fn filled(sizes: &[u64]) -> (Card, Vec<(String, u32)>) {
    let mut s = gpusched_engine::Snapshot::new(vec![NodeSpec::new(
        "n",
        vec![h100("GPU-0", 0, h100_profiles())],
    )])
    .unwrap();
    for (k, mem) in sizes.iter().enumerate() {
        let _ = place(
            &mut s,
            &mig_pod(&format!("w{k}"), &[("mem", &mem.to_string())]),
        );
    }
    let card = s.node_named("n").unwrap().cards()[0].clone();
    let held: Vec<(String, u32)> = instances(&s, "n", 0)
        .into_iter()
        .filter_map(|(_, start, owner)| owner.map(|o| (o, start)))
        .collect();
    (card, held)
}

/// The card with only the instances whose start is in `keep`.
fn keeping(card: &Card, keep: &[u32]) -> Card {
    let mut c = card.clone();
    c.usage = gpusched_engine::CardUsage::default();
    if let Some(l) = c.mig.as_deref_mut() {
        l.instances.retain(|i| keep.contains(&i.placement.start));
    }
    c
}

fn fits(card: &Card, w: &Workload) -> Option<(String, u32)> {
    let s = Snapshot::new(vec![NodeSpec::new("n", vec![card.clone()])]).unwrap();
    let a = allocate(&s, w, DecideOptions::default());
    first_mig(&a).map(|m| (m.profile, m.placement.start))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn victims_free_exactly_the_room_the_answer_uses(
        sizes in prop::collection::vec(prop::sample::select(vec![5000u64, 15000, 19000, 30000, 40000]), 1..8),
        priorities in prop::collection::vec(-3i32..4, 8),
        want in prop::sample::select(vec![5000u64, 15000, 30000, 40000, 80000]),
        pending in -2i32..5,
    ) {
        let (card, held_by) = filled(&sizes);
        // Each instance's holder gets a priority; one workload per instance.
        let placed: Vec<_> = held_by
            .iter()
            .enumerate()
            .map(|(k, (owner, start))| {
                held(owner, priorities[k % priorities.len()]).instance("GPU-0", *start)
            })
            .collect();
        let priority_of = |id: &str| placed.iter().find(|p| p.id == id).map(|p| p.priority);
        let s = Snapshot::new(vec![NodeSpec::new("n", vec![card.clone()])]).unwrap();
        let occupancy = Occupancy::new(
            &s,
            vec![NodeWorkloads { node: "n".into(), workloads: placed.clone() }],
            &PreemptLimits::default(),
        )
        .unwrap();
        let w = mig_pod("pending", &[("mem", &want.to_string())]);
        let p = preempt(&occupancy, &w, pending, PreemptOptions::default());
        let node = p.node(s.id_of("n").unwrap()).unwrap();
        let all: Vec<u32> = held_by.iter().map(|(_, st)| *st).collect();
        match &node.verdict {
            PreemptVerdict::NotNeeded(_) => {
                prop_assert!(fits(&card, &w).is_some());
            }
            PreemptVerdict::NotCandidate(_) => {
                // Even without every lower-priority holder it does not fit.
                let keep: Vec<u32> = held_by
                    .iter()
                    .filter(|(o, _)| priority_of(o).unwrap() >= pending)
                    .map(|(_, st)| *st)
                    .collect();
                prop_assert!(fits(&card, &w).is_none());
                prop_assert!(fits(&keeping(&card, &keep), &w).is_none());
            }
            PreemptVerdict::Victims(v) => {
                prop_assert!(fits(&card, &w).is_none());
                for id in &v.ids {
                    prop_assert!(priority_of(id).unwrap() < pending, "{id}");
                }
                let gone: Vec<u32> = held_by
                    .iter()
                    .filter(|(o, _)| v.ids.contains(o))
                    .map(|(_, st)| *st)
                    .collect();
                let keep: Vec<u32> = all.iter().copied().filter(|st| !gone.contains(st)).collect();
                let m = v.placement.containers[0].cards[0].mig.clone().unwrap();
                let answered = (m.profile.clone(), m.placement.start);
                prop_assert_eq!(fits(&keeping(&card, &keep), &w), Some(answered));
                // The new instance overlaps none that stays.
                let layout = card.mig.as_deref().unwrap();
                for st in &keep {
                    let i: &MigInstance = layout.instance_at(*st).unwrap();
                    prop_assert!(!i.placement.overlaps(m.placement), "{i:?} {m:?}");
                }
                // No single victim could stay.
                for st in &gone {
                    let mut with = keep.clone();
                    with.push(*st);
                    prop_assert!(fits(&keeping(&card, &with), &w).is_none(), "start {st}");
                }
            }
        }
    }
}
