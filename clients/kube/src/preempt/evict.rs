//! Carrying a preemption out on the Kubernetes API: evictions (the Eviction API, which honours
//! PodDisruptionBudgets), the victims' `DisruptionTarget` condition, the preemptor's
//! `status.nominatedNodeName`, and the Events on both sides.

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Api;
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder};
use serde_json::json;

use super::plan::{Plan, Victim, cards_text};

/// Why an eviction did not happen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictError {
    /// The API refused it (HTTP 429: a PodDisruptionBudget allows no disruption now).
    Refused(String),
    /// Any other failure.
    Failed(String),
}

impl std::fmt::Display for EvictError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvictError::Refused(m) => write!(f, "eviction refused: {m}"),
            EvictError::Failed(m) => write!(f, "eviction failed: {m}"),
        }
    }
}

/// The text of an API error, with its causes (the PodDisruptionBudget's sentence).
fn api_text(s: &kube::core::Status) -> String {
    let causes: Vec<String> = s
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| c.message.clone())
        .filter(|m| !m.is_empty())
        .collect();
    if causes.is_empty() {
        s.message.clone()
    } else {
        format!("{} ({})", s.message, causes.join("; "))
    }
}

/// Evicts one victim (its uid as precondition). A victim already gone (404, or a new pod of the
/// same name: 409) counts as evicted.
pub async fn evict(kube: &kube::Client, v: &Victim) -> Result<(), EvictError> {
    let api: Api<Pod> = Api::namespaced(kube.clone(), &v.namespace);
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(v.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        }),
        ..EvictParams::default()
    };
    match api.evict(&v.name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 429 => Err(EvictError::Refused(api_text(&s))),
        Err(kube::Error::Api(s)) => Err(EvictError::Failed(api_text(&s))),
        Err(e) => Err(EvictError::Failed(e.to_string())),
    }
}

/// The message of the victims' `DisruptionTarget` condition.
pub fn disruption_message(scheduler: &str, preemptor: &str, node: &str) -> String {
    format!("{scheduler}: preempting to accommodate a higher priority pod ({preemptor}) on {node}")
}

/// Marks an evicted victim as kube-scheduler marks its own victims (`DisruptionTarget=True`,
/// reason `PreemptionByScheduler`): kube-scheduler then sees a preemption in progress on the
/// preemptor's nominated node and keeps the nomination. Failures are logged only.
pub async fn mark_preempted(kube: &kube::Client, v: &Victim, message: &str) {
    let api: Api<Pod> = Api::namespaced(kube.clone(), &v.namespace);
    let patch = json!({"status": {"conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
        "message": message,
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
    }]}});
    if let Err(e) = api
        .patch_status(&v.name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
    {
        tracing::debug!(pod = %v.name, namespace = %v.namespace, error = %e, "could not mark the victim");
    }
}

/// Sets the preemptor's `status.nominatedNodeName`. Failures are logged only.
pub async fn nominate(kube: &kube::Client, namespace: &str, name: &str, node: &str) {
    let api: Api<Pod> = Api::namespaced(kube.clone(), namespace);
    let patch = json!({"status": {"nominatedNodeName": node}});
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::debug!(pod = %name, namespace, error = %e, "could not nominate the node");
    }
}

fn pod_ref(namespace: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        uid: Some(uid.to_owned()).filter(|u| !u.is_empty()),
        ..ObjectReference::default()
    }
}

/// Cuts an event note to the API's limit (1 kB).
fn note(mut s: String) -> String {
    if s.len() > 1000 {
        let mut cut = 1000;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// The preemptor's and the victims' Events (sent in the background).
pub fn record(recorder: &Recorder, preemptor: (&str, &str, &str), plan: &Plan) {
    let (namespace, name, uid) = preemptor;
    let mut events = vec![(
        pod_ref(namespace, name, uid),
        Event {
            type_: EventType::Normal,
            reason: "Preempting".into(),
            note: Some(note(format!(
                "gpusched: evicting {} from node {} to free the cards this pod gets: {}",
                plan.victims_text(),
                plan.node,
                plan.placement_text()
            ))),
            action: "Preempt".into(),
            secondary: None,
        },
    )];
    for v in &plan.victims {
        events.push((
            pod_ref(&v.namespace, &v.name, &v.uid),
            Event {
                type_: EventType::Normal,
                reason: "Preempted".into(),
                note: Some(note(format!(
                    "gpusched: preempted by {namespace}/{name} on node {}, which needs {}",
                    plan.node,
                    cards_text(&v.frees)
                ))),
                action: "Preempt".into(),
                secondary: Some(pod_ref(namespace, name, uid)),
            },
        ));
    }
    let recorder = recorder.clone();
    tokio::spawn(async move {
        for (reference, ev) in events {
            if let Err(e) = recorder.publish(&ev, &reference).await {
                tracing::debug!(error = %e, "could not publish event");
            }
        }
    });
}
