//! The scheduler extender (kube-scheduler `extender/v1` JSON over HTTP): `/filter`,
//! `/prioritize`, `/bind`, plus `/healthz`, `/readyz` and `/metrics`.
//!
//! kube-scheduler encodes the extender types with Go's default field names (`Pod`, `NodeNames`,
//! `FailedNodes`, ...); Go decodes them case-insensitively. With `nodeCacheCapable: true` only
//! node names travel; a full `Nodes` list is accepted too (and answered in kind).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use gpusched_client::v1;
use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use crate::shim::{BindOutcome, Shim};

/// `ExtenderArgs`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    #[serde(rename = "Pod", alias = "pod", default)]
    pub pod: Option<Pod>,
    /// Candidate nodes (only when the extender is not node-cache capable).
    #[serde(rename = "Nodes", alias = "nodes", default)]
    pub nodes: Option<serde_json::Value>,
    /// Candidate node names (node-cache capable).
    #[serde(
        rename = "NodeNames",
        alias = "nodeNames",
        alias = "nodenames",
        default
    )]
    pub node_names: Option<Vec<String>>,
}

impl ExtenderArgs {
    /// Candidate node names, from `NodeNames` or from `Nodes.items[].metadata.name`.
    pub fn candidates(&self) -> Vec<String> {
        if let Some(n) = &self.node_names {
            return n.clone();
        }
        self.nodes
            .as_ref()
            .and_then(|l| l.get("items"))
            .and_then(|i| i.as_array())
            .map(|items| {
                items
                    .iter()
                    .filter_map(|n| n.pointer("/metadata/name").and_then(|v| v.as_str()))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// `ExtenderFilterResult`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ExtenderFilterResult {
    /// Feasible nodes (full objects; only when they were sent as objects).
    #[serde(rename = "Nodes", default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<serde_json::Value>,
    /// Feasible node names.
    #[serde(rename = "NodeNames", default, skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
    /// Nodes that cannot host the pod now, with the reason.
    #[serde(rename = "FailedNodes", default)]
    pub failed_nodes: BTreeMap<String, String>,
    /// Nodes where no change of usage can help (preemption would not help either).
    #[serde(rename = "FailedAndUnresolvableNodes", default)]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// An error: the scheduling attempt fails with this message.
    #[serde(rename = "Error", default)]
    pub error: String,
}

/// `HostPriority`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostPriority {
    /// Node name.
    #[serde(rename = "Host")]
    pub host: String,
    /// 0..=10.
    #[serde(rename = "Score")]
    pub score: i64,
}

/// `ExtenderBindingArgs`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExtenderBindingArgs {
    /// Pod name.
    #[serde(rename = "PodName", alias = "podName", default)]
    pub pod_name: String,
    /// Pod namespace.
    #[serde(rename = "PodNamespace", alias = "podNamespace", default)]
    pub pod_namespace: String,
    /// Pod uid.
    #[serde(rename = "PodUID", alias = "podUID", alias = "podUid", default)]
    pub pod_uid: String,
    /// The node kube-scheduler chose.
    #[serde(rename = "Node", alias = "node", default)]
    pub node: String,
}

/// `ExtenderBindingResult`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExtenderBindingResult {
    /// Empty on success.
    #[serde(rename = "Error", default)]
    pub error: String,
}

/// The filter answer when every candidate passes (pods without GPU requests).
pub fn pass_all(args: &ExtenderArgs) -> ExtenderFilterResult {
    ExtenderFilterResult {
        nodes: args.nodes.clone(),
        node_names: if args.nodes.is_some() && args.node_names.is_none() {
            None
        } else {
            Some(args.candidates())
        },
        ..ExtenderFilterResult::default()
    }
}

/// An error answer.
pub fn filter_error(message: impl Into<String>) -> ExtenderFilterResult {
    ExtenderFilterResult {
        error: message.into(),
        ..ExtenderFilterResult::default()
    }
}

