//! Preempt, both ways: the placed workloads of a request in (fields named as sent, entries of
//! invalid nodes set aside), and the engine's preemption with the invalid nodes merged in out
//! (docs/placement-semantics.md section 9).

use gpusched_api::v1;
use gpusched_engine as engine;
use gpusched_engine::{
    NodePreemption, NotCandidate, NotCandidateReason, PreemptChoice, PreemptVerdict, Preemption,
    Reprieve, ReprieveOutcome, Snapshot, Violation, Workload,
};

use crate::candidates::Candidates;
use crate::convert::answer::{
    containers_out, effective_out, failed_out, fragmentation_out, invalid_out,
};

/// The placed workloads of a request, ready for the engine: the entries of valid nodes (in
/// request order) and, for each, its position in the request (to name a field as sent).
#[derive(Debug, Default)]
pub struct Placed {
    /// The entries the engine validates.
    pub entries: Vec<engine::NodeWorkloads>,
    /// `positions[k]`: where `entries[k]` was in `placed`.
    pub positions: Vec<usize>,
}

impl Placed {
    /// A violation of the engine (fields `placed[k]...` of `entries`) named as sent
    /// (`placed[i]...`).
    pub fn renamed(&self, mut v: Violation) -> Violation {
        if let Some(rest) = v.field.strip_prefix("placed[")
            && let Some((k, tail)) = rest.split_once(']')
            && let Some(i) = k.parse::<usize>().ok().and_then(|k| self.positions.get(k))
        {
            v.field = format!("placed[{i}]{tail}");
        }
        v
    }
}

/// Converts `placed`; entries naming an invalid node of `c` are left out (that node is not a
/// candidate whatever it holds: it answers REASON_INVALID_NODE).
pub fn placed_in(placed: Vec<v1::NodePlaced>, c: &Candidates) -> Placed {
    let mut out = Placed {
        entries: Vec::with_capacity(placed.len()),
        positions: Vec::with_capacity(placed.len()),
    };
    for (i, p) in placed.into_iter().enumerate() {
        let v1::NodePlaced { node, workloads } = p;
        if c.invalid
            .binary_search_by(|x| x.name().cmp(node.as_str()))
            .is_ok()
        {
            continue;
        }
        let workloads = workloads
            .into_iter()
            .map(|w| {
                let v1::PlacedWorkload {
                    id,
                    priority,
                    violates_budget,
                    start_time_ms,
                    bookings,
                } = w;
                engine::PlacedWorkload {
                    id,
                    priority,
                    violates_budget,
                    start_time_ms,
                    bookings: bookings
                        .into_iter()
                        .map(|b| {
                            let v1::Booking {
                                card_id,
                                slots,
                                mem_mib,
                                cores,
                                mig_instance_start,
                            } = b;
                            engine::Booking {
                                card_id,
                                slots,
                                mem_mib,
                                cores,
                                mig_instance_start,
                            }
                        })
                        .collect(),
                }
            })
            .collect();
        out.entries.push(engine::NodeWorkloads { node, workloads });
        out.positions.push(i);
    }
    out
}

fn reason_out(r: NotCandidateReason) -> v1::NotCandidateReason {
    match r {
        NotCandidateReason::NoLowerPriority => v1::NotCandidateReason::NoLowerPriority,
        NotCandidateReason::InsufficientAfterEviction => {
            v1::NotCandidateReason::InsufficientAfterEviction
        }
    }
}

/// One node failure as a `FailedNode` of `node`.
fn failure_out(
    s: &Snapshot,
    w: &Workload,
    node: engine::NodeId,
    failure: &engine::NodeFailure,
) -> v1::FailedNode {
    let failed = [engine::FailedNode {
        node,
        failure: failure.clone(),
    }];
    failed_out(s, w, &failed).pop().unwrap_or_default()
}

fn reprieve_out(s: &Snapshot, w: &Workload, node: engine::NodeId, r: &Reprieve) -> v1::Reprieve {
    let Reprieve {
        id,
        priority,
        violates_budget,
        start_time_ms,
        outcome,
    } = r;
    let (outcome, failure) = match outcome {
        ReprieveOutcome::Kept => (v1::ReprieveOutcome::Kept, None),
        ReprieveOutcome::KeptAtSecondLook => (v1::ReprieveOutcome::KeptAtSecondLook, None),
        ReprieveOutcome::Evicted(f) => (
            v1::ReprieveOutcome::Evicted,
            Some(failure_out(s, w, node, f)),
        ),
    };
    v1::Reprieve {
        id: id.clone(),
        priority: *priority,
        violates_budget: *violates_budget,
        start_time_ms: *start_time_ms,
        outcome: outcome as i32,
        failure,
    }
}

