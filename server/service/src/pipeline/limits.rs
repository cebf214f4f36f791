//! Every request limit (`[limits]` of the configuration) checked on a call's way, with its
//! message, in one place. A limit over is RESOURCE_EXHAUSTED (`ServiceError::TooLarge`) with a
//! LIMIT_EXCEEDED violation naming the field and the limit's key, except the cards of one node:
//! that node is invalid itself (a failed node of the answer, `REASON_INVALID_NODE`).
//!
//! Who checks what, in call order: the intake checks the declared message size
//! ([`message`]), the prescan counts every repeated field on the wire with [`Limit`] (before
//! decoding), the pipeline checks again what it decodes (the same limits, the same messages:
//! [`nodes`], [`workloads`], [`containers`], [`filter_lists`], [`request_cards`],
//! [`node_cards`], [`changed_set`]) and the size of the answer ([`answer`]).

use std::fmt::Display;

use gpusched_api::v1;
use gpusched_engine::{KubeNames, Violation, ViolationKind, Workload, WorkloadSpec};

use crate::candidates::Candidates;
use crate::config::Limits;
use crate::error::ServiceError;

/// A count limit of `[limits]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `limits.max_nodes`: nodes whole and by reference, names in `restrict_to_node_names`.
    Nodes,
    /// `limits.max_cards`: cards over every node of a request.
    Cards,
    /// `limits.max_cards_per_node`: cards (or usage entries) of one node.
    CardsPerNode,
    /// `limits.max_workloads`: workloads of one AllocateBatch.
    Workloads,
    /// `limits.max_containers`: containers of one workload.
    Containers,
    /// `limits.max_list_entries`: any other repeated field.
    ListEntries,
}

impl Limit {
    /// The configuration key.
    pub fn key(self) -> &'static str {
        match self {
            Limit::Nodes => "limits.max_nodes",
            Limit::Cards => "limits.max_cards",
            Limit::CardsPerNode => "limits.max_cards_per_node",
            Limit::Workloads => "limits.max_workloads",
            Limit::Containers => "limits.max_containers",
            Limit::ListEntries => "limits.max_list_entries",
        }
    }

    /// Its value.
    pub fn of(self, l: &Limits) -> usize {
        match self {
            Limit::Nodes => l.max_nodes,
            Limit::Cards => l.max_cards,
            Limit::CardsPerNode => l.max_cards_per_node,
            Limit::Workloads => l.max_workloads,
            Limit::Containers => l.max_containers,
            Limit::ListEntries => l.max_list_entries,
        }
    }

    /// Whether `n` is over it.
    pub fn exceeded_by(self, n: usize, l: &Limits) -> bool {
        n > self.of(l)
    }

    /// `<n> <what> exceed the limit of <max>[ per node] (<key>)` on `field`.
    pub fn violation(
        self,
        l: &Limits,
        field: impl Into<String>,
        n: usize,
        what: impl Display,
    ) -> Violation {
        let per = if self == Limit::CardsPerNode {
            " per node"
        } else {
            ""
        };
        Violation::new(
            ViolationKind::LimitExceeded,
            field,
            format!(
                "{n} {what} exceed the limit of {}{per} ({})",
                self.of(l),
                self.key()
            ),
        )
    }

    /// [`Limit::violation`] when `n` is over the limit (`field` is built only then).
    pub fn check(
        self,
        l: &Limits,
        field: impl FnOnce() -> String,
        n: usize,
        what: &str,
    ) -> Option<Violation> {
        self.exceeded_by(n, l)
            .then(|| self.violation(l, field(), n, what))
    }
}

fn too_large(v: Vec<Violation>) -> Result<(), ServiceError> {
    if v.is_empty() {
        Ok(())
    } else {
        Err(ServiceError::TooLarge(v))
    }
}

/// The `nodes` of a request: whole nodes (and their cards) and references, before any
/// conversion work (referenced nodes' cards are counted once resolved: [`request_cards`]).
pub fn nodes(nodes: &[v1::Node], refs: &[v1::NodeRef], l: &Limits) -> Result<(), ServiceError> {
    let total = nodes.len() + refs.len();
    if !refs.is_empty() && Limit::Nodes.exceeded_by(total, l) {
        return too_large(vec![Limit::Nodes.violation(
            l,
            "nodes",
            total,
            format_args!("nodes ({} whole, {} by reference)", nodes.len(), refs.len()),
        )]);
    }
    let mut over = Vec::new();
    over.extend(Limit::Nodes.check(l, || "nodes".to_owned(), nodes.len(), "nodes"));
    let cards: usize = nodes.iter().map(|n| n.cards.len()).sum();
    over.extend(Limit::Cards.check(l, || "nodes".to_owned(), cards, "cards"));
    too_large(over)
}

/// The cards of every candidate node (whole, by reference, valid or not), once references are
/// resolved.
pub fn request_cards(cards: usize, l: &Limits) -> Result<(), ServiceError> {
    too_large(
        Limit::Cards
            .check(l, || "nodes".to_owned(), cards, "cards")
            .into_iter()
            .collect(),
    )
}

/// The cards of one node (field `cards`, relative to the node): over the limit, the node is
/// invalid itself and its cards are not looked at.
pub fn node_cards(cards: usize, l: &Limits) -> Option<Violation> {
    Limit::CardsPerNode.check(l, || "cards".to_owned(), cards, "cards")
}

