//! What a preemption answers: per node, not needed / victims / not a candidate, the choice,
//! and the explanation of each reprieve (`docs/placement-semantics.md` section 9.5).

use crate::decide::Placement;
use crate::model::NodeId;
use crate::reason::NodeFailure;
use crate::score::NodeScore;

/// The answer of [`crate::preempt`].
#[derive(Clone, Debug, PartialEq)]
pub struct Preemption {
    /// Whether any container asks for a GPU (when not, every node is [`NodePreemption`] with
    /// [`PreemptVerdict::NotNeeded`]).
    pub requests_gpu: bool,
    /// Every node of the snapshot, in name order.
    pub nodes: Vec<NodePreemption>,
    /// The node choice of section 9.4.
    pub choice: PreemptChoice,
}

impl Preemption {
    /// The answer for one node.
    pub fn node(&self, id: NodeId) -> Option<&NodePreemption> {
        self.nodes
            .binary_search_by(|n| n.node.cmp(&id))
            .ok()
            .and_then(|at| self.nodes.get(at))
    }

    /// The victims on the chosen node, when the choice is to evict.
    pub fn chosen(&self) -> Option<&Victims> {
        match self.choice {
            PreemptChoice::Evict(id) => self.node(id).and_then(NodePreemption::victims),
            PreemptChoice::NotNeeded | PreemptChoice::NoCandidate => None,
        }
    }
}

/// Where to preempt, when the engine picks (section 9.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PreemptChoice {
    /// Some node fits the workload as it is: evict nothing, allocate as usual.
    NotNeeded,
    /// Evict the victims of this node.
    Evict(NodeId),
    /// No node can make room.
    NoCandidate,
}

/// One node's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct NodePreemption {
    /// The node.
    pub node: NodeId,
    /// How many of its placed workloads have a lower priority than the pending one.
    pub eligible: u32,
    /// What the node needs.
    pub verdict: PreemptVerdict,
    /// With explanations: every eligible workload in reprieve order and what happened to it
    /// (for a node with victims; empty otherwise).
    pub reprieves: Vec<Reprieve>,
}

impl NodePreemption {
    /// The victims, when the node is a candidate.
    pub fn victims(&self) -> Option<&Victims> {
        match &self.verdict {
            PreemptVerdict::Victims(v) => Some(v),
            PreemptVerdict::NotNeeded(_) | PreemptVerdict::NotCandidate(_) => None,
        }
    }
}

/// What one node needs for the workload to fit (section 9.3).
#[derive(Clone, Debug, PartialEq)]
pub enum PreemptVerdict {
    /// It fits as it is (node score after a tentative placement): no eviction.
    NotNeeded(NodeScore),
    /// It fits once these workloads are gone.
    Victims(Victims),
    /// It does not fit even with every eligible workload gone.
    NotCandidate(NotCandidate),
}

/// The victims on one node and the placement the workload gets once they are gone.
#[derive(Clone, Debug, PartialEq)]
pub struct Victims {
    /// Their ids, most important first (higher priority, then earlier start, then smaller id).
    pub ids: Vec<String>,
    /// What the node choice compares.
    pub summary: VictimSummary,
    /// The placement once they are gone, as Allocate chooses it on the node with their
    /// bookings taken away: `final_usage` is the usage minus their bookings plus the
    /// placement's, `booked` what the workload adds, `normalized` its preference among the
    /// candidate nodes by the node policy.
    pub placement: Placement,
}

/// The victims of a node as the node choice sees them (section 9.4, rules 1 to 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VictimSummary {
    /// Victims whose eviction violates a budget.
    pub budget_violations: u32,
    /// The highest victim priority.
    pub highest_priority: i32,
    /// The sum over the victims of `priority + 2^31` (exact).
    pub offset_priority_sum: u128,
    /// Number of victims.
    pub count: u32,
    /// The earliest start among the victims of the highest priority, ms since the epoch.
    pub earliest_start_of_highest_ms: i64,
}

/// Why a node is not a preemption candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotCandidate {
    /// Why.
    pub reason: NotCandidateReason,
    /// The node failure with every eligible workload gone (when none is eligible, the node as
    /// it is), as for any failed node.
    pub failure: NodeFailure,
}

/// The two ways a node is not a candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotCandidateReason {
    /// No placed workload has a lower priority than the pending one.
    NoLowerPriority,
    /// Even with every lower-priority workload gone, the workload does not fit.
    InsufficientAfterEviction,
}

/// One eligible workload of a node with victims, in reprieve order (explanations).
#[derive(Clone, Debug, PartialEq)]
pub struct Reprieve {
    /// Its id.
    pub id: String,
    /// Its priority.
    pub priority: i32,
    /// Whether evicting it violates a budget (it was tried in the first group).
    pub violates_budget: bool,
    /// Its start, ms since the epoch.
    pub start_time_ms: i64,
    /// What happened to it.
    pub outcome: ReprieveOutcome,
}

/// What happened to an eligible workload.
#[derive(Clone, Debug, PartialEq)]
pub enum ReprieveOutcome {
    /// Put back in reprieve order, the workload still fitted: it stays.
    Kept,
    /// A victim of the reprieve that the second look put back (section 9.3 step 5): it stays.
    KeptAtSecondLook,
    /// Put back, the workload did not fit (this failure): it is a victim.
    Evicted(NodeFailure),
}
