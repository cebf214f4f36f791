//! Every violation carries the kind a client branches on, the same for both workload forms.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use gpusched_engine::{
    Card, Defaults, InvalidInput, KubeContainer, KubeNames, KubeSpec, NodeSpec,
    NormalizationConfig, RawCard, ScoringWeights, Snapshot, TypedContainer, TypedSpec,
    ViolationKind, Workload, WorkloadMeta, WorkloadSpec, normalize_inventory,
};

fn kube(annotations: &[(&str, &str)], limits: &[(&str, &str)]) -> Result<Workload, InvalidInput> {
    let map = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let spec = WorkloadSpec::Kubernetes(KubeSpec {
        annotations: map(annotations),
        init_containers: Vec::new(),
        containers: vec![KubeContainer {
            name: "c".into(),
            limits: map(limits),
            requests: BTreeMap::new(),
        }],
    });
    Workload::parse(
        WorkloadMeta::default(),
        &spec,
        &Defaults::default(),
        &KubeNames::default(),
    )
}

fn kinds(e: &InvalidInput) -> Vec<ViolationKind> {
    e.violations.iter().map(|v| v.kind).collect()
}

/// Each violation's field and kind, in order.
fn fields_and_kinds(e: &InvalidInput) -> Vec<(&str, ViolationKind)> {
    e.violations
        .iter()
        .map(|v| (v.field.as_str(), v.kind))
        .collect()
}

#[test]
fn annotation_kinds() {
    let gpu = [("nvidia.com/gpu", "1")];
    for (key, value, kind) in [
        (
            "hami.io/node-scheduler-policy",
            "pack",
            ViolationKind::InvalidNodePolicy,
        ),
        (
            "hami.io/gpu-scheduler-policy",
            "binpack,",
            ViolationKind::InvalidGpuPolicy,
        ),
        (
            "hami.io/device-scoring-weights",
            "slot=1",
            ViolationKind::InvalidScoringWeights,
        ),
        (
            "nvidia.com/numa-bind",
            "yes please",
            ViolationKind::InvalidNumaBind,
        ),
    ] {
        let e = kube(&[(key, value)], &gpu).unwrap_err();
        assert_eq!(kinds(&e), vec![kind], "{key}={value}");
    }
}

