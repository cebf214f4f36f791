//! A MIG card's layout (a leaf: the model holds it, the MIG rule in `mig/` reads it): its profiles, their placements and the instances on the card, the
//! layout's validation (`docs/placement-semantics.md` section 11.1) and the usage its instances in
//! use take (11.5).

use std::collections::HashMap;

use crate::error::{Violation, ViolationKind};

/// Largest accepted [`MigLayout::compute_slices`] and [`MigLayout::memory_slices`] (real cards
/// have 7 and 8).
pub const MAX_MIG_SLICES: u32 = 16;
/// Largest number of profiles on one card.
pub const MAX_MIG_PROFILES: usize = 32;
/// Largest number of instances on one card.
pub const MAX_MIG_INSTANCES: usize = 64;

/// Where an instance sits: memory slices `start..start + size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MigPlacement {
    /// First memory slice.
    pub start: u32,
    /// Memory slices occupied.
    pub size: u32,
}

impl MigPlacement {
    /// The placement `start..start + size`.
    pub fn new(start: u32, size: u32) -> Self {
        MigPlacement { start, size }
    }

    /// One past the last slice (saturating).
    pub fn end(self) -> u32 {
        self.start.saturating_add(self.size)
    }

    /// Whether the two placements share a memory slice.
    pub fn overlaps(self, other: MigPlacement) -> bool {
        self.start < other.end() && other.start < self.end()
    }
}

/// One MIG profile a card offers (as NVML reports it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigProfile {
    /// NVML's name without its `MIG ` prefix, e.g. `1g.10gb`.
    pub name: String,
    /// Memory of an instance, MiB (NVML `memorySizeMB`).
    pub mem_mib: u64,
    /// Compute slices (NVML `sliceCount`).
    pub compute_slices: u32,
    /// Memory slices (the size of each placement).
    pub memory_slices: u32,
    /// Percent of the card's SMs (HAMi's `core`): what the assignment reports as cores.
    pub cores: u32,
    /// Instances of this profile the card can hold at once (NVML `instanceCount`).
    pub max_instances: u32,
    /// Starts NVML allows, each of size [`MigProfile::memory_slices`].
    pub placements: Vec<u32>,
    /// In the node's profile allowlist.
    pub allowed: bool,
}

impl MigProfile {
    /// An allowed profile.
    pub fn new(
        name: impl Into<String>,
        mem_mib: u64,
        compute_slices: u32,
        memory_slices: u32,
        cores: u32,
        max_instances: u32,
        placements: Vec<u32>,
    ) -> Self {
        MigProfile {
            name: name.into(),
            mem_mib,
            compute_slices,
            memory_slices,
            cores,
            max_instances,
            placements,
            allowed: true,
        }
    }

    /// The placement at `start`.
    pub fn placement(&self, start: u32) -> MigPlacement {
        MigPlacement::new(start, self.memory_slices)
    }
}

/// An instance on the card: free, or held by someone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigInstance {
    /// The name of its profile.
    pub profile: String,
    /// Where it sits.
    pub placement: MigPlacement,
    /// Who holds it (a workload, `namespace/name`); `None` = free.
    pub in_use_by: Option<String>,
}

impl MigInstance {
    /// A free instance.
    pub fn free(profile: impl Into<String>, placement: MigPlacement) -> Self {
        MigInstance {
            profile: profile.into(),
            placement,
            in_use_by: None,
        }
    }

    /// An instance held by `owner`.
    pub fn in_use(
        profile: impl Into<String>,
        placement: MigPlacement,
        owner: impl Into<String>,
    ) -> Self {
        MigInstance {
            profile: profile.into(),
            placement,
            in_use_by: Some(owner.into()),
        }
    }

    /// Whether someone holds it.
    pub fn is_in_use(&self) -> bool {
        self.in_use_by.is_some()
    }
}

/// The MIG side of a card in mode `mig`: slices, profiles and instances.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MigLayout {
    /// Compute slices of the whole card (7 on A100, H100, H200, B200).
    pub compute_slices: u32,
    /// Memory slices of the whole card (8): instances sit on `0..memory_slices`.
    pub memory_slices: u32,
    /// The profiles, in any order.
    pub profiles: Vec<MigProfile>,
    /// The instances on the card, in any order (kept sorted by start once validated).
    pub instances: Vec<MigInstance>,
}

