//! # gpusched-hami
//!
//! HAMi's NVIDIA annotation protocol (`docs/hami-protocol.md`), to and from the gpusched v1
//! types, so our node agent can feed HAMi's scheduler and our Kubernetes shim can read HAMi's
//! device plugin, and HAMi's device plugin and HAMi-core enforce what our shim decides.
//!
//! - `hami.io/node-nvidia-register`: [`encode_register`] / [`decode_register`] (JSON array, or
//!   the older colon form when reading).
//! - `hami.io/node-nvidia-score`: [`encode_pair_scores`] / [`decode_pair_scores`].
//! - `hami.io/vgpu-devices-to-allocate` / `-allocated`: [`encode_pod_devices`] /
//!   [`decode_pod_devices`].
//! - MIG: a MIG card's `migProfiles` ([`RegisteredCard::mig_profiles`], [`MigProfile`]; the
//!   register with them: [`encode_registered`] / [`decode_registered`]) and the pod annotation
//!   `hami.io/vgpu-mig-allocations` ([`encode_mig_allocations`] / [`decode_mig_allocations`];
//!   from a decision: [`mig_allocations`]); a layout derived from `migProfiles` alone
//!   ([`layout_from_profiles`]).
//! - gpusched's companion node annotation `gpusched.io/node-mig-layouts`, each MIG card's whole
//!   layout as the node agent read it ([`encode_node_mig_layouts`] / [`decode_node_mig_layouts`]).

use std::collections::BTreeMap;

mod error;
mod mig;
mod node_mig;

pub use error::HamiError;
use error::err;
pub use mig::{
    MIG_ALLOCATIONS, MigAllocation, MigPlacement, MigProfile, MigRuntime, decode_mig_allocations,
    encode_mig_allocations, layout_from_profiles, mig_allocations,
};
pub use node_mig::{NODE_MIG_LAYOUTS, decode_node_mig_layouts, encode_node_mig_layouts};

use gpusched_api::v1;
use serde::{Deserialize, Serialize};

/// Node annotation: the card inventory.
pub const NODE_REGISTER: &str = "hami.io/node-nvidia-register";
/// Node annotation: pair scores between cards.
pub const NODE_SCORE: &str = "hami.io/node-nvidia-score";
/// Node annotation: handshake between the device plugin (or agent) and the scheduler.
pub const NODE_HANDSHAKE: &str = "hami.io/node-handshake";
/// Node annotation: cordoned card ids.
pub const DEVICE_CORDON: &str = "hami.io/device-cordon";
/// Pod annotation: what the device plugin still has to hand out, per container.
pub const DEVICES_TO_ALLOCATE: &str = "hami.io/vgpu-devices-to-allocate";
/// Pod annotation: what the pod holds, per container (usage is counted from this).
pub const DEVICES_ALLOCATED: &str = "hami.io/vgpu-devices-allocated";
/// Pod annotation and label: the node the scheduler chose.
pub const VGPU_NODE: &str = "hami.io/vgpu-node";
/// Pod annotation: when the scheduler decided (unix seconds).
pub const VGPU_TIME: &str = "hami.io/vgpu-time";
/// Pod annotation: `allocating`, then `success` or `failed`.
pub const BIND_PHASE: &str = "hami.io/bind-phase";
/// Pod annotation: when the bind phase was set (unix seconds).
pub const BIND_TIME: &str = "hami.io/bind-time";
/// The device type written in pod bookings.
pub const NVIDIA: &str = "NVIDIA";

fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// One card of `hami.io/node-nvidia-register` (every field omitted when zero, like HAMi).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisteredCard {
    /// GPU UUID.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub id: String,
    /// NVML index.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub index: u32,
    /// Slots (split count).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub count: i32,
    /// Memory after scaling, MiB.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub devmem: i32,
    /// Cores after scaling, percent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub devcore: i32,
    /// Model string.
    #[serde(default, rename = "type", skip_serializing_if = "is_zero")]
    pub card_type: String,
    /// NUMA node.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub numa: i32,
    /// `hami-core`, `mig`, `mps`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mode: String,
    /// A MIG card's profiles (HAMi's dynamic MIG; only the node's allowlisted ones), written
    /// where HAMi's device plugin writes them: after `mode`.
    #[serde(default, rename = "migProfiles", skip_serializing_if = "Vec::is_empty")]
    pub mig_profiles: Vec<MigProfile>,
    /// Healthy (absent = unhealthy).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub health: bool,
    /// `NVIDIA`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub devicevendor: String,
}

