//! "What if": where a pod (pasted, or one of the pending pods) would go now under a chosen
//! policy. The service's Allocate on the current view; nothing is booked or written.

use gpusched_client::v1;
use k8s_openapi::api::core::v1::Pod;

use crate::web::ask::Ask;
use crate::web::decision::{assigned, policy_text};
use crate::web::model::{Verdict, WhatIf};
use crate::web::pending::{self, pod_key};
use crate::web::podspec::{self, SpecError};

/// HAMi's pod annotation choosing the node policy.
pub const NODE_POLICY: &str = "hami.io/node-scheduler-policy";
/// HAMi's pod annotation choosing the GPU policy.
pub const GPU_POLICY: &str = "hami.io/gpu-scheduler-policy";

/// What to ask about.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Question {
    /// A pod spec (YAML or JSON); used when `pod` is empty.
    pub spec: String,
    /// A pod of the view, `namespace/name` (a pending one, typically).
    pub pod: String,
    /// Node policy replacing the pod's own (empty: the pod's own, else the service's default).
    pub node_policy: String,
    /// GPU policy replacing the pod's own (empty: as above).
    pub gpu_policy: String,
}

/// The pod asked about, with the chosen policies written as its annotations (the service
/// validates them and names the annotation when one is wrong).
fn the_pod(ask: &Ask<'_>, q: &Question) -> Result<Pod, SpecError> {
    let mut pod = if q.pod.trim().is_empty() {
        podspec::parse(&q.spec, &ask.view.names().scheduler_name)?
    } else {
        let key = q.pod.trim();
        let (ns, name) = key.split_once('/').ok_or_else(|| SpecError {
            field: "pod".into(),
            message: format!("{key:?} is not namespace/name"),
        })?;
        (*ask.pod(ns, name).ok_or_else(|| SpecError {
            field: "pod".into(),
            message: format!(
                "no pod {key} of scheduler {} in the view",
                ask.view.names().scheduler_name
            ),
        })?)
        .clone()
    };
    let ann = pod
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    for (key, value) in [(NODE_POLICY, &q.node_policy), (GPU_POLICY, &q.gpu_policy)] {
        let v = value.trim();
        if !v.is_empty() {
            ann.insert(key.to_owned(), v.to_owned());
        }
    }
    Ok(pod)
}

/// The answer; a malformed question (spec, pod name) is an error naming its field, and a pod
/// the service refuses is an error with the service's violations (each naming its field).
pub async fn ask_what_if(ask: &Ask<'_>, q: &Question) -> Result<WhatIf, SpecError> {
    let pod = the_pod(ask, q)?;
    let (w, _) = ask.workload(&pod);
    let snap = ask.candidates(&pod);
    let mut out = WhatIf {
        pod: pod_key(&pod),
        candidates: snap.nodes.len() + snap.unusable.len(),
        ..WhatIf::default()
    };
    let r: v1::AllocationResult = match ask.allocate(&w, &snap, None, false).await {
        Ok(r) => r,
        Err(Verdict::Invalid { error }) => {
            return Err(SpecError {
                field: "spec".into(),
                message: format!("the service refuses the pod: {error}"),
            });
        }
        Err(v) => {
            out.verdict = Some(v);
            return Ok(out);
        }
    };
    out.policy = policy_text(r.effective_policy.as_ref());
    out.feasible = r.feasible_node_count as usize;
    if !r.requests_gpu {
        out.verdict = Some(Verdict::Fits {
            candidates: out.candidates,
            feasible: snap.nodes.len(),
        });
        return Ok(out);
    }
    if r.placed {
        out.node = Some(r.node_name.clone());
        out.raw_score = r.node_score.as_ref().map_or(0.0, |s| s.raw_score);
        out.cards = assigned(&r);
    } else {
        out.verdict = Some(pending::verdict(ask, &pod).await.0);
    }
    Ok(out)
}
