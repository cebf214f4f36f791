//! Inventory normalisation: raw card facts (as a node agent reads them from NVML) and the
//! cluster's split count and scaling become the schedulable card list, HAMi's way.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{InvalidInput, Violation, ViolationKind};
use crate::model::{Card, CardMode, CardUsage, PairScore};

/// How two cards are connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// NVLink with some lanes.
    NvLink,
    /// Same multi-GPU board.
    SameBoard,
    /// One PCIe switch.
    SingleSwitch,
    /// Several PCIe switches.
    MultipleSwitches,
    /// One host bridge.
    HostBridge,
    /// Same NUMA node.
    SameNuma,
    /// Across NUMA nodes.
    System,
    /// Not known.
    Unknown,
}

impl LinkKind {
    /// Pair score contributed by one link: NVLink 100 per lane (at least one lane), then
    /// board 60, single switch 50, multiple switches 40, host bridge 30, same NUMA 20,
    /// system 10, unknown 0. Scores of several links to the same peer add up.
    pub fn score(self, lanes: u32) -> i64 {
        match self {
            LinkKind::NvLink => 100 * i64::from(lanes.max(1)),
            LinkKind::SameBoard => 60,
            LinkKind::SingleSwitch => 50,
            LinkKind::MultipleSwitches => 40,
            LinkKind::HostBridge => 30,
            LinkKind::SameNuma => 20,
            LinkKind::System => 10,
            LinkKind::Unknown => 0,
        }
    }
}

/// A link from a card to a peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawLink {
    /// Peer UUID.
    pub peer_uuid: String,
    /// Kind of link.
    pub kind: LinkKind,
    /// NVLink lanes.
    pub lanes: u32,
}

/// One physical card as read from NVML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawCard {
    /// GPU UUID.
    pub uuid: String,
    /// NVML index.
    pub index: u32,
    /// Model name, e.g. `NVIDIA A100-SXM4-40GB`.
    pub model_name: String,
    /// Total memory, bytes.
    pub total_memory_bytes: u64,
    /// NUMA node, when known.
    pub numa: Option<u32>,
    /// MIG mode enabled.
    pub mig_enabled: bool,
    /// Health as judged by the agent.
    pub healthy: bool,
    /// Links to other cards.
    pub links: Vec<RawLink>,
}

/// Overrides for some nodes or models (later entries win).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct NormalizationOverride {
    /// Node the override applies to; empty = every node.
    pub node_name: String,
    /// Models it applies to (case-insensitive substring); empty = every model.
    pub model_contains: String,
    /// Split count.
    pub split_count: Option<u32>,
    /// Memory scaling.
    pub memory_scaling: Option<f64>,
    /// Core scaling.
    pub core_scaling: Option<f64>,
}

/// Cluster-wide normalisation settings.
#[derive(Clone, Debug, PartialEq)]
pub struct NormalizationConfig {
    /// Slots per card (HAMi `deviceSplitCount`).
    pub split_count: u32,
    /// Memory scaling (HAMi `deviceMemoryScaling`).
    pub memory_scaling: f64,
    /// Core scaling (HAMi `deviceCoreScaling`).
    pub core_scaling: f64,
    /// Overrides.
    pub overrides: Vec<NormalizationOverride>,
}

impl Default for NormalizationConfig {
    fn default() -> Self {
        NormalizationConfig {
            split_count: 10,
            memory_scaling: 1.0,
            core_scaling: 1.0,
            overrides: Vec::new(),
        }
    }
}

fn check_split(field: String, v: u32, out: &mut Vec<Violation>) {
    if v == 0 {
        out.push(Violation::new(
            ViolationKind::OutOfRange,
            field,
            "split count must be at least 1",
        ));
    }
}

fn check_scaling(field: String, v: f64, out: &mut Vec<Violation>) {
    if !(v.is_finite() && v > 0.0 && v <= 1000.0) {
        out.push(Violation::new(
            ViolationKind::OutOfRange,
            field,
            format!("scaling {v} must be a number in (0, 1000]"),
        ));
    }
}

