//! What the agent knows about a card's MIG side (`docs/placement-semantics.md` section 11.1):
//! a typed model of the profiles, their placements and the GPU instances NVML reports, how it
//! is assembled from the raw NVML answers, and its HAMi node form (`migProfiles`,
//! `docs/hami-protocol.md`). The proto fields for gpusched's own inventory come with the MIG
//! API; until then this model is what the agent renders (JSON `devices`, HAMi annotations).

use std::collections::BTreeMap;

use gpusched_api::v1;
use gpusched_hami::{MigPlacement as HamiPlacement, MigProfile as HamiProfile};

/// A card's MIG state as read.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum MigState {
    /// MIG mode is off, or the card or driver does not support MIG.
    #[default]
    Disabled,
    /// MIG mode is on and the layout was read.
    Read(MigFacts),
    /// MIG mode is on but the layout could not be read (why): the card is published in mode
    /// `mig` without profiles, so it takes no MIG work (never a layout that may be wrong).
    Unknown(String),
}

impl MigState {
    /// The layout, when read.
    pub fn facts(&self) -> Option<&MigFacts> {
        match self {
            MigState::Read(f) => Some(f),
            _ => None,
        }
    }
}

/// One MIG profile of a card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigProfileFacts {
    /// NVML profile index (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub nvml_index: u32,
    /// NVML profile id.
    pub id: u32,
    /// NVML's name without its `MIG ` prefix (`1g.10gb`).
    pub name: String,
    /// Memory of an instance, MiB.
    pub mem_mib: u64,
    /// Compute slices.
    pub compute_slices: u32,
    /// Memory slices (the size of its placements).
    pub memory_slices: u32,
    /// SMs of an instance.
    pub multiprocessors: u32,
    /// HAMi's `core`: `ceil(SMs × 100 / SMs of the largest profile)`.
    pub cores: u32,
    /// Instances the card can hold at once.
    pub max_instances: u32,
    /// Starts NVML allows.
    pub placements: Vec<u32>,
    /// In the agent's profile allowlist (`mig.allowed_profiles`).
    pub allowed: bool,
}

/// One GPU instance on the card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigInstanceFacts {
    /// GPU instance id.
    pub id: u32,
    /// Its profile's name.
    pub profile: String,
    /// First memory slice.
    pub start: u32,
    /// Memory slices.
    pub size: u32,
}

/// A card's MIG layout as read.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MigFacts {
    /// Compute slices of the whole card (the largest profile's).
    pub compute_slices: u32,
    /// Memory slices of the whole card (the end of the highest placement).
    pub memory_slices: u32,
    /// Profiles, by NVML profile index.
    pub profiles: Vec<MigProfileFacts>,
    /// GPU instances, by start.
    pub instances: Vec<MigInstanceFacts>,
}

/// What NVML answered for one profile: its info, placements and instances.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawMigProfile {
    /// The profile info.
    pub info: super::nvml_mig::RawProfile,
    /// Its possible placements `(start, size)`.
    pub placements: Vec<(u32, u32)>,
    /// Its instances.
    pub instances: Vec<super::nvml_mig::RawInstance>,
}

/// Whether `name` is in the allowlist (empty = every profile).
fn allowed(allowlist: &[String], name: &str) -> bool {
    allowlist.is_empty() || allowlist.iter().any(|a| a == name)
}

