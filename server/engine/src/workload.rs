//! Workloads: the two input forms (typed, Kubernetes), their validation and the resolved
//! request every decision works from. One parser for the server, the admission webhook and
//! every client-side check.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{InvalidInput, Violation, ViolationKind};
use crate::host::HostRequest;
use crate::mix::WorkloadMix;
use crate::model::Card;
use crate::names::{self, KubeNames};
use crate::policy::{GpuPolicy, GpuToken, NodePolicy, parse_bool};
use crate::quantity;
use crate::quota::QuotaBudget;
use crate::weights::ScoringWeights;

/// Cluster-wide defaults (server config, optionally replaced per request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Defaults {
    /// Node policy when the workload sets none.
    pub node_policy: NodePolicy,
    /// GPU policy when the workload sets none.
    pub gpu_policy: GpuPolicy,
    /// Memory per card when a container sets none, MiB; 0 = the whole card.
    pub memory_mib: u64,
    /// Cores per card when a container sets none, percent.
    pub cores: u32,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            node_policy: NodePolicy::Binpack,
            gpu_policy: GpuPolicy::single(GpuToken::Spread),
            memory_mib: 0,
            cores: 0,
        }
    }
}

impl Defaults {
    /// Checks the defaults themselves (cores at most 100). Each violation's field is the name
    /// of the offending `Defaults` field (`cores`, ...), for the caller to map to its own names.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        if self.cores > 100 {
            return Err(InvalidInput::single(
                ViolationKind::OutOfRange,
                "cores",
                format!("{} is out of range 0..=100", self.cores),
            ));
        }
        Ok(())
    }
}

/// A container's GPU request in typed form.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TypedContainer {
    /// Container name.
    pub name: String,
    /// Cards wanted; 0 = no GPU.
    pub gpus: u32,
    /// Memory per card, MiB; 0 = not set.
    pub gpumem_mib: u64,
    /// Memory per card, percent; 0 = not set.
    pub gpumem_percent: u32,
    /// Cores per card, percent; `None` = default.
    pub gpucores: Option<u32>,
}

/// A workload in typed form.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TypedSpec {
    /// Node policy; `None` = default.
    pub node_policy: Option<NodePolicy>,
    /// GPU policy tokens; empty = default.
    pub gpu_policy: Vec<GpuToken>,
    /// Weights; `None` = 1,1,1.
    pub weights: Option<ScoringWeights>,
    /// Cards of a container on one NUMA node.
    pub numa_bind: bool,
    /// Allowed card types.
    pub use_types: Vec<String>,
    /// Refused card types.
    pub nouse_types: Vec<String>,
    /// Allowed card ids.
    pub use_uuids: Vec<String>,
    /// Refused card ids.
    pub nouse_uuids: Vec<String>,
    /// Allowed card modes (substring test), when set.
    pub vgpu_mode: Option<String>,
    /// Init containers.
    pub init_containers: Vec<TypedContainer>,
    /// App containers.
    pub containers: Vec<TypedContainer>,
}

/// One container in Kubernetes form.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct KubeContainer {
    /// Container name.
    pub name: String,
    /// `resources.limits`.
    pub limits: BTreeMap<String, String>,
    /// `resources.requests`.
    pub requests: BTreeMap<String, String>,
}

/// A workload in Kubernetes form.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct KubeSpec {
    /// Pod annotations.
    pub annotations: BTreeMap<String, String>,
    /// Init containers.
    pub init_containers: Vec<KubeContainer>,
    /// App containers.
    pub containers: Vec<KubeContainer>,
}

/// Either input form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadSpec {
    /// Typed fields.
    Typed(TypedSpec),
    /// Annotations and resource quantities.
    Kubernetes(KubeSpec),
}

/// Identity of a workload (informational only).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct WorkloadMeta {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Unique id.
    pub uid: String,
}

impl WorkloadMeta {
    /// Who holds what the workload books (a MIG instance's `in_use_by`): `namespace/name`, or
    /// `name` without a namespace, or the uid when there is no name.
    pub fn owner(&self) -> String {
        match (self.namespace.is_empty(), self.name.is_empty()) {
            (_, true) => self.uid.clone(),
            (true, false) => self.name.clone(),
            (false, false) => format!("{}/{}", self.namespace, self.name),
        }
    }
}

