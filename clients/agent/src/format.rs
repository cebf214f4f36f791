//! Renderings of a node's inventory for other consumers: JSON, HAMi's node annotations, a
//! Slurm `gres.conf` snippet, and the raw request.

use std::collections::BTreeMap;

use gpusched_api::json::to_json;
use gpusched_api::v1;
use serde_json::{Value, json};

use crate::config::OutputFormat;
use crate::discovery::sysfs::format_cpu_list;
use crate::discovery::{CardFacts, MigFacts, MigState};

/// A node's inventory: the normalised answer and the facts it was made from.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeInventory {
    /// Node name.
    pub node_name: String,
    /// The normalised inventory.
    pub normalized: v1::NormalizeInventoryResponse,
    /// The facts read from the machine.
    pub facts: Vec<CardFacts>,
}

/// A rendering failure (only the JSON descriptor lookups can fail).
#[derive(Debug, thiserror::Error)]
#[error("render: {0}")]
pub struct RenderError(String);

/// HAMi's node annotations for this inventory: `hami.io/node-nvidia-register` always (a MIG
/// card with the `migProfiles` its facts give, and HAMi's `count` for it: the largest instance
/// count of the allowed profiles), `hami.io/node-nvidia-score` when there are pair scores (the
/// handshake is added when publishing).
pub fn hami_annotations(
    normalized: &v1::NormalizeInventoryResponse,
    facts: &[CardFacts],
) -> BTreeMap<String, String> {
    let mig: BTreeMap<&str, &MigFacts> = facts
        .iter()
        .filter_map(|f| f.mig.facts().map(|m| (f.uuid.as_str(), m)))
        .collect();
    let cards: Vec<gpusched_hami::RegisteredCard> = normalized
        .cards
        .iter()
        .map(|c| {
            let mut rc = gpusched_hami::RegisteredCard::from_card(c);
            if let Some(m) = mig
                .get(c.id.as_str())
                .filter(|_| c.mode == v1::CardMode::Mig as i32)
            {
                rc.mig_profiles = m.hami_profiles();
                let count = m.hami_count();
                if count > 0 {
                    rc.count = i32::try_from(count).unwrap_or(i32::MAX);
                }
            }
            rc
        })
        .collect();
    let mut out = BTreeMap::new();
    out.insert(
        gpusched_hami::NODE_REGISTER.to_owned(),
        gpusched_hami::encode_registered(&cards),
    );
    if !normalized.pair_scores.is_empty() {
        out.insert(
            gpusched_hami::NODE_SCORE.to_owned(),
            gpusched_hami::encode_pair_scores(&normalized.pair_scores),
        );
    }
    out
}

/// gpusched's companion node annotation `gpusched.io/node-mig-layouts`
/// (`docs/hami-protocol.md`, "MIG"): the whole layout (`MigFacts::layout`) of each card that
/// is in mode `mig` in `normalized` and whose layout was read; None when there is none (the
/// publisher then removes the annotation). HAMi's annotations are not changed by it.
pub fn mig_layouts(
    normalized: &v1::NormalizeInventoryResponse,
    facts: &[CardFacts],
) -> Option<String> {
    let layouts: BTreeMap<String, v1::MigLayout> = normalized
        .cards
        .iter()
        .filter(|c| c.mode == v1::CardMode::Mig as i32)
        .filter_map(|c| {
            let f = facts.iter().find(|f| f.uuid == c.id)?.mig.facts()?;
            Some((c.id.clone(), f.layout()))
        })
        .collect();
    (!layouts.is_empty()).then(|| gpusched_hami::encode_node_mig_layouts(&layouts))
}

/// Every node annotation the agent publishes for this inventory (but the handshake): HAMi's
/// ([`hami_annotations`]) and, with MIG cards, `gpusched.io/node-mig-layouts` ([`mig_layouts`]).
pub fn node_annotations(
    normalized: &v1::NormalizeInventoryResponse,
    facts: &[CardFacts],
) -> BTreeMap<String, String> {
    let mut out = hami_annotations(normalized, facts);
    if let Some(v) = mig_layouts(normalized, facts) {
        out.insert(gpusched_hami::NODE_MIG_LAYOUTS.to_owned(), v);
    }
    out
}

