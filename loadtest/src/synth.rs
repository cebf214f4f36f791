//! Seeded synthetic clusters and workloads (ChaCha8): the same options and seed give the same
//! requests, byte for byte, on every machine.
//!
//! - The cluster is drawn node by node from one stream, so the first 100 nodes of a 1,000-node
//!   cluster are the 100-node cluster of the same seed (a sweep grows one cluster).
//! - Workloads come from a second stream of the same seed: changing the mix does not change the
//!   cluster, and changing the cluster does not change the workloads.
//! - Requests are encoded once: the node list (field 1 of Filter/Score/AllocateRequest, the
//!   same field in all three) and each workload (field 2) separately; protobuf concatenation is
//!   the request, so a pool of workloads shares one encoding of the nodes.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use gpusched_api::v1;
use prost::Message as _;
use rand::Rng as _;
use rand::SeedableRng as _;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// A card model of the synthetic cluster and its share of the nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CardModel {
    /// Model string, e.g. `NVIDIA-A100-SXM4-80GB`.
    pub name: String,
    /// Memory per card, MiB.
    pub mem_mib: u64,
    /// Relative share of the nodes with this model.
    pub weight: u32,
}

/// Parses `NAME=MIB[:WEIGHT],...`.
pub fn parse_models(s: &str) -> Result<Vec<CardModel>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, rest) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?}: expected NAME=MIB[:WEIGHT]"))?;
        let (mem, weight) = match rest.split_once(':') {
            Some((m, w)) => (m, w),
            None => (rest, "1"),
        };
        let mem_mib: u64 = mem
            .trim()
            .parse()
            .map_err(|_| format!("{item:?}: memory {mem:?} is not a whole number of MiB"))?;
        let weight: u32 = weight
            .trim()
            .parse()
            .map_err(|_| format!("{item:?}: weight {weight:?} is not a whole number"))?;
        if name.trim().is_empty() || mem_mib == 0 {
            return Err(format!(
                "{item:?}: a name and a positive memory are required"
            ));
        }
        out.push(CardModel {
            name: name.trim().to_owned(),
            mem_mib,
            weight,
        });
    }
    if out.iter().all(|m| m.weight == 0) {
        return Err("at least one model with a positive weight is required".to_owned());
    }
    Ok(out)
}

/// The default model mix: A100 and H100 (80 GB), L4 and T4.
pub const DEFAULT_MODELS: &str = "NVIDIA-A100-SXM4-80GB=81920:4,NVIDIA-H100-80GB-HBM3=81920:3,NVIDIA-L4=23034:2,Tesla-T4=15360:1";

/// The shape of a synthetic cluster.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClusterSpec {
    /// Nodes.
    pub nodes: usize,
    /// Cards per node.
    pub cards_per_node: u32,
    /// NUMA nodes per node (cards are split evenly, in index order).
    pub numa_per_node: u32,
    /// Card models; each node has cards of one model, drawn by weight.
    pub models: Vec<CardModel>,
    /// Mean utilisation of the cards' memory and cores, 0..=1.
    pub fill: f64,
    /// Fraction of cards reported unhealthy.
    pub unhealthy: f64,
    /// Slots per card (HAMi deviceSplitCount).
    pub slots: u32,
}

impl ClusterSpec {
    /// `nodes` x `cards_per_node` cards of the default model mix at 50% fill.
    pub fn new(nodes: usize, cards_per_node: u32) -> Self {
        ClusterSpec {
            nodes,
            cards_per_node,
            numa_per_node: 2,
            models: parse_models(DEFAULT_MODELS).unwrap_or_default(),
            fill: 0.5,
            unhealthy: 0.0,
            slots: 10,
        }
    }
}

fn pick_weighted<'a, T>(rng: &mut ChaCha8Rng, items: &'a [(T, u32)]) -> Option<&'a T> {
    let total: u64 = items.iter().map(|(_, w)| u64::from(*w)).sum();
    if total == 0 {
        return None;
    }
    let mut x = rng.random_range(0..total);
    for (item, w) in items {
        let w = u64::from(*w);
        if x < w {
            return Some(item);
        }
        x -= w;
    }
    None
}