/// Builds the filter answer from the service's Filter answer and the nodes the shim left out
/// (no readable inventory, not in the cache yet).
pub fn filter_result(
    args: &ExtenderArgs,
    resp: &v1::FilterResponse,
    unusable: &[(String, String, bool)],
) -> ExtenderFilterResult {
    let mut out = ExtenderFilterResult::default();
    for f in &resp.failed_nodes {
        let msg = if f.message.is_empty() {
            "cannot host the pod".to_owned()
        } else {
            f.message.clone()
        };
        if f.unresolvable {
            out.failed_and_unresolvable_nodes
                .insert(f.node_name.clone(), msg);
        } else {
            out.failed_nodes.insert(f.node_name.clone(), msg);
        }
    }
    for (name, msg, unresolvable) in unusable {
        if *unresolvable {
            out.failed_and_unresolvable_nodes
                .insert(name.clone(), msg.clone());
        } else {
            out.failed_nodes.insert(name.clone(), msg.clone());
        }
    }
    let feasible: std::collections::HashSet<&str> = resp
        .feasible_node_names
        .iter()
        .map(String::as_str)
        .collect();
    // Keep kube-scheduler's order of candidates.
    let names: Vec<String> = args
        .candidates()
        .into_iter()
        .filter(|n| feasible.contains(n.as_str()))
        .collect();
    if let Some(list) = &args.nodes
        && args.node_names.is_none()
    {
        let mut list = list.clone();
        if let Some(items) = list.get_mut("items").and_then(|i| i.as_array_mut()) {
            items.retain(|n| {
                n.pointer("/metadata/name")
                    .and_then(|v| v.as_str())
                    .is_some_and(|name| feasible.contains(name))
            });
        }
        out.nodes = Some(list);
    } else {
        out.node_names = Some(names);
    }
    out
}

/// Rescales the service's node scores (normalized 0..100, most preferred first) to the
/// extender's 0..10. The service's first choice alone gets 10 (others at most 9), so that
/// kube-scheduler, whose own score plugins are outweighed by the extender weight, lands on the
/// node `Allocate` would choose, ties included (the service breaks ties by name; kube-scheduler
/// would break them at random). Candidates the service did not score get 0.
pub fn priorities(candidates: &[String], scores: &[v1::NodeScore]) -> Vec<HostPriority> {
    let mut by_node: BTreeMap<&str, i64> = BTreeMap::new();
    for (i, s) in scores.iter().enumerate() {
        let scaled = (i64::from(s.normalized_score.min(100)) + 5) / 10;
        let score = if i == 0 { 10 } else { scaled.min(9) };
        by_node.entry(s.node_name.as_str()).or_insert(score);
    }
    candidates
        .iter()
        .map(|n| HostPriority {
            host: n.clone(),
            score: by_node.get(n.as_str()).copied().unwrap_or(0),
        })
        .collect()
}

fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_string(body) {
        Ok(s) => (status, [(header::CONTENT_TYPE, "application/json")], s).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn filter(State(shim): State<Arc<Shim>>, body: Bytes) -> Response {
    let result = match serde_json::from_slice::<ExtenderArgs>(&body) {
        Ok(args) => shim.filter(&args).await,
        Err(e) => filter_error(format!("gpusched-kube: cannot read ExtenderArgs: {e}")),
    };
    json(StatusCode::OK, &result)
}

async fn prioritize(State(shim): State<Arc<Shim>>, body: Bytes) -> Response {
    match serde_json::from_slice::<ExtenderArgs>(&body) {
        Ok(args) => match shim.prioritize(&args).await {
            Ok(list) => json(StatusCode::OK, &list),
            // kube-scheduler ignores a failed prioritize and scores with its own plugins.
            Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e).into_response(),
        },
        Err(e) => (
            StatusCode::BAD_REQUEST,
            format!("cannot read ExtenderArgs: {e}"),
        )
            .into_response(),
    }
}

async fn bind(State(shim): State<Arc<Shim>>, body: Bytes) -> Response {
    let result = match serde_json::from_slice::<ExtenderBindingArgs>(&body) {
        Ok(args) => match shim.bind(&args).await {
            BindOutcome::Bound { .. } => ExtenderBindingResult::default(),
            BindOutcome::Failed(e) => ExtenderBindingResult { error: e },
        },
        Err(e) => ExtenderBindingResult {
            error: format!("gpusched-kube: cannot read ExtenderBindingArgs: {e}"),
        },
    };
    json(StatusCode::OK, &result)
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(shim): State<Arc<Shim>>) -> Response {
    match shim.not_ready_reason() {
        None => (StatusCode::OK, "ok").into_response(),
        Some(r) => (StatusCode::SERVICE_UNAVAILABLE, r).into_response(),
    }
}

