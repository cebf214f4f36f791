//! Table tests for every annotation and resource rule (`docs/placement-semantics.md` sections 2 and 3).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use gpusched_engine::{Defaults, GpuPolicy, GpuToken, NodePolicy, ScoringWeights};

const WEIGHTS: &str = "hami.io/device-scoring-weights";
const GPU_POLICY: &str = "hami.io/gpu-scheduler-policy";
const NODE_POLICY: &str = "hami.io/node-scheduler-policy";
const NUMA_BIND: &str = "nvidia.com/numa-bind";

fn with(key: &str, value: &str) -> Pod {
    pod().ann(key, value).gpus(1)
}

fn field(key: &str) -> String {
    format!("annotations[{key:?}]")
}

#[test]
fn weights_valid_values() {
    let cases: &[(&str, (u64, u64, u64))] = &[
        ("slot=1,core=1,memory=3", (1, 1, 3)),
        ("memory=3,slot=1,core=1", (1, 1, 3)),
        ("  slot = 2 ,core=0,  memory= 0 ", (2, 0, 0)),
        ("slot=+1,core=+0,memory=+5", (1, 0, 5)),
        ("slot=0,core=0,memory=1", (0, 0, 1)),
        ("slot=10,core=20,memory=30", (10, 20, 30)),
        (
            "slot=1,core=1,memory=9223372036854775807",
            (1, 1, 9_223_372_036_854_775_807),
        ),
    ];
    for (value, (slot, core, memory)) in cases {
        let w = with(WEIGHTS, value)
            .parse()
            .unwrap_or_else(|e| panic!("{value:?}: {e}"));
        assert_eq!(
            w.weights,
            ScoringWeights {
                slot: *slot,
                core: *core,
                memory: *memory
            },
            "{value:?}"
        );
    }
    assert_eq!(pod().gpus(1).workload().weights, ScoringWeights::default());
}

#[test]
fn weights_invalid_values_name_the_key() {
    let cases = [
        ("", "need exactly 3"),
        ("slot=1", "need exactly 3"),
        ("slot=1,core=1", "need exactly 3"),
        ("slot=1,core=1,memory=1,gpu=1", "need exactly 3"),
        ("slot=1,core=1,memory=1,", "need exactly 3"),
        ("slot=1,core,memory=1", "no '='"),
        ("slot=1.5,core=1,memory=1", "not a base-10 integer"),
        ("slot=high,core=1,memory=1", "not a base-10 integer"),
        ("slot=-1,core=1,memory=1", "must not be negative"),
        ("slot=1,core=1,mem=1", "unknown key \"mem\""),
        ("Slot=1,core=1,memory=1", "unknown key \"Slot\""),
        ("slot=1,slot=2,memory=1", "duplicate key \"slot\""),
        ("slot=0,core=0,memory=0", "at least one"),
        ("slot=,core=1,memory=1", "empty value"),
        ("slot=1,core=1,memory=0x10", "not a base-10 integer"),
        (
            "slot=1,core=1,memory=99999999999999999999",
            "not a base-10 integer",
        ),
    ];
    for (value, expected) in cases {
        let err = with(WEIGHTS, value).parse().expect_err(value);
        assert_eq!(err.violations.len(), 1, "{value:?}");
        let v = &err.violations[0];
        assert_eq!(v.field, field(WEIGHTS), "{value:?}");
        assert!(
            v.description.contains(WEIGHTS),
            "{value:?}: {}",
            v.description
        );
        assert!(
            v.description.contains(expected),
            "{value:?}: {}",
            v.description
        );
    }
}

#[test]
fn node_policy_values() {
    assert_eq!(
        with(NODE_POLICY, "spread").workload().node_policy,
        NodePolicy::Spread
    );
    assert_eq!(
        with(NODE_POLICY, " binpack ").workload().node_policy,
        NodePolicy::Binpack
    );
    for bad in ["", "Spread", "pack", "mutex", "binpack,spread"] {
        let err = with(NODE_POLICY, bad).parse().expect_err(bad);
        assert_eq!(err.violations[0].field, field(NODE_POLICY), "{bad:?}");
    }
}

