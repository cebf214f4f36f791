//! Preemption invariants over random clusters, placed workloads and pending workloads
//! (`docs/placement-semantics.md` sections 9.3 and 9.6), and validation that never panics.

#![allow(clippy::unwrap_used)]

mod common;

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use common::placed::occupied;
use gpusched_engine::{
    Booking, Card, CardUsage, DecideOptions, Defaults, GpuToken, KubeNames, NodePolicy, NodeSpec,
    NodeWorkloads, NotCandidateReason, Occupancy, PlacedWorkload, PreemptChoice, PreemptLimits,
    PreemptOptions, PreemptVerdict, Preemption, PreparedWorkload, ReprieveOutcome, Snapshot,
    TypedContainer, TypedSpec, ViolationKind, Workload, WorkloadMeta, WorkloadSpec, allocate,
    preempt,
};
use proptest::prelude::*;

fn arb_card(node: usize, i: usize) -> impl Strategy<Value = Card> {
    (
        2u32..=6,
        prop::sample::select(vec![8000u64, 16000]),
        0u32..2,
        prop::bool::weighted(0.95),
        0u32..3,
        // Unaccounted usage: usually none.
        prop::option::weighted(0.2, (0u32..2, 0u64..3000, 0u32..20)),
    )
        .prop_map(move |(count, mem, numa, healthy, index, extra)| {
            let mut c = Card::new(format!("GPU-{node}-{i}"), index, "NVIDIA-A100", mem);
            c.count = count;
            c.numa = numa;
            c.healthy = healthy;
            if let Some((used, used_mem_mib, used_cores)) = extra {
                c.usage = CardUsage {
                    used,
                    used_mem_mib,
                    used_cores,
                };
            }
            c
        })
}

fn arb_priority() -> impl Strategy<Value = i32> {
    prop_oneof![
        8 => -2i32..6,
        1 => prop::sample::select(vec![i32::MIN, i32::MAX, -1_000_000, 1_000_000]),
    ]
}

/// A workload placed on a node of `cards` cards: bookings on one or two distinct cards.
fn arb_placed(node: usize, cards: usize, k: usize) -> impl Strategy<Value = PlacedWorkload> {
    (
        arb_priority(),
        prop::bool::weighted(0.2),
        0i64..3,
        prop::collection::btree_set(0..cards.max(1), 1..=2.min(cards.max(1))),
        prop::collection::vec((1u32..=2, 0u64..7000, 0u32..50), 2),
    )
        .prop_map(move |(priority, budget, start, on, sizes)| PlacedWorkload {
            id: format!("w{node}-{k}"),
            priority,
            violates_budget: budget,
            start_time_ms: start,
            bookings: on
                .into_iter()
                .zip(sizes)
                .map(|(c, (slots, mem_mib, cores))| Booking {
                    mig_instance_start: None,
                    card_id: format!("GPU-{node}-{c}"),
                    slots,
                    mem_mib,
                    cores,
                })
                .collect(),
        })
}

fn arb_node(node: usize) -> impl Strategy<Value = (NodeSpec, NodeWorkloads)> {
    (1usize..4).prop_flat_map(move |n| {
        let cards: Vec<_> = (0..n).map(|i| arb_card(node, i)).collect();
        (cards, 0usize..6).prop_flat_map(move |(cards, w)| {
            let placed: Vec<_> = (0..w).map(|k| arb_placed(node, n, k)).collect();
            let cards = cards.clone();
            placed.prop_map(move |placed| occupied(&format!("node-{node}"), cards.clone(), placed))
        })
    })
}

fn arb_cluster() -> impl Strategy<Value = Vec<(NodeSpec, NodeWorkloads)>> {
    (1usize..5).prop_flat_map(|n| (0..n).map(arb_node).collect::<Vec<_>>())
}

fn arb_container(init: bool) -> impl Strategy<Value = TypedContainer> {
    common::arb_container(
        init,
        vec![1, 1, 1, 2],
        vec![0, 2000, 5000, 9000],
        vec![0, 0, 50],
        vec![0, 20, 100],
    )
}

fn arb_workload() -> impl Strategy<Value = Workload> {
    let policies = prop::sample::select(vec![
        vec![GpuToken::Binpack],
        vec![GpuToken::Spread],
        vec![GpuToken::Mutex],
        vec![GpuToken::TopologyAware],
        vec![GpuToken::Binpack, GpuToken::Numa],
    ]);
    (
        prop::sample::select(vec![NodePolicy::Binpack, NodePolicy::Spread]),
        policies,
        prop::bool::weighted(0.2),
        prop::collection::vec(arb_container(true), 0..2),
        prop::collection::vec(arb_container(false), 1..4),
    )
        .prop_map(|(node_policy, gpu_policy, numa_bind, init, apps)| {
            let spec = TypedSpec {
                node_policy: Some(node_policy),
                gpu_policy,
                numa_bind,
                init_containers: init,
                containers: apps,
                ..TypedSpec::default()
            };
            Workload::parse(
                WorkloadMeta::default(),
                &WorkloadSpec::Typed(spec),
                &Defaults::default(),
                &KubeNames::default(),
            )
            .unwrap()
        })
}

