//! Counting a request on the wire before it is decoded.
//!
//! Every repeated field of a request is counted from its protobuf encoding (no allocation, one
//! pass), checked against the limits, and turned into estimates of the memory and the work the
//! call will need ([`Admission`]). A request over a limit is refused before it becomes
//! structures: 16 MiB of empty nodes would decode into ~1.5 GB of `Node`s.
//!
//! Counting follows the decoder: repeated fields add up wherever their entries appear, a
//! singular message field seen twice is merged (its lists add up too), unknown fields and
//! groups are skipped. An encoding that is malformed stops the count where it becomes
//! malformed: the decoder fails at the same point, so nothing past it is ever allocated, and
//! what was counted up to there is still checked.

use gpusched_engine::Violation;

use crate::config::Limits;
use crate::convert::node::NodeAt;
use crate::error::ServiceError;
use crate::pipeline::limits::{self, Limit};
use crate::rpc::{Admission, Rpc};
use crate::transport::prescan::cost::*;
use crate::transport::prescan::fields::*;
use crate::transport::prescan::wire::{Fields, Step, Value, bytes, enum_entries};

/// Violations kept in full; beyond them one more says how many were left out (the scan's own
/// memory stays bounded whatever the request).
const MAX_REPORTED: usize = 100;

/// Counts `message` (one encoded request of `rpc`) against `limits`: the estimates, or
/// RESOURCE_EXHAUSTED naming every limit it is over.
pub fn scan(rpc: Rpc, message: &[u8], limits: &Limits) -> Result<Admission, ServiceError> {
    let mut s = Scan::new(limits);
    // A malformed encoding stops the count (see the module's documentation).
    let _ = match rpc {
        Rpc::Filter | Rpc::Score | Rpc::Allocate | Rpc::AllocateBatch | Rpc::Preempt => {
            s.placement(rpc, message)
        }
        Rpc::ValidateWorkload => s.validate(message),
        Rpc::NormalizeInventory => s.normalize(message),
    };
    s.finish(rpc, message.len())
}

/// Counts of one node.
#[derive(Default)]
struct NodeCounts {
    cards: usize,
    cordoned: usize,
    pairs: usize,
    annotations: usize,
}

/// Counts of one workload (added up over every occurrence of a singular workload field).
#[derive(Default)]
struct WorkloadCounts {
    typed_containers: usize,
    kube_containers: usize,
    gpu_policy: usize,
    use_types: usize,
    nouse_types: usize,
    use_uuids: usize,
    nouse_uuids: usize,
    annotations: usize,
}

/// The running count of one request.
struct Scan<'l> {
    limits: &'l Limits,
    violations: Vec<Violation>,
    left_out: usize,
    /// The counts.
    c: Counts,
}

impl<'l> Scan<'l> {
    fn new(limits: &'l Limits) -> Self {
        Scan {
            limits,
            violations: Vec::new(),
            left_out: 0,
            c: Counts::default(),
        }
    }

    /// `n` of `what` (on `field`) against `limit` (the violation built only when over, and
    /// kept only while fewer than [`MAX_REPORTED`] are).
    fn over(&mut self, limit: Limit, n: usize, field: impl FnOnce() -> String, what: &str) {
        if !limit.exceeded_by(n, self.limits) {
            return;
        }
        if self.violations.len() < MAX_REPORTED {
            self.violations
                .push(limit.violation(self.limits, field(), n, what));
        } else {
            self.left_out += 1;
        }
    }

    /// A list of `n` entries against `limits.max_list_entries`.
    fn list(&mut self, n: usize, field: impl FnOnce() -> String) {
        self.over(Limit::ListEntries, n, field, "entries");
    }

    fn add(&mut self, entries: usize, cost: usize) {
        self.c.entries = self.c.entries.saturating_add(entries);
        self.c.memory = self.c.memory.saturating_add(entries.saturating_mul(cost));
    }

    // --- requests ------------------------------------------------------------------------

