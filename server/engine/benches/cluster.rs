//! The synthetic cluster and workloads of the benchmarks (shared with
//! `examples/profile_allocate.rs` through `#[path]`).

use gpusched_engine::{
    Card, CardUsage, Defaults, KubeNames, NodeSpec, Snapshot, TypedContainer, TypedSpec, Workload,
    WorkloadMeta, WorkloadSpec,
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
    let spec = TypedSpec {
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
