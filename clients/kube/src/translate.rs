//! Translation between Kubernetes objects and the gpusched v1 types. No policy here: the service
//! decides; this module only reads Pods and Nodes and writes HAMi's annotations.

use std::collections::BTreeMap;
use std::sync::Arc;

use gpusched_client::{PodBuilder, v1};
use gpusched_hami::Booking;
use k8s_openapi::api::core::v1::{Container, Node, Pod};

use crate::config::Names;
use crate::inventory::Inventory;
use crate::inventory_check;
use crate::mig::{self, Reservation};

/// Annotations never sent to the service (large and irrelevant to placement).
const SKIPPED_ANNOTATIONS: [&str; 1] = ["kubectl.kubernetes.io/last-applied-configuration"];

fn container_requests_gpu(c: &Container, names: &Names) -> bool {
    let Some(r) = &c.resources else { return false };
    names.resources.all().iter().any(|n| {
        r.limits.as_ref().is_some_and(|m| m.contains_key(*n))
            || r.requests.as_ref().is_some_and(|m| m.contains_key(*n))
    })
}

/// Whether any container (init or app) names one of the GPU resources in its limits or
/// requests (the same test kube-scheduler applies to the extender's managedResources).
pub fn requests_gpu(pod: &Pod, names: &Names) -> bool {
    let Some(spec) = &pod.spec else { return false };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| container_requests_gpu(c, names))
}

fn kube_container(c: &Container, names: &Names) -> v1::KubernetesContainer {
    let pick =
        |m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            m.map(|m| {
                m.iter()
                    .filter(|(k, _)| names.resources.all().contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.0.clone()))
                    .collect::<BTreeMap<_, _>>()
            })
            .unwrap_or_default()
        };
    let r = c.resources.as_ref();
    v1::KubernetesContainer {
        name: c.name.clone(),
        limits: pick(r.and_then(|r| r.limits.as_ref())),
        requests: pick(r.and_then(|r| r.requests.as_ref())),
    }
}

/// The workload in Kubernetes form: the pod's annotations, its init containers and containers
/// with their GPU limits and requests as quantity strings (names from config). The service parses
/// and validates it exactly like admission does.
pub fn workload(pod: &Pod, names: &Names) -> v1::Workload {
    let meta = &pod.metadata;
    let annotations: BTreeMap<String, String> = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !SKIPPED_ANNOTATIONS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut w = PodBuilder::new(
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
    .uid(meta.uid.clone().unwrap_or_default())
    .annotations(&annotations)
    .build();
    if let Some(v1::workload::Spec::Kubernetes(k)) = &mut w.spec
        && let Some(spec) = &pod.spec
    {
        k.init_containers = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| kube_container(c, names))
            .collect();
        k.containers = spec
            .containers
            .iter()
            .map(|c| kube_container(c, names))
            .collect();
    }
    w
}

