//! The per-card checks in order, each reason, HAMi's text, and the unresolvable flag
//! (`docs/placement-semantics.md` section 5.4).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use gpusched_engine::{CardMode, DecideOptions, NodeSpec, Reason, evaluate};

struct Case {
    name: &'static str,
    node: NodeSpec,
    pod: Pod,
    text: &'static str,
    reason: Reason,
    unresolvable: bool,
}

fn one(c: gpusched_engine::Card) -> NodeSpec {
    NodeSpec::new("n", vec![c])
}

fn g() -> gpusched_engine::Card {
    card("GPU-0", 0, 8000)
}

fn cases() -> Vec<Case> {
    let mut cordoned = one(g());
    cordoned.cordoned = vec!["GPU-0".into()];
    let zero = |edit: fn(&mut gpusched_engine::Card)| {
        let mut c = g().unhealthy();
        edit(&mut c);
        let mut n = one(c);
        n.cordoned = vec!["GPU-0".into()];
        n
    };
    let mut mig = g();
    mig.mode = CardMode::Mig;
    let mut both_bad = one(g().unhealthy());
    both_bad.cordoned = vec!["GPU-0".into()];
    vec![
        Case {
            name: "0 no slots, before 1 and 2",
            node: zero(|c| c.count = 0),
            pod: pod().container(&[("gpu", "1"), ("pct", "10"), ("cores", "0")]),
            text: "1/1 CardZeroCapacity",
            reason: Reason::CardZeroCapacity,
            unresolvable: true,
        },
        Case {
            name: "0 no memory (a percentage would book 0 MiB)",
            node: zero(|c| c.total_mem_mib = 0),
            pod: pod().container(&[("gpu", "1"), ("pct", "10"), ("cores", "0")]),
            text: "1/1 CardZeroCapacity",
            reason: Reason::CardZeroCapacity,
            unresolvable: true,
        },
        Case {
            name: "0 no cores (a request without cores would fit)",
            node: zero(|c| c.total_cores = 0),
            pod: pod().container(&[("gpu", "1"), ("pct", "10"), ("cores", "0")]),
            text: "1/1 CardZeroCapacity",
            reason: Reason::CardZeroCapacity,
            unresolvable: true,
        },
        Case {
            name: "1 unhealthy",
            node: one(g().unhealthy()),
            pod: pod().gpus(1),
            text: "1/1 CardNotHealth",
            reason: Reason::CardNotHealth,
            unresolvable: true,
        },
        Case {
            name: "1 before 2",
            node: both_bad,
            pod: pod().gpus(1),
            text: "1/1 CardNotHealth",
            reason: Reason::CardNotHealth,
            unresolvable: true,
        },
        Case {
            name: "2 cordoned",
            node: cordoned,
            pod: pod().gpus(1),
            text: "1/1 CardCordoned",
            reason: Reason::CardCordoned,
            unresolvable: true,
        },
        Case {
            name: "3 use type",
            node: one(g()),
            pod: pod().ann("nvidia.com/use-gputype", "H100").gpus(1),
            text: "1/1 CardTypeMismatch",
            reason: Reason::CardTypeMismatch,
            unresolvable: true,
        },
        Case {
            name: "3 nouse type, case-insensitive",
            node: one(g()),
            pod: pod().ann("nvidia.com/nouse-gputype", "a100").gpus(1),
            text: "1/1 CardTypeMismatch",
            reason: Reason::CardTypeMismatch,
            unresolvable: true,
        },
        Case {
            name: "3 vgpu-mode",
            node: one(g()),
            pod: pod().ann("nvidia.com/vgpu-mode", "mig").gpus(1),
            text: "1/1 CardTypeMismatch",
            reason: Reason::CardTypeMismatch,
            unresolvable: true,
        },
        Case {
            name: "3 vgpu-mode empty refuses all",
            node: one(mig),
            pod: pod().ann("nvidia.com/vgpu-mode", "").gpus(1),
            text: "1/1 CardTypeMismatch",
            reason: Reason::CardTypeMismatch,
            unresolvable: true,
        },
        Case {
            name: "5 use uuid",
            node: one(g()),
            pod: pod().ann("nvidia.com/use-gpuuuid", "GPU-9").gpus(1),
            text: "1/1 CardUuidMismatch",
            reason: Reason::CardUuidMismatch,
            unresolvable: true,
        },
        Case {
            name: "5 nouse uuid",
            node: one(g()),
            pod: pod().ann("nvidia.com/nouse-gpuuuid", " GPU-0 ").gpus(1),
            text: "1/1 CardUuidMismatch",
            reason: Reason::CardUuidMismatch,
            unresolvable: true,
        },
        Case {
            name: "3 before 5",
            node: one(g()),
            pod: pod()
                .ann("nvidia.com/use-gputype", "H100")
                .ann("nvidia.com/use-gpuuuid", "GPU-9")
                .gpus(1),
            text: "1/1 CardTypeMismatch",
            reason: Reason::CardTypeMismatch,
            unresolvable: true,
        },
        Case {
            name: "6 slots",
            node: one(g().used(10, 0, 0)),
            pod: pod().container(&[("gpu", "1"), ("mem", "1")]),
            text: "1/1 CardTimeSlicingExhausted",
            reason: Reason::CardTimeSlicingExhausted,
            unresolvable: false,
        },
        Case {
            name: "7 mutex",
            node: one(g().used(1, 10, 0)),
            pod: pod()
                .ann("hami.io/gpu-scheduler-policy", "mutex")
                .container(&[("gpu", "1"), ("mem", "1")]),
            text: "1/1 ExclusiveDeviceAllocateConflict",
            reason: Reason::ExclusiveDeviceAllocateConflict,
            unresolvable: false,
        },
        Case {
            name: "8 memory",
            node: one(g().used(1, 7000, 0)),
            pod: pod().container(&[("gpu", "1"), ("mem", "1001")]),
            text: "1/1 CardInsufficientMemory",
            reason: Reason::CardInsufficientMemory,
            unresolvable: false,
        },
        Case {
            name: "8 percent of this card",
            node: one(g().used(1, 1, 0)),
            pod: pod().container(&[("gpu", "1"), ("pct", "100")]),
            text: "1/1 CardInsufficientMemory",
            reason: Reason::CardInsufficientMemory,
            unresolvable: false,
        },
        Case {
            name: "8 over-booked card",
            node: one(g().used(1, 9000, 0)),
            pod: pod().container(&[("gpu", "1"), ("mem", "0"), ("pct", "0")]),
            text: "1/1 CardInsufficientMemory",
            reason: Reason::CardInsufficientMemory,
            unresolvable: false,
        },
        Case {
            name: "8 too big for the card",
            node: one(g()),
            pod: pod().container(&[("gpu", "1"), ("mem", "9000")]),
            text: "1/1 CardInsufficientMemory",
            reason: Reason::CardInsufficientMemory,
            unresolvable: true,
        },
        Case {
            name: "9 cores",
            node: one(g().used(1, 0, 90)),
            pod: pod().container(&[("gpu", "1"), ("mem", "1"), ("cores", "20")]),
            text: "1/1 CardInsufficientCore",
            reason: Reason::CardInsufficientCore,
            unresolvable: false,
        },
        Case {
            name: "10 exclusive cores on a used card",
            node: one(g().used(1, 10, 0)),
            pod: pod().container(&[("gpu", "1"), ("mem", "1"), ("cores", "100")]),
            text: "1/1 ExclusiveDeviceAllocateConflict",
            reason: Reason::ExclusiveDeviceAllocateConflict,
            unresolvable: false,
        },
        Case {
            name: "11 compute exhausted",
            node: one(g().used(1, 10, 100)),
            pod: pod().container(&[("gpu", "1"), ("mem", "1")]),
            text: "1/1 CardComputeUnitsExhausted",
            reason: Reason::CardComputeUnitsExhausted,
            unresolvable: false,
        },
        Case {
            name: "node has too few cards",
            node: one(g()),
            pod: pod().gpus(2),
            text: "NodeInsufficientDevice",
            reason: Reason::NodeInsufficientDevice,
            unresolvable: true,
        },
        Case {
            name: "node without cards",
            node: NodeSpec::new("n", vec![]),
            pod: pod().gpus(1),
            text: "NodeInsufficientDevice",
            reason: Reason::NodeInsufficientDevice,
            unresolvable: true,
        },
    ]
}

