//! The fgd policies in Kubernetes (`docs/placement-semantics.md` section 12): the shim's
//! default policies (`[policy]`) sent with every request, and the target workload mix
//! (`[fgd]`) sent with the requests of pods that run under `fgd` (by their
//! `hami.io/node-scheduler-policy` / `hami.io/gpu-scheduler-policy` annotation, or by the
//! shim's default).
//!
//! The mix is, by `fgd.mix`:
//! - `observed`: derived from the GPU pods the shim sees (the pod informer: pods naming our
//!   scheduler that ask for a GPU resource, pending or bound, not Succeeded/Failed, not being
//!   deleted). The newest `fgd.window` of them (creation time, then namespace and name) are
//!   counted; each app container with a GPU request is one observation of its shape (cards,
//!   cores, memory in MiB or percent as the pod writes them, the `nvidia.com/use-gputype` card
//!   types), weighed by its demand (cards × cores, at least 1 per card; the simulator's
//!   default) or 1 (`fgd.weight = "pods"`, the paper's artifact). The most popular shapes
//!   covering `fgd.coverage` of the weight, at most `fgd.max_shapes`, with their shares as
//!   probabilities (`gpusched_client::mix::MixCounter`). Memory is bounded by the window; the
//!   derivation is a function of the informer's pods (every replica and restart finds the
//!   same), made again at most every `fgd.refresh`. With no GPU pod counted, the pod being
//!   placed is the mix.
//! - `config`: `[[fgd.workload_mix]]`, validated at start-up.
//! - `service`: none sent; the service's `policy.workload_mix` applies.
//!
//! Either way, card types that no node of the request has are dropped from the shapes (and a
//! shape left with none), which changes no decision (section 12.1), so the service never
//! refuses the mix for a type the candidates lack.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use gpusched_client::mix::{MixCounter, ShapeKey, for_card_types};
use gpusched_client::v1;
use k8s_openapi::api::core::v1::Pod;

use crate::config::{MixSource, Names, PolicySettings, ResourceNames};
use crate::translate;

/// HAMi's node policy annotation.
pub const NODE_POLICY: &str = "hami.io/node-scheduler-policy";
/// HAMi's GPU policy annotation.
pub const GPU_POLICY: &str = "hami.io/gpu-scheduler-policy";
/// The card types a pod accepts.
pub const USE_GPUTYPE: &str = "nvidia.com/use-gputype";

/// The default policies and the mix, with the observed mix kept between refreshes.
#[derive(Debug)]
pub struct Fgd {
    settings: PolicySettings,
    cache: Mutex<Option<(Instant, Option<Arc<v1::WorkloadMix>>)>>,
}

impl Default for Fgd {
    fn default() -> Self {
        Fgd::new(PolicySettings::default())
    }
}

