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

use gpusched_api::v1;
use gpusched_engine::{self as engine, Violation};

use crate::config::Limits;
use crate::error::ServiceError;
use crate::pipeline::ASSUMED_CARDS_PER_REF;
use crate::pipeline::limits::{self, Limit};
use crate::rpc::{Admission, Rpc};

/// Bytes of memory charged per byte of the encoded request, on top of the per-entry costs: the
/// received body (once, twice while its chunks are joined), the decoded strings and bytes, and
/// the copies the call makes of them (trimmed ids, upper-cased filters, names echoed in the
/// answer). The reliability test (`tests/bounds.rs`) measures the worst case of RSS per request
/// byte against it.
pub const WIRE_FACTOR: usize = 4;

/// Memory of one node beyond its bytes: the decoded message (twice: a vector grows by
/// doubling), the engine's spec and node, the shared pointer and the answer's entry.
const NODE_COST: usize = 2 * size_of::<v1::Node>()
    + size_of::<engine::NodeSpec>()
    + size_of::<engine::Node>()
    + 32
    + ANSWER_PER_NODE;
/// Memory of one card: decoded (twice), converted, and its cordon flag.
const CARD_COST: usize = 2 * size_of::<v1::Card>() + size_of::<engine::Card>() + 8;
/// Memory of one entry of a repeated string: decoded (twice) and one copy.
const STRING_COST: usize = 3 * size_of::<String>();
/// Memory of one pair score: decoded (twice) and converted (the pair matrix is counted per
/// node).
const PAIR_COST: usize = 2 * size_of::<v1::CardPairScore>() + size_of::<engine::PairScore>();
/// Memory of one map entry (a B-tree of two strings, nodes half full at worst).
const MAP_ENTRY_COST: usize = 4 * size_of::<String>() + 32;
/// Memory of one repeated enum value.
const ENUM_COST: usize = 2 * size_of::<i32>() + 8;
/// Memory of one workload beyond its lists: decoded and parsed.
const WORKLOAD_COST: usize = 2 * size_of::<v1::Workload>()
    + size_of::<engine::Workload>()
    + 2 * size_of::<v1::TypedWorkloadSpec>();
/// Memory of one container: decoded (twice, either form) and resolved.
const CONTAINER_COST: usize = 2 * size_of::<v1::KubernetesContainer>()
    + 2 * size_of::<v1::ContainerRequest>()
    + size_of::<engine::ContainerRequest>();
/// Memory of one usage entry of a node by reference.
const USAGE_COST: usize =
    2 * size_of::<v1::CardUsageEntry>() + size_of::<(String, engine::CardUsage)>();
/// Memory of one raw card of NormalizeInventory: decoded, converted, normalised and answered.
const RAW_CARD_COST: usize = 2 * size_of::<v1::RawCard>()
    + size_of::<engine::RawCard>()
    + size_of::<engine::Card>()
    + size_of::<v1::Card>();
/// Memory of one link: decoded, converted, and its pair score (a map entry and the answer's).
const LINK_COST: usize = 2 * size_of::<v1::RawLink>()
    + size_of::<engine::RawLink>()
    + MAP_ENTRY_COST
    + size_of::<v1::CardPairScore>();
/// Memory of one normalisation override: decoded, converted, its upper-cased model.
const OVERRIDE_COST: usize = 2 * size_of::<v1::NormalizationOverride>()
    + size_of::<engine::NormalizationOverride>()
    + size_of::<String>();
/// Memory of a node's entry in the answer for one workload: a failed node (its name, reasons
/// with their names, HAMi's message) or a feasible one (its name and score), engine and
/// protobuf forms.
const ANSWER_PER_NODE: usize = 448;
/// Memory of one card's explanation for one container: engine and protobuf forms.
const EXPLANATION_COST: usize =
    size_of::<engine::CardExplanation>() + 2 * size_of::<v1::CardExplanation>();

/// Violations kept in full; beyond them one more says how many were left out (the scan's own
/// memory stays bounded whatever the request).
const MAX_REPORTED: usize = 100;

