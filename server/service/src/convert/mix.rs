//! A workload mix (`PlacementOptions.workload_mix`, or the server's `policy.workload_mix`) in
//! (`docs/placement-semantics.md` section 12.1): the engine checks the probabilities, turns
//! them into integer weights and validates the shapes; the shape limit and the card types
//! against the request's candidates are checked here.

use std::sync::Arc;

use gpusched_api::v1;
use gpusched_engine::{MixShape, Snapshot, Violation, ViolationKind, WorkloadMix};

/// A converted mix and whether it came with the request (its card types are then checked
/// against the request's candidates, section 12.1).
#[derive(Clone, Debug)]
pub struct Mix {
    /// The mix.
    pub mix: Arc<WorkloadMix>,
    /// Sent in the request (not the server's default).
    pub from_request: bool,
}

/// Converts a mix; violations are named under `prefix` (`options.workload_mix`). At most
/// `max_shapes` shapes are converted: more is one LIMIT_EXCEEDED violation.
pub fn mix_in(
    m: v1::WorkloadMix,
    prefix: &str,
    max_shapes: usize,
) -> Result<WorkloadMix, Vec<Violation>> {
    let v1::WorkloadMix { shapes } = m;
    if shapes.len() > max_shapes {
        return Err(vec![Violation::new(
            ViolationKind::LimitExceeded,
            format!("{prefix}.shapes"),
            format!(
                "{} shapes; at most {max_shapes} are accepted (limits.max_mix_shapes)",
                shapes.len()
            ),
        )]);
    }
    let shapes = shapes
        .into_iter()
        .map(|s| {
            let v1::WorkloadMixShape {
                probability,
                gpu_count,
                gpucores_percent,
                gpumem_mib,
                gpumem_percent,
                gpu_types,
                cpu_milli,
                host_mem_mib,
            } = s;
            let shape = MixShape {
                weight: 0,
                gpus: gpu_count,
                cores: gpucores_percent,
                mem_mib: gpumem_mib,
                mem_percent: gpumem_percent,
                card_types: gpu_types,
                cpu_milli,
                host_mem_mib,
            };
            (probability, shape)
        })
        .collect();
    WorkloadMix::from_probabilities(shapes).map_err(|e| e.prefixed(prefix).violations)
}

/// Card types of a request's mix that no card of the candidate nodes has (section 12.1), as
/// UNKNOWN_REFERENCE violations under `prefix`. The candidates' distinct types are collected
/// once; each entry is matched by the `use-gputype` rule.
pub fn unknown_types(mix: &WorkloadMix, snapshot: &Snapshot, prefix: &str) -> Vec<Violation> {
    if mix.shapes().iter().all(|s| s.card_types.is_empty()) {
        return Vec::new();
    }
    let mut types: Vec<String> = snapshot
        .nodes()
        .flat_map(|n| n.cards().iter().map(|c| c.card_type.to_uppercase()))
        .collect();
    types.sort_unstable();
    types.dedup();
    let mut violations = Vec::new();
    for (i, s) in mix.shapes().iter().enumerate() {
        for (j, t) in s.card_types.iter().enumerate() {
            let want = t.trim().to_uppercase();
            if !types.iter().any(|have| have.contains(want.as_str())) {
                violations.push(Violation::new(
                    ViolationKind::UnknownReference,
                    format!("{prefix}.shapes[{i}].gpu_types[{j}]"),
                    format!(
                        "no card of the candidate nodes has a type matching {t:?} (a typo, or \
                         a type the cluster lacks: leave the entry out)"
                    ),
                ));
            }
        }
    }
    violations
}
