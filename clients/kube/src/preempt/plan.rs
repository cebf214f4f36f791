//! What the service's `Preempt` answer means for the shim: the pods to evict on the chosen node
//! (with the cards each frees), the placement to hold for the preemptor, and the text each
//! candidate node's failure gets. Pure functions over the answer and the request's nodes.

use std::collections::BTreeMap;

use gpusched_client::v1;
use gpusched_hami::Booking;

use super::placed::bookings;
use crate::view::NodeParts;

/// A pod to evict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Victim {
    /// Its uid.
    pub uid: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its priority.
    pub priority: i32,
    /// Whether evicting it violates a budget.
    pub violates_budget: bool,
    /// What it frees on the node, per card.
    pub frees: Vec<v1::Booking>,
}

/// An eviction decided by the service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The node.
    pub node: String,
    /// The victims in the answer's order (most important first).
    pub victims: Vec<Victim>,
    /// The placement the preemptor gets once they are gone, per container.
    pub placement: Vec<Vec<Booking>>,
}

impl Plan {
    /// The victims in eviction order: those whose eviction violates a budget first (a refusal
    /// then leaves every other victim in place), each group in the answer's order.
    pub fn eviction_order(&self) -> Vec<&Victim> {
        let (mut first, rest): (Vec<&Victim>, Vec<&Victim>) =
            self.victims.iter().partition(|v| v.violates_budget);
        first.extend(rest);
        first
    }