fn mode_name(mode: i32) -> &'static str {
    match v1::CardMode::try_from(mode) {
        Ok(v1::CardMode::Mig) => "mig",
        Ok(v1::CardMode::Mps) => "mps",
        _ => "hami-core",
    }
}

fn mode_value(name: &str) -> Result<i32, HamiError> {
    match name {
        "" | "hami-core" => Ok(v1::CardMode::HamiCore as i32),
        "mig" => Ok(v1::CardMode::Mig as i32),
        "mps" => Ok(v1::CardMode::Mps as i32),
        other => Err(err(NODE_REGISTER, format!("unknown mode {other:?}"))),
    }
}

fn clamp_i32<T: TryInto<i32>>(v: T) -> i32 {
    v.try_into().unwrap_or(i32::MAX)
}

impl RegisteredCard {
    /// From a schedulable card (usage is not part of the inventory).
    pub fn from_card(c: &v1::Card) -> Self {
        RegisteredCard {
            id: c.id.clone(),
            index: c.index,
            count: clamp_i32(c.slots),
            devmem: clamp_i32(c.total_mem_mib),
            devcore: clamp_i32(c.total_cores),
            card_type: c.r#type.clone(),
            numa: clamp_i32(c.numa),
            mode: mode_name(c.mode).to_owned(),
            mig_profiles: Vec::new(),
            health: c.health == v1::CardHealth::Healthy as i32,
            devicevendor: NVIDIA.to_owned(),
        }
    }

    /// To an idle schedulable card.
    pub fn to_card(&self) -> Result<v1::Card, HamiError> {
        let non_negative = |name: &str, v: i32| -> Result<u32, HamiError> {
            u32::try_from(v).map_err(|_| {
                err(
                    NODE_REGISTER,
                    format!("card {:?}: {name} {v} is negative", self.id),
                )
            })
        };
        if self.id.is_empty() {
            return Err(err(NODE_REGISTER, "a card without id"));
        }
        Ok(v1::Card {
            mig: None,
            id: self.id.clone(),
            index: self.index,
            r#type: self.card_type.clone(),
            slots: non_negative("count", self.count)?,
            total_mem_mib: u64::from(non_negative("devmem", self.devmem)?),
            total_cores: non_negative("devcore", self.devcore)?,
            numa: non_negative("numa", self.numa)?,
            health: if self.health {
                v1::CardHealth::Healthy
            } else {
                v1::CardHealth::Unhealthy
            } as i32,
            mode: mode_value(&self.mode)?,
            usage: None,
        })
    }
}

/// The `hami.io/node-nvidia-register` value for these cards (JSON array, HAMi field names).
pub fn encode_register(cards: &[v1::Card]) -> String {
    let reg: Vec<RegisteredCard> = cards.iter().map(RegisteredCard::from_card).collect();
    serde_json::to_string(&reg).unwrap_or_else(|_| "[]".to_owned())
}

/// The `hami.io/node-nvidia-register` value for cards already in HAMi's form (e.g. MIG cards
/// with their `migProfiles`).
pub fn encode_registered(cards: &[RegisteredCard]) -> String {
    serde_json::to_string(cards).unwrap_or_else(|_| "[]".to_owned())
}

/// Reads `hami.io/node-nvidia-register` in HAMi's own form, `migProfiles` included (the colon
/// form has none).
pub fn decode_registered(value: &str) -> Result<Vec<RegisteredCard>, HamiError> {
    let trimmed = value.trim();
    if trimmed.starts_with('[') {
        let reg: Vec<RegisteredCard> = serde_json::from_str(trimmed)
            .map_err(|e| err(NODE_REGISTER, format!("invalid JSON: {e}")))?;
        for c in &reg {
            c.to_card()?;
        }
        return Ok(reg);
    }
    decode_register(value)?
        .iter()
        .map(|c| Ok(RegisteredCard::from_card(c)))
        .collect()
}

