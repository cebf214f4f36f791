//! The admission decisions, on kube's `admission.k8s.io` types: validation denies GPU pods
//! created with a decision of their own (decision annotations, or already bound), those the
//! service's `ValidateWorkload` rejects (the message names the key) and those that can never
//! fit their namespace's GPU quota (the message names the quota and the key); mutation sets
//! `spec.schedulerName` on GPU pods (a JSON patch). Objects labelled `hami.io/webhook=ignore`
//! are skipped (namespaces with that label are excluded by the webhook configurations'
//! namespaceSelector). The HTTPS side is [`crate::webhook`]. What the webhooks cannot see
//! (pods without GPU resources, updates, Bindings) the chart's ValidatingAdmissionPolicies
//! guard (`deploy/helm/gpusched/templates/admission-policies.yaml`).

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::response::StatusSummary;

use crate::config::Names;
use crate::metrics::QuotaStage;
use crate::quota;
use crate::shim::{Shim, service_error_text};
use crate::translate;

/// Webhook behaviour.
#[derive(Clone, Debug)]
pub struct WebhookOptions {
    /// Set schedulerName on GPU pods.
    pub mutate: bool,
    /// Label key whose value `ignore` skips an object.
    pub ignore_label: String,
}

/// A denial shown to the client as `admission webhook ... denied the request: <message>`
/// (403 Forbidden).
pub fn deny(req: &AdmissionRequest<Pod>, message: impl ToString) -> AdmissionResponse {
    let mut r = AdmissionResponse::from(req).deny(message);
    r.result.status = Some(StatusSummary::Failure);
    r.result.code = 403;
    r.result.reason = "Forbidden".into();
    r
}

fn ignored(pod: &Pod, label: &str) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(label))
        .is_some_and(|v| v == "ignore")
}

fn pod_of(req: &AdmissionRequest<Pod>) -> Option<&Pod> {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return None;
    }
    req.object.as_ref()
}

/// Prefixes of HAMi's decision annotations (`hami.io/vgpu-devices-to-allocate`, `-allocated`;
/// `hami.io/bind-phase`, `-time`), whatever else HAMi may add under them.
const DECISION_PREFIXES: [&str; 2] = ["hami.io/vgpu-devices-", "hami.io/bind-"];

