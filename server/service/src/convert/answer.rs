//! Answers: the engine's evaluations and allocations, with the invalid nodes of the
//! candidates merged in, back to protobuf (failed nodes, scores, explanations, allocation
//! results, effective policies, resolved containers, reasons).

use gpusched_api::v1;
use gpusched_engine as engine;
use gpusched_engine::{
    Allocation, Evaluation, GpuToken, NodePolicy, Reason, Snapshot, ViolationKind, Workload,
};

use crate::candidates::{Candidates, InvalidNode};
use crate::convert::options::FailedNodesShown;

fn node_policy_out(p: NodePolicy) -> i32 {
    match p {
        NodePolicy::Binpack => v1::NodePolicy::Binpack as i32,
        NodePolicy::Spread => v1::NodePolicy::Spread as i32,
        NodePolicy::Fgd => v1::NodePolicy::Fgd as i32,
    }
}

fn gpu_token_out(t: GpuToken) -> i32 {
    match t {
        GpuToken::Binpack => v1::GpuPolicy::Binpack as i32,
        GpuToken::Spread => v1::GpuPolicy::Spread as i32,
        GpuToken::Mutex => v1::GpuPolicy::Mutex as i32,
        GpuToken::TopologyAware => v1::GpuPolicy::TopologyAware as i32,
        GpuToken::Numa => v1::GpuPolicy::Numa as i32,
        GpuToken::Fgd => v1::GpuPolicy::Fgd as i32,
    }
}

/// The effective policy of a workload.
pub fn effective_out(w: &Workload) -> v1::EffectivePolicy {
    v1::EffectivePolicy {
        node_policy: node_policy_out(w.node_policy),
        gpu_policy: w
            .gpu_policy
            .tokens()
            .iter()
            .map(|t| gpu_token_out(*t))
            .collect(),
        scoring_weights: Some(v1::ScoringWeights {
            slot: w.weights.slot,
            core: w.weights.core,
            memory: w.weights.memory,
        }),
        numa_bind: w.numa_bind,
        gpu_policy_text: w.gpu_policy.to_string(),
    }
}

/// The protobuf reason of a violation kind (its name is `VIOLATION_REASON_` + the kind's
/// reason string, checked by a test).
pub fn violation_reason_out(k: ViolationKind) -> v1::ViolationReason {
    match k {
        ViolationKind::InvalidNodePolicy => v1::ViolationReason::InvalidNodePolicy,
        ViolationKind::InvalidGpuPolicy => v1::ViolationReason::InvalidGpuPolicy,
        ViolationKind::InvalidScoringWeights => v1::ViolationReason::InvalidScoringWeights,
        ViolationKind::InvalidNumaBind => v1::ViolationReason::InvalidNumaBind,
        ViolationKind::InvalidResourceRequest => v1::ViolationReason::InvalidResourceRequest,
        ViolationKind::MissingField => v1::ViolationReason::MissingField,
        ViolationKind::DuplicateId => v1::ViolationReason::DuplicateId,
        ViolationKind::UnknownReference => v1::ViolationReason::UnknownReference,
        ViolationKind::UnknownEnumValue => v1::ViolationReason::UnknownEnumValue,
        ViolationKind::OutOfRange => v1::ViolationReason::OutOfRange,
        ViolationKind::LimitExceeded => v1::ViolationReason::LimitExceeded,
        ViolationKind::InvalidNodeReference => v1::ViolationReason::InvalidNodeReference,
        ViolationKind::InvalidWorkloadMix => v1::ViolationReason::InvalidWorkloadMix,
    }
}

/// The protobuf reason.
pub fn reason_out(r: Reason) -> v1::Reason {
    match r {
        Reason::NodeInsufficientDevice => v1::Reason::NodeInsufficientDevice,
        Reason::CardNotHealth => v1::Reason::CardNotHealth,
        Reason::CardCordoned => v1::Reason::CardCordoned,
        Reason::CardTypeMismatch => v1::Reason::CardTypeMismatch,
        Reason::NumaNotFit => v1::Reason::NumaNotFit,
        Reason::CardUuidMismatch => v1::Reason::CardUuidMismatch,
        Reason::CardTimeSlicingExhausted => v1::Reason::CardTimeSlicingExhausted,
        Reason::ExclusiveDeviceAllocateConflict => v1::Reason::ExclusiveDeviceAllocateConflict,
        Reason::CardInsufficientMemory => v1::Reason::CardInsufficientMemory,
        Reason::CardInsufficientCore => v1::Reason::CardInsufficientCore,
        Reason::CardComputeUnitsExhausted => v1::Reason::CardComputeUnitsExhausted,
        Reason::AllocatedCardsInsufficientRequest => v1::Reason::AllocatedCardsInsufficientRequest,
        Reason::CardZeroCapacity => v1::Reason::CardZeroCapacity,
        Reason::InvalidNode => v1::Reason::InvalidNode,
        Reason::QuotaMemoryExceeded => v1::Reason::QuotaMemoryExceeded,
        Reason::QuotaCoresExceeded => v1::Reason::QuotaCoresExceeded,
        Reason::MigNoProfileLargeEnough => v1::Reason::MigNoProfileLargeEnough,
        Reason::MigProfileNotAllowed => v1::Reason::MigProfileNotAllowed,
        Reason::MigNoFreePlacement => v1::Reason::MigNoFreePlacement,
    }
}

