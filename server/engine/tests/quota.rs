//! Quotas (`docs/placement-semantics.md` section 10): every worked example of 10.7, HAMi's own
//! vectors, validation, and invariants over random clusters (proptest).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use gpusched_engine::{
    BatchMode, Card, CardUsage, DecideOptions, Defaults, GpuToken, KubeNames, MAX_QUOTA_VALUE,
    NodeFailure, NodePolicy, NodeSpec, NodeVerdict, PairScore, PreparedWorkload, QuotaBudget,
    QuotaExplanation, QuotaResource, QuotaUse, Reason, Snapshot, TypedContainer, TypedSpec,
    ViolationKind, Workload, WorkloadMeta, WorkloadSpec, allocate, allocate_batch, evaluate,
};
use proptest::prelude::*;

fn budget(mem_mib: Option<u64>, cores: Option<u64>) -> QuotaBudget {
    QuotaBudget { mem_mib, cores }
}

fn mem(mib: u64) -> QuotaBudget {
    budget(Some(mib), None)
}

fn cores(percent: u64) -> QuotaBudget {
    budget(None, Some(percent))
}

/// `pod` parsed, with `b` as its budget.
fn with(pod: &Pod, b: QuotaBudget) -> Workload {
    pod.workload().with_quota(b).unwrap()
}

fn failure(s: &Snapshot, w: &Workload, node: &str) -> NodeFailure {
    let e = evaluate(s, w, DecideOptions::default());
    e.failed
        .iter()
        .find(|f| s[f.node].name() == node)
        .map(|f| f.failure.clone())
        .unwrap_or_else(|| panic!("{node} fits"))
}

fn use_of(mem_mib: u64, cores: u64) -> QuotaUse {
    QuotaUse { mem_mib, cores }
}

fn cards(name: &str, mems: &[u64]) -> NodeSpec {
    let cards = mems
        .iter()
        .zip(0u32..)
        .map(|(m, i)| card(&format!("{name}-gpu{i}"), i, *m))
        .collect();
    NodeSpec::new(name, cards)
}

// 10.7.1: `Test_ResourceQuota` of HAMi's pkg/scheduler/scheduler_test.go, the same numbers.

fn hami_node() -> Snapshot {
    snapshot(vec![cards("node1", &[2000, 8000, 4000, 6000])])
}

#[test]
fn hami_multi_card_within_quota_passes() {
    let s = hami_node();
    let p = pod().container(&[("gpu", "2"), ("cores", "100"), ("mem", "2000")]);
    let w = with(&p, budget(Some(4000), Some(200)));
    let a = allocate(&s, &w, DecideOptions::default());
    let placement = a.placement.as_ref().unwrap();
    assert_eq!(placement.quota_use(), use_of(4000, 200));
    assert_eq!(
        placed(&s, &a).unwrap().1,
        vec![vec!["node1-gpu1".to_owned(), "node1-gpu3".to_owned()]]
    );
}

#[test]
fn hami_multi_card_over_quota_is_refused_with_hamis_text() {
    let s = hami_node();
    let p = pod().container(&[("gpu", "2"), ("cores", "60"), ("mem", "3000")]);
    let f = failure(&s, &with(&p, budget(Some(4000), Some(200))), "node1");
    assert_eq!(
        f.hami_text(),
        "1/4 AllocatedCardsInsufficientRequest, 3/4 ResourceQuotaNotFit"
    );
    assert_eq!(f.reasons.get(Reason::QuotaMemoryExceeded), 3);
    assert_eq!(f.reasons.get(Reason::QuotaCoresExceeded), 0);
    // The 2,000 MiB card is short of memory too: check 7q comes first, as in HAMi.
    assert_eq!(f.reasons.get(Reason::CardInsufficientMemory), 0);
    assert!(f.unresolvable);
    // Without the budget it fits.
    assert!(place(&s, &p.workload()).is_some());
}

#[test]
fn hami_whole_card_request_takes_the_card_the_quota_allows() {
    let s = hami_node();
    let p = pod().gpus(1);
    let w = with(&p, budget(Some(2000), Some(100)));
    assert_eq!(
        place(&s, &w).unwrap().1,
        vec![vec!["node1-gpu0".to_owned()]]
    );
    let w = with(&p, budget(Some(1500), Some(100)));
    assert_eq!(
        failure(&s, &w, "node1").hami_text(),
        "4/4 ResourceQuotaNotFit"
    );
}

