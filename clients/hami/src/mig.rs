//! HAMi's dynamic MIG protocol (`docs/hami-protocol.md`, "MIG"): the `migProfiles` of a MIG
//! card in `hami.io/node-nvidia-register`, and the pod annotation `hami.io/vgpu-mig-allocations`
//! in which the scheduler reserves one exact profile and placement per MIG device and the device
//! plugin records the instance it created.

use std::collections::BTreeSet;

use gpusched_api::v1;
use serde::{Deserialize, Serialize};

use crate::error::{HamiError, err};

/// Pod annotation: the MIG reservations of a pod (JSON array of [`MigAllocation`]).
pub const MIG_ALLOCATIONS: &str = "hami.io/vgpu-mig-allocations";

/// Where a MIG instance sits: memory slices `start..start + size`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct MigPlacement {
    /// First memory slice.
    #[serde(default)]
    pub start: u32,
    /// Memory slices.
    #[serde(default)]
    pub size: u32,
}

/// One profile of a MIG card as HAMi's device plugin publishes it in `migProfiles` (every field
/// written, none omitted).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigProfile {
    /// Profile name, e.g. `1g.10gb`.
    #[serde(default)]
    pub name: String,
    /// Memory of an instance, MiB (NVML `memorySizeMB`).
    #[serde(default, rename = "memoryMB")]
    pub memory_mb: i32,
    /// Percent of the card's SMs, rounded up.
    #[serde(default)]
    pub core: i32,
    /// Compute slices (NVML `sliceCount`).
    #[serde(default, rename = "sliceCount")]
    pub slice_count: u32,
    /// The placements NVML allows.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub placements: Vec<MigPlacement>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<MigPlacement>, D::Error> {
    Ok(Option::<Vec<MigPlacement>>::deserialize(d)?.unwrap_or_default())
}

/// One MIG device of a pod: the scheduler's reservation (container, device, parent GPU,
/// profile, placement) and, once the device plugin realised it, the instance's identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigAllocation {
    /// Container position in pod order (init containers first).
    pub container_index: u32,
    /// Device position within the container (several devices may share one GPU).
    pub device_index: u32,
    /// The parent GPU's UUID.
    pub gpu_uuid: String,
    /// Profile name.
    pub profile: String,
    /// The exact placement to create.
    pub placement: MigPlacement,
    /// Written by the device plugin: the MIG device UUID and its GPU and compute instance ids
    /// (all three, or none before realisation).
    pub runtime: Option<MigRuntime>,
}

/// What the device plugin records after creating the instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigRuntime {
    /// `MIG-<uuid>`.
    pub mig_uuid: String,
    /// GPU instance id.
    pub gpu_instance_id: u32,
    /// Compute instance id.
    pub compute_instance_id: u32,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct WireAllocation {
    #[serde(rename = "containerIndex", default)]
    container_index: i64,
    #[serde(rename = "deviceIndex", default)]
    device_index: i64,
    #[serde(rename = "gpuUUID", default)]
    gpu_uuid: String,
    #[serde(default)]
    profile: String,
    #[serde(default)]
    placement: MigPlacement,
    #[serde(rename = "migUUID", default, skip_serializing_if = "String::is_empty")]
    mig_uuid: String,
    #[serde(
        rename = "gpuInstanceID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    gpu_instance_id: Option<u32>,
    #[serde(
        rename = "computeInstanceID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    compute_instance_id: Option<u32>,
}

/// The `hami.io/vgpu-mig-allocations` value (as HAMi's scheduler writes it: a JSON array; the
/// runtime fields only when known). No allocation is no annotation: the caller omits it.
pub fn encode_mig_allocations(allocations: &[MigAllocation]) -> String {
    let wire: Vec<WireAllocation> = allocations
        .iter()
        .map(|a| WireAllocation {
            container_index: i64::from(a.container_index),
            device_index: i64::from(a.device_index),
            gpu_uuid: a.gpu_uuid.clone(),
            profile: a.profile.clone(),
            placement: a.placement,
            mig_uuid: a
                .runtime
                .as_ref()
                .map(|r| r.mig_uuid.clone())
                .unwrap_or_default(),
            gpu_instance_id: a.runtime.as_ref().map(|r| r.gpu_instance_id),
            compute_instance_id: a.runtime.as_ref().map(|r| r.compute_instance_id),
        })
        .collect();
    serde_json::to_string(&wire).unwrap_or_else(|_| "[]".to_owned())
}

