//! Preemption for pending GPU pods (clients/kube/README.md, "Preemption"): who must leave is
//! the service's `Preempt` answer (docs/placement-semantics.md section 9); this module feeds it
//! the placed pods of the candidate nodes and carries the answer out.
//!
//! - `budgets.rs`: PodDisruptionBudgets as kube-scheduler counts them;
//! - `placed.rs`: a node's placed workloads from the view's pods;
//! - `plan.rs`: the answer as victims, placement and per-node sentences;
//! - `evict.rs`: evictions, conditions, nomination and Events on the API;
//! - `verb.rs`: kube-scheduler's `preemptVerb` (`POST /preempt`).
//!
//! [`Preemptor::at_filter`] is path 1 (only the cards block the pod: the shim preempts itself),
//! [`Preemptor::at_verb`] path 2 (kube-scheduler's own filters block it too).

mod budgets;
mod evict;
mod placed;
mod plan;
mod verb;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gpusched_client::v1;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;

use crate::extender_v1::{ExtenderFilterResult, ExtenderPreemptionArgs, ExtenderPreemptionResult};
use crate::metrics::{Metrics, PreemptionOutcome};
use crate::translate;
use crate::view::{ClusterView, Hold, NodeParts};

use budgets::Budget;
use plan::{Plan, Verdict};

/// What preemption works with: the shim's view, service and API clients.
pub struct Ctx<'a> {
    /// The cluster view.
    pub view: &'a ClusterView,
    /// The gpusched service.
    pub service: &'a gpusched_client::Client,
    /// The Kubernetes API (None: nothing can be evicted, for tests).
    pub kube: Option<&'a kube::Client>,
    /// Events.
    pub recorder: Option<&'a Recorder>,
    /// Metrics.
    pub metrics: &'a Metrics,
    /// How a service error reads in a failure text.
    pub error_text: fn(&gpusched_client::Error) -> String,
}

impl std::fmt::Debug for Ctx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("kube", &self.kube.is_some())
            .finish_non_exhaustive()
    }
}

/// The preemption state the shim keeps: the PodDisruptionBudgets.
pub struct Preemptor {
    budgets: Option<Store<PodDisruptionBudget>>,
    budgets_listed: Arc<AtomicBool>,
    /// A client that does not retry 429 (a budget's refusal), for the evictions (None: the
    /// shim's own client).
    evictions: Option<kube::Client>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Appends `note` to `node`'s failure text.
fn append(out: &mut ExtenderFilterResult, node: &str, note: &str) {
    for map in [
        &mut out.failed_nodes,
        &mut out.failed_and_unresolvable_nodes,
    ] {
        if let Some(m) = map.get_mut(node) {
            m.push_str("; ");
            m.push_str(note);
            return;
        }
    }
}

/// Sets `node`'s failure to `text`, resolvable (kube-scheduler retries once the victims are gone).
fn set_waiting(out: &mut ExtenderFilterResult, node: &str, text: String) {
    out.failed_and_unresolvable_nodes.remove(node);
    out.failed_nodes.insert(node.to_owned(), text);
}

/// The text of a node being preempted for the pod.
fn waiting_text(victims: &str, left: usize, placement: &str) -> String {
    format!(
        "gpusched-kube: preempting for this pod: waiting for {left} pod(s) to leave ({victims}); \
         it then gets {placement}"
    )
}

impl std::fmt::Debug for Preemptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preemptor")
            .field("budgets_listed", &self.budgets_listed)
            .finish_non_exhaustive()
    }
}

impl Preemptor {
    /// Preemption over the budgets of `budgets` (an informer's store), usable once
    /// `listed` is set (the informer has listed them once), evicting with `evictions` (a client
    /// that answers a 429 at once instead of retrying it).
    pub fn new(
        budgets: Store<PodDisruptionBudget>,
        listed: Arc<AtomicBool>,
        evictions: kube::Client,
    ) -> Self {
        Preemptor {
            budgets: Some(budgets),
            budgets_listed: listed,
            evictions: Some(evictions),
        }
    }

