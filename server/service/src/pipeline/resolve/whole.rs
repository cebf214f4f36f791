//! Candidate nodes sent whole (`nodes`): each converted and checked, the valid ones into the
//! snapshot, the invalid ones beside it.

use std::sync::Arc;

use gpusched_api::v1;
use gpusched_engine::{KubeNames, Node};

use crate::candidates::{Candidates, InvalidNode};
use crate::config::Limits;
use crate::convert::node::NodeAt;
use crate::error::ServiceError;
use crate::pipeline::resolve::build::{checked, duplicate_names, node_position};

/// Converts and validates the candidate nodes sent whole: the valid ones into the snapshot,
/// the invalid ones beside it ([`checked`]). Request errors: empty or repeated node names,
/// unset or unknown enum numbers.
pub fn candidates_in(
    nodes: Vec<v1::Node>,
    names: &KubeNames,
    limits: &Limits,
) -> Result<Candidates, ServiceError> {
    let mut violations = Vec::new();
    let mut valid = Vec::with_capacity(nodes.len());
    let mut invalid = Vec::new();
    // The name of each node by position ("" for one with request errors), for duplicates.
    let mut at: Vec<(bool, usize)> = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.into_iter().enumerate() {
        match checked(n, NodeAt::Whole(i), names, limits, &mut violations) {
            Some(Ok(node)) => {
                at.push((true, valid.len()));
                valid.push(node);
            }
            Some(Err(bad)) => {
                at.push((false, invalid.len()));
                invalid.push(bad);
            }
            None => at.push((false, usize::MAX)),
        }
    }
    let duplicates = || {
        let node_names: Vec<&str> = at
            .iter()
            .map(|&(ok, k)| {
                if ok {
                    valid.get(k).map_or("", |n: &Arc<Node>| n.name())
                } else {
                    invalid.get(k).map_or("", |n: &Arc<InvalidNode>| n.name())
                }
            })
            .collect();
        duplicate_names(&node_names, |i| NodeAt::Whole(i).to_string())
    };
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
