//! Card discovery: the [`GpuSource`] trait, the facts it yields, and its implementations
//! ([`nvml::NvmlSource`], the real one; [`EmptySource`] for hosts without NVML when configured).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gpusched_api::v1;
use tokio::sync::Notify;

pub mod mig;
pub mod nvml;
mod nvml_mig;
pub mod sysfs;

pub use mig::{MigFacts, MigInstanceFacts, MigProfileFacts, MigState};

/// A connection from a card to a peer card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkFacts {
    /// The peer's UUID.
    pub peer_uuid: String,
    /// Kind of connection.
    pub kind: v1::LinkKind,
    /// NVLink lanes (NVLink only).
    pub lanes: u32,
}

/// Everything the agent knows about one physical card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CardFacts {
    /// GPU UUID.
    pub uuid: String,
    /// NVML index.
    pub index: u32,
    /// Model name, e.g. `NVIDIA H100 80GB HBM3`.
    pub model_name: String,
    /// Total memory, bytes.
    pub total_memory_bytes: u64,
    /// NUMA node, when known.
    pub numa: Option<u32>,
    /// MIG mode enabled.
    pub mig_enabled: bool,
    /// The MIG layout (profiles, placements, instances) when MIG mode is on.
    pub mig: MigState,
    /// Health: empty = healthy; otherwise why not.
    pub unhealthy_reasons: Vec<String>,
    /// Links to other cards.
    pub links: Vec<LinkFacts>,
    /// PCI bus id in sysfs form (`0000:3b:00.0`), when known.
    pub pci_bus_id: Option<String>,
    /// Minor number (`/dev/nvidia<minor>`), when known.
    pub minor_number: Option<u32>,
    /// CPUs close to the card (NVML CPU affinity), when known.
    pub cpus: Option<Vec<u32>>,
    /// Slurm logical core indices of those CPUs, when the CPU topology is readable.
    pub cores: Option<Vec<u32>>,
}

impl CardFacts {
    /// Whether the card takes new work.
    pub fn healthy(&self) -> bool {
        self.unhealthy_reasons.is_empty()
    }

    /// Marks the card unhealthy for `reason` (once per reason).
    pub fn mark_unhealthy(&mut self, reason: impl Into<String>) {
        let reason = reason.into();
        if !self.unhealthy_reasons.contains(&reason) {
            self.unhealthy_reasons.push(reason);
        }
    }

    /// The raw card sent to `NormalizeInventory`.
    pub fn to_raw(&self) -> v1::RawCard {
        v1::RawCard {
            uuid: self.uuid.clone(),
            index: self.index,
            model_name: self.model_name.clone(),
            total_memory_bytes: self.total_memory_bytes,
            numa: self.numa,
            mig_enabled: self.mig_enabled,
            health: if self.healthy() {
                v1::CardHealth::Healthy
            } else {
                v1::CardHealth::Unhealthy
            } as i32,
            links: self
                .links
                .iter()
                .map(|l| v1::RawLink {
                    peer_uuid: l.peer_uuid.clone(),
                    kind: l.kind as i32,
                    link_count: l.lanes,
                })
                .collect(),
        }
    }
}

/// The machine could not be read completely: nothing is published this round.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// NVML could not be loaded or initialised.
    #[error("NVML unavailable: {0}")]
    Unavailable(String),
    /// A fact of one card could not be read (not a clean "unhealthy").
    #[error("card {index}: cannot read {what}: {message}")]
    Card {
        /// NVML index.
        index: u32,
        /// Which fact.
        what: &'static str,
        /// The NVML error.
        message: String,
    },
    /// A machine-wide fact could not be read.
    #[error("cannot read {what}: {message}")]
    Machine {
        /// Which fact.
        what: &'static str,
        /// The NVML error.
        message: String,
    },
}

/// Where the cards come from. `read` returns every card of the machine or an error: never a
/// part of the machine. A card that is known but unhealthy is a card, not an error.
pub trait GpuSource: Send {
    /// Reads every card now.
    fn read(&mut self) -> Result<Vec<CardFacts>, DiscoveryError>;

    /// Notified when the source learns of a change between reads (e.g. an XID event).
    fn changes(&self) -> Option<Arc<Notify>> {
        None
    }

    /// Describes the source for logs.
    fn describe(&self) -> String;
}

/// A machine without NVML, when `nvml.publish_empty_when_missing` is set: zero cards.
#[derive(Debug, Clone, Default)]
pub struct EmptySource {
    /// Why there is no NVML.
    pub reason: String,
}

impl GpuSource for EmptySource {
    fn read(&mut self) -> Result<Vec<CardFacts>, DiscoveryError> {
        Ok(Vec::new())
    }

    fn describe(&self) -> String {
        format!("no NVML ({}): publishing zero cards", self.reason)
    }
}

/// Maps an NVML topology level (common ancestor of two cards) to a link kind.
pub fn link_kind_of_level(
    level: ::nvml_wrapper::enum_wrappers::device::TopologyLevel,
) -> v1::LinkKind {
    use ::nvml_wrapper::enum_wrappers::device::TopologyLevel as L;
    match level {
        L::Internal => v1::LinkKind::SameBoard,
        L::Single => v1::LinkKind::SingleSwitch,
        L::Multiple => v1::LinkKind::MultipleSwitches,
        L::HostBridge => v1::LinkKind::HostBridge,
        L::Node => v1::LinkKind::SameNuma,
        L::System => v1::LinkKind::System,
    }
}

