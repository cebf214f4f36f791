//! The real [`GpuSource`]: NVML through `nvml-wrapper`.
//!
//! Per card: UUID, index, name, total memory, PCI bus id, minor number, CPU affinity, MIG mode
//! and, with MIG on, its profiles, placements and GPU instances ([`super::nvml_mig`]);
//! NUMA node from sysfs (`bus/pci/devices/<bus>/numa_node`), else from the CPU affinity and the
//! NUMA nodes' CPU lists; links from the topology common ancestor of every pair and the active
//! NVLinks (remote PCI bus id; links to a non-card device such as an NVSwitch join every card
//! that reaches it). Health: XID critical errors (NVML event set, watched on a thread; sticky
//! until the agent restarts), the performance-state probe (a lost GPU), pages pending
//! retirement and the retired-page count.
//!
//! NVML functions that a driver or card does not support (`NotSupported`, a missing symbol)
//! leave that fact unknown. A lost GPU (`GpuLost`, `ResetRequired`) is a clean "unhealthy" for
//! a card read before. Any other error fails the whole read.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use gpusched_api::v1;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::RetirementCause;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{EventSet, Nvml};
use tokio::sync::Notify;

use super::mig::{self, MigState, RawMigProfile};
use super::nvml_mig;
use super::sysfs;
use super::{
    CardFacts, DiscoveryError, GpuSource, LinkFacts, NvLinkEnds, link_kind_of_level, nvlink_lanes,
};

/// NVLinks per card that NVML knows of (`NVML_NVLINK_MAX_LINKS`).
const MAX_NVLINKS: u32 = 18;
/// `unsigned long` words asked for in the CPU affinity mask (4096 CPUs on 64-bit).
const AFFINITY_WORDS: usize = 64;
/// Key in the XID map for an event whose card could not be identified: every card.
const ALL_CARDS: &str = "*";

/// The standard library names tried in order when none is configured.
pub const DEFAULT_LIBRARIES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

/// How the NVML source reads and judges cards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvmlOptions {
    /// Library path; None = [`DEFAULT_LIBRARIES`].
    pub library: Option<PathBuf>,
    /// sysfs root.
    pub sysfs_root: PathBuf,
    /// XIDs that leave a card healthy.
    pub ignored_xids: Vec<u64>,
    /// Retired pages from which a card is unhealthy (0 = off).
    pub retired_pages_limit: u32,
    /// Watch XID events on a thread.
    pub watch_xid_events: bool,
    /// MIG profiles offered (empty = every profile NVML reports).
    pub mig_allowed_profiles: Vec<String>,
}

impl Default for NvmlOptions {
    fn default() -> Self {
        NvmlOptions {
            library: None,
            sysfs_root: PathBuf::from("/sys"),
            ignored_xids: vec![13, 31, 43, 45, 68, 109],
            retired_pages_limit: 60,
            watch_xid_events: true,
            mig_allowed_profiles: Vec::new(),
        }
    }
}

/// What an NVML error means for the fact being read.
enum Fail {
    /// Not supported here: the fact is unknown.
    Unsupported,
    /// The GPU is gone: the card is unhealthy.
    Lost(String),
    /// A real read error.
    Error(String),
}

fn classify(e: &NvmlError) -> Fail {
    match e {
        NvmlError::NotSupported
        | NvmlError::FunctionNotFound
        | NvmlError::FailedToLoadSymbol(_) => Fail::Unsupported,
        NvmlError::GpuLost => Fail::Lost("GPU is lost (fell off the bus)".to_owned()),
        NvmlError::ResetRequired => Fail::Lost("GPU needs a reset".to_owned()),
        other => Fail::Error(other.to_string()),
    }
}

/// A MIG query failed: the layout is unknown (missing or unsupported function, no
/// permission), the card is lost, or the read fails.
fn mig_unknown(
    r: &mut CardReader,
    what: &'static str,
    e: &NvmlError,
) -> Result<MigState, DiscoveryError> {
    match e {
        NvmlError::NoPermission => Ok(MigState::Unknown(format!(
            "{what}: no permission (reading GPU instances needs the privileges of \
             `nvidia-smi mig -lgi`)"
        ))),
        other => match classify(other) {
            Fail::Unsupported => Ok(MigState::Unknown(format!("{what}: {other}"))),
            Fail::Lost(reason) => {
                r.lost = Some(reason.clone());
                Ok(MigState::Unknown(format!("{what}: {reason}")))
            }
            Fail::Error(message) => Err(DiscoveryError::Card {
                index: r.index,
                what,
                message,
            }),
        },
    }
}