fn container_name(w: &Workload, position: usize) -> String {
    w.containers
        .get(position)
        .map(|c| c.name.clone())
        .unwrap_or_default()
}

/// Failed nodes, by name.
pub fn failed_out(
    s: &Snapshot,
    w: &Workload,
    failed: &[engine::FailedNode],
) -> Vec<v1::FailedNode> {
    // Many nodes fail the same way: each distinct failure's reasons and text are built once
    // and cloned (formatting them per node was ~15% of a 1,000-node decision).
    type Shape = (engine::ReasonCounts, u32, usize);
    let mut built: Vec<(Shape, Vec<v1::ReasonCount>, String, String)> = Vec::new();
    let mut index: std::collections::HashMap<Shape, usize> = std::collections::HashMap::new();
    failed
        .iter()
        .map(|f| {
            let engine::FailedNode { node, failure } = f;
            let engine::NodeFailure {
                container_position,
                reasons,
                cards_on_node,
                unresolvable,
            } = failure;
            let shape: Shape = (*reasons, *cards_on_node, *container_position);
            // The last shape first (runs are common), then the index of shapes seen.
            let found = if built.last().is_some_and(|(k, ..)| *k == shape) {
                Some(built.len() - 1)
            } else {
                index.get(&shape).copied()
            };
            let k = match found {
                Some(k) => k,
                None => {
                    index.insert(shape, built.len());
                    built.push((
                        shape,
                        reasons
                            .entries(*cards_on_node)
                            .into_iter()
                            .map(|(r, count)| v1::ReasonCount {
                                reason: reason_out(r) as i32,
                                count,
                                name: r.as_str().to_owned(),
                            })
                            .collect(),
                        failure.hami_text(),
                        container_name(w, *container_position),
                    ));
                    built.len() - 1
                }
            };
            let (_, reasons, message, container) = &built[k];
            v1::FailedNode {
                node_name: s
                    .node(*node)
                    .map(|n| n.name().to_owned())
                    .unwrap_or_default(),
                reasons: reasons.clone(),
                message: message.clone(),
                container_position: u32::try_from(*container_position).unwrap_or(u32::MAX),
                container_name: container.clone(),
                unresolvable: *unresolvable,
            }
        })
        .collect()
}

/// A feasible node's score.
pub fn score_out(s: &Snapshot, f: &engine::FeasibleNode) -> v1::NodeScore {
    let engine::FeasibleNode {
        node,
        score,
        normalized,
    } = f;
    v1::NodeScore {
        node_name: s
            .node(*node)
            .map(|n| n.name().to_owned())
            .unwrap_or_default(),
        raw_score: score.raw,
        normalized_score: *normalized,
        fragmentation: fragmentation_out(score),
    }
}

/// A node score's fragmentation before and after (node policy fgd, section 12.3).
pub fn fragmentation_out(score: &engine::NodeScore) -> Option<v1::Fragmentation> {
    score.fragmentation.map(|f| v1::Fragmentation {
        before: f.before(),
        after: f.after(),
        delta: f.delta(),
    })
}

