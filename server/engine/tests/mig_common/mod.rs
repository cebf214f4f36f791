//! MIG test data: the H100 80GB and H200 141GB profile tables as NVML reports them
//! (`docs/placement-semantics.md` section 11.7), MIG cards and workloads asking for instances.
#![allow(dead_code)]

use gpusched_engine::{
    Allocation, Card, CardMode, DecideOptions, Defaults, KubeNames, MigAssignment, MigInstance,
    MigLayout, MigPlacement, MigProfile, Snapshot, Workload, WorkloadMeta, WorkloadSpec, allocate,
    apply,
};

use crate::common::pod;

/// NVML's total memory of an H100 80GB HBM3, MiB.
pub const H100_MIB: u64 = 81_559;
/// NVML's total memory of an H200 141GB HBM3e, MiB.
pub const H200_MIB: u64 = 143_771;

fn profile(
    name: &str,
    mem: u64,
    compute: u32,
    memory: u32,
    cores: u32,
    max: u32,
    starts: &[u32],
) -> MigProfile {
    MigProfile::new(name, mem, compute, memory, cores, max, starts.to_vec())
}

/// The H100 80GB table, every profile allowed.
pub fn h100_profiles() -> Vec<MigProfile> {
    let ones = [0, 1, 2, 3, 4, 5, 6];
    vec![
        profile("1g.10gb", 9_984, 1, 1, 13, 7, &ones),
        profile("1g.10gb+me", 9_984, 1, 1, 13, 1, &ones),
        profile("1g.20gb", 20_096, 1, 2, 20, 4, &[0, 2, 4, 6]),
        profile("2g.20gb", 20_096, 2, 2, 25, 3, &[0, 2, 4]),
        profile("3g.40gb", 40_448, 3, 4, 46, 2, &[0, 4]),
        profile("4g.40gb", 40_448, 4, 4, 49, 1, &[0]),
        profile("7g.80gb", 81_152, 7, 8, 100, 1, &[0]),
    ]
}

/// The H200 141GB table, every profile allowed.
pub fn h200_profiles() -> Vec<MigProfile> {
    let ones = [0, 1, 2, 3, 4, 5, 6];
    vec![
        profile("1g.18gb", 16_384, 1, 1, 13, 7, &ones),
        profile("1g.18gb+me", 16_384, 1, 1, 13, 1, &ones),
        profile("1g.35gb", 33_024, 1, 2, 20, 4, &[0, 2, 4, 6]),
        profile("2g.35gb", 33_024, 2, 2, 25, 3, &[0, 2, 4]),
        profile("3g.71gb", 71_168, 3, 4, 46, 2, &[0, 4]),
        profile("4g.71gb", 71_168, 4, 4, 49, 1, &[0]),
        profile("7g.141gb", 143_104, 7, 8, 100, 1, &[0]),
    ]
}

/// Only the named profiles allowed.
pub fn allow_only(mut profiles: Vec<MigProfile>, names: &[&str]) -> Vec<MigProfile> {
    for p in &mut profiles {
        p.allowed = names.contains(&p.name.as_str());
    }
    profiles
}

/// HAMi's default allowlist for the H100 80GB.
pub fn hami_h100_allowlist() -> Vec<MigProfile> {
    allow_only(
        h100_profiles(),
        &["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"],
    )
}

/// A MIG card with these profiles and instances; `count` 7 (HAMi's: the largest instance
/// count), 100 cores.
pub fn mig_card(
    id: &str,
    index: u32,
    card_type: &str,
    mem: u64,
    profiles: Vec<MigProfile>,
    instances: Vec<MigInstance>,
) -> Card {
    let mut c = Card::new(id, index, card_type, mem);
    c.mode = CardMode::Mig;
    c.count = 7;
    c.mig = Some(Box::new(
        MigLayout::new(7, 8, profiles).with_instances(instances),
    ));
    c
}

pub fn h100(id: &str, index: u32, profiles: Vec<MigProfile>) -> Card {
    mig_card(
        id,
        index,
        "NVIDIA H100 80GB HBM3",
        H100_MIB,
        profiles,
        vec![],
    )
}

pub fn h200(id: &str, index: u32, instances: Vec<MigInstance>) -> Card {
    mig_card(
        id,
        index,
        "NVIDIA H200 141GB HBM3e",
        H200_MIB,
        h200_profiles(),
        instances,
    )
}

pub fn at(start: u32, size: u32) -> MigPlacement {
    MigPlacement::new(start, size)
}

/// A pod `team/<name>` with annotations, init and app containers, each given by its limits in
/// short names (gpu, mem, pct, cores; gpu 1 when not given): `common`'s builder, this
/// workload's own identity (the owner of its instances).
pub fn pod_with(
    name: &str,
    annotations: &[(&str, &str)],
    init: &[&[(&str, &str)]],
    containers: &[&[(&str, &str)]],
) -> Workload {
    let with_gpu = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if !v.iter().any(|(k, _)| k == "gpu") {
            v.push(("gpu".into(), "1".into()));
        }
        v
    };
    let mut p = pod();
    for (k, v) in annotations {
        p = p.ann(k, v);
    }
    for c in init {
        let v = with_gpu(c);
        let pairs: Vec<(&str, &str)> = v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        p = p.init(&pairs);
    }
    for c in containers {
        let v = with_gpu(c);
        let pairs: Vec<(&str, &str)> = v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        p = p.container(&pairs);
    }
    Workload::parse(
        WorkloadMeta {
            namespace: "team".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        },
        &WorkloadSpec::Kubernetes(p.spec),
        &Defaults::default(),
        &KubeNames::default(),
    )
    .expect("valid workload")
}

/// A MIG pod (`vgpu-mode: mig`) with one container.
pub fn mig_pod(name: &str, limits: &[(&str, &str)]) -> Workload {
    pod_with(name, &[("nvidia.com/vgpu-mode", "mig")], &[], &[limits])
}

/// The MIG assignment of the first card of the first GPU container.
pub fn first_mig(a: &Allocation) -> Option<MigAssignment> {
    let p = a.placement.as_ref()?;
    p.containers
        .iter()
        .flat_map(|c| c.cards.iter())
        .find_map(|k| k.mig.clone())
}

/// Allocates `w`; applies the placement when there is one; returns the allocation.
pub fn place(s: &mut Snapshot, w: &Workload) -> Allocation {
    let a = allocate(s, w, DecideOptions::default());
    if let Some(p) = &a.placement {
        apply(s, p).expect("a fresh placement applies");
    }
    a
}

/// `(profile, start, reused)` of the allocation's first MIG assignment.
pub fn choice(a: &Allocation) -> Option<(String, u32, bool)> {
    first_mig(a).map(|m| (m.profile, m.placement.start, m.reused))
}

/// The instances of card `card` of node `node`: `(profile, start, in use by)`.
pub fn instances(s: &Snapshot, node: &str, card: usize) -> Vec<(String, u32, Option<String>)> {
    s.node_named(node)
        .and_then(|n| n.cards().get(card))
        .and_then(|c| c.mig.as_deref())
        .map(|l| {
            l.instances
                .iter()
                .map(|i| (i.profile.clone(), i.placement.start, i.in_use_by.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The HAMi text of the first failed node.
pub fn failure(a: &Allocation) -> String {
    a.failed
        .first()
        .map(|f| f.failure.hami_text())
        .unwrap_or_default()
}