impl NormalizationConfig {
    /// Checks split counts (>= 1) and scaling factors (finite, in (0, 1000]).
    pub fn validate(&self) -> Result<(), InvalidInput> {
        let mut v = Vec::new();
        check_split("split_count".into(), self.split_count, &mut v);
        check_scaling("memory_scaling".into(), self.memory_scaling, &mut v);
        check_scaling("core_scaling".into(), self.core_scaling, &mut v);
        for (i, o) in self.overrides.iter().enumerate() {
            if let Some(s) = o.split_count {
                check_split(format!("overrides[{i}].split_count"), s, &mut v);
            }
            if let Some(s) = o.memory_scaling {
                check_scaling(format!("overrides[{i}].memory_scaling"), s, &mut v);
            }
            if let Some(s) = o.core_scaling {
                check_scaling(format!("overrides[{i}].core_scaling"), s, &mut v);
            }
        }
        if v.is_empty() {
            Ok(())
        } else {
            Err(InvalidInput { violations: v })
        }
    }

    /// The settings in force for one card of `node_name` with model `model`.
    pub fn resolve(&self, node_name: &str, model: &str) -> (u32, f64, f64) {
        NodeOverrides::new(self, node_name).resolve(model)
    }
}

/// The overrides that concern one node, model substrings upper-cased once (not once per card).
struct NodeOverrides<'a> {
    config: &'a NormalizationConfig,
    overrides: Vec<(&'a NormalizationOverride, String)>,
}

impl<'a> NodeOverrides<'a> {
    fn new(config: &'a NormalizationConfig, node_name: &str) -> Self {
        let overrides = config
            .overrides
            .iter()
            .filter(|o| o.node_name.is_empty() || o.node_name == node_name)
            .map(|o| (o, o.model_contains.to_uppercase()))
            .collect();
        NodeOverrides { config, overrides }
    }

    fn resolve(&self, model: &str) -> (u32, f64, f64) {
        let c = self.config;
        let (mut split, mut mem, mut core) = (c.split_count, c.memory_scaling, c.core_scaling);
        let model_upper = model.to_uppercase();
        for (o, contains_upper) in &self.overrides {
            if contains_upper.is_empty() || model_upper.contains(contains_upper.as_str()) {
                split = o.split_count.unwrap_or(split);
                mem = o.memory_scaling.unwrap_or(mem);
                core = o.core_scaling.unwrap_or(core);
            }
        }
        (split, mem, core)
    }
}

/// The schedulable inventory of one node.
#[derive(Clone, Debug, PartialEq)]
pub struct NormalizedInventory {
    /// Cards sorted by index (then id), idle.
    pub cards: Vec<Card>,
    /// Pair scores between the cards.
    pub pair_scores: Vec<PairScore>,
    /// Cards left out: (uuid, reason).
    pub skipped: Vec<(String, String)>,
}

/// HAMi's registered type: the model name, prefixed with `NVIDIA-` unless it starts with
/// `NVIDIA`.
pub fn card_type(model_name: &str) -> String {
    if model_name.starts_with("NVIDIA") {
        model_name.to_owned()
    } else {
        format!("NVIDIA-{model_name}")
    }
}

