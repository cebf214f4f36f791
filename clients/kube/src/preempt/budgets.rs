//! PodDisruptionBudgets as kube-scheduler's preemption counts them (`FilterVictimsWithPDBViolation`,
//! docs/placement-semantics.md 9.7): per node, the pods of lower priority in order of
//! importance each take one from every matching budget; a pod that takes one below zero
//! violates a budget.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    In(String, HashSet<String>),
    NotIn(String, HashSet<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A label selector as `metav1.LabelSelectorAsSelector` reads it; None where it matches nothing
/// (a missing or empty selector, or an invalid one: an unknown operator, `In`/`NotIn` without
/// values, `Exists`/`DoesNotExist` with values), as kube-scheduler treats them for budgets.
fn selector(s: Option<&LabelSelector>) -> Option<Vec<Requirement>> {
    let s = s?;
    let mut out: Vec<Requirement> = Vec::new();
    for (k, v) in s.match_labels.iter().flatten() {
        out.push(Requirement::In(k.clone(), HashSet::from([v.clone()])));
    }
    for e in s.match_expressions.iter().flatten() {
        let values: HashSet<String> = e.values.iter().flatten().cloned().collect();
        let r = match e.operator.as_str() {
            "In" if !values.is_empty() => Requirement::In(e.key.clone(), values),
            "NotIn" if !values.is_empty() => Requirement::NotIn(e.key.clone(), values),
            "Exists" if values.is_empty() => Requirement::Exists(e.key.clone()),
            "DoesNotExist" if values.is_empty() => Requirement::DoesNotExist(e.key.clone()),
            _ => return None,
        };
        out.push(r);
    }
    (!out.is_empty()).then_some(out)
}

/// A budget as preemption reads it.
#[derive(Clone, Debug)]
pub struct Budget {
    namespace: String,
    selector: Option<Vec<Requirement>>,
    disrupted: HashSet<String>,
    allowed: i32,
}

impl Budget {
    /// The budget of a PodDisruptionBudget object (its spec selector and its status).
    pub fn of(pdb: &PodDisruptionBudget) -> Budget {
        let status = pdb.status.as_ref();
        Budget {
            namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
            selector: selector(pdb.spec.as_ref().and_then(|s| s.selector.as_ref())),
            disrupted: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
            allowed: status.and_then(|s| s.disruptions_allowed).unwrap_or(0),
        }
    }

    fn counts(&self, pod: &Pod) -> bool {
        let Some(reqs) = &self.selector else {
            return false;
        };
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        pod.metadata.namespace.as_deref().unwrap_or("") == self.namespace
            && reqs.iter().all(|r| r.matches(&labels))
            && !self
                .disrupted
                .contains(pod.metadata.name.as_deref().unwrap_or(""))
    }
}

/// For each pod (the eligible pods of one node, most important first), whether evicting it
/// violates a budget: it takes one from every budget that counts it, in the budgets' order, and
/// violates as soon as one goes below zero (the budgets after that one are not charged, as in
/// kube-scheduler). A pod without labels violates nothing.
pub fn violations(pods: &[&Pod], budgets: &[Budget]) -> Vec<bool> {
    let mut allowed: Vec<i64> = budgets.iter().map(|b| i64::from(b.allowed)).collect();
    pods.iter()
        .map(|pod| {
            if pod.metadata.labels.as_ref().is_none_or(BTreeMap::is_empty) {
                return false;
            }
            for (i, b) in budgets.iter().enumerate() {
                if !b.counts(pod) {
                    continue;
                }
                if let Some(a) = allowed.get_mut(i) {
                    *a -= 1;
                    if *a < 0 {
                        return true;
                    }
                }
            }
            false
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn pod(name: &str, ns: &str, labels: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": ns, "labels": labels}}),
        )
        .unwrap()
    }

    fn pdb(ns: &str, selector: serde_json::Value, allowed: i32, disrupted: &[&str]) -> Budget {
        let disrupted: serde_json::Map<String, serde_json::Value> = disrupted
            .iter()
            .map(|n| ((*n).to_owned(), json!("2026-01-01T00:00:00Z")))
            .collect();
        Budget::of(
            &serde_json::from_value(json!({
                "metadata": {"name": "b", "namespace": ns},
                "spec": {"selector": selector},
                "status": {"disruptionsAllowed": allowed, "disruptedPods": disrupted,
                           "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn budgets_are_counted_as_kube_scheduler_counts_them() {
        let app = |a: &str| json!({"app": a});
        let web = json!({"matchLabels": {"app": "web"}});
        type Case = (&'static str, Vec<Pod>, Vec<Budget>, Vec<bool>);
        let cases: Vec<Case> = vec![
            (
                "one disruption allowed: the first (most important) pod takes it, the second violates",
                vec![pod("a", "ns", app("web")), pod("b", "ns", app("web"))],
                vec![pdb("ns", web.clone(), 1, &[])],
                vec![false, true],
            ),
            (
                "another namespace's budget does not count",
                vec![pod("a", "ns", app("web"))],
                vec![pdb("other", web.clone(), 0, &[])],
                vec![false],
            ),
            (
                "a pod already in disruptedPods takes nothing",
                vec![pod("a", "ns", app("web")), pod("b", "ns", app("web"))],
                vec![pdb("ns", web.clone(), 1, &["a"])],
                vec![false, false],
            ),
            (
                "a pod without labels violates nothing",
                vec![pod("a", "ns", json!({}))],
                vec![pdb(
                    "ns",
                    json!({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}),
                    0,
                    &[],
                )],
                vec![false],
            ),
            (
                "empty and invalid selectors match nothing",
                vec![pod("a", "ns", app("web"))],
                vec![
                    pdb("ns", json!({}), 0, &[]),
                    pdb(
                        "ns",
                        json!({"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}),
                        0,
                        &[],
                    ),
                    pdb(
                        "ns",
                        json!({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]}),
                        0,
                        &[],
                    ),
                    pdb(
                        "ns",
                        json!({"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}),
                        0,
                        &[],
                    ),
                    pdb("ns", serde_json::Value::Null, 0, &[]),
                ],
                vec![false],
            ),
            (
                "expressions: In, NotIn (absent label matches), Exists",
                vec![
                    pod("a", "ns", json!({"app": "web", "tier": "x"})),
                    pod("b", "ns", json!({"app": "db"})),
                ],
                vec![
                    pdb(
                        "ns",
                        json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}, {"key": "tier", "operator": "Exists"}]}),
                        0,
                        &[],
                    ),
                    pdb(
                        "ns",
                        json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}),
                        0,
                        &[],
                    ),
                ],
                vec![true, true],
            ),
            (
                "a budget with disruptions left before one that has none: violates at the second",
                vec![pod("a", "ns", app("web"))],
                vec![
                    pdb("ns", web.clone(), 5, &[]),
                    pdb("ns", web.clone(), 0, &[]),
                ],
                vec![true],
            ),
        ];
        for (what, pods, budgets, want) in cases {
            let refs: Vec<&Pod> = pods.iter().collect();
            assert_eq!(violations(&refs, &budgets), want, "{what}");
        }
    }
}