// 10.7.2

#[test]
fn a_percentage_over_budget_on_the_big_card_lands_on_the_small_one() {
    let s = snapshot(vec![cards("big", &[81920]), cards("small", &[16384])]);
    let p = pod().container(&[("gpu", "1"), ("pct", "50")]);
    // Without a budget binpack ties and the smaller name wins.
    assert_eq!(place(&s, &p.workload()).unwrap().0, "big");
    let w = with(&p, mem(10240));
    let a = allocate(&s, &w, DecideOptions::default());
    assert_eq!(placed(&s, &a).unwrap().0, "small");
    assert_eq!(a.placement.unwrap().quota_use(), use_of(8192, 0));
    let f = failure(&s, &w, "big");
    assert_eq!(f.hami_text(), "1/1 ResourceQuotaNotFit");
    assert!(f.unresolvable);
}

#[test]
fn on_one_node_the_card_policy_tries_the_next_card() {
    let s = snapshot(vec![cards("mixed", &[81920, 16384])]);
    let p = pod().container(&[("gpu", "1"), ("pct", "50")]);
    let card_of = |b: Option<QuotaBudget>| {
        let w = b.map_or_else(|| p.workload(), |b| with(&p, b));
        place(&s, &w).unwrap().1
    };
    assert_eq!(card_of(None), vec![vec!["mixed-gpu0".to_owned()]]);
    assert_eq!(
        card_of(Some(mem(10240))),
        vec![vec!["mixed-gpu1".to_owned()]]
    );
    assert_eq!(
        card_of(Some(mem(40960))),
        vec![vec!["mixed-gpu0".to_owned()]]
    );
}

// 10.7.3

#[test]
fn the_running_total_spans_the_containers() {
    let s = snapshot(vec![node("n", 2, 40960)]);
    let p = pod()
        .container(&[("gpu", "1"), ("mem", "10000")])
        .container(&[("gpu", "1"), ("mem", "10000")]);
    let f = failure(&s, &with(&p, mem(15000)), "n");
    assert_eq!(f.container_position, 1);
    assert_eq!(f.hami_text(), "2/2 ResourceQuotaNotFit");
    let a = allocate(&s, &with(&p, mem(20000)), DecideOptions::default());
    assert_eq!(
        placed(&s, &a).unwrap().1,
        vec![vec!["n-gpu0".to_owned()], vec!["n-gpu1".to_owned()]]
    );
    assert_eq!(a.placement.unwrap().quota_use(), use_of(20000, 0));
}

// 10.7.4

#[test]
fn init_containers_count_per_card_as_the_peak_rule_books() {
    let s = snapshot(vec![node("n", 2, 40960)]);
    let p = pod()
        .init(&[("gpu", "1"), ("mem", "30000")])
        .container(&[("gpu", "2"), ("mem", "10000")]);
    let f = failure(&s, &with(&p, mem(35000)), "n");
    assert_eq!(f.container_position, 1);
    assert_eq!(
        f.hami_text(),
        "1/2 AllocatedCardsInsufficientRequest, 1/2 ResourceQuotaNotFit"
    );
    let a = allocate(&s, &with(&p, mem(40000)), DecideOptions::default());
    let placement = a.placement.unwrap();
    assert_eq!(placement.quota_use(), use_of(40000, 0));
    let booked: Vec<u64> = placement.booked.iter().map(|b| b.used_mem_mib).collect();
    assert_eq!(booked, vec![30000, 10000]);
    let f = failure(&s, &with(&p, mem(25000)), "n");
    assert_eq!(f.container_position, 0);
    assert_eq!(f.hami_text(), "2/2 ResourceQuotaNotFit");
    // Admission's floor is the workload-wide max(app sum, largest init): a lower bound.
    assert_eq!(p.workload().quota_floor(), use_of(30000, 0));
}

// 10.7.5