/// Normalises `raw` cards of `node_name` with `config` (validated here).
pub fn normalize_inventory(
    node_name: &str,
    raw: &[RawCard],
    config: &NormalizationConfig,
) -> Result<NormalizedInventory, InvalidInput> {
    config.validate().map_err(|e| e.prefixed("config"))?;
    let mut violations = Vec::new();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, c) in raw.iter().enumerate() {
        if c.uuid.trim().is_empty() {
            violations.push(Violation::new(
                ViolationKind::MissingField,
                format!("cards[{i}].uuid"),
                "uuid must not be empty",
            ));
        } else if let Some(first) = seen.insert(&c.uuid, i) {
            violations.push(Violation::new(
                ViolationKind::DuplicateId,
                format!("cards[{i}].uuid"),
                format!("duplicate uuid {:?} (also cards[{first}])", c.uuid),
            ));
        }
    }
    if !violations.is_empty() {
        return Err(InvalidInput { violations });
    }
    let overrides = NodeOverrides::new(config, node_name);
    let mut cards = Vec::new();
    let mut skipped = Vec::new();
    for c in raw {
        let mib = c.total_memory_bytes / (1024 * 1024);
        if mib == 0 {
            skipped.push((
                c.uuid.clone(),
                "total memory unknown or below 1 MiB".to_owned(),
            ));
            continue;
        }
        let (split, mem_scaling, core_scaling) = overrides.resolve(&c.model_name);
        let (mode, total_mem_mib, total_cores) = if c.mig_enabled {
            // HAMi applies no scaling to MIG cards.
            (CardMode::Mig, mib, 100)
        } else {
            let mem = if mem_scaling == 1.0 {
                mib
            } else {
                (mib as f64 * mem_scaling) as u64
            };
            (CardMode::HamiCore, mem, (core_scaling * 100.0) as u32)
        };
        cards.push(Card {
            id: c.uuid.clone(),
            index: c.index,
            card_type: card_type(&c.model_name),
            count: split,
            total_mem_mib,
            total_cores,
            numa: c.numa.unwrap_or(0),
            healthy: c.healthy,
            mode,
            usage: CardUsage::default(),
            // The MIG layout arrives with the MIG fields of the inventory API (next phase).
            mig: None,
        });
    }
    cards.sort_by(|a, b| a.index.cmp(&b.index).then_with(|| a.id.cmp(&b.id)));
    let kept: BTreeSet<&str> = cards.iter().map(|k| k.id.as_str()).collect();
    let mut pairs: BTreeMap<(String, String), i64> = BTreeMap::new();
    for c in raw {
        if !kept.contains(c.uuid.as_str()) {
            continue;
        }
        for link in &c.links {
            if link.peer_uuid == c.uuid || !kept.contains(link.peer_uuid.as_str()) {
                continue;
            }
            *pairs
                .entry((c.uuid.clone(), link.peer_uuid.clone()))
                .or_insert(0) += link.kind.score(link.lanes);
        }
    }
    let pair_scores = pairs
        .into_iter()
        .map(|((card_id, peer_card_id), score)| PairScore {
            card_id,
            peer_card_id,
            score,
        })
        .collect();
    Ok(NormalizedInventory {
        cards,
        pair_scores,
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(uuid: &str, index: u32, model: &str, gib: u64) -> RawCard {
        RawCard {
            uuid: uuid.into(),
            index,
            model_name: model.into(),
            total_memory_bytes: gib << 30,
            numa: Some(1),
            mig_enabled: false,
            healthy: true,
            links: vec![],
        }
    }

    #[test]
    fn scaling_split_and_type() {
        let mut cfg = NormalizationConfig {
            split_count: 4,
            memory_scaling: 1.5,
            core_scaling: 2.0,
            ..Default::default()
        };
        cfg.overrides.push(NormalizationOverride {
            model_contains: "h200".into(),
            split_count: Some(7),
            ..Default::default()
        });
        let inv = normalize_inventory(
            "n1",
            &[
                raw("GPU-b", 1, "NVIDIA H200", 141),
                raw("GPU-a", 0, "Tesla T4", 16),
            ],
            &cfg,
        )
        .unwrap();
        assert_eq!(inv.cards[0].id, "GPU-a");
        assert_eq!(inv.cards[0].card_type, "NVIDIA-Tesla T4");
        assert_eq!(inv.cards[0].count, 4);
        assert_eq!(inv.cards[0].total_mem_mib, 16 * 1024 * 3 / 2);
        assert_eq!(inv.cards[0].total_cores, 200);
        assert_eq!(inv.cards[1].card_type, "NVIDIA H200");
        assert_eq!(inv.cards[1].count, 7);
        assert_eq!(inv.cards[1].numa, 1);
    }

    #[test]
    fn bad_config_and_duplicates_are_rejected() {
        let cfg = NormalizationConfig {
            split_count: 0,
            memory_scaling: f64::NAN,
            ..Default::default()
        };
        let err = normalize_inventory("n", &[], &cfg).unwrap_err();
        assert_eq!(err.violations.len(), 2);
        assert_eq!(err.violations[0].field, "config.split_count");
        let err = normalize_inventory(
            "n",
            &[raw("A", 0, "x", 1), raw("A", 1, "x", 1)],
            &NormalizationConfig::default(),
        )
        .unwrap_err();
        assert_eq!(err.violations[0].field, "cards[1].uuid");
    }
}