    /// Preemption without any PodDisruptionBudget, evicting with the shim's client (tests).
    pub fn without_budgets() -> Self {
        Preemptor {
            budgets: None,
            budgets_listed: Arc::new(AtomicBool::new(true)),
            evictions: None,
        }
    }

    /// The budgets, or None until the informer has listed them.
    fn budgets(&self) -> Option<Vec<Budget>> {
        if !self.budgets_listed.load(Ordering::SeqCst) {
            return None;
        }
        Some(
            self.budgets
                .iter()
                .flat_map(|s| s.state())
                .map(|b| Budget::of(&b))
                .collect(),
        )
    }

    /// Path 1, at `/filter` when no candidate is feasible: asks the service who must leave which
    /// candidate, and carries the answer out (see the README). Every candidate's failure text
    /// in `out` gets the node's verdict.
    pub async fn at_filter(
        &self,
        cx: &Ctx<'_>,
        pod: &Pod,
        workload: &v1::Workload,
        candidates: &[String],
        out: &mut ExtenderFilterResult,
    ) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if uid.is_empty() {
            return;
        }
        let nominated = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone())
            .filter(|n| !n.is_empty());
        let holds = cx.view.holds_of(&uid);
        if let Some(h) = holds
            .iter()
            .find(|h| !h.offer || Some(&h.node) == nominated.as_ref())
        {
            let left = h
                .victims
                .iter()
                .zip(&h.victim_names)
                .filter(|(id, name)| {
                    let (ns, n) = name.split_once('/').unwrap_or(("", name));
                    cx.view.pod(ns, n, id).is_some()
                })
                .count();
            let placement = plan::bookings_text(&h.bookings);
            let text = waiting_text(&h.victim_names.join(", "), left, &placement);
            if candidates.contains(&h.node) {
                set_waiting(out, &h.node, text);
            }
            return;
        }
        // As kube-scheduler's PodEligibleToPreemptOthers: a pod nominated to a node where a pod
        // of lower priority is terminating by preemption waits for it (a preemption for it is
        // under way, by kube-scheduler at /preempt or by an instance before a restart).
        if let Some(n) = &nominated {
            let priority = placed::priority(pod);
            let parts = cx
                .view
                .preemption_parts(std::slice::from_ref(n), &uid, &HashSet::new());
            let leaving: Vec<String> = parts
                .iter()
                .flat_map(|p| &p.pods)
                .filter(|(p, _)| placed::priority(p) < priority && placed::preempted(p))
                .map(|(p, _)| {
                    format!(
                        "{}/{}",
                        p.metadata.namespace.as_deref().unwrap_or(""),
                        p.metadata.name.as_deref().unwrap_or("")
                    )
                })
                .collect();
            if !leaving.is_empty() {
                if candidates.contains(n) {
                    let text = format!(
                        "gpusched-kube: preempting for this pod: waiting for {} pod(s) to leave \
                         ({})",
                        leaving.len(),
                        leaving.join(", ")
                    );
                    set_waiting(out, n, text);
                }
                return;
            }
        }
        let never = pod
            .spec
            .as_ref()
            .and_then(|s| s.preemption_policy.as_deref())
            == Some("Never");
        if never {
            return;
        }
        let Some(budgets) = self.budgets() else {
            for n in candidates {
                append(
                    out,
                    n,
                    "preemption waits for the PodDisruptionBudgets to be listed",
                );
            }
            return;
        };
        let parts = cx.view.preemption_parts(candidates, &uid, &HashSet::new());
        if parts.is_empty() {
            return;
        }
        let (priority, placed) = placed_all(pod, &parts, &budgets);
        // Nothing of lower priority anywhere (every pod of a cluster without PriorityClasses is
        // 0): kube-scheduler's eligibility says no already; spare the service the call.
        if !placed
            .iter()
            .flat_map(|n| &n.workloads)
            .any(|w| w.priority < priority)
        {
            cx.metrics.preemption(PreemptionOutcome::NoCandidate, 0);
            for p in &parts {
                append(out, &p.node.name, plan::NO_LOWER_PRIORITY);
            }
            return;
        }
        let resp = match ask(cx, workload, &parts, priority, placed.clone()).await {
            Ok(r) => r,
            Err(text) => {
                let note = format!("preemption: {text}");
                for n in candidates {
                    append(out, n, &note);
                }
                return;
            }
        };
        for (node, note) in plan::node_notes(&resp) {
            append(out, &node, &note);
        }
        let verdict = match plan::verdict(&resp, &parts) {
            Ok(v) => v,
            Err(e) => {
                cx.metrics.preemption(PreemptionOutcome::Error, 0);
                tracing::warn!(error = %e, "unusable preemption answer");
                return;
            }
        };
        let mut plan = match verdict {
            Verdict::NotNeeded => {
                cx.metrics.preemption(PreemptionOutcome::NotNeeded, 0);
                return;
            }
            Verdict::NoCandidate => {
                cx.metrics.preemption(PreemptionOutcome::NoCandidate, 0);
                return;
            }
            Verdict::Evict(p) => p,
        };
        plan::mark_budgets(&mut plan, &placed);
        let node = plan.node.clone();
        match self.carry_out(cx, pod, &plan, &parts).await {
            Ok(()) => {
                cx.metrics
                    .preemption(PreemptionOutcome::Evicting, plan.victims.len());
                let text = waiting_text(
                    &plan
                        .victims
                        .iter()
                        .map(|v| format!("{}/{}", v.namespace, v.name))
                        .collect::<Vec<_>>()
                        .join(", "),
                    plan.victims.len(),
                    &plan.placement_text(),
                );
                set_waiting(out, &node, text);
            }
            Err((outcome, why)) => {
                if let Some(o) = outcome {
                    cx.metrics.preemption(o, 0);
                }
                append(out, &node, &why);
            }
        }
    }

    /// Holds the placement on the plan's node, evicts the victims, marks them, nominates the
    /// node and records the Events. On failure: the outcome to count (None: nothing happened,
    /// the node changed meanwhile) and the sentence for the node's failure.
    async fn carry_out(
        &self,
        cx: &Ctx<'_>,
        pod: &Pod,
        plan: &Plan,
        parts: &[NodeParts],
    ) -> Result<(), (Option<PreemptionOutcome>, String)> {
        let Some(kube) = cx.kube else {
            return Err((
                Some(PreemptionOutcome::Error),
                "preemption: no Kubernetes client to evict with".to_owned(),
            ));
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        {
            // The node as decided on, or nothing: a bind there since would change the answer.
            let _guard = cx.view.lock_node(&plan.node).await;
            let now =
                cx.view
                    .preemption_parts(std::slice::from_ref(&plan.node), &uid, &HashSet::new());
            let then = parts.iter().find(|p| p.node.name == plan.node);
            let same = match (now.first(), then) {
                (Some(a), Some(b)) => a.node == b.node && uids(a) == uids(b),
                _ => false,
            };
            if !same {
                return Err((
                    None,
                    "preemption: the node changed while deciding; looking again next time"
                        .to_owned(),
                ));
            }
            cx.view.hold(Hold {
                namespace: namespace.clone(),
                name: name.clone(),
                uid: uid.clone(),
                node: plan.node.clone(),
                bookings: plan.placement.clone(),
                victims: plan.victims.iter().map(|v| v.uid.clone()).collect(),
                victim_names: plan
                    .victims
                    .iter()
                    .map(|v| format!("{}/{}", v.namespace, v.name))
                    .collect(),
                at: Instant::now(),
                seen: false,
                offer: false,
                victims_gone_at: None,
            });
        }
        let scheduler = cx.view.names().scheduler_name.clone();
        let message =
            evict::disruption_message(&scheduler, &format!("{namespace}/{name}"), &plan.node);
        let evictor = self.evictions.as_ref().unwrap_or(kube);
        for v in plan.eviction_order() {
            if let Err(e) = evict::evict(evictor, v).await {
                cx.view.release_hold(&uid);
                let outcome = match e {
                    evict::EvictError::Refused(_) => PreemptionOutcome::Blocked,
                    evict::EvictError::Failed(_) => PreemptionOutcome::Error,
                };
                tracing::info!(
                    pod = %name, namespace = %namespace, node = %plan.node,
                    victim = %format!("{}/{}", v.namespace, v.name), error = %e,
                    "preemption given up"
                );
                return Err((
                    Some(outcome),
                    format!("preemption: evicting {}/{}: {e}", v.namespace, v.name),
                ));
            }
            evict::mark_preempted(kube, v, &message).await;
        }
        evict::nominate(kube, &namespace, &name, &plan.node).await;
        if let Some(r) = cx.recorder {
            evict::record(r, (&namespace, &name, &uid), plan);
        }
        tracing::info!(
            pod = %name, namespace = %namespace, node = %plan.node,
            victims = %plan.victims_text(), placement = %plan.placement_text(),
            "preempting"
        );
        Ok(())
    }
}