/// A container's request after defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerRequest {
    /// Container name.
    pub name: String,
    /// Init container.
    pub init: bool,
    /// Cards wanted (0 = none).
    pub gpus: u32,
    /// Memory per card in MiB, when fixed.
    pub mem_mib: Option<u64>,
    /// Memory per card in percent, when given (or defaulted to 100).
    pub mem_percent: Option<u32>,
    /// Cores per card.
    pub cores: u32,
}

impl ContainerRequest {
    /// Memory booked on `card`: the fixed MiB, else the percentage of the card (floored).
    pub fn booked_mem(&self, card: &Card) -> u64 {
        match (self.mem_mib, self.mem_percent) {
            (Some(mib), _) => mib,
            (None, Some(pct)) => percent_of(card.total_mem_mib, pct),
            (None, None) => 0,
        }
    }

    /// Memory used in the device score: the percentage when given, else the fixed MiB.
    pub fn score_mem(&self, card: &Card) -> u64 {
        match (self.mem_percent, self.mem_mib) {
            (Some(pct), _) => percent_of(card.total_mem_mib, pct),
            (None, Some(mib)) => mib,
            (None, None) => 0,
        }
    }
}

fn percent_of(total: u64, pct: u32) -> u64 {
    let v = u128::from(total) * u128::from(pct) / 100;
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Card filters of a workload (use/nouse types and ids, vgpu mode).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CardFilters {
    /// Allowed type substrings (as given).
    pub use_types: Vec<String>,
    /// Refused type substrings.
    pub nouse_types: Vec<String>,
    /// Allowed ids.
    pub use_uuids: Vec<String>,
    /// Refused ids.
    pub nouse_uuids: Vec<String>,
    /// Allowed modes (a card's mode name must be contained in this value).
    pub vgpu_mode: Option<String>,
    use_types_upper: Vec<String>,
    nouse_types_upper: Vec<String>,
    /// `use_uuids` and `nouse_uuids` sorted, for lookups by binary search (not list scans).
    use_uuids_sorted: Vec<String>,
    nouse_uuids_sorted: Vec<String>,
}

impl CardFilters {
    /// Filters from trimmed, non-blank lists.
    pub fn new(
        use_types: Vec<String>,
        nouse_types: Vec<String>,
        use_uuids: Vec<String>,
        nouse_uuids: Vec<String>,
        vgpu_mode: Option<String>,
    ) -> Self {
        let clean = |v: Vec<String>| -> Vec<String> {
            v.into_iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        };
        let use_types = clean(use_types);
        let nouse_types = clean(nouse_types);
        let use_uuids = clean(use_uuids);
        let nouse_uuids = clean(nouse_uuids);
        let sorted = |v: &[String]| {
            let mut v = v.to_vec();
            v.sort_unstable();
            v.dedup();
            v
        };
        CardFilters {
            use_types_upper: use_types.iter().map(|s| s.to_uppercase()).collect(),
            nouse_types_upper: nouse_types.iter().map(|s| s.to_uppercase()).collect(),
            use_uuids_sorted: sorted(&use_uuids),
            nouse_uuids_sorted: sorted(&nouse_uuids),
            use_types,
            nouse_types,
            use_uuids,
            nouse_uuids,
            vgpu_mode,
        }
    }

    /// Whether check 3 can refuse any card.
    pub fn has_type_filter(&self) -> bool {
        !self.use_types_upper.is_empty()
            || !self.nouse_types_upper.is_empty()
            || self.vgpu_mode.is_some()
    }

    /// Whether check 5 can refuse any card.
    pub fn has_uuid_filter(&self) -> bool {
        !self.use_uuids.is_empty() || !self.nouse_uuids.is_empty()
    }

    /// Check 3: the type lists and the vgpu mode accept the card.
    pub fn type_allows(&self, card: &Card) -> bool {
        if !self.use_types_upper.is_empty()
            && !self
                .use_types_upper
                .iter()
                .any(|t| contains_ignore_case(&card.card_type, t))
        {
            return false;
        }
        if self
            .nouse_types_upper
            .iter()
            .any(|t| contains_ignore_case(&card.card_type, t))
        {
            return false;
        }
        if let Some(mode) = &self.vgpu_mode
            && !mode.contains(card.mode.as_str())
        {
            return false;
        }
        true
    }

    /// Whether the workload asks for MIG instances: its vgpu mode contains `mig`
    /// (`docs/placement-semantics.md` section 11.2).
    pub fn admits_mig(&self) -> bool {
        self.vgpu_mode
            .as_deref()
            .is_some_and(|m| m.contains(crate::model::CardMode::Mig.as_str()))
    }

    /// Check 5: the id lists accept the card.
    pub fn uuid_allows(&self, card: &Card) -> bool {
        let listed = |sorted: &[String]| sorted.binary_search(&card.id).is_ok();
        if !self.use_uuids_sorted.is_empty() && !listed(&self.use_uuids_sorted) {
            return false;
        }
        !listed(&self.nouse_uuids_sorted)
    }
}

/// Case-insensitive substring test; `needle_upper` is already upper case.
fn contains_ignore_case(hay: &str, needle_upper: &str) -> bool {
    if hay.is_ascii() && needle_upper.is_ascii() {
        let (h, n) = (hay.as_bytes(), needle_upper.as_bytes());
        if n.is_empty() {
            return true;
        }
        return h
            .windows(n.len())
            .any(|w| w.iter().zip(n).all(|(a, b)| a.to_ascii_uppercase() == *b));
    }
    hay.to_uppercase().contains(needle_upper)
}

/// A validated workload: policies, weights, filters and resolved containers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Identity.
    pub meta: WorkloadMeta,
    /// Node policy in force.
    pub node_policy: NodePolicy,
    /// GPU policy in force.
    pub gpu_policy: GpuPolicy,
    /// Weights in force.
    pub weights: ScoringWeights,
    /// numa-bind in force.
    pub numa_bind: bool,
    /// Card filters.
    pub filters: CardFilters,
    /// All containers in pod order: init containers first.
    pub containers: Vec<ContainerRequest>,
    /// Quota budget (section 10): unlimited unless set by [`Workload::with_quota`], which
    /// validates it.
    pub(crate) quota: QuotaBudget,
    /// Host CPU and memory it asks (section 12.2): the Kubernetes form's `cpu` and `memory`
    /// requests under node policy `fgd`; zero otherwise.
    pub host: HostRequest,
    /// The target workload mix of the fragmentation measure (section 12.1), set by
    /// [`Workload::with_mix`].
    pub(crate) mix: Option<Arc<WorkloadMix>>,
}

