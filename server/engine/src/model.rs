//! Nodes, cards and their usage: the snapshot a decision is made on.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::Index;
use std::sync::Arc;

use crate::error::{InvalidInput, Violation, ViolationKind};
use crate::host::HostResources;
use crate::mig_layout::{MigLayout, check_layout};

/// A handle to one node of a [`Snapshot`]: its position in the snapshot's name order.
///
/// Handles come from the snapshot ([`Snapshot::ids`], [`Snapshot::id_of`], [`Snapshot::iter`])
/// or from a decision made on it ([`crate::Placement::node`], [`crate::FeasibleNode::node`],
/// ...). A handle stays valid for the snapshot it came from and for snapshots derived from it
/// by [`crate::apply`] and [`crate::release`] (same nodes, other usage); it means nothing in
/// another snapshot, nor after [`Snapshot::retain_names`]. Handles order like node names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(u32);

impl NodeId {
    /// Position of the node in the snapshot's name order (for indexing parallel arrays).
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The handle at `index`; `None` beyond `u32::MAX`.
    pub(crate) fn at(index: usize) -> Option<NodeId> {
        u32::try_from(index).ok().map(NodeId)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node#{}", self.0)
    }
}

/// How a card is shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CardMode {
    /// Shared through HAMi-core.
    #[default]
    HamiCore,
    /// Multi-Instance GPU.
    Mig,
    /// Multi-Process Service.
    Mps,
}

impl CardMode {
    /// The mode's name as HAMi writes it (`hami-core`, `mig`, `mps`).
    pub fn as_str(self) -> &'static str {
        match self {
            CardMode::HamiCore => "hami-core",
            CardMode::Mig => "mig",
            CardMode::Mps => "mps",
        }
    }
}

/// A card mode name that is not `hami-core`, `mig` or `mps`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown card mode {value:?}; accepted: hami-core, mig, mps")]
pub struct ParseCardModeError {
    /// The value given.
    pub value: String,
}

impl std::str::FromStr for CardMode {
    type Err = ParseCardModeError;

    /// Parses HAMi's mode name; an empty string is `hami-core`.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "" | "hami-core" => Ok(CardMode::HamiCore),
            "mig" => Ok(CardMode::Mig),
            "mps" => Ok(CardMode::Mps),
            other => Err(ParseCardModeError {
                value: other.to_owned(),
            }),
        }
    }
}

impl fmt::Display for CardMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Usage of one card by workloads already placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct CardUsage {
    /// Slots in use.
    pub used: u32,
    /// Memory booked, MiB.
    pub used_mem_mib: u64,
    /// Cores booked, percent.
    pub used_cores: u32,
}

impl CardUsage {
    /// Per-dimension maximum (HAMi's init-container peak rule).
    pub fn max(self, other: CardUsage) -> CardUsage {
        CardUsage {
            used: self.used.max(other.used),
            used_mem_mib: self.used_mem_mib.max(other.used_mem_mib),
            used_cores: self.used_cores.max(other.used_cores),
        }
    }
}

/// Largest accepted [`Card::count`] (virtual slots). Far above any real split count; a larger
/// value is taken for garbage (`docs/placement-semantics.md` section 1).
pub const MAX_CARD_SLOTS: u32 = 10_000;

/// Largest accepted [`Card::total_mem_mib`]: 16 TiB, over fifty times the largest GPU memory
/// of today even after memory scaling.
pub const MAX_CARD_MEM_MIB: u64 = 1 << 24;

/// Largest accepted [`Card::total_cores`] (percent of one card: a core scaling of 100).
pub const MAX_CARD_CORES: u32 = 10_000;

/// One schedulable GPU card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Card {
    /// Card id (GPU UUID), unique on its node.
    pub id: String,
    /// Device index on the node.
    pub index: u32,
    /// Model string as registered.
    pub card_type: String,
    /// Virtual slots (HAMi `count`).
    pub count: u32,
    /// Memory after scaling, MiB.
    pub total_mem_mib: u64,
    /// Cores after scaling, percent.
    pub total_cores: u32,
    /// NUMA node.
    pub numa: u32,
    /// Health.
    pub healthy: bool,
    /// Sharing mode.
    pub mode: CardMode,
    /// Current usage. For a card with a MIG layout, the usage of its instances in use (zero
    /// is accepted and replaced by it; `docs/placement-semantics.md` section 11.5).
    pub usage: CardUsage,
    /// The MIG layout of a card in mode [`CardMode::Mig`]: profiles, placements and instances
    /// (section 11.1). `None` for other cards; a MIG card without one takes no work.
    pub mig: Option<Box<MigLayout>>,
}