fn uuid(rng: &mut ChaCha8Rng) -> String {
    let a: u32 = rng.random();
    let b: u16 = rng.random();
    let c: u16 = rng.random();
    let d: u16 = rng.random();
    let e: u64 = rng.random::<u64>() & 0xffff_ffff_ffff;
    format!("GPU-{a:08x}-{b:04x}-{c:04x}-{d:04x}-{e:012x}")
}

/// Utilisation of one card, with mean `fill`: uniform on `[0, 2·fill]` up to half full,
/// uniform on `[2·fill − 1, 1]` above. Under 5% counts as idle.
fn utilisation(rng: &mut ChaCha8Rng, fill: f64) -> f64 {
    let fill = fill.clamp(0.0, 1.0);
    let x: f64 = rng.random();
    let u = if fill <= 0.5 {
        x * 2.0 * fill
    } else {
        (2.0 * fill - 1.0) + x * (2.0 - 2.0 * fill)
    };
    if u < 0.05 { 0.0 } else { u.min(1.0) }
}

/// The cluster's nodes (sorted by name, as generated).
pub fn cluster(spec: &ClusterSpec, seed: u64) -> Vec<v1::Node> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(0);
    let models: Vec<(&CardModel, u32)> = spec.models.iter().map(|m| (m, m.weight)).collect();
    let numa = spec.numa_per_node.max(1);
    let m = spec.cards_per_node.max(1);
    (0..spec.nodes)
        .map(|n| {
            let model = pick_weighted(&mut rng, &models).copied();
            let (type_name, mem) = model.map_or(("NVIDIA-A100-SXM4-80GB", 81920), |md| {
                (md.name.as_str(), md.mem_mib)
            });
            let cards = (0..spec.cards_per_node)
                .map(|i| {
                    let u = utilisation(&mut rng, spec.fill);
                    let healthy = !rng.random_bool(spec.unhealthy.clamp(0.0, 1.0));
                    let usage = (u > 0.0).then(|| v1::CardUsage {
                        // 1..=4 containers share a busy card.
                        used_slots: ((u * 4.0).ceil() as u32).clamp(1, spec.slots.max(1)),
                        used_mem_mib: (u * mem as f64).round() as u64,
                        used_cores: ((u * 100.0).round() as u32).min(100),
                    });
                    v1::Card {
                        mig: None,
                        id: uuid(&mut rng),
                        index: i,
                        r#type: type_name.to_owned(),
                        slots: spec.slots,
                        total_mem_mib: mem,
                        total_cores: 100,
                        numa: i * numa / m,
                        health: if healthy {
                            v1::CardHealth::Healthy as i32
                        } else {
                            v1::CardHealth::Unhealthy as i32
                        },
                        mode: v1::CardMode::HamiCore as i32,
                        usage,
                    }
                })
                .collect();
            v1::Node {
                name: format!("gpu-node-{n:05}"),
                cards,
                ..v1::Node::default()
            }
        })
        .collect()
}

/// A kind of workload in the mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// One card, a fraction of its memory and cores.
    Frac,
    /// One whole card (100% memory and cores).
    Whole,
    /// 2 or 4 cards (at most the cards of a node).
    Multi,
    /// 2 cards on one NUMA node (`nvidia.com/numa-bind`).
    NumaBind,
    /// One card under GPU policy `mutex` (idle cards only).
    Mutex,
    /// One card with `hami.io/device-scoring-weights`.
    Weights,
}

impl Kind {
    /// Every kind, in mix order.
    pub const ALL: [Kind; 6] = [
        Kind::Frac,
        Kind::Whole,
        Kind::Multi,
        Kind::NumaBind,
        Kind::Mutex,
        Kind::Weights,
    ];

    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Frac => "frac",
            Kind::Whole => "whole",
            Kind::Multi => "multi",
            Kind::NumaBind => "numa-bind",
            Kind::Mutex => "mutex",
            Kind::Weights => "weights",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Relative weights of the workload kinds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mix(pub Vec<(Kind, u32)>);

impl Default for Mix {
    fn default() -> Self {
        Mix(vec![
            (Kind::Frac, 50),
            (Kind::Whole, 15),
            (Kind::Multi, 10),
            (Kind::NumaBind, 10),
            (Kind::Mutex, 5),
            (Kind::Weights, 10),
        ])
    }
}

impl FromStr for Mix {
    type Err = String;

