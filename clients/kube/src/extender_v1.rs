//! kube-scheduler's extender wire types (`k8s.io/kube-scheduler/extender/v1`), as JSON.
//!
//! kube-scheduler encodes them with Go's default field names (`Pod`, `NodeNames`,
//! `FailedNodes`, ...); Go decodes them case-insensitively, so the camelCase spellings are
//! accepted too. With `nodeCacheCapable: true` only node names travel; a full `Nodes` list is
//! accepted too (and answered in kind, see [`crate::answer`]).
//!
//! Plain data: nothing here knows the service or the HTTP handlers.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

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
}
