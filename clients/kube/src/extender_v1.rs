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

/// `ExtenderPreemptionArgs` (kube-scheduler's preemptVerb): the pod and, per node, the victims
/// its dry run chose (`NodeNameToMetaVictims`, UIDs only, with `nodeCacheCapable`; whole pods in
/// `NodeNameToVictims` otherwise).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ExtenderPreemptionArgs {
    /// The pod being scheduled.
    #[serde(rename = "Pod", alias = "pod", default)]
    pub pod: Option<Pod>,
    /// Victims as whole pods (not node-cache capable).
    #[serde(rename = "NodeNameToVictims", alias = "nodeNameToVictims", default)]
    pub node_name_to_victims: Option<BTreeMap<String, Option<Victims>>>,
    /// Victims as UIDs (node-cache capable).
    #[serde(
        rename = "NodeNameToMetaVictims",
        alias = "nodeNameToMetaVictims",
        default
    )]
    pub node_name_to_meta_victims: Option<BTreeMap<String, Option<MetaVictims>>>,
}

impl ExtenderPreemptionArgs {
    /// Per node, the victims' UIDs (from either form).
    pub fn victim_uids(&self) -> BTreeMap<String, Vec<String>> {
        if let Some(m) = &self.node_name_to_meta_victims {
            return m
                .iter()
                .map(|(n, v)| {
                    let uids = v
                        .iter()
                        .flat_map(|v| v.pods.iter())
                        .map(|p| p.uid.clone())
                        .collect();
                    (n.clone(), uids)
                })
                .collect();
        }
        self.node_name_to_victims
            .iter()
            .flatten()
            .map(|(n, v)| {
                let uids = v
                    .iter()
                    .flat_map(|v| v.pods.iter().flatten())
                    .filter_map(|p| p.metadata.uid.clone())
                    .collect();
                (n.clone(), uids)
            })
            .collect()
    }
}

/// `Victims`: whole pods.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Victims {
    /// The pods.
    #[serde(rename = "Pods", alias = "pods", default)]
    pub pods: Option<Vec<Pod>>,
    /// How many of them violate a PodDisruptionBudget.
    #[serde(rename = "NumPDBViolations", alias = "numPDBViolations", default)]
    pub num_pdb_violations: i64,
}

/// `MetaPod`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetaPod {
    /// The pod's UID.
    #[serde(rename = "UID", alias = "uid", default)]
    pub uid: String,
}

/// `MetaVictims`: UIDs.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetaVictims {
    /// The pods.
    #[serde(rename = "Pods", alias = "pods", default)]
    pub pods: Vec<MetaPod>,
    /// How many of them violate a PodDisruptionBudget.
    #[serde(rename = "NumPDBViolations", alias = "numPDBViolations", default)]
    pub num_pdb_violations: i64,
}

/// `ExtenderPreemptionResult`: the nodes the extender accepts, each with its victims.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExtenderPreemptionResult {
    /// Per node, the victims (UIDs).
    #[serde(rename = "NodeNameToMetaVictims", default)]
    pub node_name_to_meta_victims: BTreeMap<String, MetaVictims>,
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
    fn reads_and_writes_kube_schedulers_preemption_shapes() {
        // nodeCacheCapable: UIDs; a node kube-scheduler sends with null victims has none.
        let body = json!({
            "Pod": {"metadata": {"name": "p", "uid": "u"}},
            "NodeNameToVictims": null,
            "NodeNameToMetaVictims": {
                "n1": {"Pods": [{"UID": "a"}, {"UID": "b"}], "NumPDBViolations": 1},
                "n2": null
            }
        });
        let args: ExtenderPreemptionArgs = serde_json::from_value(body).unwrap();
        let uids = args.victim_uids();
        assert_eq!(uids["n1"], vec!["a", "b"]);
        assert!(uids["n2"].is_empty());
        // Whole pods otherwise.
        let body = json!({"Pod": {}, "NodeNameToVictims": {
            "n1": {"Pods": [{"metadata": {"name": "a", "uid": "ua"}}], "NumPDBViolations": 0}}});
        let args: ExtenderPreemptionArgs = serde_json::from_value(body).unwrap();
        assert_eq!(args.victim_uids()["n1"], vec!["ua"]);
        // The answer in Go's field names.
        let mut r = ExtenderPreemptionResult::default();
        r.node_name_to_meta_victims.insert(
            "n1".into(),
            MetaVictims {
                pods: vec![MetaPod { uid: "a".into() }],
                num_pdb_violations: 0,
            },
        );
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "a"}], "NumPDBViolations": 0}}})
        );
    }
}