    /// `frac=50,whole=15,multi=10,numa-bind=10,mutex=5,weights=10`; kinds left out weigh 0.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut weights: HashMap<Kind, u32> = HashMap::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, w) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?}: expected KIND=WEIGHT"))?;
            let kind = Kind::ALL
                .into_iter()
                .find(|kind| {
                    kind.as_str() == k.trim() || (k.trim() == "numa" && *kind == Kind::NumaBind)
                })
                .ok_or_else(|| {
                    format!("{k:?}: unknown kind (frac, whole, multi, numa-bind, mutex, weights)")
                })?;
            let w: u32 = w
                .trim()
                .parse()
                .map_err(|_| format!("{item:?}: weight is not a whole number"))?;
            weights.insert(kind, w);
        }
        let mix: Vec<(Kind, u32)> = Kind::ALL
            .into_iter()
            .map(|k| (k, weights.get(&k).copied().unwrap_or(0)))
            .collect();
        if mix.iter().all(|(_, w)| *w == 0) {
            return Err("at least one kind needs a positive weight".to_owned());
        }
        Ok(Mix(mix))
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, w)| format!("{k}={w}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// How workloads are written: Kubernetes form (annotations and resource quantities, what the
/// scheduler shim sends) or typed form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Form {
    /// `workload.kubernetes`: annotations and `nvidia.com/*` limits.
    Kubernetes,
    /// `workload.typed`.
    Typed,
}

/// What one workload asks for, before it is written in a form.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ask {
    gpus: u32,
    mem_mib: u64,
    mem_percent: u32,
    cores: u32,
    numa_bind: bool,
    mutex: bool,
    weights: Option<(u64, u64, u64)>,
}

fn ask(rng: &mut ChaCha8Rng, kind: Kind, cards_per_node: u32) -> Ask {
    let base = Ask {
        gpus: 1,
        mem_mib: 0,
        mem_percent: 0,
        cores: 0,
        numa_bind: false,
        mutex: false,
        weights: None,
    };
    const MEMS: [u64; 5] = [1024, 2048, 4096, 8192, 16384];
    const CORES: [u32; 5] = [5, 10, 20, 30, 50];
    let mem = |rng: &mut ChaCha8Rng| MEMS[rng.random_range(0..MEMS.len())];
    let cores = |rng: &mut ChaCha8Rng| CORES[rng.random_range(0..CORES.len())];
    match kind {
        Kind::Frac => Ask {
            mem_mib: mem(rng),
            cores: cores(rng),
            ..base
        },
        Kind::Whole => Ask {
            mem_percent: 100,
            cores: 100,
            ..base
        },
        Kind::Multi => Ask {
            gpus: if rng.random_bool(0.5) { 2 } else { 4 }.min(cards_per_node.max(1)),
            mem_mib: mem(rng),
            cores: cores(rng),
            ..base
        },
        Kind::NumaBind => Ask {
            gpus: 2.min(cards_per_node.max(1)),
            mem_mib: mem(rng),
            cores: cores(rng),
            numa_bind: true,
            ..base
        },
        Kind::Mutex => Ask {
            mem_mib: mem(rng),
            cores: cores(rng),
            mutex: true,
            ..base
        },
        Kind::Weights => Ask {
            mem_mib: mem(rng),
            cores: cores(rng),
            weights: Some((
                rng.random_range(0..=4),
                rng.random_range(1..=4),
                rng.random_range(0..=4),
            )),
            ..base
        },
    }
}

