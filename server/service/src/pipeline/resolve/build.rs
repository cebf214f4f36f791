//! What the resolution of every candidate node shares: one node checked (converted by
//! `convert::node`, within `limits.max_cards_per_node`, validated by [`Node::new`]; a node
//! invalid itself becomes an [`InvalidNode`]), and the repeated names of a node list.

use std::sync::Arc;

use gpusched_api::v1;
use gpusched_engine::{KubeNames, Node, Violation, ViolationKind};

use crate::candidates::InvalidNode;
use crate::config::Limits;
use crate::convert::node::{NodeAt, node_in};
use crate::pipeline::limits;

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
pub fn node_position(field: &str) -> usize {
    field
        .strip_prefix("nodes[")
        .and_then(|r| r.split(']').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}