fn decide(
    cluster: &[(NodeSpec, NodeWorkloads)],
    w: &Workload,
    priority: i32,
) -> (Snapshot, Preemption) {
    let s = Snapshot::new(cluster.iter().map(|(n, _)| n.clone()).collect()).unwrap();
    let placed = cluster.iter().map(|(_, p)| p.clone()).collect();
    let p = {
        let o = Occupancy::new(&s, placed, &PreemptLimits::default()).unwrap();
        preempt(&o, w, priority, PreemptOptions::explained())
    };
    (s, p)
}

/// The node spec of `name` with the bookings of the workloads in `gone` taken away.
fn without(
    cluster: &[(NodeSpec, NodeWorkloads)],
    name: &str,
    gone: &[&str],
) -> (NodeSpec, Vec<PlacedWorkload>) {
    let (spec, placed) = cluster.iter().find(|(n, _)| n.name == name).unwrap();
    let mut spec = spec.clone();
    for w in placed
        .workloads
        .iter()
        .filter(|w| gone.contains(&w.id.as_str()))
    {
        for b in &w.bookings {
            let c = spec.cards.iter_mut().find(|c| c.id == b.card_id).unwrap();
            c.usage.used -= b.slots;
            c.usage.used_mem_mib -= b.mem_mib;
            c.usage.used_cores -= b.cores;
        }
    }
    (spec, placed.workloads.clone())
}

/// A candidate as the node choice sees it: name, victims' (priority, start, budget), node
/// score after placement.
type Candidate = (String, Vec<(i32, i64, bool)>, f64);

/// Everything an answer says, by names and ids (not handles or positions).
type Said = (
    Vec<(String, String, Vec<String>, Vec<(String, String)>)>,
    Option<String>,
);

fn said(s: &Snapshot, p: &Preemption) -> Said {
    let nodes = p
        .nodes
        .iter()
        .map(|n| {
            let node = &s[n.node];
            let (kind, ids, cards) = match &n.verdict {
                PreemptVerdict::NotNeeded(score) => {
                    (format!("not needed {}", score.raw), vec![], vec![])
                }
                PreemptVerdict::NotCandidate(not) => (
                    format!(
                        "{:?} {} {:?}",
                        not.reason,
                        not.failure.hami_text(),
                        not.failure.container_position
                    ),
                    vec![],
                    vec![],
                ),
                PreemptVerdict::Victims(v) => {
                    let mut cards: Vec<(String, String)> = v
                        .placement
                        .containers
                        .iter()
                        .flat_map(|c| {
                            c.cards.iter().map(move |k| {
                                (
                                    node.cards()[k.card].id.clone(),
                                    format!("{} {} {}", c.position, k.mem_mib, k.cores),
                                )
                            })
                        })
                        .collect();
                    cards.sort();
                    (
                        format!(
                            "{:?} {} {}",
                            v.summary, v.placement.score.raw, v.placement.normalized
                        ),
                        v.ids.clone(),
                        cards,
                    )
                }
            };
            let steps: Vec<String> = n
                .reprieves
                .iter()
                .map(|r| format!("{} {:?}", r.id, std::mem::discriminant(&r.outcome)))
                .collect();
            (
                node.name().to_owned(),
                format!("{kind} {}", n.eligible),
                ids,
                {
                    let mut c = cards;
                    c.extend(steps.into_iter().map(|x| (x, String::new())));
                    c
                },
            )
        })
        .collect();
    let choice = match p.choice {
        PreemptChoice::Evict(id) => Some(s[id].name().to_owned()),
        PreemptChoice::NotNeeded => Some("not needed".into()),
        PreemptChoice::NoCandidate => None,
    };
    (nodes, choice)
}

