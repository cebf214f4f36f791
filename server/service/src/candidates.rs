//! Invalid nodes: candidate nodes whose own content cannot be decided on (more cards than
//! `limits.max_cards_per_node`, or refused by [`gpusched_engine::Node::new`]: duplicate or
//! blank card ids, capacities out of range, pair scores or cordons naming unknown cards; by
//! reference, a usage part naming unknown cards). Node-level faults stay node-level: such a node
//! is answered as a failed node with `REASON_INVALID_NODE` and the decision is made on the
//! others. [`Candidates`] is what a request's nodes become: the snapshot of the valid ones and
//! the invalid ones beside it.
//!
//! The domain type every layer of a call shares (the pipeline builds it, the caches keep it,
//! `convert::answer` writes it out): engine types only, no protobuf.

use std::collections::BTreeSet;
use std::sync::Arc;

use gpusched_engine::{ChangeError, Node, NodeFailure, Reason, Snapshot, Violation, ViolationKind};

/// Problems listed in a message; the others are counted (`and N more`).
const LISTED_PROBLEMS: usize = 8;

/// Characters of a problem's description kept in a message (it may echo a card id).
const DESCRIPTION_CHARS: usize = 200;

/// A node that is invalid itself: its name, the number of cards it was sent with, and its
/// problems with fields relative to the node (`cards[1].id`, `cordoned_card_ids[0]`,
/// `usage.cards[2].card_id`), so that the answer is the same whether the node was sent whole or
/// by reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidNode {
    name: String,
    failure: NodeFailure,
    problems: Vec<Violation>,
    /// [`InvalidNode::message`], built once (a cached node is answered many times).
    message: String,
}

impl InvalidNode {
    /// An invalid node; `problems` must not be empty (each is a reason the node is invalid).
    pub fn new(name: String, cards: usize, problems: Vec<Violation>) -> Self {
        let message = message(&problems);
        InvalidNode {
            name,
            failure: NodeFailure::invalid_node(u32::try_from(cards).unwrap_or(u32::MAX)),
            problems,
            message,
        }
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its problems (fields relative to the node).
    pub fn problems(&self) -> &[Violation] {
        &self.problems
    }

    /// The engine's failure of it (for metrics: one `InvalidNode` rejection).
    pub fn failure(&self) -> &NodeFailure {
        &self.failure
    }

    /// `InvalidNode: <field> <REASON>: <description>; ...` (at most [`LISTED_PROBLEMS`], then
    /// `and N more`; descriptions cut at [`DESCRIPTION_CHARS`] characters).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Estimated heap bytes (for the node cache's byte bound).
    pub fn heap_bytes(&self) -> usize {
        self.name.capacity()
            + self.message.capacity()
            + self.problems.capacity() * size_of::<Violation>()
            + self
                .problems
                .iter()
                .map(|p| p.field.capacity() + p.description.capacity())
                .sum::<usize>()
    }
}

/// The message of these problems (see [`InvalidNode::message`]).
fn message(problems: &[Violation]) -> String {
    let mut items: Vec<String> = problems
        .iter()
        .take(LISTED_PROBLEMS)
        .map(|p| {
            let mut d: String = p.description.chars().take(DESCRIPTION_CHARS).collect();
            if d.len() < p.description.len() {
                d.push('…');
            }
            format!("{} {}: {d}", p.field, p.kind.as_str())
        })
        .collect();
    if problems.len() > LISTED_PROBLEMS {
        items.push(format!("and {} more", problems.len() - LISTED_PROBLEMS));
    }
    format!("{}: {}", Reason::InvalidNode.as_str(), items.join("; "))
}

/// The candidate nodes of a request: the valid ones as a snapshot, the invalid ones (sorted by
/// name) beside it. Names are unique over both.
#[derive(Clone, Debug, Default)]
pub struct Candidates {
    /// The valid nodes.
    pub snapshot: Snapshot,
    /// The invalid nodes, by name.
    pub invalid: Vec<Arc<InvalidNode>>,
}

impl Candidates {
    /// Valid nodes and invalid ones (sorted here).
    pub fn new(snapshot: Snapshot, mut invalid: Vec<Arc<InvalidNode>>) -> Self {
        invalid.sort_by(|a, b| a.name.cmp(&b.name));
        Candidates { snapshot, invalid }
    }