    /// `ns/name (priority P, frees CARD MiB MiB C cores, ...)` for each victim.
    pub fn victims_text(&self) -> String {
        self.victims
            .iter()
            .map(|v| {
                format!(
                    "{}/{} (priority {}, frees {})",
                    v.namespace,
                    v.name,
                    v.priority,
                    cards_text(&v.frees)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The placement as `CARD MiB MiB C cores, ...`.
    pub fn placement_text(&self) -> String {
        bookings_text(&self.placement)
    }
}

/// Per-container bookings as `CARD MiB MiB C cores, ...`.
pub fn bookings_text(placement: &[Vec<Booking>]) -> String {
    let cards: Vec<String> = placement
        .iter()
        .flatten()
        .map(|b| format!("{} {} MiB {} cores", b.uuid, b.mem_mib, b.cores))
        .collect();
    if cards.is_empty() {
        "no card".to_owned()
    } else {
        cards.join(", ")
    }
}

/// `CARD MiB MiB C cores` per booking.
pub fn cards_text(frees: &[v1::Booking]) -> String {
    if frees.is_empty() {
        return "no card".to_owned();
    }
    frees
        .iter()
        .map(|b| format!("{} {} MiB {} cores", b.card_id, b.mem_mib, b.cores))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the answer says to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Some node fits as it is: evict nothing (the usage changed since the filter).
    NotNeeded,
    /// No node can make room.
    NoCandidate,
    /// Evict on one node.
    Evict(Plan),
}

/// The answer's verdict, resolving victims' uids to the pods of `parts` (an id the request did
/// not carry is an error: the answer does not belong to this request).
pub fn verdict(resp: &v1::PreemptResponse, parts: &[NodeParts]) -> Result<Verdict, String> {
    let kind = v1::PreemptChoiceKind::try_from(resp.choice)
        .map_err(|_| format!("unknown preemption choice {}", resp.choice))?;
    match kind {
        v1::PreemptChoiceKind::NotNeeded => return Ok(Verdict::NotNeeded),
        v1::PreemptChoiceKind::NoCandidate | v1::PreemptChoiceKind::Unspecified => {
            return Ok(Verdict::NoCandidate);
        }
        v1::PreemptChoiceKind::Evict => {}
    }
    let node = &resp.node_name;
    let v = gpusched_client::chosen_victims(resp)
        .ok_or_else(|| format!("the chosen node {node} has no victims in the answer"))?;
    let part = parts
        .iter()
        .find(|p| &p.node.name == node)
        .ok_or_else(|| format!("the chosen node {node} was not asked about"))?;
    let mut victims = Vec::new();
    for id in &v.ids {
        let (pod, usage) = part
            .pods
            .iter()
            .find(|(p, _)| p.metadata.uid.as_deref() == Some(id))
            .ok_or_else(|| format!("victim {id} is not a pod of node {node}"))?;
        victims.push(Victim {
            uid: id.clone(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            priority: super::placed::priority(pod),
            violates_budget: false,
            frees: bookings(usage, &part.node.cards),
        });
    }
    // The answer counts violations; which victims they are is the request's flag.
    Ok(Verdict::Evict(Plan {
        node: node.clone(),
        victims,
        placement: gpusched_hami::bookings(&v1::AllocationResult {
            containers: v.containers.clone(),
            ..v1::AllocationResult::default()
        }),
    }))
}

/// Marks the victims whose eviction violates a budget, as the request said.
pub fn mark_budgets(plan: &mut Plan, placed: &[v1::NodePlaced]) {
    let Some(node) = placed.iter().find(|p| p.node == plan.node) else {
        return;
    };
    for v in &mut plan.victims {
        v.violates_budget = node
            .workloads
            .iter()
            .any(|w| w.id == v.uid && w.violates_budget);
    }
}

/// The sentence of a node where nothing has a lower priority than the pod.
pub const NO_LOWER_PRIORITY: &str = "preemption: no pod of lower priority here (NoLowerPriority)";

/// Each candidate node's preemption verdict as a sentence for its failure text (nodes with
/// nothing to say are left out; the chosen node's sentence is written by whoever evicts).
pub fn node_notes(resp: &v1::PreemptResponse) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let chosen = (resp.choice == v1::PreemptChoiceKind::Evict as i32).then_some(&resp.node_name);
    for n in &resp.nodes {
        let note = match &n.verdict {
            Some(v1::node_preemption::Verdict::NotCandidate(nc)) => {
                match v1::NotCandidateReason::try_from(nc.reason) {
                    Ok(v1::NotCandidateReason::NoLowerPriority) => NO_LOWER_PRIORITY.to_owned(),
                    Ok(v1::NotCandidateReason::InsufficientAfterEviction) => format!(
                        "preemption: does not fit even without the {} pod(s) of lower priority \
                         (InsufficientAfterEviction)",
                        n.eligible
                    ),
                    _ => continue,
                }
            }
            Some(v1::node_preemption::Verdict::Victims(v)) if Some(&n.node_name) != chosen => {
                match chosen {
                    Some(c) => format!(
                        "preemption: would evict {} pod(s) here; node {c} needs less",
                        v.ids.len()
                    ),
                    None => continue,
                }
            }
            _ => continue,
        };
        out.insert(n.node_name.clone(), note);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn parts() -> Vec<NodeParts> {
        let pod = |uid: &str| -> Arc<k8s_openapi::api::core::v1::Pod> {
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": format!("pod-{uid}"), "namespace": "ns", "uid": uid},
                    "spec": {"containers": [], "priority": 1}
                }))
                .unwrap(),
            )
        };
        let usage = |card: &str, mem: u64| {
            Arc::new(crate::translate::PodUsage {
                node: "n2".into(),
                bookings: vec![vec![Booking {
                    uuid: card.into(),
                    device_type: "NVIDIA".into(),
                    mem_mib: mem,
                    cores: 0,
                }]],
                annotation: String::new(),
                ..Default::default()
            })
        };
        vec![NodeParts {
            node: v1::Node {
                name: "n2".into(),
                cards: vec![v1::Card {
                    id: "GPU-1".into(),
                    ..v1::Card::default()
                }],
                ..v1::Node::default()
            },
            pods: vec![
                (pod("a"), usage("GPU-1", 6000)),
                (pod("b"), usage("GPU-1", 4000)),
            ],
        }]
    }

    fn answer(choice: v1::PreemptChoiceKind, ids: &[&str]) -> v1::PreemptResponse {
        v1::PreemptResponse {
            requests_gpu: true,
            choice: choice as i32,
            node_name: "n2".into(),
            nodes: vec![
                v1::NodePreemption {
                    node_name: "n1".into(),
                    eligible: 0,
                    verdict: Some(v1::node_preemption::Verdict::NotCandidate(
                        v1::NotCandidate {
                            reason: v1::NotCandidateReason::NoLowerPriority as i32,
                            failure: None,
                        },
                    )),
                    reprieves: vec![],
                },
                v1::NodePreemption {
                    node_name: "n2".into(),
                    eligible: 2,
                    verdict: Some(v1::node_preemption::Verdict::Victims(v1::Victims {
                        ids: ids.iter().map(|s| (*s).to_owned()).collect(),
                        containers: vec![v1::ContainerAssignment {
                            cards: vec![v1::CardAssignment {
                                card_id: "GPU-1".into(),
                                mem_mib: 10000,
                                cores_percent: 20,
                                ..v1::CardAssignment::default()
                            }],
                            ..v1::ContainerAssignment::default()
                        }],
                        ..v1::Victims::default()
                    })),
                    reprieves: vec![],
                },
                v1::NodePreemption {
                    node_name: "n3".into(),
                    eligible: 3,
                    verdict: Some(v1::node_preemption::Verdict::Victims(v1::Victims {
                        ids: vec!["x".into(), "y".into()],
                        ..v1::Victims::default()
                    })),
                    reprieves: vec![],
                },
            ],
            effective_policy: None,
        }
    }

    #[test]
    fn an_eviction_names_the_pods_the_cards_they_free_and_the_placement() {
        let resp = answer(v1::PreemptChoiceKind::Evict, &["b", "a"]);
        let Verdict::Evict(mut plan) = verdict(&resp, &parts()).unwrap() else {
            panic!("an eviction")
        };
        let placed = [v1::NodePlaced {
            node: "n2".into(),
            workloads: vec![v1::PlacedWorkload {
                id: "a".into(),
                violates_budget: true,
                ..v1::PlacedWorkload::default()
            }],
        }];
        mark_budgets(&mut plan, &placed);
        assert_eq!(plan.node, "n2");
        let order: Vec<&str> = plan
            .eviction_order()
            .iter()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(
            order,
            vec!["pod-a", "pod-b"],
            "the budget-violating victim first"
        );
        assert_eq!(
            plan.victims_text(),
            "ns/pod-b (priority 1, frees GPU-1 4000 MiB 0 cores), ns/pod-a (priority 1, frees GPU-1 6000 MiB 0 cores)"
        );
        assert_eq!(plan.placement_text(), "GPU-1 10000 MiB 20 cores");
        let notes = node_notes(&resp);
        assert_eq!(
            notes.get("n1").map(String::as_str),
            Some("preemption: no pod of lower priority here (NoLowerPriority)")
        );
        assert_eq!(
            notes.get("n3").map(String::as_str),
            Some("preemption: would evict 2 pod(s) here; node n2 needs less")
        );
        assert!(
            !notes.contains_key("n2"),
            "the chosen node's text is the evictor's"
        );
    }

    #[test]
    fn answers_that_do_not_belong_to_the_request_are_errors() {
        let resp = answer(v1::PreemptChoiceKind::Evict, &["zzz"]);
        assert!(verdict(&resp, &parts()).unwrap_err().contains("zzz"));
        let mut resp = answer(v1::PreemptChoiceKind::Evict, &["a"]);
        resp.node_name = "n9".into();
        assert!(verdict(&resp, &parts()).unwrap_err().contains("n9"));
        let mut resp = answer(v1::PreemptChoiceKind::Evict, &["a"]);
        resp.choice = 99;
        assert!(verdict(&resp, &parts()).is_err());
        assert_eq!(
            verdict(&answer(v1::PreemptChoiceKind::NoCandidate, &[]), &parts()).unwrap(),
            Verdict::NoCandidate
        );
        assert_eq!(
            verdict(&answer(v1::PreemptChoiceKind::NotNeeded, &[]), &parts()).unwrap(),
            Verdict::NotNeeded
        );
    }
}