fn within_capacity(c: &Card, u: CardUsage) -> bool {
    u.used <= c.count && u.used_mem_mib <= c.total_mem_mib && u.used_cores <= c.total_cores
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn victims_are_strictly_lower_priority(cluster in arb_cluster(), w in arb_workload(), priority in arb_priority()) {
        let (s, p) = decide(&cluster, &w, priority);
        for n in &p.nodes {
            if let Some(v) = n.victims() {
                let placed: HashMap<&str, &PlacedWorkload> =
                    cluster.iter().find(|(x, _)| x.name == s[n.node].name()).unwrap()
                        .1.workloads.iter().map(|x| (x.id.as_str(), x)).collect();
                prop_assert!(!v.ids.is_empty());
                for id in &v.ids {
                    prop_assert!(placed[id.as_str()].priority < priority, "{} on {}", id, s[n.node].name());
                }
                prop_assert_eq!(v.summary.count as usize, v.ids.len());
                let budget = v.ids.iter().filter(|id| placed[id.as_str()].violates_budget).count();
                prop_assert_eq!(v.summary.budget_violations as usize, budget);
                let highest = v.ids.iter().map(|id| placed[id.as_str()].priority).max().unwrap();
                prop_assert_eq!(v.summary.highest_priority, highest);
            }
        }
    }

    #[test]
    fn without_the_victims_the_answered_placement_is_allocates_and_within_capacity(
        cluster in arb_cluster(), w in arb_workload(), priority in arb_priority()
    ) {
        let (s, p) = decide(&cluster, &w, priority);
        for n in &p.nodes {
            let Some(v) = n.victims() else { continue };
            let gone: Vec<&str> = v.ids.iter().map(String::as_str).collect();
            let (spec, _) = without(&cluster, s[n.node].name(), &gone);
            let alone = Snapshot::new(vec![spec.clone()]).unwrap();
            let a = allocate(&alone, &w, DecideOptions::default());
            let placed = a.placement.unwrap();
            prop_assert_eq!(&placed.containers, &v.placement.containers);
            prop_assert_eq!(&placed.booked, &v.placement.booked);
            prop_assert_eq!(&placed.final_usage, &v.placement.final_usage);
            prop_assert_eq!(placed.score, v.placement.score);
            for ((card, after), booked) in spec.cards.iter().zip(&v.placement.final_usage).zip(&v.placement.booked) {
                if *booked != CardUsage::default() {
                    prop_assert!(within_capacity(card, *after), "{:?} over-booked: {:?}", card.id, after);
                }
            }
        }
    }

    #[test]
    fn no_single_victim_could_be_put_back(cluster in arb_cluster(), w in arb_workload(), priority in arb_priority()) {
        let (s, p) = decide(&cluster, &w, priority);
        let prepared = PreparedWorkload::new(&w);
        for n in &p.nodes {
            let Some(v) = n.victims() else { continue };
            for back in &v.ids {
                let gone: Vec<&str> = v.ids.iter().filter(|id| *id != back).map(String::as_str).collect();
                let (spec, _) = without(&cluster, s[n.node].name(), &gone);
                let node = gpusched_engine::Node::new(spec).unwrap();
                prop_assert!(!prepared.fit(&node).fits(), "{} could stay on {}", back, s[n.node].name());
            }
        }
    }

    #[test]
    fn a_node_needs_no_eviction_exactly_when_it_fits_as_it_is(cluster in arb_cluster(), w in arb_workload(), priority in arb_priority()) {
        let (s, p) = decide(&cluster, &w, priority);
        let prepared = PreparedWorkload::new(&w);
        prop_assert_eq!(p.nodes.len(), s.len());
        for n in &p.nodes {
            let fits = prepared.fit(&s[n.node]).fits();
            prop_assert_eq!(matches!(n.verdict, PreemptVerdict::NotNeeded(_)), fits);
            if fits {
                prop_assert!(n.reprieves.is_empty());
            }
            if let PreemptVerdict::NotCandidate(not) = &n.verdict {
                prop_assert_eq!(not.reason == NotCandidateReason::NoLowerPriority, n.eligible == 0);
                // With every eligible workload gone it does not fit, and that is the failure.
                let placed = &cluster.iter().find(|(x, _)| x.name == s[n.node].name()).unwrap().1;
                let eligible: Vec<&str> = placed.workloads.iter()
                    .filter(|x| x.priority < priority).map(|x| x.id.as_str()).collect();
                let (spec, _) = without(&cluster, s[n.node].name(), &eligible);
                let verdict = prepared.fit(&gpusched_engine::Node::new(spec).unwrap());
                prop_assert_eq!(verdict.failure(), Some(&not.failure));
            }
        }
        let any_fits = p.nodes.iter().any(|n| matches!(n.verdict, PreemptVerdict::NotNeeded(_)));
        prop_assert_eq!(p.choice == PreemptChoice::NotNeeded, any_fits);
    }

    #[test]
    fn the_reprieve_explains_every_eligible_workload(cluster in arb_cluster(), w in arb_workload(), priority in arb_priority()) {
        let (s, p) = decide(&cluster, &w, priority);
        // Explaining changes nothing but the explanation.
        let plain = {
            let placed = cluster.iter().map(|(_, x)| x.clone()).collect();
            let o = Occupancy::new(&s, placed, &PreemptLimits::default()).unwrap();
            preempt(&o, &w, priority, PreemptOptions::default())
        };
        let mut unexplained = p.clone();
        for n in &mut unexplained.nodes {
            n.reprieves.clear();
        }
        prop_assert_eq!(&plain, &unexplained);
        for n in &p.nodes {
            let Some(v) = n.victims() else { continue };
            prop_assert_eq!(n.reprieves.len(), n.eligible as usize);
            let mut evicted: Vec<&str> = n.reprieves.iter()
                .filter(|r| matches!(r.outcome, ReprieveOutcome::Evicted(_)))
                .map(|r| r.id.as_str()).collect();
            let mut ids: Vec<&str> = v.ids.iter().map(String::as_str).collect();
            evicted.sort_unstable();
            ids.sort_unstable();
            prop_assert_eq!(evicted, ids);
            // Budget violators are tried first.
            let first_plain = n.reprieves.iter().position(|r| !r.violates_budget).unwrap_or(n.reprieves.len());
            prop_assert!(n.reprieves[first_plain..].iter().all(|r| !r.violates_budget));
        }
    }

    #[test]
    fn the_choice_is_the_best_candidate_by_the_documented_order(cluster in arb_cluster(), w in arb_workload(), priority in arb_priority()) {
        let (s, p) = decide(&cluster, &w, priority);
        if p.choice == PreemptChoice::NotNeeded {
            return Ok(());
        }
        // An independent statement of section 9.4 over (name, victims' (priority, start, budget)).
        let mut candidates: Vec<Candidate> = Vec::new();
        for n in &p.nodes {
            let Some(v) = n.victims() else { continue };
            let placed = &cluster.iter().find(|(x, _)| x.name == s[n.node].name()).unwrap().1;
            let list = v.ids.iter().map(|id| {
                let x = placed.workloads.iter().find(|x| &x.id == id).unwrap();
                (x.priority, x.start_time_ms, x.violates_budget)
            }).collect();
            candidates.push((s[n.node].name().to_owned(), list, v.placement.score.raw));
        }
        let key = |c: &Candidate| {
            let budget = c.1.iter().filter(|x| x.2).count();
            let highest = c.1.iter().map(|x| x.0).max().unwrap();
            let sum: i128 = c.1.iter().map(|x| i128::from(x.0) + (1i128 << 31)).sum();
            let earliest = c.1.iter().filter(|x| x.0 == highest).map(|x| x.1).min().unwrap();
            (budget, highest, sum, c.1.len(), std::cmp::Reverse(earliest))
        };
        let best = candidates.iter().min_by(|a, b| {
            key(a).cmp(&key(b))
                .then_with(|| {
                    let o = a.2.partial_cmp(&b.2).unwrap_or(Ordering::Equal);
                    if (a.2 - b.2).abs() < 1e-9 { Ordering::Equal }
                    else if w.node_policy == NodePolicy::Binpack { o.reverse() } else { o }
                })
                .then_with(|| a.0.cmp(&b.0))
        });
        let chosen = match p.choice {
            PreemptChoice::Evict(id) => Some(s[id].name().to_owned()),
            _ => None,
        };
        prop_assert_eq!(chosen, best.map(|b| b.0.clone()));
    }

    #[test]
    fn the_answer_does_not_depend_on_input_order(cluster in arb_cluster(), w in arb_workload(), priority in arb_priority(), rot in 0usize..5) {
        let (s1, p1) = decide(&cluster, &w, priority);
        let mut permuted = cluster.clone();
        permuted.reverse();
        let len = permuted.len();
        permuted.rotate_left(rot % len);
        for (spec, placed) in &mut permuted {
            spec.cards.reverse();
            placed.workloads.reverse();
            for x in &mut placed.workloads {
                x.bookings.reverse();
            }
        }
        // The placed entries in yet another order than the nodes.
        let (specs, mut placed): (Vec<_>, Vec<_>) = permuted.into_iter().unzip();
        let shift = 1.min(placed.len());
        placed.rotate_left(shift);
        let s2 = Snapshot::new(specs).unwrap();
        let p2 = {
            let o = Occupancy::new(&s2, placed, &PreemptLimits::default()).unwrap();
            preempt(&o, &w, priority, PreemptOptions::explained())
        };
        prop_assert_eq!(said(&s1, &p1), said(&s2, &p2));
        // And again: the same answer, bit for bit.
        prop_assert_eq!(&decide(&cluster, &w, priority).1, &p1);
    }
}

