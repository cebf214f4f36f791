//! Conversion between the protobuf types and the engine's types: explicit, exhaustive
//! functions (every message is destructured, so a new field is a compile error here).

use std::collections::BTreeMap;
use std::sync::Arc;

use gpusched_api::v1;
use gpusched_engine as engine;
use gpusched_engine::{
    Allocation, Card, CardMode, CardUsage, DecideOptions, Defaults, GpuPolicy, GpuToken, KubeNames,
    Node, NodePolicy, NodeSpec, PairScore, Reason, Snapshot, Violation, ViolationKind, Workload,
};

use crate::config::Limits;
use crate::error::ServiceError;
use crate::invalid_node::{Candidates, InvalidNode};

// ---------------------------------------------------------------------------------------------
// Inbound
// ---------------------------------------------------------------------------------------------

/// Checks the request-wide size limits of a node list before any conversion work (a node over
/// `limits.max_cards_per_node` is invalid itself: see [`node_checked`]).
pub fn check_node_limits(nodes: &[v1::Node], limits: &Limits) -> Result<usize, ServiceError> {
    let mut too_large = Vec::new();
    if nodes.len() > limits.max_nodes {
        too_large.push(Violation::new(
            ViolationKind::LimitExceeded,
            "nodes",
            format!(
                "{} nodes exceed the limit of {} (limits.max_nodes)",
                nodes.len(),
                limits.max_nodes
            ),
        ));
    }
    let cards: usize = nodes.iter().map(|n| n.cards.len()).sum();
    if cards > limits.max_cards {
        too_large.push(Violation::new(
            ViolationKind::LimitExceeded,
            "nodes",
            format!(
                "{cards} cards exceed the limit of {} (limits.max_cards)",
                limits.max_cards
            ),
        ));
    }
    if too_large.is_empty() {
        Ok(cards)
    } else {
        Err(ServiceError::TooLarge(too_large))
    }
}

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

/// Converts and validates the candidate nodes sent whole: the valid ones into the snapshot,
/// the invalid ones beside it ([`node_checked`]). Request errors: empty or repeated node names,
/// unset or unknown enum numbers.
pub fn candidates_in(
    nodes: Vec<v1::Node>,
    names: &KubeNames,
    limits: &Limits,
) -> Result<Candidates, ServiceError> {
    let mut violations = Vec::new();
    let mut valid = Vec::with_capacity(nodes.len());
    let mut invalid = Vec::new();
    // The name of each node by position ("" for one with request errors), for duplicates.
    let mut at: Vec<(bool, usize)> = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.into_iter().enumerate() {
        match node_checked(n, NodeAt::Whole(i), names, limits, &mut violations) {
            Some(Ok(node)) => {
                at.push((true, valid.len()));
                valid.push(node);
            }
            Some(Err(bad)) => {
                at.push((false, invalid.len()));
                invalid.push(bad);
            }
            None => at.push((false, usize::MAX)),
        }
    }
    let duplicates = || {
        let node_names: Vec<&str> = at
            .iter()
            .map(|&(ok, k)| {
                if ok {
                    valid.get(k).map_or("", |n: &Arc<Node>| n.name())
                } else {
                    invalid.get(k).map_or("", |n: &Arc<InvalidNode>| n.name())
                }
            })
            .collect();
        duplicate_names(&node_names, |i| NodeAt::Whole(i).to_string())
    };
    if violations.is_empty() {
        match Candidates::unique(&valid, &invalid, duplicates) {
            Ok(c) => return Ok(c),
            Err(v) => violations = v,
        }
    } else {
        violations.extend(duplicates());
    }
    violations.sort_by_key(|v| node_position(&v.field));
    Err(ServiceError::InvalidArgument(violations))
}

