//! Card choice: ordering and tie-breaks, numa-bind, chains, topology-aware, multi-card and
//! multi-container workloads, init containers, node choice, batches.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use gpusched_engine::{
    BatchMode, CardUsage, DecideOptions, NodeSpec, PairScore, Reason, allocate, allocate_batch,
    evaluate,
};

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn cards_of(s: &gpusched_engine::Snapshot, p: &Pod) -> Vec<Vec<String>> {
    place(s, &p.workload()).map(|x| x.1).unwrap_or_default()
}

/// g0, g1 on NUMA 0; g2, g3 on NUMA 1.
fn numa_node(used: &[(usize, u32)]) -> gpusched_engine::Snapshot {
    let mut cards: Vec<_> = (0..4)
        .map(|i| card(&format!("g{i}"), i as u32, 8000).numa(u32::from(i >= 2)))
        .collect();
    for &(i, slots) in used {
        cards[i] = cards[i].clone().used(slots, 100 * u64::from(slots), 0);
    }
    snapshot(vec![NodeSpec::new("n", cards)])
}

#[test]
fn equal_scores_prefer_higher_numa_then_lower_index() {
    let s = numa_node(&[]);
    let one = pod().container(&[("gpu", "1"), ("mem", "100")]);
    assert_eq!(cards_of(&s, &one), vec![ids(&["g2"])]);
    assert_eq!(
        cards_of(
            &s,
            &one.clone().ann("hami.io/gpu-scheduler-policy", "binpack")
        ),
        vec![ids(&["g2"])]
    );
    let two = pod().container(&[("gpu", "2"), ("mem", "100")]);
    assert_eq!(cards_of(&s, &two), vec![ids(&["g2", "g3"])]);
}

#[test]
fn numa_bind_binpack_visits_lowest_group_first_spread_highest() {
    let s = numa_node(&[]);
    let base = pod()
        .ann("nvidia.com/numa-bind", "true")
        .container(&[("gpu", "2"), ("mem", "100")]);
    assert_eq!(
        cards_of(
            &s,
            &base.clone().ann("hami.io/gpu-scheduler-policy", "binpack")
        ),
        vec![ids(&["g0", "g1"])]
    );
    assert_eq!(cards_of(&s, &base), vec![ids(&["g2", "g3"])]);
}

#[test]
fn numa_bind_moves_to_the_next_group_and_counts_numa_not_fit() {
    // g1 is full: NUMA 0 cannot supply two cards, binpack moves on to NUMA 1.
    let s = numa_node(&[(1, 10)]);
    let p = pod()
        .ann("nvidia.com/numa-bind", "1")
        .ann("hami.io/gpu-scheduler-policy", "binpack")
        .container(&[("gpu", "2"), ("mem", "100")]);
    assert_eq!(cards_of(&s, &p), vec![ids(&["g2", "g3"])]);
    // Both groups short: g1 and g3 full.
    let s = numa_node(&[(1, 10), (3, 10)]);
    let e = evaluate(&s, &p.workload(), DecideOptions::default());
    assert_eq!(
        e.failed[0].failure.hami_text(),
        "1/4 AllocatedCardsInsufficientRequest, 1/4 NumaNotFit, 2/4 CardTimeSlicingExhausted"
    );
    // Without numa-bind the same node fits across groups.
    let free = pod()
        .ann("hami.io/gpu-scheduler-policy", "binpack")
        .container(&[("gpu", "2"), ("mem", "100")]);
    assert_eq!(cards_of(&s, &free).len(), 1);
}

#[test]
fn score_dominates_numa_without_numa_bind() {
    // g0 (NUMA 0) is busier: binpack prefers it over the idle NUMA-1 cards.
    let s = numa_node(&[(0, 3)]);
    let p = pod()
        .ann("hami.io/gpu-scheduler-policy", "binpack")
        .container(&[("gpu", "1"), ("mem", "100")]);
    assert_eq!(cards_of(&s, &p), vec![ids(&["g0"])]);
}

