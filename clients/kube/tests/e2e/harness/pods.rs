//! Pod and card builders and readers: fake cards, the pod spec builder, what a pod carries
//! (chosen node, `-allocated` decision, PodScheduled=False message).

use std::collections::BTreeMap;

use gpusched_client::v1;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::{ALLOCATED, POOL};

/// A fake node's cards: how many, and MiB each (10 slots, 100 cores).
#[derive(Clone, Copy)]
pub struct Shape {
    pub cards: u32,
    pub mem: u64,
}

/// The cards of a fake node, as our node agent would report them.
pub fn cards_of(node: &str, shape: Shape) -> Vec<v1::Card> {
    (0..shape.cards)
        .map(|i| v1::Card {
            mig: None,
            id: format!("GPU-{node}-{}", i + 1),
            index: i,
            r#type: "NVIDIA-A100-SXM4-40GB".into(),
            slots: 10,
            total_mem_mib: shape.mem,
            total_cores: 100,
            numa: 0,
            health: v1::CardHealth::Healthy as i32,
            mode: v1::CardMode::HamiCore as i32,
            usage: None,
        })
        .collect()
}

/// The pod's `hami.io/vgpu-devices-allocated` decision, decoded.
pub fn allocated(p: &Pod) -> Option<Vec<Vec<gpusched_hami::Booking>>> {
    let a = p.metadata.annotations.as_ref()?.get(ALLOCATED)?;
    Some(gpusched_hami::decode_pod_devices(a).expect("readable -allocated annotation"))
}

/// `spec.nodeName`.
pub fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

/// The first card of the pod's decision (panics without one).
pub fn first_card(p: &Pod) -> String {
    allocated(p)
        .and_then(|c| c.into_iter().flatten().next())
        .map(|b| b.uuid)
        .unwrap_or_else(|| panic!("pod {:?} has no card", p.metadata.name))
}

/// The message of a `PodScheduled=False` condition.
pub fn unschedulable_message(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .and_then(|c| c.message.clone())
        .filter(|m| !m.is_empty())
}

/// A pod builder: one pause container with limits, on a pool's nodes.
pub struct PodSpec<'a> {
    name: String,
    pool: &'a str,
    annotations: Vec<(&'a str, String)>,
    limits: Vec<(&'a str, String)>,
    scheduler: Option<&'a str>,
    labels: Vec<(&'a str, &'a str)>,
    node_name: Option<&'a str>,
}

impl<'a> PodSpec<'a> {
    pub fn new(name: impl Into<String>, pool: &'a str) -> Self {
        PodSpec {
            name: name.into(),
            pool,
            annotations: vec![],
            limits: vec![],
            scheduler: None,
            labels: vec![],
            node_name: None,
        }
    }
    pub fn label(mut self, k: &'a str, v: &'a str) -> Self {
        self.labels.push((k, v));
        self
    }
    /// Created already bound (what admission refuses for GPU pods).
    pub fn node_name(mut self, n: &'a str) -> Self {
        self.node_name = Some(n);
        self
    }
    pub fn ann(mut self, k: &'a str, v: impl Into<String>) -> Self {
        self.annotations.push((k, v.into()));
        self
    }
    pub fn limit(mut self, k: &'a str, v: impl Into<String>) -> Self {
        self.limits.push((k, v.into()));
        self
    }
    pub fn scheduler(mut self, s: &'a str) -> Self {
        self.scheduler = Some(s);
        self
    }
    pub fn build(&self) -> Pod {
        let ann: BTreeMap<&str, &str> = self
            .annotations
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect();
        let lim: BTreeMap<&str, &str> = self.limits.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let labels: BTreeMap<&str, &str> = self.labels.iter().copied().collect();
        let mut spec = json!({
            "nodeSelector": {POOL: self.pool},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": lim}}]
        });
        if let Some(s) = self.scheduler {
            spec["schedulerName"] = json!(s);
        }
        if let Some(n) = self.node_name {
            spec["nodeName"] = json!(n);
        }
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "annotations": ann, "labels": labels},
            "spec": spec
        }))
        .unwrap()
    }
}
