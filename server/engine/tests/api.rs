//! The public API as a plugin author meets it: handles, options, per-node verdicts, apply and
//! release with their typed errors, shared nodes, `FromStr` with typed errors.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use gpusched_engine::{
    BookingError, CardMode, DecideOptions, GpuPolicy, GpuToken, Node, NodePolicy, NodeSpec,
    NodeVerdict, ParseGpuPolicyError, ParseNodePolicyError, PreparedWorkload, Reason,
    ScoringWeights, ScoringWeightsError, Snapshot, WeightKey, allocate, apply, evaluate, release,
};

#[test]
fn handles_name_nodes_of_their_snapshot() {
    // Given out of order: handles follow name order.
    let s = snapshot(vec![node("b", 1, 8000), node("a", 1, 8000)]);
    let ids: Vec<_> = s.ids().collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(s[ids[0]].name(), "a");
    assert_eq!(s.node(ids[1]).map(Node::name), Some("b"));
    assert_eq!(s.id_of("b"), Some(ids[1]));
    assert_eq!(s.id_of("c"), None);
    assert_eq!(s.node_named("a").map(Node::name), Some("a"));
    assert_eq!(ids[0].index(), 0);
    assert!(ids[0] < ids[1]);
    let names: Vec<&str> = s.iter().map(|(_, n)| n.name()).collect();
    assert_eq!(names, vec!["a", "b"]);
    // A handle of a larger snapshot is not a node of a smaller one.
    let one = snapshot(vec![node("a", 1, 8000)]);
    assert!(one.node(ids[1]).is_none());
}

#[test]
fn default_options_explain_nothing_and_explained_options_do() {
    let s = snapshot(vec![node("a", 2, 8000)]);
    let w = pod().gpus(1).workload();
    assert_eq!(DecideOptions::default(), DecideOptions { explain: false });
    assert!(
        evaluate(&s, &w, DecideOptions::default())
            .explanations
            .is_empty()
    );
    let e = evaluate(&s, &w, DecideOptions::explained());
    assert_eq!(e.explanations.len(), 1);
    assert_eq!(e.explanations[0].node, s.id_of("a").unwrap());
}

#[test]
fn a_prepared_workload_asks_one_node() {
    let s = snapshot(vec![
        node("small", 1, 8000),
        NodeSpec::new(
            "busy",
            vec![card("x", 0, 8000).used(10, 0, 0), card("y", 1, 8000)],
        ),
        node("big", 4, 8000),
    ]);
    let w = pod().gpus(2).workload();
    let prepared = PreparedWorkload::new(&w);
    assert_eq!(prepared.workload(), &w);
    let small = prepared.fit(s.node_named("small").unwrap());
    let failure = small.failure().unwrap();
    assert!(!small.fits() && small.score().is_none());
    assert_eq!(failure.reasons.get(Reason::NodeInsufficientDevice), 1);
    let busy = prepared.fit(s.node_named("busy").unwrap());
    assert_eq!(
        busy.failure().map(|f| f.hami_text()),
        Some("1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted".to_owned())
    );
    let big = prepared.fit(s.node_named("big").unwrap());
    let a = allocate(&s, &w, DecideOptions::default());
    let p = a.placement.unwrap();
    assert_eq!(s[p.node].name(), "big");
    assert_eq!(big, NodeVerdict::Fits(p.score));
    // The prepared workload decides over whole snapshots as the free functions do.
    assert_eq!(
        prepared.allocate(&s, DecideOptions::default()),
        allocate(&s, &w, DecideOptions::default())
    );
    assert_eq!(
        prepared.evaluate(&s, DecideOptions::explained()),
        evaluate(&s, &w, DecideOptions::explained())
    );
}

