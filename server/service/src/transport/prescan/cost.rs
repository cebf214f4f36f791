//! What a request is charged, from its counts: memory (the encoded request, the decoded and
//! converted structures, the answer) and work (card evaluations), the [`Admission`] it is
//! admitted with. The reliability test (`tests/memory.rs`) measures the worst case of RSS per
//! request byte against [`WIRE_FACTOR`].

use gpusched_api::v1;
use gpusched_engine as engine;

use crate::pipeline::ASSUMED_CARDS_PER_REF;
use crate::rpc::{Admission, Rpc};

/// Bytes of memory charged per byte of the encoded request, on top of the per-entry costs: the
/// received body (once, twice while its chunks are joined), the decoded strings and bytes, and
/// the copies the call makes of them (trimmed ids, upper-cased filters, names echoed in the
/// answer). The reliability test (`tests/memory.rs`) measures the worst case of RSS per request
/// byte against it.
pub const WIRE_FACTOR: usize = 4;

/// Memory of one node beyond its bytes: the decoded message (twice: a vector grows by
/// doubling), the engine's spec and node, the shared pointer and the answer's entry.
pub const NODE_COST: usize = 2 * size_of::<v1::Node>()
    + size_of::<engine::NodeSpec>()
    + size_of::<engine::Node>()
    + 32
    + ANSWER_PER_NODE;
/// Memory of one card: decoded (twice), converted, and its cordon flag.
pub const CARD_COST: usize = 2 * size_of::<v1::Card>() + size_of::<engine::Card>() + 8;
/// Memory of one entry of a repeated string: decoded (twice) and one copy.
pub const STRING_COST: usize = 3 * size_of::<String>();
/// Memory of one pair score: decoded (twice) and converted (the pair matrix is counted per
/// node).
pub const PAIR_COST: usize = 2 * size_of::<v1::CardPairScore>() + size_of::<engine::PairScore>();
/// Memory of one map entry (a B-tree of two strings, nodes half full at worst).
pub const MAP_ENTRY_COST: usize = 4 * size_of::<String>() + 32;
/// Memory of one repeated enum value.
/// A shape of a workload mix: the message, the engine's shape, its fit tables' share.
pub const SHAPE_COST: usize =
    2 * size_of::<v1::WorkloadMixShape>() + size_of::<engine::MixShape>() + 8 * 101 * 2;
/// One gpu_types entry of a mix shape (decoded, its upper-case copy).
pub const ENUM_COST: usize = 2 * size_of::<i32>() + 8;
/// Memory of one workload beyond its lists: decoded and parsed.
pub const WORKLOAD_COST: usize = 2 * size_of::<v1::Workload>()
    + size_of::<engine::Workload>()
    + 2 * size_of::<v1::TypedWorkloadSpec>();
/// Memory of one container: decoded (twice, either form) and resolved.
pub const CONTAINER_COST: usize = 2 * size_of::<v1::KubernetesContainer>()
    + 2 * size_of::<v1::ContainerRequest>()
    + size_of::<engine::ContainerRequest>();
/// Memory of one MIG profile of a card: decoded (twice) and converted (its name and placements
/// are counted as bytes and entries).
pub const MIG_PROFILE_COST: usize =
    2 * size_of::<v1::MigProfile>() + size_of::<engine::MigProfile>();
/// Memory of one MIG instance of a card: decoded (twice) and converted.
pub const MIG_INSTANCE_COST: usize =
    2 * size_of::<v1::MigInstance>() + size_of::<engine::MigInstance>();
/// A card is walked (for its MIG layout) only when its encoding is longer than this: a card
/// without a layout is far shorter, so the common card costs the prescan nothing more.
pub const CARD_WALK_BYTES: usize = 256;
/// Memory of one placed workload of a Preempt: decoded (twice), converted, its reprieve entry.
pub const PLACED_COST: usize = 2 * size_of::<v1::PlacedWorkload>()
    + size_of::<engine::PlacedWorkload>()
    + size_of::<engine::Reprieve>();
/// Memory of one booking of a placed workload: decoded (twice) and converted.
pub const BOOKING_COST: usize = 2 * size_of::<v1::Booking>() + size_of::<engine::Booking>() + 32;
/// Memory of one usage entry of a node by reference.
pub const USAGE_COST: usize =
    2 * size_of::<v1::CardUsageEntry>() + size_of::<(String, engine::CardUsage)>();