#[test]
fn gpu_policy_values_and_chains() {
    let ok: &[(&str, &[GpuToken])] = &[
        ("binpack", &[GpuToken::Binpack]),
        ("spread", &[GpuToken::Spread]),
        ("mutex", &[GpuToken::Mutex]),
        ("topology-aware", &[GpuToken::TopologyAware]),
        ("numa", &[GpuToken::Numa]),
        ("binpack,numa", &[GpuToken::Binpack, GpuToken::Numa]),
        (" mutex , spread ", &[GpuToken::Mutex, GpuToken::Spread]),
        ("numa,binpack,numa", &[GpuToken::Numa, GpuToken::Binpack]),
    ];
    for (value, tokens) in ok {
        assert_eq!(
            with(GPU_POLICY, value).workload().gpu_policy.tokens(),
            *tokens,
            "{value:?}"
        );
    }
    for bad in [
        "",
        " ",
        "Spread",
        "pack",
        "binpack,,numa",
        "binpack,",
        ",spread",
        "binpack;numa",
        "BINPACK",
    ] {
        let err = with(GPU_POLICY, bad).parse().expect_err(bad);
        assert_eq!(err.violations[0].field, field(GPU_POLICY), "{bad:?}");
        assert!(err.violations[0].description.contains(GPU_POLICY));
    }
}

#[test]
fn numa_bind_values() {
    for t in ["1", "t", "T", "TRUE", "true", "True"] {
        assert!(with(NUMA_BIND, t).workload().numa_bind, "{t}");
    }
    for f in ["0", "f", "F", "FALSE", "false", "False"] {
        assert!(!with(NUMA_BIND, f).workload().numa_bind, "{f}");
    }
    for bad in ["", "yes", "tRUE", "2", " true", "on"] {
        let err = with(NUMA_BIND, bad).parse().expect_err(bad);
        assert_eq!(err.violations[0].field, field(NUMA_BIND), "{bad:?}");
    }
}

#[test]
fn type_and_uuid_lists_trim_and_ignore_blanks() {
    let w = pod()
        .ann("nvidia.com/use-gputype", " A100 , ,H100,")
        .ann("nvidia.com/nouse-gputype", "  ")
        .ann("nvidia.com/use-gpuuuid", "GPU-1, GPU-2 ")
        .gpus(1)
        .workload();
    assert_eq!(w.filters.use_types, vec!["A100", "H100"]);
    assert!(w.filters.nouse_types.is_empty());
    assert_eq!(w.filters.use_uuids, vec!["GPU-1", "GPU-2"]);
}

#[test]
fn defaults_and_overrides() {
    let defaults = Defaults {
        node_policy: NodePolicy::Spread,
        gpu_policy: GpuPolicy::single(GpuToken::Binpack),
        memory_mib: 0,
        cores: 0,
    };
    let w = pod().gpus(1).parse_with(&defaults).unwrap();
    assert_eq!(w.node_policy, NodePolicy::Spread);
    assert_eq!(w.gpu_policy, GpuPolicy::single(GpuToken::Binpack));
    let w = pod()
        .ann(NODE_POLICY, "binpack")
        .ann(GPU_POLICY, "spread")
        .gpus(1)
        .parse_with(&defaults)
        .unwrap();
    assert_eq!(w.node_policy, NodePolicy::Binpack);
    assert_eq!(w.gpu_policy, GpuPolicy::single(GpuToken::Spread));
}

#[test]
fn non_gpu_workloads_are_not_validated() {
    let w = pod()
        .ann(WEIGHTS, "nonsense")
        .ann(GPU_POLICY, "Spread")
        .container(&[("cpu", "1"), ("cores", "500")])
        .parse()
        .expect("a workload without GPU is not validated");
    assert!(!w.requests_gpu());
    let w = pod()
        .ann(WEIGHTS, "nonsense")
        .container(&[("gpu", "0")])
        .parse()
        .unwrap();
    assert!(!w.requests_gpu());
}