#[test]
fn apply_books_and_release_frees_with_typed_errors() {
    let s = snapshot(vec![node("a", 2, 8000), node("b", 2, 8000)]);
    let w = pod()
        .container(&[("gpu", "1"), ("mem", "1000"), ("cores", "30")])
        .workload();
    let p = allocate(&s, &w, DecideOptions::default())
        .placement
        .unwrap();
    assert_eq!(p.booked.iter().map(|b| b.used).sum::<u32>(), 1);
    assert_eq!(p.booked.iter().map(|b| b.used_mem_mib).sum::<u64>(), 1000);
    assert_eq!(p.booked.iter().map(|b| b.used_cores).sum::<u32>(), 30);

    let mut t = s.clone();
    apply(&mut t, &p).unwrap();
    apply(&mut t, &p).unwrap(); // bookings add up
    assert_eq!(
        t[p.node].cards().iter().map(|c| c.usage.used).sum::<u32>(),
        2
    );
    release(&mut t, &p).unwrap();
    release(&mut t, &p).unwrap();
    assert_eq!(t, s);
    // Released once too often: a typed error, nothing changed.
    let err = release(&mut t, &p).unwrap_err();
    assert!(
        matches!(&err, BookingError::NotBooked { name, .. } if name == s[p.node].name()),
        "{err:?}"
    );
    assert_eq!(t, s);

    // A handle of another snapshot.
    let mut smaller = snapshot(vec![node("a", 2, 8000)]);
    let mut far = p.clone();
    far.node = s.id_of("b").unwrap();
    assert_eq!(
        apply(&mut smaller, &far),
        Err(BookingError::UnknownNode { node: far.node })
    );
    assert_eq!(
        release(&mut smaller, &far),
        Err(BookingError::UnknownNode { node: far.node })
    );

    // The same handle naming a node with other cards.
    let mut other = snapshot(vec![node("a", 3, 8000), node("b", 3, 8000)]);
    let before = other.clone();
    assert!(matches!(
        apply(&mut other, &p),
        Err(BookingError::CardCountMismatch {
            cards: 3,
            booked: 2,
            ..
        })
    ));
    assert_eq!(other, before);

    // Counters that would overflow.
    let full = |name: &str| {
        NodeSpec::new(
            name,
            vec![
                card(&format!("{name}0"), 0, 8000).used(u32::MAX, 0, 0),
                card(&format!("{name}1"), 1, 8000).used(u32::MAX, 0, 0),
            ],
        )
    };
    let mut saturated = snapshot(vec![full("a"), full("b")]);
    let before = saturated.clone();
    assert!(matches!(
        apply(&mut saturated, &p),
        Err(BookingError::Overflow { .. })
    ));
    assert_eq!(saturated, before);
}

#[test]
fn snapshots_share_nodes_and_copy_only_the_one_booked() {
    let cache: Vec<Arc<Node>> = ["a", "b", "c"]
        .iter()
        .map(|n| Arc::new(Node::new(node(n, 2, 8000)).unwrap()))
        .collect();
    let s = Snapshot::from_nodes(cache.iter().rev().cloned().collect()).unwrap();
    let names: Vec<&str> = s.nodes().map(Node::name).collect();
    assert_eq!(names, vec!["a", "b", "c"]);
    assert!(
        s.shared_nodes()
            .iter()
            .zip(&cache)
            .all(|(x, y)| Arc::ptr_eq(x, y))
    );
    // The same snapshot as from specs.
    let from_specs = snapshot(vec![
        node("a", 2, 8000),
        node("b", 2, 8000),
        node("c", 2, 8000),
    ]);
    assert_eq!(s, from_specs);

    let w = pod().gpus(1).workload();
    let p = allocate(&s, &w, DecideOptions::default())
        .placement
        .unwrap();
    let mut t = s.clone();
    apply(&mut t, &p).unwrap();
    for (id, shared) in t.ids().zip(t.shared_nodes()) {
        assert_eq!(Arc::ptr_eq(shared, &cache[id.index()]), id != p.node);
    }
    // The cached node itself is untouched.
    assert!(
        cache[p.node.index()]
            .cards()
            .iter()
            .all(|c| c.usage.used == 0)
    );
}

#[test]
fn shared_nodes_are_validated_one_by_one_then_for_unique_names() {
    let mut bad = NodeSpec::new("", vec![card("x", 0, 8000), card("x", 1, 8000)]);
    bad.pair_scores.push(gpusched_engine::PairScore {
        card_id: "x".into(),
        peer_card_id: "y".into(),
        score: 1,
    });
    let err = Node::new(bad).unwrap_err();
    let fields: Vec<&str> = err.violations.iter().map(|v| v.field.as_str()).collect();
    assert_eq!(
        fields,
        vec!["name", "cards[1].id", "pair_scores[0].peer_card_id"]
    );
    let a = Arc::new(Node::new(node("a", 1, 8000)).unwrap());
    let err = Snapshot::from_nodes(vec![a.clone(), a]).unwrap_err();
    assert_eq!(err.violations.len(), 1);
    assert_eq!(err.violations[0].field, "nodes[1].name");
}

