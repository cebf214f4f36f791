//! HAMi's dynamic MIG protocol (`docs/hami-protocol.md`, "MIG"): the `migProfiles` of a MIG
//! card in `hami.io/node-nvidia-register`, and the pod annotation `hami.io/vgpu-mig-allocations`
//! in which the scheduler reserves one exact profile and placement per MIG device and the device
//! plugin records the instance it created.

use std::collections::BTreeSet;

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
}
