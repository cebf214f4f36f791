//! NormalizeInventory in and out: raw cards and the normalisation settings of a request.

use gpusched_api::v1;
use gpusched_engine as engine;
use gpusched_engine::{Violation, ViolationKind};

use crate::error::ServiceError;

/// The normalisation settings of a request (the server's when unset; zero fields take the
/// server's values).
pub fn normalization_in(
    c: Option<v1::NormalizationConfig>,
    server: &engine::NormalizationConfig,
) -> engine::NormalizationConfig {
    let Some(c) = c else { return server.clone() };
    let v1::NormalizationConfig {
        split_count,
        memory_scaling,
        core_scaling,
        overrides,
    } = c;
    engine::NormalizationConfig {
        split_count: if split_count == 0 {
            server.split_count
        } else {
            split_count
        },
        memory_scaling: if memory_scaling == 0.0 {
            server.memory_scaling
        } else {
            memory_scaling
        },
        core_scaling: if core_scaling == 0.0 {
            server.core_scaling
        } else {
            core_scaling
        },
        overrides: overrides
            .into_iter()
            .map(|o| {
                let v1::NormalizationOverride {
                    node_name,
                    model_contains,
                    split_count,
                    memory_scaling,
                    core_scaling,
                } = o;
                engine::NormalizationOverride {
                    node_name,
                    model_contains,
                    split_count,
                    memory_scaling,
                    core_scaling,
                }
            })
            .collect(),
    }
}

/// Raw cards of NormalizeInventory.
pub fn raw_cards_in(cards: Vec<v1::RawCard>) -> Result<Vec<engine::RawCard>, ServiceError> {
    let mut violations = Vec::new();
    let out = cards
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let v1::RawCard {
                uuid,
                index,
                model_name,
                total_memory_bytes,
                numa,
                mig_enabled,
                health,
                links,
            } = c;
            let healthy = match v1::CardHealth::try_from(health) {
                Ok(v1::CardHealth::Healthy) => true,
                Ok(v1::CardHealth::Unhealthy) => false,
                Ok(v1::CardHealth::Unspecified) => {
                    violations.push(Violation::new(
                        ViolationKind::MissingField,
                        format!("cards[{i}].health"),
                        "must be CARD_HEALTH_HEALTHY or CARD_HEALTH_UNHEALTHY",
                    ));
                    false
                }
                Err(_) => {
                    violations.push(Violation::new(
                        ViolationKind::UnknownEnumValue,
                        format!("cards[{i}].health"),
                        "must be CARD_HEALTH_HEALTHY or CARD_HEALTH_UNHEALTHY",
                    ));
                    false
                }
            };
            let links = links
                .into_iter()
                .enumerate()
                .map(|(j, l)| {
                    let v1::RawLink {
                        peer_uuid,
                        kind,
                        link_count,
                    } = l;
                    let kind = match v1::LinkKind::try_from(kind) {
                        Ok(v1::LinkKind::Unspecified) => engine::LinkKind::Unknown,
                        Ok(v1::LinkKind::Nvlink) => engine::LinkKind::NvLink,
                        Ok(v1::LinkKind::SameBoard) => engine::LinkKind::SameBoard,
                        Ok(v1::LinkKind::SingleSwitch) => engine::LinkKind::SingleSwitch,
                        Ok(v1::LinkKind::MultipleSwitches) => engine::LinkKind::MultipleSwitches,
                        Ok(v1::LinkKind::HostBridge) => engine::LinkKind::HostBridge,
                        Ok(v1::LinkKind::SameNuma) => engine::LinkKind::SameNuma,
                        Ok(v1::LinkKind::System) => engine::LinkKind::System,
                        Err(_) => {
                            violations.push(Violation::new(
                                ViolationKind::UnknownEnumValue,
                                format!("cards[{i}].links[{j}].kind"),
                                format!("unknown LinkKind value {kind}"),
                            ));
                            engine::LinkKind::Unknown
                        }
                    };
                    engine::RawLink {
                        peer_uuid,
                        kind,
                        lanes: link_count,
                    }
                })
                .collect();
            engine::RawCard {
                uuid,
                index,
                model_name,
                total_memory_bytes,
                numa,
                mig_enabled,
                healthy,
                links,
            }
        })
        .collect();
    if violations.is_empty() {
        Ok(out)
    } else {
        Err(ServiceError::InvalidArgument(violations))
    }
}

/// Normalisation settings back to protobuf.
pub fn normalization_out(c: &engine::NormalizationConfig) -> v1::NormalizationConfig {
    let engine::NormalizationConfig {
        split_count,
        memory_scaling,
        core_scaling,
        overrides,
    } = c;
    v1::NormalizationConfig {
        split_count: *split_count,
        memory_scaling: *memory_scaling,
        core_scaling: *core_scaling,
        overrides: overrides
            .iter()
            .map(|o| {
                let engine::NormalizationOverride {
                    node_name,
                    model_contains,
                    split_count,
                    memory_scaling,
                    core_scaling,
                } = o;
                v1::NormalizationOverride {
                    node_name: node_name.clone(),
                    model_contains: model_contains.clone(),
                    split_count: *split_count,
                    memory_scaling: *memory_scaling,
                    core_scaling: *core_scaling,
                }
            })
            .collect(),
    }
}