/// Reading one card: an unsupported optional fact is None; a lost GPU is remembered in `lost`
/// (later facts are not needed); anything else is an error.
struct CardReader {
    index: u32,
    lost: Option<String>,
}

impl CardReader {
    fn optional<T>(
        &mut self,
        what: &'static str,
        r: Result<T, NvmlError>,
    ) -> Result<Option<T>, DiscoveryError> {
        if self.lost.is_some() {
            return Ok(None);
        }
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) => match classify(&e) {
                Fail::Unsupported => Ok(None),
                Fail::Lost(reason) => {
                    self.lost = Some(reason);
                    Ok(None)
                }
                Fail::Error(message) => Err(DiscoveryError::Card {
                    index: self.index,
                    what,
                    message,
                }),
            },
        }
    }

    /// A required identity fact: unsupported is an error; lost is reported as Ok(None).
    fn required<T>(
        &mut self,
        what: &'static str,
        r: Result<T, NvmlError>,
    ) -> Result<Option<T>, DiscoveryError> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) => match classify(&e) {
                Fail::Lost(reason) => {
                    self.lost = Some(reason);
                    Ok(None)
                }
                Fail::Unsupported | Fail::Error(_) => Err(DiscoveryError::Card {
                    index: self.index,
                    what,
                    message: e.to_string(),
                }),
            },
        }
    }
}

/// One card's read: its facts, or "lost before its identity could be read".
enum CardRead {
    Read(Box<CardFacts>),
    Lost(String),
}

/// The thread watching XID critical errors.
#[derive(Debug)]
struct XidWatcher {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for XidWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Critical XIDs seen, by card UUID ([`ALL_CARDS`] = an event of an unknown card).
type XidMap = Arc<Mutex<BTreeMap<String, u64>>>;

/// NVML-backed [`GpuSource`].
#[derive(Debug)]
pub struct NvmlSource {
    // Leaked on purpose: the event set borrows it for the life of the process, and NVML is
    // initialised once per agent.
    nvml: &'static Nvml,
    library: String,
    options: NvmlOptions,
    xids: XidMap,
    notify: Arc<Notify>,
    watcher: Option<XidWatcher>,
    known: BTreeMap<u32, CardFacts>,
}

impl NvmlSource {
    /// Loads and initialises NVML (the configured library, or the standard names in turn) and
    /// starts the XID watcher. The error names every library tried and why it failed.
    pub fn open(options: NvmlOptions) -> Result<Self, DiscoveryError> {
        let candidates: Vec<OsString> = match &options.library {
            Some(p) => vec![p.clone().into_os_string()],
            None => DEFAULT_LIBRARIES.iter().map(OsString::from).collect(),
        };
        let mut errors = Vec::new();
        for lib in candidates {
            match Nvml::builder().lib_path(&lib).init() {
                Ok(nvml) => {
                    let nvml: &'static Nvml = Box::leak(Box::new(nvml));
                    let library = lib.to_string_lossy().to_string();
                    let xids: XidMap = Arc::default();
                    let notify = Arc::new(Notify::new());
                    let watcher = if options.watch_xid_events {
                        spawn_xid_watcher(
                            nvml,
                            options.ignored_xids.clone(),
                            Arc::clone(&xids),
                            Arc::clone(&notify),
                        )
                    } else {
                        None
                    };
                    tracing::info!(
                        library = %library,
                        driver = %nvml.sys_driver_version().unwrap_or_else(|_| "unknown".into()),
                        xid_events = watcher.is_some(),
                        "NVML initialised"
                    );
                    return Ok(NvmlSource {
                        nvml,
                        library,
                        options,
                        xids,
                        notify,
                        watcher,
                        known: BTreeMap::new(),
                    });
                }
                Err(e) => errors.push(format!("{}: {e}", lib.to_string_lossy())),
            }
        }
        Err(DiscoveryError::Unavailable(errors.join("; ")))
    }

    /// Whether XID critical errors are being watched.
    pub fn watching_xid_events(&self) -> bool {
        self.watcher.is_some()
    }