#[test]
fn resource_resolution() {
    let res = |pairs: &[(&str, &str)], defaults: &Defaults| {
        let w = pod().container(pairs).parse_with(defaults).unwrap();
        let c = &w.containers[0];
        (c.gpus, c.mem_mib, c.mem_percent, c.cores)
    };
    let d = Defaults::default();
    // Nothing set: whole card.
    assert_eq!(res(&[("gpu", "1")], &d), (1, None, Some(100), 0));
    assert_eq!(
        res(&[("gpu", "2"), ("mem", "3000")], &d),
        (2, Some(3000), None, 0)
    );
    assert_eq!(
        res(&[("gpu", "1"), ("pct", "40")], &d),
        (1, None, Some(40), 0)
    );
    // Both: MiB is booked, the percentage is kept for the score.
    assert_eq!(
        res(&[("gpu", "1"), ("mem", "3000"), ("pct", "40")], &d),
        (1, Some(3000), Some(40), 0)
    );
    // 0 means not set.
    assert_eq!(
        res(&[("gpu", "1"), ("mem", "0"), ("pct", "0")], &d),
        (1, None, Some(100), 0)
    );
    assert_eq!(
        res(&[("gpu", "1"), ("cores", "30")], &d),
        (1, None, Some(100), 30)
    );
    assert_eq!(
        res(&[("gpu", "1"), ("cores", "0")], &d),
        (1, None, Some(100), 0)
    );
    let d2 = Defaults {
        memory_mib: 2048,
        cores: 10,
        ..Defaults::default()
    };
    assert_eq!(res(&[("gpu", "1")], &d2), (1, Some(2048), None, 10));
    assert_eq!(
        res(&[("gpu", "1"), ("cores", "0")], &d2),
        (1, Some(2048), None, 0)
    );
    // Quantities.
    assert_eq!(
        res(&[("gpu", "1"), ("mem", "2k")], &d),
        (1, Some(2000), None, 0)
    );
    // Requests are read when limits are absent.
    let mut p = pod().gpus(1);
    p.spec.containers[0].limits.clear();
    p.spec.containers[0]
        .requests
        .insert("nvidia.com/gpu".into(), "2".into());
    assert_eq!(p.workload().containers[0].gpus, 2);
}

#[test]
fn resource_values_are_validated_with_their_field() {
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
    let cases: &[Case<'_>] = &[
        (
            &[("gpu", "1"), ("pct", "101")],
            "containers[0].limits[\"nvidia.com/gpumem-percentage\"]",
            "out of range",
        ),
        (
            &[("gpu", "1"), ("cores", "101")],
            "containers[0].limits[\"nvidia.com/gpucores\"]",
            "out of range",
        ),
        (
            &[("gpu", "1"), ("cores", "-5")],
            "containers[0].limits[\"nvidia.com/gpucores\"]",
            "negative",
        ),
        (
            &[("gpu", "1"), ("mem", "1.5")],
            "containers[0].limits[\"nvidia.com/gpumem\"]",
            "whole number",
        ),
        (
            &[("gpu", "1"), ("mem", "lots")],
            "containers[0].limits[\"nvidia.com/gpumem\"]",
            "not a quantity",
        ),
        (
            &[("gpu", "x")],
            "containers[0].limits[\"nvidia.com/gpu\"]",
            "not a quantity",
        ),
        (
            &[("gpu", "-1")],
            "containers[0].limits[\"nvidia.com/gpu\"]",
            "negative",
        ),
        (
            &[("gpu", "5000000000")],
            "containers[0].limits[\"nvidia.com/gpu\"]",
            "at most",
        ),
    ];
    for (pairs, f, text) in cases {
        let err = pod().container(pairs).parse().expect_err(f);
        assert_eq!(err.violations[0].field, *f);
        assert!(
            err.violations[0].description.contains(text),
            "{}",
            err.violations[0].description
        );
    }
    // Every problem is reported at once.
    let err = pod()
        .ann(WEIGHTS, "x")
        .ann(NUMA_BIND, "maybe")
        .container(&[("gpu", "1"), ("pct", "200"), ("cores", "300")])
        .init(&[("gpu", "1"), ("cores", "101")])
        .parse()
        .unwrap_err();
    let fields: Vec<&str> = err.violations.iter().map(|v| v.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "init_containers[0].limits[\"nvidia.com/gpucores\"]",
            "containers[0].limits[\"nvidia.com/gpumem-percentage\"]",
            "containers[0].limits[\"nvidia.com/gpucores\"]",
            "annotations[\"hami.io/device-scoring-weights\"]",
            "annotations[\"nvidia.com/numa-bind\"]",
        ]
    );
}
