//! kube-scheduler's preemptVerb (path 2 of the README): its dry run found victims on nodes that
//! fail its own filters; the shim keeps those victims (its filters need them gone) and adds who
//! else must leave for the cards, from the service's `Preempt` over the nodes without them. A
//! node where even that makes no room is left out.

use std::collections::BTreeMap;

use gpusched_client::v1;

use crate::extender_v1::{ExtenderPreemptionResult, MetaPod, MetaVictims};

/// A node the shim accepts, with every victim and the placement the pod gets there once they
/// are gone (None: it fits as soon as kube-scheduler's victims are gone; the caller asks
/// Allocate for it).
#[derive(Clone, Debug, PartialEq)]
pub struct Accepted {
    /// kube-scheduler's victims, then the service's (most important first).
    pub victims: Vec<String>,
    /// kube-scheduler's count of budget violations plus the service's.
    pub budget_violations: i64,
    /// The placement from the service's answer.
    pub containers: Option<Vec<v1::ContainerAssignment>>,
}

/// The nodes to accept from the service's answer over kube-scheduler's `nodes` (its victims'
/// UIDs and budget violations per node). A node the answer does not cover (no readable GPU
/// inventory in the view) is left out.
pub fn accept(
    nodes: &BTreeMap<String, (Vec<String>, i64)>,
    resp: &v1::PreemptResponse,
) -> BTreeMap<String, Accepted> {
    let mut out = BTreeMap::new();
    for n in &resp.nodes {
        let Some((theirs, violations)) = nodes.get(&n.node_name) else {
            continue;
        };
        let accepted = match &n.verdict {
            Some(v1::node_preemption::Verdict::NotNeeded(_)) => Accepted {
                victims: theirs.clone(),
                budget_violations: *violations,
                containers: None,
            },
            Some(v1::node_preemption::Verdict::Victims(v)) => Accepted {
                victims: theirs.iter().chain(&v.ids).cloned().collect(),
                budget_violations: violations.saturating_add(i64::from(v.budget_violations)),
                containers: Some(v.containers.clone()),
            },
            _ => continue,
        };
        if accepted.victims.is_empty() {
            // kube-scheduler refuses a node without victims from an extender.
            continue;
        }
        out.insert(n.node_name.clone(), accepted);
    }
    out
}

/// The answer to kube-scheduler.
pub fn result(accepted: &BTreeMap<String, Accepted>) -> ExtenderPreemptionResult {
    ExtenderPreemptionResult {
        node_name_to_meta_victims: accepted
            .iter()
            .map(|(n, a)| {
                (
                    n.clone(),
                    MetaVictims {
                        pods: a
                            .victims
                            .iter()
                            .map(|uid| MetaPod { uid: uid.clone() })
                            .collect(),
                        num_pdb_violations: a.budget_violations,
                    },
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, verdict: v1::node_preemption::Verdict) -> v1::NodePreemption {
        v1::NodePreemption {
            node_name: name.into(),
            eligible: 1,
            verdict: Some(verdict),
            reprieves: vec![],
        }
    }

    #[test]
    fn kube_schedulers_victims_stay_the_services_are_added_and_hopeless_nodes_go() {
        let ks: BTreeMap<String, (Vec<String>, i64)> = [
            ("fits", (vec!["cpu-hog".to_owned()], 0)),
            ("needs-more", (vec!["cpu-hog-2".to_owned()], 1)),
            ("hopeless", (vec!["cpu-hog-3".to_owned()], 0)),
            ("no-inventory", (vec!["x".to_owned()], 0)),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v))
        .collect();
        let placement = vec![v1::ContainerAssignment {
            cards: vec![v1::CardAssignment {
                card_id: "GPU-1".into(),
                mem_mib: 100,
                ..v1::CardAssignment::default()
            }],
            ..v1::ContainerAssignment::default()
        }];
        let resp = v1::PreemptResponse {
            requests_gpu: true,
            nodes: vec![
                node(
                    "fits",
                    v1::node_preemption::Verdict::NotNeeded(v1::NodeScore::default()),
                ),
                node(
                    "needs-more",
                    v1::node_preemption::Verdict::Victims(v1::Victims {
                        ids: vec!["gpu-a".into(), "gpu-b".into()],
                        budget_violations: 1,
                        containers: placement.clone(),
                        ..v1::Victims::default()
                    }),
                ),
                node(
                    "hopeless",
                    v1::node_preemption::Verdict::NotCandidate(v1::NotCandidate::default()),
                ),
            ],
            choice: v1::PreemptChoiceKind::NotNeeded as i32,
            node_name: String::new(),
            effective_policy: None,
        };
        let accepted = accept(&ks, &resp);
        assert_eq!(
            accepted.keys().map(String::as_str).collect::<Vec<_>>(),
            vec!["fits", "needs-more"]
        );
        assert_eq!(accepted["fits"].victims, vec!["cpu-hog"]);
        assert_eq!(accepted["fits"].containers, None);
        assert_eq!(
            accepted["needs-more"].victims,
            vec!["cpu-hog-2", "gpu-a", "gpu-b"]
        );
        assert_eq!(accepted["needs-more"].budget_violations, 2);
        assert_eq!(accepted["needs-more"].containers, Some(placement));
        let r = result(&accepted);
        assert_eq!(r.node_name_to_meta_victims["needs-more"].pods.len(), 3);
        assert_eq!(
            r.node_name_to_meta_victims["needs-more"].num_pdb_violations,
            2
        );
    }
}
