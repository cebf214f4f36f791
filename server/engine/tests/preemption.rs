//! Preemption (`docs/placement-semantics.md` section 9): every worked example of 9.8 pinned,
//! the node choice rule by rule, explanations, and input validation (9.2).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod mig_common;

use common::placed::{PlacedExt, held, occupied};
use common::{CardExt, card, pod, snapshot};
use gpusched_engine::{
    Booking, CardUsage, InvalidInput, NodeSpec, NodeWorkloads, NotCandidateReason, Occupancy,
    PlacedWorkload, PreemptChoice, PreemptLimits, PreemptOptions, PreemptVerdict, Preemption,
    Reason, ReprieveOutcome, Snapshot, ViolationKind, Workload, preempt, preempt_until,
};

const MIB: u64 = 40960;

/// Decides on `nodes` (each with its placed workloads).
fn decide(
    nodes: Vec<(NodeSpec, NodeWorkloads)>,
    w: &Workload,
    priority: i32,
    options: PreemptOptions,
) -> (Snapshot, Preemption) {
    let (specs, placed): (Vec<_>, Vec<_>) = nodes.into_iter().unzip();
    let s = snapshot(specs);
    let answer = {
        let occupancy = Occupancy::new(&s, placed, &PreemptLimits::default()).unwrap();
        preempt(&occupancy, w, priority, options)
    };
    (s, answer)
}

/// The verdict of node `name`.
fn verdict<'a>(s: &Snapshot, p: &'a Preemption, name: &str) -> &'a PreemptVerdict {
    let id = s.id_of(name).unwrap();
    &p.node(id).unwrap().verdict
}

/// (victim ids, budget violations, card ids with MiB per container) of node `name`.
type Evicted = (Vec<String>, u32, Vec<Vec<(String, u64)>>);

fn victims(s: &Snapshot, p: &Preemption, name: &str) -> Evicted {
    let PreemptVerdict::Victims(v) = verdict(s, p, name) else {
        panic!("{name} has no victims: {:?}", verdict(s, p, name));
    };
    let node = &s[v.placement.node];
    let cards = v
        .placement
        .containers
        .iter()
        .filter(|c| !c.cards.is_empty())
        .map(|c| {
            c.cards
                .iter()
                .map(|k| (node.cards()[k.card].id.clone(), k.mem_mib))
                .collect()
        })
        .collect();
    (v.ids.clone(), v.summary.budget_violations, cards)
}

fn chosen(s: &Snapshot, p: &Preemption) -> Option<String> {
    match p.choice {
        PreemptChoice::Evict(id) => Some(s[id].name().to_owned()),
        PreemptChoice::NotNeeded | PreemptChoice::NoCandidate => None,
    }
}

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn usage(slots: u32, mem: u64, cores: u32) -> CardUsage {
    CardUsage {
        used: slots,
        used_mem_mib: mem,
        used_cores: cores,
    }
}

fn one_card(mem: &str) -> Workload {
    pod().container(&[("gpu", "1"), ("mem", mem)]).workload()
}

#[test]
fn simple_9_8_1() {
    let w = one_card("20000");
    let n1 = occupied(
        "n1",
        vec![card("GPU-0", 0, MIB)],
        vec![
            held("low", 0).on("GPU-0", 1, 30000, 30),
            held("mid", 5).on("GPU-0", 1, 8000, 0),
        ],
    );
    let n2 = occupied(
        "n2",
        vec![card("GPU-0", 0, MIB)],
        vec![held("peer", 10).on("GPU-0", 1, 30000, 0)],
    );
    let (s, p) = decide(vec![n1, n2], &w, 10, PreemptOptions::default());
    assert_eq!(
        victims(&s, &p, "n1"),
        (ids(&["low"]), 0, vec![vec![("GPU-0".into(), 20000)]])
    );
    let PreemptVerdict::Victims(v) = verdict(&s, &p, "n1") else {
        unreachable!()
    };
    assert_eq!(v.placement.final_usage, vec![usage(2, 28000, 0)]);
    assert_eq!(v.placement.booked, vec![usage(1, 20000, 0)]);
    let PreemptVerdict::NotCandidate(not) = verdict(&s, &p, "n2") else {
        panic!("n2: {:?}", verdict(&s, &p, "n2"));
    };
    assert_eq!(not.reason, NotCandidateReason::NoLowerPriority);
    assert_eq!(not.failure.hami_text(), "1/1 CardInsufficientMemory");
    assert_eq!(chosen(&s, &p).as_deref(), Some("n1"));
    assert_eq!(p.chosen().map(|v| v.ids.clone()), Some(ids(&["low"])));
}