#[test]
fn resource_kinds() {
    for limits in [
        vec![("nvidia.com/gpu", "x")],
        vec![("nvidia.com/gpu", "99999999999")],
        vec![("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "-1")],
        vec![
            ("nvidia.com/gpu", "1"),
            ("nvidia.com/gpumem-percentage", "101"),
        ],
        vec![("nvidia.com/gpu", "1"), ("nvidia.com/gpucores", "101")],
        // A count of 0 with GPU memory or cores contradicts itself.
        vec![("nvidia.com/gpu", "0"), ("nvidia.com/gpumem", "4096")],
        vec![("nvidia.com/gpu", "0"), ("nvidia.com/gpucores", "30")],
        vec![
            ("nvidia.com/gpu", "0"),
            ("nvidia.com/gpumem-percentage", "50"),
        ],
    ] {
        let e = kube(&[], &limits).unwrap_err();
        assert_eq!(
            kinds(&e),
            vec![ViolationKind::InvalidResourceRequest],
            "{limits:?}"
        );
    }
}

#[test]
fn typed_kinds_match_the_annotation_kinds() {
    let spec = WorkloadSpec::Typed(TypedSpec {
        weights: Some(ScoringWeights {
            slot: 0,
            core: 0,
            memory: 0,
        }),
        containers: vec![TypedContainer {
            name: "c".into(),
            gpus: 1,
            gpumem_percent: 150,
            gpucores: Some(300),
            ..Default::default()
        }],
        ..Default::default()
    });
    let e = Workload::parse(
        WorkloadMeta::default(),
        &spec,
        &Defaults::default(),
        &KubeNames::default(),
    )
    .unwrap_err();
    assert_eq!(
        kinds(&e),
        vec![
            ViolationKind::InvalidResourceRequest,
            ViolationKind::InvalidResourceRequest,
            ViolationKind::InvalidScoringWeights,
        ]
    );
}

#[test]
fn defaults_name_their_own_field() {
    let e = Defaults {
        cores: 101,
        ..Defaults::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.violations.len(), 1);
    assert_eq!(e.violations[0].kind, ViolationKind::OutOfRange);
    assert_eq!(e.violations[0].field, "cores");
}

#[test]
fn snapshot_kinds() {
    let card = |id: &str| Card::new(id, 0, "NVIDIA-A100", 1024);
    let e = Snapshot::new(vec![
        NodeSpec::new("a", vec![card("x"), card("x"), card("")]),
        NodeSpec::new("a", vec![]),
        NodeSpec::new("", vec![]),
    ])
    .unwrap_err();
    assert_eq!(
        fields_and_kinds(&e),
        vec![
            ("nodes[0].cards[1].id", ViolationKind::DuplicateId),
            ("nodes[0].cards[2].id", ViolationKind::MissingField),
            ("nodes[1].name", ViolationKind::DuplicateId),
            ("nodes[2].name", ViolationKind::MissingField),
        ]
    );
}

#[test]
fn node_kinds() {
    use gpusched_engine::{MAX_CARD_CORES, MAX_CARD_MEM_MIB, MAX_CARD_SLOTS, Node, PairScore};
    let card = |id: &str| Card::new(id, 0, "NVIDIA-A100", 1024);
    let mut huge = card("huge");
    huge.count = MAX_CARD_SLOTS + 1;
    huge.total_mem_mib = MAX_CARD_MEM_MIB + 1;
    huge.total_cores = MAX_CARD_CORES + 1;
    let mut at_bounds = card("max");
    at_bounds.count = MAX_CARD_SLOTS;
    at_bounds.total_mem_mib = MAX_CARD_MEM_MIB;
    at_bounds.total_cores = MAX_CARD_CORES;
    let mut spec = NodeSpec::new("n", vec![card(" \t"), huge, at_bounds]);
    spec.cordoned = vec!["max".into(), "GPU-gone".into()];
    spec.pair_scores = vec![PairScore {
        card_id: "max".into(),
        peer_card_id: "GPU-elsewhere".into(),
        score: 1,
    }];
    let e = Node::new(spec).unwrap_err();
    assert_eq!(
        fields_and_kinds(&e),
        vec![
            ("cards[0].id", ViolationKind::MissingField),
            ("cards[1].slots", ViolationKind::OutOfRange),
            ("cards[1].total_mem_mib", ViolationKind::OutOfRange),
            ("cards[1].total_cores", ViolationKind::OutOfRange),
            ("cordoned[1]", ViolationKind::UnknownReference),
            (
                "pair_scores[0].peer_card_id",
                ViolationKind::UnknownReference
            ),
        ]
    );
    assert!(e.violations[0].description.contains("blank"));
    assert!(e.violations[4].description.contains("GPU-gone"));
}

#[test]
fn inventory_kinds() {
    let raw = |uuid: &str| RawCard {
        uuid: uuid.into(),
        index: 0,
        model_name: "A100".into(),
        total_memory_bytes: 1 << 30,
        numa: None,
        mig_enabled: false,
        healthy: true,
        links: Vec::new(),
    };
    let e = normalize_inventory(
        "n",
        &[raw("a"), raw("a"), raw(" ")],
        &NormalizationConfig::default(),
    )
    .unwrap_err();
    assert_eq!(
        kinds(&e),
        vec![ViolationKind::DuplicateId, ViolationKind::MissingField]
    );
    let config = NormalizationConfig {
        split_count: 0,
        memory_scaling: f64::NAN,
        ..NormalizationConfig::default()
    };
    let e = normalize_inventory("n", &[raw("a")], &config).unwrap_err();
    assert_eq!(
        kinds(&e),
        vec![ViolationKind::OutOfRange, ViolationKind::OutOfRange]
    );
    assert_eq!(e.violations[0].field, "config.split_count");
}

#[test]
fn a_zero_count_with_memory_or_cores_names_the_memory_or_cores_key() {
    let e = kube(
        &[],
        &[("nvidia.com/gpu", "0"), ("nvidia.com/gpumem", "4096")],
    )
    .unwrap_err();
    assert_eq!(e.violations.len(), 1);
    let v = &e.violations[0];
    assert!(v.field.contains("nvidia.com/gpumem"), "{}", v.field);
    assert!(
        v.description.contains("nvidia.com/gpumem") && v.description.contains("nvidia.com/gpu: 0"),
        "{}",
        v.description
    );
    // Zero memory and cores with a zero count, or no count at all, ask for nothing: no GPU.
    for limits in [
        vec![("nvidia.com/gpu", "0"), ("nvidia.com/gpumem", "0")],
        vec![("nvidia.com/gpu", "0")],
        vec![("nvidia.com/gpumem", "4096")],
    ] {
        let w = kube(&[], &limits).unwrap();
        assert!(!w.requests_gpu(), "{limits:?}");
    }
}