impl MigLayout {
    /// A layout without instances.
    pub fn new(compute_slices: u32, memory_slices: u32, profiles: Vec<MigProfile>) -> Self {
        MigLayout {
            compute_slices,
            memory_slices,
            profiles,
            instances: Vec::new(),
        }
    }

    /// The same layout with these instances.
    pub fn with_instances(mut self, instances: Vec<MigInstance>) -> Self {
        self.instances = instances;
        self
    }

    /// The position of the profile named `name`.
    pub fn profile_index(&self, name: &str) -> Option<usize> {
        self.profiles.iter().position(|p| p.name == name)
    }

    /// The profile named `name`.
    pub fn profile(&self, name: &str) -> Option<&MigProfile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    /// The instance at `start`.
    pub fn instance_at(&self, start: u32) -> Option<&MigInstance> {
        self.instances.iter().find(|i| i.placement.start == start)
    }

    /// What one instance of `profile` books on a card of `total_mem_mib` and `total_cores`
    /// (11.5): the share of the card's memory and cores its slices are, as `(MiB, cores)`.
    pub fn share(&self, profile: &MigProfile, total_mem_mib: u64, total_cores: u32) -> (u64, u32) {
        (
            share_u64(total_mem_mib, profile.memory_slices, self.memory_slices),
            share_u32(total_cores, profile.compute_slices, self.compute_slices),
        )
    }

    /// The instances in use and their shares summed: `(slots, MiB, cores)` (11.5).
    pub(crate) fn in_use_share(&self, total_mem_mib: u64, total_cores: u32) -> (u32, u64, u32) {
        let (mut slots, mut mem, mut cores) = (0u32, 0u64, 0u32);
        for i in self.instances.iter().filter(|i| i.is_in_use()) {
            if let Some(p) = self.profile(&i.profile) {
                let (m, c) = self.share(p, total_mem_mib, total_cores);
                slots = slots.saturating_add(1);
                mem = mem.saturating_add(m);
                cores = cores.saturating_add(c);
            }
        }
        (slots, mem, cores)
    }

    /// Instances sorted by start (one canonical order: bookings commute).
    pub(crate) fn sort_instances(&mut self) {
        self.instances.sort_by_key(|i| i.placement.start);
    }

    /// Estimated heap bytes.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.profiles.capacity() * size_of::<MigProfile>()
            + self
                .profiles
                .iter()
                .map(|p| p.name.capacity() + p.placements.capacity() * size_of::<u32>())
                .sum::<usize>()
            + self.instances.capacity() * size_of::<MigInstance>()
            + self
                .instances
                .iter()
                .map(|i| i.profile.capacity() + i.in_use_by.as_ref().map_or(0, String::capacity))
                .sum::<usize>()
    }
}

/// `floor(total × part / whole)` (0 for an empty whole).
fn share_u64(total: u64, part: u32, whole: u32) -> u64 {
    if whole == 0 {
        return 0;
    }
    let v = u128::from(total) * u128::from(part) / u128::from(whole);
    u64::try_from(v).unwrap_or(u64::MAX)
}

fn share_u32(total: u32, part: u32, whole: u32) -> u32 {
    u32::try_from(share_u64(u64::from(total), part, whole)).unwrap_or(u32::MAX)
}