#[test]
fn reprieve_keeps_the_lowest_priority_when_evicting_it_would_not_help_9_8_2() {
    let w = one_card("30000");
    let n1 = occupied(
        "n1",
        vec![card("GPU-0", 0, MIB), card("GPU-1", 1, MIB)],
        vec![
            held("a", 10).on("GPU-0", 1, 5000, 0),
            held("b", 20).on("GPU-0", 1, 25000, 0),
            held("c", 30).on("GPU-1", 1, 35000, 0),
        ],
    );
    let (s, p) = decide(vec![n1], &w, 100, PreemptOptions::explained());
    assert_eq!(
        victims(&s, &p, "n1"),
        (ids(&["b"]), 0, vec![vec![("GPU-0".into(), 30000)]])
    );
    let PreemptVerdict::Victims(v) = verdict(&s, &p, "n1") else {
        unreachable!()
    };
    assert_eq!(
        v.placement.final_usage,
        vec![usage(2, 35000, 0), usage(1, 35000, 0)]
    );
    let steps: Vec<(String, bool)> = p.nodes[0]
        .reprieves
        .iter()
        .map(|r| {
            (
                r.id.clone(),
                matches!(r.outcome, ReprieveOutcome::Evicted(_)),
            )
        })
        .collect();
    assert_eq!(
        steps,
        vec![("c".into(), false), ("b".into(), true), ("a".into(), false)]
    );
    let ReprieveOutcome::Evicted(f) = &p.nodes[0].reprieves[1].outcome else {
        unreachable!()
    };
    assert_eq!(f.reasons.get(Reason::CardInsufficientMemory), 2);
}

#[test]
fn budgets_are_reprieved_first_and_counted_in_the_choice_9_8_3() {
    let w = one_card("20000");
    let n1 = occupied(
        "n1",
        vec![card("GPU-0", 0, MIB)],
        vec![
            held("p", 1).budget().on("GPU-0", 1, 20000, 0),
            held("q", 8).on("GPU-0", 1, 20000, 0),
        ],
    );
    let n2 = occupied(
        "n2",
        vec![card("GPU-0", 0, MIB)],
        vec![held("r", 2).budget().on("GPU-0", 1, 40000, 0)],
    );
    let (s, p) = decide(vec![n1.clone(), n2], &w, 10, PreemptOptions::default());
    assert_eq!(victims(&s, &p, "n1").0, ids(&["q"]));
    assert_eq!(victims(&s, &p, "n1").1, 0);
    assert_eq!(
        victims(&s, &p, "n2"),
        (ids(&["r"]), 1, victims(&s, &p, "n2").2)
    );
    assert_eq!(chosen(&s, &p).as_deref(), Some("n1"));
    // Without the flag, importance alone: `q` is kept and `p` evicted.
    let (spec, mut placed) = n1;
    for x in &mut placed.workloads {
        x.violates_budget = false;
    }
    let (s, p) = decide(vec![(spec, placed)], &w, 10, PreemptOptions::default());
    assert_eq!(victims(&s, &p, "n1").0, ids(&["p"]));
}