impl Preemptor {
    /// Path 2, kube-scheduler's `/preempt`: the nodes where its dry run found victims, each
    /// with those victims and the service's on top; nodes where that makes no room are left
    /// out, and none while a preemption for the pod is under way. Each accepted node's
    /// placement is offered to the pod (it counts once kube-scheduler nominates that node).
    pub async fn at_verb(
        &self,
        cx: &Ctx<'_>,
        args: &ExtenderPreemptionArgs,
        workload: &v1::Workload,
    ) -> Result<ExtenderPreemptionResult, String> {
        let pod = args
            .pod
            .as_ref()
            .ok_or("ExtenderPreemptionArgs without Pod")?;
        let names = cx.view.names();
        let counts = violations_per_node(args);
        let theirs: std::collections::BTreeMap<String, (Vec<String>, i64)> = args
            .victim_uids()
            .into_iter()
            .map(|(n, v)| {
                let c = counts.get(&n).copied().unwrap_or(0);
                (n, (v, c))
            })
            .collect();
        if !translate::requests_gpu(pod, names) {
            return Ok(unchanged(args));
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let holds = cx.view.holds_of(&uid);
        if holds.iter().any(|h| !h.offer) {
            return Ok(ExtenderPreemptionResult::default());
        }
        let Some(budgets) = self.budgets() else {
            return Ok(ExtenderPreemptionResult::default());
        };
        let node_names: Vec<String> = theirs.keys().cloned().collect();
        let gone: HashSet<String> = theirs.values().flat_map(|(v, _)| v.clone()).collect();
        let parts = cx.view.preemption_parts(&node_names, &uid, &gone);
        let (priority, placed) = placed_all(pod, &parts, &budgets);
        let resp = ask(cx, workload, &parts, priority, placed).await?;
        let nodes: Vec<v1::Node> = parts.iter().map(|p| p.node.clone()).collect();
        let accepted = verb::accept(&theirs, &resp);
        // Names for the Events and texts, kube-scheduler's victims included.
        let names_by_uid: std::collections::HashMap<String, String> = cx
            .view
            .preemption_parts(&node_names, &uid, &HashSet::new())
            .iter()
            .flat_map(|p| &p.pods)
            .filter_map(|(p, _)| {
                let m = &p.metadata;
                Some((
                    m.uid.clone()?,
                    format!(
                        "{}/{}",
                        m.namespace.as_deref().unwrap_or(""),
                        m.name.as_deref().unwrap_or("")
                    ),
                ))
            })
            .collect();
        for (node, a) in &accepted {
            let containers = match &a.containers {
                Some(c) => c.clone(),
                None => {
                    let req = v1::AllocateRequest {
                        options: cx.view.options(workload, &nodes, None),
                        nodes: nodes.clone(),
                        workload: Some(workload.clone()),
                        restrict_to_node_names: vec![node.clone()],
                        node_refs: Vec::new(),
                        node_set: None,
                    };
                    match cx.service.allocate_request(req).await {
                        Ok(r) if r.placed => r.containers,
                        _ => continue,
                    }
                }
            };
            let victim_names = a
                .victims
                .iter()
                .map(|v| names_by_uid.get(v).cloned().unwrap_or_else(|| v.clone()))
                .collect();
            cx.view.hold(Hold {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: uid.clone(),
                node: node.clone(),
                bookings: gpusched_hami::bookings(&v1::AllocationResult {
                    containers,
                    ..v1::AllocationResult::default()
                }),
                victims: a.victims.clone(),
                victim_names,
                at: Instant::now(),
                seen: false,
                offer: true,
                victims_gone_at: None,
            });
        }
        let most = accepted
            .values()
            .map(|a| a.victims.len())
            .max()
            .unwrap_or(0);
        if accepted.is_empty() {
            cx.metrics.preemption(PreemptionOutcome::NoCandidate, 0);
        } else {
            cx.metrics.preemption(PreemptionOutcome::Evicting, most);
        }
        tracing::info!(
            pod = ?pod.metadata.name, namespace = ?pod.metadata.namespace,
            offered = theirs.len(), accepted = ?accepted.keys().collect::<Vec<_>>(),
            "preemption verb"
        );
        Ok(verb::result(&accepted))
    }
}

/// The pod's priority and the placed workloads of every node of `parts` for it.
fn placed_all(pod: &Pod, parts: &[NodeParts], budgets: &[Budget]) -> (i32, Vec<v1::NodePlaced>) {
    let priority = placed::priority(pod);
    let now = now_ms();
    let placed = parts
        .iter()
        .map(|p| placed::node_placed(p, priority, budgets, now))
        .collect();
    (priority, placed)
}

/// Asks the service who must leave which of `parts` so that `workload` (of `priority`) fits; a
/// failed call is counted and given back as the text for the failures.
async fn ask(
    cx: &Ctx<'_>,
    workload: &v1::Workload,
    parts: &[NodeParts],
    priority: i32,
    placed: Vec<v1::NodePlaced>,
) -> Result<v1::PreemptResponse, String> {
    let req = v1::PreemptRequest {
        options: cx
            .view
            .options(workload, parts.iter().map(|p| &p.node), None),
        nodes: parts.iter().map(|p| p.node.clone()).collect(),
        workload: Some(workload.clone()),
        priority,
        placed,
        node_refs: Vec::new(),
        node_set: None,
    };
    cx.service.preempt_request(req).await.map_err(|e| {
        cx.metrics.preemption(PreemptionOutcome::Error, 0);
        (cx.error_text)(&e)
    })
}

/// kube-scheduler's victims as it sent them (the answer when the shim has no opinion: a pod
/// without GPU requests, or preemption off).
pub fn unchanged(args: &ExtenderPreemptionArgs) -> ExtenderPreemptionResult {
    let counts = violations_per_node(args);
    verb::result(
        &args
            .victim_uids()
            .into_iter()
            .map(|(n, v)| {
                let c = counts.get(&n).copied().unwrap_or(0);
                let a = verb::Accepted {
                    victims: v,
                    budget_violations: c,
                    containers: None,
                };
                (n, a)
            })
            .collect(),
    )
}

/// kube-scheduler's count of budget violations per node.
fn violations_per_node(args: &ExtenderPreemptionArgs) -> std::collections::BTreeMap<String, i64> {
    if let Some(m) = &args.node_name_to_meta_victims {
        return m
            .iter()
            .map(|(n, v)| (n.clone(), v.as_ref().map_or(0, |v| v.num_pdb_violations)))
            .collect();
    }
    args.node_name_to_victims
        .iter()
        .flatten()
        .map(|(n, v)| (n.clone(), v.as_ref().map_or(0, |v| v.num_pdb_violations)))
        .collect()
}

/// The uids of a node's pods, sorted.
fn uids(p: &NodeParts) -> Vec<&str> {
    let mut v: Vec<&str> = p
        .pods
        .iter()
        .filter_map(|(pod, _)| pod.metadata.uid.as_deref())
        .collect();
    v.sort_unstable();
    v
}