/// The violations of a card's layout, fields under `field` (`nodes[i].cards[j].mig`), for a
/// card of `total_mem_mib` (the card-level checks, mode and usage, are the node's). Bounded:
/// the counts are checked before anything is compared pairwise.
pub(crate) fn check_layout(
    l: &MigLayout,
    total_mem_mib: u64,
    field: &str,
    violations: &mut Vec<Violation>,
) {
    let mut bad = |kind: ViolationKind, at: String, description: String| {
        let at = if at.is_empty() {
            field.to_owned()
        } else {
            format!("{field}.{at}")
        };
        violations.push(Violation::new(kind, at, description));
    };
    for (name, v) in [
        ("compute_slices", l.compute_slices),
        ("memory_slices", l.memory_slices),
    ] {
        if v == 0 || v > MAX_MIG_SLICES {
            bad(
                ViolationKind::OutOfRange,
                name.to_owned(),
                format!("{v} is out of range 1..={MAX_MIG_SLICES}"),
            );
        }
    }
    if l.profiles.len() > MAX_MIG_PROFILES || l.instances.len() > MAX_MIG_INSTANCES {
        bad(
            ViolationKind::OutOfRange,
            String::new(),
            format!(
                "{} profiles and {} instances: at most {MAX_MIG_PROFILES} and {MAX_MIG_INSTANCES}",
                l.profiles.len(),
                l.instances.len()
            ),
        );
        return;
    }
    let mut names: HashMap<&str, usize> = HashMap::with_capacity(l.profiles.len());
    for (k, p) in l.profiles.iter().enumerate() {
        let at = format!("profiles[{k}]");
        if p.name.trim().is_empty() {
            bad(
                ViolationKind::MissingField,
                format!("{at}.name"),
                "profile name must not be blank".into(),
            );
        } else if let Some(first) = names.insert(p.name.as_str(), k) {
            names.insert(p.name.as_str(), first);
            bad(
                ViolationKind::DuplicateId,
                format!("{at}.name"),
                format!("duplicate profile {:?} (also profiles[{first}])", p.name),
            );
        }
        if p.mem_mib == 0 || p.mem_mib > total_mem_mib {
            bad(
                ViolationKind::OutOfRange,
                format!("{at}.mem_mib"),
                format!(
                    "profile {:?} has {} MiB; the card has {} MiB (1..={} accepted)",
                    p.name, p.mem_mib, total_mem_mib, total_mem_mib
                ),
            );
        }
        for (name, v, max) in [
            ("compute_slices", p.compute_slices, l.compute_slices),
            ("memory_slices", p.memory_slices, l.memory_slices),
        ] {
            if v == 0 || v > max {
                bad(
                    ViolationKind::OutOfRange,
                    format!("{at}.{name}"),
                    format!(
                        "profile {:?} has {v} {}; the card has {max}",
                        p.name,
                        name.replace('_', " ")
                    ),
                );
            }
        }
        if p.cores > 100 {
            bad(
                ViolationKind::OutOfRange,
                format!("{at}.cores"),
                format!("{} is out of range 0..=100", p.cores),
            );
        }
        if p.max_instances == 0 {
            bad(
                ViolationKind::OutOfRange,
                format!("{at}.max_instances"),
                "a profile holds at least one instance".into(),
            );
        }
        if p.placements.len() > MAX_MIG_SLICES as usize {
            bad(
                ViolationKind::OutOfRange,
                format!("{at}.placements"),
                format!(
                    "{} placements: at most {MAX_MIG_SLICES}",
                    p.placements.len()
                ),
            );
            continue;
        }
        for (m, &start) in p.placements.iter().enumerate() {
            let place = p.placement(start);
            if place.end() > l.memory_slices || start >= l.memory_slices {
                bad(
                    ViolationKind::OutOfRange,
                    format!("{at}.placements[{m}]"),
                    format!(
                        "placement {}..{} lies outside the card's {} memory slices",
                        start,
                        place.end(),
                        l.memory_slices
                    ),
                );
            }
            if let Some(first) = p.placements.iter().take(m).position(|&s| s == start) {
                bad(
                    ViolationKind::DuplicateId,
                    format!("{at}.placements[{m}]"),
                    format!("start {start} repeated (also placements[{first}])"),
                );
            }
        }
    }
    for (k, inst) in l.instances.iter().enumerate() {
        let at = format!("instances[{k}]");
        let place = inst.placement;
        match l.profile(&inst.profile) {
            None => bad(
                ViolationKind::UnknownReference,
                format!("{at}.profile"),
                format!("unknown profile {:?}", inst.profile),
            ),
            Some(p) => {
                if place.size != p.memory_slices || !p.placements.contains(&place.start) {
                    bad(
                        ViolationKind::UnknownReference,
                        format!("{at}.placement"),
                        format!(
                            "{}..{} is not a placement of profile {:?}",
                            place.start,
                            place.end(),
                            p.name
                        ),
                    );
                }
            }
        }
        if place.size == 0 || place.end() > l.memory_slices {
            bad(
                ViolationKind::OutOfRange,
                format!("{at}.placement"),
                format!(
                    "placement {}..{} lies outside the card's {} memory slices",
                    place.start,
                    place.end(),
                    l.memory_slices
                ),
            );
        }
        if let Some(first) = l
            .instances
            .iter()
            .take(k)
            .position(|o| o.placement.overlaps(place))
        {
            bad(
                ViolationKind::DuplicateId,
                format!("{at}.placement"),
                format!(
                    "instance {}..{} overlaps instances[{first}]",
                    place.start,
                    place.end()
                ),
            );
        }
    }
}