    fn placement(&mut self, rpc: Rpc, message: &[u8]) -> Step {
        let mut single = None;
        let result = self.placement_fields(rpc, message, &mut single);
        if let Some(c) = single {
            self.c.workloads += 1;
            self.workload_end(&c, "workload");
        }
        result
    }

    fn placement_fields(
        &mut self,
        rpc: Rpc,
        message: &[u8],
        single: &mut Option<WorkloadCounts>,
    ) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            match (rpc, f?) {
                (_, (PLACEMENT_NODES, v)) => {
                    let at = NodeAt::Whole(self.c.whole);
                    self.c.whole += 1;
                    self.node(bytes(v)?, at)?;
                }
                (Rpc::AllocateBatch, (BATCH_WORKLOADS, v)) => {
                    let i = self.c.workloads;
                    self.c.workloads += 1;
                    let mut c = WorkloadCounts::default();
                    let r = self.workload(bytes(v)?, &mut c);
                    self.workload_end(&c, &format!("workloads[{i}]"));
                    r?;
                }
                (_, (PLACEMENT_WORKLOAD, v)) => {
                    let c = single.get_or_insert_with(WorkloadCounts::default);
                    self.workload(bytes(v)?, c)?;
                }
                (_, (PLACEMENT_OPTIONS, v)) => self.options(bytes(v)?)?,
                (Rpc::Allocate, (ALLOCATE_RESTRICT, v)) => {
                    bytes(v)?;
                    self.c.restrict += 1;
                    self.add(1, STRING_COST);
                }
                (Rpc::AllocateBatch, (BATCH_UPDATED_NODES, Value::Varint)) => {
                    self.c.updated_nodes = true
                }
                (Rpc::AllocateBatch, (BATCH_NODE_REFS, v))
                | (Rpc::Preempt, (PREEMPT_NODE_REFS, v))
                | (Rpc::Filter | Rpc::Score | Rpc::Allocate, (PLACEMENT_NODE_REFS, v)) => {
                    let i = self.c.refs;
                    self.c.refs += 1;
                    self.node_ref(bytes(v)?, i)?;
                }
                (Rpc::Preempt, (PREEMPT_PLACED, v)) => self.node_placed(bytes(v)?)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn validate(&mut self, message: &[u8]) -> Step {
        let mut single = WorkloadCounts::default();
        let result = self.validate_fields(message, &mut single);
        self.c.workloads = 1;
        self.workload_end(&single, "workload");
        result
    }

    fn validate_fields(&mut self, message: &[u8], single: &mut WorkloadCounts) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            match f? {
                (VALIDATE_WORKLOAD, v) => self.workload(bytes(v)?, single)?,
                (VALIDATE_OPTIONS, v) => self.options(bytes(v)?)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn normalize(&mut self, message: &[u8]) -> Step {
        let result = self.normalize_fields(message);
        self.over(
            Limit::CardsPerNode,
            self.c.raw_cards,
            || "cards".to_owned(),
            "cards",
        );
        self.list(self.c.overrides, || "config.overrides".to_owned());
        result
    }

    fn normalize_fields(&mut self, message: &[u8]) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            match f? {
                (NORMALIZE_CARDS, v) => {
                    let j = self.c.raw_cards;
                    self.c.raw_cards += 1;
                    self.add(1, RAW_CARD_COST);
                    self.raw_card(bytes(v)?, j)?;
                }
                (NORMALIZE_CONFIG, v) => self.normalization_config(bytes(v)?)?,
                _ => {}
            }
        }
        Ok(())
    }

    // --- nodes -----------------------------------------------------------------------------

    fn node(&mut self, message: &[u8], at: NodeAt) -> Step {
        self.add(1, NODE_COST);
        let mut c = NodeCounts::default();
        let result = self.node_fields(message, &mut c);
        // A node over limits.max_cards_per_node is not refused here: it is invalid itself, a
        // failed node of the answer (node-level faults stay node-level); its cards count
        // towards limits.max_cards like any others, which bounds the decoding.
        self.list(c.cordoned, || format!("{at}.cordoned_card_ids"));
        self.list(c.pairs, || format!("{at}.pair_scores"));
        self.list(c.annotations, || format!("{at}.annotations"));
        self.c.cards = self.c.cards.saturating_add(c.cards);
        if c.pairs > 0 {
            self.c.pair_matrix = self
                .c
                .pair_matrix
                .saturating_add(c.cards.saturating_mul(c.cards));
        }
        result
    }