fn write(a: &Ask, form: Form, i: usize, uid: String) -> v1::Workload {
    let name = format!("pod-{i:05}");
    let spec = match form {
        Form::Kubernetes => {
            let mut annotations = BTreeMap::new();
            if a.numa_bind {
                annotations.insert("nvidia.com/numa-bind".to_owned(), "true".to_owned());
            }
            if a.mutex {
                annotations.insert(
                    "hami.io/gpu-scheduler-policy".to_owned(),
                    "mutex".to_owned(),
                );
            }
            if let Some((s, c, m)) = a.weights {
                annotations.insert(
                    "hami.io/device-scoring-weights".to_owned(),
                    format!("slot={s},core={c},memory={m}"),
                );
            }
            let mut limits = BTreeMap::new();
            limits.insert("nvidia.com/gpu".to_owned(), a.gpus.to_string());
            if a.mem_mib > 0 {
                limits.insert("nvidia.com/gpumem".to_owned(), a.mem_mib.to_string());
            }
            if a.mem_percent > 0 {
                limits.insert(
                    "nvidia.com/gpumem-percentage".to_owned(),
                    a.mem_percent.to_string(),
                );
            }
            limits.insert("nvidia.com/gpucores".to_owned(), a.cores.to_string());
            v1::workload::Spec::Kubernetes(v1::KubernetesWorkloadSpec {
                annotations,
                init_containers: vec![],
                containers: vec![v1::KubernetesContainer {
                    name: "main".to_owned(),
                    limits,
                    requests: BTreeMap::new(),
                }],
            })
        }
        Form::Typed => v1::workload::Spec::Typed(v1::TypedWorkloadSpec {
            gpu_policy: if a.mutex {
                vec![v1::GpuPolicy::Mutex as i32]
            } else {
                vec![]
            },
            scoring_weights: a.weights.map(|(slot, core, memory)| v1::ScoringWeights {
                slot,
                core,
                memory,
            }),
            numa_bind: a.numa_bind,
            containers: vec![v1::ContainerRequest {
                name: "main".to_owned(),
                gpu_count: a.gpus,
                gpumem_mib: a.mem_mib,
                gpumem_percent: a.mem_percent,
                gpucores_percent: Some(a.cores),
            }],
            ..v1::TypedWorkloadSpec::default()
        }),
    };
    v1::Workload {
        quota: None,
        namespace: "loadtest".to_owned(),
        name,
        uid,
        spec: Some(spec),
    }
}

/// `count` workloads drawn from `mix` (stream 1 of `seed`).
pub fn workloads(
    mix: &Mix,
    form: Form,
    count: usize,
    cards_per_node: u32,
    seed: u64,
) -> Vec<(Kind, v1::Workload)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(1);
    (0..count)
        .filter_map(|i| {
            let kind = *pick_weighted(&mut rng, &mix.0)?;
            let a = ask(&mut rng, kind, cards_per_node);
            let uid = format!("{:032x}", rng.random::<u128>());
            Some((kind, write(&a, form, i, uid)))
        })
        .collect()
}

/// One pre-encoded request: the shared node list and this workload.
#[derive(Clone, Debug)]
pub struct Encoded {
    /// Field 1 (`nodes`), shared by the whole pool.
    pub nodes: Bytes,
    /// Field 2 (`workload`).
    pub workload: Bytes,
    /// The workload's kind.
    pub kind: Kind,
}

impl Encoded {
    /// Bytes on the wire (without gRPC framing).
    pub fn len(&self) -> usize {
        self.nodes.len() + self.workload.len()
    }

    /// Whether the request is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The request as one buffer (what an `AllocateRequest` encodes to).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(&self.nodes);
        v.extend_from_slice(&self.workload);
        v
    }
}

/// Requests built once and cycled through.
#[derive(Clone, Debug)]
pub struct Pool {
    /// The candidate nodes.
    pub nodes: Vec<v1::Node>,
    /// The workloads with their kinds.
    pub workloads: Vec<(Kind, v1::Workload)>,
    /// The encoded requests, one per workload.
    pub encoded: Vec<Encoded>,
    /// Sent once before the load (nodes by reference: every part inline, warming the server).
    pub prime: Option<Encoded>,
    /// The options every request carries (none: the server's defaults).
    pub options: Option<v1::PlacementOptions>,
}