/// A human-readable text of INVALID_ARGUMENT field violations (`field: description; ...`).
pub fn violations_text(violations: &[(String, String)]) -> String {
    violations
        .iter()
        .map(|(f, d)| format!("{f}: {d}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Reads the card inventory (`hami.io/node-nvidia-register`, JSON or colon form), pair scores
/// (`hami.io/node-nvidia-score`), cordoned cards (`hami.io/device-cordon`) and MIG layouts
/// (`gpusched.io/node-mig-layouts`, else HAMi's `migProfiles`: [`crate::mig::attach_layouts`])
/// of a node, and checks them ([`crate::inventory_check`]).
pub fn inventory(node: &Node, names: &Names) -> Inventory {
    let a = &names.annotations;
    let ann = node.metadata.annotations.as_ref();
    let get = |k: &str| ann.and_then(|m| m.get(k)).map(String::as_str);
    let mut inv = Inventory::default();
    match get(&a.node_register) {
        None => {
            inv.problem = Some(format!(
                "no GPU inventory: node annotation {} is missing",
                a.node_register
            ));
        }
        Some(v) => match gpusched_hami::decode_register(v) {
            Ok(cards) => inv.cards = cards,
            Err(e) => inv.problem = Some(format!("unreadable GPU inventory: {e}")),
        },
    }
    let mut mig_problems = Vec::new();
    if let (None, Some(register)) = (&inv.problem, get(&a.node_register)) {
        match mig::attach_layouts(&mut inv.cards, register, get(&a.node_mig_layouts), names) {
            Ok(p) => mig_problems = p,
            Err(e) => inv.problem = Some(format!("unreadable MIG layouts: {e}")),
        }
    }
    if let Some(v) = get(&a.node_score).filter(|v| !v.trim().is_empty()) {
        match gpusched_hami::decode_pair_scores(v) {
            Ok(p) => inv.pair_scores = p,
            Err(e) => {
                tracing::warn!(node = ?node.metadata.name, error = %e, "ignoring pair scores")
            }
        }
    }
    if let Some(v) = get(&a.device_cordon) {
        inv.cordoned = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        inv.cordon_annotation = Some(v.to_owned());
    }
    if inv.problem.is_none() {
        let mut problems = inventory_check::problems(&inv, names);
        problems.extend(mig_problems);
        if !problems.is_empty() {
            inv.problem = Some(inventory_check::message(&problems));
        }
    }
    inv
}

/// What one pod holds on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodUsage {
    /// The node.
    pub node: String,
    /// The pod's namespace (whose quota it counts against).
    pub namespace: String,
    /// Per container hami-core bookings that still count (a MIG instance's device is in
    /// `mig`, not here).
    pub bookings: Vec<Vec<Booking>>,
    /// How many of the first `bookings` are init containers' (0 once they have all succeeded
    /// and their bookings are released).
    pub init: usize,
    /// The MIG instances the pod holds (`hami.io/vgpu-mig-allocations`), for its whole life.
    pub mig: Vec<Reservation>,
    /// Who holds them: `namespace/name` (a MIG instance's `in_use_by`).
    pub owner: String,
    /// The raw `-allocated` annotation (to recognise our own assumed decisions).
    pub annotation: String,
    /// Why the pod's decision cannot be counted as it stands (unreadable MIG reservations, or
    /// reservations that match none of its devices): the node it is bound to then fails with
    /// it, named, rather than counting it wrong.
    pub problem: Option<String>,
}

/// `namespace/name`: who a pod's MIG instances are held by.
pub fn owner(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether every init container of the pod has terminated successfully.
pub fn init_done(pod: &Pod) -> bool {
    let Some(spec) = &pod.spec else { return false };
    let Some(inits) = spec.init_containers.as_ref().filter(|v| !v.is_empty()) else {
        return false;
    };
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref());
    inits.iter().all(|c| {
        statuses
            .into_iter()
            .flatten()
            .find(|s| s.name == c.name)
            .and_then(|s| s.state.as_ref())
            .and_then(|st| st.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0)
    })
}

/// The node a pod is bound to by our decision: `spec.nodeName`, and only when the pod's
/// `hami.io/vgpu-node` annotation names the same node. gpusched-kube writes both in one
/// Binding (the annotation travels in the Binding's metadata), and admission lets nobody else
/// set that annotation (denied at CREATE, immutable at UPDATE except for gpusched-kube's
/// ServiceAccount) nor create a GPU pod already bound: a pod that shows both carries a decision
/// the shim wrote (see docs/ARCHITECTURE.md, "Who may write a decision"). A never-bound pod
/// (`vgpu-node` alone) or a pod bound some other way (`spec.nodeName` alone, or a different
/// `vgpu-node`) holds nothing.
pub fn decided_node(pod: &Pod, names: &Names) -> Option<String> {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())?;
    let written = pod
        .metadata
        .annotations
        .as_ref()?
        .get(&names.annotations.vgpu_node)?;
    (written == node).then(|| node.to_owned())
}

/// The GPU usage a pod counts for: only a pod whose `spec.schedulerName` is ours (a pod
/// scheduled by anyone else cannot forge usage), that asks for a GPU resource, is bound by our
/// decision ([`decided_node`]: `spec.nodeName` with the same `hami.io/vgpu-node`), is not
/// finished (Succeeded/Failed) and has a readable `hami.io/vgpu-devices-allocated`; init
/// containers' bookings (the first N segments, N = number of init containers) are released once
/// all of them have succeeded.
pub fn pod_usage(pod: &Pod, names: &Names) -> Option<PodUsage> {
    let spec = pod.spec.as_ref()?;
    if spec.scheduler_name.as_deref() != Some(names.scheduler_name.as_str()) {
        return None;
    }
    if !requests_gpu(pod, names) {
        return None;
    }
    if finished(pod) {
        return None;
    }
    let node = decided_node(pod, names)?;
    let annotation = pod
        .metadata
        .annotations
        .as_ref()?
        .get(&names.annotations.devices_allocated)?
        .clone();
    let all = match gpusched_hami::decode_pod_devices(&annotation) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(
                pod = ?pod.metadata.name, namespace = ?pod.metadata.namespace, error = %e,
                "ignoring unreadable device annotation"
            );
            return None;
        }
    };
    let reservations = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|m| m.get(&names.annotations.mig_allocations))
        .map_or(Ok(Vec::new()), |v| gpusched_hami::decode_mig_allocations(v));
    let (mut bookings, mig, problem) = match reservations
        .map_err(|e| e.to_string())
        .and_then(|r| mig::pair(all.clone(), &r))
    {
        Ok((bookings, mig)) => (bookings, mig, None),
        Err(e) => (
            all,
            Vec::new(),
            Some(format!("{}: {e}", names.annotations.mig_allocations)),
        ),
    };
    let n = spec
        .init_containers
        .as_ref()
        .map_or(0, Vec::len)
        .min(bookings.len());
    let init = if init_done(pod) {
        bookings.drain(..n);
        0
    } else {
        n
    };
    Some(PodUsage {
        node,
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        bookings,
        init,
        mig,
        owner: owner(pod),
        annotation,
        problem,
    })
}

