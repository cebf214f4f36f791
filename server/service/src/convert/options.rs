//! A request's `PlacementOptions`: its defaults over the server's, the engine's options and
//! which failed nodes an answer lists.

use gpusched_api::v1;
use gpusched_engine::{DecideOptions, Defaults, GpuPolicy, Violation, ViolationKind};

use crate::config::MixSettings;
use crate::convert::mix::{Mix, mix_in};
use crate::convert::workload::{gpu_tokens_in, node_policy_in};
use crate::error::ServiceError;

/// The request options, parsed: defaults for the workload, the engine's options and what the
/// answer shows.
#[derive(Clone, Debug)]
pub struct Options {
    /// Defaults for fields the workload leaves unset.
    pub defaults: Defaults,
    /// The engine's options.
    pub decide: DecideOptions,
    /// Which failed nodes an allocation answer lists (`options.failed_nodes`).
    pub failed_nodes: FailedNodesShown,
    /// The workload mix of the fgd policies: the request's, else the server's (section 12.1).
    pub mix: Option<Mix>,
}

/// Which nodes that cannot host the workload an allocation answer lists; the decision is the
/// same for all three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailedNodesShown {
    /// Every one (the default).
    All,
    /// Every one when the workload is not placed (or rolled back); none when it is.
    WhenUnplaced,
    /// None; the answer only counts them.
    None,
}

impl FailedNodesShown {
    /// Whether an answer whose workload was `placed` (and not rolled back) lists failed nodes.
    pub fn lists(self, placed: bool) -> bool {
        match self {
            FailedNodesShown::All => true,
            FailedNodesShown::WhenUnplaced => !placed,
            FailedNodesShown::None => false,
        }
    }
}

/// The defaults of this request (request options over the server's) and the decision options.
pub fn options_in(
    o: Option<v1::PlacementOptions>,
    server: &Defaults,
    mixes: &MixSettings,
) -> Result<Options, ServiceError> {
    let server_mix = || {
        mixes.default.clone().map(|mix| Mix {
            mix,
            from_request: false,
        })
    };
    let Some(o) = o else {
        return Ok(Options {
            defaults: server.clone(),
            decide: DecideOptions::default(),
            failed_nodes: FailedNodesShown::All,
            mix: server_mix(),
        });
    };
    let v1::PlacementOptions {
        default_node_policy,
        default_gpu_policy,
        default_memory_mib,
        default_cores_percent,
        explain,
        failed_nodes,
        workload_mix,
    } = o;
    let mut violations = Vec::new();
    let mix = match workload_mix {
        None => server_mix(),
        Some(m) => match mix_in(m, "options.workload_mix", mixes.max_shapes) {
            Ok(mix) => Some(Mix {
                mix: std::sync::Arc::new(mix),
                from_request: true,
            }),
            Err(v) => {
                violations.extend(v);
                None
            }
        },
    };
    let failed_nodes = match v1::FailedNodes::try_from(failed_nodes) {
        Ok(v1::FailedNodes::Unspecified | v1::FailedNodes::All) => FailedNodesShown::All,
        Ok(v1::FailedNodes::WhenUnplaced) => FailedNodesShown::WhenUnplaced,
        Ok(v1::FailedNodes::None) => FailedNodesShown::None,
        Err(_) => {
            violations.push(Violation::new(
                ViolationKind::UnknownEnumValue,
                "options.failed_nodes",
                format!("unknown FailedNodes value {failed_nodes}"),
            ));
            FailedNodesShown::All
        }
    };
    let node_policy = node_policy_in(
        default_node_policy,
        "options.default_node_policy",
        &mut violations,
    );
    let tokens = gpu_tokens_in(
        &default_gpu_policy,
        "options.default_gpu_policy",
        &mut violations,
    );
    let defaults = Defaults {
        node_policy: node_policy.unwrap_or(server.node_policy),
        gpu_policy: GpuPolicy::from_tokens(&tokens).unwrap_or_else(|| server.gpu_policy.clone()),
        memory_mib: default_memory_mib.unwrap_or(server.memory_mib),
        cores: default_cores_percent.unwrap_or(server.cores),
    };
    if let Err(e) = defaults.validate() {
        violations.extend(e.violations.into_iter().map(|v| Violation {
            field: option_field(&v.field),
            ..v
        }));
    }
    if violations.is_empty() {
        Ok(Options {
            defaults,
            decide: DecideOptions { explain },
            failed_nodes,
            mix,
        })
    } else {
        Err(ServiceError::InvalidArgument(violations))
    }
}

