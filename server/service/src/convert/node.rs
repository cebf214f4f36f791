//! A node, both ways: the one conversion of a node sent whole or by reference (its cards,
//! cordons and pair scores; field problems named after where the node was in the request), and
//! nodes and cards back to protobuf.

use std::collections::BTreeMap;

use gpusched_api::v1;
use gpusched_engine as engine;
use gpusched_engine::{
    Card, CardMode, CardUsage, KubeNames, MigInstance, MigLayout, MigPlacement, MigProfile,
    NodeSpec, PairScore, Violation, ViolationKind,
};

/// Where a node came from in the request, to name fields in violations: `nodes[i]` (sent
/// whole) or `node_refs[i].inventory` (by reference).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeAt {
    /// `nodes[i]`.
    Whole(usize),
    /// `node_refs[i].inventory`.
    Ref(usize),
}

impl std::fmt::Display for NodeAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeAt::Whole(i) => write!(f, "nodes[{i}]"),
            NodeAt::Ref(i) => write!(f, "node_refs[{i}].inventory"),
        }
    }
}

/// Where the entries of `NodeSpec::cordoned` came from (the list field, then the annotation),
/// to name a cordon in a problem as the caller wrote it.
#[derive(Debug, Default)]
pub struct CordonFields {
    /// Positions in `cordoned_card_ids` of the first entries (blank ones are skipped).
    list: Vec<usize>,
    /// The cordon annotation's key (the later entries).
    annotation: String,
}

impl CordonFields {
    /// The caller's field for an engine field relative to the node: `cordoned[k]` becomes
    /// `cordoned_card_ids[j]` or `annotations["<cordon key>"]`; other fields are kept.
    pub fn field(&self, engine_field: &str) -> String {
        let k = engine_field
            .strip_prefix("cordoned[")
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|k| k.parse::<usize>().ok());
        match k {
            None => engine_field.to_owned(),
            Some(k) => match self.list.get(k) {
                Some(j) => format!("cordoned_card_ids[{j}]"),
                None => format!("annotations[{:?}]", self.annotation),
            },
        }
    }
}

/// Converts one node (the one conversion of a node, whether sent whole or by reference); field
/// problems are added to `violations`, named after `at`. Also says where each cordon came from.
pub fn node_in(
    n: v1::Node,
    at: NodeAt,
    names: &KubeNames,
    violations: &mut Vec<Violation>,
) -> (NodeSpec, CordonFields) {
    let v1::Node {
        name,
        cards,
        cordoned_card_ids,
        pair_scores,
        annotations,
        host,
    } = n;
    let host = host.map(|h| {
        let v1::HostResources {
            free_cpu_milli,
            free_mem_mib,
        } = h;
        engine::HostResources {
            free_cpu_milli,
            free_mem_mib,
        }
    });
    let mut cordons = CordonFields::default();
    let mut cordoned: Vec<String> = Vec::with_capacity(cordoned_card_ids.len());
    for (j, s) in cordoned_card_ids.into_iter().enumerate() {
        let s = s.trim();
        if !s.is_empty() {
            cordoned.push(s.to_owned());
            cordons.list.push(j);
        }
    }
    if let Some(v) = annotations.get(&names.annotations.device_cordon) {
        cordoned.extend(engine::split_list(v));
        cordons
            .annotation
            .clone_from(&names.annotations.device_cordon);
    }
    let cards = cards
        .into_iter()
        .enumerate()
        .map(|(j, c)| card_in(c, (at, j), violations))
        .collect();
    let pair_scores = pair_scores
        .into_iter()
        .map(|p| {
            let v1::CardPairScore {
                card_id,
                peer_card_id,
                score,
            } = p;
            PairScore {
                card_id,
                peer_card_id,
                score,
            }
        })
        .collect();
    (
        NodeSpec {
            name,
            cards,
            cordoned,
            pair_scores,
            host,
        },
        cordons,
    )
}

/// A card's usage.
pub fn usage_in(u: Option<v1::CardUsage>) -> CardUsage {
    u.map_or_else(CardUsage::default, |u| {
        let v1::CardUsage {
            used_slots,
            used_mem_mib,
            used_cores,
        } = u;
        CardUsage {
            used: used_slots,
            used_mem_mib,
            used_cores,
        }
    })
}

/// A card; `at` is (node, card) position, used only to name a field in a violation.
#[inline]
fn card_in(c: v1::Card, at: (NodeAt, usize), violations: &mut Vec<Violation>) -> Card {
    let field = || format!("{}.cards[{}]", at.0, at.1);
    let v1::Card {
        id,
        index,
        r#type,
        slots,
        total_mem_mib,
        total_cores,
        numa,
        health,
        mode,
        usage,
        mig,
    } = c;
    let healthy = match v1::CardHealth::try_from(health) {
        Ok(v1::CardHealth::Healthy) => true,
        Ok(v1::CardHealth::Unhealthy) => false,
        Ok(v1::CardHealth::Unspecified) => {
            violations.push(Violation::new(
                ViolationKind::MissingField,
                format!("{}.health", field()),
                "must be set (CARD_HEALTH_HEALTHY or CARD_HEALTH_UNHEALTHY)",
            ));
            false
        }
        Err(_) => {
            violations.push(Violation::new(
                ViolationKind::UnknownEnumValue,
                format!("{}.health", field()),
                format!("unknown CardHealth value {health}"),
            ));
            false
        }
    };
    let mode = match v1::CardMode::try_from(mode) {
        Ok(v1::CardMode::Unspecified | v1::CardMode::HamiCore) => CardMode::HamiCore,
        Ok(v1::CardMode::Mig) => CardMode::Mig,
        Ok(v1::CardMode::Mps) => CardMode::Mps,
        Err(_) => {
            violations.push(Violation::new(
                ViolationKind::UnknownEnumValue,
                format!("{}.mode", field()),
                format!("unknown CardMode value {mode}"),
            ));
            CardMode::HamiCore
        }
    };
    let usage = usage_in(usage);
    Card {
        id,
        index,
        card_type: r#type,
        count: slots,
        total_mem_mib,
        total_cores,
        numa,
        healthy,
        mode,
        usage,
        mig: mig.map(|l| Box::new(mig_in(l))),
    }
}