async fn metrics(State(shim): State<Arc<Shim>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        shim.metrics_text(),
    )
        .into_response()
}

/// The extender's HTTP routes.
pub fn router(shim: Arc<Shim>) -> Router {
    Router::new()
        .route("/filter", post(filter))
        .route("/prioritize", post(prioritize))
        .route("/bind", post(bind))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(64 << 20))
        .with_state(shim)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_kube_schedulers_extender_args() {
        // As kube-scheduler's HTTPExtender sends it with nodeCacheCapable: true.
        let body = json!({
            "Pod": {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
            "Nodes": null,
            "NodeNames": ["n1", "n2"]
        });
        let args: ExtenderArgs = serde_json::from_value(body).unwrap();
        assert_eq!(args.candidates(), vec!["n1", "n2"]);
        assert_eq!(args.pod.unwrap().metadata.name.as_deref(), Some("p"));
        // Without node cache: the node list.
        let body = json!({"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}});
        let args: ExtenderArgs = serde_json::from_value(body).unwrap();
        assert_eq!(args.candidates(), vec!["a", "b"]);
        let bind: ExtenderBindingArgs = serde_json::from_value(
            json!({"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n1"}),
        )
        .unwrap();
        assert_eq!(bind.node, "n1");
        assert_eq!(bind.pod_uid, "u");
    }

    #[test]
    fn filter_result_uses_go_field_names_and_splits_unresolvable() {
        let args = ExtenderArgs {
            node_names: Some(vec!["n3".into(), "n1".into(), "n2".into(), "cpu".into()]),
            ..ExtenderArgs::default()
        };
        let resp = v1::FilterResponse {
            feasible_node_names: vec!["n1".into(), "n3".into()],
            failed_nodes: vec![
                v1::FailedNode {
                    node_name: "n2".into(),
                    message: "4/4 CardInsufficientMemory".into(),
                    unresolvable: false,
                    ..Default::default()
                },
                v1::FailedNode {
                    node_name: "n4".into(),
                    message: "NodeInsufficientDevice".into(),
                    unresolvable: true,
                    ..Default::default()
                },
            ],
            requests_gpu: true,
            ..Default::default()
        };
        let unusable = vec![("cpu".to_owned(), "no GPU inventory".to_owned(), true)];
        let r = filter_result(&args, &resp, &unusable);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            json!({
                "NodeNames": ["n3", "n1"],
                "FailedNodes": {"n2": "4/4 CardInsufficientMemory"},
                "FailedAndUnresolvableNodes": {"n4": "NodeInsufficientDevice", "cpu": "no GPU inventory"},
                "Error": ""
            })
        );
        // Node objects in, node objects out.
        let args = ExtenderArgs {
            nodes: Some(
                json!({"items": [{"metadata": {"name": "n1"}}, {"metadata": {"name": "n2"}}]}),
            ),
            ..ExtenderArgs::default()
        };
        let r = filter_result(&args, &resp, &[]);
        assert_eq!(
            r.nodes.unwrap()["items"],
            json!([{"metadata": {"name": "n1"}}])
        );
        assert!(r.node_names.is_none());
        let all = pass_all(&ExtenderArgs {
            node_names: Some(vec!["a".into()]),
            ..ExtenderArgs::default()
        });
        assert_eq!(
            serde_json::to_value(all).unwrap(),
            json!({"NodeNames": ["a"], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""})
        );
        let e = serde_json::to_value(filter_error("bad")).unwrap();
        assert_eq!(e["Error"], "bad");
    }

    #[test]
    fn priorities_rescale_and_keep_the_services_choice_on_top() {
        let s = |n: &str, v: u32| v1::NodeScore {
            node_name: n.into(),
            normalized_score: v,
            raw_score: 0.0,
        };
        let cands: Vec<String> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let p = priorities(&cands, &[s("b", 100), s("a", 100), s("c", 54), s("d", 0)]);
        let got: Vec<(&str, i64)> = p.iter().map(|h| (h.host.as_str(), h.score)).collect();
        assert_eq!(got, vec![("a", 9), ("b", 10), ("c", 5), ("d", 0), ("e", 0)]);
        assert_eq!(
            serde_json::to_value(&p[1]).unwrap(),
            json!({"Host": "b", "Score": 10})
        );
        assert!(priorities(&cands, &[]).iter().all(|h| h.score == 0));
    }
}