#[test]
fn cores_budgets_and_an_explicit_zero() {
    let s = snapshot(vec![node("n", 2, 40960)]);
    let two = pod().container(&[("gpu", "2"), ("cores", "20")]);
    let f = failure(&s, &with(&two, cores(30)), "n");
    assert_eq!(
        f.hami_text(),
        "1/2 AllocatedCardsInsufficientRequest, 1/2 ResourceQuotaNotFit"
    );
    assert_eq!(f.reasons.get(Reason::QuotaCoresExceeded), 1);
    let a = allocate(&s, &with(&two, cores(40)), DecideOptions::default());
    assert_eq!(a.placement.unwrap().quota_use(), use_of(81920, 40));

    // 0 cores asked, cores budget 0: blocked (HAMi would place it); budget 50: consumes 0.
    let none = pod().gpus(1);
    let f = failure(&s, &with(&none, cores(0)), "n");
    assert_eq!(f.hami_text(), "2/2 ResourceQuotaNotFit");
    assert_eq!(f.reasons.get(Reason::QuotaCoresExceeded), 2);
    let a = allocate(&s, &with(&none, cores(50)), DecideOptions::default());
    assert_eq!(a.placement.unwrap().quota_use(), use_of(40960, 0));

    let small = pod().container(&[("gpu", "1"), ("mem", "1")]);
    let f = failure(&s, &with(&small, mem(0)), "n");
    assert_eq!(f.reasons.get(Reason::QuotaMemoryExceeded), 2);
    // Memory is named first when both budgets are passed.
    let f = failure(&s, &with(&small, budget(Some(0), Some(0))), "n");
    assert_eq!(f.reasons.get(Reason::QuotaMemoryExceeded), 2);
    assert_eq!(f.reasons.get(Reason::QuotaCoresExceeded), 0);
}

// 10.7.6

fn with_pairs(mut n: NodeSpec, pairs: &[(usize, usize, i64)], default: i64) -> NodeSpec {
    let ids: Vec<String> = n.cards.iter().map(|c| c.id.clone()).collect();
    for (a, x) in ids.iter().enumerate() {
        for (b, y) in ids.iter().enumerate() {
            if a == b {
                continue;
            }
            let score = pairs
                .iter()
                .find(|(p, q, _)| (*p, *q) == (a, b) || (*p, *q) == (b, a))
                .map_or(default, |(_, _, s)| *s);
            n.pair_scores.push(PairScore {
                card_id: x.clone(),
                peer_card_id: y.clone(),
                score,
            });
        }
    }
    n
}

const TOPOLOGY: &str = "hami.io/gpu-scheduler-policy";

#[test]
fn topology_aware_chooses_among_the_combinations_within_budget() {
    let s = snapshot(vec![with_pairs(
        cards("n", &[10000, 10000, 10000, 10000]),
        &[(0, 1, 10), (2, 3, 100)],
        1,
    )]);
    let p = pod()
        .ann(TOPOLOGY, "topology-aware")
        .container(&[("gpu", "2"), ("mem", "5000")]);
    let best = vec![vec!["n-gpu2".to_owned(), "n-gpu3".to_owned()]];
    assert_eq!(place(&s, &p.workload()).unwrap().1, best);
    assert_eq!(place(&s, &with(&p, mem(10000))).unwrap().1, best);
    let f = failure(&s, &with(&p, mem(9999)), "n");
    assert_eq!(f.hami_text(), "4/4 ResourceQuotaNotFit");

    let s = snapshot(vec![with_pairs(
        cards("m", &[81920, 81920, 16384, 16384]),
        &[(0, 1, 100), (0, 2, 50)],
        1,
    )]);
    let p = pod()
        .ann(TOPOLOGY, "topology-aware")
        .container(&[("gpu", "2"), ("pct", "25")]);
    assert_eq!(
        place(&s, &p.workload()).unwrap().1,
        vec![vec!["m-gpu0".to_owned(), "m-gpu1".to_owned()]]
    );
    let a = allocate(&s, &with(&p, mem(24576)), DecideOptions::default());
    assert_eq!(
        placed(&s, &a).unwrap().1,
        vec![vec!["m-gpu0".to_owned(), "m-gpu2".to_owned()]]
    );
    assert_eq!(a.placement.unwrap().quota_use(), use_of(24576, 0));
}

#[test]
fn topology_with_numa_bind_tries_the_next_group_when_none_fits_the_budget() {
    let numa = |c: Card, n: u32| c.numa(n);
    let s = snapshot(vec![NodeSpec::new(
        "n",
        vec![
            numa(card("big0", 0, 81920), 1),
            numa(card("big1", 1, 81920), 1),
            numa(card("small0", 2, 16384), 0),
            numa(card("small1", 3, 16384), 0),
        ],
    )]);
    let p = pod()
        .ann(TOPOLOGY, "topology-aware")
        .ann("nvidia.com/numa-bind", "true")
        .container(&[("gpu", "2"), ("pct", "25")]);
    assert_eq!(
        place(&s, &p.workload()).unwrap().1,
        vec![vec!["big0".to_owned(), "big1".to_owned()]]
    );
    assert_eq!(
        place(&s, &with(&p, mem(24576))).unwrap().1,
        vec![vec!["small0".to_owned(), "small1".to_owned()]]
    );
    let f = failure(&s, &with(&p, mem(8191)), "n");
    assert_eq!(f.hami_text(), "4/4 ResourceQuotaNotFit");
}