#[test]
fn card_exact_where_slot_counting_evicts_the_wrong_pod_9_8_4() {
    let w = one_card("20000");
    let n1 = occupied(
        "n1",
        vec![
            card("GPU-0", 0, MIB).slots(2),
            card("GPU-1", 1, MIB).slots(2),
        ],
        vec![
            held("A", 10).on("GPU-0", 1, 30000, 0),
            held("D", 30).on("GPU-0", 1, 5000, 0),
            held("B", 1).on("GPU-1", 1, 5000, 0),
            held("C", 20).on("GPU-1", 1, 30000, 0),
        ],
    );
    let (s, p) = decide(vec![n1.clone()], &w, 100, PreemptOptions::default());
    assert_eq!(
        victims(&s, &p, "n1"),
        (ids(&["A"]), 0, vec![vec![("GPU-0".into(), 20000)]])
    );
    let PreemptVerdict::Victims(v) = verdict(&s, &p, "n1") else {
        unreachable!()
    };
    assert_eq!(v.placement.final_usage[0], usage(2, 25000, 0));
    // What kube-scheduler's slot counting evicts (`B`) does not make room on any card.
    let (spec, placed) = n1;
    let without_b: Vec<PlacedWorkload> = placed
        .workloads
        .into_iter()
        .filter(|x| x.id != "B")
        .collect();
    let mut bare = spec.clone();
    for c in &mut bare.cards {
        c.usage = CardUsage::default();
    }
    let after = occupied("n1", bare.cards, without_b);
    let (s, p) = decide(vec![after], &w, 0, PreemptOptions::default());
    let PreemptVerdict::NotCandidate(not) = verdict(&s, &p, "n1") else {
        panic!("{:?}", verdict(&s, &p, "n1"));
    };
    assert_eq!(
        not.failure.hami_text(),
        "1/2 CardInsufficientMemory, 1/2 CardTimeSlicingExhausted"
    );
}

#[test]
fn mutex_needs_every_workload_of_a_card_gone_9_8_5() {
    let w = pod()
        .ann("hami.io/gpu-scheduler-policy", "mutex")
        .gpus(1)
        .workload();
    let n1 = occupied(
        "n1",
        vec![
            card("GPU-0", 0, MIB),
            card("GPU-1", 1, MIB),
            card("GPU-2", 2, MIB),
        ],
        vec![
            held("x", 5).started(1000).on("GPU-0", 1, 1000, 0),
            held("y", 50).on("GPU-0", 1, 1000, 0),
            held("z", 5).started(3000).on("GPU-1", 1, 1000, 0),
            held("t", 5).started(2000).on("GPU-2", 1, 1000, 0),
        ],
    );
    let (s, p) = decide(vec![n1], &w, 10, PreemptOptions::explained());
    assert_eq!(
        victims(&s, &p, "n1"),
        (ids(&["z"]), 0, vec![vec![("GPU-1".into(), MIB)]])
    );
    let order: Vec<&str> = p.nodes[0].reprieves.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(order, ["x", "t", "z"]);
    assert_eq!(p.nodes[0].eligible, 3);
}

/// One card of whole memory per node; `extra` a workload of priority 50 booking a slot and
/// no memory (it stays).
fn choice_node(name: &str, victims: &[(i32, i64, bool)], extra: bool) -> (NodeSpec, NodeWorkloads) {
    let mut placed: Vec<PlacedWorkload> = victims
        .iter()
        .enumerate()
        .map(|(k, &(priority, start, budget))| {
            let x = held(&format!("{name}-v{k}"), priority)
                .started(start)
                .on("GPU-0", 1, 1000, 0);
            if budget { x.budget() } else { x }
        })
        .collect();
    if extra {
        placed.push(held(&format!("{name}-stays"), 50).on("GPU-0", 1, 0, 0));
    }
    occupied(name, vec![card("GPU-0", 0, MIB)], placed)
}

fn choice_nodes() -> Vec<(NodeSpec, NodeWorkloads)> {
    vec![
        choice_node("n1", &[(1, 0, true)], false),
        choice_node("n2", &[(5, 0, false)], false),
        choice_node("n3", &[(3, 300, false), (3, 300, false)], false),
        choice_node("n4", &[(3, 200, false), (i32::MIN, 0, false)], false),
        choice_node("n5", &[(3, 100, false)], false),
        choice_node("n6", &[(3, 200, false)], false),
        choice_node("n7", &[(3, 200, false)], true),
        choice_node("n8", &[(3, 200, false)], false),
    ]
}