#[test]
fn chains_sort_by_keys_in_written_order() {
    // g0 NUMA 0 busier (higher score); g2 NUMA 1 idle.
    let s = numa_node(&[(0, 3)]);
    let with = |policy: &str| {
        cards_of(
            &s,
            &pod()
                .ann("hami.io/gpu-scheduler-policy", policy)
                .container(&[("gpu", "1"), ("mem", "100")]),
        )
    };
    assert_eq!(with("binpack,numa"), vec![ids(&["g0"])]);
    assert_eq!(with("numa,binpack"), vec![ids(&["g2"])]);
    assert_eq!(with("numa"), vec![ids(&["g2"])]);
    assert_eq!(with("spread,numa"), vec![ids(&["g2"])]);
    // mutex in a chain filters (busy g0 is out); spread is the fallback sort key; a chain
    // without `numa` breaks ties by the lower index.
    assert_eq!(with("mutex,topology-aware"), vec![ids(&["g1"])]);
    assert_eq!(with("mutex,binpack"), vec![ids(&["g1"])]);
}

#[test]
fn chain_tie_break_is_lower_index_without_numa_tie_break() {
    // Equal scores: a plain policy breaks ties by higher NUMA first; a chain without `numa`
    // goes straight to the lower index.
    let s = numa_node(&[]);
    let with = |policy: &str| {
        cards_of(
            &s,
            &pod()
                .ann("hami.io/gpu-scheduler-policy", policy)
                .container(&[("gpu", "1"), ("mem", "100")]),
        )
    };
    assert_eq!(with("binpack"), vec![ids(&["g2"])]);
    assert_eq!(with("binpack,mutex"), vec![ids(&["g0"])]);
    assert_eq!(with("binpack,numa"), vec![ids(&["g2"])]);
}

#[test]
fn chain_with_numa_bind_puts_numa_first() {
    let s = numa_node(&[(0, 3)]);
    let p = pod()
        .ann("nvidia.com/numa-bind", "true")
        .ann("hami.io/gpu-scheduler-policy", "binpack,numa")
        .container(&[("gpu", "2"), ("mem", "100")]);
    assert_eq!(cards_of(&s, &p), vec![ids(&["g2", "g3"])]);
}

fn topo_node(used: &[usize]) -> gpusched_engine::Snapshot {
    let mut cards: Vec<_> = (0..4).map(|i| card(&format!("g{i}"), i, 8000)).collect();
    for &i in used {
        cards[i] = cards[i].clone().used(10, 0, 0);
    }
    let mut n = NodeSpec::new("n", cards);
    let score = |a: usize, b: usize| match (a.min(b), a.max(b)) {
        (0, 1) => 100,
        (2, 3) => 50,
        (1, 3) => 80,
        _ => 10,
    };
    for a in 0..4 {
        for b in 0..4 {
            if a != b {
                n.pair_scores.push(PairScore {
                    card_id: format!("g{a}"),
                    peer_card_id: format!("g{b}"),
                    score: score(a, b),
                });
            }
        }
    }
    snapshot(vec![n])
}

#[test]
fn topology_aware_takes_the_best_connected_set() {
    let topo = |n: &str| {
        pod()
            .ann("hami.io/gpu-scheduler-policy", "topology-aware")
            .container(&[("gpu", n), ("mem", "100")])
    };
    let s = topo_node(&[]);
    assert_eq!(cards_of(&s, &topo("2")), vec![ids(&["g0", "g1"])]);
    // 3 cards: {0,1,3} = 100 + 10 + 80 = 190 is the best triple.
    assert_eq!(cards_of(&s, &topo("3")), vec![ids(&["g0", "g1", "g3"])]);
    // 1 card: the worst connected (g2: 10 + 10 + 50 = 70).
    assert_eq!(cards_of(&s, &topo("1")), vec![ids(&["g2"])]);
    // g0 full: the best pair among g1..g3 is {g1, g3}.
    let s = topo_node(&[0]);
    assert_eq!(cards_of(&s, &topo("2")), vec![ids(&["g1", "g3"])]);
    // Exactly as many fitting cards as needed.
    let s = topo_node(&[0, 1]);
    assert_eq!(cards_of(&s, &topo("2")), vec![ids(&["g2", "g3"])]);
    // Fewer: the collected count is reported.
    let s = topo_node(&[0, 1, 2]);
    let e = evaluate(&s, &topo("2").workload(), DecideOptions::default());
    assert_eq!(
        e.failed[0].failure.hami_text(),
        "1/4 AllocatedCardsInsufficientRequest, 3/4 CardTimeSlicingExhausted"
    );
}