/// Reads `hami.io/vgpu-mig-allocations` as HAMi's device plugin does (`DecodeMigAllocations`):
/// an empty value is no allocation; each entry needs a non-negative container and device
/// index, a GPU UUID, a profile and a non-zero placement size; the runtime identity is all
/// three fields or none; a (container, device) pair appears once.
pub fn decode_mig_allocations(value: &str) -> Result<Vec<MigAllocation>, HamiError> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    let wire: Vec<WireAllocation> = serde_json::from_str(value)
        .map_err(|e| err(MIG_ALLOCATIONS, format!("invalid JSON: {e}")))?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(wire.len());
    for (i, w) in wire.into_iter().enumerate() {
        let (Ok(container_index), Ok(device_index)) = (
            u32::try_from(w.container_index),
            u32::try_from(w.device_index),
        ) else {
            return Err(err(
                MIG_ALLOCATIONS,
                format!("MIG allocation {i} is incomplete"),
            ));
        };
        if w.gpu_uuid.is_empty() || w.profile.is_empty() || w.placement.size == 0 {
            return Err(err(
                MIG_ALLOCATIONS,
                format!("MIG allocation {i} is incomplete"),
            ));
        }
        let runtime = match (
            w.mig_uuid.is_empty(),
            w.gpu_instance_id,
            w.compute_instance_id,
        ) {
            (true, None, None) => None,
            (false, Some(gpu_instance_id), Some(compute_instance_id)) => Some(MigRuntime {
                mig_uuid: w.mig_uuid,
                gpu_instance_id,
                compute_instance_id,
            }),
            _ => {
                return Err(err(
                    MIG_ALLOCATIONS,
                    format!("MIG allocation {i} has partial runtime identity"),
                ));
            }
        };
        if !seen.insert((container_index, device_index)) {
            return Err(err(
                MIG_ALLOCATIONS,
                format!(
                    "duplicate MIG allocation for container {container_index} device {device_index}"
                ),
            ));
        }
        out.push(MigAllocation {
            container_index,
            device_index,
            gpu_uuid: w.gpu_uuid,
            profile: w.profile,
            placement: w.placement,
            runtime,
        });
    }
    Ok(out)
}

/// The MIG layout of a card that only HAMi's `migProfiles` describe (no gpusched layout
/// annotation from the node agent): what the engine needs, derived as
/// `docs/hami-protocol.md` ("MIG", "A layout from `migProfiles` alone") says:
///
/// - a profile's memory slices: the size of its placements (all equal; a profile without
///   placements can never be chosen and is left out);
/// - the card's memory slices: the highest placement end; its compute slices: the largest
///   `sliceCount`;
/// - a profile's `max_instances`: the most placements of it that fit side by side (scanned from
///   the lowest start), at most the card's compute slices over its own (`1g.10gb` 7, `1g.20gb`
///   4, `2g.20gb` 3, `3g.40gb` 2, `4g.40gb` and `7g.80gb` 1 on an H100: NVML's counts; a `+me`
///   profile, which NVML allows once, would read 7: HAMi does not publish such names);
/// - every profile allowed (HAMi publishes only its allowlist), no instance known.
///
/// None when no profile has a placement (the card then takes no MIG work). Refused: negative
/// memory or cores, placements of different sizes in one profile.
pub fn layout_from_profiles(profiles: &[MigProfile]) -> Result<Option<v1::MigLayout>, String> {
    let mut out = Vec::with_capacity(profiles.len());
    for p in profiles {
        let Some(first) = p.placements.first() else {
            continue;
        };
        let size = first.size;
        if p.placements.iter().any(|q| q.size != size) {
            return Err(format!(
                "migProfiles {:?}: placements of different sizes",
                p.name
            ));
        }
        let mem_mib = u64::try_from(p.memory_mb).map_err(|_| {
            format!(
                "migProfiles {:?}: memoryMB {} is negative",
                p.name, p.memory_mb
            )
        })?;
        let cores = u32::try_from(p.core)
            .map_err(|_| format!("migProfiles {:?}: core {} is negative", p.name, p.core))?;
        let mut starts: Vec<u32> = p.placements.iter().map(|q| q.start).collect();
        starts.sort_unstable();
        starts.dedup();
        out.push((p, size, mem_mib, cores, starts));
    }
    if out.is_empty() {
        return Ok(None);
    }
    let compute_slices = out.iter().map(|o| o.0.slice_count).max().unwrap_or(0);
    let memory_slices = out
        .iter()
        .flat_map(|(_, size, _, _, starts)| starts.iter().map(move |s| s.saturating_add(*size)))
        .max()
        .unwrap_or(0);
    let profiles = out
        .into_iter()
        .map(|(p, size, mem_mib, cores, starts)| {
            let mut side_by_side = 0u32;
            let mut free_from = 0u32;
            for &s in &starts {
                if s >= free_from {
                    side_by_side += 1;
                    free_from = s.saturating_add(size.max(1));
                }
            }
            let by_compute = compute_slices
                .checked_div(p.slice_count)
                .unwrap_or(side_by_side);
            v1::MigProfile {
                name: p.name.clone(),
                mem_mib,
                compute_slices: p.slice_count,
                memory_slices: size,
                cores,
                max_instances: side_by_side.min(by_compute),
                placements: starts,
                not_allowed: false,
            }
        })
        .collect();
    Ok(Some(v1::MigLayout {
        compute_slices,
        memory_slices,
        profiles,
        instances: Vec::new(),
    }))
}