impl Pool {
    /// Generates the cluster and `size` workloads, and encodes the requests.
    pub fn build(spec: &ClusterSpec, mix: &Mix, form: Form, size: usize, seed: u64) -> Pool {
        let nodes = cluster(spec, seed);
        let workloads = workloads(mix, form, size.max(1), spec.cards_per_node, seed);
        let nodes_bytes = Bytes::from(
            v1::AllocateRequest {
                nodes: nodes.clone(),
                ..v1::AllocateRequest::default()
            }
            .encode_to_vec(),
        );
        let encoded = workloads
            .iter()
            .map(|(kind, w)| Encoded {
                nodes: nodes_bytes.clone(),
                workload: Bytes::from(
                    v1::AllocateRequest {
                        workload: Some(w.clone()),
                        ..v1::AllocateRequest::default()
                    }
                    .encode_to_vec(),
                ),
                kind: *kind,
            })
            .collect();
        Pool {
            nodes,
            workloads,
            encoded,
            prime: None,
            options: None,
        }
    }

    /// Every request carries `options` from now on (re-encodes the workload part of each).
    pub fn set_options(&mut self, options: v1::PlacementOptions) {
        for (e, (_, w)) in self.encoded.iter_mut().zip(&self.workloads) {
            e.workload = Bytes::from(
                v1::AllocateRequest {
                    workload: Some(w.clone()),
                    options: Some(options.clone()),
                    ..v1::AllocateRequest::default()
                }
                .encode_to_vec(),
            );
        }
        self.options = Some(options);
    }

    /// The full typed request of pool entry `i`.
    pub fn allocate_request(&self, i: usize) -> Option<v1::AllocateRequest> {
        let (_, w) = self.workloads.get(i)?;
        Some(v1::AllocateRequest {
            nodes: self.nodes.clone(),
            workload: Some(w.clone()),
            options: self.options.clone(),
            ..v1::AllocateRequest::default()
        })
    }

    /// Mean encoded request size, bytes.
    pub fn mean_request_bytes(&self) -> f64 {
        if self.encoded.is_empty() {
            return 0.0;
        }
        self.encoded.iter().map(Encoded::len).sum::<usize>() as f64 / self.encoded.len() as f64
    }