/// The `PlacementOptions` field of a field of the engine's `Defaults` (as named by
/// `Defaults::validate`). A name this table does not know keeps its own name under `options.`,
/// so a new engine check is never reported against a field it does not concern.
fn option_field(defaults_field: &str) -> String {
    match defaults_field {
        "node_policy" => "options.default_node_policy".to_owned(),
        "gpu_policy" => "options.default_gpu_policy".to_owned(),
        "memory_mib" => "options.default_memory_mib".to_owned(),
        "cores" => "options.default_cores_percent".to_owned(),
        other => format!("options.{other}"),
    }
}

#[cfg(test)]
mod tests {
    use gpusched_engine::ViolationKind;

    use super::*;

    #[test]
    fn every_defaults_field_maps_to_its_own_option() {
        for (engine_field, option) in [
            ("node_policy", "options.default_node_policy"),
            ("gpu_policy", "options.default_gpu_policy"),
            ("memory_mib", "options.default_memory_mib"),
            ("cores", "options.default_cores_percent"),
            ("something_new", "options.something_new"),
        ] {
            assert_eq!(option_field(engine_field), option);
        }
    }

    #[test]
    fn options_keep_the_kind_and_name_their_field() {
        let server = Defaults::default();
        let mixes = MixSettings::default();
        let bad = |o: v1::PlacementOptions| match options_in(Some(o), &server, &mixes) {
            Err(ServiceError::InvalidArgument(v)) => {
                v.into_iter().map(|v| (v.field, v.kind)).collect::<Vec<_>>()
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(
            bad(v1::PlacementOptions {
                default_cores_percent: Some(101),
                ..Default::default()
            }),
            vec![(
                "options.default_cores_percent".to_owned(),
                ViolationKind::OutOfRange
            )]
        );
        assert_eq!(
            bad(v1::PlacementOptions {
                default_node_policy: 4,
                ..Default::default()
            }),
            vec![(
                "options.default_node_policy".to_owned(),
                ViolationKind::InvalidNodePolicy
            )]
        );
        assert_eq!(
            bad(v1::PlacementOptions {
                default_gpu_policy: vec![v1::GpuPolicy::Unspecified as i32],
                ..Default::default()
            }),
            vec![(
                "options.default_gpu_policy[0]".to_owned(),
                ViolationKind::InvalidGpuPolicy
            )]
        );
        assert_eq!(
            bad(v1::PlacementOptions {
                failed_nodes: 4,
                ..Default::default()
            }),
            vec![(
                "options.failed_nodes".to_owned(),
                ViolationKind::UnknownEnumValue
            )]
        );
        for (value, shown) in [
            (v1::FailedNodes::Unspecified, FailedNodesShown::All),
            (v1::FailedNodes::All, FailedNodesShown::All),
            (
                v1::FailedNodes::WhenUnplaced,
                FailedNodesShown::WhenUnplaced,
            ),
            (v1::FailedNodes::None, FailedNodesShown::None),
        ] {
            let o = options_in(
                Some(v1::PlacementOptions {
                    failed_nodes: value as i32,
                    ..Default::default()
                }),
                &server,
                &mixes,
            )
            .unwrap();
            assert_eq!(o.failed_nodes, shown, "{value:?}");
        }
        // Any memory default is valid (0 = the whole card).
        for memory in [0, 1, u64::MAX] {
            let o = options_in(
                Some(v1::PlacementOptions {
                    default_memory_mib: Some(memory),
                    ..Default::default()
                }),
                &server,
                &mixes,
            )
            .unwrap();
            assert_eq!(o.defaults.memory_mib, memory);
        }
    }
}