#[test]
fn beyond_the_exact_limit_topology_keeps_the_cards_the_running_total_allows() {
    // C(40, 5) = 658,008 combinations: the greedy choice (section 5.3), under a budget first
    // reduced to the candidates that keep the running total within it (section 10.4).
    let mut n = cards("n", &[10000; 40]);
    n = with_pairs(
        n,
        &[(35, 36, 90), (36, 37, 90), (37, 38, 90), (38, 39, 90)],
        0,
    );
    let s = snapshot(vec![n]);
    let p = pod()
        .ann(TOPOLOGY, "topology-aware")
        .container(&[("gpu", "5"), ("mem", "1000")]);
    let ids = |r: std::ops::Range<usize>| vec![r.map(|i| format!("n-gpu{i}")).collect::<Vec<_>>()];
    assert_eq!(place(&s, &p.workload()).unwrap().1, ids(35..40));
    assert_eq!(place(&s, &with(&p, mem(5000))).unwrap().1, ids(0..5));
    let six = place(&s, &with(&p, mem(6000))).unwrap().1;
    assert!(six[0].iter().all(|id| ids(0..6)[0].contains(id)), "{six:?}");
    let f = failure(&s, &with(&p, mem(4999)), "n");
    assert_eq!(f.hami_text(), "40/40 ResourceQuotaNotFit");
}

// 10.7.7

#[test]
fn admission_refuses_only_what_can_never_fit_the_hard_limit() {
    let hard = mem(20000);
    let refusal = |p: Pod| hard.admission_refusal(&p.workload());
    assert_eq!(
        refusal(pod().container(&[("gpu", "4"), ("mem", "6000")])),
        Some(QuotaResource::Memory)
    );
    assert_eq!(
        refusal(pod().container(&[("gpu", "3"), ("mem", "6000")])),
        None
    );
    assert_eq!(
        refusal(
            pod()
                .init(&[("gpu", "1"), ("mem", "24000")])
                .container(&[("gpu", "1"), ("mem", "6000")])
        ),
        Some(QuotaResource::Memory)
    );
    assert_eq!(
        refusal(pod().container(&[("gpu", "4"), ("pct", "50")])),
        None
    );
    let no_cores = cores(0);
    assert_eq!(
        no_cores.admission_refusal(&pod().gpus(1).workload()),
        Some(QuotaResource::Cores)
    );
    assert_eq!(
        no_cores.admission_refusal(&pod().container(&[("cpu", "1")]).workload()),
        None
    );
    assert_eq!(
        QuotaBudget::UNLIMITED.admission_refusal(&pod().gpus(8).workload()),
        None
    );
}

// 10.7.8

fn in_namespace(ns: &str, p: &Pod, b: QuotaBudget) -> Workload {
    let meta = WorkloadMeta {
        namespace: ns.into(),
        name: format!("{ns}-pod"),
        uid: String::new(),
    };
    let w = Workload::parse(
        meta,
        &WorkloadSpec::Kubernetes(p.spec.clone()),
        &Defaults::default(),
        &KubeNames::default(),
    )
    .unwrap();
    w.with_quota(b).unwrap()
}

#[test]
fn a_batch_shares_each_namespaces_budget() {
    let s = snapshot(vec![node("n", 2, 40960)]);
    let p = pod().container(&[("gpu", "1"), ("mem", "6000")]);
    let ws = vec![
        in_namespace("team-a", &p, mem(10000)),
        in_namespace("team-a", &p, mem(10000)),
        in_namespace("team-b", &p, mem(10000)),
    ];
    let out = allocate_batch(
        s.clone(),
        &ws,
        BatchMode::Independent,
        DecideOptions::default(),
    );
    let placed: Vec<bool> = out.items.iter().map(|i| i.placed()).collect();
    assert_eq!(placed, vec![true, false, true]);
    let f = &out.items[1].allocation.failed[0].failure;
    assert_eq!(f.hami_text(), "2/2 ResourceQuotaNotFit");
    // Each alone fits: only the sharing refuses the second.
    assert!(
        allocate(&s, &ws[1], DecideOptions::default())
            .placement
            .is_some()
    );
    let gang = allocate_batch(s, &ws, BatchMode::AllOrNothing, DecideOptions::default());
    assert!(!gang.all_placed);
    assert!(gang.items.iter().all(|i| !i.placed()));
}