#[test]
fn every_check_and_reason() {
    for case in cases() {
        let s = snapshot(vec![case.node]);
        let e = evaluate(&s, &case.pod.workload(), DecideOptions::default());
        assert!(e.feasible.is_empty(), "{}", case.name);
        let f = &e.failed[0].failure;
        assert_eq!(f.hami_text(), case.text, "{}", case.name);
        assert!(f.reasons.get(case.reason) > 0, "{}", case.name);
        assert_eq!(
            f.unresolvable, case.unresolvable,
            "{}: unresolvable",
            case.name
        );
    }
}

#[test]
fn checks_pass_at_the_boundaries() {
    let fits = [
        (
            "9 slots used of 10",
            g().used(9, 0, 0),
            pod().container(&[("gpu", "1"), ("mem", "1")]),
        ),
        (
            "memory exactly free",
            g().used(1, 7000, 0),
            pod().container(&[("gpu", "1"), ("mem", "1000")]),
        ),
        (
            "cores exactly free",
            g().used(1, 0, 80),
            pod().container(&[("gpu", "1"), ("mem", "1"), ("cores", "20")]),
        ),
        (
            "exclusive on an idle card",
            g(),
            pod().container(&[("gpu", "1"), ("cores", "100")]),
        ),
        (
            "99 cores on a used card",
            g().used(1, 10, 0),
            pod().container(&[("gpu", "1"), ("mem", "1"), ("cores", "99")]),
        ),
        (
            "0-core pod on a card with free cores",
            g().used(3, 10, 0),
            pod().container(&[("gpu", "1"), ("mem", "1")]),
        ),
        (
            "type substring",
            g(),
            pod().ann("nvidia.com/use-gputype", "a100-sxm").gpus(1),
        ),
        (
            "vgpu-mode list",
            g(),
            pod().ann("nvidia.com/vgpu-mode", "mps,hami-core").gpus(1),
        ),
        (
            "blank use lists",
            g(),
            pod()
                .ann("nvidia.com/use-gputype", " , ")
                .ann("nvidia.com/use-gpuuuid", "")
                .gpus(1),
        ),
        (
            "exclusive with 200 total cores",
            g().cores(200).used(1, 10, 50),
            pod().container(&[("gpu", "1"), ("mem", "1"), ("cores", "100")]),
        ),
    ];
    for (name, c, p) in fits {
        let s = snapshot(vec![one(c)]);
        assert!(place(&s, &p.workload()).is_some(), "{name}");
    }
}