impl Card {
    /// A healthy idle card with HAMi's defaults: 10 slots, 100 cores, NUMA 0.
    pub fn new(
        id: impl Into<String>,
        index: u32,
        card_type: impl Into<String>,
        total_mem_mib: u64,
    ) -> Self {
        Card {
            id: id.into(),
            index,
            card_type: card_type.into(),
            count: 10,
            total_mem_mib,
            total_cores: 100,
            numa: 0,
            healthy: true,
            mode: CardMode::HamiCore,
            usage: CardUsage::default(),
            mig: None,
        }
    }

    /// The usage of the instances in use of a card with a MIG layout (section 11.5).
    pub fn mig_usage(&self) -> Option<CardUsage> {
        self.mig.as_deref().map(|l| {
            let (used, used_mem_mib, used_cores) =
                l.in_use_share(self.total_mem_mib, self.total_cores);
            CardUsage {
                used,
                used_mem_mib,
                used_cores,
            }
        })
    }
}

/// A link-quality score from one card to another (topology-aware placement).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairScore {
    /// Card the score is read from.
    pub card_id: String,
    /// The other card.
    pub peer_card_id: String,
    /// Link quality, higher is better.
    pub score: i64,
}

/// A candidate node as given by the caller.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NodeSpec {
    /// Node name, unique in a request.
    pub name: String,
    /// Its cards.
    pub cards: Vec<Card>,
    /// Card ids that take no new work; each must be a card of the node (an unknown id is a
    /// violation: a typo would otherwise leave the card meant open to new work).
    pub cordoned: Vec<String>,
    /// Pair scores between its cards.
    pub pair_scores: Vec<PairScore>,
    /// The host CPU and memory it has free, when the caller knows them (only the
    /// fragmentation measure reads them, `docs/placement-semantics.md` section 12.2).
    pub host: Option<HostResources>,
}

impl NodeSpec {
    /// A node with these cards and nothing else.
    pub fn new(name: impl Into<String>, cards: Vec<Card>) -> Self {
        NodeSpec {
            name: name.into(),
            cards,
            ..NodeSpec::default()
        }
    }
}

/// A validated node: cards in input order, cordon flags and pair matrix resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub(crate) name: String,
    pub(crate) cards: Vec<Card>,
    pub(crate) cordoned: Vec<bool>,
    /// Row-major `cards.len()`² matrix of pair scores; empty when none were given.
    pub(crate) pairs: Vec<i64>,
    /// Pair scores as given (kept for round-tripping updated nodes).
    pub(crate) pair_scores: Vec<PairScore>,
    pub(crate) cordoned_ids: Vec<String>,
    /// Capacity and usage sums over all cards (kept in step with `cards`).
    pub(crate) sums: NodeSums,
    /// Free host CPU and memory (section 12.2).
    pub(crate) host: Option<HostResources>,
}

/// Sums over a node's cards, for the node score. Memory sums saturate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct NodeSums {
    pub(crate) count: u64,
    pub(crate) total_cores: u64,
    pub(crate) total_mem: u64,
    pub(crate) used: u64,
    pub(crate) used_cores: u64,
    pub(crate) used_mem: u64,
    /// Every card has the same total memory.
    pub(crate) uniform_mem: bool,
}

impl NodeSums {
    pub(crate) fn of<'a>(cards: &[Card], usage: impl Iterator<Item = &'a CardUsage>) -> NodeSums {
        let mut s = NodeSums {
            uniform_mem: cards
                .windows(2)
                .all(|w| w[0].total_mem_mib == w[1].total_mem_mib),
            ..NodeSums::default()
        };
        for (card, u) in cards.iter().zip(usage) {
            s.count += u64::from(card.count);
            s.total_cores += u64::from(card.total_cores);
            s.total_mem = s.total_mem.saturating_add(card.total_mem_mib);
            s.used += u64::from(u.used);
            s.used_cores += u64::from(u.used_cores);
            s.used_mem = s.used_mem.saturating_add(u.used_mem_mib);
        }
        s
    }
}