// 10.3: the greedy corner, pinned as documented.

#[test]
fn the_quota_check_is_greedy_in_visiting_order() {
    let s = snapshot(vec![cards("n", &[81920, 16384, 16384])]);
    let p = pod().container(&[("gpu", "2"), ("pct", "50")]);
    assert_eq!(
        place(&s, &with(&p, mem(20480))).unwrap().1,
        vec![vec!["n-gpu1".to_owned(), "n-gpu2".to_owned()]]
    );
    let f = failure(&s, &with(&p, mem(45056)), "n");
    assert_eq!(
        f.hami_text(),
        "1/3 AllocatedCardsInsufficientRequest, 2/3 ResourceQuotaNotFit"
    );
}

// 10.4: mutex refuses a used card before the quota is asked.

#[test]
fn mutex_refusals_come_before_the_quota() {
    let s = snapshot(vec![NodeSpec::new(
        "n",
        vec![card("a", 0, 8000).used(1, 100, 0), card("b", 1, 8000)],
    )]);
    let p = pod().ann(TOPOLOGY, "mutex").gpus(1);
    let f = failure(&s, &with(&p, mem(0)), "n");
    assert_eq!(
        f.hami_text(),
        "1/2 ExclusiveDeviceAllocateConflict, 1/2 ResourceQuotaNotFit"
    );
    // A card within budget but short of memory is short of memory.
    let p = pod().container(&[("gpu", "1"), ("mem", "7950")]);
    let full = snapshot(vec![NodeSpec::new(
        "n",
        vec![card("a", 0, 8000).used(1, 100, 0)],
    )]);
    let f = failure(&full, &with(&p, mem(7950)), "n");
    assert_eq!(f.hami_text(), "1/1 CardInsufficientMemory");
    assert_eq!(
        place(&s, &with(&p, mem(7950))).unwrap().1,
        vec![vec!["b".to_owned()]]
    );
}

// 10.5: the explanation names the budget and what the node's placement consumes.

#[test]
fn the_explanation_names_the_budget_and_the_consumption() {
    let s = snapshot(vec![node("n", 2, 40960)]);
    let p = pod()
        .container(&[("gpu", "1"), ("mem", "10000"), ("cores", "10")])
        .container(&[("gpu", "1"), ("mem", "10000")]);
    let b = budget(Some(15000), Some(100));
    let e = evaluate(&s, &with(&p, b), DecideOptions::explained());
    let ex = &e.explanations[0];
    assert_eq!(
        ex.quota,
        Some(QuotaExplanation {
            budget: b,
            consumed: use_of(10000, 10)
        })
    );
    let refused: Vec<Option<Reason>> = ex.containers[1].cards.iter().map(|c| c.rejected).collect();
    assert_eq!(refused, vec![Some(Reason::QuotaMemoryExceeded); 2]);
    let b = mem(20000);
    let a = allocate(&s, &with(&p, b), DecideOptions::explained());
    assert_eq!(
        a.explanations[0].quota,
        Some(QuotaExplanation {
            budget: b,
            consumed: use_of(20000, 10)
        })
    );
    let a = allocate(&s, &p.workload(), DecideOptions::explained());
    assert_eq!(a.explanations[0].quota, None);
}

// 10.1: validation.

#[test]
fn budgets_above_the_largest_value_are_typed_violations_naming_the_field() {
    let w = pod().gpus(1).workload();
    assert!(
        w.clone()
            .with_quota(budget(Some(MAX_QUOTA_VALUE), Some(MAX_QUOTA_VALUE)))
            .is_ok()
    );
    let e = w
        .clone()
        .with_quota(budget(Some(u64::MAX), Some(MAX_QUOTA_VALUE + 1)))
        .unwrap_err();
    let got: Vec<(&str, ViolationKind)> = e
        .violations
        .iter()
        .map(|v| (v.field.as_str(), v.kind))
        .collect();
    assert_eq!(
        got,
        vec![
            ("quota.mem_mib", ViolationKind::OutOfRange),
            ("quota.cores", ViolationKind::OutOfRange)
        ]
    );
    assert!(e.to_string().contains("18446744073709551615"), "{e}");
    // Validated whatever the workload asks.
    let cpu_only = pod().container(&[("cpu", "1")]).workload();
    assert!(cpu_only.with_quota(cores(u64::MAX)).is_err());
    assert_eq!(w.quota(), QuotaBudget::UNLIMITED);
}