impl Workload {
    /// The same workload measuring fragmentation against `mix` (section 12): read only by
    /// the `fgd` node and GPU policies. Without a mix, `fgd` measures nothing (every node and
    /// card has fragmentation 0) and its tie-breaks decide.
    pub fn with_mix(self, mix: Arc<WorkloadMix>) -> Workload {
        Workload {
            mix: Some(mix),
            ..self
        }
    }

    /// The mix set by [`Workload::with_mix`].
    pub fn mix(&self) -> Option<&WorkloadMix> {
        self.mix.as_deref()
    }

    /// Whether the node or the GPU policy measures fragmentation (`fgd`).
    pub fn uses_fragmentation(&self) -> bool {
        self.node_policy == NodePolicy::Fgd || self.gpu_policy.contains(GpuToken::Fgd)
    }

    /// Whether any container asks for a GPU.
    pub fn requests_gpu(&self) -> bool {
        self.containers.iter().any(|c| c.gpus > 0)
    }

    /// Parses and validates `spec`. A workload whose containers request no GPU is not
    /// validated further (its annotations are ignored). Every violation is reported.
    pub fn parse(
        meta: WorkloadMeta,
        spec: &WorkloadSpec,
        defaults: &Defaults,
        names: &KubeNames,
    ) -> Result<Workload, InvalidInput> {
        match spec {
            WorkloadSpec::Typed(t) => parse_typed(meta, t, defaults),
            WorkloadSpec::Kubernetes(k) => parse_kube(meta, k, defaults, names),
        }
    }
}

