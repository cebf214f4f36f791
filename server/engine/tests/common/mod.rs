//! Builders for engine tests: nodes, cards and Kubernetes-style workloads in a few words.
#![allow(dead_code)]

pub mod placed;

use std::collections::BTreeMap;

use gpusched_engine::{
    Allocation, Card, CardUsage, DecideOptions, Defaults, KubeContainer, KubeNames, KubeSpec,
    NodeSpec, Snapshot, TypedContainer, TypedSpec, Workload, WorkloadMeta, WorkloadSpec, allocate,
};
use proptest::prelude::*;

/// A healthy card `id` with `index`, 10 slots, 100 cores and `mem` MiB.
pub fn card(id: &str, index: u32, mem: u64) -> Card {
    Card::new(id, index, "NVIDIA-A100-SXM4-40GB", mem)
}

/// Card builder helpers.
pub trait CardExt {
    fn used(self, slots: u32, mem: u64, cores: u32) -> Card;
    fn numa(self, numa: u32) -> Card;
    fn slots(self, count: u32) -> Card;
    fn unhealthy(self) -> Card;
    fn typed(self, t: &str) -> Card;
    fn cores(self, total: u32) -> Card;
}

impl CardExt for Card {
    fn used(mut self, slots: u32, mem: u64, cores: u32) -> Card {
        self.usage = CardUsage {
            used: slots,
            used_mem_mib: mem,
            used_cores: cores,
        };
        self
    }
    fn numa(mut self, numa: u32) -> Card {
        self.numa = numa;
        self
    }
    fn slots(mut self, count: u32) -> Card {
        self.count = count;
        self
    }
    fn unhealthy(mut self) -> Card {
        self.healthy = false;
        self
    }
    fn typed(mut self, t: &str) -> Card {
        self.card_type = t.to_owned();
        self
    }
    fn cores(mut self, total: u32) -> Card {
        self.total_cores = total;
        self
    }
}

/// A node with `n` idle cards `<name>-gpu<i>` of `mem` MiB.
pub fn node(name: &str, n: u32, mem: u64) -> NodeSpec {
    NodeSpec::new(
        name,
        (0..n)
            .map(|i| card(&format!("{name}-gpu{i}"), i, mem))
            .collect(),
    )
}

pub fn snapshot(nodes: Vec<NodeSpec>) -> Snapshot {
    Snapshot::new(nodes).expect("valid snapshot")
}

/// A Kubernetes-form workload builder.
#[derive(Clone, Debug, Default)]
pub struct Pod {
    pub spec: KubeSpec,
}

pub fn pod() -> Pod {
    Pod::default()
}

fn limits(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

impl Pod {
    pub fn ann(mut self, k: &str, v: &str) -> Pod {
        self.spec.annotations.insert(k.to_owned(), v.to_owned());
        self
    }
    /// An app container with resource limits given by short names: gpu, mem, pct, cores.
    pub fn container(mut self, pairs: &[(&str, &str)]) -> Pod {
        let i = self.spec.containers.len();
        self.spec.containers.push(KubeContainer {
            name: format!("c{i}"),
            limits: limits(&expand(pairs)),
            requests: BTreeMap::new(),
        });
        self
    }
    pub fn init(mut self, pairs: &[(&str, &str)]) -> Pod {
        let i = self.spec.init_containers.len();
        self.spec.init_containers.push(KubeContainer {
            name: format!("init{i}"),
            limits: limits(&expand(pairs)),
            requests: BTreeMap::new(),
        });
        self
    }
    /// One container asking for `gpus` cards (whole cards unless more limits are added).
    pub fn gpus(self, gpus: u32) -> Pod {
        let g = gpus.to_string();
        self.container(&[("gpu", g.as_str())])
    }
    pub fn parse(&self) -> Result<Workload, gpusched_engine::InvalidInput> {
        self.parse_with(&Defaults::default())
    }
    pub fn parse_with(
        &self,
        defaults: &Defaults,
    ) -> Result<Workload, gpusched_engine::InvalidInput> {
        Workload::parse(
            WorkloadMeta {
                namespace: "default".into(),
                name: "pod".into(),
                uid: "uid".into(),
            },
            &WorkloadSpec::Kubernetes(self.spec.clone()),
            defaults,
            &KubeNames::default(),
        )
    }
    pub fn workload(&self) -> Workload {
        self.parse().expect("valid workload")
    }
}

fn expand<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    pairs
        .iter()
        .map(|(k, v)| {
            let key = match *k {
                "gpu" => "nvidia.com/gpu",
                "mem" => "nvidia.com/gpumem",
                "pct" => "nvidia.com/gpumem-percentage",
                "cores" => "nvidia.com/gpucores",
                other => other,
            };
            (key, *v)
        })
        .collect()
}