/// Counts `message` (one encoded request of `rpc`) against `limits`: the estimates, or
/// RESOURCE_EXHAUSTED naming every limit it is over.
pub fn scan(rpc: Rpc, message: &[u8], limits: &Limits) -> Result<Admission, ServiceError> {
    let mut s = Scan::new(limits);
    // A malformed encoding stops the count (see the module's documentation).
    let _ = match rpc {
        Rpc::Filter | Rpc::Score | Rpc::Allocate | Rpc::AllocateBatch => s.placement(rpc, message),
        Rpc::ValidateWorkload => s.validate(message),
        Rpc::NormalizeInventory => s.normalize(message),
    };
    s.finish(rpc, message.len())
}

/// A malformed encoding.
#[derive(Debug)]
struct Malformed;

type Step = Result<(), Malformed>;

/// One field's value.
#[derive(Clone, Copy, Debug)]
enum Value<'a> {
    Varint,
    Len(&'a [u8]),
    Other,
}

/// The fields of one encoded message, in wire order.
struct Fields<'a> {
    buf: &'a [u8],
}

/// How deep groups of unknown fields may nest (the decoder's recursion limit).
const GROUP_DEPTH: usize = 100;

fn varint(buf: &mut &[u8]) -> Result<u64, Malformed> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first().ok_or(Malformed)?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(Malformed)
}

impl<'a> Fields<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Fields { buf }
    }

    fn skip(&mut self, n: usize) -> Step {
        if self.buf.len() < n {
            return Err(Malformed);
        }
        self.buf = &self.buf[n..];
        Ok(())
    }

    fn len_delimited(&mut self) -> Result<&'a [u8], Malformed> {
        let len = usize::try_from(varint(&mut self.buf)?).map_err(|_| Malformed)?;
        if len > self.buf.len() {
            return Err(Malformed);
        }
        let (v, rest) = self.buf.split_at(len);
        self.buf = rest;
        Ok(v)
    }

    /// Skips a group whose start (field `number`) was just read.
    fn skip_group(&mut self, number: u64) -> Step {
        let mut open = vec![number];
        while let Some(&inner) = open.last() {
            let key = varint(&mut self.buf)?;
            match key & 7 {
                0 => {
                    varint(&mut self.buf)?;
                }
                1 => self.skip(8)?,
                2 => {
                    self.len_delimited()?;
                }
                3 => {
                    if open.len() >= GROUP_DEPTH {
                        return Err(Malformed);
                    }
                    open.push(key >> 3);
                }
                4 if key >> 3 == inner => {
                    open.pop();
                }
                5 => self.skip(4)?,
                _ => return Err(Malformed),
            }
        }
        Ok(())
    }

    /// The next field: `None` at the end.
    fn next(&mut self) -> Option<Result<(u32, Value<'a>), Malformed>> {
        if self.buf.is_empty() {
            return None;
        }
        Some(self.field())
    }

    fn field(&mut self) -> Result<(u32, Value<'a>), Malformed> {
        let key = varint(&mut self.buf)?;
        let number = u32::try_from(key >> 3).map_err(|_| Malformed)?;
        if number == 0 {
            return Err(Malformed);
        }
        let value = match key & 7 {
            0 => {
                varint(&mut self.buf)?;
                Value::Varint
            }
            1 => {
                self.skip(8)?;
                Value::Other
            }
            2 => Value::Len(self.len_delimited()?),
            3 => {
                self.skip_group(key >> 3)?;
                Value::Other
            }
            5 => {
                self.skip(4)?;
                Value::Other
            }
            _ => return Err(Malformed),
        };
        Ok((number, value))
    }
}

/// Entries of a repeated enum field: packed (one length-delimited run of varints, counted by
/// their last bytes) or one per field.
fn enum_entries(v: Value<'_>) -> usize {
    match v {
        Value::Len(b) => b.iter().filter(|&&x| x < 0x80).count(),
        Value::Varint | Value::Other => 1,
    }
}

