//! A workload in: typed or Kubernetes form converted to the engine's spec (the engine parses
//! and resolves it; the pipeline checks it against the limits), and the policy enums it shares
//! with the options.

use gpusched_api::v1;
use gpusched_engine as engine;
use gpusched_engine::{GpuToken, NodePolicy, Violation, ViolationKind};

use crate::error::ServiceError;

/// A workload converted to the engine's spec, not yet parsed: its metadata, its spec, the
/// prefix its spec's fields are named under (`workload.kubernetes`, `workloads[2].typed`) and
/// the field problems found converting it.
#[derive(Debug)]
pub struct Spec {
    /// Namespace, name, uid.
    pub meta: engine::WorkloadMeta,
    /// The typed or Kubernetes spec.
    pub spec: engine::WorkloadSpec,
    /// Where the spec's fields are named.
    pub prefix: String,
    /// The quota budget the caller sent (validated with the spec's problems).
    pub quota: Option<engine::QuotaBudget>,
    /// Unset or unknown enum numbers, and an out-of-range quota budget.
    pub violations: Vec<Violation>,
}

/// Converts a workload (violations prefixed with `prefix`, e.g. `workload` or `workloads[2]`)
/// into its spec; a missing workload or spec is INVALID_ARGUMENT at once.
pub fn spec_in(w: Option<v1::Workload>, prefix: &str) -> Result<Spec, ServiceError> {
    let Some(w) = w else {
        return Err(ServiceError::InvalidArgument(vec![Violation::new(
            ViolationKind::MissingField,
            prefix,
            "a workload is required",
        )]));
    };
    let v1::Workload {
        namespace,
        name,
        uid,
        spec,
        quota,
    } = w;
    let meta = engine::WorkloadMeta {
        namespace,
        name,
        uid,
    };
    let mut violations = Vec::new();
    let (spec, spec_prefix) = match spec {
        None => {
            return Err(ServiceError::InvalidArgument(vec![Violation::new(
                ViolationKind::MissingField,
                format!("{prefix}.spec"),
                "one of typed or kubernetes is required",
            )]));
        }
        Some(v1::workload::Spec::Typed(t)) => {
            let p = format!("{prefix}.typed");
            (
                engine::WorkloadSpec::Typed(typed_in(t, &p, &mut violations)),
                p,
            )
        }
        Some(v1::workload::Spec::Kubernetes(k)) => {
            let v1::KubernetesWorkloadSpec {
                annotations,
                init_containers,
                containers,
            } = k;
            let container = |c: v1::KubernetesContainer| {
                let v1::KubernetesContainer {
                    name,
                    limits,
                    requests,
                } = c;
                engine::KubeContainer {
                    name,
                    limits,
                    requests,
                }
            };
            let spec = engine::KubeSpec {
                annotations,
                init_containers: init_containers.into_iter().map(container).collect(),
                containers: containers.into_iter().map(container).collect(),
            };
            (
                engine::WorkloadSpec::Kubernetes(spec),
                format!("{prefix}.kubernetes"),
            )
        }
    };
    let quota = quota.map(|q| {
        let v1::QuotaBudget { mem_mib, cores } = q;
        let budget = engine::QuotaBudget { mem_mib, cores };
        if let Err(e) = budget.validate() {
            violations.extend(e.prefixed(prefix).violations);
        }
        budget
    });
    Ok(Spec {
        meta,
        spec,
        prefix: spec_prefix,
        quota,
        violations,
    })
}

/// A typed spec (enum problems added to `violations`).
fn typed_in(
    t: v1::TypedWorkloadSpec,
    prefix: &str,
    violations: &mut Vec<Violation>,
) -> engine::TypedSpec {
    let v1::TypedWorkloadSpec {
        node_policy,
        gpu_policy,
        scoring_weights,
        numa_bind,
        use_gpu_types,
        nouse_gpu_types,
        use_gpu_uuids,
        nouse_gpu_uuids,
        vgpu_mode,
        init_containers,
        containers,
    } = t;
    let container = |c: v1::ContainerRequest| {
        let v1::ContainerRequest {
            name,
            gpu_count,
            gpumem_mib,
            gpumem_percent,
            gpucores_percent,
        } = c;
        engine::TypedContainer {
            name,
            gpus: gpu_count,
            gpumem_mib,
            gpumem_percent,
            gpucores: gpucores_percent,
        }
    };
    engine::TypedSpec {
        node_policy: node_policy_in(node_policy, &format!("{prefix}.node_policy"), violations),
        gpu_policy: gpu_tokens_in(&gpu_policy, &format!("{prefix}.gpu_policy"), violations),
        weights: scoring_weights.map(|w| {
            let v1::ScoringWeights { slot, core, memory } = w;
            engine::ScoringWeights { slot, core, memory }
        }),
        numa_bind,
        use_types: use_gpu_types,
        nouse_types: nouse_gpu_types,
        use_uuids: use_gpu_uuids,
        nouse_uuids: nouse_gpu_uuids,
        vgpu_mode,
        init_containers: init_containers.into_iter().map(container).collect(),
        containers: containers.into_iter().map(container).collect(),
    }
}

/// A node policy enum value (`None` for unspecified, a violation for an unknown one).
pub fn node_policy_in(v: i32, field: &str, violations: &mut Vec<Violation>) -> Option<NodePolicy> {
    match v1::NodePolicy::try_from(v) {
        Ok(v1::NodePolicy::Unspecified) => None,
        Ok(v1::NodePolicy::Binpack) => Some(NodePolicy::Binpack),
        Ok(v1::NodePolicy::Spread) => Some(NodePolicy::Spread),
        Ok(v1::NodePolicy::Fgd) => Some(NodePolicy::Fgd),
        Err(_) => {
            violations.push(Violation::new(
                ViolationKind::InvalidNodePolicy,
                field,
                format!("unknown NodePolicy value {v}"),
            ));
            None
        }
    }
}

/// GPU policy tokens (violations for unspecified and unknown ones).
pub fn gpu_tokens_in(
    values: &[i32],
    field: &str,
    violations: &mut Vec<Violation>,
) -> Vec<GpuToken> {
    values
        .iter()
        .enumerate()
        .filter_map(|(i, &v)| match v1::GpuPolicy::try_from(v) {
            Ok(v1::GpuPolicy::Binpack) => Some(GpuToken::Binpack),
            Ok(v1::GpuPolicy::Spread) => Some(GpuToken::Spread),
            Ok(v1::GpuPolicy::Mutex) => Some(GpuToken::Mutex),
            Ok(v1::GpuPolicy::TopologyAware) => Some(GpuToken::TopologyAware),
            Ok(v1::GpuPolicy::Numa) => Some(GpuToken::Numa),
            Ok(v1::GpuPolicy::Fgd) => Some(GpuToken::Fgd),
            Ok(v1::GpuPolicy::Unspecified) => {
                violations.push(Violation::new(
                    ViolationKind::InvalidGpuPolicy,
                    format!("{field}[{i}]"),
                    "GPU_POLICY_UNSPECIFIED is not a policy token",
                ));
                None
            }
            Err(_) => {
                violations.push(Violation::new(
                    ViolationKind::InvalidGpuPolicy,
                    format!("{field}[{i}]"),
                    format!("unknown GpuPolicy value {v}"),
                ));
                None
            }
        })
        .collect()
}