    fn node_fields(&mut self, message: &[u8], c: &mut NodeCounts) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            match f? {
                (NODE_CARDS, v) => {
                    c.cards += 1;
                    self.add(1, CARD_COST);
                    let b = bytes(v)?;
                    if b.len() > CARD_WALK_BYTES {
                        self.card(b)?;
                    }
                }
                (NODE_CORDONED, _) => {
                    c.cordoned += 1;
                    self.add(1, STRING_COST);
                }
                (NODE_PAIR_SCORES, _) => {
                    c.pairs += 1;
                    self.add(1, PAIR_COST);
                }
                (NODE_ANNOTATIONS, _) => {
                    c.annotations += 1;
                    self.add(1, MAP_ENTRY_COST);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A long card: its MIG layout's profiles, placements and instances are charged (their
    /// counts are bounded by the engine's validation, after decoding; the charge bounds the
    /// decoding).
    fn card(&mut self, message: &[u8]) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            if let (CARD_MIG, v) = f? {
                let mut layout = Fields::new(bytes(v)?);
                while let Some(f) = layout.next() {
                    match f? {
                        (MIG_PROFILES, v) => {
                            self.add(1, MIG_PROFILE_COST);
                            let mut profile = Fields::new(bytes(v)?);
                            while let Some(f) = profile.next() {
                                if let (MIG_PROFILE_PLACEMENTS, v) = f? {
                                    self.add(enum_entries(v), ENUM_COST);
                                }
                            }
                        }
                        (MIG_INSTANCES, _) => self.add(1, MIG_INSTANCE_COST),
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// The placed workloads of one node of a Preempt: charged, and counted for the work
    /// estimate (their number is bounded by the engine's validation, INVALID_ARGUMENT naming
    /// the field; the charge bounds the decoding).
    fn node_placed(&mut self, message: &[u8]) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            if let (PLACED_WORKLOADS, v) = f? {
                self.c.placed += 1;
                self.add(1, PLACED_COST);
                let mut workload = Fields::new(bytes(v)?);
                while let Some(f) = workload.next() {
                    if let (PLACED_BOOKINGS, _) = f? {
                        self.add(1, BOOKING_COST);
                    }
                }
            }
        }
        Ok(())
    }

    fn node_ref(&mut self, message: &[u8], i: usize) -> Step {
        let mut fields = Fields::new(message);
        let mut inline = false;
        while let Some(f) = fields.next() {
            match f? {
                (REF_INVENTORY, v) => {
                    let b = bytes(v)?;
                    if !b.is_empty() {
                        inline = true;
                        self.node(b, NodeAt::Ref(i))?;
                    }
                }
                (REF_USAGE, v) => {
                    let mut n = 0usize;
                    let r = self.usage(bytes(v)?, &mut n);
                    self.over(
                        Limit::CardsPerNode,
                        n,
                        || format!("node_refs[{i}].usage.cards"),
                        "usage entries",
                    );
                    r?;
                }
                _ => {}
            }
        }
        if inline {
            self.c.inline_refs += 1;
        } else {
            // Resolved from the cache: nothing to decode, but a node to decide on and answer.
            self.add(1, ANSWER_PER_NODE);
        }
        Ok(())
    }

    fn usage(&mut self, message: &[u8], n: &mut usize) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            if let (USAGE_CARDS, _) = f? {
                *n += 1;
                self.add(1, USAGE_COST);
            }
        }
        Ok(())
    }

    // --- workloads and options -------------------------------------------------------------

    fn workload(&mut self, message: &[u8], c: &mut WorkloadCounts) -> Step {
        self.add(1, WORKLOAD_COST);
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            match f? {
                (WORKLOAD_TYPED, v) => self.typed(bytes(v)?, c)?,
                (WORKLOAD_KUBERNETES, v) => self.kube(bytes(v)?, c)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn typed(&mut self, message: &[u8], c: &mut WorkloadCounts) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            match f? {
                (TYPED_GPU_POLICY, v) => {
                    let n = enum_entries(v);
                    c.gpu_policy += n;
                    self.add(n, ENUM_COST);
                }
                (TYPED_USE_TYPES, _) => {
                    c.use_types += 1;
                    self.add(1, STRING_COST);
                }
                (TYPED_NOUSE_TYPES, _) => {
                    c.nouse_types += 1;
                    self.add(1, STRING_COST);
                }
                (TYPED_USE_UUIDS, _) => {
                    c.use_uuids += 1;
                    self.add(1, STRING_COST);
                }
                (TYPED_NOUSE_UUIDS, _) => {
                    c.nouse_uuids += 1;
                    self.add(1, STRING_COST);
                }
                (TYPED_INIT_CONTAINERS | TYPED_CONTAINERS, _) => {
                    c.typed_containers += 1;
                    self.add(1, CONTAINER_COST);
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn kube(&mut self, message: &[u8], c: &mut WorkloadCounts) -> Step {
        let mut fields = Fields::new(message);
        // Container positions per list, to name a container's field.
        let (mut init, mut app) = (0usize, 0usize);
        while let Some(f) = fields.next() {
            match f? {
                (KUBE_ANNOTATIONS, _) => {
                    c.annotations += 1;
                    self.add(1, MAP_ENTRY_COST);
                }
                (n @ (KUBE_INIT_CONTAINERS | KUBE_CONTAINERS), v) => {
                    c.kube_containers += 1;
                    self.add(1, CONTAINER_COST);
                    let list = if n == KUBE_INIT_CONTAINERS {
                        "init_containers"
                    } else {
                        "containers"
                    };
                    let j = if n == KUBE_INIT_CONTAINERS {
                        &mut init
                    } else {
                        &mut app
                    };
                    let at = (list, *j);
                    *j += 1;
                    self.kube_container(bytes(v)?, at)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn kube_container(&mut self, message: &[u8], at: (&str, usize)) -> Step {
        let mut maps = [0usize; 2];
        let result = self.kube_container_fields(message, &mut maps);
        let (list, j) = at;
        let [limits, requests] = maps;
        self.list(limits, || format!("kubernetes.{list}[{j}].limits"));
        self.list(requests, || format!("kubernetes.{list}[{j}].requests"));
        result
    }

    /// Counts the entries of a container's `limits` and `requests`.
    fn kube_container_fields(&mut self, message: &[u8], maps: &mut [usize; 2]) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            match f? {
                (CONTAINER_LIMITS, _) => maps[0] += 1,
                (CONTAINER_REQUESTS, _) => maps[1] += 1,
                _ => continue,
            }
            self.add(1, MAP_ENTRY_COST);
        }
        Ok(())
    }

    /// Checks one workload's counts; `prefix` names it (`workload`, `workloads[i]`).
    fn workload_end(&mut self, c: &WorkloadCounts, prefix: &str) {
        for (n, form) in [
            (c.typed_containers, "typed"),
            (c.kube_containers, "kubernetes"),
        ] {
            self.over(
                Limit::Containers,
                n,
                || format!("{prefix}.{form}.containers"),
                "containers",
            );
        }
        for (n, field) in [
            (c.gpu_policy, "typed.gpu_policy"),
            (c.use_types, "typed.use_gpu_types"),
            (c.nouse_types, "typed.nouse_gpu_types"),
            (c.use_uuids, "typed.use_gpu_uuids"),
            (c.nouse_uuids, "typed.nouse_gpu_uuids"),
            (c.annotations, "kubernetes.annotations"),
        ] {
            self.list(n, || format!("{prefix}.{field}"));
        }
        // Container-level fields were named without the workload: add it.
        for v in &mut self.violations {
            if v.field.starts_with("kubernetes.") {
                v.field = format!("{prefix}.{}", v.field);
            }
        }
        self.c.container_slots = self
            .c
            .container_slots
            .saturating_add(c.typed_containers + c.kube_containers + 1);
        self.c.filter_entries = self
            .c
            .filter_entries
            .saturating_add(c.use_types + c.nouse_types + c.use_uuids + c.nouse_uuids);
    }

    fn options(&mut self, message: &[u8]) -> Step {
        let mut tokens = 0usize;
        let mut shapes = 0usize;
        let result = self.options_fields(message, &mut tokens, &mut shapes);
        self.list(tokens, || "options.default_gpu_policy".to_owned());
        self.list(shapes, || "options.workload_mix.shapes".to_owned());
        result
    }

    fn options_fields(&mut self, message: &[u8], tokens: &mut usize, shapes: &mut usize) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            match f? {
                (OPTIONS_GPU_POLICY, v) => {
                    let n = enum_entries(v);
                    *tokens += n;
                    self.add(n, ENUM_COST);
                }
                (OPTIONS_EXPLAIN, Value::Varint) => self.c.explain = true,
                (OPTIONS_WORKLOAD_MIX, v) => self.workload_mix(bytes(v)?, shapes)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// A workload mix: its shapes (bounded again, exactly, by `limits.max_mix_shapes` when
    /// converted) and each shape's card types.
    fn workload_mix(&mut self, message: &[u8], shapes: &mut usize) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            if let (MIX_SHAPES, v) = f? {
                let i = *shapes;
                *shapes += 1;
                self.add(1, SHAPE_COST);
                let mut types = 0usize;
                let result = self.shape_types(bytes(v)?, &mut types);
                self.list(types, || {
                    format!("options.workload_mix.shapes[{i}].gpu_types")
                });
                result?;
            }
        }
        Ok(())
    }

    fn shape_types(&mut self, message: &[u8], types: &mut usize) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            if let (SHAPE_GPU_TYPES, _) = f? {
                *types += 1;
                self.add(1, STRING_COST);
            }
        }
        Ok(())
    }

    // --- inventory -------------------------------------------------------------------------

    fn raw_card(&mut self, message: &[u8], j: usize) -> Step {
        let mut links = 0usize;
        let result = self.raw_card_fields(message, &mut links);
        self.c.links = self.c.links.saturating_add(links);
        self.list(links, || format!("cards[{j}].links"));
        result
    }

    fn raw_card_fields(&mut self, message: &[u8], links: &mut usize) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            if let (RAW_CARD_LINKS, _) = f? {
                *links += 1;
                self.add(1, LINK_COST);
            }
        }
        Ok(())
    }

    fn normalization_config(&mut self, message: &[u8]) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            if let (NORMALIZATION_OVERRIDES, _) = f? {
                self.c.overrides += 1;
                self.add(1, OVERRIDE_COST);
            }
        }
        Ok(())
    }

