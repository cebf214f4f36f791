//! Candidate nodes sent whole (`nodes`): each converted and checked ([`checked`]), the valid
//! ones into the snapshot, the invalid ones beside it. Request errors: empty or repeated node
//! names, unset or unknown enum numbers.

use gpusched_api::v1;
use gpusched_engine::KubeNames;

use crate::candidates::Candidates;
use crate::config::Limits;
use crate::convert::node::NodeAt;
use crate::error::ServiceError;
use crate::pipeline::resolve::build::{Builder, checked};

/// Adds the nodes sent whole to `b` (before any reference).
pub fn push(b: &mut Builder, nodes: Vec<v1::Node>, names: &KubeNames, limits: &Limits) {
    for (i, n) in nodes.into_iter().enumerate() {
        b.cards += n.cards.len();
        let node = checked(n, NodeAt::Whole(i), names, limits, &mut b.violations);
        b.whole(node);
    }
}

/// The candidates of nodes sent whole.
pub fn candidates_in(
    nodes: Vec<v1::Node>,
    names: &KubeNames,
    limits: &Limits,
) -> Result<Candidates, ServiceError> {
    let mut b = Builder::with_capacity(nodes.len());
    push(&mut b, nodes, names, limits);
    b.finish(limits)
}