/// Reads `hami.io/node-nvidia-register`: the JSON array, or HAMi's older colon form
/// (`uuid,count,devmem,devcore,type,numa,health[,index,mode]:` per card).
pub fn decode_register(value: &str) -> Result<Vec<v1::Card>, HamiError> {
    let trimmed = value.trim();
    if trimmed.starts_with('[') {
        let reg: Vec<RegisteredCard> = serde_json::from_str(trimmed)
            .map_err(|e| err(NODE_REGISTER, format!("invalid JSON: {e}")))?;
        return reg.iter().map(RegisteredCard::to_card).collect();
    }
    if !trimmed.contains(':') {
        return Err(err(
            NODE_REGISTER,
            "neither a JSON array nor the colon form",
        ));
    }
    let mut cards = Vec::new();
    for seg in trimmed.split(':').filter(|s| !s.is_empty()) {
        let f: Vec<&str> = seg.split(',').collect();
        if f.len() != 7 && f.len() != 9 {
            return Err(err(
                NODE_REGISTER,
                format!("segment {seg:?} has {} fields, need 7 or 9", f.len()),
            ));
        }
        let num = |i: usize, name: &str| -> Result<i32, HamiError> {
            f.get(i)
                .and_then(|v| v.trim().parse::<i32>().ok())
                .ok_or_else(|| err(NODE_REGISTER, format!("segment {seg:?}: invalid {name}")))
        };
        let health = match f.get(6).map(|s| s.trim()) {
            Some("true" | "True" | "TRUE" | "1" | "t" | "T") => true,
            Some("false" | "False" | "FALSE" | "0" | "f" | "F") => false,
            _ => {
                return Err(err(
                    NODE_REGISTER,
                    format!("segment {seg:?}: invalid health"),
                ));
            }
        };
        let mut rc = RegisteredCard {
            id: f.first().map(|s| s.trim().to_owned()).unwrap_or_default(),
            count: num(1, "count")?,
            devmem: num(2, "devmem")?,
            devcore: num(3, "devcore")?,
            card_type: f.get(4).map(|s| s.trim().to_owned()).unwrap_or_default(),
            numa: num(5, "numa")?,
            health,
            ..RegisteredCard::default()
        };
        if f.len() == 9 {
            rc.index = u32::try_from(num(7, "index")?)
                .map_err(|_| err(NODE_REGISTER, format!("segment {seg:?}: negative index")))?;
            rc.mode = f.get(8).map(|s| s.trim().to_owned()).unwrap_or_default();
        }
        cards.push(rc.to_card()?);
    }
    Ok(cards)
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct PairScoreEntry {
    #[serde(default)]
    uuid: String,
    #[serde(default)]
    score: BTreeMap<String, i64>,
}

/// The `hami.io/node-nvidia-score` value: `[{"uuid": "...", "score": {"<peer>": int}}]`.
pub fn encode_pair_scores(pairs: &[v1::CardPairScore]) -> String {
    let mut by_card: BTreeMap<&str, BTreeMap<String, i64>> = BTreeMap::new();
    for p in pairs {
        by_card
            .entry(p.card_id.as_str())
            .or_default()
            .insert(p.peer_card_id.clone(), p.score);
    }
    let entries: Vec<PairScoreEntry> = by_card
        .into_iter()
        .map(|(uuid, score)| PairScoreEntry {
            uuid: uuid.to_owned(),
            score,
        })
        .collect();
    serde_json::to_string(&entries).unwrap_or_else(|_| "[]".to_owned())
}

/// Reads `hami.io/node-nvidia-score`.
pub fn decode_pair_scores(value: &str) -> Result<Vec<v1::CardPairScore>, HamiError> {
    let entries: Vec<PairScoreEntry> = serde_json::from_str(value.trim())
        .map_err(|e| err(NODE_SCORE, format!("invalid JSON: {e}")))?;
    Ok(entries
        .into_iter()
        .flat_map(|e| {
            let uuid = e.uuid;
            e.score
                .into_iter()
                .map(move |(peer, score)| v1::CardPairScore {
                    card_id: uuid.clone(),
                    peer_card_id: peer,
                    score,
                })
        })
        .collect())
}

/// One card booked by one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Booking {
    /// Card id.
    pub uuid: String,
    /// Device type (`NVIDIA`).
    pub device_type: String,
    /// Memory, MiB.
    pub mem_mib: u64,
    /// Cores, percent.
    pub cores: u32,
}

/// Encodes per-container bookings, init containers first: `<uuid>,NVIDIA,<mem>,<cores>:` per
/// card and `;` after every container (an empty segment for a container without GPU).
pub fn encode_pod_devices(containers: &[Vec<Booking>]) -> String {
    let mut out = String::new();
    for c in containers {
        for b in c {
            out.push_str(&format!(
                "{},{},{},{}:",
                b.uuid, b.device_type, b.mem_mib, b.cores
            ));
        }
        out.push(';');
    }
    out
}