/// An explained node's fragmentation before and after, shape by shape (section 12.5).
fn fragmentation_explanation_out(
    f: &engine::FragmentationExplanation,
) -> v1::FragmentationExplanation {
    let engine::FragmentationExplanation {
        total_weight,
        before,
        after,
    } = f;
    let state = |n: &engine::NodeFragmentation| {
        let engine::NodeFragmentation {
            free_cores,
            weighted,
            shapes,
        } = n;
        let expected = engine::Fragmentation {
            weighted_before: *weighted,
            weighted_after: *weighted,
            total_weight: *total_weight,
        }
        .before();
        v1::FragmentationState {
            expected,
            free_cores: *free_cores,
            shapes: shapes
                .iter()
                .map(|p| {
                    let engine::ShapeFragmentation {
                        shape,
                        cores,
                        hostable,
                    } = p;
                    v1::ShapeFragmentation {
                        shape: u32::try_from(*shape).unwrap_or(u32::MAX),
                        fragmented_cores: *cores,
                        hostable: *hostable,
                    }
                })
                .collect(),
        }
    };
    v1::FragmentationExplanation {
        before: Some(state(before)),
        after: after.as_ref().map(state),
    }
}

/// Explanations.
pub fn explanations_out(
    s: &Snapshot,
    w: &Workload,
    ex: &[engine::NodeExplanation],
) -> Vec<v1::NodeExplanation> {
    ex.iter()
        .map(|e| {
            let engine::NodeExplanation {
                node,
                containers,
                quota,
                fragmentation,
            } = e;
            let n = s.node(*node);
            v1::NodeExplanation {
                node_name: n.map(|n| n.name().to_owned()).unwrap_or_default(),
                fragmentation: fragmentation.as_ref().map(fragmentation_explanation_out),
                containers: containers
                    .iter()
                    .map(|c| {
                        let engine::ContainerExplanation { position, cards } = c;
                        v1::ContainerExplanation {
                            container_name: container_name(w, *position),
                            init: w.containers.get(*position).is_some_and(|c| c.init),
                            cards: cards
                                .iter()
                                .map(|k| {
                                    let engine::CardExplanation {
                                        card,
                                        terms,
                                        visit_position,
                                        rejected,
                                        chosen,
                                        mig,
                                    } = k;
                                    let c = n.and_then(|n| n.cards().get(*card));
                                    v1::CardExplanation {
                                        card_id: c.map(|c| c.id.clone()).unwrap_or_default(),
                                        card_index: c.map_or(0, |c| c.index),
                                        numa: c.map_or(0, |c| c.numa),
                                        slot_term: terms.slot,
                                        core_term: terms.core,
                                        memory_term: terms.memory,
                                        score: terms.total(),
                                        visit_position: visit_position.unwrap_or(0),
                                        rejected: rejected
                                            .map_or(v1::Reason::Unspecified, reason_out)
                                            as i32,
                                        chosen: *chosen,
                                        visited: visit_position.is_some(),
                                        mig_profiles: mig
                                            .as_ref()
                                            .map(mig_explanation_out)
                                            .unwrap_or_default(),
                                    }
                                })
                                .collect(),
                        }
                    })
                    .collect(),
                quota: quota.as_ref().map(quota_explanation_out),
            }
        })
        .collect()
}

/// A quota budget back to protobuf.
pub fn quota_budget_out(b: &engine::QuotaBudget) -> v1::QuotaBudget {
    let engine::QuotaBudget { mem_mib, cores } = b;
    v1::QuotaBudget {
        mem_mib: *mem_mib,
        cores: *cores,
    }
}

/// What a placement consumes against a quota.
pub fn quota_use_out(u: &engine::QuotaUse) -> v1::QuotaUse {
    let engine::QuotaUse { mem_mib, cores } = u;
    v1::QuotaUse {
        mem_mib: *mem_mib,
        cores: *cores,
    }
}

fn quota_explanation_out(q: &engine::QuotaExplanation) -> v1::QuotaExplanation {
    let engine::QuotaExplanation { budget, consumed } = q;
    v1::QuotaExplanation {
        budget: Some(quota_budget_out(budget)),
        consumed: Some(quota_use_out(consumed)),
    }
}

/// The profiles a MIG choice considered, in its order.
fn mig_explanation_out(m: &engine::MigExplanation) -> Vec<v1::MigProfileConsidered> {
    let engine::MigExplanation { profiles } = m;
    profiles
        .iter()
        .map(|p| {
            let engine::MigProfileConsidered { profile, outcome } = p;
            let mut out = v1::MigProfileConsidered {
                profile: profile.clone(),
                ..Default::default()
            };
            let o = match outcome {
                engine::MigOutcome::TooSmall => v1::MigOutcome::TooSmall,
                engine::MigOutcome::NotAllowed => v1::MigOutcome::NotAllowed,
                engine::MigOutcome::NoFreePlace => v1::MigOutcome::NoFreePlace,
                engine::MigOutcome::NotReached => v1::MigOutcome::NotReached,
                engine::MigOutcome::Chosen { placement, reused } => {
                    out.start = placement.start;
                    out.size = placement.size;
                    out.reused = *reused;
                    v1::MigOutcome::Chosen
                }
            };
            out.outcome = o as i32;
            out
        })
        .collect()
}

