//! The shim's request logic: filter, prioritize and bind against the cluster view, with every
//! decision taken by the gpusched service.

use std::sync::Arc;
use std::time::Instant;

use gpusched_client::{PreparedNode, v1};
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::events::Recorder;
use kube::{Api, Resource};
use opentelemetry::KeyValue;
use opentelemetry::context::FutureExt as _;

use crate::answer::{filter_error, filter_result, invalid_pod, pass_all, priorities};
use crate::events::{self, Warning};
use crate::extender_v1::{ExtenderArgs, ExtenderBindingArgs, ExtenderFilterResult, HostPriority};
use crate::extender_v1::{ExtenderPreemptionArgs, ExtenderPreemptionResult};
use crate::leader::Leadership;
use crate::metrics::{ExtenderCall, ExtenderOutcome, Metrics, QuotaStage};
use crate::preempt::{Ctx, Preemptor};
use crate::quota::NamespaceQuota;
use crate::traces::{PodRef, PodTraces};
use crate::translate;
use crate::view::{Assumed, ClusterView};

/// Result of a bind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindOutcome {
    /// Bound; `devices` is the `-allocated` annotation for GPU pods.
    Bound {
        /// The node.
        node: String,
        /// Cards written.
        devices: Option<String>,
    },
    /// Not bound, with the reason for kube-scheduler.
    Failed(String),
}

/// Everything the handlers share.
pub struct Shim {
    /// Cluster view.
    pub view: Arc<ClusterView>,
    /// gpusched service client.
    pub service: gpusched_client::Client,
    /// Kubernetes client (None: bind unavailable, for tests).
    pub kube: Option<kube::Client>,
    /// Leadership.
    pub leader: Arc<Leadership>,
    /// Event recorder.
    pub recorder: Option<Recorder>,
    /// Reserve the preferred node's cards at prioritize (see [`crate::view::Assumed::tentative`]).
    pub reserve: bool,
    /// Metric families (served through [`Shim::registry`]).
    pub metrics: Metrics,
    /// The extender calls' spans, one trace per pod (see [`crate::traces`]).
    pub traces: PodTraces,
    /// Preemption (None: off; see [`crate::preempt`]).
    pub preemptor: Option<Preemptor>,
}

impl std::fmt::Debug for Shim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shim")
            .field("view", &self.view)
            .field("leader", &self.leader)
            .field("kube", &self.kube.is_some())
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}

/// The text of a service error: INVALID_ARGUMENT field violations as `field: description`
/// (each names the offending key), anything else prefixed with where it came from.
pub fn service_error_text(e: &gpusched_client::Error) -> String {
    if let Some(api) = e.api()
        && api.is_invalid_argument()
        && !api.field_violations.is_empty()
    {
        let v: Vec<(String, String)> = api
            .field_violations
            .iter()
            .map(|v| (v.field.clone(), v.description.clone()))
            .collect();
        return translate::violations_text(&v);
    }
    format!("gpusched service: {e}")
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
}

/// A valid label value (the node name as label value, when it fits).
fn label_value_ok(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && v.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && v.chars().last().is_some_and(|c| c.is_ascii_alphanumeric())
}

impl Shim {
    /// The metrics registry to serve: [`Shim::metrics`] and the state gauges (leadership,
    /// informer sync, assume cache), read at each scrape.
    pub fn registry(&self) -> prometheus_client::registry::Registry {
        crate::metrics::registry(&self.metrics, self.view.clone(), self.leader.clone())
    }

    /// Why `/readyz` fails, or None when ready (synced and leading).
    pub fn not_ready_reason(&self) -> Option<String> {
        if !self.view.is_synced() {
            return Some("cluster view not synced yet".to_owned());
        }
        if !self.leader.is_leader() {
            return Some(format!(
                "{} is not the leader (standby replica)",
                self.leader.identity()
            ));
        }
        None
    }

