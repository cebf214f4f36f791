//! Annotation keys and resource names the engine reads (HAMi's defaults, configurable).

/// Pod annotation: node policy override (`binpack` | `spread`).
pub const NODE_SCHEDULER_POLICY: &str = "hami.io/node-scheduler-policy";
/// Pod annotation: GPU policy override or chain.
pub const GPU_SCHEDULER_POLICY: &str = "hami.io/gpu-scheduler-policy";
/// Pod annotation: per-workload device scoring weights.
pub const DEVICE_SCORING_WEIGHTS: &str = "hami.io/device-scoring-weights";
/// Pod annotation: allowed card types (comma list of case-insensitive substrings).
pub const USE_GPU_TYPE: &str = "nvidia.com/use-gputype";
/// Pod annotation: refused card types.
pub const NOUSE_GPU_TYPE: &str = "nvidia.com/nouse-gputype";
/// Pod annotation: allowed card ids (comma list).
pub const USE_GPU_UUID: &str = "nvidia.com/use-gpuuuid";
/// Pod annotation: refused card ids.
pub const NOUSE_GPU_UUID: &str = "nvidia.com/nouse-gpuuuid";
/// Pod annotation: all cards of a container on one NUMA node.
pub const NUMA_BIND: &str = "nvidia.com/numa-bind";
/// Pod annotation: allowed card modes (the card's mode must be contained in the value).
pub const VGPU_MODE: &str = "nvidia.com/vgpu-mode";
/// Node annotation: comma list of card ids that take no new work.
pub const DEVICE_CORDON: &str = "hami.io/device-cordon";

/// Kubernetes resource names of the four GPU quantities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceNames {
    /// Cards wanted (`nvidia.com/gpu`).
    pub count: String,
    /// Memory per card in MiB (`nvidia.com/gpumem`).
    pub memory: String,
    /// Memory per card in percent (`nvidia.com/gpumem-percentage`).
    pub memory_percentage: String,
    /// Cores per card in percent (`nvidia.com/gpucores`).
    pub cores: String,
}

impl Default for ResourceNames {
    fn default() -> Self {
        Self {
            count: "nvidia.com/gpu".to_owned(),
            memory: "nvidia.com/gpumem".to_owned(),
            memory_percentage: "nvidia.com/gpumem-percentage".to_owned(),
            cores: "nvidia.com/gpucores".to_owned(),
        }
    }
}

/// Annotation keys (HAMi's by default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnotationNames {
    /// Node policy override.
    pub node_scheduler_policy: String,
    /// GPU policy override or chain.
    pub gpu_scheduler_policy: String,
    /// Device scoring weights.
    pub device_scoring_weights: String,
    /// Allowed card types.
    pub use_gpu_type: String,
    /// Refused card types.
    pub nouse_gpu_type: String,
    /// Allowed card ids.
    pub use_gpu_uuid: String,
    /// Refused card ids.
    pub nouse_gpu_uuid: String,
    /// numa-bind.
    pub numa_bind: String,
    /// Allowed card modes.
    pub vgpu_mode: String,
    /// Node annotation: cordoned card ids.
    pub device_cordon: String,
}

impl Default for AnnotationNames {
    fn default() -> Self {
        AnnotationNames {
            node_scheduler_policy: NODE_SCHEDULER_POLICY.to_owned(),
            gpu_scheduler_policy: GPU_SCHEDULER_POLICY.to_owned(),
            device_scoring_weights: DEVICE_SCORING_WEIGHTS.to_owned(),
            use_gpu_type: USE_GPU_TYPE.to_owned(),
            nouse_gpu_type: NOUSE_GPU_TYPE.to_owned(),
            use_gpu_uuid: USE_GPU_UUID.to_owned(),
            nouse_gpu_uuid: NOUSE_GPU_UUID.to_owned(),
            numa_bind: NUMA_BIND.to_owned(),
            vgpu_mode: VGPU_MODE.to_owned(),
            device_cordon: DEVICE_CORDON.to_owned(),
        }
    }
}

/// Every Kubernetes name the engine reads: resource names and annotation keys.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct KubeNames {
    /// Resource names.
    pub resources: ResourceNames,
    /// Annotation keys.
    pub annotations: AnnotationNames,
}

/// Splits a comma list, trimming entries and dropping blank ones.
pub fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}