    /// Valid and invalid nodes as candidates when their names are unique over both, else the
    /// repeated names as `duplicates` reports them (called only then: the common case costs the
    /// snapshot's own check and one lookup per invalid node, no second sort of the names).
    pub fn unique(
        valid: &[Arc<Node>],
        invalid: &[Arc<InvalidNode>],
        duplicates: impl FnOnce() -> Vec<Violation>,
    ) -> Result<Candidates, Vec<Violation>> {
        let engine = match Snapshot::from_nodes(valid.to_vec()) {
            Ok(snapshot) => {
                let c = Candidates::new(snapshot, invalid.to_vec());
                let clash = c.invalid.windows(2).any(|w| w[0].name == w[1].name)
                    || c.invalid
                        .iter()
                        .any(|x| c.snapshot.id_of(&x.name).is_some());
                if !clash {
                    return Ok(c);
                }
                Vec::new()
            }
            Err(e) => e.violations,
        };
        let found = duplicates();
        Err(match (found.is_empty(), engine.is_empty()) {
            (false, _) => found,
            (true, false) => engine,
            (true, true) => vec![Violation::new(
                ViolationKind::DuplicateId,
                "nodes",
                "node names are repeated over nodes and node_refs",
            )],
        })
    }

    /// Number of candidate nodes, valid or not.
    pub fn len(&self) -> usize {
        self.snapshot.len() + self.invalid.len()
    }

    /// Whether there is no candidate.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps only the named nodes (valid or not); returns the names that are not candidates.
    pub fn retain_names(&mut self, names: &[String]) -> Vec<String> {
        let wanted: BTreeSet<&str> = names.iter().map(String::as_str).collect();
        let invalid: BTreeSet<&str> = self.invalid.iter().map(|x| x.name()).collect();
        let missing: Vec<String> = self
            .snapshot
            .retain_names(names)
            .into_iter()
            .filter(|n| !invalid.contains(n.as_str()))
            .collect();
        self.invalid.retain(|x| wanted.contains(x.name()));
        missing
    }

    /// The engine's failures of the invalid nodes (for metrics).
    pub fn invalid_failures(&self) -> impl Iterator<Item = &NodeFailure> {
        self.invalid.iter().map(|x| x.failure())
    }

    /// These candidates without the `removed` nodes, each node of `changes` (valid or invalid)
    /// replacing the node of the same name (valid or invalid) or added: the candidates of the
    /// changed node list, as [`Snapshot::with_changes`] for valid nodes (a node set sent as a
    /// change to a kept one). Every problem of `removed` is reported, in list order.
    pub fn with_changes(
        &self,
        changes: &Candidates,
        removed: &[&str],
    ) -> Result<Candidates, Vec<ChangeError>> {
        let invalid: BTreeSet<&str> = self.invalid.iter().map(|x| x.name()).collect();
        let changed_invalid: BTreeSet<&str> = changes.invalid.iter().map(|x| x.name()).collect();
        let in_base = |n: &str| self.snapshot.id_of(n).is_some() || invalid.contains(n);
        let in_changes =
            |n: &str| changes.snapshot.id_of(n).is_some() || changed_invalid.contains(n);
        let mut errors = Vec::new();
        let mut gone: Vec<(&str, usize)> = removed.iter().copied().zip(0..).collect();
        gone.sort_unstable();
        for w in gone.windows(2) {
            if w[0].0 == w[1].0 {
                let (name, at) = w[1];
                errors.push(ChangeError::RemovedTwice {
                    at,
                    name: name.to_owned(),
                });
            }
        }
        for &(name, at) in &gone {
            if !in_base(name) {
                errors.push(ChangeError::NotInBase {
                    at,
                    name: name.to_owned(),
                });
            } else if in_changes(name) {
                errors.push(ChangeError::RemovedAndSent {
                    at,
                    name: name.to_owned(),
                });
            }
        }
        if !errors.is_empty() {
            errors.sort_by_key(|e| match e {
                ChangeError::NotInBase { at, .. }
                | ChangeError::RemovedAndSent { at, .. }
                | ChangeError::RemovedTwice { at, .. } => *at,
            });
            return Err(errors);
        }
        let gone: BTreeSet<&str> = removed.iter().copied().collect();
        // Valid base nodes removed, or replaced by an invalid node of the same name.
        let snapshot_removed: Vec<&str> = gone
            .iter()
            .copied()
            .chain(changed_invalid.iter().copied())
            .filter(|n| self.snapshot.id_of(n).is_some())
            .collect();
        let snapshot = self
            .snapshot
            .with_changes(&changes.snapshot, &snapshot_removed)?;
        let kept = self.invalid.iter().filter(|x| {
            let n = x.name();
            !gone.contains(n) && !in_changes(n)
        });
        let invalid: Vec<Arc<InvalidNode>> = kept.chain(changes.invalid.iter()).cloned().collect();
        Ok(Candidates::new(snapshot, invalid))
    }