impl Fgd {
    /// With these settings.
    pub fn new(settings: PolicySettings) -> Self {
        Fgd {
            settings,
            cache: Mutex::new(None),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &PolicySettings {
        &self.settings
    }

    /// Whether the workload runs under `fgd` (node or GPU policy), by its annotations or,
    /// where it has none, by the shim's defaults. (A service whose own default is `fgd` is not
    /// seen here: set `[policy]` to the same.)
    pub fn uses_fgd(&self, w: &v1::Workload) -> bool {
        let ann = annotations(w);
        let node = match ann.and_then(|a| a.get(NODE_POLICY)) {
            Some(v) => v.trim() == "fgd",
            None => self.settings.node == v1::NodePolicy::Fgd,
        };
        let gpu = match ann.and_then(|a| a.get(GPU_POLICY)) {
            Some(v) => v.split(',').any(|t| t.trim() == "fgd"),
            None => self.settings.gpu.contains(&v1::GpuPolicy::Fgd),
        };
        node || gpu
    }

    /// `base` with the shim's default policies and, for a workload under `fgd`, the mix for a
    /// request over `nodes`; `pods` (the informer's) is read only when the observed mix is
    /// derived again. None when that adds up to the service's defaults.
    pub fn options<'a>(
        &self,
        w: &v1::Workload,
        nodes: impl IntoIterator<Item = &'a v1::Node>,
        pods: impl FnOnce() -> Vec<Arc<Pod>>,
        names: &Names,
        base: Option<v1::PlacementOptions>,
    ) -> Option<v1::PlacementOptions> {
        let mut o = base.unwrap_or_default();
        if o.default_node_policy == v1::NodePolicy::Unspecified as i32 {
            o.default_node_policy = self.settings.node as i32;
        }
        if o.default_gpu_policy.is_empty() {
            o.default_gpu_policy = self.settings.gpu.iter().map(|g| *g as i32).collect();
        }
        if o.workload_mix.is_none() && self.uses_fgd(w) {
            let mix = match &self.settings.mix {
                MixSource::Service => None,
                MixSource::Config(m) => Some(Arc::new(m.clone())),
                MixSource::Observed { .. } => self
                    .observed(pods, names, Instant::now())
                    .or_else(|| own_mix(w, &names.resources).map(Arc::new)),
            };
            let types: Vec<&str> = nodes
                .into_iter()
                .flat_map(|n| n.cards.iter().map(|c| c.r#type.as_str()))
                .collect();
            o.workload_mix = mix.and_then(|m| for_card_types(&m, &types));
        }
        (o != v1::PlacementOptions::default()).then_some(o)
    }

    /// The observed mix, derived again when older than `fgd.refresh` (None: not observed, or
    /// no GPU pod counted).
    fn observed(
        &self,
        pods: impl FnOnce() -> Vec<Arc<Pod>>,
        names: &Names,
        now: Instant,
    ) -> Option<Arc<v1::WorkloadMix>> {
        let MixSource::Observed {
            window,
            max_shapes,
            coverage,
            by_demand,
            refresh,
        } = self.settings.mix
        else {
            return None;
        };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, mix)) = &*cache
            && now.saturating_duration_since(*at) < refresh
        {
            return mix.clone();
        }
        let counter = observed_counter(&pods(), names, window, by_demand);
        let mix = counter.mix(coverage, max_shapes).map(Arc::new);
        tracing::debug!(
            distinct = counter.len(),
            shapes = mix.as_ref().map_or(0, |m| m.shapes.len()),
            "fgd workload mix derived from the GPU pods seen"
        );
        *cache = Some((now, mix.clone()));
        mix
    }
}

/// The counts of the newest `window` GPU pods' shapes (see the module's documentation).
pub fn observed_counter(
    pods: &[Arc<Pod>],
    names: &Names,
    window: usize,
    by_demand: bool,
) -> MixCounter {
    let mut gpu: Vec<&Pod> = pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .filter(|p| translate::requests_gpu(p, names))
        .collect();
    gpu.sort_by(|a, b| {
        let key = |p: &Pod| {
            (
                p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                p.metadata.namespace.clone(),
                p.metadata.name.clone(),
            )
        };
        let (ka, kb) = (key(a), key(b));
        kb.0.cmp(&ka.0).then(ka.1.cmp(&kb.1)).then(ka.2.cmp(&kb.2))
    });
    gpu.truncate(window);
    let mut c = MixCounter::new();
    for p in gpu {
        for s in pod_shapes(p, &names.resources) {
            let w = weight(&s, by_demand);
            c.add(s, w);
        }
    }
    c
}

fn weight(s: &ShapeKey, by_demand: bool) -> u64 {
    if by_demand {
        u64::from(s.gpu_count) * u64::from(s.gpucores_percent.max(1))
    } else {
        1
    }
}

/// The workload's own shapes as a mix (each container counted once).
fn own_mix(w: &v1::Workload, names: &ResourceNames) -> Option<v1::WorkloadMix> {
    let Some(v1::workload::Spec::Kubernetes(k)) = &w.spec else {
        return None;
    };
    let types = gpu_types(k.annotations.get(USE_GPUTYPE).map(String::as_str));
    let mut c = MixCounter::new();
    for ct in &k.containers {
        let get = |n: &str| {
            ct.limits
                .get(n)
                .or_else(|| ct.requests.get(n))
                .map(String::as_str)
        };
        if let Some(s) = shape(get, names, &types) {
            c.add(s, 1);
        }
    }
    c.mix(1.0, MAX_OWN_SHAPES)
}

/// The most memory per card a mix shape may ask (16 TiB, section 12.1).
const MAX_SHAPE_MIB: u64 = 16 << 20;

/// A workload has few containers; its own mix keeps at most this many shapes.
const MAX_OWN_SHAPES: usize = 16;

/// The shapes of a pod's app containers that ask for a GPU (init containers are transient
/// and left out); a container whose values are not plain whole numbers is not counted.
pub fn pod_shapes(pod: &Pod, names: &ResourceNames) -> Vec<ShapeKey> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let types = gpu_types(
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(USE_GPUTYPE))
            .map(String::as_str),
    );
    spec.containers
        .iter()
        .filter_map(|c| {
            let r = c.resources.as_ref();
            let get = |n: &str| {
                r.and_then(|r| r.limits.as_ref())
                    .and_then(|m| m.get(n))
                    .or_else(|| r.and_then(|r| r.requests.as_ref()).and_then(|m| m.get(n)))
                    .map(|q| q.0.as_str())
            };
            shape(get, names, &types)
        })
        .collect()
}

fn gpu_types(v: Option<&str>) -> Vec<String> {
    v.map(|v| {
        v.split(',')
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

/// One container's shape from its GPU values (`get` reads a resource's limit, else its
/// request): a card count (1 when only memory or cores are asked, as the mutating webhook
/// and HAMi do), cores, memory in MiB or percent. None: no GPU asked, or a value that is not
/// a whole number in range.
fn shape<'a>(
    get: impl Fn(&str) -> Option<&'a str>,
    names: &ResourceNames,
    types: &[String],
) -> Option<ShapeKey> {
    let num = |n: &str| -> Result<Option<u64>, ()> {
        match get(n) {
            None => Ok(None),
            Some(v) => v.trim().parse::<u64>().map(Some).map_err(|_| ()),
        }
    };
    let count = num(&names.count).ok()?;
    let cores = num(&names.cores).ok()?;
    let mem = num(&names.memory).ok()?;
    let pct = num(&names.memory_percentage).ok()?;
    let count = match count {
        Some(c) => c,
        None if cores.is_some() || mem.is_some() || pct.is_some() => 1,
        None => return None,
    };
    let cores = cores.unwrap_or(0);
    let pct = pct.unwrap_or(0);
    // Out of the mix's ranges (section 12.1): such a pod would make the service refuse the
    // mix for every fgd pod; it is not counted (the service refuses the pod itself).
    if count == 0 || count > u64::from(u32::MAX) || cores > 100 || pct > 100 {
        return None;
    }
    if mem.is_some_and(|m| m > MAX_SHAPE_MIB) {
        return None;
    }
    Some(ShapeKey {
        gpu_count: u32::try_from(count).ok()?,
        gpucores_percent: u32::try_from(cores).ok()?,
        gpumem_mib: mem.unwrap_or(0),
        gpumem_percent: u32::try_from(pct).ok()?,
        gpu_types: types.to_vec(),
        cpu_milli: 0,
        host_mem_mib: 0,
    })
}

fn annotations(w: &v1::Workload) -> Option<&BTreeMap<String, String>> {
    match &w.spec {
        Some(v1::workload::Spec::Kubernetes(k)) => Some(&k.annotations),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