/// A MIG assignment.
fn mig_assignment_out(m: &engine::MigAssignment) -> v1::MigAssignment {
    let engine::MigAssignment {
        profile,
        placement,
        reused,
        owner,
    } = m;
    v1::MigAssignment {
        profile: profile.clone(),
        start: placement.start,
        size: placement.size,
        reused: *reused,
        owner: owner.clone(),
    }
}

/// The cards of a placement's containers.
pub fn containers_out(
    n: Option<&engine::Node>,
    w: &Workload,
    containers: &[engine::ContainerAssignment],
) -> Vec<v1::ContainerAssignment> {
    containers
        .iter()
        .map(|c| {
            let engine::ContainerAssignment { position, cards } = c;
            v1::ContainerAssignment {
                container_name: container_name(w, *position),
                init: w.containers.get(*position).is_some_and(|c| c.init),
                cards: cards
                    .iter()
                    .map(|k| {
                        let engine::AssignedCard {
                            card,
                            mem_mib,
                            cores,
                            mig,
                        } = k;
                        let c = n.and_then(|n| n.cards().get(*card));
                        v1::CardAssignment {
                            card_id: c.map(|c| c.id.clone()).unwrap_or_default(),
                            card_index: c.map_or(0, |c| c.index),
                            card_type: c.map(|c| c.card_type.clone()).unwrap_or_default(),
                            mem_mib: *mem_mib,
                            cores_percent: *cores,
                            mig: mig.as_ref().map(mig_assignment_out),
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}

/// An allocation result of the valid nodes (the engine's failed nodes only).
fn result_out(
    s: &Snapshot,
    w: &Workload,
    a: &Allocation,
    rolled_back: bool,
    shown: FailedNodesShown,
) -> v1::AllocationResult {
    let Allocation {
        requests_gpu,
        placement,
        failed,
        feasible_count,
        explanations,
    } = a;
    let placed = placement.is_some() && !rolled_back;
    let mut out = v1::AllocationResult {
        placed,
        node_name: String::new(),
        containers: Vec::new(),
        node_score: None,
        failed_nodes: if shown.lists(placed) {
            failed_out(s, w, failed)
        } else {
            Vec::new()
        },
        failed_node_count: u32::try_from(failed.len()).unwrap_or(u32::MAX),
        effective_policy: Some(effective_out(w)),
        requests_gpu: *requests_gpu,
        feasible_node_count: u32::try_from(*feasible_count).unwrap_or(u32::MAX),
        explanations: explanations_out(s, w, explanations),
        rolled_back: rolled_back && placement.is_some(),
    };
    if let Some(p) = placement {
        let engine::Placement {
            node,
            score,
            normalized,
            containers,
            final_usage: _,
            booked: _,
            host: _, // the workload's own request (callers know it)
        } = p;
        let n = s.node(*node);
        out.node_name = n.map(|n| n.name().to_owned()).unwrap_or_default();
        out.node_score = Some(v1::NodeScore {
            node_name: out.node_name.clone(),
            raw_score: score.raw,
            normalized_score: *normalized,
            fragmentation: fragmentation_out(score),
        });
        out.containers = containers_out(n, w, containers);
    }
    out
}

/// The allocation answer for these candidates (`snapshot` is theirs, or theirs after the
/// bookings of a batch): the engine's failed nodes and the invalid ones, counted always and
/// listed as `shown` asks.
pub fn allocation_out(
    c: &Candidates,
    snapshot: &Snapshot,
    w: &Workload,
    a: &Allocation,
    rolled_back: bool,
    shown: FailedNodesShown,
) -> v1::AllocationResult {
    let mut r = result_out(snapshot, w, a, rolled_back, shown);
    if shown.lists(r.placed) {
        r.failed_nodes = failed_with_invalid(c, std::mem::take(&mut r.failed_nodes));
    }
    let invalid = u32::try_from(c.invalid.len()).unwrap_or(u32::MAX);
    r.failed_node_count = r.failed_node_count.saturating_add(invalid);
    r
}

/// The failed nodes of an answer: the engine's (sorted by name) and the invalid ones,
/// merged in name order.
pub fn failed_with_invalid(c: &Candidates, failed: Vec<v1::FailedNode>) -> Vec<v1::FailedNode> {
    if c.invalid.is_empty() {
        return failed;
    }
    let mut out = Vec::with_capacity(failed.len() + c.invalid.len());
    let mut invalid = c.invalid.iter().peekable();
    for f in failed {
        while let Some(x) = invalid.next_if(|x| x.name() < f.node_name.as_str()) {
            out.push(invalid_out(x));
        }
        out.push(f);
    }
    out.extend(invalid.map(|x| invalid_out(x)));
    out
}

/// An invalid node as a failed node of an answer.
pub fn invalid_out(x: &InvalidNode) -> v1::FailedNode {
    v1::FailedNode {
        node_name: x.name().to_owned(),
        reasons: vec![v1::ReasonCount {
            reason: v1::Reason::InvalidNode as i32,
            count: 1,
            name: Reason::InvalidNode.as_str().to_owned(),
        }],
        message: x.message().to_owned(),
        container_position: 0,
        container_name: String::new(),
        unresolvable: true,
    }
}

/// The Filter answer of an evaluation of these candidates.
pub fn filter_out(c: &Candidates, w: &Workload, e: &Evaluation) -> v1::FilterResponse {
    let s = &c.snapshot;
    let mut names: Vec<String> = e
        .feasible
        .iter()
        .filter_map(|f| s.node(f.node).map(|n| n.name().to_owned()))
        .collect();
    names.sort();
    v1::FilterResponse {
        feasible_node_names: names,
        failed_nodes: failed_with_invalid(c, failed_out(s, w, &e.failed)),
        effective_policy: Some(effective_out(w)),
        requests_gpu: e.requests_gpu,
        explanations: explanations_out(s, w, &e.explanations),
    }
}

/// The Score answer of an evaluation of these candidates.
pub fn scores_out(c: &Candidates, w: &Workload, e: &Evaluation) -> v1::ScoreResponse {
    let s = &c.snapshot;
    v1::ScoreResponse {
        scores: e.feasible.iter().map(|f| score_out(s, f)).collect(),
        failed_nodes: failed_with_invalid(c, failed_out(s, w, &e.failed)),
        effective_policy: Some(effective_out(w)),
        requests_gpu: e.requests_gpu,
        explanations: explanations_out(s, w, &e.explanations),
    }
}

/// Resolved containers for ValidateWorkload.
pub fn resolved_out(w: &Workload) -> Vec<v1::ResolvedContainer> {
    w.containers
        .iter()
        .filter(|c| c.gpus > 0)
        .map(|c| {
            let engine::ContainerRequest {
                name,
                init,
                gpus,
                mem_mib,
                mem_percent,
                cores,
            } = c;
            v1::ResolvedContainer {
                container_name: name.clone(),
                init: *init,
                gpu_count: *gpus,
                mem_mib: *mem_mib,
                mem_percent: *mem_percent,
                cores_percent: *cores,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidates::tests::bad;

    #[test]
    fn violation_reasons_are_the_kinds_with_the_enum_prefix() {
        let mut seen = Vec::new();
        for k in ViolationKind::ALL {
            let r = violation_reason_out(k);
            assert_eq!(
                r.as_str_name(),
                format!("VIOLATION_REASON_{}", k.as_str()),
                "{k:?}"
            );
            seen.push(r as i32);
        }
        // Every value of the proto enum but UNSPECIFIED is some kind: the set is closed both ways.
        let mut all: Vec<i32> = (0..64)
            .filter(|n| v1::ViolationReason::try_from(*n).is_ok())
            .filter(|n| *n != v1::ViolationReason::Unspecified as i32)
            .collect();
        all.sort_unstable();
        seen.sort_unstable();
        assert_eq!(seen, all);
    }

    #[test]
    fn failed_nodes_merge_in_name_order() {
        let c = Candidates::new(Snapshot::default(), vec![bad("d", 1), bad("a", 1)]);
        let f = |n: &str| v1::FailedNode {
            node_name: n.to_owned(),
            ..Default::default()
        };
        let names: Vec<String> = failed_with_invalid(&c, vec![f("b"), f("c"), f("e")])
            .into_iter()
            .map(|f| f.node_name)
            .collect();
        assert_eq!(names, ["a", "b", "c", "d", "e"]);
        let out = failed_with_invalid(&c, vec![]);
        assert_eq!(out[0].reasons[0].reason, v1::Reason::InvalidNode as i32);
        assert!(out[0].unresolvable);
    }
}