#[test]
fn node_choice_rule_by_rule_9_8_6() {
    let binpack = pod().gpus(1).workload();
    let spread = pod()
        .ann("hami.io/node-scheduler-policy", "spread")
        .gpus(1)
        .workload();
    let (s, p) = decide(choice_nodes(), &binpack, 10, PreemptOptions::default());
    assert_eq!(chosen(&s, &p).as_deref(), Some("n7"));
    let key = |name: &str| {
        let PreemptVerdict::Victims(v) = verdict(&s, &p, name) else {
            panic!("{name}")
        };
        v.summary
    };
    assert_eq!(key("n1").budget_violations, 1);
    assert_eq!(key("n3").offset_priority_sum, 2 * ((1u128 << 31) + 3));
    assert_eq!(key("n4").offset_priority_sum, (1u128 << 31) + 3);
    assert_eq!(key("n4").count, 2);
    assert_eq!(key("n5").earliest_start_of_highest_ms, 100);
    let score = |name: &str| victims_score(&s, &p, name);
    assert!((score("n7") - 12.0).abs() < 1e-9 && (score("n6") - 11.0).abs() < 1e-9);
    let (s, p) = decide(choice_nodes(), &spread, 10, PreemptOptions::default());
    assert_eq!(chosen(&s, &p).as_deref(), Some("n6"));
    // Each rule decides: taking the winner away, the next in line wins.
    let order = ["n7", "n6", "n8", "n5", "n4", "n3", "n2", "n1"];
    for k in 0..order.len() {
        let rest: Vec<_> = choice_nodes()
            .into_iter()
            .filter(|(n, _)| !order[..k].contains(&n.name.as_str()))
            .collect();
        let (s, p) = decide(rest, &binpack, 10, PreemptOptions::default());
        assert_eq!(
            chosen(&s, &p).as_deref(),
            Some(order[k]),
            "without {:?}",
            &order[..k]
        );
    }
}

fn victims_score(s: &Snapshot, p: &Preemption, name: &str) -> f64 {
    let PreemptVerdict::Victims(v) = verdict(s, p, name) else {
        panic!("{name}")
    };
    v.placement.score.raw
}

#[test]
fn negative_priorities_count_through_the_offset_9_8_6() {
    let w = pod().gpus(1).workload();
    let two = choice_node("a-two", &[(-5, 0, false), (-5, 0, false)], false);
    let one = choice_node("b-one", &[(-5, 0, false)], false);
    let (s, p) = decide(vec![two, one], &w, 0, PreemptOptions::default());
    assert_eq!(chosen(&s, &p).as_deref(), Some("b-one"));
}

/// Example 9.8.7: `n` 4 slots on GPU-0; `x`, `v`, `u` on GPU-1.
fn second_look_node() -> (NodeSpec, NodeWorkloads) {
    occupied(
        "n1",
        vec![card("GPU-0", 0, MIB), card("GPU-1", 1, MIB)],
        vec![
            held("n", 200).on("GPU-0", 4, 0, 0),
            held("x", 30).on("GPU-1", 1, 31000, 0),
            held("v", 20).on("GPU-1", 1, 9000, 0),
            held("u", 10).on("GPU-1", 4, 0, 0),
        ],
    )
}

#[test]
fn second_look_keeps_a_victim_that_fits_back_9_8_7() {
    let w = pod()
        .ann("hami.io/gpu-scheduler-policy", "binpack")
        .container(&[("gpu", "1"), ("mem", "10000")])
        .container(&[("gpu", "1"), ("mem", "35000")])
        .workload();
    let (s, p) = decide(
        vec![second_look_node()],
        &w,
        100,
        PreemptOptions::explained(),
    );
    assert_eq!(
        victims(&s, &p, "n1"),
        (
            ids(&["x"]),
            0,
            vec![vec![("GPU-1".into(), 10000)], vec![("GPU-0".into(), 35000)]]
        )
    );
    let outcomes: Vec<(&str, &ReprieveOutcome)> = p.nodes[0]
        .reprieves
        .iter()
        .map(|r| (r.id.as_str(), &r.outcome))
        .collect();
    assert!(matches!(outcomes[0], ("x", ReprieveOutcome::Evicted(_))));
    assert!(matches!(
        outcomes[1],
        ("v", ReprieveOutcome::KeptAtSecondLook)
    ));
    assert!(matches!(outcomes[2], ("u", ReprieveOutcome::Kept)));
    assert_eq!(outcomes.len(), 3);
}