#[test]
fn topology_without_pair_scores_is_first_in_visiting_order() {
    let s = numa_node(&[]);
    let p = pod()
        .ann("hami.io/gpu-scheduler-policy", "topology-aware")
        .container(&[("gpu", "2"), ("mem", "100")]);
    assert_eq!(cards_of(&s, &p), vec![ids(&["g2", "g3"])]);
}

#[test]
fn multi_card_container_never_takes_a_card_twice() {
    let s = snapshot(vec![node("n", 4, 8000)]);
    let got = cards_of(&s, &pod().gpus(4));
    let mut sorted = got[0].clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 4);
    assert!(place(&s, &pod().gpus(5).workload()).is_none());
}

#[test]
fn later_containers_see_earlier_ones() {
    let s = snapshot(vec![node("n", 2, 8000)]);
    let two = pod()
        .container(&[("gpu", "1"), ("mem", "5000")])
        .container(&[("gpu", "1"), ("mem", "5000")]);
    let got = cards_of(&s, &two);
    assert_eq!(got.len(), 2);
    assert_ne!(
        got[0], got[1],
        "5000 + 5000 MiB cannot share an 8000 MiB card"
    );
    let s1 = snapshot(vec![node("n", 1, 8000)]);
    let e = evaluate(&s1, &two.workload(), DecideOptions::default());
    assert_eq!(e.failed[0].failure.container_position, 1);
    assert_eq!(
        e.failed[0].failure.hami_text(),
        "1/1 CardInsufficientMemory"
    );
    // A container without GPU in between keeps an empty entry.
    let mixed = pod()
        .container(&[("gpu", "1"), ("mem", "100")])
        .container(&[("cpu", "1")])
        .container(&[("gpu", "1"), ("mem", "100")]);
    let got = cards_of(&s, &mixed);
    assert_eq!(got.len(), 3);
    assert!(got[1].is_empty());
}

#[test]
fn init_containers_book_the_peak_not_the_sum() {
    let s = snapshot(vec![node("n", 1, 8000)]);
    let p = pod()
        .init(&[("gpu", "1"), ("mem", "6000"), ("cores", "60")])
        .container(&[("gpu", "1"), ("mem", "4000"), ("cores", "30")]);
    let a = allocate(&s, &p.workload(), DecideOptions::default());
    let placement = a
        .placement
        .expect("init 6000 then app 4000 fit one 8000 MiB card");
    assert_eq!(
        placement.final_usage,
        vec![CardUsage {
            used: 1,
            used_mem_mib: 6000,
            used_cores: 60
        }]
    );
    assert_eq!(placement.containers.len(), 2);
    assert_eq!(placement.containers[0].cards[0].mem_mib, 6000);
    assert_eq!(placement.containers[1].cards[0].mem_mib, 4000);
    // Two init containers, each alone against the node.
    let p2 = pod()
        .init(&[("gpu", "1"), ("mem", "5000")])
        .init(&[("gpu", "1"), ("mem", "5000")])
        .container(&[("gpu", "1"), ("mem", "1000")]);
    let a = allocate(&s, &p2.workload(), DecideOptions::default());
    assert_eq!(a.placement.unwrap().final_usage[0].used_mem_mib, 5000);
    // Peak per dimension: slots from the apps (2), memory from the init (7000).
    let s2 = snapshot(vec![node("n", 1, 8000)]);
    let p3 = pod()
        .init(&[("gpu", "1"), ("mem", "7000")])
        .container(&[("gpu", "1"), ("mem", "500")])
        .container(&[("gpu", "1"), ("mem", "500")]);
    let u = allocate(&s2, &p3.workload(), DecideOptions::default())
        .placement
        .unwrap()
        .final_usage[0];
    assert_eq!(
        u,
        CardUsage {
            used: 2,
            used_mem_mib: 7000,
            used_cores: 0
        }
    );
}

#[test]
fn an_init_container_that_does_not_fit_fails_the_node() {
    let s = snapshot(vec![node("n", 1, 8000)]);
    let p = pod()
        .init(&[("gpu", "1"), ("mem", "9000")])
        .container(&[("gpu", "1"), ("mem", "10")]);
    let e = evaluate(&s, &p.workload(), DecideOptions::default());
    assert_eq!(e.failed[0].failure.container_position, 0);
    assert_eq!(
        e.failed[0]
            .failure
            .reasons
            .get(Reason::CardInsufficientMemory),
        1
    );
}

