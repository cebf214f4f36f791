//! The cluster as gpusched sees it: the inventories of the usable Slurm nodes, with the usage
//! of every job that still holds a recorded decision (rebuilt from Slurm on every call).

use std::collections::BTreeMap;

use gpusched_client::v1;
use gpusched_hami::add_usage;

use crate::decision::{Decision, DecisionError};
use crate::inventory::NodeInventory;
use crate::slurm::{Job, SlurmNode};

/// A job whose recorded decision cannot be read (usage would be unknown).
#[derive(Debug, thiserror::Error)]
#[error("job {job}: {source}; fix its comment or cancel it (usage would be unknown)")]
pub struct UsageError {
    /// The job.
    pub job: u64,
    /// Why.
    #[source]
    pub source: DecisionError,
}

/// The recorded decisions of the jobs that hold a booking, by job id.
pub fn decisions(jobs: &[Job]) -> Result<BTreeMap<u64, Decision>, UsageError> {
    let mut out = BTreeMap::new();
    for j in jobs.iter().filter(|j| j.holds_booking()) {
        if let Some(d) =
            Decision::parse(&j.comment).map_err(|source| UsageError { job: j.id, source })?
        {
            out.insert(j.id, d);
        }
    }
    Ok(out)
}

/// The candidate nodes: nodes that Slurm knows, can start jobs on, that are in one of
/// `partitions` (any when empty) and have an inventory; each with the usage of `decisions`.
pub fn candidate_nodes<'a>(
    inventories: &BTreeMap<String, NodeInventory>,
    slurm_nodes: &[SlurmNode],
    partitions: &[String],
    decisions: impl IntoIterator<Item = &'a Decision>,
) -> Vec<v1::Node> {
    let mut nodes: BTreeMap<&str, v1::Node> = slurm_nodes
        .iter()
        .filter(|n| n.usable())
        .filter(|n| partitions.is_empty() || n.partitions.iter().any(|p| partitions.contains(p)))
        .filter_map(|n| inventories.get(&n.name))
        .map(|inv| (inv.node.as_str(), inv.to_node()))
        .collect();
    for d in decisions {
        if let Some(n) = nodes.get_mut(d.node.as_str()) {
            add_usage(&mut n.cards, &d.bookings());
        }
    }
    nodes.into_values().collect()
}

/// Usage per card of every node with an inventory (for `gpusched-slurm usage` and checks).
pub fn usage_table<'a>(
    inventories: &BTreeMap<String, NodeInventory>,
    decisions: impl IntoIterator<Item = &'a Decision>,
) -> Vec<v1::Node> {
    let mut nodes: BTreeMap<&str, v1::Node> = inventories
        .values()
        .map(|inv| (inv.node.as_str(), inv.to_node()))
        .collect();
    for d in decisions {
        if let Some(n) = nodes.get_mut(d.node.as_str()) {
            add_usage(&mut n.cards, &d.bookings());
        }
    }
    nodes.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::BookedCard;

    fn inv(node: &str) -> NodeInventory {
        let n = gpusched_client::node(node, 2, 8000, "NVIDIA-A100");
        NodeInventory {
            node: node.into(),
            cards: n.cards,
            pair_scores: vec![],
        }
    }

    fn snode(name: &str, state: &str, part: &str) -> SlurmNode {
        SlurmNode {
            name: name.into(),
            state: state.into(),
            flags: vec![],
            partitions: vec![part.into()],
        }
    }

    #[test]
    fn usage_comes_from_live_jobs_only_and_lands_on_the_right_card() {
        let invs: BTreeMap<_, _> = [("n1".to_owned(), inv("n1")), ("n2".to_owned(), inv("n2"))]
            .into_iter()
            .collect();
        let card = invs["n1"].cards[1].id.clone();
        let d = Decision {
            node: "n1".into(),
            cards: vec![BookedCard {
                index: 1,
                uuid: card.clone(),
                mem_mib: 3000,
                cores: 20,
            }],
        };
        let jobs = vec![
            Job {
                id: 1,
                state: "RUNNING".into(),
                comment: d.encode(),
                ..Job::default()
            },
            Job {
                id: 2,
                state: "COMPLETED".into(),
                comment: d.encode(),
                ..Job::default()
            },
            Job {
                id: 3,
                state: "PENDING".into(),
                comment: "not ours".into(),
                ..Job::default()
            },
        ];
        let ds = decisions(&jobs).unwrap();
        assert_eq!(ds.keys().copied().collect::<Vec<_>>(), [1]);
        let slurm = vec![snode("n1", "mixed", "gpu"), snode("n2", "down", "gpu")];
        let nodes = candidate_nodes(&invs, &slurm, &[], ds.values());
        assert_eq!(nodes.len(), 1, "n2 is down");
        let u = nodes[0].cards[1].usage.unwrap();
        assert_eq!((u.used_slots, u.used_mem_mib, u.used_cores), (1, 3000, 20));
        assert!(nodes[0].cards[0].usage.is_none());
        assert!(candidate_nodes(&invs, &slurm, &["cpu".into()], ds.values()).is_empty());
    }

    #[test]
    fn an_unreadable_decision_names_the_job() {
        let jobs = vec![Job {
            id: 42,
            state: "RUNNING".into(),
            comment: "gpusched/v1 node=n1".into(),
            ..Job::default()
        }];
        let e = decisions(&jobs).unwrap_err().to_string();
        assert!(e.contains("job 42"), "{e}");
    }
}
