//! A node's placed workloads for the service's `Preempt` (docs/placement-semantics.md 9.1), from
//! the pods whose decision counts on it: UID, `spec.priority`, `status.startTime`, one booking per
//! card, and whether evicting it violates a budget ([`super::budgets`]).

use std::collections::BTreeMap;

use gpusched_client::v1;
use k8s_openapi::api::core::v1::Pod;

use super::budgets::{Budget, violations};
use crate::translate::PodUsage;
use crate::view::NodeParts;

/// A pod's priority as kube-scheduler reads it (`spec.priority`, 0 when unset).
pub fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// A pod's start, ms since the epoch (`status.startTime`; `now_ms` when unset, as
/// kube-scheduler's `GetPodStartTime` gives the current time to a pod that has not started).
pub fn start_ms(pod: &Pod, now_ms: i64) -> i64 {
    pod.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or(now_ms, |t| t.0.as_millisecond())
}

/// Whether the pod is being deleted already (it frees its cards when it is gone, whatever
/// preemption decides: it is usage no workload accounts for).
pub fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Whether the pod is terminating because a scheduler preempted it (`DisruptionTarget=True`,
/// reason `PreemptionByScheduler`: kube-scheduler's mark, which the shim sets on its victims too).
pub fn preempted(pod: &Pod) -> bool {
    terminating(pod)
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| {
                c.type_ == "DisruptionTarget"
                    && c.status == "True"
                    && c.reason.as_deref() == Some("PreemptionByScheduler")
            })
}

/// The usage's bookings per card of `cards` (slots = its containers on the card), in card-id
/// order; bookings on other cards are dropped (the node's usage does not count them either).
pub fn bookings(usage: &PodUsage, cards: &[v1::Card]) -> Vec<v1::Booking> {
    let mut per: BTreeMap<&str, v1::Booking> = BTreeMap::new();
    for b in usage.bookings.iter().flatten() {
        if !cards.iter().any(|c| c.id == b.uuid) {
            continue;
        }
        let e = per.entry(b.uuid.as_str()).or_insert_with(|| v1::Booking {
            card_id: b.uuid.clone(),
            ..v1::Booking::default()
        });
        e.slots = e.slots.saturating_add(1);
        e.mem_mib = e.mem_mib.saturating_add(b.mem_mib);
        e.cores = e.cores.saturating_add(b.cores);
    }
    per.into_values().collect()
}

