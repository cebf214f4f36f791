//! MIG cards (`docs/placement-semantics.md` section 11): the worked examples of 11.7 on the real
//! H100 80GB and H200 141GB tables, the reasons, validation (11.1), explanations (11.6) and
//! booking (11.5).

#![allow(clippy::unwrap_used)]

mod common;
mod mig_common;

use common::snapshot;
use gpusched_engine::{
    BookingError, Card, CardMode, CardUsage, DecideOptions, MigInstance, MigOutcome, Node,
    NodeSpec, Reason, ViolationKind, allocate, apply, evaluate, release,
};
use mig_common::*;

fn one(card: Card) -> NodeSpec {
    NodeSpec::new("n", vec![card])
}

fn usage(s: &gpusched_engine::Snapshot, card: usize) -> CardUsage {
    s.node_named("n").unwrap().cards()[card].usage
}

/// 11.7 example 1: filling an idle H100 under HAMi's default allowlist.
#[test]
fn example_1_filling_an_h100() {
    let mut s = snapshot(vec![one(h100("GPU-0", 0, hami_h100_allowlist()))]);
    let a = place(&mut s, &mig_pod("a", &[("mem", "30000")]));
    assert_eq!(choice(&a), Some(("3g.40gb".into(), 4, false)));
    let b = place(&mut s, &mig_pod("b", &[("mem", "5000")]));
    assert_eq!(choice(&b), Some(("1g.10gb".into(), 3, false)));
    let c = place(&mut s, &mig_pod("c", &[("mem", "5000")]));
    assert_eq!(choice(&c), Some(("1g.10gb".into(), 2, false)));
    let d = place(&mut s, &mig_pod("d", &[("mem", "15000")]));
    assert_eq!(choice(&d), Some(("2g.20gb".into(), 0, false)));
    let e = place(&mut s, &mig_pod("e", &[("mem", "15000")]));
    assert!(e.placement.is_none());
    assert_eq!(failure(&e), "1/1 MigNoFreePlacement");
    assert!(!e.failed[0].failure.unresolvable);
    // The assignment reports what the instance gives the container.
    let k = &d.placement.as_ref().unwrap().containers[0].cards[0];
    assert_eq!((k.mem_mib, k.cores), (20_096, 25));
    assert_eq!(k.mig.as_ref().unwrap().owner, "team/d");
    // Usage is the slices taken; the node score follows section 6.
    assert_eq!(
        usage(&s, 0),
        CardUsage {
            used: 4,
            used_mem_mib: 81_556,
            used_cores: 98
        }
    );
    let score = d.placement.as_ref().unwrap().score.raw;
    assert!((score - 25.513_917_882_4).abs() < 1e-6, "{score}");
    assert_eq!(
        instances(&s, "n", 0),
        vec![
            ("2g.20gb".into(), 0, Some("team/d".into())),
            ("1g.10gb".into(), 2, Some("team/c".into())),
            ("1g.10gb".into(), 3, Some("team/b".into())),
            ("3g.40gb".into(), 4, Some("team/a".into())),
        ]
    );
    // Deleting A frees slices 4-7.
    release(&mut s, a.placement.as_ref().unwrap()).unwrap();
    let e = place(&mut s, &mig_pod("e", &[("mem", "15000")]));
    assert_eq!(choice(&e), Some(("2g.20gb".into(), 4, false)));
}

/// 11.7 example 2: how requests resolve on an idle H100 with every profile allowed.
#[test]
fn example_2_request_resolution() {
    let s = snapshot(vec![one(h100("GPU-0", 0, h100_profiles()))]);
    type Case<'a> = (&'a [(&'a str, &'a str)], Option<(&'a str, u32)>, &'a str);
    let cases: &[Case] = &[
        (&[("pct", "50")], Some(("3g.40gb", 4)), ""),
        (&[], Some(("7g.80gb", 0)), ""),
        (&[("mem", "15000")], Some(("1g.20gb", 6)), ""),
        (
            &[("mem", "10000"), ("cores", "40")],
            Some(("3g.40gb", 4)),
            "",
        ),
        (
            &[("mem", "10000"), ("cores", "50")],
            Some(("7g.80gb", 0)),
            "",
        ),
        (&[("pct", "10")], Some(("1g.10gb", 6)), ""),
        (&[("pct", "13")], Some(("1g.20gb", 6)), ""),
        (&[("mem", "90000")], None, "1/1 MigNoProfileLargeEnough"),
    ];
    for (limits, want, text) in cases {
        let a = allocate(&s, &mig_pod("p", limits), DecideOptions::default());
        let got = choice(&a);
        assert_eq!(
            got.as_ref().map(|(p, s, _)| (p.as_str(), *s)),
            *want,
            "{limits:?}"
        );
        if want.is_none() {
            assert_eq!(failure(&a), *text);
            assert!(a.failed[0].failure.unresolvable, "{limits:?}");
        }
    }
    let narrow = snapshot(vec![one(h100(
        "GPU-0",
        0,
        allow_only(h100_profiles(), &["1g.10gb", "2g.20gb"]),
    ))]);
    let a = allocate(
        &narrow,
        &mig_pod("p", &[("mem", "30000")]),
        DecideOptions::default(),
    );
    assert_eq!(failure(&a), "1/1 MigProfileNotAllowed");
    assert!(a.failed[0].failure.unresolvable);
}

