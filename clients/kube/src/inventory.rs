//! A node's GPU inventory as decoded from its annotations: what `translate::inventory` reads
//! and `inventory_check` judges (both import it; it imports neither).

use gpusched_client::v1;

/// A node's GPU inventory as read from its annotations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inventory {
    /// Cards (idle).
    pub cards: Vec<v1::Card>,
    /// Pair scores.
    pub pair_scores: Vec<v1::CardPairScore>,
    /// Cordoned card ids.
    pub cordoned: Vec<String>,
    /// The raw cordon annotation, passed on to the service.
    pub cordon_annotation: Option<String>,
    /// Why the node has no usable inventory (missing or unreadable register annotation, or an
    /// invalid one: [`crate::inventory_check`]); such a node is never sent to the service.
    pub problem: Option<String>,
}