impl Node {
    /// Validates one node on its own (name non-empty; card ids non-blank and unique; capacities
    /// within [`MAX_CARD_SLOTS`], [`MAX_CARD_MEM_MIB`], [`MAX_CARD_CORES`]; pair scores and
    /// cordons naming cards of the node), fields relative to the node (`cards[j].id`,
    /// `cordoned[k]`). Wrap it in an
    /// [`Arc`] and keep it to build snapshots without copying ([`Snapshot::from_nodes`]).
    pub fn new(spec: NodeSpec) -> Result<Node, InvalidInput> {
        Node::checked(spec).map_err(|(_, e)| e)
    }

    /// [`Node::new`], giving the spec back with the problems when it is invalid (for a caller
    /// that reports an invalid node by its name without copying every valid node's name).
    #[allow(clippy::result_large_err)]
    pub fn checked(spec: NodeSpec) -> Result<Node, (NodeSpec, InvalidInput)> {
        let mut violations = Vec::new();
        if spec.name.is_empty() {
            violations.push(Violation::new(
                ViolationKind::MissingField,
                "name",
                "node name must not be empty",
            ));
        }
        check_cards(0, &spec, &mut violations);
        if !violations.is_empty() {
            // `check_cards` names fields in a list (`nodes[0].cards[j].id`): make them relative.
            for v in &mut violations {
                if let Some(rest) = v.field.strip_prefix("nodes[0].") {
                    v.field = rest.to_owned();
                }
            }
            return Err((spec, InvalidInput { violations }));
        }
        Ok(Node::from_spec(spec))
    }

    /// Node name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Cards with their (possibly updated) usage.
    pub fn cards(&self) -> &[Card] {
        &self.cards
    }

    /// Whether the card at `position` is cordoned.
    pub fn is_cordoned(&self, position: usize) -> bool {
        self.cordoned.get(position).copied().unwrap_or(false)
    }

    /// Back to the caller's form (with the current usage).
    pub fn to_spec(&self) -> NodeSpec {
        NodeSpec {
            name: self.name.clone(),
            cards: self.cards.clone(),
            cordoned: self.cordoned_ids.clone(),
            pair_scores: self.pair_scores.clone(),
            host: self.host,
        }
    }

    /// The host CPU and memory the node has free, when given (section 12.2).
    pub fn host(&self) -> Option<HostResources> {
        self.host
    }

    /// A copy of this node with the usage of the cards at the given positions replaced (the
    /// sums recomputed), without validating again: the node was validated when built. `None`
    /// when a position is not a card of the node, or is a card with a MIG layout (its usage is
    /// that of its instances, section 11.5).
    pub fn with_card_usage(
        &self,
        updates: impl IntoIterator<Item = (usize, CardUsage)>,
    ) -> Option<Node> {
        let mut node = self.clone();
        for (at, u) in updates {
            let card = node.cards.get_mut(at).filter(|c| c.mig.is_none())?;
            card.usage = u;
        }
        node.sums = NodeSums::of(&node.cards, node.cards.iter().map(|c| &c.usage));
        Some(node)
    }

    /// Estimated heap bytes of the node (for callers that bound a cache of nodes), excluding
    /// the `Node` itself.
    pub fn heap_bytes(&self) -> usize {
        self.name.capacity()
            + self.cards.capacity() * size_of::<Card>()
            + self
                .cards
                .iter()
                .map(|c| {
                    c.id.capacity()
                        + c.card_type.capacity()
                        + c.mig
                            .as_deref()
                            .map_or(0, |l| size_of::<MigLayout>() + l.heap_bytes())
                })
                .sum::<usize>()
            + self.cordoned.capacity()
            + self.pairs.capacity() * size_of::<i64>()
            + self.pair_scores.capacity() * size_of::<PairScore>()
            + self
                .pair_scores
                .iter()
                .map(|p| p.card_id.capacity() + p.peer_card_id.capacity())
                .sum::<usize>()
            + self.cordoned_ids.capacity() * size_of::<String>()
            + self
                .cordoned_ids
                .iter()
                .map(String::capacity)
                .sum::<usize>()
    }