/// 11.7 example 3: an H200 with a free and a used instance: reuse, then fragmentation.
#[test]
fn example_3_h200_with_instances() {
    let card = h200(
        "GPU-0",
        0,
        vec![
            MigInstance::in_use("3g.71gb", at(4, 4), "team-a/train"),
            MigInstance::free("1g.18gb", at(0, 1)),
        ],
    );
    let mut s = snapshot(vec![one(card)]);
    assert_eq!(
        usage(&s, 0),
        CardUsage {
            used: 1,
            used_mem_mib: 71_885,
            used_cores: 42
        }
    );
    let x = place(&mut s, &mig_pod("x", &[("mem", "12000")]));
    assert_eq!(choice(&x), Some(("1g.18gb".into(), 0, true)));
    let z = place(&mut s, &mig_pod("z", &[("mem", "30000")]));
    assert_eq!(choice(&z), Some(("1g.35gb".into(), 2, false)));
    let y = place(&mut s, &mig_pod("y", &[("mem", "12000")]));
    assert_eq!(choice(&y), Some(("1g.18gb".into(), 1, false)));
    let w = place(&mut s, &mig_pod("w", &[("mem", "12000")]));
    assert_eq!(failure(&w), "1/1 MigNoFreePlacement");
    assert_eq!(
        instances(&s, "n", 0),
        vec![
            ("1g.18gb".into(), 0, Some("team/x".into())),
            ("1g.18gb".into(), 1, Some("team/y".into())),
            ("1g.35gb".into(), 2, Some("team/z".into())),
            ("3g.71gb".into(), 4, Some("team-a/train".into())),
        ]
    );
    // Releasing the reused instance frees it again: it stays on the card.
    release(&mut s, x.placement.as_ref().unwrap()).unwrap();
    assert_eq!(instances(&s, "n", 0)[0], ("1g.18gb".into(), 0, None));
}

/// 11.7 example 4: binpack and spread order MIG cards by slices taken.
#[test]
fn example_4_card_order() {
    let node = NodeSpec::new(
        "n",
        vec![
            h200(
                "GPU-0",
                0,
                vec![MigInstance::in_use("3g.71gb", at(4, 4), "team-a/train")],
            ),
            h200("GPU-1", 1, vec![]),
        ],
    );
    let s = snapshot(vec![node]);
    for (policy, card, start) in [("binpack", 0usize, 3u32), ("spread", 1, 6)] {
        let w = pod_with(
            "p",
            &[
                ("nvidia.com/vgpu-mode", "mig"),
                ("hami.io/gpu-scheduler-policy", policy),
            ],
            &[],
            &[&[("mem", "12000")]],
        );
        let a = allocate(&s, &w, DecideOptions::explained());
        let p = a.placement.as_ref().unwrap();
        assert_eq!(p.containers[0].cards[0].card, card, "{policy}");
        assert_eq!(
            choice(&a),
            Some(("1g.18gb".into(), start, false)),
            "{policy}"
        );
        let ex = &a.explanations[0].containers[0].cards;
        let score = |c: usize| ex.iter().find(|e| e.card == c).unwrap().terms.total();
        assert!((score(0) - 14.707_081_996).abs() < 1e-6, "{}", score(0));
        assert!((score(1) - 4.078_545_345).abs() < 1e-6, "{}", score(1));
    }
}

