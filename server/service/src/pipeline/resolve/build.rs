//! The one builder of [`Candidates`], and what the resolution of every candidate node shares:
//! one node checked (converted by `convert::node`, within `limits.max_cards_per_node`,
//! validated by [`Node::new`]; a node invalid itself becomes an [`InvalidNode`]), and the
//! repeated names of a node list.

use std::sync::Arc;

use gpusched_api::v1;
use gpusched_engine::{KubeNames, Node, Violation, ViolationKind};

use crate::candidates::{Candidates, InvalidNode};
use crate::config::Limits;
use crate::convert::node::{NodeAt, node_in};
use crate::error::{Missing, ServiceError};
use crate::pipeline::limits;

/// The nodes of a request in order (whole ones first, then references), each valid, invalid
/// itself or neither (request errors, a missing reference), with the request errors and the
/// missing parts found on the way, and the cards of every node as sent: built into
/// [`Candidates`] by [`Builder::finish`] (names are read from the nodes there: none is
/// copied).
#[derive(Debug, Default)]
pub struct Builder {
    valid: Vec<Arc<Node>>,
    invalid: Vec<Arc<InvalidNode>>,
    /// Where each node of the list went.
    at: Vec<Slot>,
    /// Nodes sent whole (the first of the list).
    whole: usize,
    /// Cards of every node, valid or not (`limits.max_cards` counts what was sent).
    pub cards: usize,
    /// Request errors, named after where each node was in the request.
    pub violations: Vec<Violation>,
    /// Node parts referenced by digest that the node cache does not hold.
    pub missing: Vec<Missing>,
}

/// Where a node of the request went: the valid nodes, the invalid ones, or neither.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Valid(usize),
    Invalid(usize),
    None,
}

impl Builder {
    /// A builder for a list of `nodes` nodes.
    pub fn with_capacity(nodes: usize) -> Self {
        Builder {
            valid: Vec::with_capacity(nodes),
            at: Vec::with_capacity(nodes),
            ..Builder::default()
        }
    }

    /// The next node sent whole, as [`checked`] found it (before any reference).
    pub fn whole(&mut self, checked: Option<Result<Arc<Node>, Arc<InvalidNode>>>) {
        debug_assert_eq!(self.whole, self.at.len(), "whole nodes come first");
        self.whole += 1;
        match checked {
            Some(Ok(node)) => self.valid(node),
            Some(Err(bad)) => self.invalid(bad),
            None => self.none(),
        }
    }

    /// The next node, valid.
    pub fn valid(&mut self, node: Arc<Node>) {
        self.valid.push(node);
        self.at.push(Slot::Valid(self.valid.len() - 1));
    }

    /// The next node, invalid itself.
    pub fn invalid(&mut self, node: Arc<InvalidNode>) {
        self.invalid.push(node);
        self.at.push(Slot::Invalid(self.invalid.len() - 1));
    }

    /// The next node, neither (its request errors or missing parts are recorded).
    pub fn none(&mut self) {
        self.at.push(Slot::None);
    }

    /// The candidates, or every request error (repeated names included), else every missing
    /// part, else the request's cards over `limits.max_cards`, else repeated names. Nodes sent
    /// whole only (their cards were counted before any conversion) report their errors in
    /// input order.
    pub fn finish(self, limits: &Limits) -> Result<Candidates, ServiceError> {
        let Builder {
            valid,
            invalid,
            at,
            whole,
            cards,
            mut violations,
            missing,
        } = self;
        let duplicates = || {
            let names: Vec<&str> = at
                .iter()
                .map(|a| match *a {
                    Slot::Valid(k) => valid.get(k).map_or("", |n| n.name()),
                    Slot::Invalid(k) => invalid.get(k).map_or("", |n| n.name()),
                    Slot::None => "",
                })
                .collect();
            duplicate_names(&names, |k| {
                if k < whole {
                    NodeAt::Whole(k).to_string()
                } else {
                    NodeAt::Ref(k - whole).to_string()
                }
            })
        };
        if at.len() > whole {
            if !violations.is_empty() {
                violations.extend(duplicates());
                return Err(ServiceError::InvalidArgument(violations));
            }
            if !missing.is_empty() {
                return Err(ServiceError::Missing(missing));
            }
            limits::request_cards(cards, limits)?;
            return Candidates::unique(&valid, &invalid, duplicates)
                .map_err(ServiceError::InvalidArgument);
        }
        if violations.is_empty() {
            match Candidates::unique(&valid, &invalid, duplicates) {
                Ok(c) => return Ok(c),
                Err(v) => violations = v,
            }
        } else {
            violations.extend(duplicates());
        }
        violations.sort_by_key(|v| node_position(&v.field));
        Err(ServiceError::InvalidArgument(violations))
    }
}

/// Converts and validates one node, sent whole or by reference: `Some(Ok)` a valid node,
/// `Some(Err)` a node invalid itself (over `limits.max_cards_per_node`, or refused by
/// [`Node::new`]; its problems named relative to the node), `None` when request errors (an
/// empty name, unset or unknown enum numbers) were added to `violations`, named after `at`.
pub fn checked(
    n: v1::Node,
    at: NodeAt,
    names: &KubeNames,
    limits: &Limits,
    violations: &mut Vec<Violation>,
) -> Option<Result<Arc<Node>, Arc<InvalidNode>>> {
    let before = violations.len();
    if n.name.is_empty() {
        violations.push(Violation::new(
            ViolationKind::MissingField,
            format!("{at}.name"),
            "node name must not be empty",
        ));
    }
    if let Some(problem) = limits::node_cards(n.cards.len(), limits) {
        // Not converted: its cards are not looked at (bounded work per node).
        return (violations.len() == before).then(|| {
            Err(Arc::new(InvalidNode::new(
                n.name,
                n.cards.len(),
                vec![problem],
            )))
        });
    }
    let (spec, cordons) = node_in(n, at, names, violations);
    if violations.len() != before {
        return None;
    }
    Some(Node::checked(spec).map(Arc::new).map_err(|(spec, e)| {
        let problems = e
            .violations
            .into_iter()
            .map(|v| Violation {
                field: cordons.field(&v.field),
                ..v
            })
            .collect();
        Arc::new(InvalidNode::new(spec.name, spec.cards.len(), problems))
    }))
}

/// Repeated node names (the later occurrences, in input order), each named `<at(i)>.name`.
/// The description names no field (a client that sent nodes by reference renames fields, not
/// descriptions), so that it is the same however the nodes were sent.
pub fn duplicate_names(names: &[&str], at: impl Fn(usize) -> String) -> Vec<Violation> {
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| names[a].cmp(names[b]).then(a.cmp(&b)));
    let mut repeated: Vec<usize> = order
        .windows(2)
        .filter(|w| !names[w[1]].is_empty() && names[w[0]] == names[w[1]])
        .map(|w| w[1])
        .collect();
    repeated.sort_unstable();
    repeated
        .into_iter()
        .map(|i| {
            Violation::new(
                ViolationKind::DuplicateId,
                format!("{}.name", at(i)),
                format!(
                    "duplicate node name {:?}: names are unique over nodes and node_refs",
                    names[i]
                ),
            )
        })
        .collect()
}

/// The node position of a `nodes[i]...` field, for reporting violations in input order.
fn node_position(field: &str) -> usize {
    field
        .strip_prefix("nodes[")
        .and_then(|r| r.split(']').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}