/// Assembles the layout from NVML's answers, or says why it cannot be used.
pub fn assemble(raw: Vec<RawMigProfile>, allowlist: &[String]) -> Result<MigFacts, String> {
    if raw.is_empty() {
        return Err("MIG mode is on but NVML reports no GPU instance profile".into());
    }
    let full_sms = raw
        .iter()
        .map(|r| r.info.multiprocessor_count)
        .max()
        .unwrap_or(0);
    let mut profiles = Vec::with_capacity(raw.len());
    let mut instances = Vec::new();
    let mut names: BTreeMap<String, u32> = BTreeMap::new();
    for r in raw {
        let name = r
            .info
            .name
            .strip_prefix("MIG ")
            .unwrap_or(&r.info.name)
            .trim()
            .to_owned();
        if name.is_empty() {
            return Err(format!("profile id {} has no name", r.info.id));
        }
        if let Some(other) = names.insert(name.clone(), r.info.id) {
            return Err(format!(
                "profiles {other} and {} are both named {name:?}",
                r.info.id
            ));
        }
        let size = r.placements.first().map_or(0, |p| p.1);
        if r.placements.iter().any(|p| p.1 != size) {
            return Err(format!(
                "profile {name:?} has placements of different sizes"
            ));
        }
        let cores = if full_sms == 0 {
            0
        } else {
            (u64::from(r.info.multiprocessor_count) * 100).div_ceil(u64::from(full_sms))
        };
        let mut placements: Vec<u32> = r.placements.iter().map(|p| p.0).collect();
        placements.sort_unstable();
        for i in &r.instances {
            instances.push(MigInstanceFacts {
                id: i.id,
                profile: name.clone(),
                start: i.start,
                size: i.size,
            });
        }
        profiles.push(MigProfileFacts {
            nvml_index: r.info.index,
            id: r.info.id,
            allowed: allowed(allowlist, &name),
            name,
            mem_mib: r.info.memory_size_mb,
            compute_slices: r.info.slice_count,
            memory_slices: size,
            multiprocessors: r.info.multiprocessor_count,
            cores: u32::try_from(cores).unwrap_or(100),
            max_instances: r.info.instance_count,
            placements,
        });
    }
    profiles.sort_by_key(|p| p.nvml_index);
    instances.sort_by_key(|i| (i.start, i.id));
    let compute_slices = profiles.iter().map(|p| p.compute_slices).max().unwrap_or(0);
    let memory_slices = profiles
        .iter()
        .flat_map(|p| p.placements.iter().map(move |s| s + p.memory_slices))
        .max()
        .unwrap_or(0);
    Ok(MigFacts {
        compute_slices,
        memory_slices,
        profiles,
        instances,
    })
}

impl MigFacts {
    /// The allowed profiles in HAMi's node form.
    pub fn hami_profiles(&self) -> Vec<HamiProfile> {
        self.profiles
            .iter()
            .filter(|p| p.allowed)
            .map(|p| HamiProfile {
                name: p.name.clone(),
                memory_mb: i32::try_from(p.mem_mib).unwrap_or(i32::MAX),
                core: i32::try_from(p.cores).unwrap_or(i32::MAX),
                slice_count: p.compute_slices,
                placements: p
                    .placements
                    .iter()
                    .map(|&start| HamiPlacement {
                        start,
                        size: p.memory_slices,
                    })
                    .collect(),
            })
            .collect()
    }

    /// The whole layout as the v1 API carries it (`Card.mig`): every profile (those outside the
    /// allowlist `not_allowed`, so that their instances can be described) and every instance,
    /// free (NVML cannot tell who holds one). What `gpusched.io/node-mig-layouts` publishes.
    pub fn layout(&self) -> v1::MigLayout {
        v1::MigLayout {
            compute_slices: self.compute_slices,
            memory_slices: self.memory_slices,
            profiles: self
                .profiles
                .iter()
                .map(|p| v1::MigProfile {
                    name: p.name.clone(),
                    mem_mib: p.mem_mib,
                    compute_slices: p.compute_slices,
                    memory_slices: p.memory_slices,
                    cores: p.cores,
                    max_instances: p.max_instances,
                    placements: p.placements.clone(),
                    not_allowed: !p.allowed,
                })
                .collect(),
            instances: self
                .instances
                .iter()
                .map(|i| v1::MigInstance {
                    profile: i.profile.clone(),
                    start: i.start,
                    size: i.size,
                    in_use_by: String::new(),
                })
                .collect(),
        }
    }