    /// What preemption works with.
    fn preempt_ctx(&self) -> Ctx<'_> {
        Ctx {
            view: &self.view,
            service: &self.service,
            kube: self.kube.as_ref(),
            recorder: self.recorder.as_ref(),
            metrics: &self.metrics,
            error_text: service_error_text,
        }
    }

    /// The snapshot of these candidates; nodes the informer has not shown yet (kube-scheduler
    /// may know a node a few milliseconds earlier) are read from the API.
    async fn snapshot(&self, candidates: &[String], uid: &str) -> crate::view::Snapshot {
        let snap = self.view.snapshot(candidates, uid);
        // Not in the cache yet: the only reason a candidate is unusable but resolvable.
        let missing: Vec<String> = snap
            .unusable
            .iter()
            .filter(|u| !u.2)
            .map(|u| u.0.clone())
            .collect();
        let (false, Some(kube)) = (missing.is_empty(), &self.kube) else {
            return snap;
        };
        let mut fetched = std::collections::HashMap::new();
        let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(kube.clone());
        for name in missing {
            match api.get_opt(&name).await {
                Ok(Some(n)) => {
                    fetched.insert(name, n);
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(node = %name, error = %e, "cannot read node"),
            }
        }
        self.view.snapshot_with(candidates, uid, &fetched)
    }

    /// The pod as a workload, with its namespace's quota budget when one applies (the pod's
    /// own decision or reservation left out of what the namespace holds).
    fn workload(&self, pod: &Pod, uid: &str) -> (v1::Workload, Option<NamespaceQuota>) {
        let mut w = translate::workload(pod, self.view.names());
        let quota = self.view.quota(&w.namespace, uid);
        w.quota = quota.as_ref().map(NamespaceQuota::budget);
        (w, quota)
    }

    fn check_pod_scheduler(&self, pod: &Pod) -> Result<(), String> {
        let names = self.view.names();
        let got = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("");
        if got == names.scheduler_name {
            Ok(())
        } else {
            Err(format!(
                "gpusched-kube: pod has spec.schedulerName {got:?}, not {:?}: its GPU bookings \
                 would not be counted; set spec.schedulerName: {}",
                names.scheduler_name, names.scheduler_name
            ))
        }
    }

    /// `/filter`: every feasible candidate, and why the others fail.
    pub async fn filter(&self, args: &ExtenderArgs) -> ExtenderFilterResult {
        let start = Instant::now();
        let span = self.traces.start(
            ExtenderCall::Filter,
            PodRef::of(args.pod.as_ref()),
            vec![candidates_attribute(args)],
        );
        let r = self.filter_inner(args).with_context(span.context()).await;
        let outcome = if r.error.is_empty() {
            ExtenderOutcome::Ok
        } else {
            ExtenderOutcome::Error
        };
        self.metrics
            .extender(ExtenderCall::Filter, outcome, start.elapsed().as_secs_f64());
        let feasible = r.node_names.as_ref().map_or(0, Vec::len);
        tracing::debug!(
            pod = ?args.pod.as_ref().and_then(|p| p.metadata.name.as_deref()),
            feasible,
            us = start.elapsed().as_micros() as u64, "filter"
        );
        if !r.error.is_empty() {
            tracing::info!(error = %r.error, trace_id = %span.trace_id(), "filter error");
        }
        span.set(vec![KeyValue::new(
            "gpusched.feasible_nodes",
            i64::try_from(feasible).unwrap_or(i64::MAX),
        )]);
        span.end(outcome, Some(r.error.as_str()).filter(|e| !e.is_empty()));
        r
    }

    async fn filter_inner(&self, args: &ExtenderArgs) -> ExtenderFilterResult {
        if let Some(r) = self.not_ready_reason() {
            return filter_error(format!("gpusched-kube: {r}; retry"));
        }
        let Some(pod) = &args.pod else {
            return filter_error("gpusched-kube: ExtenderArgs without Pod");
        };
        let names = self.view.names();
        if !translate::requests_gpu(pod, names) {
            return pass_all(args);
        }
        if let Err(e) = self.check_pod_scheduler(pod) {
            return filter_error(e);
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let t = Instant::now();
        let snap = self.snapshot(&args.candidates(), &uid).await;
        let (workload, quota) = self.workload(pod, &uid);
        let req = v1::FilterRequest {
            node_set: None,
            nodes: Vec::new(),
            options: self
                .view
                .options(&workload, snap.nodes.iter().map(|n| &**n), None),
            workload: Some(workload.clone()),
            node_refs: Vec::new(),
        };
        let snap_us = t.elapsed().as_micros() as u64;
        let resp = self.service.filter_prepared(req, &snap.prepared).await;
        tracing::trace!(
            snap_us,
            rpc_us = t.elapsed().as_micros() as u64 - snap_us,
            "filter timing"
        );
        match resp {
            Ok(resp) if !resp.requests_gpu => pass_all(args),
            Ok(mut resp) => {
                if let Some(q) = &quota
                    && crate::quota::explain(&mut resp.failed_nodes, q)
                    && resp.feasible_node_names.is_empty()
                {
                    self.metrics.quota_refusal(&q.namespace, QuotaStage::Filter);
                }
                let mut out = filter_result(args, &resp, &snap.unusable);
                // kube-scheduler does not call prioritize when one node is left: reserve here.
                if let Some([only]) = out.node_names.as_deref() {
                    self.reserve(pod, &uid, only, None).await;
                }
                // No candidate fits: who must leave which node (path 1 of crate::preempt).
                if resp.feasible_node_names.is_empty()
                    && let Some(p) = &self.preemptor
                {
                    let candidates = args.candidates();
                    p.at_filter(&self.preempt_ctx(), pod, &workload, &candidates, &mut out)
                        .await;
                }
                out
            }
            // An invalid request stays invalid until the pod changes: unschedulable with the
            // reason, not an error kube-scheduler retries after every backoff.
            Err(e) if e.api().is_some_and(|a| a.is_invalid_argument()) => invalid_pod(
                args,
                &format!(
                    "gpusched: invalid pod, unschedulable until it changes: {}",
                    service_error_text(&e)
                ),
            ),
            Err(e) => filter_error(service_error_text(&e)),
        }
    }

    /// `/prioritize`: the service's node scores on the extender's 0..10 scale.
    pub async fn prioritize(&self, args: &ExtenderArgs) -> Result<Vec<HostPriority>, String> {
        let start = Instant::now();
        let span = self.traces.start(
            ExtenderCall::Prioritize,
            PodRef::of(args.pod.as_ref()),
            vec![candidates_attribute(args)],
        );
        let r = self
            .prioritize_inner(args)
            .with_context(span.context())
            .await;
        let outcome = if r.is_ok() {
            ExtenderOutcome::Ok
        } else {
            ExtenderOutcome::Error
        };
        self.metrics.extender(
            ExtenderCall::Prioritize,
            outcome,
            start.elapsed().as_secs_f64(),
        );
        tracing::debug!(
            pod = ?args.pod.as_ref().and_then(|p| p.metadata.name.as_deref()),
            us = start.elapsed().as_micros() as u64, "prioritize"
        );
        if let Ok(list) = &r
            && let Some(top) = list.iter().max_by_key(|h| h.score)
        {
            span.set(vec![KeyValue::new("gpusched.top_node", top.host.clone())]);
        }
        span.end(outcome, r.as_ref().err().map(String::as_str));
        r
    }

    async fn prioritize_inner(&self, args: &ExtenderArgs) -> Result<Vec<HostPriority>, String> {
        if let Some(r) = self.not_ready_reason() {
            return Err(r);
        }
        let pod = args.pod.as_ref().ok_or("ExtenderArgs without Pod")?;
        let names = self.view.names();
        let candidates = args.candidates();
        if !translate::requests_gpu(pod, names) {
            return Ok(priorities(&candidates, &[]));
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let snap = self.snapshot(&candidates, &uid).await;
        let workload = self.workload(pod, &uid).0;
        let req = v1::ScoreRequest {
            node_set: None,
            nodes: Vec::new(),
            options: self
                .view
                .options(&workload, snap.nodes.iter().map(|n| &**n), None),
            workload: Some(workload),
            node_refs: Vec::new(),
        };
        let resp = self
            .service
            .score_prepared(req, &snap.prepared)
            .await
            .map_err(|e| service_error_text(&e))?;
        let list = priorities(&candidates, &resp.scores);
        // The top node is where kube-scheduler will assume the pod (the extender's 10 outweighs
        // its plugins): reserve the cards Allocate would give there until the bind comes.
        if let Some(top) = resp.scores.first()
            && let Some(i) = snap.prepared.iter().position(|n| n.name == top.node_name)
            && let (Some(node), Some(prepared)) = (snap.nodes.get(i), snap.prepared.get(i))
        {
            let current = Some((node.clone(), prepared.clone()));
            self.reserve(pod, &uid, &top.node_name, current).await;
        }
        Ok(list)
    }

    /// Books, tentatively, what `Allocate` gives the pod on `node` (see
    /// [`crate::view::Assumed::tentative`]): the next pods' filter and prioritize then see the
    /// capacity kube-scheduler has already assumed taken, instead of finding out at bind.
    async fn reserve(
        &self,
        pod: &Pod,
        uid: &str,
        node: &str,
        current: Option<(Arc<v1::Node>, Arc<PreparedNode>)>,
    ) {
        if !self.reserve || uid.is_empty() {
            return;
        }
        let (node_whole, node_msg) = match current {
            Some(n) => n,
            None => {
                let snap = self.snapshot(&[node.to_owned()], uid).await;
                match (
                    snap.nodes.into_iter().next(),
                    snap.prepared.into_iter().next(),
                ) {
                    (Some(w), Some(p)) => (w, p),
                    _ => return,
                }
            }
        };
        let workload = self.workload(pod, uid).0;
        let req = v1::AllocateRequest {
            node_set: None,
            nodes: Vec::new(),
            // Only the booking is read.
            options: self.view.options(
                &workload,
                [&*node_whole],
                Some(failed_nodes(v1::FailedNodes::None)),
            ),
            workload: Some(workload),
            restrict_to_node_names: vec![node.to_owned()],
            node_refs: Vec::new(),
        };
        match self.service.allocate_prepared(req, &[node_msg]).await {
            Ok(r) if r.placed && r.requests_gpu => {
                let Ok((bookings, mig)) = translate::decision_usage(&r) else {
                    return;
                };
                self.view.reserve(Assumed {
                    namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                    name: pod.metadata.name.clone().unwrap_or_default(),
                    uid: uid.to_owned(),
                    node: node.to_owned(),
                    bookings,
                    mig,
                    init: init_containers(&r),
                    annotation: String::new(),
                    at: Instant::now(),
                    seen: false,
                    tentative: true,
                });
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, node, "reservation not made"),
        }
    }

    /// `/preempt` (kube-scheduler's preemptVerb, path 2 of [`crate::preempt`]): its victims
    /// per node, card-exact; without preemption, its victims unchanged.
    pub async fn preempt(
        &self,
        args: &ExtenderPreemptionArgs,
    ) -> Result<ExtenderPreemptionResult, String> {
        let start = Instant::now();
        let r = match (self.not_ready_reason(), &self.preemptor) {
            (Some(r), _) => Err(format!("gpusched-kube: {r}; retry")),
            (None, Some(p)) => match &args.pod {
                Some(pod) => {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    let (workload, _) = self.workload(pod, &uid);
                    p.at_verb(&self.preempt_ctx(), args, &workload).await
                }
                None => Err("ExtenderPreemptionArgs without Pod".to_owned()),
            },
            (None, None) => Ok(crate::preempt::unchanged(args)),
        };
        let outcome = if r.is_ok() {
            ExtenderOutcome::Ok
        } else {
            ExtenderOutcome::Error
        };
        self.metrics.extender(
            ExtenderCall::Preempt,
            outcome,
            start.elapsed().as_secs_f64(),
        );
        r
    }

    /// `/bind`: Allocate on the chosen node against the current view, then one Binding that
    /// carries HAMi's annotations (and the `hami.io/vgpu-node` label): nodeName and the
    /// decision are written atomically, so no crash can leave one without the other.
    pub async fn bind(&self, args: &ExtenderBindingArgs) -> BindOutcome {
        let start = Instant::now();
        let span = self.traces.start(
            ExtenderCall::Bind,
            PodRef {
                namespace: &args.pod_namespace,
                name: &args.pod_name,
                uid: &args.pod_uid,
            },
            vec![KeyValue::new("k8s.node.name", args.node.clone())],
        );
        let out = self.bind_inner(args).with_context(span.context()).await;
        let outcome = match &out {
            BindOutcome::Bound {
                devices: Some(_), ..
            } => ExtenderOutcome::BoundGpu,
            BindOutcome::Bound { devices: None, .. } => ExtenderOutcome::BoundNoGpu,
            BindOutcome::Failed(_) => ExtenderOutcome::Error,
        };
        self.metrics
            .extender(ExtenderCall::Bind, outcome, start.elapsed().as_secs_f64());
        match &out {
            BindOutcome::Bound { node, devices } => {
                tracing::info!(
                    pod = %args.pod_name, namespace = %args.pod_namespace, node = %node,
                    devices = devices.as_deref().unwrap_or(""),
                    ms = start.elapsed().as_millis() as u64, trace_id = %span.trace_id(), "bound"
                );
                if let Some(d) = devices {
                    span.set(vec![KeyValue::new("gpusched.devices", d.clone())]);
                }
            }
            BindOutcome::Failed(e) => {
                self.view.forget_reservation(&args.pod_uid);
                tracing::warn!(
                    pod = %args.pod_name, namespace = %args.pod_namespace, node = %args.node,
                    error = %e, trace_id = %span.trace_id(), "bind failed"
                );
                self.publish_failure(args, e);
            }
        }
        let error = match &out {
            BindOutcome::Failed(e) => Some(e.as_str()),
            BindOutcome::Bound { .. } => None,
        };
        span.end(outcome, error);
        out
    }

    fn publish_failure(&self, args: &ExtenderBindingArgs, error: &str) {
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(args.pod_name.clone()),
            namespace: Some(args.pod_namespace.clone()),
            uid: Some(args.pod_uid.clone()).filter(|u| !u.is_empty()),
            ..ObjectReference::default()
        };
        let note = if error.contains(&args.node) {
            error.to_owned()
        } else {
            format!("node {}: {error}", args.node)
        };
        let w = Warning {
            regarding,
            reason: "GpuschedBindFailed",
            action: "Bind",
            note,
        };
        events::warn(self.recorder.as_ref(), &self.leader, w);
    }

    async fn bind_inner(&self, args: &ExtenderBindingArgs) -> BindOutcome {
        if let Some(r) = self.not_ready_reason() {
            return BindOutcome::Failed(format!("gpusched-kube: {r}; retry"));
        }
        let Some(kube) = &self.kube else {
            return BindOutcome::Failed("gpusched-kube: no Kubernetes client".into());
        };
        let api: Api<Pod> = Api::namespaced(kube.clone(), &args.pod_namespace);
        let pod = match self
            .view
            .pod(&args.pod_namespace, &args.pod_name, &args.pod_uid)
        {
            Some(p) => p,
            None => match api.get(&args.pod_name).await {
                Ok(p) => Arc::new(p),
                Err(e) => {
                    return BindOutcome::Failed(format!(
                        "gpusched-kube: cannot read pod {}/{}: {e}",
                        args.pod_namespace, args.pod_name
                    ));
                }
            },
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !args.pod_uid.is_empty() && uid != args.pod_uid {
            return BindOutcome::Failed(format!(
                "gpusched-kube: pod {}/{} has uid {uid}, not {}",
                args.pod_namespace, args.pod_name, args.pod_uid
            ));
        }
        let names = self.view.names().clone();
        if !translate::requests_gpu(&pod, &names) {
            return match create_binding(&api, args, &uid, None).await {
                Ok(()) => BindOutcome::Bound {
                    node: args.node.clone(),
                    devices: None,
                },
                Err(e) => BindOutcome::Failed(format!("gpusched-kube: binding failed: {e}")),
            };
        }
        if let Err(e) = self.check_pod_scheduler(&pod) {
            return BindOutcome::Failed(e);
        }
        let node = args.node.clone();
        let guard = self.view.lock_node(&node).await;
        // With a quota, binds in the namespace take its budget one at a time too.
        let namespace_guard = match self.view.quota_limits(&args.pod_namespace) {
            Some(_) => Some(self.view.lock_namespace(&args.pod_namespace).await),
            None => None,
        };
        if !self.leader.is_leader() {
            return BindOutcome::Failed("gpusched-kube: lost leadership; retry".into());
        }
        let snap = self.snapshot(std::slice::from_ref(&node), &uid).await;
        if snap.nodes.is_empty() {
            let why = snap
                .unusable
                .first()
                .map_or_else(|| "unknown node".to_owned(), |u| u.1.clone());
            return BindOutcome::Failed(format!("node {node}: {why}"));
        }
        let (workload, quota) = self.workload(&pod, &uid);
        let req = v1::AllocateRequest {
            node_set: None,
            nodes: Vec::new(),
            // Why the node failed is read only when the pod is not placed.
            options: self.view.options(
                &workload,
                snap.nodes.iter().map(|n| &**n),
                Some(failed_nodes(v1::FailedNodes::WhenUnplaced)),
            ),
            workload: Some(workload),
            restrict_to_node_names: vec![node.clone()],
            node_refs: Vec::new(),
        };
        let mut result = match self.service.allocate_prepared(req, &snap.prepared).await {
            Ok(r) => r,
            Err(e) => return BindOutcome::Failed(service_error_text(&e)),
        };
        if let Some(q) = &quota
            && !result.placed
            && crate::quota::explain(&mut result.failed_nodes, q)
        {
            self.metrics.quota_refusal(&q.namespace, QuotaStage::Bind);
        }
        if !result.requests_gpu {
            return match create_binding(&api, args, &uid, None).await {
                Ok(()) => BindOutcome::Bound {
                    node,
                    devices: None,
                },
                Err(e) => BindOutcome::Failed(format!("gpusched-kube: binding failed: {e}")),
            };
        }
        if !result.placed || result.node_name != node {
            let why = result
                .failed_nodes
                .iter()
                .find(|f| f.node_name == node)
                .map_or_else(|| "not placed".to_owned(), |f| f.message.clone());
            return BindOutcome::Failed(format!("node {node} cannot host the pod now: {why}"));
        }
        let annotations = translate::bind_annotations(&result, &node, unix_now(), &names);
        let devices = annotations
            .get(&names.annotations.devices_allocated)
            .cloned()
            .unwrap_or_default();
        let (bookings, mig) = match translate::decision_usage(&result) {
            Ok(u) => u,
            Err(e) => return BindOutcome::Failed(format!("gpusched-kube: decision: {e}")),
        };
        self.view.assume(Assumed {
            namespace: args.pod_namespace.clone(),
            name: args.pod_name.clone(),
            uid: uid.clone(),
            node: node.clone(),
            bookings,
            mig,
            init: init_containers(&result),
            annotation: devices.clone(),
            at: Instant::now(),
            seen: false,
            tentative: false,
        });
        // The decision is in the assume cache: the next bind to this node (or namespace) sees
        // it, so the Binding itself (an API round trip) runs outside the locks.
        drop(namespace_guard);
        drop(guard);
        if !self.leader.is_leader() {
            self.view.forget(&uid);
            return BindOutcome::Failed("gpusched-kube: lost leadership; retry".into());
        }
        let mut labels = std::collections::BTreeMap::new();
        if label_value_ok(&node) {
            labels.insert(names.annotations.vgpu_node.clone(), node.clone());
        }
        match create_binding(&api, args, &uid, Some((annotations, labels))).await {
            Ok(()) => BindOutcome::Bound {
                node,
                devices: Some(devices),
            },
            Err(e) => {
                self.view.forget(&uid);
                BindOutcome::Failed(format!("gpusched-kube: binding failed: {e}"))
            }
        }
    }
}

/// `gpusched.candidate_nodes`: how many nodes kube-scheduler offered.
fn candidates_attribute(args: &ExtenderArgs) -> KeyValue {
    let n = match &args.node_names {
        Some(names) => names.len(),
        None => args
            .nodes
            .as_ref()
            .and_then(|l| l.get("items"))
            .and_then(|i| i.as_array())
            .map_or(0, Vec::len),
    };
    KeyValue::new(
        "gpusched.candidate_nodes",
        i64::try_from(n).unwrap_or(i64::MAX),
    )
}

/// Creates the pod's Binding (with the uid as precondition), carrying annotations and labels
/// that the API server merges into the pod in the same write.
async fn create_binding(
    api: &Api<Pod>,
    args: &ExtenderBindingArgs,
    uid: &str,
    metadata: Option<(
        std::collections::BTreeMap<String, String>,
        std::collections::BTreeMap<String, String>,
    )>,
) -> Result<(), kube::Error> {
    let (annotations, labels) = metadata.unwrap_or_default();
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(args.pod_name.clone()),
            namespace: Some(args.pod_namespace.clone()),
            uid: Some(uid.to_owned()).filter(|u| !u.is_empty()),
            annotations: Some(annotations).filter(|m| !m.is_empty()),
            labels: Some(labels).filter(|m| !m.is_empty()),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some(
                <k8s_openapi::api::core::v1::Node as Resource>::api_version(&()).into_owned(),
            ),
            kind: Some("Node".into()),
            name: Some(args.node.clone()),
            ..ObjectReference::default()
        },
    };
    let _: serde_json::Value = api
        .create_subresource("binding", &args.pod_name, &PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// How many of an allocation's containers are init containers (they come first).
fn init_containers(result: &v1::AllocationResult) -> usize {
    result.containers.iter().filter(|c| c.init).count()
}

/// Options asking for `shown` failed nodes (and the server's defaults for everything else).
fn failed_nodes(shown: v1::FailedNodes) -> v1::PlacementOptions {
    v1::PlacementOptions {
        failed_nodes: shown as i32,
        ..v1::PlacementOptions::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_as_label_values() {
        assert!(label_value_ok("gpu-node-1"));
        assert!(label_value_ok("node.example.com"));
        assert!(!label_value_ok(&"n".repeat(64)));
        assert!(!label_value_ok("-x"));
        assert!(!label_value_ok(""));
    }
}