    /// Sets the usage of the cards (in card order) and the sums.
    pub(crate) fn set_usage(&mut self, usage: &[CardUsage]) {
        for (card, u) in self.cards.iter_mut().zip(usage) {
            card.usage = *u;
        }
        self.sums = NodeSums::of(&self.cards, self.cards.iter().map(|c| &c.usage));
    }

    pub(crate) fn pair(&self, from: usize, to: usize) -> i64 {
        if self.pairs.is_empty() {
            return 0;
        }
        self.pairs
            .get(from * self.cards.len() + to)
            .copied()
            .unwrap_or(0)
    }
}

/// The candidate nodes of one request, validated and sorted by name.
///
/// Nodes are shared ([`Arc`]): cloning a snapshot, or building one from nodes a caller keeps
/// (e.g. a cache of converted nodes keyed by content digest, see [`Snapshot::from_nodes`]),
/// copies no node. [`crate::apply`] and [`crate::release`] copy only the node they change, and
/// only when it is shared (copy-on-write).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Snapshot {
    pub(crate) nodes: Vec<Arc<Node>>,
    /// Cards over all nodes (kept with `nodes`: a node's cards never change in place).
    pub(crate) cards: usize,
}

impl Snapshot {
    /// Validates the nodes: names non-empty and unique, and each node as [`Node::new`] does.
    /// Every problem is reported, with its field path
    /// (`nodes[i].cards[j].id`), relative to the caller's list.
    pub fn new(specs: Vec<NodeSpec>) -> Result<Snapshot, InvalidInput> {
        let mut violations = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            if spec.name.is_empty() {
                violations.push(Violation::new(
                    ViolationKind::MissingField,
                    format!("nodes[{i}].name"),
                    "node name must not be empty",
                ));
            }
            check_cards(i, spec, &mut violations);
        }
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        check_duplicate_names(&names, &mut violations);
        if !violations.is_empty() {
            violations.sort_by_key(|v| violation_position(&v.field));
            return Err(InvalidInput { violations });
        }
        let mut nodes: Vec<Arc<Node>> = specs
            .into_iter()
            .map(|spec| Arc::new(Node::from_spec(spec)))
            .collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Snapshot::sorted(nodes))
    }

    /// A snapshot of nodes validated one by one ([`Node::new`]), shared as they are: no node
    /// is copied. Checks only that the names are unique (`nodes[i].name`, relative to the
    /// given list).
    pub fn from_nodes(nodes: Vec<Arc<Node>>) -> Result<Snapshot, InvalidInput> {
        let mut violations = Vec::new();
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        check_duplicate_names(&names, &mut violations);
        if !violations.is_empty() {
            violations.sort_by_key(|v| violation_position(&v.field));
            return Err(InvalidInput { violations });
        }
        let mut nodes = nodes;
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Snapshot::sorted(nodes))
    }

    /// The snapshot of `nodes`, already sorted by name with unique names.
    pub(crate) fn sorted(nodes: Vec<Arc<Node>>) -> Snapshot {
        let cards = nodes.iter().map(|n| n.cards.len()).sum();
        Snapshot { nodes, cards }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there is no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node behind a handle; `None` for a handle of another, larger snapshot.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.index()).map(Arc::as_ref)
    }

    /// The handle of the node with this name.
    pub fn id_of(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .binary_search_by(|node| node.name.as_str().cmp(name))
            .ok()
            .and_then(NodeId::at)
    }

    /// The node with this name.
    pub fn node_named(&self, name: &str) -> Option<&Node> {
        self.id_of(name).and_then(|id| self.node(id))
    }

    /// Every handle, in name order.
    pub fn ids(&self) -> impl ExactSizeIterator<Item = NodeId> + DoubleEndedIterator + use<> {
        (0..u32::try_from(self.nodes.len()).unwrap_or(u32::MAX)).map(NodeId)
    }

    /// The nodes, sorted by name.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = &Node> + DoubleEndedIterator + Clone {
        self.nodes.iter().map(Arc::as_ref)
    }

    /// The nodes with their handles, sorted by name.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (NodeId, &Node)> + DoubleEndedIterator {
        self.ids().zip(self.nodes.iter().map(Arc::as_ref))
    }

    /// The shared nodes, sorted by name (to keep them, e.g. in a cache, without copying).
    pub fn shared_nodes(&self) -> &[Arc<Node>] {
        &self.nodes
    }

    /// Number of cards over all nodes.
    pub fn card_count(&self) -> usize {
        self.cards
    }

    /// Keeps only the named nodes. Returns the names that are not in the snapshot. Handles of
    /// the snapshot before are not valid after.
    /// Linear in nodes and names (a set of the names; the nodes are searched by name).
    pub fn retain_names(&mut self, names: &[String]) -> Vec<String> {
        let missing: Vec<String> = names
            .iter()
            .filter(|n| {
                self.nodes
                    .binary_search_by(|node| node.name.as_str().cmp(n))
                    .is_err()
            })
            .cloned()
            .collect();
        let wanted: HashSet<&str> = names.iter().map(String::as_str).collect();
        self.nodes
            .retain(|node| wanted.contains(node.name.as_str()));
        self.cards = self.nodes.iter().map(|n| n.cards.len()).sum();
        missing
    }
}