    fn card(&self, index: u32) -> Result<CardRead, DiscoveryError> {
        let mut r = CardReader { index, lost: None };
        let Some(dev) = r.required("device handle", self.nvml.device_by_index(index))? else {
            return Ok(CardRead::Lost(r.lost.unwrap_or_default()));
        };
        let uuid = r.required("UUID", dev.uuid())?;
        let name = r.required("name", dev.name())?;
        let memory = r.required("memory", dev.memory_info())?;
        let (Some(uuid), Some(model_name), Some(memory)) = (uuid, name, memory) else {
            return Ok(CardRead::Lost(r.lost.unwrap_or_default()));
        };
        let root = &self.options.sysfs_root;
        let bus = r
            .optional("PCI info", dev.pci_info())?
            .and_then(|p| sysfs::normalize_bus_id(&p.bus_id));
        let minor_number = r.optional("minor number", dev.minor_number())?;
        let cpus = r
            .optional("CPU affinity", dev.cpu_affinity(AFFINITY_WORDS))?
            .map(|words| sysfs::cpus_of_mask(&words))
            .filter(|c| !c.is_empty())
            .or_else(|| bus.as_deref().and_then(|b| sysfs::pci_local_cpus(root, b)));
        let mig_enabled = r
            .optional("MIG mode", dev.mig_mode())?
            .is_some_and(|m| m.current == 1);
        let mig = if mig_enabled {
            self.mig(&mut r, &dev)?
        } else {
            MigState::Disabled
        };
        let numa = bus
            .as_deref()
            .and_then(|b| sysfs::pci_numa_node(root, b))
            .or_else(|| cpus.as_deref().and_then(|c| sysfs::numa_of_cpus(root, c)));
        let cores = cpus
            .as_deref()
            .and_then(|c| sysfs::slurm_core_indices(root, c));
        let mut facts = CardFacts {
            uuid,
            index,
            model_name,
            total_memory_bytes: memory.total,
            numa,
            mig_enabled,
            mig,
            unhealthy_reasons: Vec::new(),
            links: Vec::new(),
            pci_bus_id: bus,
            minor_number,
            cpus,
            cores,
        };
        // Health probes.
        r.optional("performance state", dev.performance_state())?;
        if r.optional("pending page retirement", dev.are_pages_pending_retired())? == Some(true) {
            facts.mark_unhealthy("pages pending retirement (reboot or GPU reset needed)");
        }
        if self.options.retired_pages_limit > 0 {
            let mut retired = 0usize;
            for cause in [
                RetirementCause::MultipleSingleBitEccErrors,
                RetirementCause::DoubleBitEccError,
            ] {
                retired += r
                    .optional("retired pages", dev.retired_pages(cause))?
                    .map_or(0, |p| p.len());
            }
            if retired >= self.options.retired_pages_limit as usize {
                facts.mark_unhealthy(format!(
                    "{retired} retired pages (limit {})",
                    self.options.retired_pages_limit
                ));
            }
        }
        if let Some(reason) = r.lost {
            facts.mark_unhealthy(reason);
        }
        Ok(CardRead::Read(Box::new(facts)))
    }

    /// The MIG layout of a card in MIG mode: every profile NVML reports (indices
    /// `0..NVML_GPU_INSTANCE_PROFILE_COUNT`; `NOT_SUPPORTED` or `INVALID_ARGUMENT` = not a
    /// profile of this card), its placements and its GPU instances. A query the driver does not
    /// have or support, or that needs privileges the agent lacks, leaves the layout unknown
    /// (the card takes no MIG work); a lost GPU is remembered; any other error fails the read.
    fn mig(
        &self,
        r: &mut CardReader,
        dev: &nvml_wrapper::Device<'_>,
    ) -> Result<MigState, DiscoveryError> {
        let mut raw = Vec::new();
        for index in 0..nvml_mig::PROFILE_COUNT {
            let info = match nvml_mig::profile(self.nvml, dev, index) {
                Ok(info) => info,
                Err(NvmlError::NotSupported | NvmlError::InvalidArg) => continue,
                Err(e) => return mig_unknown(r, "MIG profile", &e),
            };
            let placements = match nvml_mig::placements(self.nvml, dev, info.id) {
                Ok(p) => p,
                Err(e) => return mig_unknown(r, "MIG placements", &e),
            };
            let instances = match nvml_mig::instances(self.nvml, dev, info.id, info.instance_count)
            {
                Ok(i) => i,
                Err(e) => return mig_unknown(r, "MIG GPU instances", &e),
            };
            raw.push(RawMigProfile {
                info,
                placements,
                instances,
            });
        }
        Ok(
            match mig::assemble(raw, &self.options.mig_allowed_profiles) {
                Ok(facts) => MigState::Read(facts),
                Err(why) => MigState::Unknown(why),
            },
        )
    }