/// The bookings of an allocation result, in its container order.
pub fn bookings(result: &v1::AllocationResult) -> Vec<Vec<Booking>> {
    result
        .containers
        .iter()
        .map(|c| {
            c.cards
                .iter()
                .map(|k| Booking {
                    uuid: k.card_id.clone(),
                    device_type: NVIDIA.to_owned(),
                    mem_mib: k.mem_mib,
                    cores: k.cores_percent,
                })
                .collect()
        })
        .collect()
}

/// Decodes `hami.io/vgpu-devices-allocated` (or `-to-allocate`) into per-container bookings.
pub fn decode_pod_devices(value: &str) -> Result<Vec<Vec<Booking>>, HamiError> {
    let mut containers = Vec::new();
    let segments: Vec<&str> = value.split(';').collect();
    // A trailing ';' ends the last container; it does not start a new one.
    let count = if value.ends_with(';') {
        segments.len().saturating_sub(1)
    } else {
        segments.len()
    };
    for seg in segments.into_iter().take(count) {
        let mut cards = Vec::new();
        for card in seg.split(':').filter(|s| s.contains(',')) {
            let f: Vec<&str> = card.split(',').collect();
            if f.len() < 4 {
                return Err(err(
                    DEVICES_ALLOCATED,
                    format!("{card:?}: need uuid,type,mem,cores"),
                ));
            }
            let mem = f
                .get(2)
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| err(DEVICES_ALLOCATED, format!("{card:?}: invalid memory")))?;
            let cores = f
                .get(3)
                .and_then(|v| v.parse::<u32>().ok())
                .ok_or_else(|| err(DEVICES_ALLOCATED, format!("{card:?}: invalid cores")))?;
            cards.push(Booking {
                uuid: f.first().map(|s| (*s).to_owned()).unwrap_or_default(),
                device_type: f.get(1).map(|s| (*s).to_owned()).unwrap_or_default(),
                mem_mib: mem,
                cores,
            });
        }
        containers.push(cards);
    }
    Ok(containers)
}