    /// HAMi's `count` of a MIG card: the largest instance count of the allowed profiles.
    pub fn hami_count(&self) -> u32 {
        self.profiles
            .iter()
            .filter(|p| p.allowed)
            .map(|p| p.max_instances)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::nvml_mig::{RawInstance, RawProfile};
    use super::*;

    /// A raw profile: `(index, id, name, compute slices, SMs, MiB)`, placements of `size`.
    fn raw(p: (u32, u32, &str, u32, u32, u64), size: u32, starts: &[u32]) -> RawMigProfile {
        let (index, id, name, slices, sms, mem) = p;
        RawMigProfile {
            info: RawProfile {
                index,
                id,
                name: name.into(),
                slice_count: slices,
                instance_count: u32::try_from(starts.len()).unwrap_or(0),
                multiprocessor_count: sms,
                memory_size_mb: mem,
            },
            placements: starts.iter().map(|&s| (s, size)).collect(),
            instances: vec![],
        }
    }

    #[test]
    fn assembles_slices_cores_names_and_the_allowlist() {
        let mut three = raw((2, 9, "MIG 3g.40gb", 3, 60, 40448), 4, &[4, 0]);
        three.instances.push(RawInstance {
            id: 1,
            profile_id: 9,
            start: 4,
            size: 4,
        });
        let f = assemble(
            vec![
                raw((4, 0, "MIG 7g.80gb", 7, 132, 81152), 8, &[0]),
                three,
                raw(
                    (0, 19, "MIG 1g.10gb", 1, 16, 9984),
                    1,
                    &[0, 1, 2, 3, 4, 5, 6],
                ),
            ],
            &["1g.10gb".into(), "3g.40gb".into()],
        )
        .unwrap();
        assert_eq!((f.compute_slices, f.memory_slices), (7, 8));
        let names: Vec<(&str, u32, bool)> = f
            .profiles
            .iter()
            .map(|p| (p.name.as_str(), p.cores, p.allowed))
            .collect();
        assert_eq!(
            names,
            vec![
                ("1g.10gb", 13, true),
                ("3g.40gb", 46, true),
                ("7g.80gb", 100, false)
            ]
        );
        assert_eq!(f.profiles[1].placements, vec![0, 4]);
        assert_eq!(f.instances[0].profile, "3g.40gb");
        assert_eq!(f.hami_count(), 7);
        let hami = f.hami_profiles();
        assert_eq!(hami.len(), 2);
        assert_eq!(hami[1].placements[1], HamiPlacement { start: 4, size: 4 });
        // The whole layout keeps the profile outside the allowlist and the instance, free.
        let l = f.layout();
        assert_eq!((l.compute_slices, l.memory_slices), (7, 8));
        let names: Vec<(&str, u32, bool)> = l
            .profiles
            .iter()
            .map(|p| (p.name.as_str(), p.max_instances, p.not_allowed))
            .collect();
        assert_eq!(
            names,
            vec![
                ("1g.10gb", 7, false),
                ("3g.40gb", 2, false),
                ("7g.80gb", 1, true)
            ]
        );
        assert_eq!(
            l.instances,
            vec![v1::MigInstance {
                profile: "3g.40gb".into(),
                start: 4,
                size: 4,
                in_use_by: String::new()
            }]
        );
    }

    #[test]
    fn unusable_answers_are_reasons() {
        assert!(assemble(vec![], &[]).is_err());
        let dup = assemble(
            vec![
                raw((0, 19, "MIG 1g.10gb", 1, 16, 9984), 1, &[0]),
                raw((7, 20, "MIG 1g.10gb", 1, 16, 9984), 1, &[0]),
            ],
            &[],
        );
        assert!(dup.unwrap_err().contains("both named"));
        let mut mixed = raw((0, 19, "MIG 1g.10gb", 1, 16, 9984), 1, &[0]);
        mixed.placements.push((2, 2));
        assert!(
            assemble(vec![mixed], &[])
                .unwrap_err()
                .contains("different sizes")
        );
    }
}