#[test]
fn insufficient_request_counts_collected_cards() {
    let s = snapshot(vec![NodeSpec::new(
        "n",
        vec![card("a", 0, 8000), card("b", 1, 8000).used(10, 0, 0)],
    )]);
    let w = pod().container(&[("gpu", "2"), ("mem", "100")]).workload();
    let e = evaluate(&s, &w, DecideOptions::default());
    let f = &e.failed[0].failure;
    assert_eq!(
        f.hami_text(),
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted"
    );
    assert!(!f.unresolvable);
    assert_eq!(f.container_position, 0);
}

#[test]
fn reasons_over_many_cards_sorted_as_text() {
    let cards = vec![
        card("a", 0, 8000).unhealthy(),
        card("b", 1, 8000).used(10, 0, 0),
        card("c", 2, 8000).used(10, 0, 0),
        card("d", 3, 8000).used(1, 7900, 0),
    ];
    let s = snapshot(vec![NodeSpec::new("n", cards)]);
    let e = evaluate(
        &s,
        &pod().container(&[("gpu", "1"), ("mem", "500")]).workload(),
        DecideOptions::default(),
    );
    assert_eq!(
        e.failed[0].failure.hami_text(),
        "1/4 CardInsufficientMemory, 1/4 CardNotHealth, 2/4 CardTimeSlicingExhausted"
    );
}