/// 11.7 example 5 and 11.2: MIG is opt-in, and a card of one mode never takes the other's work.
#[test]
fn example_5_opt_in_and_mixed_nodes() {
    let node = NodeSpec::new(
        "n",
        vec![
            h100("GPU-mig", 0, hami_h100_allowlist()),
            Card::new("GPU-core", 1, "NVIDIA H100 80GB HBM3", H100_MIB),
        ],
    );
    let s = snapshot(vec![node]);
    let plain = pod_with("p", &[], &[], &[&[("mem", "8000")]]);
    let a = allocate(&s, &plain, DecideOptions::explained());
    let k = &a.placement.as_ref().unwrap().containers[0].cards[0];
    assert_eq!((k.card, k.mig.is_none()), (1, true));
    let mig_card = a.explanations[0].containers[0]
        .cards
        .iter()
        .find(|e| e.card == 0)
        .unwrap();
    assert!(!mig_card.chosen && mig_card.mig.is_none());
    let a = allocate(
        &s,
        &mig_pod("p", &[("mem", "8000")]),
        DecideOptions::explained(),
    );
    assert_eq!(a.placement.as_ref().unwrap().containers[0].cards[0].card, 0);
    assert_eq!(choice(&a), Some(("1g.10gb".into(), 6, false)));
    let core_card = a.explanations[0].containers[0]
        .cards
        .iter()
        .find(|e| e.card == 1)
        .unwrap();
    assert!(!core_card.chosen && core_card.mig.is_none());
    // Without a card of its mode, neither fits: typed, unresolvable.
    let only_core = snapshot(vec![one(Card::new("GPU-0", 0, "NVIDIA H100", H100_MIB))]);
    let a = allocate(
        &only_core,
        &mig_pod("p", &[("mem", "8000")]),
        DecideOptions::default(),
    );
    assert_eq!(failure(&a), "1/1 CardTypeMismatch");
    let only_mig = snapshot(vec![one(h100("GPU-0", 0, h100_profiles()))]);
    let a = allocate(&only_mig, &plain, DecideOptions::default());
    assert_eq!(failure(&a), "1/1 CardTypeMismatch");
    assert!(a.failed[0].failure.unresolvable);
}

/// A value admitting both modes: each container's cards are of one mode.
#[test]
fn one_container_never_mixes_modes() {
    let node = NodeSpec::new(
        "n",
        vec![
            h100("GPU-mig", 0, h100_profiles()),
            Card::new("GPU-core", 1, "NVIDIA H100 80GB HBM3", H100_MIB),
        ],
    );
    let s = snapshot(vec![node.clone()]);
    let both = |gpus: &str| {
        pod_with(
            "p",
            &[("nvidia.com/vgpu-mode", "mig,hami-core")],
            &[],
            &[&[("gpu", gpus), ("mem", "8000")]],
        )
    };
    let a = allocate(&s, &both("2"), DecideOptions::default());
    assert!(a.placement.is_none(), "two cards of different modes");
    assert_eq!(
        failure(&a),
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTypeMismatch"
    );
    let a = allocate(&s, &both("1"), DecideOptions::default());
    assert!(a.placement.is_some());
    // With two hami-core cards the two-card container fits on them.
    let mut two = node;
    two.cards
        .push(Card::new("GPU-core2", 2, "NVIDIA H100 80GB HBM3", H100_MIB));
    let a = allocate(&snapshot(vec![two]), &both("2"), DecideOptions::default());
    let p = a.placement.unwrap();
    let cards: Vec<usize> = p.containers[0].cards.iter().map(|k| k.card).collect();
    assert_eq!(cards, vec![1, 2]);
}

/// Two containers of one workload get disjoint instances, init containers included, and the
/// card books them all (no peak rule on MIG cards).
#[test]
fn every_instance_of_a_workload_is_disjoint_and_booked() {
    let mut s = snapshot(vec![one(h100("GPU-0", 0, h100_profiles()))]);
    let w = pod_with(
        "w",
        &[("nvidia.com/vgpu-mode", "mig")],
        &[&[("mem", "5000")]],
        &[&[("mem", "5000")], &[("mem", "30000")]],
    );
    let a = place(&mut s, &w);
    let p = a.placement.as_ref().unwrap();
    let got: Vec<(String, u32)> = p
        .containers
        .iter()
        .flat_map(|c| c.cards.iter())
        .map(|k| {
            let m = k.mig.as_ref().unwrap();
            (m.profile.clone(), m.placement.start)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("1g.10gb".into(), 6),
            ("1g.10gb".into(), 5),
            ("3g.40gb".into(), 0),
        ]
    );
    assert_eq!(
        usage(&s, 0),
        CardUsage {
            used: 3,
            used_mem_mib: 2 * 10_194 + 40_779,
            used_cores: 2 * 14 + 42
        }
    );
    assert_eq!(p.booked[0], usage(&s, 0));
}