    /// Topology and NVLink links between the cards not lost.
    fn links(&self, cards: &mut [CardFacts], lost: &BTreeSet<u32>) -> Result<(), DiscoveryError> {
        let live: Vec<(u32, String)> = cards
            .iter()
            .filter(|c| !lost.contains(&c.index))
            .map(|c| (c.index, c.uuid.clone()))
            .collect();
        let mut kinds: BTreeMap<(u32, u32), v1::LinkKind> = BTreeMap::new();
        let mut newly_lost: BTreeMap<u32, String> = BTreeMap::new();
        let mut topology_supported = true;
        'pairs: for (a, _) in &live {
            for (b, _) in &live {
                if a == b || newly_lost.contains_key(a) || newly_lost.contains_key(b) {
                    continue;
                }
                let pair = self
                    .nvml
                    .device_by_index(*a)
                    .and_then(|da| Ok((da, self.nvml.device_by_index(*b)?)))
                    .and_then(|(da, db)| da.topology_common_ancestor(db));
                match pair {
                    Ok(level) => {
                        kinds.insert((*a, *b), link_kind_of_level(level));
                    }
                    Err(e) => match classify(&e) {
                        Fail::Unsupported => {
                            topology_supported = false;
                            break 'pairs;
                        }
                        Fail::Lost(reason) => {
                            // Either card of the pair may be the lost one: ask each.
                            let lost: Vec<(u32, String)> = [*a, *b]
                                .into_iter()
                                .filter_map(|i| self.probe_lost(i).map(|r| (i, r)))
                                .collect();
                            if lost.is_empty() {
                                return Err(DiscoveryError::Card {
                                    index: *a,
                                    what: "topology",
                                    message: reason,
                                });
                            }
                            newly_lost.extend(lost);
                        }
                        Fail::Error(message) => {
                            return Err(DiscoveryError::Card {
                                index: *a,
                                what: "topology",
                                message,
                            });
                        }
                    },
                }
            }
        }
        if !topology_supported {
            kinds.clear();
            tracing::debug!("NVML topology not supported: no PCIe links");
        }
        let mut ends = Vec::new();
        for c in cards.iter() {
            if lost.contains(&c.index) || newly_lost.contains_key(&c.index) {
                continue;
            }
            let mut remotes = Vec::new();
            let dev = match self.nvml.device_by_index(c.index) {
                Ok(d) => d,
                Err(e) => match classify(&e) {
                    Fail::Lost(reason) => {
                        newly_lost.insert(c.index, reason);
                        continue;
                    }
                    Fail::Unsupported | Fail::Error(_) => {
                        return Err(DiscoveryError::Card {
                            index: c.index,
                            what: "device handle",
                            message: e.to_string(),
                        });
                    }
                },
            };
            for link in 0..MAX_NVLINKS {
                let nv = dev.link_wrapper_for(link);
                let remote = nv.is_active().and_then(|active| {
                    if active {
                        nv.remote_pci_info().map(Some)
                    } else {
                        Ok(None)
                    }
                });
                match remote {
                    Ok(Some(pci)) => {
                        if let Some(b) = sysfs::normalize_bus_id(&pci.bus_id) {
                            remotes.push(b);
                        }
                    }
                    Ok(None) | Err(NvmlError::InvalidArg) => {}
                    Err(e) => match classify(&e) {
                        Fail::Unsupported => break,
                        Fail::Lost(reason) => {
                            newly_lost.insert(c.index, reason);
                            break;
                        }
                        Fail::Error(message) => {
                            return Err(DiscoveryError::Card {
                                index: c.index,
                                what: "NVLink",
                                message,
                            });
                        }
                    },
                }
            }
            ends.push(NvLinkEnds {
                uuid: c.uuid.clone(),
                bus_id: c.pci_bus_id.clone(),
                remotes,
            });
        }
        let lanes = nvlink_lanes(&ends);
        let uuid_of: BTreeMap<u32, String> = live.iter().cloned().collect();
        for c in cards.iter_mut() {
            if lost.contains(&c.index) {
                continue; // keeps the links it had when last read
            }
            if let Some(reason) = newly_lost.get(&c.index) {
                c.mark_unhealthy(reason.clone());
            }
            let mut links = Vec::new();
            for (peer, peer_uuid) in &uuid_of {
                if *peer == c.index {
                    continue;
                }
                if let Some(n) = lanes.get(&(c.uuid.clone(), peer_uuid.clone())) {
                    links.push(LinkFacts {
                        peer_uuid: peer_uuid.clone(),
                        kind: v1::LinkKind::Nvlink,
                        lanes: *n,
                    });
                }
                if let Some(kind) = kinds.get(&(c.index, *peer)) {
                    links.push(LinkFacts {
                        peer_uuid: peer_uuid.clone(),
                        kind: *kind,
                        lanes: 0,
                    });
                }
            }
            c.links = links;
        }
        Ok(())
    }

