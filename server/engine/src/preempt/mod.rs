//! Preemption (`docs/placement-semantics.md` section 9): which placed workloads must leave
//! which node so that a pending workload of higher priority fits, card-exact, over the
//! ordinary placement (no second copy of its rules).
//!
//! The request path: [`Occupancy::new`] validates who holds what (`input.rs`); per node,
//! `victims.rs` finds the victims (eligible, not needed, all gone, reprieve, second look,
//! placement); `choice.rs` picks the node; `answer.rs` is what comes back.

mod answer;
mod choice;
mod input;
mod victims;

pub use answer::{
    NodePreemption, NotCandidate, NotCandidateReason, PreemptChoice, PreemptVerdict, Preemption,
    Reprieve, ReprieveOutcome, VictimSummary, Victims,
};
pub use input::{Booking, NodeWorkloads, Occupancy, PlacedWorkload, PreemptLimits};

use crate::decide::{Abandoned, Stop, never};
use crate::evaluate::Scratch;
use crate::fit::Prepared;
use crate::score::score_from_sums;
use crate::workload::Workload;
use victims::{Pending, node_preemption};

/// What a preemption collects besides the answer. `PreemptOptions::default()` collects
/// nothing extra.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PreemptOptions {
    /// Per node with victims, every eligible workload in reprieve order with what happened to
    /// it ([`NodePreemption::reprieves`]).
    pub explain: bool,
}

impl PreemptOptions {
    /// Options with explanations.
    pub fn explained() -> Self {
        PreemptOptions { explain: true }
    }
}

/// Who must leave which node for `workload` of `priority` to fit, and on which node to do it
/// (`docs/placement-semantics.md` section 9). Per node at most 2 + E fits (E eligible
/// workloads) and one to choose the cards; for a workload with two or more GPU app containers
/// the second look adds at most V (V + 1) / 2 (V victims of the reprieve).
pub fn preempt(
    occupancy: &Occupancy<'_>,
    workload: &Workload,
    priority: i32,
    options: PreemptOptions,
) -> Preemption {
    let (answer, _) = preempt_with(occupancy, workload, priority, options, &never);
    answer
}

/// [`preempt`], abandoned as soon as `stop` says so (asked before each node and each round of
/// the second look).
pub fn preempt_until(
    occupancy: &Occupancy<'_>,
    workload: &Workload,
    priority: i32,
    options: PreemptOptions,
    stop: Stop<'_>,
) -> Result<Preemption, Abandoned> {
    match preempt_with(occupancy, workload, priority, options, stop) {
        (answer, false) => Ok(answer),
        (_, true) => Err(Abandoned),
    }
}

/// The answer, and whether `stop` abandoned it (then it is partial).
fn preempt_with(
    occupancy: &Occupancy<'_>,
    workload: &Workload,
    priority: i32,
    options: PreemptOptions,
    stop: Stop<'_>,
) -> (Preemption, bool) {
    let snapshot = occupancy.snapshot;
    let requests_gpu = workload.requests_gpu();
    let mut nodes = Vec::with_capacity(snapshot.len());
    if !requests_gpu {
        for (id, node) in snapshot.iter() {
            let eligible = occupancy
                .residents(id)
                .iter()
                .filter(|r| r.workload.priority < priority)
                .count();
            nodes.push(NodePreemption {
                node: id,
                eligible: u32::try_from(eligible).unwrap_or(u32::MAX),
                verdict: PreemptVerdict::NotNeeded(score_from_sums(&node.sums)),
                reprieves: Vec::new(),
            });
        }
        let answer = Preemption {
            requests_gpu,
            nodes,
            choice: PreemptChoice::NotNeeded,
        };
        return (answer, false);
    }
    let prep = Prepared::new(workload);
    let pending = Pending {
        prep: &prep,
        priority,
        second_look: Pending::needs_second_look(&prep),
        explain: options.explain,
    };
    let mut scratch = Scratch::default();
    let mut abandoned = false;
    for (id, node) in snapshot.iter() {
        if stop() {
            abandoned = true;
            break;
        }
        let residents = occupancy.residents(id);
        match node_preemption(node, id, residents, &pending, &mut scratch, stop) {
            Some(answer) => nodes.push(answer),
            None => {
                abandoned = true;
                break;
            }
        }
    }
    let choice = if abandoned {
        PreemptChoice::NoCandidate
    } else {
        choice::choose(&mut nodes, workload.node_policy)
    };
    let answer = Preemption {
        requests_gpu,
        nodes,
        choice,
    };
    (answer, abandoned)
}
