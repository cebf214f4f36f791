//! Candidates as a change to a node set (`NodeSetRef`): keeping a request's references as a set
//! under the digest of those references, and answering a request that names such a set as its
//! base plus changes (nodes added or replaced by name, nodes removed by name). The changed set
//! is the snapshot of the node list the client would otherwise send in full, so the decision is
//! the same bit for bit (`Snapshot::with_changes`).
//!
//! A base the replica does not hold is FAILED_PRECONDITION naming it (never a partial
//! decision); the client sends its candidates in full, kept again as a set.

use gpusched_api::v1;
use gpusched_engine::{ChangeError, Violation, ViolationKind};

use crate::cache::digest::Digest;
use crate::cache::spare::Changed;
use crate::convert::refs::digest_in;
use crate::error::ServiceError;
use crate::pipeline::resolve::refs;
use crate::state::State;

/// A checked `NodeSetRef`.
enum SetOp {
    /// Keep the request's references as a set.
    Keep,
    /// Change this base.
    Change { base: Digest, removed: Vec<String> },
}

fn invalid(field: &str, kind: ViolationKind, what: impl Into<String>) -> ServiceError {
    ServiceError::InvalidArgument(vec![Violation::new(kind, field, what)])
}

/// Checks a `NodeSetRef` against the rest of the request; `None` when it asks nothing.
fn op_in(set: v1::NodeSetRef, whole_nodes: usize) -> Result<Option<SetOp>, ServiceError> {
    let v1::NodeSetRef {
        base,
        removed_node_names,
        keep,
    } = set;
    match (base, keep) {
        (Some(_), true) => Err(invalid(
            "node_set.keep",
            ViolationKind::InvalidNodeReference,
            "keep and base are exclusive: only a request sent in full is kept as a set",
        )),
        (None, true) if whole_nodes > 0 => Err(invalid(
            "node_set.keep",
            ViolationKind::InvalidNodeReference,
            format!(
                "a kept set is made of node_refs only; this request also sends {whole_nodes} \
                 whole nodes"
            ),
        )),
        (None, _) if !removed_node_names.is_empty() => Err(invalid(
            "node_set.removed_node_names",
            ViolationKind::InvalidNodeReference,
            "removed_node_names needs a base",
        )),
        (None, true) => Ok(Some(SetOp::Keep)),
        (None, false) => Ok(None),
        (Some(d), false) => {
            let mut violations = Vec::new();
            match digest_in(&d, &|| "node_set.base".to_owned(), &mut violations) {
                Some(base) => Ok(Some(SetOp::Change {
                    base,
                    removed: removed_node_names,
                })),
                None => Err(ServiceError::InvalidArgument(violations)),
            }
        }
    }
}

/// The candidate nodes of a request: whole nodes and references, as a change to a kept set
/// when `node_set` names a base, kept as a set when it asks to (invalid nodes included: a set
/// is the candidates of the node list, as sent).
pub fn candidates(
    state: &State,
    nodes: Vec<v1::Node>,
    refs: Vec<v1::NodeRef>,
    node_set: Option<v1::NodeSetRef>,
) -> Result<Changed, ServiceError> {
    let op = match node_set {
        Some(s) => op_in(s, nodes.len())?,
        None => None,
    };
    match op {
        None => refs::candidates_in(state, nodes, refs).map(Changed::from),
        Some(SetOp::Keep) => {
            let digest = Digest::of_set(&refs);
            let s = refs::candidates_in(state, nodes, refs)?;
            if let Some(d) = digest {
                state.node_sets.insert(d, s.clone());
            }
            Ok(s.into())
        }
        Some(SetOp::Change { base, removed }) => {
            let held = state.node_sets.get(&base);
            let changes = refs::candidates_in(state, nodes, refs);
            let (held, changes) = match (held, changes) {
                // Bad input first, then everything missing at once.
                (_, Err(e @ (ServiceError::InvalidArgument(_) | ServiceError::TooLarge(_)))) => {
                    return Err(e);
                }
                (None, Ok(_)) => return Err(ServiceError::MissingSet(base, Vec::new())),
                (None, Err(ServiceError::Missing(m))) => {
                    return Err(ServiceError::MissingSet(base, m));
                }
                (_, Err(e)) => return Err(e),
                (Some(h), Ok(c)) => (h, c),
            };
            // Replacements only (the common case): the kept set's spare list, changed in place.
            let leased = if removed.is_empty() {
                held.lease(&changes)
            } else {
                None
            };
            let s = match leased {
                Some(l) => Changed::Leased(l),
                None => {
                    let removed: Vec<&str> = removed.iter().map(String::as_str).collect();
                    held.set
                        .with_changes(&changes, &removed)
                        .map_err(|errors| ServiceError::InvalidArgument(errors_out(errors)))?
                        .into()
                }
            };
            crate::pipeline::limits::changed_set(&s, &state.settings.limits)?;
            Ok(s)
        }
    }
}

fn errors_out(errors: Vec<ChangeError>) -> Vec<Violation> {
    errors
        .into_iter()
        .map(|e| {
            let (kind, at) = match &e {
                ChangeError::NotInBase { at, .. } => (ViolationKind::UnknownReference, *at),
                ChangeError::RemovedAndSent { at, .. } | ChangeError::RemovedTwice { at, .. } => {
                    (ViolationKind::DuplicateId, *at)
                }
            };
            Violation::new(
                kind,
                format!("node_set.removed_node_names[{at}]"),
                e.to_string(),
            )
        })
        .collect()
}
