//! Asking the service about one pod on the shim's current view: its candidate nodes, its
//! resolved request, and the service's Filter / Score / Allocate answers, with explanations.
//! Nothing is booked: these are the stateless calls the extender makes, on a client of the
//! view's own (so that they never replace the node set the extender's calls keep).

use std::sync::Arc;

use gpusched_client::v1;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::quota::NamespaceQuota;
use crate::shim::service_error_text;
use crate::view::{ClusterView, Snapshot};
use crate::web::model::Verdict;
use crate::web::selector::Selector;

/// The view, the service and the scope (the page's label selector) one question is asked in.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    /// The shim's cluster view.
    pub view: &'a ClusterView,
    /// A service client of the web view's own.
    pub service: &'a gpusched_client::Client,
    /// Only nodes with these labels.
    pub scope: &'a Selector,
}

/// A service error as a verdict: a refused workload (INVALID_ARGUMENT, its violations naming
/// their fields) or a call that could not be made.
fn verdict_of(e: &gpusched_client::Error) -> Verdict {
    if e.api().is_some_and(|a| a.is_invalid_argument()) {
        Verdict::Invalid {
            error: service_error_text(e),
        }
    } else {
        Verdict::Unknown {
            error: service_error_text(e),
        }
    }
}

/// Options asking for explanations and every failed node.
fn explained() -> v1::PlacementOptions {
    v1::PlacementOptions {
        explain: true,
        failed_nodes: v1::FailedNodes::All as i32,
        ..v1::PlacementOptions::default()
    }
}

impl Ask<'_> {
    /// Names of the GPU nodes (those with an inventory annotation) in scope whose labels also
    /// satisfy `node_selector`, sorted.
    pub fn node_names(&self, node_selector: &Selector) -> Vec<String> {
        let register = &self.view.names().annotations.node_register;
        let sel = self.scope.and(node_selector);
        let mut names: Vec<String> = self
            .view
            .nodes()
            .iter()
            .filter(|n| n.annotations().contains_key(register))
            .filter(|n| sel.matches(n.metadata.labels.as_ref()))
            .map(|n| n.name_any())
            .collect();
        names.sort();
        names
    }

    /// The pod's candidate nodes as the service sees them: the GPU nodes in scope its
    /// `spec.nodeSelector` allows (kube-scheduler's other constraints, such as affinity and
    /// taints, are not applied), with current usage and without the pod's own booking.
    pub fn candidates(&self, pod: &Pod) -> Snapshot {
        let own = Selector::of_map(pod.spec.as_ref().and_then(|s| s.node_selector.as_ref()));
        let names = self.node_names(&own);
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        self.view.snapshot(&names, uid)
    }

    /// The workload's GPU containers after defaults (the service's `ValidateWorkload`).
    pub async fn resolve(&self, w: &v1::Workload) -> Result<Vec<v1::ResolvedContainer>, Verdict> {
        let r = self
            .service
            .validate_workload(w.clone())
            .await
            .map_err(|e| verdict_of(&e))?;
        if !r.valid {
            let v: Vec<(String, String)> = r
                .violations
                .iter()
                .map(|v| (v.field.clone(), v.description.clone()))
                .collect();
            return Err(Verdict::Invalid {
                error: crate::translate::violations_text(&v),
            });
        }
        Ok(r.containers)
    }

    /// `Filter` with explanations over `snap`.
    pub async fn filter(
        &self,
        w: &v1::Workload,
        snap: &Snapshot,
    ) -> Result<v1::FilterResponse, Verdict> {
        let req = v1::FilterRequest {
            nodes: Vec::new(),
            workload: Some(w.clone()),
            options: self
                .view
                .options(w, snap.nodes.iter().map(|n| &**n), Some(explained())),
            node_refs: Vec::new(),
            node_set: None,
        };
        self.service
            .filter_prepared(req, &snap.prepared)
            .await
            .map_err(|e| verdict_of(&e))
    }

    /// `Score` over `snap` (the ranking, most preferred first).
    pub async fn score(
        &self,
        w: &v1::Workload,
        snap: &Snapshot,
    ) -> Result<v1::ScoreResponse, Verdict> {
        let req = v1::ScoreRequest {
            nodes: Vec::new(),
            workload: Some(w.clone()),
            options: self.view.options(w, snap.nodes.iter().map(|n| &**n), None),
            node_refs: Vec::new(),
            node_set: None,
        };
        self.service
            .score_prepared(req, &snap.prepared)
            .await
            .map_err(|e| verdict_of(&e))
    }

    /// `Allocate` over `snap` (only on `only` when given, as the bind does), with explanations
    /// when `explain`; failed nodes only when nothing is placed.
    pub async fn allocate(
        &self,
        w: &v1::Workload,
        snap: &Snapshot,
        only: Option<&str>,
        explain: bool,
    ) -> Result<v1::AllocationResult, Verdict> {
        let req = v1::AllocateRequest {
            nodes: Vec::new(),
            workload: Some(w.clone()),
            options: self.view.options(
                w,
                snap.nodes.iter().map(|n| &**n),
                Some(v1::PlacementOptions {
                    explain,
                    failed_nodes: v1::FailedNodes::WhenUnplaced as i32,
                    ..v1::PlacementOptions::default()
                }),
            ),
            restrict_to_node_names: only.map(str::to_owned).into_iter().collect(),
            node_refs: Vec::new(),
            node_set: None,
        };
        let nodes: Vec<Arc<gpusched_client::PreparedNode>> = match only {
            Some(n) => snap
                .prepared
                .iter()
                .filter(|p| p.name == n)
                .cloned()
                .collect(),
            None => snap.prepared.clone(),
        };
        self.service
            .allocate_prepared(req, &nodes)
            .await
            .map_err(|e| verdict_of(&e))
    }

    /// The pod as the extender sends it: its workload with its namespace's quota budget when a
    /// GPU quota applies (what the namespace holds without this pod), and that quota.
    pub fn workload(&self, pod: &Pod) -> (v1::Workload, Option<NamespaceQuota>) {
        let mut w = crate::translate::workload(pod, self.view.names());
        let quota = self
            .view
            .quota(&w.namespace, pod.metadata.uid.as_deref().unwrap_or(""));
        w.quota = quota.as_ref().map(NamespaceQuota::budget);
        (w, quota)
    }

    /// The pod of the store named `namespace/name`, if any.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.view.pod(namespace, name, "")
    }
}