#[test]
fn node_ties_go_to_the_smallest_name_and_scores_are_normalised() {
    let s = snapshot(vec![
        node("b", 2, 8000),
        node("a", 2, 8000),
        node("c", 2, 8000),
    ]);
    let w = pod().gpus(1).workload();
    assert_eq!(place(&s, &w).unwrap().0, "a");
    let spread = pod()
        .ann("hami.io/node-scheduler-policy", "spread")
        .gpus(1)
        .workload();
    assert_eq!(place(&s, &spread).unwrap().0, "a");
    let e = evaluate(&s, &w, DecideOptions::default());
    assert!(e.feasible.iter().all(|f| f.normalized == 100));
    // Different scores: 100 for the preferred, 0 for the other.
    let s = snapshot(vec![
        node("a", 2, 8000),
        NodeSpec::new(
            "b",
            vec![card("x", 0, 8000).used(1, 4000, 0), card("y", 1, 8000)],
        ),
    ]);
    let e = evaluate(
        &s,
        &pod().container(&[("gpu", "1"), ("mem", "100")]).workload(),
        DecideOptions::default(),
    );
    let by_name: Vec<(&str, u32)> = e
        .feasible
        .iter()
        .map(|f| (s[f.node].name(), f.normalized))
        .collect();
    assert_eq!(by_name, vec![("b", 100), ("a", 0)]);
}

#[test]
fn no_gpu_workload_passes_every_node_unchanged() {
    let s = snapshot(vec![node("a", 0, 0), node("b", 1, 8000).clone()]);
    let w = pod().container(&[("cpu", "2")]).workload();
    let e = evaluate(&s, &w, DecideOptions::default());
    assert!(!e.requests_gpu);
    assert_eq!(e.feasible.len(), 2);
    assert!(e.failed.is_empty());
    let a = allocate(&s, &w, DecideOptions::default());
    assert!(a.placement.is_none() && !a.requests_gpu);
}

#[test]
fn batch_places_sequentially_and_rolls_back_all_or_nothing() {
    let s = snapshot(vec![node("n", 2, 8000)]);
    let whole = pod().gpus(1).workload();
    let ws = vec![whole.clone(), whole.clone(), whole.clone()];
    let out = allocate_batch(
        s.clone(),
        &ws,
        BatchMode::Independent,
        DecideOptions::default(),
    );
    let placed: Vec<bool> = out.items.iter().map(|i| i.placed()).collect();
    assert_eq!(placed, vec![true, true, false]);
    assert!(!out.all_placed);
    assert_eq!(
        out.snapshot
            .nodes()
            .next()
            .expect("one node")
            .cards()
            .iter()
            .map(|c| c.usage.used)
            .sum::<u32>(),
        2
    );
    let gang = allocate_batch(
        s.clone(),
        &ws,
        BatchMode::AllOrNothing,
        DecideOptions::default(),
    );
    assert!(gang.items.iter().all(|i| !i.placed()));
    assert!(gang.items[0].rolled_back && gang.items[1].rolled_back && !gang.items[2].rolled_back);
    assert_eq!(gang.snapshot, s);
    let ok = allocate_batch(
        s.clone(),
        &ws[..2],
        BatchMode::AllOrNothing,
        DecideOptions::default(),
    );
    assert!(ok.all_placed && ok.items.iter().all(|i| i.placed()));
}

#[test]
fn explanations_cover_every_card_in_visiting_order() {
    let s = numa_node(&[(0, 3)]);
    let w = pod()
        .ann("hami.io/gpu-scheduler-policy", "binpack")
        .container(&[("gpu", "1"), ("mem", "100")])
        .workload();
    let a = allocate(&s, &w, DecideOptions::explained());
    let cards = &a.explanations[0].containers[0].cards;
    assert_eq!(cards.len(), 4);
    assert_eq!(cards[0].card, 0);
    assert!(cards[0].chosen && cards[0].visit_position == Some(0));
    assert!(
        cards[1..]
            .iter()
            .all(|c| !c.chosen && c.visit_position.is_none())
    );
    // Scores in the explanation are in visiting order for binpack (descending).
    assert!(
        cards
            .windows(2)
            .all(|w| w[0].terms.total() >= w[1].terms.total())
    );
}