impl Index<NodeId> for Snapshot {
    type Output = Node;

    /// The node behind a handle of this snapshot.
    ///
    /// # Panics
    /// On a handle of another, larger snapshot (like a slice index out of bounds); use
    /// [`Snapshot::node`] when the handle may come from elsewhere.
    fn index(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }
}

/// Duplicate names: adjacent after sorting by (name, input position); the later input is the
/// duplicate of the first.
fn check_duplicate_names(names: &[&str], violations: &mut Vec<Violation>) {
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| names[a].cmp(names[b]).then(a.cmp(&b)));
    let mut first = 0usize;
    for (k, &i) in order.iter().enumerate() {
        if k > 0 && !names[i].is_empty() && names[i] == names[order[k - 1]] {
            violations.push(Violation::new(
                ViolationKind::DuplicateId,
                format!("nodes[{i}].name"),
                format!(
                    "duplicate node name {:?} (also nodes[{}])",
                    names[i], order[first]
                ),
            ));
        } else {
            first = k;
        }
    }
}

/// The node position of a `nodes[i]...` field, for reporting violations in input order.
fn violation_position(field: &str) -> usize {
    field
        .strip_prefix("nodes[")
        .and_then(|r| r.split(']').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}

/// Card ids non-blank and unique on the node; capacities within [`MAX_CARD_SLOTS`],
/// [`MAX_CARD_MEM_MIB`], [`MAX_CARD_CORES`]; pair scores and cordons naming cards of the node.
/// Linear in cards, cordons and pair scores (a map of the card ids).
fn check_cards(i: usize, spec: &NodeSpec, violations: &mut Vec<Violation>) {
    let positions = card_positions(&spec.cards);
    for (j, card) in spec.cards.iter().enumerate() {
        if card.id.chars().all(char::is_whitespace) {
            violations.push(Violation::new(
                ViolationKind::MissingField,
                format!("nodes[{i}].cards[{j}].id"),
                if card.id.is_empty() {
                    "card id must not be empty"
                } else {
                    "card id must not be blank"
                },
            ));
        } else if let Some(&first) = positions.get(card.id.as_str())
            && first < j
        {
            violations.push(Violation::new(
                ViolationKind::DuplicateId,
                format!("nodes[{i}].cards[{j}].id"),
                format!(
                    "duplicate card id {:?} on node {:?} (also cards[{first}])",
                    card.id, spec.name
                ),
            ));
        }
    }
    for (j, card) in spec.cards.iter().enumerate() {
        // One test per card on the common path; the fields only when one is out of range.
        if card.count <= MAX_CARD_SLOTS
            && card.total_mem_mib <= MAX_CARD_MEM_MIB
            && card.total_cores <= MAX_CARD_CORES
        {
            continue;
        }
        for (field, value, max) in [
            ("slots", u64::from(card.count), u64::from(MAX_CARD_SLOTS)),
            ("total_mem_mib", card.total_mem_mib, MAX_CARD_MEM_MIB),
            (
                "total_cores",
                u64::from(card.total_cores),
                u64::from(MAX_CARD_CORES),
            ),
        ] {
            if value > max {
                violations.push(Violation::new(
                    ViolationKind::OutOfRange,
                    format!("nodes[{i}].cards[{j}].{field}"),
                    format!("{value} is above the largest accepted value {max}"),
                ));
            }
        }
    }
    for (j, card) in spec.cards.iter().enumerate() {
        if card.mig.is_some() {
            check_mig_card(card, &format!("nodes[{i}].cards[{j}]"), violations);
        }
    }
    for (k, id) in spec.cordoned.iter().enumerate() {
        if !positions.contains_key(id.as_str()) {
            violations.push(Violation::new(
                ViolationKind::UnknownReference,
                format!("nodes[{i}].cordoned[{k}]"),
                format!("cordoned card {id:?} is not a card of node {:?}", spec.name),
            ));
        }
    }
    for (k, pair) in spec.pair_scores.iter().enumerate() {
        for (field, id) in [
            ("card_id", &pair.card_id),
            ("peer_card_id", &pair.peer_card_id),
        ] {
            if !positions.contains_key(id.as_str()) {
                violations.push(Violation::new(
                    ViolationKind::UnknownReference,
                    format!("nodes[{i}].pair_scores[{k}].{field}"),
                    format!("card {id:?} is not a card of node {:?}", spec.name),
                ));
            }
        }
    }
}

/// A card with a MIG layout (section 11.1): the layout, the card's mode and its usage.
fn check_mig_card(card: &Card, field: &str, violations: &mut Vec<Violation>) {
    let Some(layout) = card.mig.as_deref() else {
        return;
    };
    if card.mode != CardMode::Mig {
        violations.push(Violation::new(
            ViolationKind::OutOfRange,
            format!("{field}.mode"),
            format!(
                "a card with a MIG layout must be in mode mig, not {}",
                card.mode
            ),
        ));
    }
    let before = violations.len();
    check_layout(
        layout,
        card.total_mem_mib,
        &format!("{field}.mig"),
        violations,
    );
    if violations.len() > before {
        return;
    }
    if let Some(derived) = card.mig_usage()
        && card.usage != CardUsage::default()
        && card.usage != derived
    {
        violations.push(Violation::new(
            ViolationKind::OutOfRange,
            format!("{field}.usage"),
            format!(
                "a MIG card's usage is that of its instances in use ({} slots, {} MiB, {} cores) \
                 or zero, not {} slots, {} MiB, {} cores",
                derived.used,
                derived.used_mem_mib,
                derived.used_cores,
                card.usage.used,
                card.usage.used_mem_mib,
                card.usage.used_cores
            ),
        ));
    }
}

/// The position of the first card with each id.
fn card_positions(cards: &[Card]) -> HashMap<&str, usize> {
    let mut positions = HashMap::with_capacity(cards.len());
    for (j, c) in cards.iter().enumerate() {
        positions.entry(c.id.as_str()).or_insert(j);
    }
    positions
}

impl Node {
    /// Linear in cards, cordoned ids and pair scores (sets and maps, no list scans).
    fn from_spec(mut spec: NodeSpec) -> Node {
        for card in &mut spec.cards {
            if let Some(layout) = card.mig.as_deref_mut() {
                layout.sort_instances();
            }
            if let Some(u) = card.mig_usage() {
                card.usage = u;
            }
        }
        let cordoned_set: HashSet<&str> = spec.cordoned.iter().map(String::as_str).collect();
        let cordoned = spec
            .cards
            .iter()
            .map(|c| cordoned_set.contains(c.id.as_str()))
            .collect();
        let n = spec.cards.len();
        let mut pairs = Vec::new();
        if !spec.pair_scores.is_empty() {
            let positions = card_positions(&spec.cards);
            pairs = vec![0; n * n];
            for p in &spec.pair_scores {
                let from = positions.get(p.card_id.as_str()).copied();
                let to = positions.get(p.peer_card_id.as_str()).copied();
                if let (Some(from), Some(to)) = (from, to)
                    && let Some(slot) = pairs.get_mut(from * n + to)
                {
                    *slot = p.score;
                }
            }
        }
        let sums = NodeSums::of(&spec.cards, spec.cards.iter().map(|c| &c.usage));
        Node {
            sums,
            name: spec.name,
            cards: spec.cards,
            cordoned,
            pairs,
            pair_scores: spec.pair_scores,
            cordoned_ids: spec.cordoned,
            host: spec.host,
        }
    }
}