/// Whether an annotation key carries (part of) a placement decision: only gpusched-kube writes
/// these, in the pod's Binding (HAMi's device plugin later updates `-to-allocate`,
/// `bind-phase` and the MIG reservations, to which it adds the instances it created).
pub fn is_decision_key(key: &str, names: &Names) -> bool {
    let a = &names.annotations;
    [
        &a.devices_to_allocate,
        &a.devices_allocated,
        &a.vgpu_node,
        &a.vgpu_time,
        &a.bind_phase,
        &a.bind_time,
        &a.mig_allocations,
    ]
    .iter()
    .any(|k| k.as_str() == key)
        || DECISION_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// Why a GPU pod may not be created as it is, before any policy is looked at: it brings a
/// decision of its own, as decision annotations (usage would count a decision nobody made) or
/// as `spec.nodeName` (it would hold cards no decision booked). Each problem names its key.
pub fn self_decided(pod: &Pod, names: &Names) -> Option<String> {
    let mut problems: Vec<String> = pod
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| is_decision_key(k, names))
        .map(|(k, _)| {
            format!(
                "metadata.annotations[{k:?}]: written by gpusched-kube when it binds the pod; \
                 a pod may not be created with it"
            )
        })
        .collect();
    if let Some(node) = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
    {
        problems.push(format!(
            "spec.nodeName: a pod that asks for GPU resources may not be created bound to a \
             node ({node:?}); {} binds it with its decision",
            names.scheduler_name
        ));
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

fn add(path: PointerBuf, value: serde_json::Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// The mutating decision, a JSON patch (None: nothing to change) for pods that request GPU
/// resources: `spec.schedulerName` set to ours when it is empty or `default-scheduler` (another
/// explicit scheduler is respected), and, like HAMi's webhook, one card (`nvidia.com/gpu: 1` in
/// limits) for a container that asks for GPU memory or cores without a card count.
pub fn mutation(pod: &Pod, names: &Names, opts: &WebhookOptions) -> Option<Patch> {
    if !opts.mutate || ignored(pod, &opts.ignore_label) || !translate::requests_gpu(pod, names) {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let mut ops = Vec::new();
    let current = spec.scheduler_name.as_deref();
    if matches!(current, None | Some("") | Some("default-scheduler")) {
        let path = PointerBuf::from_tokens(["spec", "schedulerName"]);
        let value = serde_json::Value::String(names.scheduler_name.clone());
        ops.push(if current.is_some() {
            PatchOperation::Replace(ReplaceOperation { path, value })
        } else {
            add(path, value)
        });
    }
    let r = &names.resources;
    let lists = [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or(&[]),
        ),
        ("containers", spec.containers.as_slice()),
    ];
    for (field, containers) in lists {
        for (i, c) in containers.iter().enumerate() {
            let Some(res) = &c.resources else { continue };
            let has = |name: &str| {
                res.limits.as_ref().is_some_and(|m| m.contains_key(name))
                    || res.requests.as_ref().is_some_and(|m| m.contains_key(name))
            };
            let wants_gpu = [&r.memory, &r.memory_percentage, &r.cores]
                .iter()
                .any(|n| has(n));
            if !wants_gpu || has(&r.count) {
                continue;
            }
            let index = i.to_string();
            let limits = ["spec", field, index.as_str(), "resources", "limits"];
            if res.limits.is_some() {
                let mut path = PointerBuf::from_tokens(limits);
                path.push_back(r.count.as_str());
                ops.push(add(path, "1".into()));
            } else {
                ops.push(add(
                    PointerBuf::from_tokens(limits),
                    serde_json::json!({r.count.clone(): "1"}),
                ));
            }
        }
    }
    (!ops.is_empty()).then_some(Patch(ops))
}

/// Answers a validating review.
pub async fn validate(
    shim: &Shim,
    opts: &WebhookOptions,
    req: &AdmissionRequest<Pod>,
) -> AdmissionResponse {
    let Some(pod) = pod_of(req) else {
        return AdmissionResponse::from(req);
    };
    let names = shim.view.names();
    if ignored(pod, &opts.ignore_label) || !translate::requests_gpu(pod, names) {
        return AdmissionResponse::from(req);
    }
    if req.operation == Operation::Create
        && let Some(why) = self_decided(pod, names)
    {
        return deny(req, why);
    }
    let mut w = translate::workload(pod, names);
    // At CREATE the name may be generated later.
    if w.name.is_empty() {
        w.name = pod.metadata.generate_name.clone().unwrap_or_default();
    }
    if w.namespace.is_empty() {
        w.namespace = req.namespace.clone().unwrap_or_default();
    }
    let namespace = w.namespace.clone();
    match shim.service.validate_workload(w).await {
        Ok(r) if r.valid && r.requests_gpu => {
            // Contract 10.6: refused when it can never fit its namespace's hard limit.
            let floor = r.quota_floor.unwrap_or_default();
            let floor = quota::Use {
                mem_mib: floor.mem_mib,
                cores: floor.cores,
            };
            let refusal = shim
                .view
                .quota_limits(&namespace)
                .and_then(|limits| quota::admission_refusal(&namespace, &limits, floor));
            match refusal {
                Some(why) => {
                    shim.metrics
                        .quota_refusal(&namespace, QuotaStage::Admission);
                    deny(req, why)
                }
                None => AdmissionResponse::from(req),
            }
        }
        Ok(r) if r.valid || !r.requests_gpu => AdmissionResponse::from(req),
        Ok(r) => {
            let v: Vec<(String, String)> = r
                .violations
                .iter()
                .map(|v| (v.field.clone(), v.description.clone()))
                .collect();
            deny(req, translate::violations_text(&v))
        }
        Err(e) if e.api().is_some_and(|a| a.is_invalid_argument()) => {
            deny(req, service_error_text(&e))
        }
        Err(e) => {
            // Like failurePolicy: Ignore: admit, warn; the extender still rejects a bad pod.
            tracing::warn!(error = %e, "could not validate pod; admitting it");
            let mut r = AdmissionResponse::from(req);
            r.warnings = Some(vec![format!(
                "gpusched: pod not validated ({e}); the scheduler will check it"
            )]);
            r
        }
    }
}

/// Answers a mutating review.
pub fn mutate(
    names: &Names,
    opts: &WebhookOptions,
    req: &AdmissionRequest<Pod>,
) -> AdmissionResponse {
    let Some(patch) = pod_of(req).and_then(|pod| mutation(pod, names, opts)) else {
        return AdmissionResponse::from(req);
    };
    match AdmissionResponse::from(req).with_patch(patch) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "could not encode the patch; admitting the pod unchanged");
            AdmissionResponse::from(req)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kube::core::admission::AdmissionReview;
    use serde_json::json;

    fn names() -> Names {
        Names {
            scheduler_name: "gpusched-scheduler".into(),
            ..Names::default()
        }
    }

    fn opts() -> WebhookOptions {
        WebhookOptions {
            mutate: true,
            ignore_label: "hami.io/webhook".into(),
        }
    }

    fn pod(scheduler: Option<&str>, gpu: bool, labels: serde_json::Value) -> Pod {
        let res = if gpu {
            json!({"limits": {"nvidia.com/gpu": "1"}})
        } else {
            json!({"limits": {"cpu": "1"}})
        };
        let mut spec = json!({"containers": [{"name": "c", "resources": res}]});
        if let Some(s) = scheduler {
            spec["schedulerName"] = json!(s);
        }
        serde_json::from_value(json!({"metadata": {"name": "p", "labels": labels}, "spec": spec}))
            .unwrap()
    }

    fn patch_json(pod: &Pod, n: &Names, o: &WebhookOptions) -> Option<serde_json::Value> {
        mutation(pod, n, o).map(|p| serde_json::to_value(p).unwrap())
    }

    fn request(op: &str, object: serde_json::Value) -> AdmissionRequest<Pod> {
        let body = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "name": "p", "namespace": "ns", "operation": op, "userInfo": {"username": "u"},
                "object": object, "dryRun": false}
        });
        let r: AdmissionReview<Pod> = serde_json::from_value(body).unwrap();
        r.try_into().unwrap()
    }

    #[test]
    fn mutation_sets_scheduler_name_on_gpu_pods_only() {
        let n = names();
        let o = opts();
        assert_eq!(
            patch_json(&pod(Some("default-scheduler"), true, json!({})), &n, &o).unwrap(),
            json!([{"op": "replace", "path": "/spec/schedulerName", "value": "gpusched-scheduler"}])
        );
        assert_eq!(
            patch_json(&pod(None, true, json!({})), &n, &o).unwrap()[0]["op"],
            "add"
        );
        assert!(mutation(&pod(None, false, json!({})), &n, &o).is_none());
        assert!(mutation(&pod(Some("volcano"), true, json!({})), &n, &o).is_none());
        // Memory or cores without a card count: one card, like HAMi.
        let mem_only: Pod = serde_json::from_value(json!({"spec": {"schedulerName": "gpusched-scheduler",
            "initContainers": [{"name": "i", "resources": {"requests": {"nvidia.com/gpucores": "10"}}}],
            "containers": [
                {"name": "a", "resources": {"limits": {"nvidia.com/gpumem": "1000"}}},
                {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"}}}
            ]}}))
        .unwrap();
        assert_eq!(
            patch_json(&mem_only, &n, &o).unwrap(),
            json!([
                {"op": "add", "path": "/spec/initContainers/0/resources/limits", "value": {"nvidia.com/gpu": "1"}},
                {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu", "value": "1"}
            ])
        );
        assert!(
            mutation(
                &pod(None, true, json!({"hami.io/webhook": "ignore"})),
                &n,
                &o
            )
            .is_none()
        );
        let off = WebhookOptions { mutate: false, ..o };
        assert!(mutation(&pod(None, true, json!({})), &n, &off).is_none());
    }

    #[test]
    fn pods_may_not_bring_their_own_decision() {
        let n = names();
        let mut p = pod(None, true, json!({}));
        assert_eq!(self_decided(&p, &n), None);
        p.metadata.annotations = Some(
            [
                ("hami.io/vgpu-devices-allocated", "GPU-1,NVIDIA,1000,0:;"),
                ("hami.io/vgpu-node", "n1"),
                ("hami.io/bind-phase", "success"),
                ("hami.io/vgpu-devices-something-new", "x"),
                ("hami.io/vgpu-mig-allocations", "[]"),
                ("hami.io/device-scoring-weights", "slot=1,core=1,memory=1"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        );
        p.spec.as_mut().unwrap().node_name = Some("n1".into());
        let why = self_decided(&p, &n).unwrap();
        for key in [
            "hami.io/vgpu-devices-allocated",
            "hami.io/vgpu-node",
            "hami.io/bind-phase",
            "hami.io/vgpu-devices-something-new",
            "hami.io/vgpu-mig-allocations",
            "spec.nodeName",
        ] {
            assert!(why.contains(key), "{key} not in {why}");
        }
        assert!(!why.contains("device-scoring-weights"), "{why}");
        assert!(is_decision_key("hami.io/vgpu-time", &n));
        assert!(!is_decision_key("hami.io/gpu-scheduler-policy", &n));
    }

    #[test]
    fn answers_have_the_admission_v1_shape() {
        let req = request("CREATE", json!({"spec": {"containers": [{"name": "c"}]}}));
        let msg = "workload.kubernetes.annotations[\"hami.io/device-scoring-weights\"]: bad";
        let v = serde_json::to_value(deny(&req, msg).into_review()).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": "u1", "allowed": false, "status": {"status": "Failure",
                   "code": 403, "message": msg, "reason": "Forbidden"}}})
        );
        // The mutation as a JSONPatch (kube's AdmissionResponse sends the bytes as a JSON array,
        // which the apiserver's decoder accepts for []byte).
        let gpu = request(
            "CREATE",
            serde_json::to_value(pod(None, true, json!({}))).unwrap(),
        );
        let r = mutate(&names(), &opts(), &gpu);
        assert!(r.allowed);
        let v = serde_json::to_value(r.clone().into_review()).unwrap();
        assert_eq!(v["response"]["patchType"], "JSONPatch");
        let patch: serde_json::Value = serde_json::from_slice(&r.patch.unwrap()).unwrap();
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/spec/schedulerName", "value": "gpusched-scheduler"}])
        );
        // Nothing to change, or not a CREATE/UPDATE: allowed without a patch.
        for req in [
            request(
                "CREATE",
                serde_json::to_value(pod(None, false, json!({}))).unwrap(),
            ),
            request(
                "DELETE",
                serde_json::to_value(pod(None, true, json!({}))).unwrap(),
            ),
        ] {
            let v = serde_json::to_value(mutate(&names(), &opts(), &req).into_review()).unwrap();
            assert_eq!(
                v["response"],
                json!({"uid": "u1", "allowed": true, "status": {}})
            );
        }
    }
}