#[test]
fn a_node_that_fits_needs_nothing_and_the_choice_says_so() {
    let w = one_card("10000");
    let full = occupied(
        "a",
        vec![card("GPU-0", 0, MIB)],
        vec![held("low", 0).on("GPU-0", 1, 40000, 0)],
    );
    let free = occupied(
        "b",
        vec![card("GPU-0", 0, MIB)],
        vec![held("low2", 0).on("GPU-0", 1, 1000, 0)],
    );
    let (s, p) = decide(vec![full, free], &w, 10, PreemptOptions::default());
    assert!(matches!(verdict(&s, &p, "b"), PreemptVerdict::NotNeeded(_)));
    assert_eq!(victims(&s, &p, "a").0, ids(&["low"]));
    assert_eq!(p.choice, PreemptChoice::NotNeeded);
    assert!(p.chosen().is_none());
}

#[test]
fn no_candidate_when_even_every_lower_priority_workload_gone_is_not_enough() {
    let w = one_card("30000");
    let n1 = occupied(
        "n1",
        vec![card("GPU-0", 0, MIB)],
        vec![
            held("low", 0).on("GPU-0", 1, 10000, 0),
            held("high", 50).on("GPU-0", 1, 20000, 0),
        ],
    );
    let (s, p) = decide(vec![n1], &w, 10, PreemptOptions::default());
    let PreemptVerdict::NotCandidate(not) = verdict(&s, &p, "n1") else {
        panic!()
    };
    assert_eq!(not.reason, NotCandidateReason::InsufficientAfterEviction);
    assert_eq!(not.failure.reasons.get(Reason::CardInsufficientMemory), 1);
    assert_eq!(p.choice, PreemptChoice::NoCandidate);
}

#[test]
fn unaccounted_usage_is_never_evicted() {
    // 30,000 MiB nobody accounts for, 5,000 MiB of an eligible workload: evicting it leaves
    // 10,960 free, short of 20,000.
    let w = one_card("20000");
    let n1 = occupied(
        "n1",
        vec![card("GPU-0", 0, MIB).used(1, 30000, 0)],
        vec![held("low", 0).on("GPU-0", 1, 5000, 0)],
    );
    let (s, p) = decide(vec![n1], &w, 10, PreemptOptions::default());
    assert!(matches!(
        verdict(&s, &p, "n1"),
        PreemptVerdict::NotCandidate(n) if n.reason == NotCandidateReason::InsufficientAfterEviction
    ));
}

#[test]
fn a_workload_without_gpu_needs_no_eviction_anywhere() {
    let w = pod().container(&[]).workload();
    let n1 = occupied(
        "n1",
        vec![card("GPU-0", 0, MIB)],
        vec![held("low", 0).on("GPU-0", 1, 40000, 0)],
    );
    let (s, p) = decide(vec![n1], &w, 10, PreemptOptions::default());
    assert!(!p.requests_gpu);
    assert!(matches!(
        verdict(&s, &p, "n1"),
        PreemptVerdict::NotNeeded(_)
    ));
    assert_eq!(p.choice, PreemptChoice::NotNeeded);
}

#[test]
fn stop_abandons_before_any_node() {
    let w = one_card("20000");
    let n1 = occupied("n1", vec![card("GPU-0", 0, MIB)], vec![]);
    let (specs, placed): (Vec<_>, Vec<_>) = vec![n1].into_iter().unzip();
    let s = snapshot(specs);
    let o = Occupancy::new(&s, placed, &PreemptLimits::default()).unwrap();
    assert!(preempt_until(&o, &w, 10, PreemptOptions::default(), &|| true).is_err());
    assert!(preempt_until(&o, &w, 10, PreemptOptions::default(), &|| false).is_ok());
}

// ---- validation (9.2) ----

fn invalid(
    specs: Vec<NodeSpec>,
    placed: Vec<NodeWorkloads>,
    limits: PreemptLimits,
) -> InvalidInput {
    let s = snapshot(specs);
    Occupancy::new(&s, placed, &limits).expect_err("invalid")
}

fn fields(e: &InvalidInput) -> Vec<(ViolationKind, &str)> {
    e.violations
        .iter()
        .map(|v| (v.kind, v.field.as_str()))
        .collect()
}

