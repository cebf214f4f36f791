//! Builders for Kubernetes-style workloads and simple nodes.

use std::collections::BTreeMap;

use gpusched_api::v1;

/// Builds a workload from pod annotations and per-container resource limits.
#[derive(Clone, Debug, Default)]
pub struct PodBuilder {
    namespace: String,
    name: String,
    uid: String,
    annotations: BTreeMap<String, String>,
    init: Vec<v1::KubernetesContainer>,
    containers: Vec<v1::KubernetesContainer>,
}

fn limits(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

impl PodBuilder {
    /// A pod `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        PodBuilder {
            namespace: namespace.into(),
            name: name.into(),
            ..PodBuilder::default()
        }
    }

    /// Sets the uid.
    pub fn uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = uid.into();
        self
    }

    /// Adds an annotation.
    pub fn annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// Adds all annotations of a map.
    pub fn annotations(mut self, map: &BTreeMap<String, String>) -> Self {
        self.annotations
            .extend(map.iter().map(|(k, v)| (k.clone(), v.clone())));
        self
    }

    /// Adds an app container with these resource limits (e.g. `("nvidia.com/gpu", "1")`).
    pub fn container(mut self, name: impl Into<String>, resource_limits: &[(&str, &str)]) -> Self {
        self.containers.push(v1::KubernetesContainer {
            name: name.into(),
            limits: limits(resource_limits),
            requests: BTreeMap::new(),
        });
        self
    }

    /// Adds an init container with these resource limits.
    pub fn init_container(
        mut self,
        name: impl Into<String>,
        resource_limits: &[(&str, &str)],
    ) -> Self {
        self.init.push(v1::KubernetesContainer {
            name: name.into(),
            limits: limits(resource_limits),
            requests: BTreeMap::new(),
        });
        self
    }

    /// The workload message.
    pub fn build(self) -> v1::Workload {
        v1::Workload {
            quota: None,
            namespace: self.namespace,
            name: self.name,
            uid: self.uid,
            spec: Some(v1::workload::Spec::Kubernetes(v1::KubernetesWorkloadSpec {
                annotations: self.annotations,
                init_containers: self.init,
                containers: self.containers,
            })),
        }
    }
}

/// A node of `cards` idle, healthy cards of `mem_mib` each, 10 slots, 100 cores, named
/// `<name>-gpu<i>`.
pub fn node(name: &str, cards: u32, mem_mib: u64, card_type: &str) -> v1::Node {
    node_from_cards(
        name,
        (0..cards)
            .map(|i| v1::Card {
                mig: None,
                id: format!("{name}-gpu{i}"),
                index: i,
                r#type: card_type.to_owned(),
                slots: 10,
                total_mem_mib: mem_mib,
                total_cores: 100,
                numa: 0,
                health: v1::CardHealth::Healthy as i32,
                mode: v1::CardMode::HamiCore as i32,
                usage: None,
            })
            .collect(),
    )
}

/// A node with these cards.
pub fn node_from_cards(name: &str, cards: Vec<v1::Card>) -> v1::Node {
    v1::Node {
        name: name.to_owned(),
        cards,
        ..v1::Node::default()
    }
}