/// Slurm GRES type of a card type: lower case, anything but letters, digits, `-` and `.`
/// becomes `_` (`NVIDIA H100 80GB HBM3` -> `nvidia_h100_80gb_hbm3`).
pub fn slurm_type(card_type: &str) -> String {
    card_type
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// A `gres.conf` snippet: one line per schedulable card, in index order. `File` is
/// `/dev/nvidia<minor number>` (the index when NVML has no minor number), `Cores` the Slurm
/// logical cores of the card's CPU affinity when known (omitted otherwise).
pub fn slurm_gres(inv: &NodeInventory) -> String {
    let by_uuid: BTreeMap<&str, &CardFacts> =
        inv.facts.iter().map(|f| (f.uuid.as_str(), f)).collect();
    let mut out = format!(
        "# gres.conf for node {} (gpusched-agent): {} card(s)\n",
        inv.node_name,
        inv.normalized.cards.len()
    );
    let mut cards: Vec<&v1::Card> = inv.normalized.cards.iter().collect();
    cards.sort_by_key(|c| c.index);
    for c in &cards {
        if c.health != v1::CardHealth::Healthy as i32 {
            let why = by_uuid
                .get(c.id.as_str())
                .map(|f| f.unhealthy_reasons.join("; "))
                .unwrap_or_default();
            out.push_str(&format!(
                "# unhealthy: {} (index {}): {}\n",
                c.id, c.index, why
            ));
        }
        if c.mode == v1::CardMode::Mig as i32 {
            out.push_str(&format!(
                "# MIG enabled on {} (index {}): listed as a whole card\n",
                c.id, c.index
            ));
        }
    }
    for c in cards {
        let f = by_uuid.get(c.id.as_str());
        let minor = f.and_then(|f| f.minor_number).unwrap_or(c.index);
        let mut line = format!(
            "NodeName={} Name=gpu Type={} File=/dev/nvidia{minor}",
            inv.node_name,
            slurm_type(&c.r#type)
        );
        if let Some(cores) = f.and_then(|f| f.cores.as_deref()).filter(|c| !c.is_empty()) {
            line.push_str(&format!(" Cores={}", format_cpu_list(cores)));
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn mig_details(m: &MigState) -> Value {
    match m {
        MigState::Disabled => json!({ "state": "disabled" }),
        MigState::Unknown(why) => json!({ "state": "unknown", "reason": why }),
        MigState::Read(f) => json!({
            "state": "read",
            "computeSlices": f.compute_slices,
            "memorySlices": f.memory_slices,
            "profiles": f.profiles.iter().map(|p| json!({
                "name": p.name,
                "nvmlIndex": p.nvml_index,
                "id": p.id,
                "memMib": p.mem_mib,
                "computeSlices": p.compute_slices,
                "memorySlices": p.memory_slices,
                "multiprocessors": p.multiprocessors,
                "cores": p.cores,
                "maxInstances": p.max_instances,
                "placements": p.placements,
                "allowed": p.allowed,
            })).collect::<Vec<_>>(),
            "instances": f.instances.iter().map(|i| json!({
                "id": i.id,
                "profile": i.profile,
                "start": i.start,
                "size": i.size,
            })).collect::<Vec<_>>(),
        }),
    }
}

fn card_details(f: &CardFacts) -> Value {
    json!({
        "uuid": f.uuid,
        "index": f.index,
        "modelName": f.model_name,
        "totalMemoryBytes": f.total_memory_bytes.to_string(),
        "numa": f.numa,
        "migEnabled": f.mig_enabled,
        "mig": mig_details(&f.mig),
        "healthy": f.healthy(),
        "unhealthyReasons": f.unhealthy_reasons,
        "pciBusId": f.pci_bus_id,
        "minorNumber": f.minor_number,
        "cpus": f.cpus.as_deref().map(format_cpu_list),
        "slurmCores": f.cores.as_deref().map(format_cpu_list),
        "links": f.links.iter().map(|l| json!({
            "peerUuid": l.peer_uuid,
            "kind": l.kind.as_str_name(),
            "lanes": l.lanes,
        })).collect::<Vec<_>>(),
    })
}

/// The inventory as JSON: the `NormalizeInventoryResponse` in proto3 JSON (`cards`,
/// `pairScores`, `skipped`, `effectiveConfig`) plus `nodeName` and `devices` (what the agent
/// read per card: bus id, minor number, CPUs, health reasons, links).
pub fn json(inv: &NodeInventory) -> Result<String, RenderError> {
    let text = to_json(
        "gpusched.v1.NormalizeInventoryResponse",
        &inv.normalized,
        false,
    )
    .map_err(|e| RenderError(e.to_string()))?;
    let mut v: Value = serde_json::from_str(&text).map_err(|e| RenderError(e.to_string()))?;
    if let Value::Object(m) = &mut v {
        m.insert("nodeName".into(), Value::String(inv.node_name.clone()));
        m.insert(
            "devices".into(),
            Value::Array(inv.facts.iter().map(card_details).collect()),
        );
        for key in ["cards", "pairScores", "skipped"] {
            m.entry(key).or_insert_with(|| Value::Array(vec![]));
        }
    }
    serde_json::to_string_pretty(&v).map_err(|e| RenderError(e.to_string()))
}

/// What the agent read, as JSON: `nodeName` and `devices` (the facts of [`json`], MIG
/// layouts included), without asking the service.
pub fn facts(node_name: &str, facts: &[CardFacts]) -> Result<String, RenderError> {
    let v = json!({
        "nodeName": node_name,
        "devices": facts.iter().map(card_details).collect::<Vec<_>>(),
    });
    serde_json::to_string_pretty(&v).map_err(|e| RenderError(e.to_string()))
}

/// The raw request (what the service is asked), proto3 JSON: `gpuschedctl normalize` reads it.
pub fn raw(req: &v1::NormalizeInventoryRequest) -> Result<String, RenderError> {
    to_json("gpusched.v1.NormalizeInventoryRequest", req, true)
        .map_err(|e| RenderError(e.to_string()))
}

/// The node annotations as `key=value` lines: HAMi's, then `gpusched.io/node-mig-layouts`
/// when there are MIG cards ([`node_annotations`]).
pub fn hami(inv: &NodeInventory) -> String {
    node_annotations(&inv.normalized, &inv.facts)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect()
}

/// Renders `inv` in `format` (`Raw` renders the request the inventory was made from).
pub fn render(inv: &NodeInventory, format: OutputFormat) -> Result<String, RenderError> {
    let mut text = match format {
        OutputFormat::Json => json(inv)?,
        OutputFormat::Hami => hami(inv),
        OutputFormat::SlurmGres => slurm_gres(inv),
        OutputFormat::Raw => raw(&crate::inventory::request(&inv.node_name, &inv.facts))?,
        OutputFormat::Facts => facts(&inv.node_name, &inv.facts)?,
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(uuid: &str, index: u32, healthy: bool) -> CardFacts {
        CardFacts {
            uuid: uuid.into(),
            index,
            model_name: "NVIDIA H100 80GB HBM3".into(),
            total_memory_bytes: 80 << 30,
            numa: Some(index / 4),
            mig_enabled: false,
            mig: MigState::Disabled,
            unhealthy_reasons: if healthy {
                vec![]
            } else {
                vec!["critical XID 79".into()]
            },
            links: vec![],
            pci_bus_id: Some(format!("0000:{:02x}:00.0", (index + 1) * 16)),
            minor_number: Some(index + 10),
            cpus: Some((index * 4..index * 4 + 4).collect()),
            cores: if index == 1 {
                None
            } else {
                Some((index * 2..index * 2 + 2).collect())
            },
        }
    }

    fn card(id: &str, index: u32, healthy: bool) -> v1::Card {
        v1::Card {
            mig: None,
            id: id.into(),
            index,
            r#type: "NVIDIA H100 80GB HBM3".into(),
            slots: 10,
            total_mem_mib: 81920,
            total_cores: 100,
            numa: index / 4,
            health: if healthy {
                v1::CardHealth::Healthy
            } else {
                v1::CardHealth::Unhealthy
            } as i32,
            mode: v1::CardMode::HamiCore as i32,
            usage: None,
        }
    }

    fn inv() -> NodeInventory {
        NodeInventory {
            node_name: "gpu-1".into(),
            normalized: v1::NormalizeInventoryResponse {
                cards: vec![card("GPU-b", 1, false), card("GPU-a", 0, true)],
                pair_scores: vec![v1::CardPairScore {
                    card_id: "GPU-a".into(),
                    peer_card_id: "GPU-b".into(),
                    score: 450,
                }],
                skipped: vec![],
                effective_config: None,
            },
            facts: vec![facts("GPU-a", 0, true), facts("GPU-b", 1, false)],
        }
    }

    #[test]
    fn slurm_gres_lines() {
        let text = slurm_gres(&inv());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            vec![
                "# gres.conf for node gpu-1 (gpusched-agent): 2 card(s)",
                "# unhealthy: GPU-b (index 1): critical XID 79",
                "NodeName=gpu-1 Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia10 Cores=0-1",
                "NodeName=gpu-1 Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia11",
            ]
        );
        assert_eq!(slurm_type("Tesla T4"), "tesla_t4");
        assert_eq!(slurm_type("NVIDIA-A100-SXM4-40GB"), "nvidia-a100-sxm4-40gb");
    }

    #[test]
    fn hami_lines_use_the_codec() {
        let text = hami(&inv());
        let mut lines = text.lines();
        let reg = lines.next().unwrap();
        assert_eq!(
            reg,
            format!(
                "hami.io/node-nvidia-register={}",
                gpusched_hami::encode_register(&inv().normalized.cards)
            )
        );
        assert_eq!(
            lines.next().unwrap(),
            "hami.io/node-nvidia-score=[{\"uuid\":\"GPU-a\",\"score\":{\"GPU-b\":450}}]"
        );
        let mut no_pairs = inv();
        no_pairs.normalized.pair_scores.clear();
        assert!(
            !hami_annotations(&no_pairs.normalized, &no_pairs.facts)
                .contains_key(gpusched_hami::NODE_SCORE)
        );
    }

    #[test]
    fn json_has_node_cards_and_devices() {
        let v: Value = serde_json::from_str(&json(&inv()).unwrap()).unwrap();
        assert_eq!(v["nodeName"], "gpu-1");
        assert_eq!(v["cards"][0]["id"], "GPU-b");
        assert_eq!(v["cards"][0]["health"], "CARD_HEALTH_UNHEALTHY");
        assert_eq!(v["pairScores"][0]["score"], "450");
        assert_eq!(v["devices"][1]["unhealthyReasons"][0], "critical XID 79");
        assert_eq!(v["devices"][0]["cpus"], "0-3");
        assert_eq!(v["skipped"], json!([]));
    }
}