    // --- the verdict -----------------------------------------------------------------------

    fn finish(mut self, rpc: Rpc, wire: usize) -> Result<Admission, ServiceError> {
        let l = self.limits;
        let mut violations = Vec::new();
        if rpc == Rpc::AllocateBatch && Limit::Workloads.exceeded_by(self.c.workloads, l) {
            violations.push(Limit::Workloads.violation(
                l,
                "workloads",
                self.c.workloads,
                "workloads",
            ));
        }
        let nodes = self.c.whole + self.c.refs;
        if Limit::Nodes.exceeded_by(nodes, l) {
            violations.push(if self.c.refs == 0 {
                Limit::Nodes.violation(l, "nodes", nodes, "nodes")
            } else {
                Limit::Nodes.violation(
                    l,
                    "nodes",
                    nodes,
                    format_args!(
                        "nodes ({} whole, {} by reference)",
                        self.c.whole, self.c.refs
                    ),
                )
            });
        }
        violations.append(&mut self.violations);
        violations.extend(Limit::Cards.check(l, || "nodes".to_owned(), self.c.cards, "cards"));
        violations.extend(Limit::Nodes.check(
            l,
            || "restrict_to_node_names".to_owned(),
            self.c.restrict,
            "names",
        ));
        if self.left_out > 0 {
            violations.push(limits::more_exceeded(self.left_out));
        }
        if !violations.is_empty() {
            return Err(ServiceError::TooLarge(violations));
        }
        let admission = self.c.estimate(rpc, wire);
        limits::memory(admission.memory, l)?;
        Ok(admission)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpusched_api::v1;
    use prost::Message;

    fn limits() -> Limits {
        crate::config::default_settings()
            .map(|s| s.limits)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn fields(e: &ServiceError) -> Vec<String> {
        match e {
            ServiceError::TooLarge(v) => v.iter().map(|v| v.field.clone()).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn empty_nodes_over_the_limit_are_counted_not_decoded() {
        let l = limits();
        // 20,000 empty nodes: 2 bytes each.
        let req = v1::FilterRequest {
            nodes: vec![v1::Node::default(); 20_000],
            ..Default::default()
        };
        let e = scan(Rpc::Filter, &req.encode_to_vec(), &l).unwrap_err();
        assert_eq!(fields(&e), vec!["nodes"]);
        assert!(
            e.to_string()
                .contains("20000 nodes exceed the limit of 10000"),
            "{e}"
        );
    }

    #[test]
    fn every_list_is_counted_where_it_is() {
        let mut l = limits();
        l.max_list_entries = 3;
        l.max_cards_per_node = 2;
        let node = v1::Node {
            host: None,
            name: "a".into(),
            cards: vec![v1::Card::default(); 3],
            cordoned_card_ids: vec![String::new(); 4],
            pair_scores: vec![v1::CardPairScore::default(); 4],
            annotations: (0..4).map(|i| (i.to_string(), String::new())).collect(),
        };
        let inventory = node.encode_to_vec();
        let usage = v1::NodeUsage {
            cards: vec![v1::CardUsageEntry::default(); 3],
        }
        .encode_to_vec();
        let kube = v1::Workload {
            spec: Some(v1::workload::Spec::Kubernetes(v1::KubernetesWorkloadSpec {
                annotations: (0..4).map(|i| (i.to_string(), String::new())).collect(),
                init_containers: vec![],
                containers: vec![v1::KubernetesContainer {
                    name: String::new(),
                    limits: (0..4).map(|i| (i.to_string(), String::new())).collect(),
                    requests: Default::default(),
                }],
            })),
            ..Default::default()
        };
        let req = v1::AllocateRequest {
            node_set: None,
            nodes: vec![node],
            workload: Some(kube),
            options: Some(v1::PlacementOptions {
                default_gpu_policy: vec![1; 4],
                ..Default::default()
            }),
            restrict_to_node_names: vec![],
            node_refs: vec![v1::NodeRef {
                inventory,
                usage,
                ..Default::default()
            }],
        };
        let e = scan(Rpc::Allocate, &req.encode_to_vec(), &l).unwrap_err();
        assert_eq!(
            fields(&e),
            vec![
                "nodes[0].cordoned_card_ids",
                "nodes[0].pair_scores",
                "nodes[0].annotations",
                "workload.kubernetes.containers[0].limits",
                "options.default_gpu_policy",
                "node_refs[0].inventory.cordoned_card_ids",
                "node_refs[0].inventory.pair_scores",
                "node_refs[0].inventory.annotations",
                "node_refs[0].usage.cards",
                "workload.kubernetes.annotations",
            ]
        );
    }

    #[test]
    fn a_singular_workload_seen_twice_adds_up() {
        let mut l = limits();
        l.max_containers = 3;
        let w = v1::Workload {
            spec: Some(v1::workload::Spec::Typed(v1::TypedWorkloadSpec {
                containers: vec![v1::ContainerRequest::default(); 2],
                ..Default::default()
            })),
            ..Default::default()
        };
        let one = v1::ValidateWorkloadRequest {
            workload: Some(w),
            options: None,
        }
        .encode_to_vec();
        assert!(scan(Rpc::ValidateWorkload, &one, &l).is_ok());
        // The decoder merges both: four containers.
        let twice = [one.clone(), one].concat();
        let e = scan(Rpc::ValidateWorkload, &twice, &l).unwrap_err();
        assert_eq!(fields(&e), vec!["workload.typed.containers"]);
    }

    #[test]
    fn counting_stops_where_the_encoding_breaks_and_keeps_what_it_counted() {
        let l = limits();
        let mut wire = v1::FilterRequest {
            nodes: vec![v1::Node::default(); 20_000],
            ..Default::default()
        }
        .encode_to_vec();
        wire.extend_from_slice(&[0x0a, 0xff]); // a truncated node
        assert!(matches!(
            scan(Rpc::Filter, &wire, &l),
            Err(ServiceError::TooLarge(_))
        ));
        // Truncated early: admitted, the decoder refuses it.
        assert!(scan(Rpc::Filter, &[0x0a, 0xff, 0x01], &l).is_ok());
    }

    #[test]
    fn unknown_fields_and_groups_are_skipped() {
        let l = limits();
        let node = v1::Node::default().encode_to_vec();
        let mut wire = Vec::new();
        // field 9, group (wire type 3) with a nested group and a varint, then its end (type 4).
        wire.extend_from_slice(&[
            (9 << 3) | 3,
            (10 << 3) | 3,
            (10 << 3) | 4,
            8,
            1,
            (9 << 3) | 4,
        ]);
        // Then 20,000 empty nodes.
        for _ in 0..20_000 {
            wire.push(0x0a);
            wire.push(u8::try_from(node.len()).unwrap_or(0));
        }
        assert!(v1::FilterRequest::decode(wire.as_slice()).is_ok());
        assert!(matches!(
            scan(Rpc::Filter, &wire, &l),
            Err(ServiceError::TooLarge(_))
        ));
    }

    #[test]
    fn restrict_names_overrides_and_links_have_limits() {
        let mut l = limits();
        l.max_nodes = 2;
        l.max_list_entries = 2;
        let req = v1::AllocateRequest {
            restrict_to_node_names: vec!["a".into(); 3],
            ..Default::default()
        };
        let e = scan(Rpc::Allocate, &req.encode_to_vec(), &l).unwrap_err();
        assert_eq!(fields(&e), vec!["restrict_to_node_names"]);
        let req = v1::NormalizeInventoryRequest {
            node_name: "n".into(),
            cards: vec![v1::RawCard {
                links: vec![v1::RawLink::default(); 3],
                ..Default::default()
            }],
            config: Some(v1::NormalizationConfig {
                overrides: vec![v1::NormalizationOverride::default(); 3],
                ..Default::default()
            }),
        };
        let e = scan(Rpc::NormalizeInventory, &req.encode_to_vec(), &l).unwrap_err();
        assert_eq!(fields(&e), vec!["cards[0].links", "config.overrides"]);
    }

    #[test]
    fn the_estimate_covers_answers_of_every_workload_on_every_node() {
        let mut l = limits();
        l.max_in_flight_bytes = 64 << 20;
        let node = |i: usize| v1::Node {
            name: format!("n{i}"),
            ..Default::default()
        };
        let w = v1::Workload::default();
        let small = v1::AllocateBatchRequest {
            nodes: (0..100).map(node).collect(),
            workloads: vec![w.clone(); 10],
            ..Default::default()
        };
        let a = scan(Rpc::AllocateBatch, &small.encode_to_vec(), &l).unwrap_or_default();
        assert!(a.memory > 100 * 10 * ANSWER_PER_NODE, "{a:?}");
        assert!(a.work >= 100 * 10, "{a:?}");
        // 2,500 nodes x 1,000 workloads: over a 64 MiB budget whatever the request's size.
        let big = v1::AllocateBatchRequest {
            nodes: (0..2_500).map(node).collect(),
            workloads: vec![w; 1_000],
            ..Default::default()
        };
        let e = scan(Rpc::AllocateBatch, &big.encode_to_vec(), &l).unwrap_err();
        assert!(e.to_string().contains("limits.max_in_flight_bytes"), "{e}");
    }
}