/// Arbitrary placed-workload input over a small pool of names: some valid, most not.
fn arb_any_placed() -> impl Strategy<Value = Vec<NodeWorkloads>> {
    let name = prop::sample::select(vec!["", "n1", "n2", "n9", " "]);
    let card = prop::sample::select(vec!["", "GPU-0", "GPU-1", "GPU-7"]);
    let booking = (
        card,
        0u32..4,
        prop::sample::select(vec![0u64, 100, 5000, u64::MAX]),
        prop::sample::select(vec![0u32, 10, u32::MAX]),
    )
        .prop_map(|(card_id, slots, mem_mib, cores)| Booking {
            mig_instance_start: None,
            card_id: card_id.to_owned(),
            slots,
            mem_mib,
            cores,
        });
    let workload = (
        prop::sample::select(vec!["", " ", "a", "b", "a"]),
        any::<i32>(),
        any::<bool>(),
        any::<i64>(),
        prop::collection::vec(booking, 0..4),
    )
        .prop_map(
            |(id, priority, violates_budget, start_time_ms, bookings)| PlacedWorkload {
                id: id.to_owned(),
                priority,
                violates_budget,
                start_time_ms,
                bookings,
            },
        );
    prop::collection::vec(
        (name, prop::collection::vec(workload, 0..5)).prop_map(|(node, workloads)| NodeWorkloads {
            node: node.to_owned(),
            workloads,
        }),
        0..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn any_placed_input_is_validated_or_decided_never_a_panic(
        placed in arb_any_placed(), w in arb_workload(), priority in any::<i32>(), used in 0u32..8
    ) {
        let usage = CardUsage { used, used_mem_mib: 6000, used_cores: 20 };
        let mk = |name: &str| {
            let mut cards = vec![common::card("GPU-0", 0, 16000), common::card("GPU-1", 1, 16000)];
            for c in &mut cards {
                c.usage = usage;
            }
            NodeSpec::new(name, cards)
        };
        let s = Snapshot::new(vec![mk("n1"), mk("n2")]).unwrap();
        let limits = PreemptLimits { max_workloads_per_node: 3, max_workloads: 12, max_id_bytes: 4 };
        match Occupancy::new(&s, placed, &limits) {
            Ok(o) => {
                let p = preempt(&o, &w, priority, PreemptOptions::explained());
                prop_assert_eq!(p.nodes.len(), 2);
            }
            Err(e) => {
                prop_assert!(!e.violations.is_empty());
                let mut last = 0usize;
                for v in &e.violations {
                    prop_assert!(v.field.starts_with("placed"), "{}", v.field);
                    prop_assert!(matches!(
                        v.kind,
                        ViolationKind::MissingField | ViolationKind::DuplicateId
                            | ViolationKind::UnknownReference | ViolationKind::OutOfRange
                            | ViolationKind::LimitExceeded
                    ), "{:?}", v.kind);
                    prop_assert!(!v.description.is_empty());
                    // In input order.
                    let at: usize = v.field.strip_prefix("placed[")
                        .and_then(|r| r.split(']').next()).and_then(|n| n.parse().ok()).unwrap_or(usize::MAX);
                    prop_assert!(at >= last);
                    last = at;
                }
            }
        }
    }
}

#[test]
fn bookings_sum_exactly_to_usage_is_valid_and_one_more_is_not() {
    let (spec, placed) = occupied(
        "n1",
        vec![common::card("GPU-0", 0, 16000)],
        vec![PlacedWorkload {
            id: "a".into(),
            priority: 0,
            violates_budget: false,
            start_time_ms: 0,
            bookings: vec![Booking {
                mig_instance_start: None,
                card_id: "GPU-0".into(),
                slots: 1,
                mem_mib: u64::MAX / 2,
                cores: 7,
            }],
        }],
    );
    let s = Snapshot::new(vec![spec]).unwrap();
    assert!(Occupancy::new(&s, vec![placed.clone()], &PreemptLimits::default()).is_ok());
    let mut more = placed;
    more.workloads[0].bookings[0].cores = 8;
    let e = Occupancy::new(&s, vec![more], &PreemptLimits::default()).unwrap_err();
    let got: BTreeMap<&str, ViolationKind> = e
        .violations
        .iter()
        .map(|v| (v.field.as_str(), v.kind))
        .collect();
    assert_eq!(
        got,
        BTreeMap::from([(
            "placed[0].workloads[0].bookings[0].cores",
            ViolationKind::OutOfRange
        )])
    );
}