    /// Number of cards over every candidate, valid or not (as sent).
    pub fn card_count(&self) -> usize {
        self.snapshot.card_count()
            + self
                .invalid
                .iter()
                .map(|x| x.failure.cards_on_node as usize)
                .sum::<usize>()
    }

    /// The snapshot when every node is valid, else every problem (named
    /// `<node name>: <field>`).
    pub fn all_valid(self) -> Result<Snapshot, Vec<Violation>> {
        if self.invalid.is_empty() {
            return Ok(self.snapshot);
        }
        Err(self
            .invalid
            .iter()
            .flat_map(|x| {
                x.problems.iter().map(|p| Violation {
                    field: format!("{}: {}", x.name, p.field),
                    ..p.clone()
                })
            })
            .collect())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use gpusched_engine::ViolationKind;

    use super::*;

    pub(crate) fn bad(name: &str, problems: usize) -> Arc<InvalidNode> {
        Arc::new(InvalidNode::new(
            name.to_owned(),
            2,
            (0..problems)
                .map(|k| {
                    Violation::new(
                        ViolationKind::DuplicateId,
                        format!("cards[{k}].id"),
                        "x".repeat(300),
                    )
                })
                .collect(),
        ))
    }

    #[test]
    fn messages_are_bounded() {
        let b = bad("n", 20);
        let m = b.message();
        assert!(
            m.starts_with("InvalidNode: cards[0].id DUPLICATE_ID: xxx"),
            "{m}"
        );
        assert!(m.ends_with("; and 12 more"), "{m}");
        assert_eq!(m.matches('…').count(), 8);
        assert!(m.len() < 8 * 240 + 40, "{}", m.len());
    }

    #[test]
    fn changes_replace_valid_and_invalid_nodes_by_name() {
        use gpusched_engine::{Card, NodeSpec};
        let snap = |names: &[&str]| {
            Snapshot::new(
                names
                    .iter()
                    .map(|n| NodeSpec::new(*n, vec![Card::new(format!("{n}-0"), 0, "T4", 8)]))
                    .collect(),
            )
            .unwrap()
        };
        let names = |c: &Candidates| {
            let valid: Vec<&str> = c.snapshot.nodes().map(|n| n.name()).collect();
            let bad: Vec<&str> = c.invalid.iter().map(|x| x.name()).collect();
            (valid.join(","), bad.join(","))
        };
        let base = Candidates::new(snap(&["a", "b", "c"]), vec![bad("x", 1), bad("y", 1)]);
        // b becomes invalid, x becomes valid, y removed, c removed, d added (invalid), e added.
        let changes = Candidates::new(snap(&["e", "x"]), vec![bad("b", 1), bad("d", 1)]);
        let got = base.with_changes(&changes, &["y", "c"]).unwrap();
        assert_eq!(names(&got), ("a,e,x".into(), "b,d".into()));
        // Removed names are checked against valid and invalid nodes alike.
        let errors = base
            .with_changes(&changes, &["x", "zz", "a", "a"])
            .unwrap_err();
        let at: Vec<usize> = errors
            .iter()
            .map(|e| match e {
                ChangeError::NotInBase { at, .. }
                | ChangeError::RemovedAndSent { at, .. }
                | ChangeError::RemovedTwice { at, .. } => *at,
            })
            .collect();
        assert_eq!(at, [0, 1, 3], "{errors:?}");
        assert!(matches!(errors[0], ChangeError::RemovedAndSent { .. }));
        assert!(matches!(errors[1], ChangeError::NotInBase { .. }));
        assert!(matches!(errors[2], ChangeError::RemovedTwice { .. }));
    }

    #[test]
    fn restricting_keeps_named_invalid_nodes() {
        let mut c = Candidates::new(Snapshot::default(), vec![bad("x", 1), bad("y", 1)]);
        let missing = c.retain_names(&["y".to_owned(), "z".to_owned()]);
        assert_eq!(missing, ["z"]);
        assert_eq!(c.invalid.len(), 1);
        assert_eq!(c.invalid[0].name(), "y");
    }
}