/// What a decision holds, as [`PodUsage`] counts it: the hami-core bookings of the result
/// (per container) and its MIG instances.
pub fn decision_usage(
    result: &v1::AllocationResult,
) -> Result<(Vec<Vec<Booking>>, Vec<Reservation>), String> {
    mig::pair(
        gpusched_hami::bookings(result),
        &gpusched_hami::mig_allocations(result),
    )
}

/// A schedulable node for the service from its inventory and the pods counted on it: their
/// hami-core bookings on the cards' usage, their MIG instances on the MIG cards' layouts. A
/// pod whose decision contradicts the node (see [`PodUsage::problem`], [`crate::mig::hold`],
/// [`crate::mig::booking_on_mig_card`]) makes the node fail, with
/// `InvalidNode: pod <namespace/name>: <what>`.
pub fn node_with_pods(
    name: &str,
    inv: &Inventory,
    pods: &[Arc<PodUsage>],
    names: &Names,
) -> Result<v1::Node, String> {
    let invalid = |u: &PodUsage, what: &str| format!("InvalidNode: pod {}: {what}", u.owner);
    for u in pods {
        if let Some(p) = &u.problem {
            return Err(invalid(u, p));
        }
        if let Some(p) = mig::booking_on_mig_card(&inv.cards, &u.bookings) {
            return Err(invalid(u, &p));
        }
    }
    let mut node = node_with_usage(name, inv, pods.iter().map(|u| u.bookings.as_slice()), names);
    for u in pods {
        mig::hold(&mut node.cards, &u.owner, &u.mig)
            .map_err(|e| invalid(u, &format!("{} {e}", names.annotations.mig_allocations)))?;
    }
    mig::sort_instances(&mut node.cards);
    Ok(node)
}

/// A schedulable node for the service: its cards with the usage of `usages` added.
pub fn node_with_usage<'a>(
    name: &str,
    inv: &Inventory,
    usages: impl IntoIterator<Item = &'a [Vec<Booking>]>,
    names: &Names,
) -> v1::Node {
    let mut cards = inv.cards.clone();
    for b in usages {
        gpusched_hami::add_usage(&mut cards, b);
    }
    let mut annotations = std::collections::HashMap::new();
    if let Some(c) = &inv.cordon_annotation {
        annotations.insert(names.annotations.device_cordon.clone(), c.clone());
    }
    v1::Node {
        host: None,
        name: name.to_owned(),
        cards,
        cordoned_card_ids: inv.cordoned.clone(),
        pair_scores: inv.pair_scores.clone(),
        annotations: annotations.into_iter().collect(),
    }
}