#[test]
fn a_node_with_card_usage_replaced_equals_the_node_built_with_it() {
    let base = Node::new(node("a", 3, 8000)).unwrap();
    let u = gpusched_engine::CardUsage {
        used: 1,
        used_cores: 20,
        used_mem_mib: 4000,
    };
    let updated = base.with_card_usage([(2, u)]).unwrap();
    let mut spec = node("a", 3, 8000);
    spec.cards[2].usage = u;
    // Cards and sums as if validated from the spec with that usage.
    assert_eq!(updated, Node::new(spec).unwrap());
    assert_ne!(updated, base);
    assert!(base.with_card_usage([(3, u)]).is_none());
    assert!(updated.heap_bytes() > 0);
    // Snapshots of it decide as snapshots of the spec.
    let s = Snapshot::from_nodes(vec![Arc::new(updated)]).unwrap();
    assert_eq!(s.card_count(), 3);
}

#[test]
fn policies_parse_with_typed_errors() {
    assert_eq!(" spread ".parse(), Ok(NodePolicy::Spread));
    assert_eq!("".parse::<NodePolicy>(), Err(ParseNodePolicyError::Empty));
    assert_eq!(
        "Binpack".parse::<NodePolicy>(),
        Err(ParseNodePolicyError::Unknown("Binpack".into()))
    );
    assert_eq!("topology-aware".parse(), Ok(GpuToken::TopologyAware));
    let gpu: [(&str, Result<GpuPolicy, ParseGpuPolicyError>); 6] = [
        (
            "binpack, numa",
            Ok(GpuPolicy::from_tokens(&[GpuToken::Binpack, GpuToken::Numa]).unwrap()),
        ),
        (" ", Err(ParseGpuPolicyError::Empty)),
        (
            "binpack,,numa",
            Err(ParseGpuPolicyError::BlankEntry { position: 2 }),
        ),
        (
            "binpack,",
            Err(ParseGpuPolicyError::BlankEntry { position: 2 }),
        ),
        (
            "mutex,Spread",
            Err(ParseGpuPolicyError::Unknown("Spread".into())),
        ),
        ("pack", Err(ParseGpuPolicyError::Unknown("pack".into()))),
    ];
    for (value, want) in gpu {
        assert_eq!(value.parse::<GpuPolicy>(), want, "{value:?}");
    }
    assert_eq!("mig".parse(), Ok(CardMode::Mig));
    assert_eq!("".parse(), Ok(CardMode::HamiCore));
    assert!("MIG".parse::<CardMode>().is_err());
}

#[test]
fn weights_parse_with_typed_errors() {
    use ScoringWeightsError as E;
    let cases: [(&str, E); 9] = [
        ("slot=1,core=1", E::EntryCount { found: 2 }),
        (
            "slot=1,core,memory=1",
            E::NoEquals {
                entry: "core".into(),
            },
        ),
        (
            "Slot=1,core=1,memory=1",
            E::UnknownKey { key: "Slot".into() },
        ),
        (
            "slot=1,slot=1,memory=1",
            E::DuplicateKey {
                key: WeightKey::Slot,
            },
        ),
        (
            "slot=,core=1,memory=1",
            E::EmptyValue {
                key: WeightKey::Slot,
            },
        ),
        (
            "slot=1,core=1.5,memory=1",
            E::NotInteger {
                key: WeightKey::Core,
                value: "1.5".into(),
            },
        ),
        (
            "slot=1,core=1,memory=-1",
            E::Negative {
                key: WeightKey::Memory,
                value: "-1".into(),
            },
        ),
        ("slot=0,core=0,memory=0", E::AllZero),
        (
            "slot=99999999999999999999,core=1,memory=1",
            E::NotInteger {
                key: WeightKey::Slot,
                value: "99999999999999999999".into(),
            },
        ),
    ];
    for (value, want) in cases {
        assert_eq!(value.parse::<ScoringWeights>(), Err(want), "{value:?}");
    }
    let huge = ScoringWeights {
        slot: u64::MAX,
        core: 0,
        memory: 0,
    };
    assert_eq!(
        huge.validate(),
        Err(E::OutOfRange {
            key: WeightKey::Slot,
            weight: u64::MAX
        })
    );
    // The messages stay those the annotation violations have always carried.
    assert_eq!(
        E::DuplicateKey {
            key: WeightKey::Slot
        }
        .to_string(),
        "expected slot=<int>,core=<int>,memory=<int>: duplicate key \"slot\""
    );
}