// Invariants.

fn arb_card(node: usize, i: usize) -> impl Strategy<Value = Card> {
    (
        prop::sample::select(vec![4000u64, 16384, 81920]),
        1u32..=4,
        0u32..2,
        (0u32..3, 0.0f64..0.7, 0u32..60),
    )
        .prop_map(move |(total, count, numa, (used, fill, used_cores))| {
            let mut c = Card::new(format!("G{node}-{i}"), i as u32, "NVIDIA-A100", total);
            c.count = count;
            c.numa = numa;
            if used > 0 {
                c.usage = CardUsage {
                    used: used.min(count),
                    used_mem_mib: (total as f64 * fill) as u64,
                    used_cores,
                };
            }
            c
        })
}

fn arb_nodes() -> impl Strategy<Value = Vec<NodeSpec>> {
    (1usize..5).prop_flat_map(|n| {
        (0..n)
            .map(|node| {
                (1usize..5).prop_flat_map(move |k| {
                    (0..k)
                        .map(|i| arb_card(node, i))
                        .collect::<Vec<_>>()
                        .prop_map(move |cs| {
                            with_pairs(NodeSpec::new(format!("n{node}"), cs), &[(0, 1, 7)], 2)
                        })
                })
            })
            .collect::<Vec<_>>()
    })
}

fn arb_gpu_container(init: bool) -> impl Strategy<Value = TypedContainer> {
    common::arb_container(
        init,
        vec![1, 2],
        vec![0, 1000, 3000, 6000],
        vec![0, 0, 25, 50],
        vec![0, 10, 30],
    )
}

fn arb_workload() -> impl Strategy<Value = Workload> {
    (
        prop::sample::select(vec![
            vec![GpuToken::Spread],
            vec![GpuToken::Binpack],
            vec![GpuToken::Mutex],
            vec![GpuToken::TopologyAware],
            vec![GpuToken::Numa, GpuToken::Binpack],
        ]),
        prop::sample::select(vec![NodePolicy::Binpack, NodePolicy::Spread]),
        prop::bool::weighted(0.25),
        prop::collection::vec(arb_gpu_container(true), 0..2),
        prop::collection::vec(arb_gpu_container(false), 1..3),
    )
        .prop_map(|(gpu_policy, node_policy, numa_bind, init, apps)| {
            typed(TypedSpec {
                node_policy: Some(node_policy),
                gpu_policy,
                numa_bind,
                init_containers: init,
                containers: apps,
                ..TypedSpec::default()
            })
        })
}