/// Adds a pod's bookings to the usage of the matching cards (one slot per container per card).
pub fn add_usage(cards: &mut [v1::Card], bookings: &[Vec<Booking>]) {
    for container in bookings {
        for b in container {
            if let Some(c) = cards.iter_mut().find(|c| c.id == b.uuid) {
                let u = c.usage.get_or_insert_with(v1::CardUsage::default);
                u.used_slots = u.used_slots.saturating_add(1);
                u.used_mem_mib = u.used_mem_mib.saturating_add(b.mem_mib);
                u.used_cores = u.used_cores.saturating_add(b.cores);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(id: &str, index: u32, healthy: bool) -> v1::Card {
        v1::Card {
            mig: None,
            id: id.into(),
            index,
            r#type: "NVIDIA-A100-SXM4-40GB".into(),
            slots: 10,
            total_mem_mib: 40960,
            total_cores: 100,
            numa: 0,
            health: if healthy {
                v1::CardHealth::Healthy
            } else {
                v1::CardHealth::Unhealthy
            } as i32,
            mode: v1::CardMode::HamiCore as i32,
            usage: None,
        }
    }

    #[test]
    fn register_json_omits_zero_values_and_round_trips() {
        let cards = vec![card("GPU-a", 0, true), card("GPU-b", 1, false)];
        let text = encode_register(&cards);
        assert_eq!(
            text,
            r#"[{"id":"GPU-a","count":10,"devmem":40960,"devcore":100,"type":"NVIDIA-A100-SXM4-40GB","mode":"hami-core","health":true,"devicevendor":"NVIDIA"},{"id":"GPU-b","index":1,"count":10,"devmem":40960,"devcore":100,"type":"NVIDIA-A100-SXM4-40GB","mode":"hami-core","devicevendor":"NVIDIA"}]"#
        );
        assert_eq!(decode_register(&text).unwrap(), cards);
    }

    #[test]
    fn register_carries_mig_profiles_where_hami_writes_them() {
        let mut mig = card("GPU-m", 2, true);
        mig.mode = v1::CardMode::Mig as i32;
        mig.slots = 7;
        let mut rc = RegisteredCard::from_card(&mig);
        rc.mig_profiles = vec![MigProfile {
            name: "3g.40gb".into(),
            memory_mb: 40448,
            core: 46,
            slice_count: 3,
            placements: vec![
                MigPlacement { start: 0, size: 4 },
                MigPlacement { start: 4, size: 4 },
            ],
        }];
        let text = encode_registered(std::slice::from_ref(&rc));
        assert_eq!(
            text,
            r#"[{"id":"GPU-m","index":2,"count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100-SXM4-40GB","mode":"mig","migProfiles":[{"name":"3g.40gb","memoryMB":40448,"core":46,"sliceCount":3,"placements":[{"start":0,"size":4},{"start":4,"size":4}]}],"health":true,"devicevendor":"NVIDIA"}]"#
        );
        assert_eq!(decode_registered(&text).unwrap(), vec![rc]);
        // The v1 form keeps the card, in mode mig, without the profiles.
        assert_eq!(decode_register(&text).unwrap(), vec![mig]);
        // A plain card is written as before.
        let plain = vec![card("GPU-a", 0, true)];
        let reg: Vec<RegisteredCard> = plain.iter().map(RegisteredCard::from_card).collect();
        assert_eq!(encode_registered(&reg), encode_register(&plain));
        assert!(decode_registered(r#"[{"id":"GPU-x","count":-1}]"#).is_err());
    }

    #[test]
    fn register_reads_hami_written_json_and_colon_forms() {
        let hami = r#"[{"id":"GPU-x","index":3,"count":10,"devmem":81920,"devcore":100,"type":"NVIDIA-A100-SXM4-80GB","numa":1,"mode":"hami-core","health":true,"devicevendor":"NVIDIA","custominfo":{"k":1}}]"#;
        let c = &decode_register(hami).unwrap()[0];
        assert_eq!(
            (c.index, c.numa, c.total_mem_mib, c.health),
            (3, 1, 81920, v1::CardHealth::Healthy as i32)
        );
        let colon =
            "GPU-1,10,8000,100,NVIDIA-T4,0,true:GPU-2,10,8000,100,NVIDIA-T4,1,false,1,hami-core:";
        let cards = decode_register(colon).unwrap();
        assert_eq!(cards.len(), 2);
        assert_eq!(cards[1].index, 1);
        assert_eq!(cards[1].numa, 1);
        assert_eq!(cards[1].health, v1::CardHealth::Unhealthy as i32);
        for bad in [
            "",
            "nonsense",
            "GPU-1,10,8000:",
            "[{\"id\":\"a\",\"count\":-1}]",
            "[{\"count\":1}]",
            "[{\"id\":\"a\",\"mode\":\"weird\"}]",
        ] {
            assert!(decode_register(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pair_scores_round_trip() {
        let pairs = vec![
            v1::CardPairScore {
                card_id: "a".into(),
                peer_card_id: "b".into(),
                score: 100,
            },
            v1::CardPairScore {
                card_id: "b".into(),
                peer_card_id: "a".into(),
                score: 90,
            },
        ];
        let text = encode_pair_scores(&pairs);
        assert_eq!(
            text,
            r#"[{"uuid":"a","score":{"b":100}},{"uuid":"b","score":{"a":90}}]"#
        );
        assert_eq!(decode_pair_scores(&text).unwrap(), pairs);
    }

    #[test]
    fn pod_devices_follow_hamis_format() {
        let b = |u: &str, m: u64, c: u32| Booking {
            uuid: u.into(),
            device_type: NVIDIA.into(),
            mem_mib: m,
            cores: c,
        };
        let containers = vec![
            vec![b("GPU-0", 3000, 0)],
            vec![],
            vec![b("GPU-0", 5000, 0), b("GPU-1", 5000, 30)],
        ];
        let text = encode_pod_devices(&containers);
        assert_eq!(
            text,
            "GPU-0,NVIDIA,3000,0:;;GPU-0,NVIDIA,5000,0:GPU-1,NVIDIA,5000,30:;"
        );
        assert_eq!(decode_pod_devices(&text).unwrap(), containers);
        assert!(decode_pod_devices("GPU-0,NVIDIA,x,0:;").is_err());
        let mut cards = vec![card("GPU-0", 0, true), card("GPU-1", 1, true)];
        add_usage(&mut cards, &containers);
        assert_eq!(
            cards[0].usage,
            Some(v1::CardUsage {
                used_slots: 2,
                used_mem_mib: 8000,
                used_cores: 0
            })
        );
        assert_eq!(
            cards[1].usage,
            Some(v1::CardUsage {
                used_slots: 1,
                used_mem_mib: 5000,
                used_cores: 30
            })
        );
    }
}