/// `max_instances`: the media-extension profile holds one instance.
#[test]
fn max_instances_is_honoured() {
    let mut s = snapshot(vec![one(h100(
        "GPU-0",
        0,
        allow_only(h100_profiles(), &["1g.10gb+me"]),
    ))]);
    let a = place(&mut s, &mig_pod("a", &[("mem", "5000")]));
    assert_eq!(choice(&a), Some(("1g.10gb+me".into(), 6, false)));
    let b = place(&mut s, &mig_pod("b", &[("mem", "5000")]));
    assert_eq!(failure(&b), "1/1 MigNoFreePlacement");
}

/// Checks 5-7 apply to MIG cards; a MIG card without a layout takes nothing.
#[test]
fn slots_mutex_and_cards_without_a_layout() {
    let mut full = h100("GPU-0", 0, h100_profiles());
    full.count = 1;
    let mut s = snapshot(vec![one(full)]);
    place(&mut s, &mig_pod("a", &[("mem", "5000")]));
    let b = allocate(
        &s,
        &mig_pod("b", &[("mem", "5000")]),
        DecideOptions::default(),
    );
    assert_eq!(failure(&b), "1/1 CardTimeSlicingExhausted");
    let s = snapshot(vec![one(h200(
        "GPU-0",
        0,
        vec![MigInstance::in_use("1g.18gb", at(0, 1), "x/y")],
    ))]);
    let mutex = pod_with(
        "m",
        &[
            ("nvidia.com/vgpu-mode", "mig"),
            ("hami.io/gpu-scheduler-policy", "mutex"),
        ],
        &[],
        &[&[("mem", "5000")]],
    );
    let a = allocate(&s, &mutex, DecideOptions::default());
    assert_eq!(failure(&a), "1/1 ExclusiveDeviceAllocateConflict");
    assert!(!a.failed[0].failure.unresolvable);
    let mut bare = Card::new("GPU-0", 0, "NVIDIA H100 80GB HBM3", H100_MIB);
    bare.mode = CardMode::Mig;
    let s = snapshot(vec![one(bare)]);
    let a = allocate(
        &s,
        &mig_pod("p", &[("mem", "5000")]),
        DecideOptions::default(),
    );
    assert_eq!(failure(&a), "1/1 MigNoProfileLargeEnough");
    let plain = pod_with("p", &[], &[], &[&[("mem", "5000")]]);
    let a = allocate(&s, &plain, DecideOptions::default());
    assert_eq!(failure(&a), "1/1 CardTypeMismatch");
}

/// 11.6: the profiles considered, in choice order, with their outcomes.
#[test]
fn explanations_list_the_profiles_considered() {
    let card = h100(
        "GPU-0",
        0,
        allow_only(
            h100_profiles(),
            &["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"],
        ),
    );
    let mut s = snapshot(vec![one(card)]);
    place(&mut s, &mig_pod("a", &[("mem", "15000")]));
    let a = allocate(
        &s,
        &mig_pod("b", &[("mem", "15000")]),
        DecideOptions::explained(),
    );
    let ex = a.explanations[0].containers[0].cards[0]
        .mig
        .clone()
        .unwrap();
    let got: Vec<(&str, MigOutcome)> = ex
        .profiles
        .iter()
        .map(|p| (p.profile.as_str(), p.outcome))
        .collect();
    assert_eq!(
        got,
        vec![
            ("1g.10gb", MigOutcome::TooSmall),
            ("1g.10gb+me", MigOutcome::TooSmall),
            ("1g.20gb", MigOutcome::NotAllowed),
            (
                "2g.20gb",
                MigOutcome::Chosen {
                    placement: at(2, 2),
                    reused: false
                }
            ),
            ("3g.40gb", MigOutcome::NotReached),
            ("4g.40gb", MigOutcome::NotReached),
            ("7g.80gb", MigOutcome::NotReached),
        ]
    );
    // A failing card shows why each profile failed.
    let big = allocate(
        &s,
        &mig_pod("c", &[("mem", "60000")]),
        DecideOptions::explained(),
    );
    let ex = big.explanations[0].containers[0].cards[0]
        .mig
        .clone()
        .unwrap();
    assert_eq!(
        ex.profiles.last().map(|p| p.outcome),
        Some(MigOutcome::NoFreePlace)
    );
    assert_eq!(
        big.explanations[0].containers[0].cards[0].rejected,
        Some(Reason::MigNoFreePlacement)
    );
}