fn entry(node: &str, workloads: Vec<PlacedWorkload>) -> NodeWorkloads {
    NodeWorkloads {
        node: node.to_owned(),
        workloads,
    }
}

#[test]
fn invalid_nodes_and_ids_name_their_fields() {
    let spec = NodeSpec::new("n1", vec![card("GPU-0", 0, MIB).used(3, 3000, 0)]);
    let e = invalid(
        vec![spec],
        vec![
            entry("", vec![]),
            entry("n9", vec![]),
            entry(
                "n1",
                vec![
                    held(" ", 0),
                    held("a", 0),
                    held("a", 1),
                    held(&"x".repeat(513), 0),
                ],
            ),
            entry("n1", vec![]),
        ],
        PreemptLimits::default(),
    );
    assert_eq!(
        fields(&e),
        vec![
            (ViolationKind::MissingField, "placed[0].node"),
            (ViolationKind::UnknownReference, "placed[1].node"),
            (ViolationKind::MissingField, "placed[2].workloads[0].id"),
            (ViolationKind::DuplicateId, "placed[2].workloads[2].id"),
            (ViolationKind::LimitExceeded, "placed[2].workloads[3].id"),
            (ViolationKind::DuplicateId, "placed[3].node"),
        ]
    );
    assert!(e.violations[5].description.contains("also placed[2]"));
    assert!(e.violations[3].description.contains("also workloads[1]"));
}

#[test]
fn invalid_bookings_name_their_fields() {
    let spec = NodeSpec::new(
        "n1",
        vec![
            card("GPU-0", 0, MIB).used(2, 10000, 50),
            card("GPU-1", 1, MIB).used(1, 1000, 0),
        ],
    );
    let e = invalid(
        vec![spec],
        vec![entry(
            "n1",
            vec![
                held("a", 0)
                    .on("GPU-9", 1, 0, 0)
                    .on("GPU-0", 1, 6000, 30)
                    .on("GPU-0", 1, 0, 0),
                held("b", 0).on("GPU-0", 1, 6000, 30).on("GPU-1", 0, 0, 0),
                held("c", 0).on("GPU-0", 1, 0, 0),
            ],
        )],
        PreemptLimits::default(),
    );
    assert_eq!(
        fields(&e),
        vec![
            (
                ViolationKind::UnknownReference,
                "placed[0].workloads[0].bookings[0].card_id"
            ),
            (
                ViolationKind::DuplicateId,
                "placed[0].workloads[0].bookings[2].card_id"
            ),
            (
                ViolationKind::OutOfRange,
                "placed[0].workloads[1].bookings[0].mem_mib"
            ),
            (
                ViolationKind::OutOfRange,
                "placed[0].workloads[1].bookings[0].cores"
            ),
            (
                ViolationKind::OutOfRange,
                "placed[0].workloads[1].bookings[1].slots"
            ),
            (
                ViolationKind::OutOfRange,
                "placed[0].workloads[2].bookings[0].slots"
            ),
        ]
    );
    assert!(
        e.violations[2]
            .description
            .contains("sum to 12000 mem_mib, above its used_mem_mib of 10000"),
        "{}",
        e.violations[2].description
    );
}

#[test]
fn limits_on_placed_workloads() {
    let spec = || NodeSpec::new("n1", vec![card("GPU-0", 0, MIB)]);
    let many = |n: usize| {
        (0..n)
            .map(|k| held(&format!("w{k}"), 0))
            .collect::<Vec<_>>()
    };
    let limits = PreemptLimits {
        max_workloads_per_node: 3,
        max_workloads: 5,
        max_id_bytes: 8,
    };
    let e = invalid(vec![spec()], vec![entry("n1", many(4))], limits);
    assert_eq!(
        fields(&e),
        vec![(ViolationKind::LimitExceeded, "placed[0].workloads")]
    );
    let e = invalid(
        vec![spec(), NodeSpec::new("n2", vec![])],
        vec![entry("n1", many(3)), entry("n2", many(3))],
        limits,
    );
    assert_eq!(fields(&e), vec![(ViolationKind::LimitExceeded, "placed")]);
    let s = snapshot(vec![spec()]);
    assert!(Occupancy::new(&s, vec![entry("n1", many(3))], &limits).is_ok());
}

