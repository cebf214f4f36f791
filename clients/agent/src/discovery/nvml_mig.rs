//! NVML's MIG queries that nvml-wrapper 0.13 lacks or gets wrong, called through its raw
//! bindings (`nvml-wrapper-sys`, the same library handle): the named profile information
//! (`nvmlDeviceGetGpuInstanceProfileInfoV`; the safe `profile_info` has no name), the possible
//! placements (`nvmlDeviceGetGpuInstancePossiblePlacements_v2`; the safe `possible_placements`
//! never sets its vector's length and always answers empty) and the existing GPU instances
//! (`nvmlDeviceGetGpuInstances`, `nvmlGpuInstanceGetInfo`; no safe wrapper).
//!
//! Read-only: nothing here changes MIG mode or creates or destroys an instance. The only
//! module of the workspace with unsafe code; every call checks its symbol first (the raw
//! wrappers panic on a missing symbol) and sizes its buffers from NVML's own counts.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::mem;

use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlGpuInstance_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t,
    nvmlGpuInstanceProfileInfo_v2_t,
};

/// NVML's `NVML_GPU_INSTANCE_PROFILE_COUNT`: profile indices are `0..PROFILE_COUNT`.
pub const PROFILE_COUNT: u32 = nvml_wrapper_sys::bindings::NVML_GPU_INSTANCE_PROFILE_COUNT;

/// `nvmlGpuInstanceProfileInfo_v2`: `NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2)`.
fn profile_info_v2_version() -> u32 {
    let size = u32::try_from(mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>()).unwrap_or(0);
    size | (2 << 24)
}

/// One profile as NVML describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawProfile {
    /// The profile index asked for (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub index: u32,
    /// NVML's profile id (`nvidia-smi mig -lgip`'s ID column).
    pub id: u32,
    /// NVML's name, e.g. `MIG 1g.10gb`.
    pub name: String,
    /// Compute slices.
    pub slice_count: u32,
    /// Instances of it the card can hold.
    pub instance_count: u32,
    /// Streaming multiprocessors of one instance.
    pub multiprocessor_count: u32,
    /// Memory of one instance, MiB.
    pub memory_size_mb: u64,
}

/// One existing GPU instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawInstance {
    /// GPU instance id.
    pub id: u32,
    /// Its profile id.
    pub profile_id: u32,
    /// First memory slice.
    pub start: u32,
    /// Memory slices.
    pub size: u32,
}

/// The profile at index `index` (`nvmlDeviceGetGpuInstanceProfileInfoV`, version 2).
pub fn profile(nvml: &Nvml, dev: &Device<'_>, index: u32) -> Result<RawProfile, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceProfileInfoV.as_ref())?;
    // SAFETY: `sym` is the loaded symbol of the library `dev` belongs to; `info` is a zeroed
    // v2 struct with its version set, which NVML fills; the handle lives as long as `dev`.
    let info = unsafe {
        let mut info: nvmlGpuInstanceProfileInfo_v2_t = mem::zeroed();
        info.version = profile_info_v2_version();
        nvml_try(sym(dev.handle(), index, &mut info))?;
        info
    };
    // The name is NUL-terminated within its 96 bytes (zeroed beyond what NVML wrote).
    let bytes: Vec<u8> = info
        .name
        .iter()
        .map(|c| c.to_ne_bytes()[0])
        .chain(std::iter::once(0))
        .collect();
    let name = CStr::from_bytes_until_nul(&bytes)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(RawProfile {
        index,
        id: info.id,
        name,
        slice_count: info.sliceCount,
        instance_count: info.instanceCount,
        multiprocessor_count: info.multiprocessorCount,
        memory_size_mb: info.memorySizeMB,
    })
}

/// The placements NVML allows for profile id `profile_id`, as `(start, size)`.
pub fn placements(
    nvml: &Nvml,
    dev: &Device<'_>,
    profile_id: u32,
) -> Result<Vec<(u32, u32)>, NvmlError> {
    let sym = nvml_sym(
        nvml.lib()
            .nvmlDeviceGetGpuInstancePossiblePlacements_v2
            .as_ref(),
    )?;
    // SAFETY: the first call passes no buffer and only learns the count; the second passes a
    // buffer of that many placements, and the length is set to what NVML reports written,
    // never beyond the capacity.
    unsafe {
        let mut count: u32 = 0;
        nvml_try(sym(
            dev.handle(),
            profile_id,
            std::ptr::null_mut(),
            &mut count,
        ))?;
        let capacity = count as usize;
        let mut out: Vec<nvmlGpuInstancePlacement_t> = Vec::with_capacity(capacity);
        nvml_try(sym(dev.handle(), profile_id, out.as_mut_ptr(), &mut count))?;
        out.set_len((count as usize).min(capacity));
        Ok(out.iter().map(|p| (p.start, p.size)).collect())
    }
}

/// The GPU instances of profile id `profile_id` (at most `capacity`: the profile's instance
/// count), with their placements.
pub fn instances(
    nvml: &Nvml,
    dev: &Device<'_>,
    profile_id: u32,
    capacity: u32,
) -> Result<Vec<RawInstance>, NvmlError> {
    let lib = nvml.lib();
    let list = nvml_sym(lib.nvmlDeviceGetGpuInstances.as_ref())?;
    let info = nvml_sym(lib.nvmlGpuInstanceGetInfo.as_ref())?;
    let capacity = capacity.max(1) as usize;
    // SAFETY: the handle buffer holds the profile's instance count (what NVML requires); the
    // length is set to the count NVML reports, never beyond the capacity; each handle is
    // only passed back to NVML, with a zeroed info struct it fills.
    unsafe {
        let mut handles: Vec<nvmlGpuInstance_t> = vec![std::ptr::null_mut(); capacity];
        let mut count: u32 = 0;
        nvml_try(list(
            dev.handle(),
            profile_id,
            handles.as_mut_ptr(),
            &mut count,
        ))?;
        handles.truncate((count as usize).min(capacity));
        let mut out = Vec::with_capacity(handles.len());
        for gi in handles {
            let mut data: nvmlGpuInstanceInfo_t = mem::zeroed();
            nvml_try(info(gi, &mut data))?;
            out.push(RawInstance {
                id: data.id,
                profile_id: data.profileId,
                start: data.placement.start,
                size: data.placement.size,
            });
        }
        Ok(out)
    }
}