/// The bytes of a length-delimited field (`None` when it has another wire type: the decoder
/// refuses it there).
fn bytes(v: Value<'_>) -> Result<&[u8], Malformed> {
    match v {
        Value::Len(b) => Ok(b),
        Value::Varint | Value::Other => Err(Malformed),
    }
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

/// Where a node came from, to name fields.
#[derive(Clone, Copy)]
enum NodeAt {
    Whole(usize),
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

/// The running count of one request.
struct Scan<'l> {
    limits: &'l Limits,
    violations: Vec<Violation>,
    left_out: usize,
    memory: usize,
    /// Counted entries (conversion work).
    entries: usize,
    whole: usize,
    refs: usize,
    /// References with inline inventories (their cards are counted).
    inline_refs: usize,
    cards: usize,
    restrict: usize,
    workloads: usize,
    /// Containers over all workloads, each plus one.
    container_slots: usize,
    /// Filter list entries over all workloads (each compared with every card).
    filter_entries: usize,
    explain: bool,
    updated_nodes: bool,
    /// Nodes with pair scores: the pair matrices (cards squared).
    pair_matrix: usize,
    raw_cards: usize,
    overrides: usize,
    links: usize,
}

impl<'l> Scan<'l> {
    fn new(limits: &'l Limits) -> Self {
        Scan {
            limits,
            violations: Vec::new(),
            left_out: 0,
            memory: 0,
            entries: 0,
            whole: 0,
            refs: 0,
            inline_refs: 0,
            cards: 0,
            restrict: 0,
            workloads: 0,
            container_slots: 0,
            filter_entries: 0,
            explain: false,
            updated_nodes: false,
            pair_matrix: 0,
            raw_cards: 0,
            overrides: 0,
            links: 0,
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
        self.entries = self.entries.saturating_add(entries);
        self.memory = self.memory.saturating_add(entries.saturating_mul(cost));
    }

    // --- requests ------------------------------------------------------------------------

    fn placement(&mut self, rpc: Rpc, message: &[u8]) -> Step {
        let mut single = None;
        let result = self.placement_fields(rpc, message, &mut single);
        if let Some(c) = single {
            self.workloads += 1;
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
                (_, (1, v)) => {
                    let at = NodeAt::Whole(self.whole);
                    self.whole += 1;
                    self.node(bytes(v)?, at)?;
                }
                (Rpc::AllocateBatch, (2, v)) => {
                    let i = self.workloads;
                    self.workloads += 1;
                    let mut c = WorkloadCounts::default();
                    let r = self.workload(bytes(v)?, &mut c);
                    self.workload_end(&c, &format!("workloads[{i}]"));
                    r?;
                }
                (_, (2, v)) => {
                    let c = single.get_or_insert_with(WorkloadCounts::default);
                    self.workload(bytes(v)?, c)?;
                }
                (_, (3, v)) => self.options(bytes(v)?)?,
                (Rpc::Allocate, (4, v)) => {
                    bytes(v)?;
                    self.restrict += 1;
                    self.add(1, STRING_COST);
                }
                (Rpc::AllocateBatch, (5, Value::Varint)) => self.updated_nodes = true,
                (Rpc::AllocateBatch, (6, v))
                | (Rpc::Filter | Rpc::Score | Rpc::Allocate, (5, v)) => {
                    let i = self.refs;
                    self.refs += 1;
                    self.node_ref(bytes(v)?, i)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn validate(&mut self, message: &[u8]) -> Step {
        let mut single = WorkloadCounts::default();
        let result = self.validate_fields(message, &mut single);
        self.workloads = 1;
        self.workload_end(&single, "workload");
        result
    }

    fn validate_fields(&mut self, message: &[u8], single: &mut WorkloadCounts) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            match f? {
                (1, v) => self.workload(bytes(v)?, single)?,
                (2, v) => self.options(bytes(v)?)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn normalize(&mut self, message: &[u8]) -> Step {
        let result = self.normalize_fields(message);
        self.over(
            Limit::CardsPerNode,
            self.raw_cards,
            || "cards".to_owned(),
            "cards",
        );
        self.list(self.overrides, || "config.overrides".to_owned());
        result
    }

    fn normalize_fields(&mut self, message: &[u8]) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            match f? {
                (2, v) => {
                    let j = self.raw_cards;
                    self.raw_cards += 1;
                    self.add(1, RAW_CARD_COST);
                    self.raw_card(bytes(v)?, j)?;
                }
                (3, v) => self.normalization_config(bytes(v)?)?,
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
        self.cards = self.cards.saturating_add(c.cards);
        if c.pairs > 0 {
            self.pair_matrix = self
                .pair_matrix
                .saturating_add(c.cards.saturating_mul(c.cards));
        }
        result
    }

    fn node_fields(&mut self, message: &[u8], c: &mut NodeCounts) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            match f? {
                (2, _) => {
                    c.cards += 1;
                    self.add(1, CARD_COST);
                }
                (3, _) => {
                    c.cordoned += 1;
                    self.add(1, STRING_COST);
                }
                (4, _) => {
                    c.pairs += 1;
                    self.add(1, PAIR_COST);
                }
                (5, _) => {
                    c.annotations += 1;
                    self.add(1, MAP_ENTRY_COST);
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn node_ref(&mut self, message: &[u8], i: usize) -> Step {
        let mut fields = Fields::new(message);
        let mut inline = false;
        while let Some(f) = fields.next() {
            match f? {
                (1, v) => {
                    let b = bytes(v)?;
                    if !b.is_empty() {
                        inline = true;
                        self.node(b, NodeAt::Ref(i))?;
                    }
                }
                (3, v) => {
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
            self.inline_refs += 1;
        } else {
            // Resolved from the cache: nothing to decode, but a node to decide on and answer.
            self.add(1, ANSWER_PER_NODE);
        }
        Ok(())
    }

    fn usage(&mut self, message: &[u8], n: &mut usize) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            if let (1, _) = f? {
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
                (4, v) => self.typed(bytes(v)?, c)?,
                (5, v) => self.kube(bytes(v)?, c)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn typed(&mut self, message: &[u8], c: &mut WorkloadCounts) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            match f? {
                (2, v) => {
                    let n = enum_entries(v);
                    c.gpu_policy += n;
                    self.add(n, ENUM_COST);
                }
                (5, _) => {
                    c.use_types += 1;
                    self.add(1, STRING_COST);
                }
                (6, _) => {
                    c.nouse_types += 1;
                    self.add(1, STRING_COST);
                }
                (7, _) => {
                    c.use_uuids += 1;
                    self.add(1, STRING_COST);
                }
                (8, _) => {
                    c.nouse_uuids += 1;
                    self.add(1, STRING_COST);
                }
                (10 | 11, _) => {
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
                (1, _) => {
                    c.annotations += 1;
                    self.add(1, MAP_ENTRY_COST);
                }
                (n @ (2 | 3), v) => {
                    c.kube_containers += 1;
                    self.add(1, CONTAINER_COST);
                    let list = if n == 2 {
                        "init_containers"
                    } else {
                        "containers"
                    };
                    let j = if n == 2 { &mut init } else { &mut app };
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
                (2, _) => maps[0] += 1,
                (3, _) => maps[1] += 1,
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
        self.container_slots = self
            .container_slots
            .saturating_add(c.typed_containers + c.kube_containers + 1);
        self.filter_entries = self
            .filter_entries
            .saturating_add(c.use_types + c.nouse_types + c.use_uuids + c.nouse_uuids);
    }

    fn options(&mut self, message: &[u8]) -> Step {
        let mut tokens = 0usize;
        let result = self.options_fields(message, &mut tokens);
        self.list(tokens, || "options.default_gpu_policy".to_owned());
        result
    }

    fn options_fields(&mut self, message: &[u8], tokens: &mut usize) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            match f? {
                (2, v) => {
                    let n = enum_entries(v);
                    *tokens += n;
                    self.add(n, ENUM_COST);
                }
                (5, Value::Varint) => self.explain = true,
                _ => {}
            }
        }
        Ok(())
    }

    // --- inventory -------------------------------------------------------------------------

    fn raw_card(&mut self, message: &[u8], j: usize) -> Step {
        let mut links = 0usize;
        let result = self.raw_card_fields(message, &mut links);
        self.links = self.links.saturating_add(links);
        self.list(links, || format!("cards[{j}].links"));
        result
    }

    fn raw_card_fields(&mut self, message: &[u8], links: &mut usize) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            if let (8, _) = f? {
                *links += 1;
                self.add(1, LINK_COST);
            }
        }
        Ok(())
    }

    fn normalization_config(&mut self, message: &[u8]) -> Step {
        let mut fields = Fields::new(message);
        while let Some(f) = fields.next() {
            if let (4, _) = f? {
                self.overrides += 1;
                self.add(1, OVERRIDE_COST);
            }
        }
        Ok(())
    }

    // --- the verdict -----------------------------------------------------------------------

    fn finish(mut self, rpc: Rpc, wire: usize) -> Result<Admission, ServiceError> {
        let l = self.limits;
        let mut violations = Vec::new();
        if rpc == Rpc::AllocateBatch && Limit::Workloads.exceeded_by(self.workloads, l) {
            violations.push(Limit::Workloads.violation(
                l,
                "workloads",
                self.workloads,
                "workloads",
            ));
        }
        let nodes = self.whole + self.refs;
        if Limit::Nodes.exceeded_by(nodes, l) {
            violations.push(if self.refs == 0 {
                Limit::Nodes.violation(l, "nodes", nodes, "nodes")
            } else {
                Limit::Nodes.violation(
                    l,
                    "nodes",
                    nodes,
                    format_args!("nodes ({} whole, {} by reference)", self.whole, self.refs),
                )
            });
        }
        violations.append(&mut self.violations);
        violations.extend(Limit::Cards.check(l, || "nodes".to_owned(), self.cards, "cards"));
        violations.extend(Limit::Nodes.check(
            l,
            || "restrict_to_node_names".to_owned(),
            self.restrict,
            "names",
        ));
        if self.left_out > 0 {
            violations.push(limits::more_exceeded(self.left_out));
        }
        if !violations.is_empty() {
            return Err(ServiceError::TooLarge(violations));
        }
        let admission = self.estimate(rpc, wire);
        limits::memory(admission.memory, l)?;
        Ok(admission)
    }

    fn estimate(&self, rpc: Rpc, wire: usize) -> Admission {
        let workloads = self.workloads.max(1);
        let by_ref = (self.refs - self.inline_refs).saturating_mul(ASSUMED_CARDS_PER_REF);
        let cards = self.cards.saturating_add(by_ref);
        let nodes = self.whole + self.refs;
        let containers = self.container_slots.max(1);
        let explain = if self.explain { 2 } else { 1 };
        let mut memory = wire
            .saturating_mul(WIRE_FACTOR)
            .saturating_add(self.memory)
            .saturating_add(self.pair_matrix.saturating_mul(size_of::<i64>()));
        if rpc.is_placement() {
            // Every node answered for every workload beyond the first (the first is in
            // NODE_COST), and explanations of every card for every container.
            memory = memory.saturating_add(
                nodes
                    .saturating_mul(workloads - 1)
                    .saturating_mul(ANSWER_PER_NODE),
            );
            if self.explain {
                memory = memory.saturating_add(
                    cards
                        .saturating_mul(containers)
                        .saturating_mul(EXPLANATION_COST),
                );
            }
            if self.updated_nodes {
                memory = memory.saturating_add(
                    nodes
                        .saturating_mul(NODE_COST)
                        .saturating_add(cards.saturating_mul(CARD_COST))
                        .saturating_add(wire),
                );
            }
        }
        let evaluation = cards
            .saturating_add(nodes)
            .saturating_mul(containers)
            .saturating_mul(explain);
        let filters = cards.saturating_mul(self.filter_entries);
        let inventory = self
            .raw_cards
            .saturating_mul(self.overrides.saturating_add(1))
            .saturating_add(self.links);
        Admission {
            offloaded: false,
            memory,
            work: self
                .entries
                .saturating_add(evaluation)
                .saturating_add(filters)
                .saturating_add(inventory),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn the_paths_are_the_services_rpcs() {
        // The service names and methods as generated (a renamed RPC must be renamed here).
        use gpusched_api::v1::inventory_service_server::SERVICE_NAME as INVENTORY;
        use gpusched_api::v1::placement_service_server::SERVICE_NAME as PLACEMENT;
        for (m, rpc) in [
            ("Filter", Rpc::Filter),
            ("Score", Rpc::Score),
            ("Allocate", Rpc::Allocate),
            ("AllocateBatch", Rpc::AllocateBatch),
            ("ValidateWorkload", Rpc::ValidateWorkload),
        ] {
            assert_eq!(Rpc::from_path(&format!("/{PLACEMENT}/{m}")), Some(rpc));
        }
        assert_eq!(
            Rpc::from_path(&format!("/{INVENTORY}/NormalizeInventory")),
            Some(Rpc::NormalizeInventory)
        );
        assert_eq!(Rpc::from_path("/grpc.health.v1.Health/Check"), None);
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