/// The cards of a NormalizeInventory request (one node's): RESOURCE_EXHAUSTED.
pub fn inventory_cards(cards: usize, l: &Limits) -> Result<(), ServiceError> {
    too_large(node_cards(cards, l).into_iter().collect())
}

/// The workloads of an AllocateBatch.
pub fn workloads(n: usize, l: &Limits) -> Result<(), ServiceError> {
    too_large(
        Limit::Workloads
            .check(l, || "workloads".to_owned(), n, "workloads")
            .into_iter()
            .collect(),
    )
}

/// The containers of one workload (`spec_prefix`: `workload.kubernetes`, `workloads[2].typed`).
pub fn containers(spec: &WorkloadSpec, spec_prefix: &str, l: &Limits) -> Result<(), ServiceError> {
    let n = match spec {
        WorkloadSpec::Typed(t) => t.init_containers.len() + t.containers.len(),
        WorkloadSpec::Kubernetes(k) => k.init_containers.len() + k.containers.len(),
    };
    too_large(
        Limit::Containers
            .check(l, || format!("{spec_prefix}.containers"), n, "containers")
            .into_iter()
            .collect(),
    )
}

/// The card filter lists of a parsed workload (annotations are split into lists only when
/// parsed; each entry is compared with every card).
pub fn filter_lists(
    w: &Workload,
    spec: &WorkloadSpec,
    spec_prefix: &str,
    names: &KubeNames,
    l: &Limits,
) -> Result<(), ServiceError> {
    let a = &names.annotations;
    let f = &w.filters;
    let kube = matches!(spec, WorkloadSpec::Kubernetes(_));
    let mut over = Vec::new();
    for (n, typed_field, key) in [
        (f.use_types.len(), "use_gpu_types", &a.use_gpu_type),
        (f.nouse_types.len(), "nouse_gpu_types", &a.nouse_gpu_type),
        (f.use_uuids.len(), "use_gpu_uuids", &a.use_gpu_uuid),
        (f.nouse_uuids.len(), "nouse_gpu_uuids", &a.nouse_gpu_uuid),
    ] {
        let field = || {
            if kube {
                format!("{spec_prefix}.annotations[{key:?}]")
            } else {
                format!("{spec_prefix}.{typed_field}")
            }
        };
        over.extend(Limit::ListEntries.check(l, field, n, "entries"));
    }
    too_large(over)
}

/// A node set changed by a request (a base plus additions can outgrow the limits; cards of
/// invalid nodes count, as sent).
pub fn changed_set(s: &Candidates, l: &Limits) -> Result<(), ServiceError> {
    let (nodes, cards) = (s.len(), s.card_count());
    let what = "(base set and changes)";
    let over = if Limit::Nodes.exceeded_by(nodes, l) {
        Some(Limit::Nodes.violation(l, "node_set", nodes, format_args!("nodes {what}")))
    } else if Limit::Cards.exceeded_by(cards, l) {
        Some(Limit::Cards.violation(l, "node_set", cards, format_args!("cards {what}")))
    } else {
        None
    };
    too_large(over.into_iter().collect())
}

/// The request message's declared size (its gRPC prefix), before any of it is received.
pub fn message(len: usize, l: &Limits) -> Result<(), ServiceError> {
    if len > l.max_message_bytes {
        return too_large(vec![Violation::new(
            ViolationKind::LimitExceeded,
            "request",
            format!(
                "the request message of {len} bytes exceeds the limit of {} (limits.max_message_bytes)",
                l.max_message_bytes
            ),
        )]);
    }
    Ok(())
}

/// The estimated memory of a call (`prescan`), against the whole budget.
pub fn memory(needed: usize, l: &Limits) -> Result<(), ServiceError> {
    if needed > l.max_in_flight_bytes {
        return too_large(vec![Violation::new(
            ViolationKind::LimitExceeded,
            "request",
            format!(
                "the call needs an estimated {needed} bytes of memory (request, decoded, answer), more than limits.max_in_flight_bytes ({})",
                l.max_in_flight_bytes
            ),
        )]);
    }
    Ok(())
}

/// The closing violation of a count that stopped listing (`prescan`).
pub fn more_exceeded(left_out: usize) -> Violation {
    Violation::new(
        ViolationKind::LimitExceeded,
        "request",
        format!("and {left_out} more limits exceeded"),
    )
}

/// RESOURCE_EXHAUSTED for an answer of `bytes` over `limit` (`limits.max_message_bytes`):
/// checked before tonic encodes it (tonic would answer OUT_OF_RANGE "encoded message length
/// too large" after building it).
pub fn answer_too_large(bytes: usize, limit: usize) -> ServiceError {
    ServiceError::TooLarge(vec![Violation::new(
        ViolationKind::LimitExceeded,
        "response",
        format!(
            "the answer would be {bytes} bytes or more, over the limit of {limit} \
             (limits.max_message_bytes): ask for less (fewer nodes or workloads, no explain, \
             no updated nodes)"
        ),
    )])
}

/// `msg` when its encoding fits in `limit` bytes, else [`answer_too_large`].
pub fn answer<T: prost::Message>(msg: T, limit: usize) -> Result<T, ServiceError> {
    let bytes = msg.encoded_len();
    if bytes > limit {
        Err(answer_too_large(bytes, limit))
    } else {
        Ok(msg)
    }
}