#[test]
fn a_valid_occupancy_gives_back_what_was_placed() {
    let (spec, placed) = occupied(
        "n1",
        vec![card("GPU-0", 0, MIB)],
        vec![held("a", 3).on("GPU-0", 2, 100, 10)],
    );
    let s = snapshot(vec![spec, NodeSpec::new("n0", vec![])]);
    let o = Occupancy::new(&s, vec![placed], &PreemptLimits::default()).unwrap();
    let n1 = s.id_of("n1").unwrap();
    let got: Vec<&PlacedWorkload> = o.placed(n1).collect();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].bookings,
        vec![Booking {
            mig_instance_start: None,
            card_id: "GPU-0".into(),
            slots: 2,
            mem_mib: 100,
            cores: 10
        }]
    );
    assert_eq!(o.placed(s.id_of("n0").unwrap()).len(), 0);
    assert!(std::ptr::eq(o.snapshot(), &s));
}

#[test]
fn equal_priority_and_start_fall_to_the_id() {
    // Either workload alone makes room; the smaller id is more important, so it stays. Victims
    // are listed most important first: of two equal victims, the smaller id first.
    let w = one_card("30000");
    let n1 = occupied(
        "n1",
        vec![card("GPU-0", 0, MIB), card("GPU-1", 1, MIB)],
        vec![
            held("b", 1).on("GPU-1", 1, 20000, 0),
            held("a", 1).on("GPU-0", 1, 20000, 0),
        ],
    );
    let (s, p) = decide(vec![n1], &w, 10, PreemptOptions::default());
    assert_eq!(
        victims(&s, &p, "n1"),
        (ids(&["b"]), 0, vec![vec![("GPU-1".into(), 30000)]])
    );
    let n2 = occupied(
        "n2",
        vec![card("GPU-0", 0, MIB)],
        vec![
            held("d", 1).on("GPU-0", 1, 15000, 0),
            held("c", 1).on("GPU-0", 1, 15000, 0),
        ],
    );
    let (s, p) = decide(vec![n2], &w, 10, PreemptOptions::default());
    assert_eq!(victims(&s, &p, "n2").0, ids(&["c", "d"]));
}

/// An H100 in MIG mode, every profile allowed, with `2g.20gb` at 0 (`mid`), `1g.10gb` at 2
/// (`top`) and 3 (`top2`), `3g.40gb` at 4 (`low`) in use, and their placed workloads.
fn mig_node() -> (NodeSpec, NodeWorkloads) {
    use gpusched_engine::MigInstance;
    use mig_common::{at, h100, h100_profiles};
    let mut c = h100("GPU-0", 0, h100_profiles());
    if let Some(l) = c.mig.as_deref_mut() {
        l.instances = vec![
            MigInstance::in_use("2g.20gb", at(0, 2), "team/mid"),
            MigInstance::in_use("1g.10gb", at(2, 1), "team/top"),
            MigInstance::in_use("1g.10gb", at(3, 1), "team/top2"),
            MigInstance::in_use("3g.40gb", at(4, 4), "team/low"),
        ];
    }
    occupied(
        "n1",
        vec![c],
        vec![
            held("mid", 5).instance("GPU-0", 0),
            held("top", 100).instance("GPU-0", 2),
            held("top2", 100).instance("GPU-0", 3),
            held("low", 1).instance("GPU-0", 4),
        ],
    )
}