fn arb_budget() -> impl Strategy<Value = QuotaBudget> {
    (
        prop::option::of(prop::sample::select(vec![
            0u64, 2000, 4096, 8192, 12000, 20480, 40960, 100_000,
        ])),
        prop::option::of(prop::sample::select(vec![0u64, 10, 30, 60, 200])),
    )
        .prop_map(|(mem_mib, cores)| QuotaBudget { mem_mib, cores })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn a_placement_never_consumes_more_than_its_budget(
        nodes in arb_nodes(), w in arb_workload(), b in arb_budget()
    ) {
        let s = Snapshot::new(nodes).unwrap();
        let w = w.with_quota(b).unwrap();
        if let Some(p) = allocate(&s, &w, DecideOptions::default()).placement {
            let used = p.quota_use();
            prop_assert_eq!(b.refusal(used), None, "{:?} over {:?}", used, b);
            prop_assert!(b.mem_mib != Some(0) && b.cores != Some(0));
            // What admission counts is never more than what a placement consumes.
            let floor = w.quota_floor();
            prop_assert!(floor.mem_mib <= used.mem_mib && floor.cores <= used.cores);
        }
    }

    #[test]
    fn a_batch_never_consumes_more_than_a_namespaces_budget(
        nodes in arb_nodes(),
        ws in prop::collection::vec((arb_workload(), prop::bool::ANY), 1..6),
        ba in arb_budget(),
        bb in arb_budget(),
    ) {
        let s = Snapshot::new(nodes).unwrap();
        let ws: Vec<Workload> = ws
            .into_iter()
            .map(|(mut w, a)| {
                w.meta.namespace = if a { "a".into() } else { "b".into() };
                w.with_quota(if a { ba } else { bb }).unwrap()
            })
            .collect();
        let out = allocate_batch(s, &ws, BatchMode::Independent, DecideOptions::default());
        for (ns, b) in [("a", ba), ("b", bb)] {
            let used = ws
                .iter()
                .zip(&out.items)
                .filter(|(w, i)| w.meta.namespace == ns && i.placed())
                .filter_map(|(_, i)| i.allocation.placement.as_ref())
                .fold(use_of(0, 0), |u, p| {
                    let q = p.quota_use();
                    use_of(u.mem_mib + q.mem_mib, u.cores + q.cores)
                });
            prop_assert!(used == use_of(0, 0) || b.refusal(used).is_none(), "{} {:?} over {:?}", ns, used, b);
        }
    }

    #[test]
    fn a_budget_that_never_binds_gives_todays_answers(
        nodes in arb_nodes(), w in arb_workload(), which in 0usize..3
    ) {
        let s = Snapshot::new(nodes).unwrap();
        let big = [
            budget(Some(MAX_QUOTA_VALUE), Some(MAX_QUOTA_VALUE)),
            budget(Some(MAX_QUOTA_VALUE), None),
            budget(None, Some(MAX_QUOTA_VALUE)),
        ][which];
        let bound = w.clone().with_quota(big).unwrap();
        let today = allocate(&s, &w, DecideOptions::explained());
        let mut quota = allocate(&s, &bound, DecideOptions::explained());
        for ex in &mut quota.explanations {
            prop_assert!(ex.quota.is_some());
            ex.quota = None;
        }
        prop_assert_eq!(today, quota);
        prop_assert_eq!(
            evaluate(&s, &w, DecideOptions::default()),
            evaluate(&s, &bound, DecideOptions::default())
        );
    }

    #[test]
    fn exactly_its_consumption_is_budget_enough(
        nodes in arb_nodes(), w in arb_workload(), b in arb_budget()
    ) {
        // Not topology-aware: its one-card choice looks at the other candidates, which a
        // smaller budget may remove (section 10.4).
        prop_assume!(!w.gpu_policy.contains(GpuToken::TopologyAware));
        let s = Snapshot::new(nodes).unwrap();
        let w = w.with_quota(b).unwrap();
        let a = allocate(&s, &w, DecideOptions::default());
        if let Some(p) = &a.placement {
            let used = p.quota_use();
            let tight = budget(
                b.mem_mib.map(|_| used.mem_mib).filter(|m| *m > 0),
                b.cores.map(|_| used.cores).filter(|c| *c > 0),
            );
            let mut only = s.clone();
            only.retain_names(&[s[p.node].name().to_owned()]);
            let tight = w.clone().with_quota(tight).unwrap();
            prop_assert_eq!(placed(&s, &a), decision(&only, &tight).0);
        }
    }

    #[test]
    fn with_a_budget_the_answer_does_not_depend_on_node_or_card_order(
        nodes in arb_nodes(), w in arb_workload(), b in arb_budget(), rot in 0usize..5
    ) {
        let w = w.with_quota(b).unwrap();
        let s1 = Snapshot::new(nodes.clone()).unwrap();
        let s2 = Snapshot::new(reordered(nodes, rot)).unwrap();
        prop_assert_eq!(decision(&s1, &w), decision(&s2, &w));
    }

    #[test]
    fn with_a_budget_quick_paths_agree_with_the_full_visit(
        nodes in arb_nodes(), w in arb_workload(), b in arb_budget()
    ) {
        let s = Snapshot::new(nodes).unwrap();
        let w = w.with_quota(b).unwrap();
        let quick = evaluate(&s, &w, DecideOptions::default());
        let full = evaluate(&s, &w, DecideOptions::explained());
        prop_assert_eq!(&quick.feasible, &full.feasible);
        prop_assert_eq!(&quick.failed, &full.failed);
        let prepared = PreparedWorkload::new(&w);
        for (id, node) in s.iter() {
            let verdict = prepared.fit(node);
            match quick.failed.iter().find(|f| f.node == id) {
                Some(f) => prop_assert_eq!(verdict, NodeVerdict::DoesNotFit(f.failure.clone())),
                None => prop_assert!(verdict.fits()),
            }
        }
    }
}