    /// Some(reason) when card `index` answers as lost now.
    fn probe_lost(&self, index: u32) -> Option<String> {
        match self
            .nvml
            .device_by_index(index)
            .and_then(|d| d.uuid())
            .map_err(|e| classify(&e))
        {
            Err(Fail::Lost(reason)) => Some(reason),
            _ => None,
        }
    }

    fn apply_xids(&self, cards: &mut [CardFacts]) {
        let xids = self.xids.lock().unwrap_or_else(PoisonError::into_inner);
        let all = xids.get(ALL_CARDS).copied();
        for c in cards.iter_mut() {
            if let Some(code) = xids.get(&c.uuid).copied().or(all) {
                c.mark_unhealthy(format!("critical XID {code}"));
            }
        }
    }
}

impl GpuSource for NvmlSource {
    fn read(&mut self) -> Result<Vec<CardFacts>, DiscoveryError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| DiscoveryError::Machine {
                what: "device count",
                message: e.to_string(),
            })?;
        let mut cards = Vec::new();
        let mut lost = BTreeSet::new();
        for index in 0..count {
            match self.card(index)? {
                CardRead::Read(f) => cards.push(*f),
                CardRead::Lost(reason) => match self.known.get(&index) {
                    Some(prev) => {
                        let mut f = prev.clone();
                        f.unhealthy_reasons.clear();
                        f.mark_unhealthy(reason);
                        cards.push(f);
                        lost.insert(index);
                    }
                    None => {
                        return Err(DiscoveryError::Card {
                            index,
                            what: "identity",
                            message: format!("{reason}, and it was never read before"),
                        });
                    }
                },
            }
        }
        self.links(&mut cards, &lost)?;
        self.apply_xids(&mut cards);
        self.known = cards.iter().map(|c| (c.index, c.clone())).collect();
        Ok(cards)
    }

    fn changes(&self) -> Option<Arc<Notify>> {
        Some(Arc::clone(&self.notify))
    }

    fn describe(&self) -> String {
        format!(
            "NVML ({}, XID events {})",
            self.library,
            if self.watcher.is_some() { "on" } else { "off" }
        )
    }
}

/// Registers XID critical errors of every card that supports them on one event set.
fn xid_event_set(nvml: &'static Nvml) -> Option<EventSet<'static>> {
    let count = nvml.device_count().ok()?;
    let mut set = match nvml.create_event_set() {
        Ok(s) => s,
        Err(e) => {
            tracing::info!(error = %e, "NVML event sets unavailable: XID errors are not watched");
            return None;
        }
    };
    let mut registered: Vec<u32> = Vec::new();
    for index in 0..count {
        let Ok(dev) = nvml.device_by_index(index) else {
            continue;
        };
        let supported = dev
            .supported_event_types()
            .is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
        if !supported {
            tracing::info!(index, "card does not report XID events");
            continue;
        }
        match dev.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(s) => {
                set = s;
                registered.push(index);
            }
            Err(e) => {
                tracing::warn!(index, error = %e.error, "cannot watch XID events of this card");
                // A failed registration frees the set: rebuild it with the cards done so far.
                set = nvml.create_event_set().ok()?;
                for done in &registered {
                    set = nvml
                        .device_by_index(*done)
                        .ok()?
                        .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                        .ok()?;
                }
            }
        }
    }
    (!registered.is_empty()).then_some(set)
}

fn spawn_xid_watcher(
    nvml: &'static Nvml,
    ignored: Vec<u64>,
    xids: XidMap,
    notify: Arc<Notify>,
) -> Option<XidWatcher> {
    let set = xid_event_set(nvml)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    let handle = std::thread::Builder::new()
        .name("nvml-xid".into())
        .spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                match set.wait(500) {
                    Ok(ev) => {
                        if !ev.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                            continue;
                        }
                        let code = match ev.event_data {
                            Some(XidError::Value(v)) => v,
                            Some(XidError::Unknown) | None => 999,
                        };
                        let uuid = ev.device.uuid().unwrap_or_else(|_| ALL_CARDS.to_owned());
                        if ignored.contains(&code) {
                            tracing::info!(uuid = %uuid, xid = code, "XID ignored (application error)");
                            continue;
                        }
                        tracing::warn!(uuid = %uuid, xid = code, "critical XID: card marked unhealthy");
                        xids.lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(uuid, code);
                        notify.notify_one();
                    }
                    Err(NvmlError::Timeout) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "waiting for NVML events failed");
                        notify.notify_one();
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            }
        })
        .ok()?;
    Some(XidWatcher {
        stop,
        handle: Some(handle),
    })
}
