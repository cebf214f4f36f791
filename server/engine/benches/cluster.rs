//! The synthetic cluster and workloads of the benchmarks (shared with
//! `examples/profile_allocate.rs` through `#[path]`).

use std::sync::Arc;

use gpusched_engine::{
    Card, CardUsage, Defaults, GpuToken, KubeNames, MixShape, NodePolicy, NodeSpec, Snapshot,
    TypedContainer, TypedSpec, Workload, WorkloadMeta, WorkloadMix, WorkloadSpec,
};

/// xorshift64*: a tiny seeded generator so the cluster is the same on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn cluster(nodes: usize, seed: u64) -> Snapshot {
    let mut rng = Rng(seed);
    let specs = (0..nodes)
        .map(|n| {
            let cards = (0..8u32)
                .map(|i| {
                    let mut c =
                        Card::new(format!("GPU-{n:05}-{i}"), i, "NVIDIA-A100-SXM4-80GB", 81920);
                    c.numa = i / 4;
                    let used = rng.below(6) as u32;
                    if used > 0 {
                        c.usage = CardUsage {
                            used,
                            used_mem_mib: rng.below(60000),
                            used_cores: rng.below(80) as u32,
                        };
                    }
                    c
                })
                .collect();
            NodeSpec::new(format!("node-{n:05}"), cards)
        })
        .collect();
    Snapshot::new(specs).expect("valid cluster")
}

pub fn workload(gpus: u32) -> Workload {
    workload_under(gpus, None, Vec::new())
}

/// A 35-shape mix like the one the artifact derives from the openb trace (the shares of one
/// card of its GPU pods, whole cards for 2, 4 and 8 cards, each with a few host CPU sizes; the
/// benchmark's nodes carry no host resources, so only the GPU part decides).
pub fn mix35() -> Arc<WorkloadMix> {
    let gpu: [(u32, u32, u64); 12] = [
        (1, 100, 3911),
        (1, 81, 1078),
        (1, 47, 750),
        (1, 32, 328),
        (1, 65, 253),
        (1, 23, 140),
        (1, 46, 128),
        (1, 59, 75),
        (1, 16, 74),
        (8, 100, 44),
        (2, 100, 16),
        (4, 100, 15),
    ];
    let shapes = (0..35)
        .map(|i| {
            let (gpus, cores, count) = gpu[i % gpu.len()];
            MixShape {
                weight: count * 1000 / (1 + i as u64 / 12),
                gpus,
                cores,
                mem_percent: cores,
                cpu_milli: 4000 * (1 + i as u64 / 12),
                ..MixShape::default()
            }
        })
        .collect();
    Arc::new(WorkloadMix::new(shapes).expect("valid mix"))
}

/// The workload of [`workload`] under node and GPU policy `fgd` with [`mix35`].
pub fn fgd_workload(gpus: u32) -> Workload {
    workload_under(gpus, Some(NodePolicy::Fgd), vec![GpuToken::Fgd]).with_mix(mix35())
}

fn workload_under(
    gpus: u32,
    node_policy: Option<NodePolicy>,
    gpu_policy: Vec<GpuToken>,
) -> Workload {
    let spec = TypedSpec {
        node_policy,
        gpu_policy,
        containers: vec![TypedContainer {
            name: "main".into(),
            gpus,
            gpumem_mib: 8192,
            gpucores: Some(10),
            ..TypedContainer::default()
        }],
        ..TypedSpec::default()
    };
    Workload::parse(
        WorkloadMeta::default(),
        &WorkloadSpec::Typed(spec),
        &Defaults::default(),
        &KubeNames::default(),
    )
    .expect("valid workload")
}