/// Raw numbers of one container before defaults, with the field names to blame.
struct RawContainer<'a> {
    name: &'a str,
    init: bool,
    gpus: u32,
    mem_mib: u64,
    mem_percent: u64,
    cores: Option<u64>,
    percent_field: String,
    cores_field: String,
}

fn resolve(
    raw: RawContainer<'_>,
    defaults: &Defaults,
    violations: &mut Vec<Violation>,
) -> ContainerRequest {
    let mut req = ContainerRequest {
        name: raw.name.to_owned(),
        init: raw.init,
        gpus: raw.gpus,
        mem_mib: None,
        mem_percent: None,
        cores: 0,
    };
    if raw.gpus == 0 {
        return req;
    }
    if raw.mem_mib > 0 {
        req.mem_mib = Some(raw.mem_mib);
    }
    if raw.mem_percent > 100 {
        violations.push(Violation::new(
            ViolationKind::InvalidResourceRequest,
            raw.percent_field,
            format!(
                "memory percentage {} is out of range 1..=100 (0 = not set)",
                raw.mem_percent
            ),
        ));
    } else if raw.mem_percent > 0 {
        req.mem_percent = u32::try_from(raw.mem_percent).ok();
    }
    if req.mem_mib.is_none() && req.mem_percent.is_none() {
        if defaults.memory_mib > 0 {
            req.mem_mib = Some(defaults.memory_mib);
        } else {
            req.mem_percent = Some(100);
        }
    }
    match raw.cores {
        Some(c) if c > 100 => violations.push(Violation::new(
            ViolationKind::InvalidResourceRequest,
            raw.cores_field,
            format!("cores {c} is out of range 0..=100"),
        )),
        Some(c) => req.cores = u32::try_from(c).unwrap_or(0),
        None => req.cores = defaults.cores,
    }
    req
}

fn parse_typed(
    meta: WorkloadMeta,
    t: &TypedSpec,
    defaults: &Defaults,
) -> Result<Workload, InvalidInput> {
    let mut violations = Vec::new();
    let mut containers = Vec::new();
    for (list, init, field) in [
        (&t.init_containers, true, "init_containers"),
        (&t.containers, false, "containers"),
    ] {
        for (i, c) in list.iter().enumerate() {
            let raw = RawContainer {
                name: &c.name,
                init,
                gpus: c.gpus,
                mem_mib: c.gpumem_mib,
                mem_percent: u64::from(c.gpumem_percent),
                cores: c.gpucores.map(u64::from),
                percent_field: format!("{field}[{i}].gpumem_percent"),
                cores_field: format!("{field}[{i}].gpucores_percent"),
            };
            containers.push(resolve(raw, defaults, &mut violations));
        }
    }
    let weights = match t.weights {
        None => ScoringWeights::default(),
        Some(w) => w.validate().unwrap_or_else(|e| {
            violations.push(Violation::new(
                ViolationKind::InvalidScoringWeights,
                "scoring_weights",
                e.to_string(),
            ));
            ScoringWeights::default()
        }),
    };
    let gpu_policy =
        GpuPolicy::from_tokens(&t.gpu_policy).unwrap_or_else(|| defaults.gpu_policy.clone());
    let workload = Workload {
        meta,
        node_policy: t.node_policy.unwrap_or(defaults.node_policy),
        gpu_policy,
        weights,
        numa_bind: t.numa_bind,
        filters: CardFilters::new(
            t.use_types.clone(),
            t.nouse_types.clone(),
            t.use_uuids.clone(),
            t.nouse_uuids.clone(),
            t.vgpu_mode.clone(),
        ),
        containers,
        quota: QuotaBudget::UNLIMITED,
        host: HostRequest::default(),
        mix: None,
    };
    if !workload.requests_gpu() {
        return Ok(Workload {
            weights: ScoringWeights::default(),
            ..workload
        });
    }
    if violations.is_empty() {
        Ok(workload)
    } else {
        Err(InvalidInput { violations })
    }
}

fn annotation_field(key: &str) -> String {
    format!("annotations[{key:?}]")
}