/// Memory of one raw card of NormalizeInventory: decoded, converted, normalised and answered.
pub const RAW_CARD_COST: usize = 2 * size_of::<v1::RawCard>()
    + size_of::<engine::RawCard>()
    + size_of::<engine::Card>()
    + size_of::<v1::Card>();
/// Memory of one link: decoded, converted, and its pair score (a map entry and the answer's).
pub const LINK_COST: usize = 2 * size_of::<v1::RawLink>()
    + size_of::<engine::RawLink>()
    + MAP_ENTRY_COST
    + size_of::<v1::CardPairScore>();
/// Memory of one normalisation override: decoded, converted, its upper-cased model.
pub const OVERRIDE_COST: usize = 2 * size_of::<v1::NormalizationOverride>()
    + size_of::<engine::NormalizationOverride>()
    + size_of::<String>();
/// Memory of a node's entry in the answer for one workload: a failed node (its name, reasons
/// with their names, HAMi's message) or a feasible one (its name and score), engine and
/// protobuf forms.
pub const ANSWER_PER_NODE: usize = 448;
/// Memory of one card's explanation for one container: engine and protobuf forms.
pub const EXPLANATION_COST: usize =
    size_of::<engine::CardExplanation>() + 2 * size_of::<v1::CardExplanation>();

/// What the count of one request found, for the estimates ([`Counts::estimate`]).
#[derive(Debug, Default)]
pub struct Counts {
    pub memory: usize,
    /// Counted entries (conversion work).
    pub entries: usize,
    pub whole: usize,
    pub refs: usize,
    /// References with inline inventories (their cards are counted).
    pub inline_refs: usize,
    pub cards: usize,
    pub restrict: usize,
    pub workloads: usize,
    /// Containers over all workloads, each plus one.
    pub container_slots: usize,
    /// Filter list entries over all workloads (each compared with every card).
    pub filter_entries: usize,
    pub explain: bool,
    pub updated_nodes: bool,
    /// Nodes with pair scores: the pair matrices (cards squared).
    pub pair_matrix: usize,
    pub raw_cards: usize,
    pub overrides: usize,
    pub links: usize,
    /// Placed workloads of a Preempt (each is re-evaluated in its node's reprieve).
    pub placed: usize,
}

impl Counts {
    /// The estimates of these counts for one request of `rpc` of `wire` encoded bytes.
    pub fn estimate(&self, rpc: Rpc, wire: usize) -> Admission {
        let workloads = self.workloads.max(1);
        let by_ref = (self.refs - self.inline_refs).saturating_mul(ASSUMED_CARDS_PER_REF);
        let cards = self.cards.saturating_add(by_ref);
        let nodes = self.whole + self.refs;
        let containers = self.container_slots.max(1);
        let explain = if self.explain { 2 } else { 1 };
        let mut memory = wire
            .saturating_mul(WIRE_FACTOR)
            .saturating_add(self.memory)
            .saturating_add(self.pair_matrix.saturating_mul(size_of::<i64>()));
        if rpc.is_placement() {
            // Every node answered for every workload beyond the first (the first is in
            // NODE_COST), and explanations of every card for every container.
            memory = memory.saturating_add(
                nodes
                    .saturating_mul(workloads - 1)
                    .saturating_mul(ANSWER_PER_NODE),
            );
            if self.explain {
                memory = memory.saturating_add(
                    cards
                        .saturating_mul(containers)
                        .saturating_mul(EXPLANATION_COST),
                );
            }
            if self.updated_nodes {
                memory = memory.saturating_add(
                    nodes
                        .saturating_mul(NODE_COST)
                        .saturating_add(cards.saturating_mul(CARD_COST))
                        .saturating_add(wire),
                );
            }
        }
        let evaluation = cards
            .saturating_add(nodes)
            .saturating_mul(containers)
            .saturating_mul(explain);
        // Preempt: each placed workload may cost one more evaluation of its node's cards.
        let evaluation = evaluation.saturating_add(
            self.placed
                .saturating_mul(ASSUMED_CARDS_PER_REF)
                .saturating_mul(containers),
        );
        let filters = cards.saturating_mul(self.filter_entries);
        let inventory = self
            .raw_cards
            .saturating_mul(self.overrides.saturating_add(1))
            .saturating_add(self.links);
        Admission {
            offloaded: false,
            memory,
            work: self
                .entries
                .saturating_add(evaluation)
                .saturating_add(filters)
                .saturating_add(inventory),
        }
    }
}