/// The node's placed workloads for a pending pod of `pending_priority`: its pods that are not
/// terminating, most important first (higher priority, earlier start, smaller uid), with
/// `violates_budget` counted over those of lower priority in that order.
pub fn node_placed(
    parts: &NodeParts,
    pending_priority: i32,
    budgets: &[Budget],
    now_ms: i64,
) -> v1::NodePlaced {
    let mut live: Vec<(&Pod, &PodUsage, i32, i64, &str)> = parts
        .pods
        .iter()
        .filter(|(p, _)| !terminating(p))
        .map(|(p, u)| {
            let uid = p.metadata.uid.as_deref().unwrap_or("");
            (&**p, &**u, priority(p), start_ms(p, now_ms), uid)
        })
        .collect();
    live.sort_by(|a, b| b.2.cmp(&a.2).then(a.3.cmp(&b.3)).then(a.4.cmp(b.4)));
    let eligible: Vec<&Pod> = live
        .iter()
        .filter(|w| w.2 < pending_priority)
        .map(|w| w.0)
        .collect();
    let mut violating = violations(&eligible, budgets).into_iter();
    let workloads = live
        .iter()
        .map(|(_, u, prio, start, uid)| v1::PlacedWorkload {
            id: (*uid).to_owned(),
            priority: *prio,
            violates_budget: *prio < pending_priority && violating.next().unwrap_or(false),
            start_time_ms: *start,
            bookings: bookings(u, &parts.node.cards),
        })
        .collect();
    v1::NodePlaced {
        node: parts.node.name.clone(),
        workloads,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use gpusched_hami::Booking;
    use serde_json::json;
    use std::sync::Arc;

    fn card(id: &str) -> v1::Card {
        v1::Card {
            id: id.into(),
            slots: 10,
            total_mem_mib: 16384,
            total_cores: 100,
            ..v1::Card::default()
        }
    }

    fn pod(
        uid: &str,
        prio: Option<i32>,
        start: Option<&str>,
        labels: serde_json::Value,
    ) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": uid, "namespace": "ns", "uid": uid, "labels": labels},
                "spec": {"containers": [], "priority": prio},
                "status": {"startTime": start}
            }))
            .unwrap(),
        )
    }

    fn usage(cards: &[(&str, u64, u32)]) -> Arc<PodUsage> {
        Arc::new(PodUsage {
            node: "n1".into(),
            bookings: cards
                .iter()
                .map(|(id, mem, cores)| {
                    vec![Booking {
                        uuid: (*id).into(),
                        device_type: "NVIDIA".into(),
                        mem_mib: *mem,
                        cores: *cores,
                    }]
                })
                .collect(),
            annotation: String::new(),
            ..Default::default()
        })
    }

    #[test]
    fn placed_workloads_in_order_of_importance_with_bookings_per_card_and_budgets() {
        let budget: k8s_openapi::api::policy::v1::PodDisruptionBudget =
            serde_json::from_value(json!({
                "metadata": {"name": "b", "namespace": "ns"},
                "spec": {"selector": {"matchLabels": {"app": "web"}}},
                "status": {"disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2}
            }))
            .unwrap();
        let budgets = [Budget::of(&budget)];
        let web = json!({"app": "web"});
        let mut terminating_pod = (*pod("gone", Some(1), None, web.clone())).clone();
        terminating_pod.metadata.deletion_timestamp = terminating_pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.clone())
            .or_else(|| serde_json::from_value(json!("2026-01-01T00:00:00Z")).ok());
        let parts = NodeParts {
            node: v1::Node {
                name: "n1".into(),
                cards: vec![card("GPU-a"), card("GPU-b")],
                ..v1::Node::default()
            },
            pods: vec![
                // Two containers on GPU-a, one on a card the node does not list.
                (
                    pod("late", Some(5), Some("2026-01-01T00:00:02Z"), web.clone()),
                    usage(&[("GPU-a", 1000, 10), ("GPU-a", 500, 5), ("GPU-x", 9, 9)]),
                ),
                (
                    pod("early", Some(5), Some("2026-01-01T00:00:01Z"), web.clone()),
                    usage(&[("GPU-b", 2000, 0)]),
                ),
                (
                    pod("peer", Some(10), None, web.clone()),
                    usage(&[("GPU-b", 1, 1)]),
                ),
                (
                    pod("unset", None, None, json!({})),
                    usage(&[("GPU-a", 3, 0)]),
                ),
                (Arc::new(terminating_pod), usage(&[("GPU-a", 7, 0)])),
            ],
        };
        let now_ms = 1_800_000_000_000;
        let placed = node_placed(&parts, 10, &budgets, now_ms);
        assert_eq!(placed.node, "n1");
        type Row<'a> = (&'a str, i32, bool, i64, Vec<(&'a str, u32, u64, u32)>);
        let summary: Vec<Row<'_>> = placed
            .workloads
            .iter()
            .map(|w| {
                (
                    w.id.as_str(),
                    w.priority,
                    w.violates_budget,
                    w.start_time_ms,
                    w.bookings
                        .iter()
                        .map(|b| (b.card_id.as_str(), b.slots, b.mem_mib, b.cores))
                        .collect(),
                )
            })
            .collect();
        let t = |s: u64| 1_767_225_600_000 + 1000 * s as i64;
        assert_eq!(
            summary,
            vec![
                // Equal priority is not eligible: it takes nothing from the budget.
                ("peer", 10, false, now_ms, vec![("GPU-b", 1, 1, 1)]),
                ("early", 5, false, t(1), vec![("GPU-b", 1, 2000, 0)]),
                ("late", 5, true, t(2), vec![("GPU-a", 2, 1500, 15)]),
                ("unset", 0, false, now_ms, vec![("GPU-a", 1, 3, 0)]),
            ]
        );
    }
}