#[test]
fn a_stop_hook_abandons_a_decision_between_nodes() {
    use gpusched_engine::{
        Abandoned, BatchMode, allocate_batch, allocate_batch_until, allocate_until, evaluate_until,
    };
    use std::cell::Cell;
    let s = snapshot(
        (0..50)
            .map(|i| node(&format!("n{i:02}"), 2, 8000))
            .collect(),
    );
    let w = pod().gpus(1).workload();
    let opts = DecideOptions::default();
    // Never stopped: the same answers as without a hook.
    assert_eq!(
        evaluate_until(&s, &w, opts, &|| false),
        Ok(evaluate(&s, &w, opts))
    );
    assert_eq!(
        allocate_until(&s, &w, opts, &|| false),
        Ok(allocate(&s, &w, opts))
    );
    let ws = vec![w.clone(), w.clone()];
    assert_eq!(
        allocate_batch_until(s.clone(), &ws, BatchMode::AllOrNothing, opts, &|| false),
        Ok(allocate_batch(
            s.clone(),
            &ws,
            BatchMode::AllOrNothing,
            opts
        ))
    );
    // Stopped after 10 questions: abandoned, and no node is evaluated after the hook said so.
    let asked = Cell::new(0u32);
    let stop = || {
        asked.set(asked.get() + 1);
        asked.get() > 10
    };
    assert_eq!(evaluate_until(&s, &w, opts, &stop), Err(Abandoned));
    assert_eq!(asked.get(), 11);
    asked.set(0);
    assert_eq!(allocate_until(&s, &w, opts, &stop), Err(Abandoned));
    assert_eq!(asked.get(), 11);
    asked.set(0);
    assert_eq!(
        allocate_batch_until(s.clone(), &ws, BatchMode::Independent, opts, &stop),
        Err(Abandoned)
    );
    assert_eq!(asked.get(), 11);
    // Explained allocations that place nothing ask again while explaining every node.
    let too_big = pod().gpus(3).workload();
    asked.set(0);
    assert_eq!(
        allocate_until(&s, &too_big, DecideOptions::explained(), &|| {
            asked.set(asked.get() + 1);
            asked.get() > 60
        }),
        Err(Abandoned)
    );
    assert_eq!(asked.get(), 61);
}

#[test]
fn long_lists_give_the_same_answers_as_short_ones() {
    // Restrict names, cordons and pair scores are looked up in sets and maps: the same results
    // as the list scans they replace, duplicates and unknown names included.
    let mut s = snapshot(
        (0..20)
            .map(|i| node(&format!("n{i:02}"), 2, 8000))
            .collect(),
    );
    let mut names: Vec<String> = (0..5_000).map(|i| format!("other{i}")).collect();
    names.push("n03".into());
    names.push("n03".into());
    names.push("n07".into());
    let missing = s.retain_names(&names);
    assert_eq!(missing.len(), 5_000);
    assert_eq!(missing[0], "other0");
    let kept: Vec<&str> = s.nodes().map(Node::name).collect();
    assert_eq!(kept, vec!["n03", "n07"]);
    let mut spec = node("c", 3, 8000);
    spec.cordoned = vec![spec.cards[1].id.clone(); 5_000];
    let c = Node::new(spec.clone()).unwrap();
    assert!(!c.is_cordoned(0) && c.is_cordoned(1) && !c.is_cordoned(2));
    // A cordon naming no card of the node makes the node invalid (contract section 1.1), found
    // through the same map, however long the list.
    spec.cordoned.push("retired".into());
    let e = Node::new(spec).unwrap_err();
    assert_eq!(e.violations.len(), 1);
    assert_eq!(e.violations[0].field, "cordoned[5000]");
}