/// Allocates and returns (node name, card ids per container).
pub fn place(s: &Snapshot, w: &Workload) -> Option<(String, Vec<Vec<String>>)> {
    let a = allocate(s, w, DecideOptions::default());
    placed(s, &a)
}

pub fn placed(s: &Snapshot, a: &Allocation) -> Option<(String, Vec<Vec<String>>)> {
    let p = a.placement.as_ref()?;
    let node = &s[p.node];
    let cards = p
        .containers
        .iter()
        .map(|c| {
            c.cards
                .iter()
                .map(|k| node.cards()[k.card].id.clone())
                .collect()
        })
        .collect();
    Some((node.name().to_owned(), cards))
}

/// Allocates and applies the placement (the next workload sees it). Returns the placement.
pub fn place_and_apply(s: &mut Snapshot, w: &Workload) -> Option<(String, Vec<Vec<String>>)> {
    let a = allocate(s, w, DecideOptions::default());
    let out = placed(s, &a);
    if let Some(p) = &a.placement {
        gpusched_engine::apply(s, p).expect("a fresh placement applies");
    }
    out
}

/// The HAMi reason text of `node` for `w`, when it fails.
pub fn failure_text(s: &Snapshot, w: &Workload, node: &str) -> Option<String> {
    let e = gpusched_engine::evaluate(s, w, DecideOptions::default());
    e.failed
        .iter()
        .find(|f| s[f.node].name() == node)
        .map(|f| f.failure.hami_text())
}

/// A typed workload (default identity, defaults and names); panics when invalid.
pub fn typed(spec: TypedSpec) -> Workload {
    Workload::parse(
        WorkloadMeta::default(),
        &WorkloadSpec::Typed(spec),
        &Defaults::default(),
        &KubeNames::default(),
    )
    .expect("valid typed workload")
}

/// A decision by names and ids: (chosen node, card ids per container), and every failed node
/// with HAMi's text, by name.
pub type Decision = (Option<(String, Vec<Vec<String>>)>, Vec<(String, String)>);

pub fn decision(s: &Snapshot, w: &Workload) -> Decision {
    let a = allocate(s, w, DecideOptions::default());
    let failed = a
        .failed
        .iter()
        .map(|f| (s[f.node].name().to_owned(), f.failure.hami_text()))
        .collect();
    (placed(s, &a), failed)
}

/// The same nodes in another order: reversed, then rotated left by `rot`, each node's cards
/// and pair scores reversed.
pub fn reordered(mut nodes: Vec<NodeSpec>, rot: usize) -> Vec<NodeSpec> {
    nodes.reverse();
    let len = nodes.len().max(1);
    nodes.rotate_left(rot % len);
    for n in &mut nodes {
        n.cards.reverse();
        n.pair_scores.reverse();
    }
    nodes
}

/// A proptest strategy for one typed container: its card count, MiB, percentage and cores (or
/// none: the default) each drawn from the values given.
pub fn arb_container(
    init: bool,
    gpus: Vec<u32>,
    mem_mib: Vec<u64>,
    percent: Vec<u32>,
    cores: Vec<u32>,
) -> impl Strategy<Value = TypedContainer> {
    (
        prop::sample::select(gpus),
        prop::sample::select(mem_mib),
        prop::sample::select(percent),
        prop::option::of(prop::sample::select(cores)),
    )
        .prop_map(
            move |(gpus, gpumem_mib, gpumem_percent, gpucores)| TypedContainer {
                name: if init { "init".into() } else { "app".into() },
                gpus,
                gpumem_mib,
                gpumem_percent,
                gpucores,
            },
        )
}