    /// Cards in the cluster.
    pub fn cards(&self) -> usize {
        self.nodes.iter().map(|n| n.cards.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pool(nodes: usize, seed: u64, form: Form) -> Pool {
        Pool::build(&ClusterSpec::new(nodes, 8), &Mix::default(), form, 32, seed)
    }

    #[test]
    fn same_seed_same_bytes() {
        for form in [Form::Kubernetes, Form::Typed] {
            let a = pool(50, 7, form);
            let b = pool(50, 7, form);
            assert_eq!(a.encoded.len(), 32);
            for (x, y) in a.encoded.iter().zip(&b.encoded) {
                assert_eq!(x.to_vec(), y.to_vec());
                assert_eq!(x.kind, y.kind);
            }
        }
    }

    #[test]
    fn other_seed_other_cluster_and_workloads() {
        let a = pool(50, 7, Form::Kubernetes);
        let b = pool(50, 8, Form::Kubernetes);
        assert_ne!(a.encoded[0].nodes, b.encoded[0].nodes);
        let kinds = |p: &Pool| p.encoded.iter().map(|e| e.kind).collect::<Vec<_>>();
        let wl = |p: &Pool| {
            p.encoded
                .iter()
                .map(|e| e.workload.clone())
                .collect::<Vec<_>>()
        };
        assert!(kinds(&a) != kinds(&b) || wl(&a) != wl(&b));
    }

    #[test]
    fn known_values_for_seed_42() {
        // Pins the generator: a change here changes every published number.
        let nodes = cluster(&ClusterSpec::new(3, 8), 42);
        let first = &nodes[0];
        assert_eq!(first.name, "gpu-node-00000");
        assert_eq!(first.cards.len(), 8);
        assert_eq!(first.cards[0].id.len(), 40);
        let fingerprint: Vec<String> = nodes
            .iter()
            .map(|n| format!("{}:{}:{}", n.name, n.cards[0].r#type, n.cards[0].id))
            .collect();
        assert_eq!(fingerprint, KNOWN_42);
    }

    const KNOWN_42: [&str; 3] = [
        "gpu-node-00000:NVIDIA-H100-80GB-HBM3:GPU-58166752-b2f9-42b0-49d8-b45ba45d829e",
        "gpu-node-00001:NVIDIA-L4:GPU-f1b154fc-cff5-5013-6b90-ef74dde66a07",
        "gpu-node-00002:Tesla-T4:GPU-51e036d4-1984-c114-003b-8247b7702b23",
    ];

    #[test]
    fn a_bigger_cluster_extends_a_smaller_one() {
        let small = cluster(&ClusterSpec::new(10, 8), 5);
        let big = cluster(&ClusterSpec::new(100, 8), 5);
        assert_eq!(small[..], big[..10]);
    }

    #[test]
    fn changing_the_mix_keeps_the_cluster() {
        let spec = ClusterSpec::new(20, 8);
        let a = Pool::build(&spec, &Mix::default(), Form::Kubernetes, 8, 3);
        let b = Pool::build(&spec, &"mutex=1".parse().unwrap(), Form::Kubernetes, 8, 3);
        assert_eq!(a.encoded[0].nodes, b.encoded[0].nodes);
        assert!(b.encoded.iter().all(|e| e.kind == Kind::Mutex));
    }

    #[test]
    fn fill_sets_the_mean_utilisation() {
        for fill in [0.1, 0.5, 0.8] {
            let mut spec = ClusterSpec::new(500, 8);
            spec.fill = fill;
            let nodes = cluster(&spec, 1);
            let (mut used, mut total) = (0.0, 0.0);
            for c in nodes.iter().flat_map(|n| &n.cards) {
                total += c.total_mem_mib as f64;
                used += c.usage.as_ref().map_or(0, |u| u.used_mem_mib) as f64;
                if let Some(u) = &c.usage {
                    assert!(u.used_slots >= 1 && u.used_slots <= c.slots);
                    assert!(u.used_cores <= 100 && u.used_mem_mib <= c.total_mem_mib);
                }
            }
            let mean = used / total;
            assert!((mean - fill).abs() < 0.03, "fill {fill}: mean {mean}");
        }
    }

    #[test]
    fn models_and_numa_follow_the_spec() {
        let mut spec = ClusterSpec::new(200, 8);
        spec.models = parse_models("A=1000:1,B=2000:3").unwrap();
        spec.unhealthy = 0.1;
        let nodes = cluster(&spec, 2);
        let b = nodes.iter().filter(|n| n.cards[0].r#type == "B").count();
        assert!((120..=180).contains(&b), "weight 3 of 4: {b}");
        for n in &nodes {
            assert!(n.cards.iter().all(|c| c.r#type == n.cards[0].r#type));
            let numa: Vec<u32> = n.cards.iter().map(|c| c.numa).collect();
            assert_eq!(numa, [0, 0, 0, 0, 1, 1, 1, 1]);
        }
        let unhealthy = nodes
            .iter()
            .flat_map(|n| &n.cards)
            .filter(|c| c.health == v1::CardHealth::Unhealthy as i32)
            .count();
        assert!((100..=220).contains(&unhealthy), "{unhealthy} of 1600");
    }

    #[test]
    fn every_kind_appears_and_is_valid() {
        let settings = gpusched_service::default_settings().unwrap();
        for form in [Form::Kubernetes, Form::Typed] {
            let ws = workloads(&Mix::default(), form, 400, 8, 11);
            for kind in Kind::ALL {
                assert!(ws.iter().any(|(k, _)| *k == kind), "{kind} missing");
            }
            for (kind, w) in ws {
                let parsed = gpusched_service::pipeline::workload(&settings, w).unwrap();
                assert!(parsed.requests_gpu(), "{kind}");
                assert_eq!(parsed.numa_bind, kind == Kind::NumaBind);
            }
        }
    }

    #[test]
    fn parse_errors() {
        assert!(parse_models("x").is_err());
        assert!(parse_models("x=abc").is_err());
        assert!(parse_models("x=0").is_err());
        assert!(parse_models("x=10:0").is_err());
        assert!("frac=a".parse::<Mix>().is_err());
        assert!("gpu=1".parse::<Mix>().is_err());
        assert!("frac=0".parse::<Mix>().is_err());
        let m: Mix = "numa=2,whole=1".parse().unwrap();
        assert_eq!(
            m.to_string(),
            "frac=0,whole=1,multi=0,numa-bind=2,mutex=0,weights=0"
        );
    }
}