/// The active NVLinks of one card: its bus id and each link's remote bus id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvLinkEnds {
    /// The card's UUID.
    pub uuid: String,
    /// The card's bus id (sysfs form).
    pub bus_id: Option<String>,
    /// Remote bus id of each active link.
    pub remotes: Vec<String>,
}

/// NVLink lanes between pairs of cards (keyed by UUIDs, both directions): a link whose remote
/// end is another card of this machine counts one lane to it; links to a device that is not a
/// card of this machine (an NVSwitch) connect every two cards that reach the same device, with
/// the smaller of their lane counts to it.
pub fn nvlink_lanes(cards: &[NvLinkEnds]) -> BTreeMap<(String, String), u32> {
    let by_bus: BTreeMap<&str, &str> = cards
        .iter()
        .filter_map(|c| c.bus_id.as_deref().map(|b| (b, c.uuid.as_str())))
        .collect();
    let mut lanes: BTreeMap<(String, String), u32> = BTreeMap::new();
    // Lanes from each card to each non-card remote device.
    let mut via: BTreeMap<&str, BTreeMap<&str, u32>> = BTreeMap::new();
    for c in cards {
        for remote in &c.remotes {
            match by_bus.get(remote.as_str()) {
                Some(peer) if *peer != c.uuid => {
                    *lanes
                        .entry((c.uuid.clone(), (*peer).to_owned()))
                        .or_insert(0) += 1;
                }
                Some(_) => {}
                None => {
                    *via.entry(remote.as_str())
                        .or_default()
                        .entry(c.uuid.as_str())
                        .or_insert(0) += 1;
                }
            }
        }
    }
    for reached in via.values() {
        for (a, la) in reached {
            for (b, lb) in reached {
                if a != b {
                    *lanes.entry(((*a).to_owned(), (*b).to_owned())).or_insert(0) += (*la).min(*lb);
                }
            }
        }
    }
    // A direct link counted from one side only (asymmetric reads) counts for both.
    let keys: BTreeSet<(String, String)> = lanes.keys().cloned().collect();
    for (a, b) in keys {
        let ab = lanes.get(&(a.clone(), b.clone())).copied().unwrap_or(0);
        let ba = lanes.get(&(b.clone(), a.clone())).copied().unwrap_or(0);
        let m = ab.max(ba);
        lanes.insert((a.clone(), b.clone()), m);
        lanes.insert((b, a), m);
    }
    lanes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(uuid: &str, bus: &str, remotes: &[&str]) -> NvLinkEnds {
        NvLinkEnds {
            uuid: uuid.into(),
            bus_id: Some(bus.into()),
            remotes: remotes.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn direct_nvlinks_count_lanes_per_peer() {
        let lanes = nvlink_lanes(&[
            ends("A", "0000:10:00.0", &["0000:20:00.0"; 4]),
            ends("B", "0000:20:00.0", &["0000:10:00.0"; 4]),
            ends("C", "0000:30:00.0", &[]),
        ]);
        assert_eq!(lanes.get(&("A".into(), "B".into())), Some(&4));
        assert_eq!(lanes.get(&("B".into(), "A".into())), Some(&4));
        assert!(!lanes.contains_key(&("A".into(), "C".into())));
        assert_eq!(lanes.len(), 2);
    }

    #[test]
    fn nvswitch_connects_cards_that_reach_the_same_switch() {
        // Two switches; A has 2 lanes to each, B 2 to S1 and 1 to S2, C none.
        let lanes = nvlink_lanes(&[
            ends(
                "A",
                "0000:10:00.0",
                &[
                    "0000:f1:00.0",
                    "0000:f1:00.0",
                    "0000:f2:00.0",
                    "0000:f2:00.0",
                ],
            ),
            ends(
                "B",
                "0000:20:00.0",
                &["0000:f1:00.0", "0000:f1:00.0", "0000:f2:00.0"],
            ),
            ends("C", "0000:30:00.0", &[]),
        ]);
        assert_eq!(lanes.get(&("A".into(), "B".into())), Some(&3));
        assert_eq!(lanes.get(&("B".into(), "A".into())), Some(&3));
        assert_eq!(lanes.len(), 2);
    }

    #[test]
    fn one_sided_reads_are_symmetric() {
        let lanes = nvlink_lanes(&[
            ends("A", "0000:10:00.0", &["0000:20:00.0", "0000:20:00.0"]),
            ends("B", "0000:20:00.0", &[]),
        ]);
        assert_eq!(lanes.get(&("B".into(), "A".into())), Some(&2));
    }

    #[test]
    fn raw_card_carries_health_and_links() {
        let mut c = CardFacts {
            uuid: "GPU-1".into(),
            index: 3,
            model_name: "NVIDIA A100-SXM4-40GB".into(),
            total_memory_bytes: 40 << 30,
            numa: Some(1),
            mig_enabled: false,
            mig: MigState::Disabled,
            unhealthy_reasons: vec![],
            links: vec![LinkFacts {
                peer_uuid: "GPU-2".into(),
                kind: v1::LinkKind::Nvlink,
                lanes: 12,
            }],
            pci_bus_id: None,
            minor_number: None,
            cpus: None,
            cores: None,
        };
        assert_eq!(c.to_raw().health, v1::CardHealth::Healthy as i32);
        c.mark_unhealthy("xid 79");
        c.mark_unhealthy("xid 79");
        assert_eq!(c.unhealthy_reasons.len(), 1);
        let raw = c.to_raw();
        assert_eq!(raw.health, v1::CardHealth::Unhealthy as i32);
        assert_eq!(raw.numa, Some(1));
        assert_eq!(raw.links[0].kind, v1::LinkKind::Nvlink as i32);
        assert_eq!(raw.links[0].link_count, 12);
    }
}