fn parse_kube(
    meta: WorkloadMeta,
    k: &KubeSpec,
    defaults: &Defaults,
    names: &KubeNames,
) -> Result<Workload, InvalidInput> {
    let resources = &names.resources;
    let keys = &names.annotations;
    let mut violations = Vec::new();
    let mut containers = Vec::new();
    for (list, init, field) in [
        (&k.init_containers, true, "init_containers"),
        (&k.containers, false, "containers"),
    ] {
        for (i, c) in list.iter().enumerate() {
            let lookup = |name: &str| -> Option<(String, &str)> {
                if let Some(v) = c.limits.get(name) {
                    return Some((format!("{field}[{i}].limits[{name:?}]"), v.as_str()));
                }
                c.requests
                    .get(name)
                    .map(|v| (format!("{field}[{i}].requests[{name:?}]"), v.as_str()))
            };
            let quantity = |name: &str, violations: &mut Vec<Violation>| -> (Option<u64>, String) {
                match lookup(name) {
                    None => (None, format!("{field}[{i}].limits[{name:?}]")),
                    Some((f, v)) => match quantity::parse_whole(v) {
                        Ok(n) => (Some(n), f),
                        Err(e) => {
                            violations.push(Violation::new(
                                ViolationKind::InvalidResourceRequest,
                                f.clone(),
                                format!("{name}: {e}"),
                            ));
                            (None, f)
                        }
                    },
                }
            };
            let (gpus, gpus_field) = quantity(&resources.count, &mut violations);
            let count_given_as_zero = gpus == Some(0);
            let gpus = match gpus.map(u32::try_from) {
                None => 0,
                Some(Ok(n)) => n,
                Some(Err(_)) => {
                    violations.push(Violation::new(
                        ViolationKind::InvalidResourceRequest,
                        gpus_field,
                        format!("{}: at most {} cards", resources.count, u32::MAX),
                    ));
                    0
                }
            };
            if gpus == 0 {
                // An explicit count of 0 next to GPU memory or cores contradicts itself (HAMi
                // silently drops the memory and cores and the pod runs without a decision):
                // rejected, naming the key (placement-semantics section 2).
                if count_given_as_zero {
                    for name in [
                        &resources.memory,
                        &resources.memory_percentage,
                        &resources.cores,
                    ] {
                        let Some((f, v)) = lookup(name) else { continue };
                        if quantity::parse_whole(v).map_or(true, |n| n > 0) {
                            violations.push(Violation::new(
                                ViolationKind::InvalidResourceRequest,
                                f,
                                format!(
                                    "{name}: {v} with {count}: 0 is contradictory (GPU memory or \
                                     cores without a card); ask for at least one card or remove \
                                     {name}",
                                    count = resources.count
                                ),
                            ));
                        }
                    }
                }
                containers.push(resolve(
                    RawContainer {
                        name: &c.name,
                        init,
                        gpus: 0,
                        mem_mib: 0,
                        mem_percent: 0,
                        cores: None,
                        percent_field: String::new(),
                        cores_field: String::new(),
                    },
                    defaults,
                    &mut violations,
                ));
                continue;
            }
            let (mem, _) = quantity(&resources.memory, &mut violations);
            let (pct, percent_field) = quantity(&resources.memory_percentage, &mut violations);
            let (cores, cores_field) = quantity(&resources.cores, &mut violations);
            let raw = RawContainer {
                name: &c.name,
                init,
                gpus,
                mem_mib: mem.unwrap_or(0),
                mem_percent: pct.unwrap_or(0),
                cores,
                percent_field,
                cores_field,
            };
            containers.push(resolve(raw, defaults, &mut violations));
        }
    }
    let requests_gpu = containers.iter().any(|c| c.gpus > 0);
    let ann = &k.annotations;
    let get = |key: &str| ann.get(key).map(String::as_str);
    let mut node_policy = defaults.node_policy;
    let mut gpu_policy = defaults.gpu_policy.clone();
    let mut weights = ScoringWeights::default();
    let mut numa_bind = false;
    if requests_gpu {
        if let Some(v) = get(&keys.node_scheduler_policy) {
            match v.parse::<NodePolicy>() {
                Ok(p) => node_policy = p,
                Err(e) => violations.push(Violation::new(
                    ViolationKind::InvalidNodePolicy,
                    annotation_field(&keys.node_scheduler_policy),
                    format!("invalid {} {v:?}: {e}", keys.node_scheduler_policy),
                )),
            }
        }
        if let Some(v) = get(&keys.gpu_scheduler_policy) {
            match v.parse::<GpuPolicy>() {
                Ok(p) => gpu_policy = p,
                Err(e) => violations.push(Violation::new(
                    ViolationKind::InvalidGpuPolicy,
                    annotation_field(&keys.gpu_scheduler_policy),
                    format!("invalid {} {v:?}: {e}", keys.gpu_scheduler_policy),
                )),
            }
        }
        if let Some(v) = get(&keys.device_scoring_weights) {
            match v.parse::<ScoringWeights>() {
                Ok(w) => weights = w,
                Err(e) => violations.push(Violation::new(
                    ViolationKind::InvalidScoringWeights,
                    annotation_field(&keys.device_scoring_weights),
                    format!("invalid {} {v:?}: {e}", keys.device_scoring_weights),
                )),
            }
        }
        if let Some(v) = get(&keys.numa_bind) {
            match parse_bool(v) {
                Ok(b) => numa_bind = b,
                Err(e) => violations.push(Violation::new(
                    ViolationKind::InvalidNumaBind,
                    annotation_field(&keys.numa_bind),
                    format!("invalid {}: {e}", keys.numa_bind),
                )),
            }
        }
    }
    // Host requests are read for the fragmentation measure only (section 12.2).
    let host = if requests_gpu && node_policy == NodePolicy::Fgd {
        host_request(k, &mut violations)
    } else {
        HostRequest::default()
    };
    let list = |key: &str| get(key).map(names::split_list).unwrap_or_default();
    let workload = Workload {
        meta,
        node_policy,
        gpu_policy,
        weights,
        numa_bind,
        filters: CardFilters::new(
            list(&keys.use_gpu_type),
            list(&keys.nouse_gpu_type),
            list(&keys.use_gpu_uuid),
            list(&keys.nouse_gpu_uuid),
            get(&keys.vgpu_mode).map(str::to_owned),
        ),
        containers,
        quota: QuotaBudget::UNLIMITED,
        host,
        mix: None,
    };
    // A workload without GPU containers is validated only as far as its GPU counts.
    if violations.is_empty() {
        Ok(workload)
    } else {
        Err(InvalidInput { violations })
    }
}

