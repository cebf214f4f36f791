//! Explanations: how each card of a node scored and fared for each container.

use crate::frag::NodeFragmentation;
use crate::mig::choose::MigExplanation;
use crate::model::NodeId;
use crate::quota::QuotaExplanation;
use crate::reason::Reason;
use crate::score::ScoreTerms;

/// One card, for one container.
#[derive(Clone, Debug, PartialEq)]
pub struct CardExplanation {
    /// Position of the card in the node's card list.
    pub card: usize,
    /// Device score terms against the usage the container met.
    pub terms: ScoreTerms,
    /// Position in the visiting order; `None` when the card was not reached (the container
    /// was already complete, or the node had too few cards).
    pub visit_position: Option<u32>,
    /// The first failed check (or `NumaNotFit` for a card collected in an abandoned group).
    pub rejected: Option<Reason>,
    /// Whether the card was given to the container.
    pub chosen: bool,
    /// For a card with a MIG layout: every profile in choice order with its outcome
    /// (`docs/placement-semantics.md` section 11.6).
    pub mig: Option<MigExplanation>,
}

/// One GPU container on one node: its cards in visiting order.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerExplanation {
    /// Container position in pod order (init containers first).
    pub position: usize,
    /// The cards.
    pub cards: Vec<CardExplanation>,
}

/// One node: every GPU container up to the first that failed.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeExplanation {
    /// The node.
    pub node: NodeId,
    /// The containers.
    pub containers: Vec<ContainerExplanation>,
    /// The workload's quota budget and what the placement on this node consumes (section 10.5);
    /// `None` without a budget.
    pub quota: Option<QuotaExplanation>,
    /// Under an `fgd` policy with a mix: the node's fragmentation before and after the
    /// tentative placement, shape by shape (section 12.5).
    pub fragmentation: Option<FragmentationExplanation>,
}

/// A node's fragmentation before and after a tentative placement (section 12.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FragmentationExplanation {
    /// The mix's total weight (the denominator of the expectation).
    pub total_weight: u64,
    /// The node as it is.
    pub before: NodeFragmentation,
    /// After the placement; `None` when the workload does not fit the node.
    pub after: Option<NodeFragmentation>,
}