/// Repeated node names (the later occurrences, in input order), each named `<at(i)>.name`.
/// The description names no field (a client that sent nodes by reference renames fields, not
/// descriptions), so that it is the same however the nodes were sent.
pub fn duplicate_names(names: &[&str], at: impl Fn(usize) -> String) -> Vec<Violation> {
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| names[a].cmp(names[b]).then(a.cmp(&b)));
    let mut repeated: Vec<usize> = order
        .windows(2)
        .filter(|w| !names[w[1]].is_empty() && names[w[0]] == names[w[1]])
        .map(|w| w[1])
        .collect();
    repeated.sort_unstable();
    repeated
        .into_iter()
        .map(|i| {
            Violation::new(
                ViolationKind::DuplicateId,
                format!("{}.name", at(i)),
                format!(
                    "duplicate node name {:?}: names are unique over nodes and node_refs",
                    names[i]
                ),
            )
        })
        .collect()
}

/// The node position of a `nodes[i]...` field, for reporting violations in input order.
fn node_position(field: &str) -> usize {
    field
        .strip_prefix("nodes[")
        .and_then(|r| r.split(']').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}

/// Converts and validates one node, sent whole or by reference: `Some(Ok)` a valid node,
/// `Some(Err)` a node invalid itself (over `limits.max_cards_per_node`, or refused by
/// [`Node::new`]; its problems named relative to the node), `None` when request errors (an
/// empty name, unset or unknown enum numbers) were added to `violations`, named after `at`.
pub fn node_checked(
    n: v1::Node,
    at: NodeAt,
    names: &KubeNames,
    limits: &Limits,
    violations: &mut Vec<Violation>,
) -> Option<Result<Arc<Node>, Arc<InvalidNode>>> {
    let before = violations.len();
    if n.name.is_empty() {
        violations.push(Violation::new(
            ViolationKind::MissingField,
            format!("{at}.name"),
            "node name must not be empty",
        ));
    }
    if n.cards.len() > limits.max_cards_per_node {
        // Not converted: its cards are not looked at (bounded work per node).
        let problem = Violation::new(
            ViolationKind::LimitExceeded,
            "cards",
            format!(
                "{} cards exceed the limit of {} per node (limits.max_cards_per_node)",
                n.cards.len(),
                limits.max_cards_per_node
            ),
        );
        return (violations.len() == before).then(|| {
            Err(Arc::new(InvalidNode::new(
                n.name,
                n.cards.len(),
                vec![problem],
            )))
        });
    }
    let (spec, cordons) = node_in(n, at, names, violations);
    if violations.len() != before {
        return None;
    }
    Some(Node::checked(spec).map(Arc::new).map_err(|(spec, e)| {
        let problems = e
            .violations
            .into_iter()
            .map(|v| Violation {
                field: cordons.field(&v.field),
                ..v
            })
            .collect();
        Arc::new(InvalidNode::new(spec.name, spec.cards.len(), problems))
    }))
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
    } = n;
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
        // MIG layouts arrive with the MIG fields of the v1 API (issue 23, next phase).
        mig: None,
    }
}

fn node_policy_in(v: i32, field: &str, violations: &mut Vec<Violation>) -> Option<NodePolicy> {
    match v1::NodePolicy::try_from(v) {
        Ok(v1::NodePolicy::Unspecified) => None,
        Ok(v1::NodePolicy::Binpack) => Some(NodePolicy::Binpack),
        Ok(v1::NodePolicy::Spread) => Some(NodePolicy::Spread),
        Err(_) => {
            violations.push(Violation::new(
                ViolationKind::InvalidNodePolicy,
                field,
                format!("unknown NodePolicy value {v}"),
            ));
            None
        }
    }
}

