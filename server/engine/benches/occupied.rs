//! The occupied cluster and pending workloads of the preemption bench (shared with
//! `examples/profile_preempt.rs` through `#[path]`): N nodes x 8 cards (A100 80 GB) x 10
//! placed workloads per node (seeded): workload k on card k mod 8, 30,000 to 50,000 MiB, 0 to
//! 30 cores, priorities 0..200, one in ten protected by a budget, so every card holds at least
//! one workload and a pending workload of 60,000 MiB per card fits no node as it is.

use gpusched_engine::{
    Booking, Card, CardUsage, Defaults, KubeNames, NodeSpec, NodeWorkloads, PlacedWorkload,
    Snapshot, TypedContainer, TypedSpec, Workload, WorkloadMeta, WorkloadSpec,
};

#[path = "cluster.rs"]
#[allow(dead_code)] // the Allocate bench's cluster and workload are not used here
mod cluster;
use cluster::Rng;

const CARDS: u32 = 8;
const PLACED: usize = 10;

pub fn occupied_cluster(nodes: usize, seed: u64) -> (Snapshot, Vec<NodeWorkloads>) {
    let mut rng = Rng(seed);
    let mut specs = Vec::with_capacity(nodes);
    let mut placed = Vec::with_capacity(nodes);
    for n in 0..nodes {
        let name = format!("node-{n:05}");
        let mut cards: Vec<Card> = (0..CARDS)
            .map(|i| {
                let mut c = Card::new(format!("GPU-{n:05}-{i}"), i, "NVIDIA-A100-SXM4-80GB", 81920);
                c.numa = i / 4;
                c
            })
            .collect();
        let workloads: Vec<PlacedWorkload> = (0..PLACED)
            .map(|k| {
                let card = k % CARDS as usize;
                let booking = Booking {
                    mig_instance_start: None,
                    card_id: cards[card].id.clone(),
                    slots: 1,
                    mem_mib: 30000 + rng.below(20001),
                    cores: rng.below(31) as u32,
                };
                let u = &mut cards[card].usage;
                *u = CardUsage {
                    used: u.used + 1,
                    used_mem_mib: u.used_mem_mib + booking.mem_mib,
                    used_cores: u.used_cores + booking.cores,
                };
                PlacedWorkload {
                    id: format!("{name}-pod-{k}"),
                    priority: rng.below(200) as i32,
                    violates_budget: rng.below(10) == 0,
                    start_time_ms: rng.below(1_000_000) as i64,
                    bookings: vec![booking],
                }
            })
            .collect();
        specs.push(NodeSpec::new(name.clone(), cards));
        placed.push(NodeWorkloads {
            node: name,
            workloads,
        });
    }
    (Snapshot::new(specs).expect("valid cluster"), placed)
}

pub fn pending(containers: &[u32]) -> Workload {
    let spec = TypedSpec {
        containers: containers
            .iter()
            .enumerate()
            .map(|(i, &gpus)| TypedContainer {
                name: format!("c{i}"),
                gpus,
                gpumem_mib: 60000,
                gpucores: Some(10),
                ..TypedContainer::default()
            })
            .collect(),
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