/// The MIG reservations of an allocation result, as HAMi's scheduler writes them: one per
/// card with a MIG assignment, `containerIndex` its container's position in the result (init
/// containers first, containers without a GPU counted), `deviceIndex` the card's position in
/// that container's cards.
pub fn mig_allocations(result: &v1::AllocationResult) -> Vec<MigAllocation> {
    let mut out = Vec::new();
    for (c, container) in result.containers.iter().enumerate() {
        for (d, card) in container.cards.iter().enumerate() {
            let Some(m) = &card.mig else { continue };
            out.push(MigAllocation {
                container_index: u32::try_from(c).unwrap_or(u32::MAX),
                device_index: u32::try_from(d).unwrap_or(u32::MAX),
                gpu_uuid: card.card_id.clone(),
                profile: m.profile.clone(),
                placement: MigPlacement {
                    start: m.start,
                    size: m.size,
                },
                runtime: None,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reservation(container: u32, device: u32, start: u32) -> MigAllocation {
        MigAllocation {
            container_index: container,
            device_index: device,
            gpu_uuid: "GPU-a".into(),
            profile: "1g.10gb".into(),
            placement: MigPlacement { start, size: 1 },
            runtime: None,
        }
    }

    #[test]
    fn allocations_are_written_as_hamis_scheduler_writes_them() {
        let text = encode_mig_allocations(&[reservation(0, 0, 6), reservation(1, 0, 5)]);
        assert_eq!(
            text,
            r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.10gb","placement":{"start":6,"size":1}},{"containerIndex":1,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.10gb","placement":{"start":5,"size":1}}]"#
        );
        assert_eq!(
            decode_mig_allocations(&text).unwrap(),
            vec![reservation(0, 0, 6), reservation(1, 0, 5)]
        );
        assert_eq!(decode_mig_allocations("").unwrap(), vec![]);
    }

    #[test]
    fn allocations_enriched_by_the_device_plugin_are_read() {
        let text = r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.20gb","placement":{"start":2,"size":2},"migUUID":"MIG-1","gpuInstanceID":4,"computeInstanceID":0}]"#;
        let a = decode_mig_allocations(text).unwrap();
        assert_eq!(
            a[0].runtime,
            Some(MigRuntime {
                mig_uuid: "MIG-1".into(),
                gpu_instance_id: 4,
                compute_instance_id: 0
            })
        );
        assert_eq!(encode_mig_allocations(&a), text);
    }

    #[test]
    fn what_the_device_plugin_refuses_is_refused() {
        for (text, why) in [
            ("{", "invalid JSON"),
            (
                r#"[{"containerIndex":-1,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g","placement":{"start":0,"size":1}}]"#,
                "incomplete",
            ),
            (
                r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"","profile":"1g","placement":{"start":0,"size":1}}]"#,
                "incomplete",
            ),
            (
                r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g","placement":{"start":0,"size":0}}]"#,
                "incomplete",
            ),
            (
                r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g","placement":{"start":0,"size":1},"migUUID":"MIG-1"}]"#,
                "partial runtime identity",
            ),
            (
                r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g","placement":{"start":0,"size":1}},{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g","placement":{"start":1,"size":1}}]"#,
                "duplicate MIG allocation for container 0 device 0",
            ),
        ] {
            let e = decode_mig_allocations(text).unwrap_err();
            assert_eq!(e.annotation, MIG_ALLOCATIONS);
            assert!(e.message.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn profiles_read_hami_json_including_null_placements() {
        let p: MigProfile = serde_json::from_str(
            r#"{"name":"2g.10gb","memoryMB":9984,"core":29,"sliceCount":2,"placements":[{"start":0,"size":2},{"start":2,"size":2}]}"#,
        )
        .unwrap();
        assert_eq!((p.memory_mb, p.core, p.slice_count), (9984, 29, 2));
        assert_eq!(p.placements[1], MigPlacement { start: 2, size: 2 });
        let q: MigProfile = serde_json::from_str(
            r#"{"name":"x","memoryMB":1,"core":1,"sliceCount":1,"placements":null}"#,
        )
        .unwrap();
        assert!(q.placements.is_empty());
    }

    fn hami(name: &str, mem: i32, core: i32, slices: u32, size: u32, starts: &[u32]) -> MigProfile {
        MigProfile {
            name: name.into(),
            memory_mb: mem,
            core,
            slice_count: slices,
            placements: starts
                .iter()
                .map(|&start| MigPlacement { start, size })
                .collect(),
        }
    }

    #[test]
    fn a_layout_is_derived_from_hamis_profiles_with_nvmls_counts() {
        // HAMi's default H100 allowlist plus 1g.20gb and 4g.40gb, as its device plugin
        // publishes them (in any order).
        let profiles = vec![
            hami("7g.80gb", 81152, 100, 7, 8, &[0]),
            hami("1g.10gb", 9984, 13, 1, 1, &[6, 5, 4, 3, 2, 1, 0]),
            hami("1g.20gb", 20096, 20, 1, 2, &[0, 2, 4, 6]),
            hami("2g.20gb", 20096, 25, 2, 2, &[0, 2, 4]),
            hami("3g.40gb", 40448, 46, 3, 4, &[0, 4]),
            hami("4g.40gb", 40448, 49, 4, 4, &[0]),
            hami("none", 1, 1, 1, 1, &[]),
        ];
        let l = layout_from_profiles(&profiles).unwrap().unwrap();
        assert_eq!((l.compute_slices, l.memory_slices), (7, 8));
        let got: Vec<(&str, u32, u32, u32, u32)> = l
            .profiles
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.compute_slices,
                    p.memory_slices,
                    p.max_instances,
                    p.cores,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("7g.80gb", 7, 8, 1, 100),
                ("1g.10gb", 1, 1, 7, 13),
                ("1g.20gb", 1, 2, 4, 20),
                ("2g.20gb", 2, 2, 3, 25),
                ("3g.40gb", 3, 4, 2, 46),
                ("4g.40gb", 4, 4, 1, 49),
            ],
            "the profile without placements is left out"
        );
        assert_eq!(l.profiles[1].placements, vec![0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(l.profiles[1].mem_mib, 9984);
        assert!(l.instances.is_empty());
        assert!(l.profiles.iter().all(|p| !p.not_allowed));
        assert_eq!(layout_from_profiles(&[]).unwrap(), None);
        assert_eq!(
            layout_from_profiles(&[hami("x", 1, 1, 1, 1, &[])]).unwrap(),
            None
        );
    }

    #[test]
    fn profiles_that_cannot_be_read_are_refused() {
        let mut mixed = hami("1g.10gb", 9984, 13, 1, 1, &[0, 1]);
        mixed.placements[1].size = 2;
        for (p, why) in [
            (mixed, "different sizes"),
            (
                hami("1g.10gb", -1, 13, 1, 1, &[0]),
                "memoryMB -1 is negative",
            ),
            (hami("1g.10gb", 9984, -5, 1, 1, &[0]), "core -5 is negative"),
        ] {
            let e = layout_from_profiles(&[p]).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn reservations_follow_the_results_containers_and_cards() {
        let mig = |profile: &str, start: u32, size: u32| v1::MigAssignment {
            profile: profile.into(),
            start,
            size,
            reused: false,
            owner: "ns/p".into(),
        };
        let card = |id: &str, m: Option<v1::MigAssignment>| v1::CardAssignment {
            card_id: id.into(),
            mig: m,
            ..Default::default()
        };
        let result = v1::AllocationResult {
            placed: true,
            containers: vec![
                v1::ContainerAssignment {
                    container_name: "init".into(),
                    init: true,
                    cards: vec![card("GPU-a", Some(mig("1g.10gb", 6, 1)))],
                },
                v1::ContainerAssignment {
                    container_name: "no-gpu".into(),
                    ..Default::default()
                },
                v1::ContainerAssignment {
                    container_name: "main".into(),
                    init: false,
                    cards: vec![
                        card("GPU-c", None),
                        card("GPU-b", Some(mig("3g.40gb", 4, 4))),
                    ],
                },
            ],
            ..Default::default()
        };
        let got = mig_allocations(&result);
        assert_eq!(
            encode_mig_allocations(&got),
            r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.10gb","placement":{"start":6,"size":1}},{"containerIndex":2,"deviceIndex":1,"gpuUUID":"GPU-b","profile":"3g.40gb","placement":{"start":4,"size":4}}]"#
        );
        assert!(mig_allocations(&v1::AllocationResult::default()).is_empty());
    }
}