#[test]
fn mig_instances_are_evicted_whole_9_8_8() {
    let w = mig_common::mig_pod("p", &[("mem", "30000")]);
    let (s, p) = decide(vec![mig_node()], &w, 50, PreemptOptions::explained());
    let PreemptVerdict::Victims(v) = verdict(&s, &p, "n1") else {
        panic!("{:?}", verdict(&s, &p, "n1"));
    };
    assert_eq!(v.ids, ids(&["low"]));
    let k = &v.placement.containers[0].cards[0];
    let m = k.mig.as_ref().unwrap();
    assert_eq!(
        (m.profile.as_str(), m.placement.start, m.reused),
        ("3g.40gb", 4, false)
    );
    assert_eq!(v.placement.final_usage[0], usage(4, 81_556, 98));
    assert_eq!(chosen(&s, &p).as_deref(), Some("n1"));
    let n = p.node(s.id_of("n1").unwrap()).unwrap();
    let outcomes: Vec<(&str, bool)> = n
        .reprieves
        .iter()
        .map(|r| (r.id.as_str(), matches!(r.outcome, ReprieveOutcome::Kept)))
        .collect();
    assert_eq!(outcomes, [("mid", true), ("low", false)]);
    // Priority 5: only `low` is eligible; it suffices.
    let (s, p) = decide(vec![mig_node()], &w, 5, PreemptOptions::default());
    assert_eq!(victims(&s, &p, "n1").0, ids(&["low"]));
    // Priority 1: nothing lower; the instances stay.
    let (s, p) = decide(vec![mig_node()], &w, 1, PreemptOptions::default());
    assert!(matches!(
        verdict(&s, &p, "n1"),
        PreemptVerdict::NotCandidate(n) if n.reason == NotCandidateReason::NoLowerPriority
    ));
    // A request only the whole card serves needs every instance but the unaccounted ones gone:
    // `top` and `top2` outrank it, so the node is not a candidate.
    let whole = mig_common::mig_pod("q", &[("mem", "80000")]);
    let (s, p) = decide(vec![mig_node()], &whole, 50, PreemptOptions::default());
    assert!(matches!(
        verdict(&s, &p, "n1"),
        PreemptVerdict::NotCandidate(n) if n.reason == NotCandidateReason::InsufficientAfterEviction
    ));
}

#[test]
fn mig_bookings_name_their_instance() {
    use gpusched_engine::MigInstance;
    use mig_common::{at, h100, h100_profiles};
    let mut c = h100("GPU-0", 0, h100_profiles());
    if let Some(l) = c.mig.as_deref_mut() {
        l.instances = vec![
            MigInstance::in_use("2g.20gb", at(0, 2), "team/a"),
            MigInstance::free("3g.40gb", at(4, 4)),
        ];
    }
    let spec = NodeSpec::new("n1", vec![c, card("GPU-1", 1, MIB).used(1, 1000, 0)]);
    let e = invalid(
        vec![spec],
        vec![entry(
            "n1",
            vec![
                held("a", 0).on("GPU-0", 1, 0, 0),
                held("b", 0).instance("GPU-0", 4),
                held("c", 0).instance("GPU-1", 0),
                held("d", 0).instance("GPU-0", 0),
                held("e", 0).instance("GPU-0", 0),
                held("f", 0).on("GPU-0", 0, 20000, 0),
            ],
        )],
        PreemptLimits::default(),
    );
    assert_eq!(
        fields(&e),
        vec![
            (
                ViolationKind::MissingField,
                "placed[0].workloads[0].bookings[0].mig_instance_start"
            ),
            (
                ViolationKind::UnknownReference,
                "placed[0].workloads[1].bookings[0].mig_instance_start"
            ),
            (
                ViolationKind::UnknownReference,
                "placed[0].workloads[2].bookings[0].mig_instance_start"
            ),
            (
                ViolationKind::DuplicateId,
                "placed[0].workloads[4].bookings[0].mig_instance_start"
            ),
            (
                ViolationKind::MissingField,
                "placed[0].workloads[5].bookings[0].mig_instance_start"
            ),
        ]
    );
    // A MIG booking that also gives numbers is refused too.
    let mut c = h100("GPU-0", 0, h100_profiles());
    if let Some(l) = c.mig.as_deref_mut() {
        l.instances = vec![MigInstance::in_use("2g.20gb", at(0, 2), "team/a")];
    }
    let mut w = held("a", 0).instance("GPU-0", 0);
    w.bookings[0].mem_mib = 20096;
    let e = invalid(
        vec![NodeSpec::new("n1", vec![c])],
        vec![entry("n1", vec![w])],
        PreemptLimits::default(),
    );
    assert_eq!(
        fields(&e),
        vec![(
            ViolationKind::OutOfRange,
            "placed[0].workloads[0].bookings[0].mem_mib"
        )]
    );
}