fn gpu_tokens_in(values: &[i32], field: &str, violations: &mut Vec<Violation>) -> Vec<GpuToken> {
    values
        .iter()
        .enumerate()
        .filter_map(|(i, &v)| match v1::GpuPolicy::try_from(v) {
            Ok(v1::GpuPolicy::Binpack) => Some(GpuToken::Binpack),
            Ok(v1::GpuPolicy::Spread) => Some(GpuToken::Spread),
            Ok(v1::GpuPolicy::Mutex) => Some(GpuToken::Mutex),
            Ok(v1::GpuPolicy::TopologyAware) => Some(GpuToken::TopologyAware),
            Ok(v1::GpuPolicy::Numa) => Some(GpuToken::Numa),
            Ok(v1::GpuPolicy::Unspecified) => {
                violations.push(Violation::new(
                    ViolationKind::InvalidGpuPolicy,
                    format!("{field}[{i}]"),
                    "GPU_POLICY_UNSPECIFIED is not a policy token",
                ));
                None
            }
            Err(_) => {
                violations.push(Violation::new(
                    ViolationKind::InvalidGpuPolicy,
                    format!("{field}[{i}]"),
                    format!("unknown GpuPolicy value {v}"),
                ));
                None
            }
        })
        .collect()
}

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
) -> Result<Options, ServiceError> {
    let Some(o) = o else {
        return Ok(Options {
            defaults: server.clone(),
            decide: DecideOptions::default(),
            failed_nodes: FailedNodesShown::All,
        });
    };
    let v1::PlacementOptions {
        default_node_policy,
        default_gpu_policy,
        default_memory_mib,
        default_cores_percent,
        explain,
        failed_nodes,
    } = o;
    let mut violations = Vec::new();
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

/// Converts, validates and resolves a workload; violations are prefixed with `prefix`
/// (e.g. `workload` or `workloads[2]`).
pub fn workload_in(
    w: Option<v1::Workload>,
    prefix: &str,
    defaults: &Defaults,
    names: &KubeNames,
    limits: &Limits,
) -> Result<Workload, ServiceError> {
    let Some(w) = w else {
        return Err(ServiceError::InvalidArgument(vec![Violation::new(
            ViolationKind::MissingField,
            prefix,
            "a workload is required",
        )]));
    };
    let v1::Workload {
        namespace,
        name,
        uid,
        spec,
    } = w;
    let meta = engine::WorkloadMeta {
        namespace,
        name,
        uid,
    };
    let mut violations = Vec::new();
    let (spec, spec_prefix) = match spec {
        None => {
            return Err(ServiceError::InvalidArgument(vec![Violation::new(
                ViolationKind::MissingField,
                format!("{prefix}.spec"),
                "one of typed or kubernetes is required",
            )]));
        }
        Some(v1::workload::Spec::Typed(t)) => {
            let p = format!("{prefix}.typed");
            (
                engine::WorkloadSpec::Typed(typed_in(t, &p, &mut violations)),
                p,
            )
        }
        Some(v1::workload::Spec::Kubernetes(k)) => {
            let v1::KubernetesWorkloadSpec {
                annotations,
                init_containers,
                containers,
            } = k;
            let container = |c: v1::KubernetesContainer| {
                let v1::KubernetesContainer {
                    name,
                    limits,
                    requests,
                } = c;
                engine::KubeContainer {
                    name,
                    limits,
                    requests,
                }
            };
            let spec = engine::KubeSpec {
                annotations,
                init_containers: init_containers.into_iter().map(container).collect(),
                containers: containers.into_iter().map(container).collect(),
            };
            (
                engine::WorkloadSpec::Kubernetes(spec),
                format!("{prefix}.kubernetes"),
            )
        }
    };
    let container_count = match &spec {
        engine::WorkloadSpec::Typed(t) => t.init_containers.len() + t.containers.len(),
        engine::WorkloadSpec::Kubernetes(k) => k.init_containers.len() + k.containers.len(),
    };
    if container_count > limits.max_containers {
        return Err(ServiceError::TooLarge(vec![Violation::new(
            ViolationKind::LimitExceeded,
            format!("{spec_prefix}.containers"),
            format!(
                "{container_count} containers exceed the limit of {} (limits.max_containers)",
                limits.max_containers
            ),
        )]));
    }
    if !violations.is_empty() {
        return Err(ServiceError::InvalidArgument(violations));
    }
    let w = Workload::parse(meta, &spec, defaults, names)
        .map_err(|e| ServiceError::from(e.prefixed(&spec_prefix)))?;
    check_filter_lists(&w, &spec, &spec_prefix, names, limits)?;
    Ok(w)
}

/// The card filter lists of a parsed workload within `limits.max_list_entries` (annotations are
/// split into lists only when parsed; each entry is compared with every card).
fn check_filter_lists(
    w: &Workload,
    spec: &engine::WorkloadSpec,
    spec_prefix: &str,
    names: &KubeNames,
    limits: &Limits,
) -> Result<(), ServiceError> {
    let a = &names.annotations;
    let f = &w.filters;
    let kube = matches!(spec, engine::WorkloadSpec::Kubernetes(_));
    let mut too_large = Vec::new();
    for (n, typed_field, key) in [
        (f.use_types.len(), "use_gpu_types", &a.use_gpu_type),
        (f.nouse_types.len(), "nouse_gpu_types", &a.nouse_gpu_type),
        (f.use_uuids.len(), "use_gpu_uuids", &a.use_gpu_uuid),
        (f.nouse_uuids.len(), "nouse_gpu_uuids", &a.nouse_gpu_uuid),
    ] {
        if n > limits.max_list_entries {
            too_large.push(Violation::new(
                ViolationKind::LimitExceeded,
                if kube {
                    format!("{spec_prefix}.annotations[{key:?}]")
                } else {
                    format!("{spec_prefix}.{typed_field}")
                },
                format!(
                    "{n} entries exceed the limit of {} (limits.max_list_entries)",
                    limits.max_list_entries
                ),
            ));
        }
    }
    if too_large.is_empty() {
        Ok(())
    } else {
        Err(ServiceError::TooLarge(too_large))
    }
}

fn typed_in(
    t: v1::TypedWorkloadSpec,
    prefix: &str,
    violations: &mut Vec<Violation>,
) -> engine::TypedSpec {
    let v1::TypedWorkloadSpec {
        node_policy,
        gpu_policy,
        scoring_weights,
        numa_bind,
        use_gpu_types,
        nouse_gpu_types,
        use_gpu_uuids,
        nouse_gpu_uuids,
        vgpu_mode,
        init_containers,
        containers,
    } = t;
    let container = |c: v1::ContainerRequest| {
        let v1::ContainerRequest {
            name,
            gpu_count,
            gpumem_mib,
            gpumem_percent,
            gpucores_percent,
        } = c;
        engine::TypedContainer {
            name,
            gpus: gpu_count,
            gpumem_mib,
            gpumem_percent,
            gpucores: gpucores_percent,
        }
    };
    engine::TypedSpec {
        node_policy: node_policy_in(node_policy, &format!("{prefix}.node_policy"), violations),
        gpu_policy: gpu_tokens_in(&gpu_policy, &format!("{prefix}.gpu_policy"), violations),
        weights: scoring_weights.map(|w| {
            let v1::ScoringWeights { slot, core, memory } = w;
            engine::ScoringWeights { slot, core, memory }
        }),
        numa_bind,
        use_types: use_gpu_types,
        nouse_types: nouse_gpu_types,
        use_uuids: use_gpu_uuids,
        nouse_uuids: nouse_gpu_uuids,
        vgpu_mode,
        init_containers: init_containers.into_iter().map(container).collect(),
        containers: containers.into_iter().map(container).collect(),
    }
}

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

// ---------------------------------------------------------------------------------------------
// Outbound
// ---------------------------------------------------------------------------------------------

fn node_policy_out(p: NodePolicy) -> i32 {
    match p {
        NodePolicy::Binpack => v1::NodePolicy::Binpack as i32,
        NodePolicy::Spread => v1::NodePolicy::Spread as i32,
    }
}

fn gpu_token_out(t: GpuToken) -> i32 {
    match t {
        GpuToken::Binpack => v1::GpuPolicy::Binpack as i32,
        GpuToken::Spread => v1::GpuPolicy::Spread as i32,
        GpuToken::Mutex => v1::GpuPolicy::Mutex as i32,
        GpuToken::TopologyAware => v1::GpuPolicy::TopologyAware as i32,
        GpuToken::Numa => v1::GpuPolicy::Numa as i32,
    }
}

/// The effective policy of a workload.
pub fn effective_out(w: &Workload) -> v1::EffectivePolicy {
    v1::EffectivePolicy {
        node_policy: node_policy_out(w.node_policy),
        gpu_policy: w
            .gpu_policy
            .tokens()
            .iter()
            .map(|t| gpu_token_out(*t))
            .collect(),
        scoring_weights: Some(v1::ScoringWeights {
            slot: w.weights.slot,
            core: w.weights.core,
            memory: w.weights.memory,
        }),
        numa_bind: w.numa_bind,
        gpu_policy_text: w.gpu_policy.to_string(),
    }
}

/// The protobuf reason of a violation kind (its name is `VIOLATION_REASON_` + the kind's
/// reason string, checked by a test).
pub fn violation_reason_out(k: ViolationKind) -> v1::ViolationReason {
    match k {
        ViolationKind::InvalidNodePolicy => v1::ViolationReason::InvalidNodePolicy,
        ViolationKind::InvalidGpuPolicy => v1::ViolationReason::InvalidGpuPolicy,
        ViolationKind::InvalidScoringWeights => v1::ViolationReason::InvalidScoringWeights,
        ViolationKind::InvalidNumaBind => v1::ViolationReason::InvalidNumaBind,
        ViolationKind::InvalidResourceRequest => v1::ViolationReason::InvalidResourceRequest,
        ViolationKind::MissingField => v1::ViolationReason::MissingField,
        ViolationKind::DuplicateId => v1::ViolationReason::DuplicateId,
        ViolationKind::UnknownReference => v1::ViolationReason::UnknownReference,
        ViolationKind::UnknownEnumValue => v1::ViolationReason::UnknownEnumValue,
        ViolationKind::OutOfRange => v1::ViolationReason::OutOfRange,
        ViolationKind::LimitExceeded => v1::ViolationReason::LimitExceeded,
        ViolationKind::InvalidNodeReference => v1::ViolationReason::InvalidNodeReference,
    }
}

/// The protobuf reason.
pub fn reason_out(r: Reason) -> v1::Reason {
    match r {
        Reason::NodeInsufficientDevice => v1::Reason::NodeInsufficientDevice,
        Reason::CardNotHealth => v1::Reason::CardNotHealth,
        Reason::CardCordoned => v1::Reason::CardCordoned,
        Reason::CardTypeMismatch => v1::Reason::CardTypeMismatch,
        Reason::NumaNotFit => v1::Reason::NumaNotFit,
        Reason::CardUuidMismatch => v1::Reason::CardUuidMismatch,
        Reason::CardTimeSlicingExhausted => v1::Reason::CardTimeSlicingExhausted,
        Reason::ExclusiveDeviceAllocateConflict => v1::Reason::ExclusiveDeviceAllocateConflict,
        Reason::CardInsufficientMemory => v1::Reason::CardInsufficientMemory,
        Reason::CardInsufficientCore => v1::Reason::CardInsufficientCore,
        Reason::CardComputeUnitsExhausted => v1::Reason::CardComputeUnitsExhausted,
        Reason::AllocatedCardsInsufficientRequest => v1::Reason::AllocatedCardsInsufficientRequest,
        Reason::CardZeroCapacity => v1::Reason::CardZeroCapacity,
        Reason::InvalidNode => v1::Reason::InvalidNode,
        // Issue 22 phase 2 adds the wire reasons; until then no request carries a quota budget,
        // so the engine never gives these here.
        Reason::QuotaMemoryExceeded | Reason::QuotaCoresExceeded => v1::Reason::Unspecified,
        // Reasons 17-20 are reserved for them in the v1 API (issue 23, next phase); until then no
        // request carries a MIG layout, so only a MIG-mode card without one gives the first.
        Reason::MigNoProfileLargeEnough
        | Reason::MigProfileNotAllowed
        | Reason::MigNoFreePlacement => v1::Reason::Unspecified,
    }
}

fn container_name(w: &Workload, position: usize) -> String {
    w.containers
        .get(position)
        .map(|c| c.name.clone())
        .unwrap_or_default()
}

/// Failed nodes, by name.
pub fn failed_out(
    s: &Snapshot,
    w: &Workload,
    failed: &[engine::FailedNode],
) -> Vec<v1::FailedNode> {
    // Many nodes fail the same way: each distinct failure's reasons and text are built once
    // and cloned (formatting them per node was ~15% of a 1,000-node decision).
    type Shape = (engine::ReasonCounts, u32, usize);
    let mut built: Vec<(Shape, Vec<v1::ReasonCount>, String, String)> = Vec::new();
    let mut index: std::collections::HashMap<Shape, usize> = std::collections::HashMap::new();
    failed
        .iter()
        .map(|f| {
            let engine::FailedNode { node, failure } = f;
            let engine::NodeFailure {
                container_position,
                reasons,
                cards_on_node,
                unresolvable,
            } = failure;
            let shape: Shape = (*reasons, *cards_on_node, *container_position);
            // The last shape first (runs are common), then the index of shapes seen.
            let found = if built.last().is_some_and(|(k, ..)| *k == shape) {
                Some(built.len() - 1)
            } else {
                index.get(&shape).copied()
            };
            let k = match found {
                Some(k) => k,
                None => {
                    index.insert(shape, built.len());
                    built.push((
                        shape,
                        reasons
                            .entries(*cards_on_node)
                            .into_iter()
                            .map(|(r, count)| v1::ReasonCount {
                                reason: reason_out(r) as i32,
                                count,
                                name: r.as_str().to_owned(),
                            })
                            .collect(),
                        failure.hami_text(),
                        container_name(w, *container_position),
                    ));
                    built.len() - 1
                }
            };
            let (_, reasons, message, container) = &built[k];
            v1::FailedNode {
                node_name: s
                    .node(*node)
                    .map(|n| n.name().to_owned())
                    .unwrap_or_default(),
                reasons: reasons.clone(),
                message: message.clone(),
                container_position: u32::try_from(*container_position).unwrap_or(u32::MAX),
                container_name: container.clone(),
                unresolvable: *unresolvable,
            }
        })
        .collect()
}

/// A feasible node's score.
pub fn score_out(s: &Snapshot, f: &engine::FeasibleNode) -> v1::NodeScore {
    let engine::FeasibleNode {
        node,
        score,
        normalized,
    } = f;
    v1::NodeScore {
        node_name: s
            .node(*node)
            .map(|n| n.name().to_owned())
            .unwrap_or_default(),
        raw_score: score.raw,
        normalized_score: *normalized,
    }
}

/// Explanations.
pub fn explanations_out(
    s: &Snapshot,
    w: &Workload,
    ex: &[engine::NodeExplanation],
) -> Vec<v1::NodeExplanation> {
    ex.iter()
        .map(|e| {
            // `quota`: no wire field before issue 22 phase 2 (no request carries a budget yet).
            let engine::NodeExplanation {
                node,
                containers,
                quota: _,
            } = e;
            let n = s.node(*node);
            v1::NodeExplanation {
                node_name: n.map(|n| n.name().to_owned()).unwrap_or_default(),
                containers: containers
                    .iter()
                    .map(|c| {
                        let engine::ContainerExplanation { position, cards } = c;
                        v1::ContainerExplanation {
                            container_name: container_name(w, *position),
                            init: w.containers.get(*position).is_some_and(|c| c.init),
                            cards: cards
                                .iter()
                                .map(|k| {
                                    let engine::CardExplanation {
                                        card,
                                        terms,
                                        visit_position,
                                        rejected,
                                        chosen,
                                        mig: _, // not in the v1 API yet (issue 23)
                                    } = k;
                                    let c = n.and_then(|n| n.cards().get(*card));
                                    v1::CardExplanation {
                                        card_id: c.map(|c| c.id.clone()).unwrap_or_default(),
                                        card_index: c.map_or(0, |c| c.index),
                                        numa: c.map_or(0, |c| c.numa),
                                        slot_term: terms.slot,
                                        core_term: terms.core,
                                        memory_term: terms.memory,
                                        score: terms.total(),
                                        visit_position: visit_position.unwrap_or(0),
                                        rejected: rejected
                                            .map_or(v1::Reason::Unspecified, reason_out)
                                            as i32,
                                        chosen: *chosen,
                                        visited: visit_position.is_some(),
                                    }
                                })
                                .collect(),
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}

/// An allocation result.
pub fn allocation_out(
    s: &Snapshot,
    w: &Workload,
    a: &Allocation,
    rolled_back: bool,
    shown: FailedNodesShown,
) -> v1::AllocationResult {
    let Allocation {
        requests_gpu,
        placement,
        failed,
        feasible_count,
        explanations,
    } = a;
    let placed = placement.is_some() && !rolled_back;
    let mut out = v1::AllocationResult {
        placed,
        node_name: String::new(),
        containers: Vec::new(),
        node_score: None,
        failed_nodes: if shown.lists(placed) {
            failed_out(s, w, failed)
        } else {
            Vec::new()
        },
        failed_node_count: u32::try_from(failed.len()).unwrap_or(u32::MAX),
        effective_policy: Some(effective_out(w)),
        requests_gpu: *requests_gpu,
        feasible_node_count: u32::try_from(*feasible_count).unwrap_or(u32::MAX),
        explanations: explanations_out(s, w, explanations),
        rolled_back: rolled_back && placement.is_some(),
    };
    if let Some(p) = placement {
        let engine::Placement {
            node,
            score,
            normalized,
            containers,
            final_usage: _,
            booked: _,
        } = p;
        let n = s.node(*node);
        out.node_name = n.map(|n| n.name().to_owned()).unwrap_or_default();
        out.node_score = Some(v1::NodeScore {
            node_name: out.node_name.clone(),
            raw_score: score.raw,
            normalized_score: *normalized,
        });
        out.containers = containers
            .iter()
            .map(|c| {
                let engine::ContainerAssignment { position, cards } = c;
                v1::ContainerAssignment {
                    container_name: container_name(w, *position),
                    init: w.containers.get(*position).is_some_and(|c| c.init),
                    cards: cards
                        .iter()
                        .map(|k| {
                            let engine::AssignedCard {
                                card,
                                mem_mib,
                                cores,
                                mig: _, // not in the v1 API yet (issue 23)
                            } = k;
                            let c = n.and_then(|n| n.cards().get(*card));
                            v1::CardAssignment {
                                card_id: c.map(|c| c.id.clone()).unwrap_or_default(),
                                card_index: c.map_or(0, |c| c.index),
                                card_type: c.map(|c| c.card_type.clone()).unwrap_or_default(),
                                mem_mib: *mem_mib,
                                cores_percent: *cores,
                            }
                        })
                        .collect(),
                }
            })
            .collect();
    }
    out
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
        mig: _, // not in the v1 API yet (issue 23, next phase)
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
    } = n.to_spec();
    v1::Node {
        name,
        cards: cards.iter().map(card_out).collect(),
        cordoned_card_ids: cordoned,
        pair_scores: pairs_out(&pair_scores),
        annotations: BTreeMap::new(),
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

/// Resolved containers for ValidateWorkload.
pub fn resolved_out(w: &Workload) -> Vec<v1::ResolvedContainer> {
    w.containers
        .iter()
        .filter(|c| c.gpus > 0)
        .map(|c| {
            let engine::ContainerRequest {
                name,
                init,
                gpus,
                mem_mib,
                mem_percent,
                cores,
            } = c;
            v1::ResolvedContainer {
                container_name: name.clone(),
                init: *init,
                gpu_count: *gpus,
                mem_mib: *mem_mib,
                mem_percent: *mem_percent,
                cores_percent: *cores,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violation_reasons_are_the_kinds_with_the_enum_prefix() {
        let mut seen = Vec::new();
        for k in ViolationKind::ALL {
            let r = violation_reason_out(k);
            assert_eq!(
                r.as_str_name(),
                format!("VIOLATION_REASON_{}", k.as_str()),
                "{k:?}"
            );
            seen.push(r as i32);
        }
        // Every value of the proto enum but UNSPECIFIED is some kind: the set is closed both ways.
        let mut all: Vec<i32> = (0..64)
            .filter(|n| v1::ViolationReason::try_from(*n).is_ok())
            .filter(|n| *n != v1::ViolationReason::Unspecified as i32)
            .collect();
        all.sort_unstable();
        seen.sort_unstable();
        assert_eq!(seen, all);
    }

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
        let bad = |o: v1::PlacementOptions| match options_in(Some(o), &server) {
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
                default_node_policy: 3,
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
            )
            .unwrap();
            assert_eq!(o.defaults.memory_mib, memory);
        }
    }
}