/// The pod annotations of a bind decision (HAMi's protocol), with `now` in unix seconds: the
/// devices (a MIG instance's device books its profile's memory and cores, as HAMi writes it)
/// and, when the decision holds MIG instances, their reservations
/// (`hami.io/vgpu-mig-allocations`, as HAMi's device plugin reads them).
pub fn bind_annotations(
    result: &v1::AllocationResult,
    node: &str,
    now: i64,
    names: &Names,
) -> BTreeMap<String, String> {
    let a = &names.annotations;
    let devices = gpusched_hami::encode_pod_devices(&gpusched_hami::bookings(result));
    let mut m = BTreeMap::new();
    let reservations = gpusched_hami::mig_allocations(result);
    if !reservations.is_empty() {
        m.insert(
            a.mig_allocations.clone(),
            gpusched_hami::encode_mig_allocations(&reservations),
        );
    }
    m.insert(a.devices_to_allocate.clone(), devices.clone());
    m.insert(a.devices_allocated.clone(), devices);
    m.insert(a.vgpu_node.clone(), node.to_owned());
    m.insert(a.vgpu_time.clone(), now.to_string());
    m.insert(a.bind_phase.clone(), "allocating".to_owned());
    m.insert(a.bind_time.clone(), now.to_string());
    m
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    pub(crate) fn names() -> Names {
        Names {
            scheduler_name: "gpusched-scheduler".into(),
            ..Names::default()
        }
    }

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn gpu_pod() -> Pod {
        pod(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": {
                "hami.io/device-scoring-weights": "slot=1,core=1,memory=3",
                "kubectl.kubernetes.io/last-applied-configuration": "{...}"
            }},
            "spec": {
                "schedulerName": "gpusched-scheduler",
                "initContainers": [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1Gi"}}}],
                "containers": [
                    {"name": "plain", "resources": {"limits": {"cpu": "1"}}},
                    {"name": "main", "resources": {
                        "limits": {"nvidia.com/gpu": "2", "cpu": "500m", "nvidia.com/gpucores": "30"},
                        "requests": {"nvidia.com/gpumem-percentage": "40", "memory": "1Gi"}
                    }}
                ]
            }
        }))
    }

    #[test]
    fn pod_becomes_a_kubernetes_workload() {
        let w = workload(&gpu_pod(), &names());
        assert_eq!(
            (w.namespace.as_str(), w.name.as_str(), w.uid.as_str()),
            ("ns", "p", "u1")
        );
        let Some(v1::workload::Spec::Kubernetes(k)) = w.spec else {
            panic!("kubernetes form")
        };
        assert_eq!(
            k.annotations.len(),
            1,
            "last-applied-configuration is not sent"
        );
        assert_eq!(
            k.annotations["hami.io/device-scoring-weights"],
            "slot=1,core=1,memory=3"
        );
        assert_eq!(k.init_containers.len(), 1);
        assert_eq!(k.init_containers[0].limits["nvidia.com/gpumem"], "1Gi");
        assert_eq!(k.containers.len(), 2);
        assert!(
            k.containers[0].limits.is_empty(),
            "cpu is not a GPU resource"
        );
        assert_eq!(k.containers[1].name, "main");
        assert_eq!(
            k.containers[1].limits.keys().collect::<Vec<_>>(),
            ["nvidia.com/gpu", "nvidia.com/gpucores"]
        );
        assert_eq!(
            k.containers[1].requests["nvidia.com/gpumem-percentage"],
            "40"
        );
        assert!(!k.containers[1].requests.contains_key("memory"));
    }

    #[test]
    fn gpu_requests_are_detected_by_configured_names() {
        let n = names();
        assert!(requests_gpu(&gpu_pod(), &n));
        let cpu_only = pod(
            json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}}),
        );
        assert!(!requests_gpu(&cpu_only, &n));
        let init_only = pod(json!({"spec": {"containers": [{"name": "c"}],
            "initContainers": [{"name": "i", "resources": {"requests": {"nvidia.com/gpucores": "10"}}}]}}));
        assert!(requests_gpu(&init_only, &n));
        let mut other = n.clone();
        other.resources.count = "example.com/vgpu".into();
        other.resources.memory = "example.com/vmem".into();
        other.resources.memory_percentage = "example.com/vpct".into();
        other.resources.cores = "example.com/vcores".into();
        assert!(!requests_gpu(&gpu_pod(), &other));
        let custom = pod(
            json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"example.com/vgpu": "1"}}}]}}),
        );
        assert!(requests_gpu(&custom, &other));
        let Some(v1::workload::Spec::Kubernetes(k)) = workload(&custom, &other).spec else {
            panic!()
        };
        assert_eq!(k.containers[0].limits["example.com/vgpu"], "1");
    }

    fn node(ann: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "annotations": ann}})).unwrap()
    }

    #[test]
    fn inventory_reads_register_scores_and_cordon() {
        let n = names();
        let cards = vec![
            gpusched_client::node("n1", 2, 16384, "NVIDIA-A100").cards[0].clone(),
            gpusched_client::node("n1", 2, 16384, "NVIDIA-A100").cards[1].clone(),
        ];
        let reg = gpusched_hami::encode_register(&cards);
        let inv = inventory(
            &node(json!({
                "hami.io/node-nvidia-register": reg,
                "hami.io/node-nvidia-score": r#"[{"uuid":"n1-gpu0","score":{"n1-gpu1":100}}]"#,
                "hami.io/device-cordon": " n1-gpu1 , ",
            })),
            &n,
        );
        assert_eq!(inv.cards, cards);
        assert_eq!(inv.pair_scores.len(), 1);
        assert_eq!(inv.cordoned, vec!["n1-gpu1".to_owned()]);
        assert!(inv.problem.is_none());
        let vn = node_with_usage("n1", &inv, std::iter::empty(), &n);
        assert_eq!(vn.annotations["hami.io/device-cordon"], " n1-gpu1 , ");
        assert_eq!(vn.cordoned_card_ids, vec!["n1-gpu1".to_owned()]);

        // HAMi's colon form is read too.
        let colon = inventory(
            &node(json!({"hami.io/node-nvidia-register": "GPU-1,10,8000,100,NVIDIA-T4,0,true:"})),
            &n,
        );
        assert_eq!(colon.cards.len(), 1);
        assert_eq!(colon.cards[0].total_mem_mib, 8000);

        let missing = inventory(&node(json!({})), &n);
        assert!(
            missing
                .problem
                .unwrap()
                .contains("hami.io/node-nvidia-register is missing")
        );
        let bad = inventory(
            &node(json!({"hami.io/node-nvidia-register": "nonsense"})),
            &n,
        );
        assert!(bad.cards.is_empty());
        assert!(bad.problem.unwrap().contains("unreadable"));
    }

    fn bound(scheduler: &str, phase: &str, init_exit: Option<i32>) -> Pod {
        let gpu = json!({"limits": {"nvidia.com/gpu": "1"}});
        let mut p = json!({
            "metadata": {"name": "b", "namespace": "ns", "uid": "u2", "annotations": {
                "hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,10:;GPU-b,NVIDIA,2000,20:GPU-c,NVIDIA,2000,20:;",
                "hami.io/vgpu-node": "n1"
            }},
            "spec": {"schedulerName": scheduler, "nodeName": "n1",
                "initContainers": [{"name": "i", "resources": gpu}],
                "containers": [{"name": "c", "resources": gpu}]},
            "status": {"phase": phase}
        });
        if let Some(code) = init_exit {
            p["status"]["initContainerStatuses"] = json!([{"name": "i", "image": "x", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": code}}}]);
        }
        pod(p)
    }

    #[test]
    fn usage_counts_only_our_bound_unfinished_pods() {
        let n = names();
        let u = pod_usage(&bound("gpusched-scheduler", "Pending", None), &n).unwrap();
        assert_eq!(u.node, "n1");
        assert_eq!(u.bookings.len(), 2, "init segment counts while init runs");
        assert_eq!((u.namespace.as_str(), u.init), ("ns", 1));
        assert_eq!(u.bookings[1].len(), 2);
        // Another scheduler's pod cannot forge usage.
        assert!(pod_usage(&bound("default-scheduler", "Running", None), &n).is_none());
        // Finished pods hold nothing.
        assert!(pod_usage(&bound("gpusched-scheduler", "Succeeded", None), &n).is_none());
        assert!(pod_usage(&bound("gpusched-scheduler", "Failed", None), &n).is_none());
        // Init bookings are released once every init container succeeded.
        let done = pod_usage(&bound("gpusched-scheduler", "Running", Some(0)), &n).unwrap();
        assert_eq!((done.bookings.len(), done.init), (1, 0));
        assert_eq!(done.bookings[0][0].uuid, "GPU-b");
        let failed_init = pod_usage(&bound("gpusched-scheduler", "Pending", Some(1)), &n).unwrap();
        assert_eq!(failed_init.bookings.len(), 2);
        // Unreadable annotation: ignored.
        let mut bad = bound("gpusched-scheduler", "Running", None);
        bad.metadata.annotations.as_mut().unwrap().insert(
            "hami.io/vgpu-devices-allocated".into(),
            "GPU-a,NVIDIA,x,1:;".into(),
        );
        assert!(pod_usage(&bad, &n).is_none());
    }

    #[test]
    fn usage_counts_only_decisions_written_with_the_bind() {
        let n = names();
        let set_ann = |p: &mut Pod, k: &str, v: Option<&str>| {
            let m = p.metadata.annotations.as_mut().unwrap();
            match v {
                Some(v) => m.insert(k.into(), v.into()),
                None => m.remove(k),
            };
        };
        // Never bound, with a forged hami.io/vgpu-node: holds nothing (no vgpu-node fallback).
        let mut never_bound = bound("gpusched-scheduler", "Pending", None);
        never_bound.spec.as_mut().unwrap().node_name = None;
        assert!(pod_usage(&never_bound, &n).is_none());
        // Bound without the decision's hami.io/vgpu-node (created bound, or bound by someone
        // else): holds nothing, whatever -allocated says.
        let mut created_bound = bound("gpusched-scheduler", "Running", None);
        set_ann(&mut created_bound, "hami.io/vgpu-node", None);
        assert!(pod_usage(&created_bound, &n).is_none());
        // vgpu-node naming another node than spec.nodeName: not our decision.
        let mut elsewhere = bound("gpusched-scheduler", "Running", None);
        set_ann(&mut elsewhere, "hami.io/vgpu-node", Some("n2"));
        assert!(pod_usage(&elsewhere, &n).is_none());
        assert_eq!(decided_node(&elsewhere, &n), None);
        // A pod without GPU resources never got a decision from the shim.
        let mut no_gpu = bound("gpusched-scheduler", "Running", None);
        let spec = no_gpu.spec.as_mut().unwrap();
        spec.init_containers = None;
        spec.containers[0].resources = None;
        assert!(pod_usage(&no_gpu, &n).is_none());
    }

    #[test]
    fn usage_is_added_to_cards() {
        let n = names();
        let mut cards = gpusched_client::node("n1", 2, 10000, "T4").cards;
        cards[0].id = "GPU-b".into();
        cards[1].id = "GPU-c".into();
        let inv = Inventory {
            cards,
            ..Inventory::default()
        };
        let u = pod_usage(&bound("gpusched-scheduler", "Running", Some(0)), &n).unwrap();
        let vn = node_with_usage(
            "n1",
            &inv,
            [u.bookings.as_slice(), u.bookings.as_slice()],
            &n,
        );
        let usage = vn.cards[0].usage.unwrap();
        assert_eq!(
            (usage.used_slots, usage.used_mem_mib, usage.used_cores),
            (2, 4000, 40)
        );
    }

    #[test]
    fn bind_annotations_follow_hamis_protocol() {
        let result = v1::AllocationResult {
            placed: true,
            node_name: "n1".into(),
            containers: vec![
                v1::ContainerAssignment {
                    container_name: "i".into(),
                    init: true,
                    cards: vec![v1::CardAssignment {
                        card_id: "GPU-a".into(),
                        mem_mib: 1000,
                        cores_percent: 0,
                        ..Default::default()
                    }],
                },
                v1::ContainerAssignment {
                    container_name: "plain".into(),
                    ..Default::default()
                },
                v1::ContainerAssignment {
                    container_name: "main".into(),
                    init: false,
                    cards: vec![v1::CardAssignment {
                        card_id: "GPU-b".into(),
                        mem_mib: 3000,
                        cores_percent: 30,
                        ..Default::default()
                    }],
                },
            ],
            ..Default::default()
        };
        let m = bind_annotations(&result, "n1", 1_700_000_000, &names());
        let want = "GPU-a,NVIDIA,1000,0:;;GPU-b,NVIDIA,3000,30:;";
        assert_eq!(m["hami.io/vgpu-devices-to-allocate"], want);
        assert_eq!(m["hami.io/vgpu-devices-allocated"], want);
        assert_eq!(m["hami.io/vgpu-node"], "n1");
        assert_eq!(m["hami.io/vgpu-time"], "1700000000");
        assert_eq!(m["hami.io/bind-phase"], "allocating");
        assert_eq!(m["hami.io/bind-time"], "1700000000");
    }
}
