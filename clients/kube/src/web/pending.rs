//! Pending GPU pods and why each waits: the service's verdict on the pod's candidate nodes now,
//! its reasons grouped and its nearest miss (see `reasons.rs`, `nearest.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use gpusched_client::measure::Need;
use gpusched_client::v1;
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use kube::ResourceExt;

use crate::translate;
use crate::web::ask::Ask;
use crate::web::model::{PendingList, PendingPod, Verdict};
use crate::web::{nearest, reasons};

/// The pods of our scheduler that ask for a GPU, are not bound and not finished or being
/// deleted, oldest first (then by namespace and name).
pub fn pending_pods(ask: &Ask<'_>) -> Vec<Arc<Pod>> {
    let names = ask.view.names();
    let mut pods: Vec<Arc<Pod>> = ask
        .view
        .pods()
        .into_iter()
        .filter(|p| {
            let spec = p.spec.as_ref();
            spec.and_then(|s| s.scheduler_name.as_deref()) == Some(names.scheduler_name.as_str())
                && spec
                    .and_then(|s| s.node_name.as_deref())
                    .is_none_or(str::is_empty)
                && p.metadata.deletion_timestamp.is_none()
                && !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
                && translate::requests_gpu(p, names)
        })
        .collect();
    pods.sort_by(|a, b| {
        let key = |p: &Pod| {
            (
                p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                p.namespace().unwrap_or_default(),
                p.name_any(),
            )
        };
        key(a).cmp(&key(b))
    });
    pods
}

/// `namespace/name`.
pub fn pod_key(p: &Pod) -> String {
    format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())
}

/// The message of the pod's `PodScheduled=False` condition (kube-scheduler's), if any.
fn scheduler_message(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        })
        .and_then(|c| c.message.clone())
        .unwrap_or_default()
}

/// Per-card needs of resolved containers (the fragmentation measure's classes).
pub fn needs(resolved: &[v1::ResolvedContainer]) -> Vec<Need> {
    resolved
        .iter()
        .map(|c| Need {
            count: c.gpu_count,
            cores: c.cores_percent,
            mem_mib: c.mem_mib.unwrap_or(0),
            mem_percent: c.mem_percent.unwrap_or(0),
        })
        .collect()
}

/// The service's verdict for `pod` on its candidate nodes now, with the pod's resolved
/// containers when the service accepted them.
pub async fn verdict(ask: &Ask<'_>, pod: &Pod) -> (Verdict, Vec<v1::ResolvedContainer>) {
    let (w, quota) = ask.workload(pod);
    let resolved = match ask.resolve(&w).await {
        Ok(r) => r,
        Err(v) => return (v, Vec::new()),
    };
    let snap = ask.candidates(pod);
    let candidates = snap.nodes.len() + snap.unusable.len();
    let mut resp = match ask.filter(&w, &snap).await {
        Ok(r) => r,
        Err(v) => return (v, resolved),
    };
    if !resp.requests_gpu || !resp.feasible_node_names.is_empty() {
        let feasible = if resp.requests_gpu {
            resp.feasible_node_names.len()
        } else {
            snap.nodes.len()
        };
        return (
            Verdict::Fits {
                candidates,
                feasible,
            },
            resolved,
        );
    }
    // The namespace's quota, named when some node failed by it.
    let quota = quota
        .filter(|q| crate::quota::explain(&mut resp.failed_nodes, q))
        .map(|q| q.note())
        .unwrap_or_default();
    let v = Verdict::Waits {
        candidates,
        quota,
        reasons: reasons::group(&resp.failed_nodes, &snap.unusable),
        nearest: nearest::nearest(
            &resp.failed_nodes,
            &resp.explanations,
            &resolved,
            &snap.nodes,
        ),
    };
    (v, resolved)
}

/// A pending pod with its verdict.
fn pending_pod(pod: &Pod, verdict: Verdict) -> PendingPod {
    let age_s = pod.metadata.creation_timestamp.as_ref().map_or(0, |t| {
        u64::try_from(
            k8s_openapi::jiff::Timestamp::now()
                .duration_since(t.0)
                .as_secs(),
        )
        .unwrap_or(0)
    });
    PendingPod {
        pod: pod_key(pod),
        age_s,
        scheduler_message: scheduler_message(pod),
        verdict,
    }
}

/// One pending pod, analysed.
pub async fn analyse(ask: &Ask<'_>, pod: &Pod) -> PendingPod {
    pending_pod(pod, verdict(ask, pod).await.0)
}

/// What a pod asks the service: its annotations, its containers' names and resources and its
/// node selector. Pods that ask the same (the replicas of a Job or a ReplicaSet) get the same
/// verdict, so one of them is analysed for all.
fn question_key(p: &Pod) -> String {
    let spec = p.spec.as_ref();
    let containers = |init: bool| -> Vec<(&String, &Option<ResourceRequirements>)> {
        spec.into_iter()
            .flat_map(|s| {
                if init {
                    s.init_containers.as_deref().unwrap_or_default()
                } else {
                    s.containers.as_slice()
                }
            })
            .map(|c| (&c.name, &c.resources))
            .collect()
    };
    serde_json::to_string(&(
        &p.metadata.annotations,
        spec.map(|s| &s.node_selector),
        containers(true),
        containers(false),
    ))
    .unwrap_or_default()
}

/// The pending pods, the first `max` analysed (a few at a time; pods that ask the same once).
pub async fn list(ask: &Ask<'_>, max: usize) -> PendingList {
    use futures::StreamExt as _;
    let pods = pending_pods(ask);
    let not_analysed = pods.len().saturating_sub(max);
    let pods: Vec<Arc<Pod>> = pods.into_iter().take(max).collect();
    let keys: Vec<String> = pods.iter().map(|p| question_key(p)).collect();
    let mut first: HashMap<&str, usize> = HashMap::new();
    let mut unique: Vec<Arc<Pod>> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        first.entry(k.as_str()).or_insert_with(|| {
            unique.push(pods[i].clone());
            unique.len() - 1
        });
    }
    let ask = *ask;
    let done: Vec<Verdict> = futures::stream::iter(unique)
        .map(|p| async move { verdict(&ask, &p).await.0 })
        .buffered(4)
        .collect()
        .await;
    let analysed = pods
        .iter()
        .zip(&keys)
        .map(|(p, k)| pending_pod(p, done[first[k.as_str()]].clone()))
        .collect();
    PendingList {
        pods: analysed,
        not_analysed,
    }
}

/// The per-card needs of the first `max` pending pods (ValidateWorkload only: no nodes sent),
/// and how many pods are pending.
pub async fn needs_only(ask: &Ask<'_>, max: usize) -> (Vec<Need>, usize) {
    use futures::StreamExt as _;
    let pods = pending_pods(ask);
    let count = pods.len();
    let ask = *ask;
    let resolved: Vec<Vec<v1::ResolvedContainer>> =
        futures::stream::iter(pods.into_iter().take(max))
            .map(|p| async move { ask.resolve(&ask.workload(&p).0).await.unwrap_or_default() })
            .buffered(4)
            .collect()
            .await;
    (resolved.iter().flat_map(|r| needs(r)).collect(), count)
}