/// The pod's effective host request as Kubernetes counts it: per resource, the larger of the
/// app containers' sum and the largest init container; a container's `requests`, else its
/// `limits` (section 12.2). CPU in millicores and memory in MiB, both rounded up.
fn host_request(k: &KubeSpec, violations: &mut Vec<Violation>) -> HostRequest {
    let one = |c: &KubeContainer, field: &str, i: usize, violations: &mut Vec<Violation>| {
        let mut out = HostRequest::default();
        for (name, mul, div) in [("cpu", 1000u128, 1u128), ("memory", 1, 1 << 20)] {
            let (place, v) = match c.requests.get(name) {
                Some(v) => ("requests", v),
                None => match c.limits.get(name) {
                    Some(v) => ("limits", v),
                    None => continue,
                },
            };
            match quantity::parse_ceil(v, mul, div) {
                Ok(n) if name == "cpu" => out.cpu_milli = n,
                Ok(n) => out.mem_mib = n,
                Err(e) => violations.push(Violation::new(
                    ViolationKind::InvalidResourceRequest,
                    format!("{field}[{i}].{place}[{name:?}]"),
                    format!("{name}: {e}"),
                )),
            }
        }
        out
    };
    let mut app = HostRequest::default();
    for (i, c) in k.containers.iter().enumerate() {
        app = app.plus(one(c, "containers", i, violations));
    }
    let mut init = HostRequest::default();
    for (i, c) in k.init_containers.iter().enumerate() {
        init = init.max(one(c, "init_containers", i, violations));
    }
    app.max(init)
}