/// A MIG layout (validated with its node by the engine: `cards[j].mig...`).
fn mig_in(l: v1::MigLayout) -> MigLayout {
    let v1::MigLayout {
        compute_slices,
        memory_slices,
        profiles,
        instances,
    } = l;
    let profiles = profiles
        .into_iter()
        .map(|p| {
            let v1::MigProfile {
                name,
                mem_mib,
                compute_slices,
                memory_slices,
                cores,
                max_instances,
                placements,
                not_allowed,
            } = p;
            MigProfile {
                name,
                mem_mib,
                compute_slices,
                memory_slices,
                cores,
                max_instances,
                placements,
                allowed: !not_allowed,
            }
        })
        .collect();
    let instances = instances
        .into_iter()
        .map(|i| {
            let v1::MigInstance {
                profile,
                start,
                size,
                in_use_by,
            } = i;
            MigInstance {
                profile,
                placement: MigPlacement::new(start, size),
                in_use_by: (!in_use_by.is_empty()).then_some(in_use_by),
            }
        })
        .collect();
    MigLayout {
        compute_slices,
        memory_slices,
        profiles,
        instances,
    }
}

/// A MIG layout back to protobuf.
fn mig_out(l: &MigLayout) -> v1::MigLayout {
    let MigLayout {
        compute_slices,
        memory_slices,
        profiles,
        instances,
    } = l;
    v1::MigLayout {
        compute_slices: *compute_slices,
        memory_slices: *memory_slices,
        profiles: profiles
            .iter()
            .map(|p| {
                let MigProfile {
                    name,
                    mem_mib,
                    compute_slices,
                    memory_slices,
                    cores,
                    max_instances,
                    placements,
                    allowed,
                } = p;
                v1::MigProfile {
                    name: name.clone(),
                    mem_mib: *mem_mib,
                    compute_slices: *compute_slices,
                    memory_slices: *memory_slices,
                    cores: *cores,
                    max_instances: *max_instances,
                    placements: placements.clone(),
                    not_allowed: !allowed,
                }
            })
            .collect(),
        instances: instances
            .iter()
            .map(|i| {
                let MigInstance {
                    profile,
                    placement,
                    in_use_by,
                } = i;
                v1::MigInstance {
                    profile: profile.clone(),
                    start: placement.start,
                    size: placement.size,
                    in_use_by: in_use_by.clone().unwrap_or_default(),
                }
            })
            .collect(),
    }
}

/// A card back to protobuf.
pub fn card_out(c: &Card) -> v1::Card {
    let Card {
        id,
        index,
        card_type,
        count,
        total_mem_mib,
        total_cores,
        numa,
        healthy,
        mode,
        usage,
        mig,
    } = c;
    let CardUsage {
        used,
        used_mem_mib,
        used_cores,
    } = usage;
    v1::Card {
        id: id.clone(),
        index: *index,
        r#type: card_type.clone(),
        slots: *count,
        total_mem_mib: *total_mem_mib,
        total_cores: *total_cores,
        numa: *numa,
        health: if *healthy {
            v1::CardHealth::Healthy
        } else {
            v1::CardHealth::Unhealthy
        } as i32,
        mode: match mode {
            CardMode::HamiCore => v1::CardMode::HamiCore,
            CardMode::Mig => v1::CardMode::Mig,
            CardMode::Mps => v1::CardMode::Mps,
        } as i32,
        usage: (*usage != CardUsage::default()).then_some(v1::CardUsage {
            used_slots: *used,
            used_mem_mib: *used_mem_mib,
            used_cores: *used_cores,
        }),
        mig: mig.as_deref().map(mig_out),
    }
}

/// Pair scores back to protobuf.
pub fn pairs_out(p: &[PairScore]) -> Vec<v1::CardPairScore> {
    p.iter()
        .map(|p| {
            let PairScore {
                card_id,
                peer_card_id,
                score,
            } = p;
            v1::CardPairScore {
                card_id: card_id.clone(),
                peer_card_id: peer_card_id.clone(),
                score: *score,
            }
        })
        .collect()
}

/// A node (with its current usage) back to protobuf.
pub fn node_out(n: &engine::Node) -> v1::Node {
    let NodeSpec {
        name,
        cards,
        cordoned,
        pair_scores,
        host,
    } = n.to_spec();
    v1::Node {
        name,
        cards: cards.iter().map(card_out).collect(),
        cordoned_card_ids: cordoned,
        pair_scores: pairs_out(&pair_scores),
        annotations: BTreeMap::new(),
        host: host.map(|h| {
            let engine::HostResources {
                free_cpu_milli,
                free_mem_mib,
            } = h;
            v1::HostResources {
                free_cpu_milli,
                free_mem_mib,
            }
        }),
    }
}