fn node_out(s: &Snapshot, w: &Workload, p: &NodePreemption) -> v1::NodePreemption {
    let NodePreemption {
        node,
        eligible,
        verdict,
        reprieves,
    } = p;
    let n = s.node(*node);
    let node_name = n.map(|n| n.name().to_owned()).unwrap_or_default();
    let verdict = match verdict {
        PreemptVerdict::NotNeeded(score) => {
            v1::node_preemption::Verdict::NotNeeded(v1::NodeScore {
                node_name: node_name.clone(),
                raw_score: score.raw,
                normalized_score: 0,
                fragmentation: fragmentation_out(score),
            })
        }
        PreemptVerdict::Victims(v) => {
            let engine::Victims {
                ids,
                summary,
                placement,
            } = v;
            let engine::VictimSummary {
                budget_violations,
                highest_priority,
                offset_priority_sum: _,
                count: _,
                earliest_start_of_highest_ms: _,
            } = summary;
            let engine::Placement {
                node: _,
                score,
                normalized,
                containers,
                final_usage,
                booked: _,
                host: _, // the workload's own request (callers know it)
            } = placement;
            v1::node_preemption::Verdict::Victims(v1::Victims {
                ids: ids.clone(),
                budget_violations: *budget_violations,
                highest_priority: *highest_priority,
                containers: containers_out(n, w, containers),
                node_score: Some(v1::NodeScore {
                    node_name: node_name.clone(),
                    raw_score: score.raw,
                    normalized_score: *normalized,
                    fragmentation: fragmentation_out(score),
                }),
                final_usage: n
                    .map(|n| {
                        n.cards()
                            .iter()
                            .zip(final_usage)
                            .map(|(c, u)| v1::CardUsageEntry {
                                card_id: c.id.clone(),
                                usage: Some(v1::CardUsage {
                                    used_slots: u.used,
                                    used_mem_mib: u.used_mem_mib,
                                    used_cores: u.used_cores,
                                }),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        }
        PreemptVerdict::NotCandidate(NotCandidate { reason, failure }) => {
            v1::node_preemption::Verdict::NotCandidate(v1::NotCandidate {
                reason: reason_out(*reason) as i32,
                failure: Some(failure_out(s, w, *node, failure)),
            })
        }
    };
    v1::NodePreemption {
        node_name,
        eligible: *eligible,
        verdict: Some(verdict),
        reprieves: reprieves
            .iter()
            .map(|r| reprieve_out(s, w, *node, r))
            .collect(),
    }
}

/// The Preempt answer: every node of the engine's answer and the invalid nodes (not candidates,
/// REASON_INVALID_NODE), merged in name order; the choice.
pub fn preemption_out(c: &Candidates, w: &Workload, p: &Preemption) -> v1::PreemptResponse {
    let s = &c.snapshot;
    let Preemption {
        requests_gpu,
        nodes,
        choice,
    } = p;
    let mut out = Vec::with_capacity(nodes.len() + c.invalid.len());
    let mut invalid = c.invalid.iter().peekable();
    for n in nodes {
        let n = node_out(s, w, n);
        while let Some(x) = invalid.next_if(|x| x.name() < n.node_name.as_str()) {
            out.push(invalid_node_out(x));
        }
        out.push(n);
    }
    out.extend(invalid.map(|x| invalid_node_out(x)));
    let (kind, node_name) = match choice {
        PreemptChoice::NotNeeded => (v1::PreemptChoiceKind::NotNeeded, String::new()),
        PreemptChoice::Evict(id) => (
            v1::PreemptChoiceKind::Evict,
            s.node(*id).map(|n| n.name().to_owned()).unwrap_or_default(),
        ),
        PreemptChoice::NoCandidate => (v1::PreemptChoiceKind::NoCandidate, String::new()),
    };
    v1::PreemptResponse {
        requests_gpu: *requests_gpu,
        nodes: out,
        choice: kind as i32,
        node_name,
        effective_policy: Some(effective_out(w)),
    }
}

fn invalid_node_out(x: &crate::candidates::InvalidNode) -> v1::NodePreemption {
    v1::NodePreemption {
        node_name: x.name().to_owned(),
        eligible: 0,
        verdict: Some(v1::node_preemption::Verdict::NotCandidate(
            v1::NotCandidate {
                reason: v1::NotCandidateReason::InvalidNode as i32,
                failure: Some(invalid_out(x)),
            },
        )),
        reprieves: Vec::new(),
    }
}