/// Apply and release refuse what does not match the card, changing nothing.
#[test]
fn booking_errors_are_typed() {
    let mut s = snapshot(vec![one(h100("GPU-0", 0, h100_profiles()))]);
    let a = allocate(
        &s,
        &mig_pod("a", &[("mem", "5000")]),
        DecideOptions::default(),
    );
    let p = a.placement.unwrap();
    let before = s.clone();
    assert!(matches!(
        release(&mut s, &p),
        Err(BookingError::NotBooked { .. } | BookingError::MigInstance { .. })
    ));
    assert_eq!(s, before);
    apply(&mut s, &p).unwrap();
    let after = s.clone();
    let err = apply(&mut s, &p).unwrap_err();
    assert!(
        matches!(err, BookingError::MigInstance { start: 6, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("an instance is there already"),
        "{err}"
    );
    assert_eq!(s, after);
    release(&mut s, &p).unwrap();
    assert_eq!(s, before);
}

/// 11.1: a malformed layout makes the node invalid, each problem named; never a panic.
#[test]
fn malformed_layouts_make_the_node_invalid() {
    type Edit = fn(&mut Card);
    let cases: &[(&str, Edit, &str, ViolationKind)] = &[
        (
            "overlapping instances",
            |c| {
                c.mig.as_mut().unwrap().instances = vec![
                    MigInstance::free("3g.40gb", at(4, 4)),
                    MigInstance::free("1g.10gb", at(5, 1)),
                ]
            },
            "cards[0].mig.instances[1].placement",
            ViolationKind::DuplicateId,
        ),
        (
            "placement outside the card",
            |c| c.mig.as_mut().unwrap().profiles[4].placements = vec![0, 6],
            "cards[0].mig.profiles[4].placements[1]",
            ViolationKind::OutOfRange,
        ),
        (
            "unknown profile",
            |c| c.mig.as_mut().unwrap().instances = vec![MigInstance::free("5g.50gb", at(0, 4))],
            "cards[0].mig.instances[0].profile",
            ViolationKind::UnknownReference,
        ),
        (
            "a placement the profile does not allow",
            |c| c.mig.as_mut().unwrap().instances = vec![MigInstance::free("3g.40gb", at(2, 4))],
            "cards[0].mig.instances[0].placement",
            ViolationKind::UnknownReference,
        ),
        (
            "profile bigger than the card",
            |c| c.mig.as_mut().unwrap().profiles[6].mem_mib = 90_000,
            "cards[0].mig.profiles[6].mem_mib",
            ViolationKind::OutOfRange,
        ),
        (
            "more memory slices than the card",
            |c| c.mig.as_mut().unwrap().profiles[6].memory_slices = 9,
            "cards[0].mig.profiles[6].memory_slices",
            ViolationKind::OutOfRange,
        ),
        (
            "duplicate profile",
            |c| c.mig.as_mut().unwrap().profiles[1].name = "1g.10gb".into(),
            "cards[0].mig.profiles[1].name",
            ViolationKind::DuplicateId,
        ),
        (
            "blank profile name",
            |c| c.mig.as_mut().unwrap().profiles[0].name = " ".into(),
            "cards[0].mig.profiles[0].name",
            ViolationKind::MissingField,
        ),
        (
            "no instance possible",
            |c| c.mig.as_mut().unwrap().profiles[0].max_instances = 0,
            "cards[0].mig.profiles[0].max_instances",
            ViolationKind::OutOfRange,
        ),
        (
            "slices out of range",
            |c| c.mig.as_mut().unwrap().memory_slices = 0,
            "cards[0].mig.memory_slices",
            ViolationKind::OutOfRange,
        ),
        (
            "a layout on a hami-core card",
            |c| c.mode = CardMode::HamiCore,
            "cards[0].mode",
            ViolationKind::OutOfRange,
        ),
        (
            "usage that is not the instances'",
            |c| {
                c.mig.as_mut().unwrap().instances =
                    vec![MigInstance::in_use("1g.10gb", at(0, 1), "x")];
                c.usage = CardUsage {
                    used: 1,
                    used_mem_mib: 9_984,
                    used_cores: 13,
                };
            },
            "cards[0].usage",
            ViolationKind::OutOfRange,
        ),
        (
            "too many profiles",
            |c| {
                let l = c.mig.as_mut().unwrap();
                let p = l.profiles[0].clone();
                l.profiles = (0..40)
                    .map(|i| {
                        let mut p = p.clone();
                        p.name = format!("p{i}");
                        p
                    })
                    .collect();
            },
            "cards[0].mig",
            ViolationKind::OutOfRange,
        ),
    ];
    for (name, edit, field, kind) in cases {
        let mut card = h100("GPU-0", 0, h100_profiles());
        edit(&mut card);
        let err = Node::new(one(card.clone())).unwrap_err();
        let v = err
            .violations
            .iter()
            .find(|v| v.field == *field)
            .unwrap_or_else(|| panic!("{name}: {:?}", err.violations));
        assert_eq!(v.kind, *kind, "{name}: {v}");
        let whole = gpusched_engine::Snapshot::new(vec![one(card)]).unwrap_err();
        assert!(
            whole
                .violations
                .iter()
                .any(|v| v.field == format!("nodes[0].{field}")),
            "{name}: {whole}"
        );
    }
    // A zero usage is accepted and replaced by the instances' usage.
    let mut c = h100("GPU-0", 0, h100_profiles());
    c.mig.as_mut().unwrap().instances = vec![MigInstance::in_use("1g.10gb", at(0, 1), "x")];
    let n = Node::new(one(c)).unwrap();
    assert_eq!(
        n.cards()[0].usage,
        CardUsage {
            used: 1,
            used_mem_mib: 10_194,
            used_cores: 14
        }
    );
    // Its usage cannot be replaced from outside: it is the instances'.
    assert!(n.with_card_usage([(0, CardUsage::default())]).is_none());
}

/// Evaluate agrees with allocate on MIG nodes, and a full card is not unresolvable.
#[test]
fn filter_reports_each_node() {
    let mut full = h100("GPU-0", 0, h100_profiles());
    full.mig.as_mut().unwrap().instances = vec![MigInstance::in_use("7g.80gb", at(0, 8), "x/y")];
    let s = snapshot(vec![
        NodeSpec::new("full", vec![full]),
        NodeSpec::new("idle", vec![h100("GPU-1", 0, h100_profiles())]),
    ]);
    let e = evaluate(
        &s,
        &mig_pod("p", &[("mem", "5000")]),
        DecideOptions::default(),
    );
    assert_eq!(e.feasible.len(), 1);
    assert_eq!(s[e.feasible[0].node].name(), "idle");
    assert_eq!(e.failed[0].failure.hami_text(), "1/1 MigNoFreePlacement");
    assert!(!e.failed[0].failure.unresolvable);
}

/// 11.4: with a quota budget, check 7q counts the chosen instance's profile (its memory and
/// cores, what the assignment reports and the caller counts), not the request (HAMi's
/// `fitQuota`): a request of 15,000 MiB gets a `1g.20gb` of 20,096 MiB.
#[test]
fn quota_check_7q_counts_the_chosen_profile_on_mig_cards() {
    let s = snapshot(vec![one(h100("GPU-0", 0, h100_profiles()))]);
    let w = mig_pod("q", &[("mem", "15000")]);
    let budget = |mem: u64, cores: Option<u64>| {
        w.clone()
            .with_quota(gpusched_engine::QuotaBudget {
                mem_mib: Some(mem),
                cores,
            })
            .unwrap()
    };
    let a = allocate(&s, &budget(20_096, Some(20)), DecideOptions::default());
    assert_eq!(choice(&a), Some(("1g.20gb".into(), 6, false)));
    let used = a.placement.as_ref().unwrap().quota_use();
    assert_eq!((used.mem_mib, used.cores), (20_096, 20));
    for (mem, cores, reason) in [
        (20_095, None, Reason::QuotaMemoryExceeded),
        (15_000, None, Reason::QuotaMemoryExceeded),
        (20_096, Some(19), Reason::QuotaCoresExceeded),
    ] {
        let a = allocate(&s, &budget(mem, cores), DecideOptions::default());
        assert!(a.placement.is_none(), "{mem} {cores:?}");
        assert_eq!(
            a.failed[0].failure.reasons.get(reason),
            1,
            "{mem} {cores:?}"
        );
        assert_eq!(a.failed[0].failure.hami_text(), "1/1 ResourceQuotaNotFit");
    }
}
